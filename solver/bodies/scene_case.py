"""The ``scene`` body case: bodies listed in the config, read from a file or generated.

Host-side NumPy and validation only; nothing here is traced. The scene comes from exactly one of
    case.file       a YAML or HDF5 scene (bodies.scene.load_scene), relative paths resolved by the
                    config layer against the directory the app was started in;
    case.generate   a packing: random_spheres (solver.bodies.packings.random_spheres_in_box) or
                    clump_lattice (solver.bodies.packings.clump_lattice);
    case.bodies     the mapping form of solver.bodies.scene, inline;
plus ``case.extra_bodies`` (walls, a floor) for the first two. Initial overlaps beyond
``case.overlap_tolerance`` and non-positive masses, radii or inertias are one-line ConfigErrors
naming the body (solver.bodies.scene, solver.bodies.packings).

The cell grid is derived from the scene: cells of 2 max(r) + skin, covering the spheres' extent
plus a margin (the distance a body can travel in ``duration``, bounded); the cell capacity and the
partners per body are geometric bounds for non-overlapping spheres of the smallest radius
(see ``grid_for_scene``). Bodies that leave the grid are not lost (the neighbour search clamps them
into edge cells) and are reported by the run loop (``bodies_outside``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.neighbor_search import CellGrid
from solver.bodies.config import SceneCaseConfig
from solver.bodies.packings import check_overlaps, clump_lattice, random_spheres_in_box
from solver.bodies.scene import Scene, load_scene, scene_from_dict
from solver.bodies.step import BodySetup, stable_time_step
from solver.errors import ConfigError

MAX_CELLS = 1 << 22  # a larger grid uses larger cells instead of more
MARGIN_EXTENT_FACTOR = 2.0  # automatic margin at most this many scene extents
# Verlet skin, of the smallest sphere radius: the pair table is rebuilt once a sphere has moved
# half of it (a settling packing rebuilds every few hundred steps instead of every step)
VERLET_SKIN = 0.1
GENERATORS = ("random_spheres", "clump_lattice")


def build_scene_case(case: SceneCaseConfig):
    """The BodyCase (solver.bodies.cases) of a scene config."""
    from solver.bodies.cases import BodyCase, contact_dt, initial_bodies, setup_from_scene

    scene = scene_of(case)
    check_overlaps(scene, tolerance=case.overlap_tolerance, key_prefix="case")
    arrays, _ = scene.arrays()
    if arrays.position.shape[0] == 0:
        raise ConfigError("case.bodies", "only planes", "at least one sphere or clump")
    radius = arrays.member_radius
    bodies = initial_bodies(arrays)
    gravity = tuple(float(g) for g in case.gravity)
    g = float(np.linalg.norm(gravity))
    # the fastest a body can move in the run if it only falls: bounds the skin and the margin
    speed = float(np.max(np.linalg.norm(arrays.velocity, axis=1))) + g * case.duration
    # clump members also move by the rotation, |omega| |offset|; spin from impacts ~ speed / r
    arm = float(np.max(np.linalg.norm(arrays.member_offset, axis=1)))
    spin = float(np.max(np.linalg.norm(arrays.angular_velocity, axis=1))) + speed / radius.min()
    member_speed = speed + spin * arm
    reach = arm + radius  # of each member sphere from its body's centre
    crowding = int(np.bincount(arrays.member_body).max())
    centres = arrays.position[arrays.member_body]
    lower = np.min(centres - reach[:, None], axis=0)
    upper = np.max(centres + reach[:, None], axis=0)
    extent = float(np.max(upper - lower))
    if case.margin is None:
        travel = speed * case.duration
        margin = max(4.0 * radius.max(), min(travel, MARGIN_EXTENT_FACTOR * extent))
    else:
        margin = case.margin

    def setup_for(dt: float) -> BodySetup:
        # at least what two spheres close in one step, and a Verlet skin beyond that
        skin = max(2.0 * member_speed * dt, VERLET_SKIN * float(radius.min()))
        grid = grid_for_scene(lower - margin, upper + margin, radius, skin, crowding)
        return setup_from_scene(scene, grid, dt, skin, gravity, case.contact_model, case.stiffness)

    inverse = np.asarray(bodies.inverse_inertia)
    with np.errstate(divide="ignore"):
        moments = np.where(inverse > 0, 1.0 / inverse, np.inf)  # inf: does not turn
    stable = stable_time_step(setup_for(1e-300), arrays.mass, moments)
    dt = contact_dt(case.dt, stable, case.contact_model)
    if not math.isfinite(dt):
        raise ConfigError("case.dt", None, "a number when no body can touch anything (no mass)")
    setup = setup_for(dt)
    source = case.file or (case.generate or {}).get("kind") or "config"

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        kinetic = np.asarray(series["kinetic"])
        contacts = np.asarray(series["contacts"])
        finite = np.isfinite(positions).all(axis=(1, 2))
        last = positions[-1]
        return {
            "kinetic_energy_final_J": float(kinetic[-1]),
            "kinetic_energy_max_J": float(kinetic.max()),
            "contacts_final": int(contacts[-1]),
            "contacts_max": int(contacts.max()),
            "centre_of_mass_height_final_m": float(np.mean(last[:, 2])),
            "lowest_centre_final_m": float(np.min(last[:, 2])),
            "positions_finite": bool(finite.all()),
        }

    steps = max(1, round(case.duration / dt))
    return BodyCase(
        name=case.name,
        scene=scene,
        setup=setup,
        bodies=bodies,
        mass=arrays.mass,
        default_steps=steps,
        output_every=case.output_every,
        stable_dt=stable,
        diagnose=diagnose,
        series_every_step=False,  # final and largest values only
        info={
            "source": source,
            "bodies": int(arrays.position.shape[0]),
            "spheres": int(radius.size),
            "grid_shape": list(setup.grid.shape),
            "grid_cell_size_m": setup.grid.cell_size,
            "grid_capacity": setup.grid.capacity,
            "grid_max_neighbors": setup.grid.max_neighbors,
        },
    )


def scene_of(case: SceneCaseConfig, prefix: str = "case") -> Scene:
    """The scene of the config: from the file, the generator or the inline bodies. ``case`` is
    any section with the scene keys (file, generate, materials, bodies, extra_bodies), whose
    errors name ``<prefix>.<key>``."""
    if case.file is None and case.generate is None:
        return scene_from_dict(
            {"materials": case.materials, "bodies": list(case.bodies)}, key_prefix=prefix
        )
    if case.file is not None:
        base = load_scene(case.file)
    else:
        base = _generated(case.generate, _materials(case, prefix), prefix)
    if not case.extra_bodies:
        return base
    # the file's materials win on equal names; the config's are added for the extra bodies
    materials = {name: material_dict(m) for name, m in base.materials.items()}
    for name, values in case.materials.items():
        materials.setdefault(str(name), values)
    extra = scene_from_dict(
        {"materials": materials, "bodies": list(case.extra_bodies)}, key_prefix=f"{prefix}.extra"
    )
    return Scene(extra.materials, list(base.bodies) + list(extra.bodies))


def grid_for_scene(
    lower: np.ndarray, upper: np.ndarray, radius: np.ndarray, skin: float, crowding: int = 1
) -> CellGrid:
    """The cell grid over [lower, upper] (m) for spheres of radii ``radius`` (m,) m.

    Cells of h = 2 max(r) + skin (larger if the grid would exceed MAX_CELLS). The buffers are
    volume bounds for non-overlapping spheres (balls of radius d/2 about centres >= d apart are
    disjoint, so their count is at most the volume they can lie in over one ball's volume):
    capacity, the centres in a cube of edge h with d = 2 min(r), whose balls lie in the cube of
    edge h + d: (h + d)^3 / (pi d^3 / 6); partners of a body, spheres of radius r_min centred
    within r_max + r_min + skin, which lie in the shell between r_max and r_max + 2 r_min + skin:
    ((r_max + 2 r_min + skin)^3 - r_max^3) / r_min^3. The members of one clump may overlap each
    other: both bounds are multiplied by ``crowding``, the most spheres one body owns. Both are
    capped by the sphere count; anything beyond them is reported as an overflow.
    """
    n = int(radius.size)
    r_min, r_max = float(radius.min()), float(radius.max())
    size = 2.0 * r_max + skin
    volume = float(np.prod(np.maximum(upper - lower, size)))
    size = max(size, (volume / MAX_CELLS) ** (1.0 / 3.0))
    d = 2.0 * r_min
    per_cell = math.floor(((size + d) / d) ** 3 / (math.pi / 6.0))
    capacity = min(n, crowding * per_cell)
    shell = ((r_max + 2.0 * r_min + skin) / r_min) ** 3 - (r_max / r_min) ** 3  # in r_min^3
    neighbours = min(max(n - 1, 1), crowding * math.floor(shell + 1e-9))
    return CellGrid.covering(lower, upper, size, max(capacity, 1), neighbours)


def bodies_outside(grid: CellGrid, positions: np.ndarray) -> np.ndarray:
    """Indices of the bodies whose centres (n, 3) m lie outside the grid's box (or are NaN)."""
    lower = np.asarray(grid.lower)
    upper = lower + grid.cell_size * np.asarray(grid.shape)
    inside = np.all((positions >= lower) & (positions <= upper), axis=-1)
    return np.flatnonzero(~inside)


def _materials(case: SceneCaseConfig, prefix: str = "case") -> dict:
    if not case.materials:
        return {}
    return scene_from_dict({"materials": case.materials, "bodies": []}, key_prefix=prefix).materials


def material_dict(m) -> dict:
    """A material (scene Material or MaterialConfig) in the scene's mapping form."""
    return {
        "young": m.young,
        "poisson": m.poisson,
        "density": m.density,
        "restitution": m.restitution,
        "friction": m.friction,
        "rolling_friction": m.rolling_friction,
    }


class _Keys:
    """Typed reads of a generate section; every error names ``<prefix>.<key>``."""

    def __init__(self, data: dict, allowed: tuple[str, ...], prefix: str = "case.generate") -> None:
        self.data, self.prefix = data, prefix
        extra = sorted(str(k) for k in data if k not in allowed)
        if extra:
            raise ConfigError(self.key(extra[0]), data[extra[0]], "keys " + ", ".join(allowed))

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self.data and default is None:
            raise ConfigError(self.key(name), None, "a value (the key is missing)")
        return self.data.get(name, default)

    def integer(self, name: str, low: int, default: int | None = None) -> int:
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(self.key(name), value, f"an integer >= {low}")
        return value

    def numbers(self, name: str, length: int, default: Any = None) -> list[float]:
        value = self.get(name, default)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and length == 1:
            value = [value]
        ok = isinstance(value, (list, tuple)) and len(value) == length
        ok = ok and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in value
        )
        if not ok:
            raise ConfigError(self.key(name), value, f"{length} finite number(s)")
        return [float(v) for v in value]


