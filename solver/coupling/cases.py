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
from solver.coupling.config import CouplingConfig, SettlingSphereConfig
from solver.coupling.step import PsmCoupling
from solver.errors import ConfigError
from solver.fluid.cases.base import Case, fluid_setup, lattice_scales
from solver.fluid.memory import check_fits

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

    def diagnostics(self, times: np.ndarray, track: np.ndarray) -> dict:
        """Case values for run.json from the tracked bodies' history (times (k,) s, track
        (k, tracked, 9) SI position, velocity, hydrodynamic force)."""
        return {}


class SettlingSphereCase(CoupledCase):
    """Diagnostics: the maximum settling velocity, and the one ten Cate measured."""

    def diagnostics(self, times: np.ndarray, track: np.ndarray) -> dict:
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
    skin = SKIN_FRACTION * radius

    def setup_for(dt: float) -> BodySetup:
        cell = 2.0 * radius + skin
        grid = CellGrid.covering((0.0, 0.0, 0.0), c.box, cell, GRID_CAPACITY, GRID_CAPACITY)
        return setup_from_scene(scene, grid, dt, skin, gravity)

    stable = stable_time_step(setup_for(1e-300), arrays.mass)
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


BUILDERS = {"settling_sphere": build_settling_sphere}
GRID_SHAPES = {"settling_sphere": grid_shape}


def build_coupled_case(config: RunConfig) -> CoupledCase:
    """Build the configured coupled case; ConfigError for values the physics rejects and for a
    grid that cannot fit in the memory available (checked before any array is allocated)."""
    check_fits(config, GRID_SHAPES[config.case.name])
    return BUILDERS[config.case.name](config)
