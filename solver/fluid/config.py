"""Validates the ``fluid`` section and the fluid cases' ``case`` section into frozen dataclasses.

Plain data in (the resolved Hydra config), typed values out; a bad value raises a one-line
``ConfigError`` naming the key. Checks that need the unit conversion (tau, Mach, cells per
diameter) happen when a case is built (``solver.fluid.cases``), still before tracing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernels.lattices import LATTICES
from kernels.storage import SHIFTED
from solver.errors import ConfigError
from solver.fluid.geometry.mesh import UNITS as MESH_UNITS
from solver.fluid.setup import CURVED_WALL_RULES
from solver.paths import original_path
from solver.sections import Section

PRECISIONS = ("float32", "float64")
# fluid.storage: null keeps the populations in fluid.precision; the 16-bit formats store
# (f - w) * s with float32 compute (kernels/storage.py, docs/storage.md)
STORAGES = ("float32", "float64", *SHIFTED)
COLLISIONS = ("bgk", "trt", "regularized", "kbc")
# KBC needs a tensor-product velocity set (kernels/collision_kbc.py)
KBC_LATTICES = ("D2Q9", "D3Q27")
LES_MODELS = ("none", "smagorinsky")
# fluid.kernel: the pure-JAX step on two ghost-padded buffers, or an in-place kernel on one
# buffer: native for the CPU (kernels/native/lb_inplace.cc), pallas (kernels/pallas_lb.py) and
# cuda (kernels/native/lb_gpu.cu) for the GPU; BGK/TRT, walls and body forces
KERNELS = ("xla", "native", "pallas", "cuda")
NATIVE_COLLISIONS = ("bgk", "trt")  # the collisions of both one-buffer kernels
# the 16-bit storages each one-buffer kernel keeps (besides f in the compute precision)
KERNEL_STORAGES = {"native": ("float16",), "pallas": ("float16", "bfloat16"), "cuda": ("float16",)}
INFLOWS = ("parabolic", "uniform")
# case.inlet / case.outlet -> OpenBoundary.kind
INLETS = {"extrapolation": "velocity", "bounce_back": "velocity_bounce_back"}
OUTLETS = {
    "pressure": "pressure",
    "anti_bounce_back": "pressure_anti_bounce_back",
    "convective": "convective",
    "characteristic": "characteristic",
}
TG_VARIANTS = ("vortex", "beltrami", "brachet")
# case=geometry: the built-in exact sphere (case.mesh), the mesh files' units, the tunnel's sides
ANALYTIC_SPHERE = "sphere"
TUNNEL_WALLS = ("periodic", "no_slip", "symmetry")
REPOSITORY = Path(__file__).resolve().parents[2]
MAX_MACH = 0.3


@dataclass(frozen=True)
class FluidConfig:
    lattice: str  # canonical name, e.g. "D2Q9"
    collision: str  # one of COLLISIONS
    trt_magic: float
    precision: str  # "float32" | "float64"
    u_lattice: float  # lattice velocity of the case's characteristic velocity
    les: str = "none"  # "none" | "smagorinsky"
    les_cs: float = 0.1  # Smagorinsky constant
    storage: str | None = None  # dtype the populations are kept in; None: ``precision``
    kernel: str = "xla"  # one of KERNELS
    curved_walls: str = "linear"  # one of CURVED_WALL_RULES

    @property
    def dimension(self) -> int:
        return LATTICES[self.lattice].d


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
    inlet: str = "extrapolation"  # one of INLETS
    outlet: str = "pressure"  # one of OUTLETS
    ramp_time: float = 0.0  # s, smooth start of the inflow (0: impulsive)
    inflow_period: float = 0.0  # s, U(t) = U sin(2 pi t / period) (0: steady)
    sponge_length: float = 0.0  # m, absorbing layer before the outlet (0: none)
    sponge_factor: float = 1.0  # viscosity at the outlet over the fluid's, in the layer
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
class GeometryConfig:
    """A wind tunnel around a body from a triangle mesh or the analytic sphere
    (solver/fluid/cases/geometry.py, docs/geometry.md)."""

    mesh: str  # absolute path of an STL/OBJ/PLY file, or ANALYTIC_SPHERE
    units: str  # the mesh file's length unit, one of MESH_UNITS
    scale: float
    rotation: tuple[float, float, float]  # degrees about x, y, z (fixed axes, in that order)
    translation: tuple[float, float, float]  # m, where the mesh's origin lands in the tunnel
    sphere_diameter: float  # m, the analytic sphere's diameter (mesh = sphere)
    length: float  # m, tunnel x
    width: float  # m, tunnel y
    height: float  # m, tunnel z
    walls: str  # one of TUNNEL_WALLS
    outlet: str  # one of OUTLETS
    velocity: float  # m/s, uniform inflow
    ramp_time: float  # s, smooth start of the inflow from rest (0: impulsive, from U everywhere)
    viscosity: float  # m^2/s
    density: float  # kg/m^3
    resolution: int  # cells per reference length
    reference_length: float  # m
    reference_area: float | None  # m^2; None: the voxelised body's frontal area
    duration: float  # s
    stats_fraction: float
    name: str = "geometry"
    dimension: int = 3


FluidCaseConfig = (
    CylinderConfig
    | TaylorGreenConfig
    | PoiseuilleConfig
    | CouetteConfig
    | CavityConfig
    | DuctConfig
    | GeometryConfig
)


def parse_fluid(s: Section) -> FluidConfig:
    """The typed ``fluid`` section."""
    lattice = s.choice("lattice", tuple(LATTICES), case_sensitive=False)
    collision = s.choice("collision", COLLISIONS, case_sensitive=False)
    if collision == "kbc" and lattice not in KBC_LATTICES:
        others = " | ".join(c for c in COLLISIONS if c != "kbc")
        raise ConfigError(
            s.key("collision"),
            collision,
            f"{others} on {lattice} (kbc needs fluid.lattice {' or '.join(KBC_LATTICES)})",
        )
    les = s.choice("les", LES_MODELS, case_sensitive=False)
    if collision == "kbc" and les != "none":
        raise ConfigError(
            s.key("les"),
            les,
            "none with fluid.collision=kbc (its entropic stabiliser takes the place of a "
            "subgrid model; fluid.les works with bgk, trt and regularized)",
        )
    precision = s.choice("precision", PRECISIONS)
    storage = _storage(s, precision)
    kernel = _kernel(s, collision, les, storage)
    return FluidConfig(
        lattice=lattice,
        collision=collision,
        trt_magic=s.number("trt_magic", low=0.0),
        precision=precision,
        storage=storage,
        kernel=kernel,
        les=les,
        les_cs=s.number("les_cs", low=0.0, high=1.0),
        curved_walls=_curved_walls(s, kernel),
        # the Mach limit (u_lattice / c_s <= 0.3) is checked where the case knows its peak velocity
        u_lattice=s.number("u_lattice", low=0.0, high=1.0),
    )


def _kernel(s: Section, collision: str, les: str, storage: str | None) -> str:
    """``fluid.kernel`` (absent: xla), checked against the collision, les and storage keys;
    what depends on the case (open faces, curved walls, obstacle forces) is checked when the
    case is built."""
    if "kernel" not in s.data or s.data.get("kernel") is None:
        return "xla"
    kernel = s.choice("kernel", KERNELS, case_sensitive=False)
    if kernel == "xla":
        return kernel
    if collision not in NATIVE_COLLISIONS:
        raise ConfigError(
            s.key("kernel"),
            kernel,
            f"xla with fluid.collision={collision} (the {kernel} kernel has "
            f"{' and '.join(NATIVE_COLLISIONS)})",
        )
    stored = KERNEL_STORAGES[kernel]
    if storage is not None and storage not in stored:
        raise ConfigError(
            s.key("kernel"),
            kernel,
            f"xla with fluid.storage={storage} (the {kernel} kernel stores f, or "
            f"{' or '.join(stored)})",
        )
    return kernel


def _curved_walls(s: Section, kernel: str) -> str:
    """``fluid.curved_walls`` (absent: linear); the quadratic rule is an XLA-step part (the
    one-buffer kernels take no curved walls at all; a multi-device mesh is refused where the
    run's mesh is known, ``solver.fluid.boundary_rules.require_wall_rule``)."""
    if s.data.get("curved_walls") is None:
        return "linear"
    rule = s.choice("curved_walls", CURVED_WALL_RULES, case_sensitive=False)
    if rule == "quadratic" and kernel != "xla":
        raise ConfigError(
            s.key("curved_walls"),
            rule,
            f"linear with fluid.kernel={kernel} (the quadratic rule runs on the xla kernel)",
        )
    return rule


def _storage(s: Section, precision: str) -> str | None:
    """``fluid.storage``: null (or absent) or the precision itself keep the populations in the
    compute precision (None); float16 and bfloat16 need fluid.precision=float32."""
    value = s.data.get("storage")
    if value is None:
        return None
    allowed = (precision, *SHIFTED) if precision == "float32" else (precision,)
    if not isinstance(value, str) or value.lower() not in STORAGES:
        raise ConfigError(s.key("storage"), value, "null | " + " | ".join(STORAGES))
    value = value.lower()
    if value not in allowed:
        raise ConfigError(
            s.key("storage"),
            value,
            f"null | {' | '.join(allowed)} with fluid.precision={precision} (16-bit storage "
            "needs float32 compute)",
        )
    return None if value == precision else value


def _cylinder(s: Section) -> CylinderConfig:
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
        inlet=s.choice("inlet", tuple(INLETS)),
        outlet=s.choice("outlet", tuple(OUTLETS)),
        ramp_time=s.number("ramp_time", low=0.0, low_open=False),
        inflow_period=s.number("inflow_period", low=0.0, low_open=False),
        sponge_length=s.number("sponge_length", low=0.0, low_open=False),
        sponge_factor=s.number("sponge_factor", low=1.0, high=1000.0, low_open=False),
    )


