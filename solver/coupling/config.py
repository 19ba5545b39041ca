"""The ``coupling`` section and the coupled cases' ``case`` sections (typed, validated).

``coupling.method`` chooses how bodies and fluid exchange momentum: ``none`` (default: no
bodies in the fluid) or ``psm``, the partially saturated cells method (kernels/coupling.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from solver.bodies.config import MaterialConfig, scene_source
from solver.errors import ConfigError
from solver.sections import Section

COUPLING_METHODS = ("none", "psm")
BODY_PLACEMENTS = ("replicated", "owned")  # coupling.bodies
CAPACITY_KEYS = ("capacity", "ghost_capacity", "migration_capacity", "cell_capacity",
                 "max_partners")  # fmt: skip
PSM_WEIGHTINGS = ("noble_torczynski", "fraction")  # kernels.coupling.WEIGHTINGS


@dataclass(frozen=True)
class FluidSceneConfig:
    """Bodies added to a fluid case (``coupling.scene``): the scene keys of ``case=scene``
    (file, materials, bodies, generate, extra_bodies), the gravity on them (m/s^2; None: 9.81
    down the grid's last axis, -z in 3D and -y in 2D) and the material of the fluid's walls as
    contact planes (None: the first material)."""

    file: str | None
    materials: dict
    bodies: tuple
    generate: dict | None
    extra_bodies: tuple
    gravity: tuple[float, float, float] | None = None
    wall_material: str | None = None


def parse_fluid_scene(s: Section) -> FluidSceneConfig | None:
    """The ``coupling.scene`` section; None when it names no bodies (no file, no generator, no
    bodies listed)."""
    data = s.data
    if data.get("file") is None and data.get("generate") is None and not data.get("bodies"):
        if data.get("extra_bodies"):
            raise ConfigError(
                s.key("extra_bodies"), data["extra_bodies"],
                f"empty without {s.key('file')} or {s.key('generate')} (use {s.key('bodies')})",
            )  # fmt: skip
        return None
    wall = data.get("wall_material")
    if wall is not None and not isinstance(wall, str):
        raise ConfigError(s.key("wall_material"), wall, "null or the name of a material")
    gravity = None if data.get("gravity") is None else s.point("gravity", 3)
    return FluidSceneConfig(**scene_source(s), gravity=gravity, wall_material=wall)


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
        weighting: PSM's weight of the solid operator in a partly covered cell.
        lubrication: add the normal lubrication force the grid cannot resolve to gaps below
            ``lubrication_cutoff`` cells (kernels.coupling.lubrication_coefficient).
        lubrication_cutoff: cells (2/3: waLBerla's normal cutoff).
        lubrication_min_gap: fraction of the sphere radius, the smallest gap it uses.
        scene: bodies added to a fluid case (the coupled cases carry their own); None: none.
        bodies: "replicated" (every shard of the fluid's mesh holds every body) or "owned"
            (each shard owns the bodies whose centre its block holds; ghosts near its faces).
        capacities: with owned bodies, buffer sizes per shard by ``CAPACITY_KEYS`` (None: sized
            from the scene, solver.distributed.bodies.in_fluid.plan_fluid_layout).
    """

    method: str = "none"
    substeps: int | None = None
    average_force: bool = True
    tracked: int = 8
    weighting: str = "noble_torczynski"
    lubrication: bool = True
    lubrication_cutoff: float = 2.0 / 3.0
    lubrication_min_gap: float = 0.0007
    scene: FluidSceneConfig | None = None
    bodies: str = "replicated"
    capacities: dict = dataclasses.field(default_factory=dict)

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
        weighting=s.choice("weighting", PSM_WEIGHTINGS),
        lubrication=s.boolean("lubrication"),
        lubrication_cutoff=s.number("lubrication_cutoff", low=0.0, high=5.0),
        lubrication_min_gap=s.number("lubrication_min_gap", low=0.0, high=1.0),
        scene=parse_fluid_scene(s.sub("scene")) if s.data.get("scene") is not None else None,
        bodies=s.choice("bodies", BODY_PLACEMENTS) if "bodies" in s.data else "replicated",
        capacities={
            name: s.integer(name, allow_none=True) for name in CAPACITY_KEYS if name in s.data
        },
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


@dataclass(frozen=True)
class SphereArrayConfig:
    """Stokes flow through a periodic simple-cubic array of fixed spheres (Zick & Homsy 1982).

    Attributes:
        length: m, side of the periodic unit cell (one sphere at its centre).
        concentration: solid volume fraction c = (4/3) pi a^3 / length^3, < pi/6 (touching).
        resolution: cells per side of the unit cell.
        viscosity: kinematic, m^2/s; density: kg/m^3.
        reynolds: target Reynolds number 2 a U / nu of the superficial velocity U (Stokes
            flow for << 1); the driving force is set from it.
        tau: relaxation time of the fluid (fixes dt with the viscosity and dx).
        duration: in viscous times length^2 / viscosity (the slowest mode decays by
            exp(-4 pi^2) per unit).
    """

    length: float
    concentration: float
    resolution: int
    viscosity: float
    density: float
    reynolds: float
    tau: float
    duration: float
    output_every: int | None = None
    name: str = "sphere_array"
    dimension: int = 3
    kind: str = "coupled"


def _sphere_array(s: Section) -> SphereArrayConfig:
    return SphereArrayConfig(
        length=s.positive("length"),
        concentration=s.number("concentration", low=0.0, high=0.5235),
        resolution=s.integer("resolution", low=8),
        viscosity=s.positive("viscosity"),
        density=s.positive("density"),
        reynolds=s.positive("reynolds"),
        tau=s.number("tau", low=0.5, high=5.0),
        duration=s.positive("duration"),
        output_every=s.integer("output_every", allow_none=True),
    )


@dataclass(frozen=True)
class DktConfig:
    """Drafting, kissing and tumbling of two spheres settling in a closed box (Glowinski, Pan,
    Hesla, Joseph & Periaux 2001, J. Comput. Phys. 169, 363, their 3D case), or of two disks
    in a 2D channel (their 2D case: a box of two sides makes ``dimension`` 2, which needs a 2D
    lattice; configs/case/dkt_2d.yaml, ``case=dkt_2d``).

    Attributes:
        box: (3,) m, inner size (walls at 0 and box, z up); 2D: (2,) (width, height: y up).
        diameter: m, both spheres; sphere_density, fluid_density: kg/m^3; viscosity: Pa s.
        leading, trailing: (3,) m ((2,) in 2D), the centres at rest (the leading one lower).
        resolution: cells per diameter; velocity_scale: m/s -> fluid.u_lattice.
        gravity: m/s^2 along -z; duration: s; material: contact material (density unused).
    """

    box: tuple[float, ...]
    diameter: float
    sphere_density: float
    fluid_density: float
    viscosity: float
    leading: tuple[float, ...]
    trailing: tuple[float, ...]
    velocity_scale: float
    resolution: int
    gravity: float
    duration: float
    material: MaterialConfig
    output_every: int | None = None
    name: str = "dkt"
    dimension: int = 3
    kind: str = "coupled"

    @property
    def kinematic_viscosity(self) -> float:
        return self.viscosity / self.fluid_density


def _dkt(s: Section) -> DktConfig:
    """``case=dkt`` (3D) and ``case=dkt_2d`` (the same case with a box of two sides: disks in a
    2D channel, y up; points (x, y))."""
    box = s.data.get("box")
    d = 2 if isinstance(box, list | tuple) and len(box) == 2 else 3
    leading, trailing = s.point("leading", d), s.point("trailing", d)
    up = "yz"[d - 2]
    if trailing[d - 1] <= leading[d - 1]:
        raise ConfigError(
            s.key("trailing"), list(trailing),
            f"a centre above case.leading ({up} > {leading[d - 1]:g} m)",
        )  # fmt: skip
    return DktConfig(
        box=s.point("box", d),
        diameter=s.positive("diameter"),
        sphere_density=s.positive("sphere_density"),
        fluid_density=s.positive("fluid_density"),
        viscosity=s.positive("viscosity"),
        leading=leading,
        trailing=trailing,
        velocity_scale=s.positive("velocity_scale"),
        resolution=s.integer("resolution", low=2),
        gravity=s.number("gravity", low=0.0, low_open=False),
        duration=s.positive("duration"),
        material=_material(s.sub("material")),
        output_every=s.integer("output_every", allow_none=True),
        dimension=d,
    )


@dataclass(frozen=True)
class SedimentConfig:
    """Spheres of any scene (the ``case=scene`` keys: file, generate, materials, bodies,
    extra_bodies) settling in a closed box of viscous fluid onto its floor.

    Attributes:
        box: (3,) m, inner size (walls at 0 and box, z up); every sphere must start inside.
        fluid_density: kg/m^3; viscosity: Pa s.
        resolution: cells per diameter of the smallest sphere.
        velocity_scale: m/s, the expected fastest settling -> fluid.u_lattice.
        gravity: m/s^2 along -z; duration: s.
        wall_material: the scene material of the box walls (None: the first material).
    """

    file: str | None
    materials: dict
    bodies: tuple
    generate: dict | None
    extra_bodies: tuple
    box: tuple[float, float, float]
    fluid_density: float
    viscosity: float
    resolution: int
    velocity_scale: float
    gravity: float
    duration: float
    wall_material: str | None = None
    output_every: int | None = None
    name: str = "sediment"
    dimension: int = 3
    kind: str = "coupled"

    @property
    def kinematic_viscosity(self) -> float:
        return self.viscosity / self.fluid_density


def _sediment(s: Section) -> SedimentConfig:
    wall = s.data.get("wall_material")
    if wall is not None and not isinstance(wall, str):
        raise ConfigError(s.key("wall_material"), wall, "null or the name of a case material")
    return SedimentConfig(
        **scene_source(s),
        box=s.point("box", 3),
        fluid_density=s.positive("fluid_density"),
        viscosity=s.positive("viscosity"),
        resolution=s.integer("resolution", low=2),
        velocity_scale=s.positive("velocity_scale"),
        gravity=s.number("gravity", low=0.0, low_open=False),
        duration=s.positive("duration"),
        wall_material=wall,
        output_every=s.integer("output_every", allow_none=True),
    )


def _wet_bounce(s: Section) -> SettlingSphereConfig:
    """``case=wet_bounce``: a sphere falling onto the floor (Gondret et al. 2002), the settling
    sphere's keys."""
    return dataclasses.replace(_settling_sphere(s), name="wet_bounce")


CoupledCaseConfig = SettlingSphereConfig | SphereArrayConfig | DktConfig | SedimentConfig

COUPLED_CASES: dict[str, Callable[[Section], CoupledCaseConfig]] = {
    "settling_sphere": _settling_sphere,
    "wet_bounce": _wet_bounce,
    "sphere_array": _sphere_array,
    "dkt": _dkt,
    "sediment": _sediment,
}


def has_bodies_in_fluid(config) -> bool:
    """Whether a run config moves bodies in the fluid: a coupled case, or a fluid case with
    bodies in ``coupling.scene``."""
    return getattr(config.case, "kind", "fluid") == "coupled" or config.coupling.scene is not None
