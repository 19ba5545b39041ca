"""A closed box of viscous fluid with spheres in it: the set-up the coupled cases settling_sphere,
dkt and sediment share (and dkt_2d: a 2D channel with disks, y up).

The box [0, box] (m, z up) is the fluid's interior, with one solid layer on every face (half-way
bounce-back walls at 0 and box) and the same six faces as planes for the bodies' contacts. Gravity
acts along -z on the bodies, and the buoyancy -rho_f V g with it (the fluid carries no hydrostatic
pressure). The scene's spheres come in SI units; the lattice spacing is ``length / resolution``
and the time step maps ``velocity_scale`` to ``fluid.u_lattice`` (solver.fluid.cases.base).

On a 2D lattice (D2Q9) the box is (width, height), gravity acts along -y, and each sphere of the
scene is a disk in the plane z = 0: a cylinder of length ``DISK_DEPTH`` (1 m: masses, forces and
volumes per metre of depth) with the cylinder's mass rho_s pi r^2 L, moment I = m r^2 / 2 about
z and no rotation about x or y, and the buoyancy of its volume pi r^2 L (``planar_bodies``).

Host-side NumPy and validation only: every bad scene is a one-line ConfigError before anything is
traced (a plane in the scene, a sphere or clump member outside the box or overlapping another
body, a grid that does not fit in memory).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from kernels.lattices import lattice_by_name
from kernels.rigid_body import Bodies
from solver.bodies.cases import initial_bodies, setup_from_scene
from solver.bodies.packings import check_overlaps, member_centres
from solver.bodies.scene import Scene, scene_from_dict
from solver.bodies.scene_case import grid_for_scene, material_dict
from solver.bodies.step import RAYLEIGH_FRACTION, BodySetup, stable_time_step
from solver.coupling.config import CouplingConfig
from solver.coupling.step import PsmCoupling
from solver.errors import ConfigError
from solver.fluid.cases.base import Case, fluid_setup, lattice_scales
from solver.fluid.config import MAX_MACH
from solver.fluid.units import mach

if TYPE_CHECKING:
    from solver.config import RunConfig

# Verlet skin beyond the lubrication cutoff, of the smallest radius: the pair table is rebuilt
# once a sphere has moved half of it (0.15 cells at 3 cells per radius: every few fluid steps,
# against every body sub-step before)
SKIN_FRACTION = 0.1
# m: a disk of a 2D run stands for a cylinder this long (per unit depth: N/m and kg/m read as N
# and kg)
DISK_DEPTH = 1.0


@dataclass(frozen=True)
class FluidBox:
    """The fluid of a box case.

    Attributes:
        box: (3,) m, inner size; (2,) on a 2D lattice (width, height: y up).
        fluid_density: kg/m^3; viscosity: dynamic, Pa s.
        length: m, resolved by ``resolution`` cells (dx = length / resolution).
        velocity_scale: m/s, mapped to fluid.u_lattice.
        gravity: m/s^2 along -z.
        duration: s.
    """

    box: tuple[float, ...]
    fluid_density: float
    viscosity: float
    length: float
    resolution: int
    velocity_scale: float
    gravity: float
    duration: float

    @property
    def kinematic_viscosity(self) -> float:
        return self.viscosity / self.fluid_density


def box_grid_shape(box: tuple[float, ...], dx: float) -> tuple[int, ...]:
    """(nx + 2, ny + 2[, nz + 2]): the box in cells of dx, and one solid layer on every face;
    ConfigError naming case.box when a side is not a whole number (>= 4) of cells."""
    counts = []
    for axis, size in enumerate(box):
        n = round(size / dx)
        if n < 4 or abs(n * dx - size) > 1e-6 * size:
            raise ConfigError(
                "case.box", list(box),
                f"sides that are whole numbers (>= 4) of cells of {dx:.4g} m",
                hint=f"axis {axis}: {size / dx:.3f} cells (the case's length / case.resolution)",
            )  # fmt: skip
        counts.append(n + 2)
    return tuple(counts)


def wall_faces(case: Case) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """(planes, lower, upper): the case's wall faces as scene planes (normals inwards, no
    material) and the fluid's extent (m): between the walls, or the grid's edge on a face
    without a wall."""
    solid = case.setup.solid
    dx = case.units.dx
    shape = case.setup.shape
    origin = np.asarray(case.origin, dtype=float)
    lower = origin.copy()
    upper = origin + np.asarray(shape) * dx
    planes = []
    for axis, n in enumerate(shape):
        for side, layer in (("low", 0), ("high", n - 1)):
            if solid is None or not np.take(solid, layer, axis=axis).all():
                continue
            normal = [0.0, 0.0, 0.0]
            point = [0.0, 0.0, 0.0]
            if side == "low":
                normal[axis], point[axis] = 1.0, origin[axis] + dx
                lower[axis] = origin[axis] + dx
            else:
                normal[axis], point[axis] = -1.0, origin[axis] + (n - 1) * dx
                upper[axis] = origin[axis] + (n - 1) * dx
            planes.append({"shape": "plane", "point": point, "normal": normal})
    return planes, lower, upper


def check_solid_bodies(scene: Scene, prefix: str = "case") -> None:
    """ConfigError naming the first plane of the scene (in the fluid its walls are the planes)
    or an empty scene; spheres and clumps pass."""
    for i, body in enumerate(scene.bodies):
        if body.shape == "plane":
            raise ConfigError(
                f"{prefix}.bodies[{i}].shape", body.shape,
                "sphere or clump (in the fluid its walls are the planes)",
            )  # fmt: skip
    if not scene.bodies:
        raise ConfigError(f"{prefix}.bodies", [], "at least one sphere or clump")


# Points per axis of the midpoint rule over a clump's cross-section (the chord along x is
# exact): the volume of two overlapping spheres within 1e-5 of the lens formula (test_coupling)
VOLUME_POINTS = 256


def displaced_volumes(scene: Scene) -> np.ndarray:
    """(n,) m^3, the volume of each sphere or clump (its members' union), in the order of
    ``scene.arrays()``: exact for spheres and for clumps whose members do not overlap, else
    the union's chord along x, exact, integrated over y and z by the midpoint rule on a
    VOLUME_POINTS^2 grid."""
    arrays, _ = scene.arrays()
    out = np.zeros(len(arrays.mass))
    for b in range(len(out)):
        mine = arrays.member_body == b
        out[b] = _union_volume(arrays.member_radius[mine], arrays.member_offset[mine])
    return out


def _union_volume(radius: np.ndarray, offset: np.ndarray) -> float:
    exact = float(np.sum(4.0 / 3.0 * np.pi * radius**3))
    d = np.linalg.norm(offset[:, None, :] - offset[None, :, :], axis=-1)
    apart = d >= radius[:, None] + radius[None, :]
    np.fill_diagonal(apart, True)
    if apart.all():
        return exact
    low = (offset - radius[:, None]).min(axis=0)
    high = (offset + radius[:, None]).max(axis=0)
    step = (high - low) / VOLUME_POINTS
    y, z = (low[a] + (np.arange(VOLUME_POINTS) + 0.5) * step[a] for a in (1, 2))
    y, z = (v.reshape(-1, 1) for v in np.meshgrid(y, z, indexing="ij"))
    # each member's chord [x0 - h, x0 + h] on the line (y, z); none: an empty one at x0
    half = np.sqrt(np.maximum(radius**2 - (y - offset[:, 1]) ** 2 - (z - offset[:, 2]) ** 2, 0))
    start, end = offset[:, 0] - half, offset[:, 0] + half
    order = np.argsort(start, axis=1)
    start, end = np.take_along_axis(start, order, 1), np.take_along_axis(end, order, 1)
    reach = np.maximum.accumulate(end, axis=1)  # the union so far ends here
    before = np.concatenate([np.full((len(y), 1), -np.inf), reach[:, :-1]], axis=1)
    length = np.sum(np.maximum(0.0, end - np.maximum(start, before)), axis=1)
    return float(length.sum() * step[1] * step[2])


def with_planes(
    scene: Scene,
    planes: list[dict],
    lower: np.ndarray,
    upper: np.ndarray,
    wall_material: str | None,
    prefix: str = "case",
) -> Scene:
    """The scene's spheres and clumps plus ``planes`` (scene mappings without a material: they
    get ``wall_material``, or the scene's first material). ConfigError for a plane in the scene
    and for a sphere or clump member not wholly inside [lower, upper] (m)."""
    check_solid_bodies(scene, prefix)
    centres, radii, owner = member_centres(scene)
    outside = np.any((centres - radii[:, None] < lower) | (centres + radii[:, None] > upper), 1)
    if outside.any():
        k = int(np.argmax(outside))
        i = int(owner[k])
        body = scene.bodies[i]
        member = k - int(np.argmax(owner == i))
        what = "a centre" if body.shape == "sphere" else f"its member {member}'s centre"
        raise ConfigError(
            f"{prefix}.bodies[{i}].position", [float(p) for p in body.position],
            f"{what} at least its radius {radii[k]:g} m inside the fluid "
            f"[{_fmt(lower)}, {_fmt(upper)}] m",
        )  # fmt: skip
    if not scene.materials:
        raise ConfigError(f"{prefix}.materials", {}, "at least one material")
    name = wall_material if wall_material is not None else next(iter(scene.materials))
    if name not in scene.materials:
        raise ConfigError(
            f"{prefix}.wall_material", name,
            f"a name of {prefix}.materials: " + ", ".join(scene.materials),
        )  # fmt: skip
    materials = {key: material_dict(m) for key, m in scene.materials.items()}
    walls = scene_from_dict(
        {"materials": materials, "bodies": [{**p, "material": name} for p in planes]},
        key_prefix=prefix,
    )
    return Scene(scene.materials, [*walls.bodies, *scene.bodies])


def _fmt(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.4g}" for x in v) + "]"


def lubrication_settings(coupling: CouplingConfig, dx: float, radius: float) -> tuple:
    """(cutoff m, min gap m) of the lubrication correction; (0, 0) when it is off."""
    if not coupling.lubrication:
        return 0.0, 0.0
    return coupling.lubrication_cutoff * dx, coupling.lubrication_min_gap * radius


def substeps_for(coupling: CouplingConfig, fluid_dt: float, stable: float) -> int:
    """Body steps per fluid step: the fewest that keep the body step <= the stable one."""
    needed = max(1, math.ceil(fluid_dt / stable))
    if coupling.substeps is None:
        return needed
    if coupling.substeps < needed:
        raise ConfigError(
            "coupling.substeps",
            coupling.substeps,
            f">= {needed} (fluid dt {fluid_dt:.4g} s over the stable body step {stable:.4g} s)",
            hint="or coupling.substeps=null, or a softer case.material.young",
        )
    return coupling.substeps


def initial_of(arrays) -> Bodies:
    """The scene's bodies; float64 where x64 is on, else the fluid's float32 (the coupled model
    casts them to the fluid's dtype), without jax's warning about the truncation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return initial_bodies(arrays)


@dataclass(frozen=True)
class BoxParts:
    """What a box case hands its CoupledCase: the fluid part, the bodies, the coupling."""

    fluid: Case
    bodies: BodySetup
    initial: Bodies
    coupling: PsmCoupling
    default_steps: int
    info: dict
    given_orientation: np.ndarray  # (n, 4) the scene's orientations (the twin's pose frame)

    def case(self, cls, name: str, output_every: int | None, **info):
        """The CoupledCase subclass ``cls`` of these parts, with ``info`` added to theirs."""
        return cls(
            name=name,
            fluid=self.fluid,
            bodies=self.bodies,
            initial=self.initial,
            coupling=self.coupling,
            default_steps=self.default_steps,
            given_orientation=self.given_orientation,
            output_every=output_every,
            info={**self.info, **info},
        )


def build_box(
    config: RunConfig,
    name: str,
    fb: FluidBox,
    scene: Scene,
    wall_material: str | None = None,
) -> BoxParts:
    """The fluid box, the scene's spheres in it, and the PSM coupling that joins them."""
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    d = lattice.d
    if len(fb.box) != d:
        raise ConfigError("case.box", list(fb.box), f"{d} sides for a {d}D lattice")
    nu = fb.kinematic_viscosity
    scales = lattice_scales(
        fluid, fb.length, fb.resolution, fb.velocity_scale, nu, fb.fluid_density,
        "case.viscosity (nu = mu / fluid_density)",
    )  # fmt: skip
    units = scales.units
    dx = units.dx
    shape = box_grid_shape(fb.box, dx)
    solid = np.ones(shape, dtype=bool)
    solid[(slice(1, -1),) * d] = False
    setup = fluid_setup(fluid, lattice, shape, scales.omega, solid=solid)
    fluid_case = Case(
        name=name,
        setup=setup,
        units=units,
        density=np.ones(shape),
        velocity=np.zeros((d,) + shape),
        default_steps=units.steps_for(fb.duration),
        origin=(-dx,) * d,  # fluid node i at (i - 1/2) dx: half-way walls at 0 and box
        mach=scales.mach,
        reynolds=fb.velocity_scale * fb.length / nu,
    )
    planes, lower, upper = wall_faces(fluid_case)  # the six (2D: four) walls, at 0 and box
    gravity = (0.0, 0.0, -fb.gravity)
    if d == 2:
        lower, upper = plane_slab(scene, lower, upper)
        gravity = (0.0, -fb.gravity, 0.0)
    full = with_planes(scene, planes, lower, upper, wall_material)
    return couple(config, fluid_case, full, gravity, fb.viscosity, lower, upper)


def plane_slab(scene: Scene, lower: np.ndarray, upper: np.ndarray) -> tuple:
    """(lower, upper) (3,) m: a 2D fluid's extent (2,) with the slab |z| <= 2 r_max that the
    disks' centres (z = 0) lie in, for the body model's cell grid and the bounds checks."""
    _, radii, _ = member_centres(scene)
    half = 2.0 * float(radii.max()) if radii.size else 1.0
    return np.append(lower, -half), np.append(upper, half)


def planar_bodies(initial: Bodies, radius: np.ndarray, depth: float) -> tuple[Bodies, np.ndarray]:
    """The disks of a 2D run: spheres of ``initial`` (mass rho_s 4/3 pi r^3 from their material)
    made cylinders of length ``depth`` (m): mass rho_s pi r^2 L, moment m r^2 / 2 about z and no
    rotational response about x and y (held in the plane), angular momentum I_z omega_z.
    Returns (bodies, masses (n,) kg).

    Args:
        initial: n single-sphere bodies at rest or moving in the plane z = 0;
        radius: (n,) m.
    """
    sphere_mass = 1.0 / np.asarray(initial.inverse_mass, dtype=float)
    density = sphere_mass / (4.0 / 3.0 * np.pi * radius**3)
    mass = density * np.pi * radius**2 * depth
    moment = 0.5 * mass * radius**2
    omega_z = (
        np.asarray(initial.angular_momentum, dtype=float)[:, 2]
        * np.asarray(initial.inverse_inertia, dtype=float)[:, 2]
    )  # a sphere's isotropic inertia: omega = L / I
    zero = np.zeros_like(mass)
    bodies = initial.replace(
        inverse_mass=jnp.asarray(1.0 / mass, initial.inverse_mass.dtype),
        inverse_inertia=jnp.asarray(
            np.stack([zero, zero, 1.0 / moment], -1), initial.inverse_inertia.dtype
        ),
        angular_momentum=jnp.asarray(
            np.stack([zero, zero, moment * omega_z], -1), initial.angular_momentum.dtype
        ),
    )
    return bodies, mass


def check_body_speeds(scene: Scene, dx: float, dt: float, prefix: str = "case") -> None:
    """ConfigError for the first body whose given motion is faster than the lattice carries:
    its speed plus its spin times its reach (the fastest point of its surface) above lattice
    Mach MAX_MACH at this grid and time step (the coupled step would diverge or be wrong by
    the compressibility error)."""
    limit = MAX_MACH / mach(1.0) * dx / dt  # m/s
    # the fluid's walls, added as planes, are not in the user's list of bodies
    bodies = [body for body in scene.bodies if body.shape != "plane"]
    for i, body in enumerate(bodies):
        reach = max(float(np.linalg.norm(offset)) + r for r, offset in body.members())
        speed = float(np.linalg.norm(body.velocity))
        fastest = speed + float(np.linalg.norm(body.angular_velocity)) * reach
        if mach(fastest * dt / dx) > MAX_MACH:
            key = "velocity" if speed > 0.5 * fastest else "angular_velocity"
            raise ConfigError(
                f"{prefix}.bodies[{i}].{key}", [float(v) for v in getattr(body, key)],
                f"a surface speed <= {limit:.4g} m/s (lattice Mach {MAX_MACH} at dx = {dx:.3g} m,"
                f" dt = {dt:.3g} s; this body's is {fastest:.4g} m/s)",
                hint="lower fluid.u_lattice for a shorter time step",
            )  # fmt: skip


def couple(
    config: RunConfig,
    fluid_case: Case,
    scene: Scene,
    gravity: tuple[float, float, float],
    viscosity: float,
    lower: np.ndarray,
    upper: np.ndarray,
    prefix: str = "case",
) -> BoxParts:
    """The bodies of ``scene`` (spheres and the planes of the fluid's walls, SI) coupled to
    ``fluid_case`` by PSM: the body set-up on a cell grid over [lower, upper] (m), the body
    step from the contact's and the lubrication's stable steps, the coupling's scales.

    Args:
        gravity: (3,) m/s^2 on the bodies (with the buoyancy of the fluid they displace).
        viscosity: the fluid's dynamic viscosity, Pa s (the lubrication correction).
    """
    units = fluid_case.units
    dx = units.dx
    dimension = fluid_case.setup.lattice.d
    check_overlaps(scene, key_prefix=prefix)
    check_body_speeds(scene, dx, units.dt, prefix)
    arrays, _ = scene.arrays()
    if dimension == 2 and len(arrays.member_radius) != len(arrays.mass):
        raise ConfigError(f"{prefix}.bodies", "clump", "spheres (disks) on a 2D lattice")
    radius = arrays.member_radius
    r_min = float(radius.min())
    cutoff, min_gap = lubrication_settings(config.coupling, dx, r_min)
    skin = cutoff + SKIN_FRACTION * r_min  # the pair table always covers the cutoff

    def setup_for(dt: float) -> BodySetup:
        grid = grid_for_scene(lower, upper, radius, skin)
        with warnings.catch_warnings():  # a clump's principal frame, float32 without x64
            warnings.simplefilter("ignore", UserWarning)
            return setup_from_scene(scene, grid, dt, skin, gravity, pair_margin=cutoff)

    mass = arrays.mass
    volume = displaced_volumes(scene)
    initial = initial_of(arrays)
    if dimension == 2:
        initial, mass = planar_bodies(initial, radius, DISK_DEPTH)
        volume = np.pi * radius**2 * DISK_DEPTH
    inverse = np.asarray(initial.inverse_inertia)
    with np.errstate(divide="ignore"):
        moments = np.where(inverse > 0, 1.0 / inverse, np.inf)  # clumps: the arms' share
    # the lubrication damping is implicit (kernels.coupling.implicit_damping): no limit here
    stable = stable_time_step(setup_for(1e-300), mass, moments)
    substeps = substeps_for(config.coupling, units.dt, stable)
    bodies = setup_for(units.dt / substeps)
    coupling = PsmCoupling(
        bodies=bodies,
        substeps=substeps,
        dx=dx,
        dt=units.dt,
        origin=tuple(fluid_case.origin),
        fluid_density=units.rho0,
        average_force=config.coupling.average_force,
        tracked=config.coupling.tracked,
        weighting=config.coupling.weighting,
        viscosity=viscosity,
        lubrication_cutoff=cutoff,
        lubrication_min_gap=min_gap,
        volume=volume,
        dimension=dimension,
        depth=DISK_DEPTH,
    )
    extent = (upper - lower)[:dimension]
    solid_fraction = float(np.sum(volume) / (DISK_DEPTH if dimension == 2 else 1.0)
                           / np.prod(extent))  # fmt: skip
    info = {
        "bodies": int(mass.size),
        "spheres": int(radius.size),
        "diameter_cells_min": 2.0 * r_min / dx,
        "nu_m2_s": viscosity / units.rho0,
        "substeps": substeps,
        "lubrication_cutoff_m": cutoff,
        "lubrication_min_gap_m": min_gap,
        "body_dt_s": units.dt / substeps,
        "stable_body_dt_s": stable,
        "rayleigh_fraction": RAYLEIGH_FRACTION,
        "solid_fraction": solid_fraction,
        "domain_lower_m": [float(v) for v in lower],
        "domain_upper_m": [float(v) for v in upper],
    }
    if dimension == 2:
        info["disk_depth_m"] = DISK_DEPTH  # masses, forces, volumes per this depth
    return BoxParts(
        fluid_case, bodies, initial, coupling, fluid_case.default_steps, info, arrays.orientation
    )
