"""Validates the ``fluid`` section and the fluid cases' ``case`` section into frozen dataclasses.

Plain data in (the resolved Hydra config), typed values out; a bad value raises a one-line
``ConfigError`` naming the key. Checks that need the unit conversion (tau, Mach, cells per
diameter) happen when a case is built (``solver.fluid.cases``), still before tracing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernels.lattices import LATTICES
from solver.sections import Section

PRECISIONS = ("float32", "float64")
COLLISIONS = ("bgk", "trt")
LES_MODELS = ("none", "smagorinsky")
INFLOWS = ("parabolic", "uniform")
TG_VARIANTS = ("vortex", "beltrami")
MAX_MACH = 0.3


@dataclass(frozen=True)
class FluidConfig:
    lattice: str  # canonical name, e.g. "D2Q9"
    collision: str  # "bgk" | "trt"
    trt_magic: float
    precision: str  # "float32" | "float64"
    u_lattice: float  # lattice velocity of the case's characteristic velocity
    les: str = "none"  # "none" | "smagorinsky"
    les_cs: float = 0.1  # Smagorinsky constant

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


FluidCaseConfig = (
    CylinderConfig
    | TaylorGreenConfig
    | PoiseuilleConfig
    | CouetteConfig
    | CavityConfig
    | DuctConfig
)


def parse_fluid(s: Section) -> FluidConfig:
    """The typed ``fluid`` section."""
    lattice = s.choice("lattice", tuple(LATTICES), case_sensitive=False)
    return FluidConfig(
        lattice=lattice,
        collision=s.choice("collision", COLLISIONS, case_sensitive=False),
        trt_magic=s.number("trt_magic", low=0.0),
        precision=s.choice("precision", PRECISIONS),
        les=s.choice("les", LES_MODELS, case_sensitive=False),
        les_cs=s.number("les_cs", low=0.0, high=1.0),
        # the Mach limit (u_lattice / c_s <= 0.3) is checked where the case knows its peak velocity
        u_lattice=s.number("u_lattice", low=0.0, high=1.0),
    )


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


# case.name -> the parser of the ``case`` section of that fluid case
FLUID_CASES: dict[str, Callable[[Section], FluidCaseConfig]] = {
    "cylinder": _cylinder,
    "taylor_green": _taylor_green,
    "poiseuille": _poiseuille,
    "couette": _couette,
    "cavity": _cavity,
    "duct": _duct,
}
