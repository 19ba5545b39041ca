"""Validates the ``bodies`` section and the rigid-body cases' ``case`` section into dataclasses.

Plain data in (the resolved Hydra config), typed values out; a bad value raises a one-line
``ConfigError`` naming the key. Checks that need the contact model (the stable time step) or the
scene itself happen when a case is built (``solver.bodies.cases``, ``solver.bodies.scene_case``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from solver.errors import ConfigError
from solver.paths import original_path
from solver.sections import Section

CONTACT_MODELS = ("hertz", "linear")  # = solver.bodies.step.CONTACT_MODELS (not imported: JAX-free)
INCLINE_SHAPES = ("sphere", "clump")


@dataclass(frozen=True)
class MaterialConfig:
    young: float  # Pa
    poisson: float
    density: float  # kg/m^3
    restitution: float
    friction: float


@dataclass(frozen=True)
class ProjectileConfig:
    """A sphere launched under gravity, no contacts (rigid bodies, no lattice)."""

    radius: float  # m
    density: float  # kg/m^3
    speed: float  # m/s, launch speed
    angle: float  # degrees above the horizontal (x axis)
    launch_height: float  # m, z of the centre at launch
    gravity: float  # m/s^2, along -z
    duration: float  # s
    dt: float | None  # s; None: duration / DEFAULT_PROJECTILE_STEPS
    output_every: int | None  # steps between bodies.h5 outputs; None: about 50 per run
    name: str = "projectile"
    dimension: int | None = None
    kind: str = "bodies"


@dataclass(frozen=True)
class BounceConfig:
    """A sphere dropped on a plane z = 0 (rigid bodies, no lattice)."""

    radius: float  # m
    material: MaterialConfig  # sphere and plane
    drop_height: float  # m, gap between the sphere's lowest point and the plane at release
    gravity: float  # m/s^2, along -z
    contact_model: str  # "hertz" | "linear"
    stiffness: float  # N/m, linear model only
    duration: float  # s
    dt: float | None  # s; None: a safe fraction of the stable step
    output_every: int | None
    name: str = "bounce"
    dimension: int | None = None
    kind: str = "bodies"


@dataclass(frozen=True)
class TumblingConfig:
    """A torque-free asymmetric rigid body near its intermediate axis (no gravity, no contacts)."""

    radius: float  # m, radius of the sphere that stands for the body in the outputs
    mass: float  # kg
    moments: tuple[float, float, float]  # kg m^2, principal moments (distinct)
    frame_axis: tuple[float, float, float]  # principal axes = this rotation of the body frame
    frame_angle: float  # degrees
    spin: float  # rad/s about the intermediate principal axis
    perturbation: float  # relative angular velocity about the other two principal axes
    duration: float  # s
    dt: float | None  # s; None: duration / 100000
    output_every: int | None
    name: str = "tumbling"
    dimension: int | None = None
    kind: str = "bodies"


@dataclass(frozen=True)
class InclineConfig:
    """A sphere released at rest on an inclined plane with friction (rigid bodies)."""

    radius: float  # m
    material: MaterialConfig  # sphere and plane
    angle: float  # degrees, incline of the plane
    gravity: float  # m/s^2, along -z
    contact_model: str
    stiffness: float  # N/m, linear model only
    duration: float  # s
    dt: float | None
    output_every: int | None
    shape: str = "sphere"  # "sphere" | "clump" (two equal spheres side by side along y)
    clump_separation: float = 1.0  # clump: centre distance / diameter, in (0, 1] (1: touching)
    name: str = "incline"
    dimension: int | None = None
    kind: str = "bodies"


@dataclass(frozen=True)
class CradleConfig:
    """Newton's cradle: a row of equal spheres along x hit by the first one (no gravity)."""

    count: int  # spheres, >= 2
    radius: float  # m
    material: MaterialConfig
    speed: float  # m/s, of the first sphere along +x
    gap: float  # m, between the first sphere and the row (the row itself just touches)
    contact_model: str
    stiffness: float  # N/m, linear model only
    duration: float  # s
    dt: float | None
    output_every: int | None
    name: str = "cradle"
    dimension: int | None = None
    kind: str = "bodies"


