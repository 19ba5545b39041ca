"""Typed, validated run configuration built from Hydra's composed config.

This is the only module that reads Hydra/OmegaConf objects. ``load(cfg)`` turns the composed
``DictConfig`` into frozen dataclasses and checks every value before anything is traced; a bad
value raises ``ConfigError`` whose message is one line naming the key, the value and the allowed
range. Checks that need the unit conversion (tau, Mach, cells per diameter) happen when a case is
built (``solver.fluid.cases``), still before tracing, and raise the same error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernels.lattices import LATTICES
from solver.errors import ConfigError

if TYPE_CHECKING:
    from solver.twin.config import TwinConfig

PRECISIONS = ("float32", "float64")
COLLISIONS = ("bgk", "trt")
PNG_FIELDS = ("auto", "speed", "vorticity")
INFLOWS = ("parabolic", "uniform")
TG_VARIANTS = ("vortex", "beltrami")
MAX_MACH = 0.3
CONTACT_MODELS = ("hertz", "linear")  # = solver.bodies.step.CONTACT_MODELS (not imported: JAX-free)
INCLINE_SHAPES = ("sphere", "clump")


# --- typed config ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FluidConfig:
    lattice: str  # canonical name, e.g. "D2Q9"
    collision: str  # "bgk" | "trt"
    trt_magic: float
    precision: str  # "float32" | "float64"
    u_lattice: float  # lattice velocity of the case's characteristic velocity

    @property
    def dimension(self) -> int:
        return LATTICES[self.lattice].d


@dataclass(frozen=True)
class OutputConfig:
    every: int | None  # steps between field outputs; None: about 10 per run
    fields: bool
    png: bool
    png_field: str
    log_interval: float  # s of wall time between log lines off a terminal


@dataclass(frozen=True)
class DomainConfig:
    mesh: str | tuple[int, ...]  # a preset name or shards per axis
    halo: str  # "xla" | "mpi"


@dataclass(frozen=True)
class CheckpointConfig:
    enabled: bool
    every_steps: int | None  # save when the step count is a multiple of it
    every_minutes: float | None  # save at the first chunk end this long after the last save
    keep: int  # newest checkpoints kept
    dir: str | None  # None: <run dir>/checkpoints
    async_save: bool
    resume: str  # "auto" | "never" | a path
    final: bool  # save the last state too
    stripe_count: int | None  # Lustre stripes per file (-1: all targets); None: keep default
    stripe_size: int | None  # bytes per Lustre stripe; None: keep default
    file_size: int  # target bytes per Orbax data file
    compress: bool = False  # zstd on the state's chunks

    @classmethod
    def disabled(cls) -> CheckpointConfig:
        return cls(False, None, None, 1, None, True, "never", False, None, None, 1 << 30)


@dataclass(frozen=True)
class CylinderConfig:
    length: float  # m
    height: float  # m
    center: tuple[float, float]  # m
    diameter: float  # m
    inflow: str
    u_max: float  # m/s
    viscosity: float  # m^2/s
    density: float  # kg/m^3
    resolution: int  # cells per diameter
    duration: float  # s
    perturbation: float  # fraction of u_max
    stats_fraction: float
    name: str = "cylinder"
    dimension: int = 2


@dataclass(frozen=True)
class TaylorGreenConfig:
    length: float
    u0: float
    viscosity: float
    density: float
    resolution: int  # cells per side
    duration: float
    variant: str
    name: str = "taylor_green"
    dimension: int | None = None  # follows the lattice


@dataclass(frozen=True)
class PoiseuilleConfig:
    height: float
    length: float
    u_max: float
    viscosity: float
    density: float
    resolution: int  # cells across the height
    duration: float
    amplitude: float  # m/s^2
    angular_frequency: float  # rad/s
    phase: float  # rad
    name: str = "poiseuille"
    dimension: int = 2


@dataclass(frozen=True)
class CouetteConfig:
    height: float
    length: float
    wall_velocity: float
    viscosity: float
    density: float
    resolution: int
    duration: float
    name: str = "couette"
    dimension: int = 2


@dataclass(frozen=True)
class CavityConfig:
    length: float
    lid_velocity: float
    re: float
    density: float
    resolution: int
    duration: float
    name: str = "cavity"
    dimension: int = 2

    @property
    def viscosity(self) -> float:
        return abs(self.lid_velocity) * self.length / self.re


@dataclass(frozen=True)
class DuctConfig:
    side: float
    length: float
    u_max: float
    viscosity: float
    density: float
    resolution: int
    duration: float
    name: str = "duct"
    dimension: int = 3


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


CaseConfig = (
    CylinderConfig
    | TaylorGreenConfig
    | PoiseuilleConfig
    | CouetteConfig
    | CavityConfig
    | DuctConfig
    | ProjectileConfig
    | BounceConfig
    | TumblingConfig
    | InclineConfig
    | CradleConfig
    | BoxFillConfig
    | SceneCaseConfig
)


@dataclass(frozen=True)
class RunConfig:
    case: CaseConfig
    fluid: FluidConfig
    output: OutputConfig
    domain: DomainConfig
    checkpoint: CheckpointConfig
    steps: int | None  # None: the case's default
    chunk: int
    seed: int
    resolved: dict  # the whole composed config as plain data, for run.json
    bodies: BodiesConfig = BodiesConfig.default()  # rigid-body ensembles
    twin: TwinConfig | None = None  # digital twin (solver.twin.config); None: off


# --- value checks ------------------------------------------------------------------------------


class _Section:
    """Typed accessors for one config section; every error names the full dotted key."""

    def __init__(self, prefix: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ConfigError(prefix, data, "a mapping of keys")
        self.prefix, self.data = prefix, data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def raw(self, name: str) -> Any:
        if name not in self.data:
            raise ConfigError(self.key(name), None, "a value (the key is missing)")
        return self.data[name]

    def number(
        self,
        name: str,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = True,
        allow_none: bool = False,
    ) -> float | None:
        value = self.raw(name)
        if value is None and allow_none:
            return None
        allowed = _range_text(low, high, low_open)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(self.key(name), value, f"a number {allowed}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(self.key(name), value, f"a finite number {allowed}")
        if low is not None and (value <= low if low_open else value < low):
            raise ConfigError(self.key(name), value, allowed)
        if high is not None and value > high:
            raise ConfigError(self.key(name), value, allowed)
        return value

    def positive(self, name: str) -> float:
        return self.number(name, low=0.0)

    def integer(self, name: str, low: int = 1, allow_none: bool = False) -> int | None:
        value = self.raw(name)
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ConfigError(self.key(name), value, f"an integer >= {low}")
        if value < low:
            raise ConfigError(self.key(name), value, f"an integer >= {low}")
        return value

    def choice(self, name: str, options: tuple[str, ...], case_sensitive: bool = True) -> str:
        value = self.raw(name)
        text = value if case_sensitive or not isinstance(value, str) else value.lower()
        canon = options if case_sensitive else tuple(o.lower() for o in options)
        if not isinstance(value, str) or text not in canon:
            raise ConfigError(self.key(name), value, "one of " + " | ".join(options))
        return options[canon.index(text)]

    def boolean(self, name: str) -> bool:
        value = self.raw(name)
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), value, "true | false")
        return value

    def point(self, name: str, dimension: int) -> tuple[float, ...]:
        value = self.raw(name)
        if (
            not isinstance(value, (list, tuple))
            or len(value) != dimension
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        ):
            raise ConfigError(self.key(name), value, f"a list of {dimension} numbers (m)")
        return tuple(float(v) for v in value)


def _range_text(low: float | None, high: float | None, low_open: bool) -> str:
    if low is None and high is None:
        return "(any finite number)"
    parts = []
    if low is not None:
        parts.append(f"> {low:g}" if low_open else f">= {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    return " and ".join(parts)


# --- sections ----------------------------------------------------------------------------------


def _fluid(s: _Section) -> FluidConfig:
    lattice = s.choice("lattice", tuple(LATTICES), case_sensitive=False)
    return FluidConfig(
        lattice=lattice,
        collision=s.choice("collision", COLLISIONS, case_sensitive=False),
        trt_magic=s.number("trt_magic", low=0.0),
        precision=s.choice("precision", PRECISIONS),
        # the Mach limit (u_lattice / c_s <= 0.3) is checked where the case knows its peak velocity
        u_lattice=s.number("u_lattice", low=0.0, high=1.0),
    )


def _output(s: _Section) -> OutputConfig:
    return OutputConfig(
        every=s.integer("every", allow_none=True),
        fields=s.boolean("fields"),
        png=s.boolean("png"),
        png_field=s.choice("png_field", PNG_FIELDS),
        log_interval=s.number("log_interval", low=0.0),
    )


def _domain(s: _Section) -> DomainConfig:
    from solver.distributed.decomposition import PRESETS
    from solver.distributed.runtime import HALOS

    mesh = s.raw("mesh")
    if isinstance(mesh, str):
        mesh = s.choice("mesh", PRESETS)
    elif isinstance(mesh, (list, tuple)) and 1 <= len(mesh) <= 3:
        if not all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in mesh):
            raise ConfigError(s.key("mesh"), list(mesh), "positive integers, one per axis")
        mesh = tuple(mesh)
    else:
        raise ConfigError(
            s.key("mesh"), mesh, f"one of {', '.join(PRESETS)} or a list of shards per axis"
        )
    return DomainConfig(mesh=mesh, halo=s.choice("halo", HALOS))


def _checkpoint(s: _Section) -> CheckpointConfig:
    from solver.checkpoint.striping import parse_size

    def size(name: str, allow_none: bool) -> int | None:
        value = s.raw(name)
        if value is None and allow_none:
            return None
        try:
            return parse_size(value)
        except (TypeError, ValueError):
            raise ConfigError(
                s.key(name), value, "a size in bytes, e.g. 1048576, 4M or 1G"
            ) from None

    stripe_count = s.raw("stripe_count")
    if stripe_count is not None and (
        isinstance(stripe_count, bool)
        or not isinstance(stripe_count, int)
        or not (stripe_count == -1 or stripe_count >= 1)
    ):
        raise ConfigError(
            s.key("stripe_count"), stripe_count, "an integer >= 1, -1 (all targets) or null"
        )
    resume = s.raw("resume")
    if not isinstance(resume, str) or not resume.strip():
        raise ConfigError(s.key("resume"), resume, "auto | never | a checkpoint path")
    directory = s.raw("dir")
    if directory is not None and (not isinstance(directory, str) or not directory.strip()):
        raise ConfigError(s.key("dir"), directory, "a directory path or null (the run dir)")
    return CheckpointConfig(
        enabled=s.boolean("enabled"),
        every_steps=s.integer("every_steps", allow_none=True),
        every_minutes=s.number("every_minutes", low=0.0, allow_none=True),
        keep=s.integer("keep"),
        dir=directory,
        async_save=s.boolean("async_save"),
        resume=resume,
        final=s.boolean("final"),
        stripe_count=stripe_count,
        stripe_size=size("stripe_size", allow_none=True),
        file_size=size("file_size", allow_none=False),
        compress=s.boolean("compress"),
    )


def _cylinder(s: _Section) -> CylinderConfig:
    return CylinderConfig(
        length=s.positive("length"),
        height=s.positive("height"),
        center=s.point("center", 2),
        diameter=s.positive("diameter"),
        inflow=s.choice("inflow", INFLOWS),
        u_max=s.positive("u_max"),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution"),
        duration=s.positive("duration"),
        perturbation=s.number("perturbation", low=0.0, high=0.5, low_open=False),
        stats_fraction=s.number("stats_fraction", low=0.0, high=1.0),
    )


def _taylor_green(s: _Section) -> TaylorGreenConfig:
    return TaylorGreenConfig(
        length=s.positive("length"),
        u0=s.positive("u0"),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=4),
        duration=s.positive("duration"),
        variant=s.choice("variant", TG_VARIANTS),
    )


def _poiseuille(s: _Section) -> PoiseuilleConfig:
    return PoiseuilleConfig(
        height=s.positive("height"),
        length=s.positive("length"),
        u_max=s.number("u_max", low=0.0, low_open=False),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=3),
        duration=s.positive("duration"),
        amplitude=s.number("amplitude", low=0.0, low_open=False),
        angular_frequency=s.number("angular_frequency", low=0.0, low_open=False),
        phase=s.number("phase"),
    )


def _couette(s: _Section) -> CouetteConfig:
    return CouetteConfig(
        height=s.positive("height"),
        length=s.positive("length"),
        wall_velocity=s.positive("wall_velocity"),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=3),
        duration=s.positive("duration"),
    )


def _cavity(s: _Section) -> CavityConfig:
    return CavityConfig(
        length=s.positive("length"),
        lid_velocity=s.positive("lid_velocity"),
        re=s.positive("re"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=4),
        duration=s.positive("duration"),
    )


def _duct(s: _Section) -> DuctConfig:
    return DuctConfig(
        side=s.positive("side"),
        length=s.positive("length"),
        u_max=s.positive("u_max"),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=3),
        duration=s.positive("duration"),
    )


def _material(s: _Section) -> MaterialConfig:
    return MaterialConfig(
        young=s.positive("young"),
        poisson=s.number("poisson", low=-1.0, high=0.5),
        density=s.positive("density"),
        restitution=s.number("restitution", low=0.0, high=1.0),
        friction=s.number("friction", low=0.0, low_open=False),
    )


def _projectile(s: _Section) -> ProjectileConfig:
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


def _bounce(s: _Section) -> BounceConfig:
    return BounceConfig(
        radius=s.positive("radius"),
        material=_material(_Section(s.key("material"), s.raw("material"))),
        drop_height=s.positive("drop_height"),
        gravity=s.positive("gravity"),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        # the stability limit of the contact is checked when the case is built (solver.bodies.cases)
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def _tumbling(s: _Section) -> TumblingConfig:
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


def _incline(s: _Section) -> InclineConfig:
    return InclineConfig(
        radius=s.positive("radius"),
        material=_material(_Section(s.key("material"), s.raw("material"))),
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


def _box_fill(s: _Section) -> BoxFillConfig:
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
        material=_material(_Section(s.key("material"), s.raw("material"))),
        box=box,
        fill_from=fill_from,
        gravity=s.positive("gravity"),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def _cradle(s: _Section) -> CradleConfig:
    return CradleConfig(
        count=s.integer("count", low=2),
        radius=s.positive("radius"),
        material=_material(_Section(s.key("material"), s.raw("material"))),
        speed=s.positive("speed"),
        gap=s.number("gap", low=0.0, low_open=False),
        contact_model=s.choice("contact_model", CONTACT_MODELS),
        stiffness=s.positive("stiffness"),
        duration=s.positive("duration"),
        dt=s.number("dt", low=0.0, allow_none=True),
        output_every=s.integer("output_every", allow_none=True),
    )


def _scene(s: _Section) -> SceneCaseConfig:
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
        raise ConfigError(s.key("generate"), generate, "null when case.file is given (one source)")
    if file is None and generate is None and not bodies:
        raise ConfigError(s.key("bodies"), [], "at least one body (or case.file / case.generate)")
    return SceneCaseConfig(
        file=file,
        materials=materials,
        bodies=tuple(bodies),
        generate=generate,
        extra_bodies=tuple(extra),
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
    """An absolute path; a relative one is taken from the directory the app was started in
    (Hydra's original working directory, which differs from the cwd with hydra.job.chdir=true)."""
    from pathlib import Path

    p = Path(path).expanduser()
    if p.is_absolute():
        return str(p)
    base = Path.cwd()
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.utils import get_original_cwd

        if HydraConfig.initialized():
            base = Path(get_original_cwd())
    except ImportError:  # plain-data use without Hydra installed
        pass
    return str(base / p)


def _ensemble(s: _Section) -> EnsembleConfig:
    size = s.integer("size", low=1)
    perturb = _Section(s.key("perturb"), s.raw("perturb"))
    stds = {
        name: perturb.number(name, low=0.0, low_open=False)
        for name in ("position", "velocity", "angular_velocity")
    }
    extra = sorted(set(perturb.data) - set(stds))
    if extra:
        raise ConfigError(perturb.key(extra[0]), perturb.data[extra[0]], "keys " + ", ".join(stds))
    sweep_section = _Section(s.key("sweep"), s.data.get("sweep") or {})
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


BODY_CAPACITIES = ("capacity", "ghost_capacity", "migration_capacity", "cell_capacity",
                   "max_partners")  # fmt: skip


def _bodies(s: _Section) -> BodiesConfig:
    ensemble = _ensemble(_Section(s.key("ensemble"), s.raw("ensemble")))
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
    return BodiesConfig(ensemble=ensemble, mesh=mesh, capacities=tuple(capacities))


CASE_PARSERS = {
    "cylinder": _cylinder,
    "taylor_green": _taylor_green,
    "poiseuille": _poiseuille,
    "couette": _couette,
    "cavity": _cavity,
    "duct": _duct,
    "projectile": _projectile,
    "bounce": _bounce,
    "tumbling": _tumbling,
    "incline": _incline,
    "cradle": _cradle,
    "box_fill": _box_fill,
    "scene": _scene,
}


def from_dict(data: dict) -> RunConfig:
    """Validate a plain-data config (the resolved Hydra config) and build the typed one."""
    root = _Section("", data)
    case_section = _Section("case", root.raw("case"))
    name = case_section.choice("name", tuple(CASE_PARSERS))
    case = CASE_PARSERS[name](case_section)
    fluid = _fluid(_Section("fluid", root.raw("fluid")))
    if case.dimension is not None and case.dimension != fluid.dimension:
        raise ConfigError(
            "fluid.lattice",
            fluid.lattice,
            f"a {case.dimension}D lattice for case {name}",
            hint=f"use fluid={'d2q9' if case.dimension == 2 else 'd3q19'}",
        )
    if name == "taylor_green" and case.variant == "beltrami" and fluid.dimension != 3:
        raise ConfigError(
            "case.variant", "beltrami", "vortex on a 2D lattice", hint="use fluid=d3q19"
        )
    bodies = (
        _bodies(_Section("bodies", data["bodies"])) if "bodies" in data else BodiesConfig.default()
    )
    return RunConfig(
        case=case,
        fluid=fluid,
        output=_output(_Section("output", root.raw("output"))),
        domain=_domain(_Section("domain", root.raw("domain"))),
        checkpoint=(
            _checkpoint(_Section("checkpoint", data["checkpoint"]))
            if "checkpoint" in data
            else CheckpointConfig.disabled()
        ),
        steps=root.integer("steps", allow_none=True),
        chunk=root.integer("chunk"),
        seed=root.integer("seed", low=0),
        resolved=data,
        bodies=bodies,
        twin=_twin(data.get("twin"), case, bodies),
    )


def _twin(data: Any, case: Any, bodies: BodiesConfig | None = None) -> TwinConfig | None:
    """The twin section (solver.twin.config); None when absent or ``mode: none``."""
    from solver.twin.config import parse_twin  # the twin package imports this module

    twin = parse_twin(data)
    if not twin.enabled:
        return None
    if getattr(case, "kind", "fluid") != "fluid":
        # a rigid-body case: kinematic bodies follow body_pose sensors (solver.twin.bodies)
        if twin.enkf.enabled or twin.forecast.enabled:
            key = "twin.enkf.enabled" if twin.enkf.enabled else "twin.forecast.enabled"
            raise ConfigError(key, True, "false for a rigid-body case")
        if bodies is not None and bodies.ensemble.size > 1:
            raise ConfigError("twin.mode", twin.mode, "none with bodies.ensemble.size > 1")
        if not any(s.kind == "body_pose" for s in twin.sensors.values()):
            raise ConfigError("twin.sensors", sorted(twin.sensors),
                              "a body_pose sensor for a rigid-body case")  # fmt: skip
    return twin


def load(cfg: Any) -> RunConfig:
    """Resolve a Hydra ``DictConfig`` (interpolations included) and validate it.

    Raises:
        ConfigError: for the first bad value, also for interpolations that do not resolve.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        raise ConfigError(str(key), None, "a resolvable value", hint=_one_line(err)) from None
    data.pop("hydra", None)
    return from_dict(data)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
