"""Plane channel flows on D2Q9: Poiseuille (body force, optionally periodic) and Couette.

Layout, shape (nx, ny): x periodic with nodes at (i + 0.5) dx; one solid row below and above the
channel, so the half-way walls sit at y = 0 and y = H with fluid nodes at y_j = (j - 0.5) dx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kernels.lattices import lattice_by_name
from solver.errors import ConfigError
from solver.fluid import analytic
from solver.fluid.cases.base import (
    Case,
    RunData,
    box_shape,
    fluid_setup,
    lattice_scales,
    mask_field,
    ones_field,
    relative_l2,
    zeros_field,
)
from solver.fluid.config import CouetteConfig, PoiseuilleConfig
from solver.fluid.grid_field import Box, GridField
from solver.fluid.setup import BodyForce

if TYPE_CHECKING:
    from solver.config import RunConfig


class ChannelCase(Case):
    """Diagnostics: relative L2 error of the x-averaged u_x(y) profile against the analytic one."""

    def profile(self, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fluid-node y (m) and the x-averaged streamwise velocity (m/s)."""
        y = self.coordinates()[1][1:-1]
        u = self.units.to_physical_velocity(velocity[0, :, 1:-1].mean(axis=0))
        return y, u

    def diagnostics(self, data: RunData) -> dict:
        y, u = self.profile(data.velocity)
        time = self.units.to_physical_time(data.steps)
        steady, transient = self.info["analytic"](y, time)
        out = {
            "time_s": time,
            "velocity_l2_error": relative_l2(u, steady),
            "u_max_measured": float(np.max(u)),
            "u_max_exact": float(np.max(steady)),
        }
        if transient is not None:
            out["velocity_l2_error_transient"] = relative_l2(u, transient)
        return out


def grid_shape(config: RunConfig) -> tuple[int, int]:
    """(nx, n + 2) with dx = height / n: the channel's length and height plus one solid row
    below and above (Poiseuille and Couette alike)."""
    c = config.case
    dx = c.height / c.resolution  # as UnitConverter.from_scales
    return (max(1, int(round(c.length / dx))), c.resolution + 2)


def _channel(config: RunConfig, dx: float):
    shape = grid_shape(config)
    ny = shape[1]
    solid = mask_field(shape, lambda i, j: (j == 0) | (j == ny - 1))  # the walls' rows
    return shape, solid, (0.0, -dx)


def build_poiseuille(config: RunConfig) -> ChannelCase:
    c: PoiseuilleConfig = config.case
    fluid = config.fluid
    if c.amplitude > 0 and c.angular_frequency <= 0:
        raise ConfigError(
            "case.angular_frequency", c.angular_frequency, "> 0 when case.amplitude > 0"
        )
    # velocity scale: the steady peak plus the largest periodic response, g_amp / omega
    u_scale = c.u_max + (c.amplitude / c.angular_frequency if c.amplitude > 0 else 0.0)
    if u_scale <= 0:
        raise ConfigError("case.u_max", c.u_max, "> 0 (or a periodic force, case.amplitude > 0)")
    lattice = lattice_by_name(fluid.lattice)
    scales = lattice_scales(fluid, c.height, c.resolution, u_scale, c.viscosity, c.density)
    units, omega, mach = scales.units, scales.omega, scales.mach
    shape, solid, origin = _channel(config, units.dx)
    g = 8.0 * c.viscosity * c.u_max / c.height**2  # m/s^2, steady part
    periodic = c.amplitude > 0
    force = BodyForce(
        constant=(units.to_lattice_acceleration(g), 0.0),
        amplitude=(units.to_lattice_acceleration(c.amplitude), 0.0) if periodic else None,
        angular_frequency=units.to_lattice_frequency(c.angular_frequency),
        phase=c.phase,
    )
    setup = fluid_setup(
        fluid,
        lattice,
        shape,
        omega,
        solid=solid,
        body_force=force,
    )
    rho, nu, h = c.density, c.viscosity, c.height

    def exact(y, t):
        if periodic:
            u = analytic.womersley_profile(
                y, t, h, rho * c.amplitude, c.angular_frequency, rho, nu, c.phase, rho * g
            )
            return u, None
        steady = analytic.poiseuille_profile(y, h, rho * g, rho, nu)
        return steady, analytic.poiseuille_startup(y, t, h, rho * g, rho, nu)

    return ChannelCase(
        name="poiseuille",
        setup=setup,
        units=units,
        density=ones_field(shape),
        velocity=zeros_field(shape, (2,)),
        default_steps=units.steps_for(c.duration),
        origin=origin,
        mach=mach,
        reynolds=u_scale * c.height / c.viscosity,
        info={"analytic": exact, "acceleration_m_s2": g},
    )


def build_couette(config: RunConfig) -> ChannelCase:
    c: CouetteConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    scales = lattice_scales(fluid, c.height, c.resolution, c.wall_velocity, c.viscosity, c.density)
    units, omega, mach = scales.units, scales.omega, scales.mach
    shape, solid, origin = _channel(config, units.dx)
    ny, u_wall = shape[1], fluid.u_lattice

    def wall_velocity_on(box: Box) -> np.ndarray:
        out = np.zeros((2,) + box_shape(box))
        if box[1].stop == ny:  # the upper wall moves along +x
            out[0, :, -1] = u_wall
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

    def exact(y, t):
        steady = analytic.couette_profile(y, c.height, c.wall_velocity)
        return steady, analytic.couette_transient(y, t, c.height, c.wall_velocity, c.viscosity)

    return ChannelCase(
        name="couette",
        setup=setup,
        units=units,
        density=ones_field(shape),
        velocity=zeros_field(shape, (2,)),
        default_steps=units.steps_for(c.duration),
        origin=origin,
        mach=mach,
        reynolds=c.wall_velocity * c.height / c.viscosity,
        info={"analytic": exact},
    )