@dataclass(frozen=True)
class SceneCaseConfig:
    """Rigid bodies listed in the config, read from a YAML/HDF5 file or generated (a packing).

    The scene parts stay plain data here; solver.bodies.scene_case validates them (bodies.scene,
    solver.bodies.packings) with errors naming ``case.<key>``.
    """

    file: str | None  # absolute path of a .yaml/.yml/.h5/.hdf5 scene, or None
    materials: dict  # name -> material mapping (solver.bodies.scene's mapping form)
    bodies: (
        tuple  # body mappings (solver.bodies.scene's mapping form): the scene without file/generate
    )
    generate: dict | None  # {kind: random_spheres | clump_lattice, ...} or None
    extra_bodies: tuple  # body mappings added to the file's or generated ones (walls, planes)
    gravity: tuple[float, float, float]  # m/s^2
    contact_model: str
    stiffness: float  # N/m, linear model only
    duration: float  # s
    dt: float | None  # s; None: a safe fraction of the stable step
    output_every: int | None
    margin: float | None  # m added around the scene's extent for the cell grid; None: automatic
    overlap_tolerance: float  # initial overlaps allowed, fraction of the smaller radius
    name: str = "scene"
    dimension: int | None = None
    kind: str = "bodies"


ENSEMBLE_SWEEP = {  # name -> allowed range text; gravity: a number g (along -z) or a 3-vector
    "restitution": "a number in [0, 1]",
    "friction": "a number >= 0",
    "rolling_friction": "a number >= 0",
    "young": "a number > 0 (Pa)",
    "poisson": "a number in (-1, 0.5)",
    "stiffness": "a number > 0 (N/m, linear contact model)",
    "gravity": "a number >= 0 (m/s^2 along -z) or a list of 3 numbers (m/s^2)",
}


@dataclass(frozen=True)
class EnsembleConfig:
    """E independent members of one body case run as one vmapped program (bodies.ensemble)."""

    size: int  # members E >= 1
    perturb_position: float  # m, Gaussian std per component of each dynamic body's position
    perturb_velocity: float  # m/s
    perturb_angular_velocity: float  # rad/s
    sweep: tuple[tuple[str, tuple], ...]  # (name in ENSEMBLE_SWEEP, E values), in config order
    sweep_material: str | None  # the swept values apply to this material only; None: all
    saved_members: int | None  # members whose states go to ensemble.h5; None: all

    @property
    def enabled(self) -> bool:
        """The ensemble path runs: more than one member, or a (one-member) sweep."""
        return self.size > 1 or bool(self.sweep)


@dataclass(frozen=True)
class BodiesConfig:
    ensemble: EnsembleConfig
    mesh: tuple[int, int, int] | None = None  # spatial decomposition: subdomains along x, y, z
    # buffer sizes of the decomposition (None: sized from the scene; see solver/distributed/bodies)
    capacities: tuple[tuple[str, int], ...] = ()
    # steps between energy/momentum totals; None: the case decides (solver.bodies.model)
    diagnostics_every: int | None = None
    precision: str = "float64"  # the body state's float type: "float64" or "float32"
    kernel: str = "xla"  # one of KERNELS: the XLA step or the native sphere chunk

    @classmethod
    def default(cls) -> BodiesConfig:
        return cls(EnsembleConfig(1, 0.0, 0.0, 0.0, (), None, 8))


