"""Coupled cases: a fluid case (lattice units) plus a scene of bodies (SI) moving in it.

settling_sphere, wet_bounce, dkt and sediment are closed boxes of fluid with spheres
(solver.coupling.box); dkt with a 2D box (configs/case/dkt_2d.yaml) is a closed 2D channel
with two disks (D2Q9, y up);
sediment takes any scene in the ``case=scene`` form (file, generate, materials, bodies).

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
from typing import TYPE_CHECKING

import numpy as np

from kernels.lattices import lattice_by_name
from kernels.neighbor_search import CellGrid
from solver.bodies.cases import GRID_CAPACITY, setup_from_scene
from solver.bodies.scene import scene_from_dict
from solver.bodies.scene_case import scene_of
from solver.coupling.box import (
    FluidBox,
    box_grid_shape,
    build_box,
    check_solid_bodies,
    initial_of,
)
from solver.coupling.case import CoupledCase, SceneCase, scene_source_name
from solver.coupling.config import (
    DktConfig,
    SedimentConfig,
    SettlingSphereConfig,
    SphereArrayConfig,
)
from solver.coupling.step import PsmCoupling
from solver.errors import ConfigError
from solver.fluid.cases.base import Case, check_mach, fluid_setup
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
        # Zick & Homsy drive the flow by a mean pressure gradient G and their F balances it
        # over the whole unit cell, F = G L^3. Driven by a body force instead, the same flow
        # leaves out the linear pressure, whose push on the sphere is G V_sphere (G = rho a):
        # without it K would be low by the factor 1 - c.
        volume = 4.0 / 3.0 * np.pi * info["radius_m"] ** 3
        gradient_force = info["density_kg_m3"] * info["acceleration_m_s2"] * volume
        force = float(drag.mean()) + gradient_force
        factor = force / (6.0 * np.pi * mu * info["radius_m"] * u)
        out = {
            "drag_n": float(drag.mean()),
            "drag_with_pressure_gradient_n": force,
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


# Legendre, Zenit, Daniel & Guiraud 2006 (Chem. Eng. Sci. 61, 3543): e / e_dry = exp(-ST_SCALE / St)
# fitted to the effective restitution that Gondret et al. 2002 (and Joseph et al. 2001) measured
ST_SCALE = 35.0


def restitution_fit(stokes: float) -> float:
    """e / e_dry of a sphere bouncing off a wall in a viscous fluid at Stokes number St."""
    return math.exp(-ST_SCALE / stokes) if stokes > 0 else 0.0


class BounceCase(CoupledCase):
    """Diagnostics of a sphere bouncing off the floor (z = 0): the impact velocity U_in (the
    fastest descent before the first contact), the rebound velocity U_out (the fastest ascent
    between the first contact and the next one), the effective restitution e = U_out / U_in
    over the dry one, the Stokes number of the impact St = rho_s U_in d / (9 mu), and the
    Legendre et al. fit at that St."""

    def diagnostics(self, times: np.ndarray, track: np.ndarray, fluid: dict) -> dict:
        if track.size == 0:
            return {}
        info = self.info
        d = info["diameter_m"]
        gap = track[:, 0, 2] - 0.5 * d
        w = track[:, 0, 5]
        touching = np.flatnonzero(gap <= 0.0)
        if touching.size == 0:
            return {"impacted": False, "min_gap_over_d": float(gap.min() / d)}
        first = int(touching[0])
        u_in = float(-w[: first + 1].min())
        left = np.flatnonzero((np.arange(len(gap)) > first) & (gap > 0.0))
        end = len(gap)
        if left.size:
            again = np.flatnonzero((np.arange(len(gap)) > left[0]) & (gap <= 0.0))
            end = int(again[0]) if again.size else end
        u_out = max(0.0, float(w[first:end].max()))
        stokes = info["sphere_density"] * u_in * d / (9.0 * info["viscosity_pa_s"])
        e_dry = info["dry_restitution"]
        ratio = u_out / u_in / e_dry if u_in > 0 else 0.0
        return {
            "impacted": True,
            "impact_time_s": float(times[first]),
            "impact_velocity_m_s": u_in,
            "rebound_velocity_m_s": u_out,
            "effective_restitution": u_out / u_in if u_in > 0 else 0.0,
            "restitution_ratio": ratio,
            "stokes": stokes,
            "reference_restitution_ratio": restitution_fit(stokes),
            "restitution_ratio_error": ratio - restitution_fit(stokes),
            "rebound_height_over_d": float(max(0.0, gap[first:end].max()) / d),
        }


def _material_of(material, density: float) -> dict:
    return {
        "young": material.young,
        "poisson": material.poisson,
        "restitution": material.restitution,
        "friction": material.friction,
        "density": density,
    }


def _box_of(c, length: float) -> FluidBox:
    return FluidBox(
        box=c.box,
        fluid_density=c.fluid_density,
        viscosity=c.viscosity,
        length=length,
        resolution=c.resolution,
        velocity_scale=c.velocity_scale,
        gravity=c.gravity,
        duration=c.duration,
    )


def settling_sphere_shape(config: RunConfig) -> tuple[int, int, int]:
    c = config.case
    return box_grid_shape(c.box, c.diameter / c.resolution)


def build_settling_sphere(config: RunConfig) -> SettlingSphereCase:
    return _build_falling_sphere(config, SettlingSphereCase)


def build_wet_bounce(config: RunConfig) -> BounceCase:
    return _build_falling_sphere(config, BounceCase)


def _build_falling_sphere(config: RunConfig, cls: type[CoupledCase]) -> CoupledCase:
    """One sphere released from rest above the floor of a closed box (settling_sphere,
    wet_bounce)."""
    c: SettlingSphereConfig = config.case
    radius = 0.5 * c.diameter
    if c.start_gap + c.diameter > c.box[2] or c.diameter > min(c.box[:2]):
        raise ConfigError(
            "case.start_gap", c.start_gap,
            f"<= {c.box[2] - c.diameter:g} m (the sphere must start inside the box {list(c.box)})",
        )  # fmt: skip
    centre = (0.5 * c.box[0], 0.5 * c.box[1], c.start_gap + radius)
    scene = scene_from_dict(
        {
            "materials": {"sphere": _material_of(c.material, c.sphere_density)},
            "bodies": [{"shape": "sphere", "material": "sphere", "radius": radius,
                        "position": list(centre)}],
        },
        key_prefix="case",
    )  # fmt: skip
    parts = build_box(config, c.name, _box_of(c, c.diameter), scene)
    reference = next(
        (
            u
            for rho, mu, u in TEN_CATE.values()
            if math.isclose(rho, c.fluid_density) and math.isclose(mu, c.viscosity)
        ),
        None,
    )
    return parts.case(
        cls, c.name, c.output_every,
        diameter_m=c.diameter, diameter_cells=c.resolution, reference_max_velocity_m_s=reference,
        sphere_density=c.sphere_density, viscosity_pa_s=c.viscosity,
        dry_restitution=c.material.restitution,
    )  # fmt: skip


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
        initial=initial_of(arrays),
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
            "acceleration_m_s2": acceleration,
            "sangani_acrivos_k": k_estimate,
            "tau": c.tau,
        },
    )


KISS_GAP = 0.05  # of the diameter: the spheres "kiss" when their gap first falls below it
TUMBLE_DROP = 0.25  # of the diameter: how far below the leading sphere the trailing one must be


class DktCase(CoupledCase):
    """Diagnostics: the three stages of drafting, kissing and tumbling, timed.

    Drafting: the trailing sphere, in the leading one's wake, settles faster than it (the most
    it gains, in m/s and as a ratio). Kissing: the gap between the surfaces first falls below
    KISS_GAP diameters (the kiss time, and the smallest gap). Tumbling: after the kiss the pair
    turns over, the trailing sphere TUMBLE_DROP diameters below the leading one while both are
    clear of the floor (the tumble time). The vertical is z in 3D and y for the disks of
    dkt_2d (``info["vertical_axis"]``)."""

    def diagnostics(self, times: np.ndarray, track: np.ndarray, fluid: dict) -> dict:
        if track.shape[0] == 0 or track.shape[1] < 2:
            return {}
        d = self.info["diameter_m"]
        up = int(self.info.get("vertical_axis", 2))
        lead, trail = track[:, 0], track[:, 1]
        gap = np.linalg.norm(trail[:, 0:3] - lead[:, 0:3], axis=1) - d
        closest = int(np.argmin(gap))
        out = {
            "min_gap_over_d": float(gap[closest] / d),
            "time_of_min_gap_s": float(times[closest]),
        }
        kissed = np.flatnonzero(gap < KISS_GAP * d)
        before = slice(0, int(kissed[0]) + 1 if kissed.size else len(times))
        # settling speed, trailing - leading
        gain = (-trail[before, 3 + up]) - (-lead[before, 3 + up])
        out["drafting_speed_gain_m_s"] = float(gain.max())
        out["drafting"] = bool(gain.max() > 0.0)
        out["kissed"] = bool(kissed.size)
        if kissed.size:
            out["kiss_time_s"] = float(times[kissed[0]])
            # turned over: the trailing sphere a quarter diameter below the leading one while
            # both are clear of the floor (side by side on the floor is not a tumble)
            clear = np.minimum(lead[:, up], trail[:, up]) > 1.5 * d
            after = np.flatnonzero(
                (np.arange(len(times)) > kissed[0])
                & (trail[:, up] < lead[:, up] - TUMBLE_DROP * d)
                & clear
            )
            out["tumbled"] = bool(after.size)
            if after.size:
                out["tumble_time_s"] = float(times[after[0]])
        else:
            out["tumbled"] = False
        return out


def dkt_shape(config: RunConfig) -> tuple[int, int, int]:
    c = config.case
    return box_grid_shape(c.box, c.diameter / c.resolution)


def build_dkt(config: RunConfig) -> DktCase:
    c: DktConfig = config.case
    if c.dimension == 2:
        return build_dkt_2d(config)
    radius = 0.5 * c.diameter
    scene = scene_from_dict(
        {
            "materials": {"sphere": _material_of(c.material, c.sphere_density)},
            "bodies": [
                {"shape": "sphere", "material": "sphere", "radius": radius,
                 "position": list(c.leading)},
                {"shape": "sphere", "material": "sphere", "radius": radius,
                 "position": list(c.trailing)},
            ],
        },
        key_prefix="case",
    )  # fmt: skip
    parts = build_box(config, "dkt", _box_of(c, c.diameter), scene)
    return parts.case(
        DktCase, "dkt", c.output_every, diameter_m=c.diameter, diameter_cells=c.resolution
    )


def build_dkt_2d(config: RunConfig) -> DktCase:
    """Two disks settling one above the other in a closed 2D channel (D2Q9, y up): the disks
    of the body model held in the plane z = 0 (solver.coupling.box: cylinders of 1 m depth).
    The centres are checked here, naming the case's keys: inside the channel by a radius,
    the disks apart."""
    c: DktConfig = config.case
    radius = 0.5 * c.diameter
    for key, centre in (("case.leading", c.leading), ("case.trailing", c.trailing)):
        if any(
            p - radius < 0.0 or p + radius > side for p, side in zip(centre, c.box, strict=True)
        ):
            raise ConfigError(
                key, list(centre),
                f"a centre at least the radius {radius:g} m inside the channel "
                f"[0, {c.box[0]:g}] x [0, {c.box[1]:g}] m",
            )  # fmt: skip
    apart = math.dist(c.leading, c.trailing)
    if apart <= c.diameter:
        raise ConfigError(
            "case.trailing", list(c.trailing),
            f"a centre more than a diameter {c.diameter:g} m from case.leading (disks "
            f"overlap: {apart:.4g} m apart)",
        )  # fmt: skip
    scene = scene_from_dict(
        {
            "materials": {"sphere": _material_of(c.material, c.sphere_density)},
            "bodies": [
                {"shape": "sphere", "material": "sphere", "radius": radius,
                 "position": [*c.leading, 0.0]},
                {"shape": "sphere", "material": "sphere", "radius": radius,
                 "position": [*c.trailing, 0.0]},
            ],
        },
        key_prefix="case",
    )  # fmt: skip
    parts = build_box(config, "dkt_2d", _box_of(c, c.diameter), scene)
    return parts.case(
        DktCase, "dkt_2d", c.output_every, diameter_m=c.diameter, diameter_cells=c.resolution,
        vertical_axis=1,
    )  # fmt: skip


class SedimentCase(SceneCase):
    """Spheres settling onto the floor of a closed box."""


def _sediment_length(c: SedimentConfig) -> float:
    """The smallest sphere (or clump member) diameter of the scene (m): resolution counts
    cells across it."""
    scene = scene_of(c)
    check_solid_bodies(scene)
    return 2.0 * min(r for b in scene.bodies for r, _ in b.members())


def sediment_shape(config: RunConfig) -> tuple[int, int, int]:
    c = config.case
    return box_grid_shape(c.box, _sediment_length(c) / c.resolution)


def build_sediment(config: RunConfig) -> SedimentCase:
    c: SedimentConfig = config.case
    scene = scene_of(c)
    length = _sediment_length(c)
    parts = build_box(config, "sediment", _box_of(c, length), scene, c.wall_material)
    return parts.case(SedimentCase, "sediment", c.output_every, source=scene_source_name(c))


BUILDERS = {
    "settling_sphere": build_settling_sphere,
    "wet_bounce": build_wet_bounce,
    "sphere_array": build_sphere_array,
    "dkt": build_dkt,
    "sediment": build_sediment,
}
GRID_SHAPES = {
    "settling_sphere": settling_sphere_shape,
    "wet_bounce": settling_sphere_shape,
    "sphere_array": sphere_array_shape,
    "dkt": dkt_shape,
    "sediment": sediment_shape,
}


def build_coupled_case(config: RunConfig) -> CoupledCase:
    """Build the configured coupled case, or the fluid case with the bodies of
    ``coupling.scene``; ConfigError for values the physics rejects and for a grid that cannot
    fit in the memory available (checked before any array is allocated)."""
    if getattr(config.case, "kind", "fluid") == "fluid":
        from solver.coupling.in_fluid import build_scene_in_fluid

        return build_scene_in_fluid(config)
    check_fits(config, GRID_SHAPES[config.case.name])
    return BUILDERS[config.case.name](config)
