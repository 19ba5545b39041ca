"""2D lid-driven square cavity, Re = U L / nu (Ghia, Ghia & Shin 1982 for reference data).

Layout, shape (n + 2, n + 2): one solid layer around the cavity, half-way walls at x, y = 0 and
L, fluid nodes at ((i - 0.5) dx, (j - 0.5) dx). The top layer moves at the lid velocity along +x
(Ladd's moving-wall bounce-back); the two top corner nodes stay at rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kernels.lattices import lattice_by_name
from solver.fluid.cases.base import (
    Case,
    RunData,
    box_indices,
    box_shape,
    fluid_setup,
    lattice_scales,
    mask_field,
    ones_field,
    zeros_field,
)
from solver.fluid.config import CavityConfig
from solver.fluid.grid_field import Box, GridField

if TYPE_CHECKING:
    from solver.config import RunConfig


class CavityCase(Case):
    """Diagnostics: centre-line profiles u_x(y) at x = L/2 and u_y(x) at y = L/2, over U."""

    def diagnostics(self, data: RunData) -> dict:
        u = data.velocity[:, 1:-1, 1:-1] / self.info["u_lid_lattice"]
        n = u.shape[1]
        length = self.info["length"]
        coords = (np.arange(n) + 0.5) / n  # over L, fluid nodes only

        def centre(a: np.ndarray, axis: int) -> np.ndarray:
            # the centre line x = L/2 falls between the two middle nodes when n is even
            lo, hi = (n - 1) // 2, n // 2
            return 0.5 * (np.take(a, lo, axis=axis) + np.take(a, hi, axis=axis))

        ux = centre(u[0], axis=0)  # along y at x = L/2
        uy = centre(u[1], axis=1)  # along x at y = L/2
        return {
            "length_m": length,
            "centerline": {
                "y_over_l": coords.tolist(),
                "ux_over_u": ux.tolist(),
                "x_over_l": coords.tolist(),
                "uy_over_u": uy.tolist(),
            },
            "ux_min_over_u": float(ux.min()),
            "uy_min_over_u": float(uy.min()),
            "uy_max_over_u": float(uy.max()),
        }


def grid_shape(config: RunConfig) -> tuple[int, int]:
    """(n + 2, n + 2): n cells across the cavity and one solid layer around it."""
    n = config.case.resolution
    return (n + 2, n + 2)


def build(config: RunConfig) -> CavityCase:
    c: CavityConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    scales = lattice_scales(
        fluid,
        c.length,
        c.resolution,
        c.lid_velocity,
        c.viscosity,
        c.density,
        "case.re (nu = U L / Re)",
    )
    units, omega, mach = scales.units, scales.omega, scales.mach
    shape = grid_shape(config)
    nx, ny = shape
    # one solid layer around the cavity; its top row (corners excepted) moves along +x
    solid = mask_field(shape, lambda i, j: ~((i >= 1) & (i < nx - 1) & (j >= 1) & (j < ny - 1)))
    lid = fluid.u_lattice

    def wall_velocity_on(box: Box) -> np.ndarray:
        i, j = box_indices(box)
        out = np.zeros((2,) + box_shape(box))
        out[0][np.broadcast_to((i >= 1) & (i < nx - 1) & (j == ny - 1), box_shape(box))] = lid
        return out

    wall_velocity = GridField(shape, np.float64, wall_velocity_on, (2,))
    setup = fluid_setup(
        fluid,
        lattice,
        shape,
        omega,
        solid=solid,
        wall_velocity=wall_velocity,
    )
    return CavityCase(
        name="cavity",
        setup=setup,
        units=units,
        density=ones_field(shape),
        velocity=zeros_field(shape, (2,)),
        default_steps=units.steps_for(c.duration),
        origin=(-units.dx, -units.dx),
        mach=mach,
        reynolds=c.re,
        info={"u_lid_lattice": fluid.u_lattice, "length": c.length, "viscosity": c.viscosity},
    )