@dataclass(frozen=True)
class BoxFillConfig:
    """Spheres poured into an open box (floor and four walls) under gravity (rigid bodies)."""

    count: int  # spheres
    radius: float  # m, mean radius
    radius_spread: float  # radii uniform in radius * (1 -+ spread), spread in [0, 0.5)
    material: MaterialConfig  # spheres and walls
    box: tuple[float, float, float]  # m, inner size (x, y, z); floor z = 0, walls x, y = 0, size
    fill_from: float  # initial positions in z >= fill_from * box height, fraction in [0, 1)
    gravity: float  # m/s^2, along -z
    contact_model: str
    stiffness: float  # N/m, linear model only
    duration: float  # s
    dt: float | None
    output_every: int | None
    name: str = "box_fill"
    dimension: int | None = None
    kind: str = "bodies"


BodyCaseConfig = (
    ProjectileConfig
    | BounceConfig
    | TumblingConfig
    | InclineConfig
    | CradleConfig
    | BoxFillConfig
    | SceneCaseConfig
)


def _material(s: Section) -> MaterialConfig:
    return MaterialConfig(
        young=s.positive("young"),
        poisson=s.number("poisson", low=-1.0, high=0.5),
        density=s.positive("density"),
        restitution=s.number("restitution", low=0.0, high=1.0),
        friction=s.number("friction", low=0.0, low_open=False),
    )