def _taylor_green(s: Section) -> TaylorGreenConfig:
    return TaylorGreenConfig(
        length=s.positive("length"),
        u0=s.positive("u0"),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=4),
        duration=s.positive("duration"),
        variant=s.choice("variant", TG_VARIANTS),
    )


def _poiseuille(s: Section) -> PoiseuilleConfig:
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


def _couette(s: Section) -> CouetteConfig:
    return CouetteConfig(
        height=s.positive("height"),
        length=s.positive("length"),
        wall_velocity=s.positive("wall_velocity"),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=3),
        duration=s.positive("duration"),
    )


def _cavity(s: Section) -> CavityConfig:
    return CavityConfig(
        length=s.positive("length"),
        lid_velocity=s.positive("lid_velocity"),
        re=s.positive("re"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=4),
        duration=s.positive("duration"),
    )


def _duct(s: Section) -> DuctConfig:
    return DuctConfig(
        side=s.positive("side"),
        length=s.positive("length"),
        u_max=s.positive("u_max"),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=3),
        duration=s.positive("duration"),
    )


def _geometry(s: Section) -> GeometryConfig:
    mesh = s.raw("mesh")
    if not isinstance(mesh, str) or not mesh.strip():
        raise ConfigError(
            s.key("mesh"), mesh, f"a path to an STL, OBJ or PLY file, or {ANALYTIC_SPHERE}"
        )
    rotation = s.raw("rotation")
    if (
        not isinstance(rotation, (list, tuple))
        or len(rotation) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rotation)
    ):
        raise ConfigError(s.key("rotation"), rotation, "a list of 3 angles (degrees)")
    return GeometryConfig(
        mesh=mesh if mesh == ANALYTIC_SPHERE else _mesh_path(mesh),
        units=s.choice("units", tuple(MESH_UNITS)),
        scale=s.positive("scale"),
        rotation=tuple(float(v) for v in rotation),
        translation=s.point("translation", 3),
        sphere_diameter=s.positive("sphere_diameter"),
        length=s.positive("length"),
        width=s.positive("width"),
        height=s.positive("height"),
        walls=s.choice("walls", TUNNEL_WALLS),
        outlet=s.choice("outlet", tuple(OUTLETS)),
        velocity=s.positive("velocity"),
        ramp_time=s.number("ramp_time", low=0.0, low_open=False),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        resolution=s.integer("resolution", low=4),
        reference_length=s.positive("reference_length"),
        reference_area=s.number("reference_area", low=0.0, allow_none=True),
        duration=s.positive("duration"),
        stats_fraction=s.number("stats_fraction", low=0.0, high=1.0),
    )


def _mesh_path(path: str) -> str:
    """An absolute path (``solver.paths.original_path``), or else one from the repository root,
    where the sample meshes of data/meshes/ live (so the shipped configs work from any
    directory)."""
    resolved = original_path(path)
    if not resolved.exists() and (REPOSITORY / path).exists():
        return str(REPOSITORY / path)
    return str(resolved)


# case.name -> the parser of the ``case`` section of that fluid case
FLUID_CASES: dict[str, Callable[[Section], FluidCaseConfig]] = {
    "cylinder": _cylinder,
    "taylor_green": _taylor_green,
    "poiseuille": _poiseuille,
    "couette": _couette,
    "cavity": _cavity,
    "duct": _duct,
    "geometry": _geometry,
}