def _generated(data: dict, materials: dict, prefix: str = "case") -> Scene:
    section = f"{prefix}.generate"
    kind = data.get("kind")
    if kind not in GENERATORS:
        raise ConfigError(f"{section}.kind", kind, "one of " + " | ".join(GENERATORS))
    name = data.get("material")
    if name not in materials:
        raise ConfigError(
            f"{section}.material", name, f"a name of {prefix}.materials: " + ", ".join(materials)
        )
    material = materials[name]
    if kind == "random_spheres":
        k = _Keys(
            data,
            ("kind", "material", "n", "radius", "box_lower", "box_upper", "seed", "max_attempts"),
            section,
        )
        raw = k.get("radius")
        radius = (
            k.numbers("radius", 2) if isinstance(raw, (list, tuple)) else k.numbers("radius", 1)[0]
        )
        if (min(radius) if isinstance(radius, list) else radius) <= 0:
            raise ConfigError(k.key("radius"), raw, "> 0 (m), one value or [min, max]")
        return random_spheres_in_box(
            k.integer("n", 1),
            tuple(radius) if isinstance(radius, list) else radius,
            k.numbers("box_lower", 3),
            k.numbers("box_upper", 3),
            material,
            seed=k.integer("seed", 0, default=0),
            max_attempts=k.integer("max_attempts", 1, default=1000),
            key_prefix=section,
        )
    k = _Keys(
        data,
        (
            "kind",
            "material",
            "counts",
            "spacing",
            "spheres",
            "orientation_jitter",
            "seed",
            "origin",
        ),
        section,
    )
    counts = k.get("counts")
    if not (
        isinstance(counts, (list, tuple))
        and len(counts) == 3
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts)
    ):
        raise ConfigError(k.key("counts"), counts, "3 integers >= 1")
    raw = k.get("spacing")
    spacing = (
        k.numbers("spacing", 3) if isinstance(raw, (list, tuple)) else k.numbers("spacing", 1)[0]
    )
    spheres = k.get("spheres")
    if not isinstance(spheres, (list, tuple)) or not spheres:
        raise ConfigError(k.key("spheres"), spheres, "a non-empty list of {radius, offset}")
    members = []
    for i, item in enumerate(spheres):
        r = item.get("radius") if isinstance(item, dict) else None
        offset = item.get("offset") if isinstance(item, dict) else None
        if not (isinstance(r, (int, float)) and not isinstance(r, bool) and r > 0):
            raise ConfigError(f"{k.key('spheres')}[{i}].radius", r, "a number > 0 (m)")
        if not (isinstance(offset, (list, tuple)) and len(offset) == 3):
            raise ConfigError(f"{k.key('spheres')}[{i}].offset", offset, "3 numbers (m)")
        members.append((float(r), [float(v) for v in offset]))
    jitter = k.numbers("orientation_jitter", 1, default=0.0)[0]
    if jitter < 0:
        raise ConfigError(k.key("orientation_jitter"), jitter, ">= 0 (rad)")
    return clump_lattice(
        counts,
        spacing,
        members,
        material,
        orientation_jitter=jitter,
        seed=k.integer("seed", 0, default=0),
        origin=k.numbers("origin", 3, default=[0.0, 0.0, 0.0]),
        key_prefix=section,
    )