def _projectile(s: Section) -> ProjectileConfig:
    return ProjectileConfig(
        radius=s.positive("radius"),
        density=s.positive("density"),
        speed=s.number("speed", low=0.0, low_open=False),
        angle=s.number("angle", low=-90.0, high=90.0, low_open=False),
        launch_height=s.number("launch_height"),
        gravity=s.number("gravity", low=0.0, low_open=False),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def _bounce(s: Section) -> BounceConfig:
    return BounceConfig(
        radius=s.positive("radius"),
        material=_material(s.sub("material")),
        drop_height=s.positive("drop_height"),
        gravity=s.positive("gravity"),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        # the stability limit of the contact is checked when the case is built (solver.bodies.cases)
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def _tumbling(s: Section) -> TumblingConfig:
    moments = s.point("moments", 3)
    if not all(m > 0 for m in moments) or len(set(moments)) != 3:
        raise ConfigError(s.key("moments"), list(moments), "three distinct positive moments")
    if max(moments) > sum(moments) - max(moments):
        raise ConfigError(
            s.key("moments"), list(moments), "largest moment <= the sum of the other two"
        )
    axis = s.point("frame_axis", 3)
    if not math.hypot(*axis) > 0:
        raise ConfigError(s.key("frame_axis"), list(axis), "a non-zero vector")
    return TumblingConfig(
        radius=s.positive("radius"),
        mass=s.positive("mass"),
        moments=moments,
        frame_axis=axis,
        frame_angle=s.number("frame_angle"),
        spin=s.positive("spin"),
        perturbation=s.number("perturbation", low=0.0, high=1.0),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def _incline(s: Section) -> InclineConfig:
    return InclineConfig(
        radius=s.positive("radius"),
        material=_material(s.sub("material")),
        angle=s.number("angle", low=0.0, high=80.0, low_open=False),
        gravity=s.positive("gravity"),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
        shape=s.choice("shape", INCLINE_SHAPES) if "shape" in s.data else "sphere",
        clump_separation=(
            s.number("clump_separation", low=0.0, high=1.0) if "clump_separation" in s.data else 1.0
        ),
    )


def _box_fill(s: Section) -> BoxFillConfig:
    box = s.point("box", 3)
    if not all(b > 0 for b in box):
        raise ConfigError(s.key("box"), list(box), "three sizes > 0 (m)")
    spread = s.number("radius_spread", low=0.0, high=0.5, low_open=False)
    if spread == 0.5:
        raise ConfigError(s.key("radius_spread"), spread, ">= 0 and < 0.5")
    fill_from = s.number("fill_from", low=0.0, high=1.0, low_open=False)
    if fill_from == 1.0:
        raise ConfigError(s.key("fill_from"), fill_from, ">= 0 and < 1")
    return BoxFillConfig(
        count=s.integer("count", low=1),
        radius=s.positive("radius"),
        radius_spread=spread,
        material=_material(s.sub("material")),
        box=box,
        fill_from=fill_from,
        gravity=s.positive("gravity"),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def _cradle(s: Section) -> CradleConfig:
    return CradleConfig(
        count=s.integer("count", low=2),
        radius=s.positive("radius"),
        material=_material(s.sub("material")),
        speed=s.positive("speed"),
        gap=s.number("gap", low=0.0, low_open=False),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def scene_source(s: Section) -> dict:
    """The scene keys of a case section: file, materials, bodies, generate, extra_bodies (the
    form of ``case=scene``, also carried by the coupled cases), checked for shape only."""
    file = s.data.get("file")
    if file is not None:
        if not isinstance(file, str) or not file.strip():
            raise ConfigError(s.key("file"), file, "a path to a .yaml, .yml, .h5 or .hdf5 scene")
        file = _original_path(file)
    materials = s.data.get("materials") or {}
    if not isinstance(materials, dict):
        raise ConfigError(s.key("materials"), materials, "a mapping of name: {properties}")
    bodies = s.data.get("bodies") or []
    extra = s.data.get("extra_bodies") or []
    for name, value in (("bodies", bodies), ("extra_bodies", extra)):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(s.key(name), value, "a list of bodies")
    generate = s.data.get("generate")
    if generate is not None and not isinstance(generate, dict):
        raise ConfigError(s.key("generate"), generate, "null or {kind: ..., parameters}")
    if file is not None and generate is not None:
        raise ConfigError(
            s.key("generate"), generate, f"null when {s.key('file')} is given (one source)"
        )
    if file is None and generate is None and not bodies:
        raise ConfigError(
            s.key("bodies"), [], f"at least one body (or {s.key('file')} / {s.key('generate')})"
        )
    return {
        "file": file,
        "materials": materials,
        "bodies": tuple(bodies),
        "generate": generate,
        "extra_bodies": tuple(extra),
    }


def _scene(s: Section) -> SceneCaseConfig:
    return SceneCaseConfig(
        **scene_source(s),
        gravity=s.point("gravity", 3),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
        margin=s.number("margin", low=0.0, low_open=False, allow_none=True),
        overlap_tolerance=s.number("overlap_tolerance", low=0.0, high=0.5, low_open=False),
    )


def _original_path(path: str) -> str:
    return str(original_path(path))


def _ensemble(s: Section) -> EnsembleConfig:
    size = s.integer("size", low=1)
    perturb = s.sub("perturb")
    stds = {
        name: perturb.number(name, low=0.0, low_open=False)
        for name in ("position", "velocity", "angular_velocity")
    }
    extra = sorted(set(perturb.data) - set(stds))
    if extra:
        raise ConfigError(perturb.key(extra[0]), perturb.data[extra[0]], "keys " + ", ".join(stds))
    sweep_section = Section(s.key("sweep"), s.data.get("sweep") or {})
    sweep = []
    for name, values in sweep_section.data.items():
        if values is None:  # listed in configs/bodies/default.yaml, not swept
            continue
        key = sweep_section.key(str(name))
        if name not in ENSEMBLE_SWEEP:
            raise ConfigError(key, values, "a parameter among " + " | ".join(ENSEMBLE_SWEEP))
        if not isinstance(values, (list, tuple)) or len(values) != size:
            count = len(values) if isinstance(values, (list, tuple)) else "not a list"
            allowed = f"a list of {s.key('size')} = {size} values ({count} given)"
            raise ConfigError(key, values, allowed)
        sweep.append((str(name), tuple(_sweep_value(key, name, v) for v in values)))
    material = s.data.get("sweep_material")
    if material is not None and (not isinstance(material, str) or not material):
        raise ConfigError(s.key("sweep_material"), material, "a material name or null (all)")
    return EnsembleConfig(
        size=size,
        perturb_position=stds["position"],
        perturb_velocity=stds["velocity"],
        perturb_angular_velocity=stds["angular_velocity"],
        sweep=tuple(sweep),
        sweep_material=material,
        saved_members=s.integer("saved_members", low=0, allow_none=True),
    )


def _sweep_value(key: str, name: str, value: Any) -> float | tuple[float, float, float]:
    allowed = ENSEMBLE_SWEEP[name]
    if name == "gravity" and isinstance(value, (list, tuple)):
        ok = len(value) == 3 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in value
        )
        if not ok:
            raise ConfigError(key, value, allowed)
        return tuple(float(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(key, value, allowed)
    value = float(value)
    ok = {
        "restitution": 0.0 <= value <= 1.0,
        "friction": value >= 0.0,
        "rolling_friction": value >= 0.0,
        "young": value > 0.0,
        "poisson": -1.0 < value < 0.5,
        "stiffness": value > 0.0,
        "gravity": value >= 0.0,
    }[name]
    if not ok:
        raise ConfigError(key, value, allowed)
    return value


PRECISIONS = ("float64", "float32")
# bodies.kernel: the XLA step (the reference, differentiable) or the C++ chunk of a scene of
# plain spheres (kernels/native/dem_spheres.cc, solver/bodies/native_step.py; one device)
KERNELS = ("xla", "native")
BODY_CAPACITIES = ("capacity", "ghost_capacity", "migration_capacity", "cell_capacity",
                   "max_partners")  # fmt: skip


def parse_bodies(s: Section) -> BodiesConfig:
    """The typed ``bodies`` section."""
    ensemble = _ensemble(s.sub("ensemble"))
    mesh = s.data.get("mesh")
    if mesh is not None:
        if (not isinstance(mesh, (list, tuple)) or len(mesh) != 3
                or not all(isinstance(m, int) and not isinstance(m, bool) and m >= 1
                           for m in mesh)):  # fmt: skip
            raise ConfigError(s.key("mesh"), mesh, "null or [mx, my, mz], integers >= 1")
        mesh = tuple(mesh)
        if ensemble.size > 1:
            raise ConfigError(s.key("mesh"), list(mesh), "null with bodies.ensemble.size > 1")
    capacities = []
    for name in BODY_CAPACITIES:
        if s.data.get(name) is not None:
            capacities.append((name, s.integer(name)))
    every = s.integer("diagnostics_every", allow_none=True)
    if every not in (None, 1) and (mesh is not None or ensemble.enabled):
        allowed = "null or 1 with bodies.mesh or an ensemble (they total every step)"
        raise ConfigError(s.key("diagnostics_every"), every, allowed)
    precision = s.data.get("precision", "float64")
    if precision not in PRECISIONS:
        raise ConfigError(s.key("precision"), precision, " or ".join(PRECISIONS))
    if precision != "float64" and (mesh is not None or ensemble.enabled):
        raise ConfigError(s.key("precision"), precision,
                          "float64 with bodies.mesh or an ensemble (not yet)")  # fmt: skip
    kernel = "xla"
    if s.data.get("kernel") is not None:
        kernel = s.choice("kernel", KERNELS, case_sensitive=False)
    if kernel == "native" and mesh is not None:
        raise ConfigError(s.key("kernel"), kernel, f"xla with bodies.mesh = {list(mesh)} (the "
                          "native kernel steps a scene on one device)")  # fmt: skip
    return BodiesConfig(ensemble=ensemble, mesh=mesh, capacities=tuple(capacities),
                        diagnostics_every=every, precision=precision, kernel=kernel)  # fmt: skip


# case.name -> the parser of the ``case`` section of that rigid-body case
BODY_CASES: dict[str, Callable[[Section], BodyCaseConfig]] = {
    "projectile": _projectile,
    "bounce": _bounce,
    "tumbling": _tumbling,
    "incline": _incline,
    "cradle": _cradle,
    "box_fill": _box_fill,
    "scene": _scene,
}
