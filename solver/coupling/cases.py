"""Coupled cases: a fluid case (lattice units) plus a scene of bodies (SI) moving in it.

A case hands the coupled model a fluid ``Case`` (solver.fluid.cases.base), the bodies' scene
as a ``BodySetup`` and their initial ``Bodies``, and the ``PsmCoupling`` that joins them. The
fluid's walls are planes for the bodies' contacts; gravity acts on the bodies, and the
buoyancy -rho_f V g with it (the fluid carries no hydrostatic pressure).

settling_sphere: ten Cate, Nieuwstad, Derksen & Van den Akker 2002 (Phys. Fluids 14, 4012), a
nylon sphere (d = 15 mm, 1120 kg/m^3) settling from rest in a 100 x 100 x 160 mm box of
silicone oil. Measured maximum settling velocities (their Table 2, as waLBerla's benchmark
SettlingSphereInBox uses them): E1 0.035986, E2 0.05718, E3 0.087269, E4 0.12224 m/s.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from kernels.lattices import lattice_by_name
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bodies.cases import GRID_CAPACITY, initial_bodies, setup_from_scene
from solver.bodies.packings import check_overlaps
from solver.bodies.scene import scene_from_dict
from solver.bodies.step import RAYLEIGH_FRACTION, BodySetup, stable_time_step
from solver.coupling.config import CouplingConfig, SettlingSphereConfig, SphereArrayConfig
from solver.coupling.step import PsmCoupling
from solver.errors import ConfigError
from solver.fluid.cases.base import Case, check_mach, fluid_setup, lattice_scales
from solver.fluid.memory import check_fits
from solver.fluid.setup import BodyForce
from solver.fluid.units import UnitConverter

if TYPE_CHECKING:
    from solver.config import RunConfig

# the ten Cate experiments (fluid density kg/m^3, dynamic viscosity Pa s) -> maximum settling
# velocity m/s (ten Cate et al. 2002, Tables 1-2)
TEN_CATE = {
    "E1": (970.0, 0.373, 0.035986),
    "E2": (965.0, 0.212, 0.05718),
    "E3": (962.0, 0.113, 0.087269),
    "E4": (960.0, 0.058, 0.12224),
}
SKIN_FRACTION = 0.1  # neighbour-search skin, of the smallest radius (one body step moves far less)


@dataclass(frozen=True)
class CoupledCase:
    """A built coupled case.

    Attributes:
        name: case name.
        fluid: the fluid part (set-up, units, initial fields, origin, Re, Mach).
        bodies: the rigid-body set-up (dt = fluid dt / substeps).
        initial: the bodies at time 0 (float64).
        coupling: the static coupling parameters.
        default_steps: fluid steps when the config gives none.
        output_every: fluid steps between outputs, or None.
        info: scalars for run.json.
    """

    name: str
    fluid: Case
    bodies: BodySetup
    initial: Bodies = field(repr=False)
    coupling: PsmCoupling = field(repr=False)
    default_steps: int = 1
    output_every: int | None = None
    info: dict = field(default_factory=dict)

    def diagnostics(self, times: np.ndarray, track: np.ndarray, fluid: dict) -> dict:
        """Case values for run.json from the tracked bodies' history (times (k,) s, track
        (k, tracked, 9) SI position, velocity, hydrodynamic force) and the fluid case's own
        diagnostics ``fluid``."""
        return {}


class SettlingSphereCase(CoupledCase):
    """Diagnostics: the maximum settling velocity, and the one ten Cate measured."""

    def diagnostics(self, times: np.ndarray, track: np.ndarray, fluid: dict) -> dict:
        if track.size == 0:
            return {}
        w = -track[:, 0, 5]  # settling velocity, m/s (down is positive)
        gap = track[:, 0, 2] - 0.5 * self.info["diameter_m"]
        peak = int(np.argmax(w))
        out = {
            "max_settling_velocity_m_s": float(w[peak]),
            "time_of_max_s": float(times[peak]),
            "final_gap_m": float(gap[-1]),
            "reynolds_max": float(w[peak] * self.info["diameter_m"] / self.info["nu_m2_s"]),
        }
        reference = self.info.get("reference_max_velocity_m_s")
        if reference is not None:
            out["reference_max_velocity_m_s"] = reference
            out["max_velocity_error"] = float(w[peak] / reference - 1.0)
        return out


def sangani_acrivos_k(c: float) -> float:
    """Drag factor K of a simple-cubic array of spheres at solid fraction c (Sangani & Acrivos
    1982, Int. J. Multiphase Flow 8, 343, the series for 1/K in chi = c^(1/3); within 1 % of
    Zick & Homsy up to c ~ 0.2)."""
    chi = c ** (1.0 / 3.0)
    return 1.0 / (
        1.0 - 1.7601 * chi + chi**3 - 1.5593 * chi**6 + 3.9799 * chi**8 - 3.0734 * chi**10
    )


# Zick & Homsy 1982 (J. Fluid Mech. 115, 13), Table 2, simple cubic: c -> K
ZICK_HOMSY = {0.027: 2.008, 0.064: 2.810, 0.125: 4.292, 0.216: 7.442}
STEADY_WINDOW = 0.1  # the last 10 % of the steps: the steady drag (and how steady it is)


class SuperficialVelocityCase(Case):
    """The fluid part of the sphere array: the superficial velocity U, the mass flux through
    the face of the unit cell (node plane x index 0, which no sphere touches) over its area
    and the mean density. Steady flow carries the same flux through every plane; inside the
    spheres PSM's pre-collision velocity is not the solid's, so a volume mean would not do."""

    def diagnostics(self, data) -> dict:
        rho = data.density
        flux = float(np.mean(rho[0] * data.velocity[0][0]) / np.mean(rho))
        return {"superficial_velocity_m_s": flux * self.units.velocity_scale}


class SphereArrayCase(CoupledCase):
    """Diagnostics: the drag factor K = F / (6 pi mu a U) against Zick & Homsy."""

    def diagnostics(self, times: np.ndarray, track: np.ndarray, fluid: dict) -> dict:
        if track.size == 0 or "superficial_velocity_m_s" not in fluid:
            return {}
        k = max(1, int(STEADY_WINDOW * len(track)))
        drag = track[-k:, 0, 6]
        u = fluid["superficial_velocity_m_s"]
        info = self.info
        mu = info["viscosity_m2_s"] * info["density_kg_m3"]
        factor = float(drag.mean() / (6.0 * np.pi * mu * info["radius_m"] * u))
        out = {
            "drag_n": float(drag.mean()),
            "drag_unsteadiness": float(np.ptp(drag) / abs(drag.mean())),
            "drag_factor_k": factor,
            "reynolds": 2.0 * info["radius_m"] * u / info["viscosity_m2_s"],
            "sangani_acrivos_k": info["sangani_acrivos_k"],
        }
        reference = ZICK_HOMSY.get(round(info["concentration"], 3))
        if reference is not None:
            out["zick_homsy_k"] = reference
            out["drag_factor_error"] = factor / reference - 1.0
        return out


def wall_planes(box: tuple[float, ...]) -> list[dict]:
    """The six faces of [0, box] as scene planes (normals inwards)."""
    planes = []
    for axis in range(3):
        for side, point in (("low", 0.0), ("high", box[axis])):
            normal = [0.0, 0.0, 0.0]
            normal[axis] = 1.0 if side == "low" else -1.0
            at = [0.0, 0.0, 0.0]
            at[axis] = point
            planes.append({"shape": "plane", "material": "wall", "point": at, "normal": normal})
    return planes


def lubrication_settings(coupling: CouplingConfig, dx: float, radius: float) -> tuple:
    """(cutoff m, min gap m) of the lubrication correction; (0, 0) when it is off."""
    if not coupling.lubrication:
        return 0.0, 0.0
    return coupling.lubrication_cutoff * dx, coupling.lubrication_min_gap * radius


def lubrication_step(mass: float, radius: float, viscosity: float, cutoff: float, min_gap: float):
    """The largest body step with c(h_min) dt / m <= 1/2 (the explicit damping stays stable)."""
    if cutoff <= 0.0:
        return math.inf
    c = 6.0 * math.pi * viscosity * radius**2 * (1.0 / min_gap - 1.0 / cutoff)
    return 0.5 * mass / c if c > 0 else math.inf


def _substeps(coupling: CouplingConfig, fluid_dt: float, stable: float) -> int:
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


def grid_shape(config: RunConfig) -> tuple[int, int, int]:
    """(nx + 2, ny + 2, nz + 2): the box in cells of case.diameter / case.resolution, and one
    solid layer on every face."""
    c: SettlingSphereConfig = config.case
    dx = c.diameter / c.resolution
    counts = []
    for axis, size in enumerate(c.box):
        n = round(size / dx)
        if n < 4 or abs(n * dx - size) > 1e-6 * size:
            raise ConfigError(
                "case.box", list(c.box),
                f"sides that are whole numbers (>= 4) of cells of {dx:.4g} m",
                hint=f"axis {axis}: {size / dx:.3f} cells (case.diameter / case.resolution)",
            )  # fmt: skip
        counts.append(n + 2)
    return tuple(counts)


def build_settling_sphere(config: RunConfig) -> SettlingSphereCase:
    c: SettlingSphereConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    nu = c.kinematic_viscosity
    scales = lattice_scales(
        fluid, c.diameter, c.resolution, c.velocity_scale, nu, c.fluid_density,
        "case.viscosity (nu = mu / fluid_density)",
    )  # fmt: skip
    units = scales.units
    dx = units.dx
    counts = [n - 2 for n in grid_shape(config)]
    radius = 0.5 * c.diameter
    centre = (0.5 * c.box[0], 0.5 * c.box[1], c.start_gap + radius)
    if c.start_gap + c.diameter > c.box[2] or c.diameter > min(c.box[:2]):
        raise ConfigError(
            "case.start_gap", c.start_gap,
            f"<= {c.box[2] - c.diameter:g} m (the sphere must start inside the box {list(c.box)})",
        )  # fmt: skip
    shape = tuple(n + 2 for n in counts)  # one solid layer on every face
    solid = np.ones(shape, dtype=bool)
    solid[1:-1, 1:-1, 1:-1] = False
    setup = fluid_setup(fluid, lattice, shape, scales.omega, solid=solid)
    origin = (-dx, -dx, -dx)  # fluid node i at (i - 1/2) dx: half-way walls at 0 and box
    default_steps = units.steps_for(c.duration)
    fluid_case = Case(
        name="settling_sphere",
        setup=setup,
        units=units,
        density=np.ones(shape),
        velocity=np.zeros((3,) + shape),
        default_steps=default_steps,
        origin=origin,
        mach=scales.mach,
        reynolds=c.velocity_scale * c.diameter / nu,
    )

    material = {
        "young": c.material.young,
        "poisson": c.material.poisson,
        "restitution": c.material.restitution,
        "friction": c.material.friction,
    }
    scene = scene_from_dict(
        {
            "materials": {
                "sphere": {**material, "density": c.sphere_density},
                "wall": {**material, "density": c.sphere_density},
            },
            "bodies": [
                *wall_planes(c.box),
                {"shape": "sphere", "material": "sphere", "radius": radius,
                 "position": list(centre)},
            ],
        },
        key_prefix="case",
    )  # fmt: skip
    check_overlaps(scene, key_prefix="case")
    arrays, _ = scene.arrays()
    gravity = (0.0, 0.0, -c.gravity)
    cutoff, min_gap = lubrication_settings(config.coupling, dx, radius)
    skin = max(SKIN_FRACTION * radius, 1.1 * cutoff)  # the pair table covers the cutoff

    def setup_for(dt: float) -> BodySetup:
        cell = 2.0 * radius + skin
        grid = CellGrid.covering((0.0, 0.0, 0.0), c.box, cell, GRID_CAPACITY, GRID_CAPACITY)
        return setup_from_scene(scene, grid, dt, skin, gravity)

    stable = min(
        stable_time_step(setup_for(1e-300), arrays.mass),
        lubrication_step(float(arrays.mass.min()), radius, c.viscosity, cutoff, min_gap),
    )
    substeps = _substeps(config.coupling, units.dt, stable)
    bodies = setup_for(units.dt / substeps)
    coupling = PsmCoupling(
        bodies=bodies,
        substeps=substeps,
        dx=dx,
        dt=units.dt,
        origin=origin,
        fluid_density=c.fluid_density,
        average_force=config.coupling.average_force,
        tracked=config.coupling.tracked,
        weighting=config.coupling.weighting,
        viscosity=c.viscosity,
        lubrication_cutoff=cutoff,
        lubrication_min_gap=min_gap,
    )
    reference = next(
        (
            u
            for rho, mu, u in TEN_CATE.values()
            if math.isclose(rho, c.fluid_density) and math.isclose(mu, c.viscosity)
        ),
        None,
    )
    return SettlingSphereCase(
        name="settling_sphere",
        fluid=fluid_case,
        bodies=bodies,
        initial=_initial_bodies(arrays),
        coupling=coupling,
        default_steps=default_steps,
        output_every=c.output_every,
        info={
            "diameter_m": c.diameter,
            "diameter_cells": c.resolution,
            "nu_m2_s": nu,
            "substeps": substeps,
            "lubrication_cutoff_m": cutoff,
            "lubrication_min_gap_m": min_gap,
            "body_dt_s": units.dt / substeps,
            "stable_body_dt_s": stable,
            "rayleigh_fraction": RAYLEIGH_FRACTION,
            "reference_max_velocity_m_s": reference,
        },
    )


def _initial_bodies(arrays) -> Bodies:
    """The scene's bodies; float64 where x64 is on, else the fluid's float32 (the coupled model
    casts them to the fluid's dtype), without jax's warning about the truncation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return initial_bodies(arrays)


def sphere_array_shape(config: RunConfig) -> tuple[int, int, int]:
    n = config.case.resolution
    return (n, n, n)


def build_sphere_array(config: RunConfig) -> SphereArrayCase:
    c: SphereArrayConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    n = c.resolution
    dx = c.length / n
    radius = (3.0 * c.concentration / (4.0 * np.pi)) ** (1.0 / 3.0) * c.length
    if radius / dx < 2.0:
        raise ConfigError(
            "case.resolution", n, f">= {math.ceil(2.0 * c.length / radius)} (the sphere "
            f"radius is {radius / dx:.2f} cells; PSM needs at least 2)",
        )  # fmt: skip
    nu_lattice = (c.tau - 0.5) / 3.0
    dt = nu_lattice * dx**2 / c.viscosity
    units = UnitConverter(dx=dx, dt=dt, rho0=c.density)
    target = c.reynolds * c.viscosity / (2.0 * radius)  # superficial velocity, m/s
    k_estimate = sangani_acrivos_k(c.concentration)
    drag = 6.0 * np.pi * c.density * c.viscosity * radius * target * k_estimate
    # the force on the fluid balances the drag: per unit mass of the fluid outside the sphere
    acceleration = drag / (c.density * c.length**3 * (1.0 - c.concentration))
    mach = check_mach(units.to_lattice_velocity(target), fluid)
    setup = fluid_setup(
        fluid, lattice, (n, n, n), 1.0 / c.tau,
        body_force=BodyForce(constant=(units.to_lattice_acceleration(acceleration), 0.0, 0.0)),
    )  # fmt: skip
    duration = c.duration * c.length**2 / c.viscosity
    steps = units.steps_for(duration)
    fluid_case = SuperficialVelocityCase(
        name="sphere_array",
        setup=setup,
        units=units,
        density=np.ones((n, n, n)),
        velocity=np.zeros((3, n, n, n)),
        default_steps=steps,
        origin=(0.0, 0.0, 0.0),
        mach=mach,
        reynolds=c.reynolds,
    )
    half = 0.5 * c.length
    scene = scene_from_dict(
        {
            "materials": {"sphere": {"young": 1e9, "poisson": 0.3, "density": 1000.0,
                                     "restitution": 0.5, "friction": 0.3}},
            "bodies": [{"shape": "sphere", "material": "sphere", "radius": radius,
                        "position": [half, half, half], "fixed": True}],
        },
        key_prefix="case",
    )  # fmt: skip
    arrays, _ = scene.arrays()
    grid = CellGrid.covering((0.0,) * 3, (c.length,) * 3, 2.2 * radius, GRID_CAPACITY, 1)
    bodies = setup_from_scene(scene, grid, dt, 0.1 * radius, (0.0, 0.0, 0.0))
    coupling = PsmCoupling(
        bodies=bodies, substeps=1, dx=dx, dt=dt, origin=(0.0, 0.0, 0.0),
        fluid_density=c.density, average_force=config.coupling.average_force,
        tracked=config.coupling.tracked, weighting=config.coupling.weighting,
    )  # fmt: skip
    return SphereArrayCase(
        name="sphere_array",
        fluid=fluid_case,
        bodies=bodies,
        initial=_initial_bodies(arrays),
        coupling=coupling,
        default_steps=steps,
        output_every=c.output_every,
        info={
            "concentration": c.concentration,
            "radius_m": radius,
            "radius_cells": radius / dx,
            "viscosity_m2_s": c.viscosity,
            "density_kg_m3": c.density,
            "target_velocity_m_s": target,
            "sangani_acrivos_k": k_estimate,
            "tau": c.tau,
        },
    )


BUILDERS = {"settling_sphere": build_settling_sphere, "sphere_array": build_sphere_array}
GRID_SHAPES = {"settling_sphere": grid_shape, "sphere_array": sphere_array_shape}


def build_coupled_case(config: RunConfig) -> CoupledCase:
    """Build the configured coupled case; ConfigError for values the physics rejects and for a
    grid that cannot fit in the memory available (checked before any array is allocated)."""
    check_fits(config, GRID_SHAPES[config.case.name])
    return BUILDERS[config.case.name](config)
