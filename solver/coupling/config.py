"""The ``coupling`` section and the coupled cases' ``case`` sections (typed, validated).

``coupling.method`` chooses how bodies and fluid exchange momentum: ``none`` (default: no
bodies in the fluid) or ``psm``, the partially saturated cells method (kernels/coupling.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from solver.bodies.config import MaterialConfig
from solver.sections import Section

COUPLING_METHODS = ("none", "psm")


@dataclass(frozen=True)
class CouplingConfig:
    """How bodies and fluid exchange momentum.

    Attributes:
        method: "none" or "psm".
        substeps: rigid-body steps per fluid step (contacts sub-cycled); None: the fewest that
            keep the body step within the contact stability limit.
        average_force: drive the bodies by the mean hydrodynamic force of this and the last
            fluid step (removes the two-step oscillation of the force; Ladd 1994, waLBerla).
        tracked: bodies (the first ones) whose position, velocity and force are recorded every
            fluid step into bodies_track.csv.
    """

    method: str = "none"
    substeps: int | None = None
    average_force: bool = True
    tracked: int = 8

    @property
    def enabled(self) -> bool:
        return self.method != "none"


def parse_coupling(s: Section) -> CouplingConfig:
    """The typed ``coupling`` section."""
    return CouplingConfig(
        method=s.choice("method", COUPLING_METHODS),
        substeps=s.integer("substeps", allow_none=True),
        average_force=s.boolean("average_force"),
        tracked=s.integer("tracked", low=0),
    )


@dataclass(frozen=True)
class SettlingSphereConfig:
    """A sphere settling from rest in a closed box of viscous fluid (ten Cate et al. 2002).

    Attributes:
        box: (3,) m, the box's inner size (walls at 0 and box on every axis, z up).
        diameter: m; sphere_density: kg/m^3; material: its contact material (density unused).
        start_gap: m, the gap between the sphere's lowest point and the floor at rest.
        fluid_density: kg/m^3; viscosity: dynamic viscosity, Pa s.
        velocity_scale: m/s, the expected peak settling velocity, mapped to fluid.u_lattice.
        resolution: lattice cells per sphere diameter.
        gravity: m/s^2 along -z.
        duration: s.
        output_every: steps between field and body outputs; None: about 10 per run.
    """

    box: tuple[float, float, float]
    diameter: float
    sphere_density: float
    start_gap: float
    fluid_density: float
    viscosity: float
    velocity_scale: float
    resolution: int
    gravity: float
    duration: float
    material: MaterialConfig
    output_every: int | None = None
    name: str = "settling_sphere"
    dimension: int = 3
    kind: str = "coupled"

    @property
    def kinematic_viscosity(self) -> float:
        return self.viscosity / self.fluid_density


def _material(s: Section) -> MaterialConfig:
    return MaterialConfig(
        young=s.positive("young"),
        poisson=s.number("poisson", low=-1.0, high=0.5),
        density=0.0,
        restitution=s.number("restitution", low=0.0, high=1.0),
        friction=s.number("friction", low=0.0, low_open=False),
    )


def _settling_sphere(s: Section) -> SettlingSphereConfig:
    return SettlingSphereConfig(
        box=s.point("box", 3),
        diameter=s.positive("diameter"),
        sphere_density=s.positive("sphere_density"),
        start_gap=s.number("start_gap", low=0.0),
        fluid_density=s.positive("fluid_density"),
        viscosity=s.positive("viscosity"),
        velocity_scale=s.positive("velocity_scale"),
        resolution=s.integer("resolution", low=2),
        gravity=s.number("gravity", low=0.0, low_open=False),
        duration=s.positive("duration"),
        material=_material(s.sub("material")),
        output_every=s.integer("output_every", allow_none=True),
    )


CoupledCaseConfig = SettlingSphereConfig

COUPLED_CASES: dict[str, Callable[[Section], CoupledCaseConfig]] = {
    "settling_sphere": _settling_sphere,
}
