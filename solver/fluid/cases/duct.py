"""3D square-duct Poiseuille flow driven by a body force along x.

Layout, shape (nx, n + 2, n + 2): x periodic with nodes at (i + 0.5) dx; one solid layer around
the cross-section, half-way walls at y, z = 0 and a, fluid nodes at ((j - 0.5) dx, (k - 0.5) dx).
The force is chosen so that the analytic centre-line velocity (White 2006, Eq. 3-48) is u_max.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernels.lattices import lattice_by_name
from solver.fluid import analytic
from solver.fluid.cases.base import (
    Case,
    RunData,
    fluid_setup,
    lattice_scales,
    mask_field,
    ones_field,
    relative_l2,
    zeros_field,
)
from solver.fluid.config import DuctConfig
from solver.fluid.setup import BodyForce

if TYPE_CHECKING:
    from solver.config import RunConfig


class DuctCase(Case):
    """Diagnostics: relative L2 error of the x-averaged u_x(y, z) against the series solution."""

    def diagnostics(self, data: RunData) -> dict:
        c: DuctConfig = self.info["config"]
        _, y, z = self.coordinates()
        y, z = y[1:-1], z[1:-1]
        u = self.units.to_physical_velocity(data.velocity[0, :, 1:-1, 1:-1].mean(axis=0))
        g = self.info["acceleration_m_s2"]
        exact = analytic.duct_profile(
            y[:, None], z[None, :], c.side, c.side, c.density * g, c.density, c.viscosity
        )
        return {
            "time_s": self.units.to_physical_time(data.steps),
            "velocity_l2_error": relative_l2(u, exact),
            "u_max_measured": float(u.max()),
            "u_max_exact": float(exact.max()),
        }


def grid_shape(config: RunConfig) -> tuple[int, int, int]:
    """(nx, n + 2, n + 2) with dx = side / n: the duct's length and its cross-section with one
    solid layer around it."""
    c: DuctConfig = config.case
    dx = c.side / c.resolution  # as UnitConverter.from_scales
    return (max(1, int(round(c.length / dx))), c.resolution + 2, c.resolution + 2)


def build(config: RunConfig) -> DuctCase:
    c: DuctConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    scales = lattice_scales(fluid, c.side, c.resolution, c.u_max, c.viscosity, c.density)
    units, omega, mach = scales.units, scales.omega, scales.mach
    dx = units.dx
    shape = grid_shape(config)
    _, ny, nz = shape
    # one solid layer around the cross-section
    solid = mask_field(shape, lambda i, j, k: ~((j >= 1) & (j < ny - 1) & (k >= 1) & (k < nz - 1)))
    # the profile is linear in the force: scale a unit-force solution to the wanted peak
    centre = analytic.duct_profile(0.5 * c.side, 0.5 * c.side, c.side, c.side, 1.0, 1.0, 1.0)
    g = c.u_max * c.viscosity / float(centre)
    setup = fluid_setup(
        fluid,
        lattice,
        shape,
        omega,
        solid=solid,
        body_force=BodyForce(constant=(units.to_lattice_acceleration(g), 0.0, 0.0)),
    )
    return DuctCase(
        name="duct",
        setup=setup,
        units=units,
        density=ones_field(shape),
        velocity=zeros_field(shape, (3,)),
        default_steps=units.steps_for(c.duration),
        origin=(0.0, -dx, -dx),
        mach=mach,
        reynolds=c.u_max * c.side / c.viscosity,
        info={"config": c, "acceleration_m_s2": g},
    )
