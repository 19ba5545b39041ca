"""Decaying Taylor-Green vortex array in a periodic box (2D, or 3D on a 3D lattice).

Exact solutions from ``fluid.analytic``: in 2D the vortex array; on a 3D lattice the same array
extruded along z (variant ``vortex``) or the fully 3D Arnold-Beltrami-Childress flow (variant
``beltrami``). The box [0, L)^d is periodic with nodes at (i + 0.5) dx; the initial density
carries the analytic pressure, rho = 1 + p / (rho0 c^2 c_s^2) in lattice units.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from kernels.lattices import lattice_by_name
from solver.fluid import analytic
from solver.fluid.cases.base import (
    Case,
    RunData,
    fluid_setup,
    lattice_scales,
    relative_l2,
)
from solver.fluid.config import TaylorGreenConfig

if TYPE_CHECKING:
    from solver.config import RunConfig


class TaylorGreenCase(Case):
    """Diagnostics: relative L2 velocity error against the analytic decay at the final time."""

    def exact(self, time: float) -> tuple[np.ndarray, np.ndarray]:
        """Analytic velocity (d, *shape) in m/s and pressure (*shape) in Pa at ``time`` s."""
        return self.exact_fields(
            self.info["config"], self.setup.lattice.d, self.coordinates(), time
        )

    @staticmethod
    def exact_fields(
        c: TaylorGreenConfig, dimension: int, coordinates: list[np.ndarray], time: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Analytic velocity (d, *shape) and pressure on the node coordinates (m)."""
        grids = np.meshgrid(*coordinates, indexing="ij")
        args = (time, c.u0, c.viscosity, c.length, c.density)
        if dimension == 2:
            ux, uy, p = analytic.taylor_green_2d(*grids, *args)
            return np.stack([ux, uy]), p
        fn = analytic.beltrami_abc if c.variant == "beltrami" else analytic.taylor_green_3d
        ux, uy, uz, p = fn(*grids, *args)
        return np.stack([ux, uy, uz]), p

    def diagnostics(self, data: RunData) -> dict:
        time = self.units.to_physical_time(data.steps)
        exact, _ = self.exact(time)
        measured = self.units.to_physical_velocity(data.velocity)
        peak0 = float(np.max(np.abs(self.exact(0.0)[0])))
        return {
            "time_s": time,
            "velocity_l2_error": relative_l2(measured, exact),
            "velocity_max_measured": float(np.max(np.abs(measured))),
            "velocity_max_exact": float(np.max(np.abs(exact))),
            "decay_measured": float(np.max(np.abs(measured))) / peak0,
            "decay_exact": float(np.max(np.abs(exact))) / peak0,
        }


def grid_shape(config: RunConfig) -> tuple[int, ...]:
    """(n,) * d: the periodic box, n cells per side on the lattice's d axes."""
    return (config.case.resolution,) * config.fluid.dimension


def build(config: RunConfig) -> TaylorGreenCase:
    c: TaylorGreenConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    # the velocity scale is the peak speed of the continuous initial field (u0 for the vortex,
    # about 2.4 u0 for the Beltrami flow, found on a fixed fine probe grid so that it does not
    # depend on the resolution), so that fluid.u_lattice is the peak lattice velocity
    peak = c.u0
    if lattice.d == 3 and c.variant == "beltrami":
        nodes = np.linspace(0.0, c.length, 65)
        probe = TaylorGreenCase.exact_fields(c, 3, [nodes] * 3, 0.0)[0]
        peak = float(np.max(np.sqrt(np.sum(probe**2, axis=0))))
    scales = lattice_scales(fluid, c.length, c.resolution, peak, c.viscosity, c.density)
    units, omega, mach = scales.units, scales.omega, scales.mach
    shape = grid_shape(config)
    setup = fluid_setup(
        fluid,
        lattice,
        shape,
        omega,
    )
    case = TaylorGreenCase(
        name="taylor_green",
        setup=setup,
        units=units,
        density=np.ones(shape),
        velocity=np.zeros((lattice.d,) + shape),
        default_steps=units.steps_for(c.duration),
        origin=(0.0,) * lattice.d,
        mach=mach,
        reynolds=c.u0 * c.length / c.viscosity,
        info={"config": c, "peak_speed_m_s": peak},
    )
    u, p = case.exact(0.0)
    return dataclasses.replace(
        case,
        density=1.0 + units.pressure_to_lattice_density(p),
        velocity=units.to_lattice_velocity(u),
    )
