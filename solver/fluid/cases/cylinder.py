"""2D flow past a circular cylinder in a channel (default: Schaefer-Turek 2D-2, Re = 100).

Schaefer & Turek (1996), "Benchmark computations of laminar flow around a cylinder", Notes on
Numerical Fluid Mechanics 52, 547: channel 2.2 m x 0.41 m, cylinder of diameter 0.1 m centred at
(0.2, 0.2), parabolic inflow with U_max = 1.5 m/s, nu = 1e-3 m^2/s; reference values
Cd_max = 3.22..3.24, Cl_max = 0.99..1.01, St = 0.295..0.305 (with U_mean = 2/3 U_max).

Lattice layout, shape (nx, ny): x = (i + 0.5) dx from the inlet; one solid row below and above
the channel (half-way walls at y = 0 and y = H, so y_j = (j - 0.5) dx); velocity inlet at i = 0,
pressure outlet (density 1) at i = nx - 1. The cylinder is a solid ``obstacle`` with the exact
link fractions to the circle in ``wall_distance`` for interpolated bounce-back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kernels.lattices import lattice_by_name
from solver.errors import ConfigError
from solver.fluid.cases.base import (
    Case,
    RunData,
    box_shape,
    cells,
    check_mach,
    fluid_setup,
    mask_field,
    ones_field,
    relaxation_rate,
)
from solver.fluid.config import INLETS, OUTLETS, CylinderConfig
from solver.fluid.grid_field import Box, GridField
from solver.fluid.setup import InflowSchedule, OpenBoundary
from solver.fluid.units import UnitConverter

if TYPE_CHECKING:
    from solver.config import RunConfig

MIN_CELLS_PER_DIAMETER = 4
MIN_SHEDDING_AMPLITUDE = 0.05  # Cl amplitude below which the wake counts as steady
MAX_PERIOD_SPREAD = 0.1  # allowed std / mean of the lift periods for a shedding frequency
HYSTERESIS = 0.3  # fraction of the Cl amplitude the signal must drop below between crossings
# The peaks without the short-wave ripple (acoustic waves BGK hardly damps near tau = 1/2): a
# centred mean over this fraction of the shedding period, which lowers a smooth sinusoidal peak
# by (pi w)^2 / 6 of its amplitude (2e-4 for the lift, 7e-4 for the drag at twice the frequency)
RIPPLE_WINDOW = 0.01


class CylinderCase(Case):
    """The built cylinder case; diagnostics turn the force history into Cd, Cl and St."""

    def diagnostics(self, data: RunData) -> dict:
        if data.forces is None or len(data.forces) == 0:
            return {}
        cd, cl = force_coefficients(data.forces, self.info["u_mean_lattice"], self.info["d_cells"])
        return coefficient_statistics(
            cd,
            cl,
            dt=self.units.dt,
            diameter=self.info["diameter"],
            u_mean=self.info["u_mean"],
            stats_fraction=self.info["stats_fraction"],
        )


def force_coefficients(
    forces: np.ndarray, u_mean_lattice: float, diameter_cells: float
) -> tuple[np.ndarray, np.ndarray]:
    """Drag and lift coefficients C = 2 F / (rho U_mean^2 D) in lattice units (rho = 1).

    Args:
        forces: (n, 2) lattice force per unit depth on the cylinder.
    Returns:
        cd, cl: (n,) each.
    """
    scale = 2.0 / (u_mean_lattice**2 * diameter_cells)
    return forces[:, 0] * scale, forces[:, 1] * scale


def coefficient_statistics(
    cd: np.ndarray,
    cl: np.ndarray,
    dt: float,
    diameter: float,
    u_mean: float,
    stats_fraction: float,
) -> dict:
    """Mean and extremes of Cd and Cl over the last ``stats_fraction`` of the history, and the
    Strouhal number St = f D / U_mean from the upward zero crossings of Cl - mean(Cl). With
    shedding, also the peaks of Cd and Cl averaged over ``RIPPLE_WINDOW`` of its period
    (``cd_max_smoothed``, ``cl_max_smoothed``; None without): the raw maxima ride on a ripple
    of a few steps, which over-reads a drag peak by up to 0.3 % at tau 0.51.

    St is None when fewer than two full lift periods fall in the window, when the Cl amplitude
    is below 0.05, or when the periods scatter by more than 10% (a steady wake: what is left in
    Cl is acoustic noise).
    """
    n = len(cd)
    start = min(n - 1, int(n * (1.0 - stats_fraction)))
    cd_w, cl_w = cd[start:], cl[start:]
    out = {
        "stats_window_s": [start * dt, n * dt],
        "cd_mean": float(np.mean(cd_w)),
        "cd_max": float(np.max(cd_w)),
        "cl_mean": float(np.mean(cl_w)),
        "cl_max": float(np.max(cl_w)),
        "cl_amplitude": float(0.5 * (np.max(cl_w) - np.min(cl_w))),
        "cd_max_smoothed": None,
        "cl_max_smoothed": None,
        "strouhal": None,
        "shedding_frequency_hz": None,
        "shedding_periods": 0,
    }
    signal = cl_w - np.mean(cl_w)
    up = upward_crossings(signal, HYSTERESIS * out["cl_amplitude"])
    if len(up) >= 3 and out["cl_amplitude"] > MIN_SHEDDING_AMPLITUDE:
        # linear interpolation of each crossing inside its step
        t_cross = (up + signal[up] / (signal[up] - signal[up + 1])) * dt
        periods = np.diff(t_cross)
        period = float(np.mean(periods))
        # a steady wake leaves only acoustic noise in Cl: irregular crossings, no shedding
        if np.std(periods) <= MAX_PERIOD_SPREAD * period:
            out["shedding_frequency_hz"] = 1.0 / period
            out["strouhal"] = diameter / (period * u_mean)
            out["shedding_periods"] = int(len(up) - 1)
            width = max(1, round(RIPPLE_WINDOW * period / dt))
            out["cd_max_smoothed"] = float(np.max(window_means(cd_w, width)))
            out["cl_max_smoothed"] = float(np.max(window_means(cl_w, width)))
    return out


def window_means(signal: np.ndarray, width: int) -> np.ndarray:
    """(n - width + 1,) means of ``width`` consecutive samples (the windows inside the signal)."""
    return np.convolve(signal, np.full(width, 1.0 / width), mode="valid")


def upward_crossings(signal: np.ndarray, threshold: float) -> np.ndarray:
    """Indices k with signal[k] < 0 <= signal[k + 1], counted only after the signal has been
    below -threshold since the previous one (a Schmitt trigger: acoustic ripples on the lift
    signal would otherwise add spurious crossings near zero)."""
    below = signal < -threshold
    crossings = np.nonzero((signal[:-1] < 0) & (signal[1:] >= 0))[0]
    out, armed_from = [], 0
    for k in crossings:
        if below[armed_from : k + 1].any():
            out.append(k)
            armed_from = k + 1
    return np.asarray(out, dtype=int)


def grid_shape(config: RunConfig) -> tuple[int, int]:
    """(nx, nh + 2) with dx = diameter / resolution: the channel's length and height in cells
    plus one solid row below and above."""
    c: CylinderConfig = config.case
    dx = c.diameter / c.resolution  # as UnitConverter.from_scales
    return (int(round(c.length / dx)), int(round(c.height / dx)) + 2)


def build(config: RunConfig) -> CylinderCase:
    c: CylinderConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    units = UnitConverter.from_scales(
        c.diameter, c.resolution, c.u_max, fluid.u_lattice, rho0=c.density
    )
    dx = units.dx
    if c.resolution < MIN_CELLS_PER_DIAMETER:
        raise ConfigError(
            "case.resolution", c.resolution, f">= {MIN_CELLS_PER_DIAMETER} cells per diameter"
        )
    nx = cells("case.length", c.length, c.length, dx, 3 * c.resolution)
    nh = cells("case.height", c.height, c.height, dx, c.resolution + 2)
    radius = 0.5 * c.diameter
    xc, yc = c.center
    # at least one fluid cell between the cylinder and each wall, two to the inlet and outlet
    if not (radius + dx <= yc <= c.height - radius - dx):
        raise ConfigError(
            "case.center",
            list(c.center),
            f"y in [{radius + dx:.4g}, {c.height - radius - dx:.4g}] m "
            "(cylinder at least one cell clear of both walls)",
        )
    if not (radius + 2 * dx <= xc <= c.length - radius - 2 * dx):
        raise ConfigError(
            "case.center",
            list(c.center),
            f"x in [{radius + 2 * dx:.4g}, {c.length - radius - 2 * dx:.4g}] m "
            "(cylinder at least two cells clear of the inlet and outlet)",
        )

    shape = grid_shape(config)  # (nx, nh + 2)
    origin = (0.0, -dx)
    x = origin[0] + (np.arange(shape[0]) + 0.5) * dx
    y = origin[1] + (np.arange(shape[1]) + 0.5) * dx
    # the circle in index coordinates: node (i, j) sits at ((i, j) + 0.5) dx + origin
    ci, cj = (xc - origin[0]) / dx - 0.5, (yc - origin[1]) / dx - 0.5
    r = radius / dx
    ny = shape[1]

    def in_obstacle(i, j):
        walls = (j == 0) | (j == ny - 1)
        return ((i - ci) ** 2 + (j - cj) ** 2 <= r * r) & ~walls

    obstacle = mask_field(shape, in_obstacle)
    solid = mask_field(shape, lambda i, j: (j == 0) | (j == ny - 1) | in_obstacle(i, j))
    wall_distance = GridField(
        shape,
        np.float64,
        lambda box: _circle_link_fractions_on(
            lattice, shape, box, obstacle.box, ~solid[box], (ci, cj), r
        ),
        (lattice.q,),
    )

    height = nh * dx  # the walls sit at y = 0 and y = nh dx
    if c.inflow == "parabolic":
        profile = 4.0 * c.u_max * y * (height - y) / height**2
        u_mean = 2.0 / 3.0 * c.u_max
    else:
        profile = np.full_like(y, c.u_max)
        u_mean = c.u_max
    profile = np.where(solid[0], 0.0, profile)  # the inlet column
    u_lat = units.to_lattice_velocity(profile)
    inlet_velocity = np.zeros((2, shape[1]))
    inlet_velocity[0] = u_lat

    omega = relaxation_rate(units, c.viscosity, fluid, "case.viscosity")
    mach = check_mach(fluid.u_lattice, fluid)
    schedule = InflowSchedule(
        ramp_steps=c.ramp_time / units.dt, period_steps=c.inflow_period / units.dt
    )
    sponge = sponge_layer(shape, c.sponge_length / dx, 1.0 / omega, c.sponge_factor)
    if sponge is not None and c.sponge_length > c.length - xc - radius - 2.0 * c.diameter:
        raise ConfigError(
            "case.sponge_length",
            c.sponge_length,
            f"<= {c.length - xc - radius - 2.0 * c.diameter:.4g} m (the layer starts at least "
            "two diameters behind the cylinder)",
        )

    setup = fluid_setup(
        fluid,
        lattice,
        shape,
        omega,
        solid=solid,
        wall_distance=wall_distance,
        obstacle=obstacle,
        open_boundaries=(
            OpenBoundary(
                axis=0,
                side="low",
                kind=INLETS[c.inlet],
                velocity=inlet_velocity,
                schedule=schedule,
            ),
            OpenBoundary(axis=0, side="high", kind=OUTLETS[c.outlet], density=1.0),
        ),
        sponge=sponge,
    )

    # a scheduled inflow starts from rest (its factor is 0 at t = 0)
    perturbation = _Perturbation(config.seed, x, y, height, c.length)
    amplitude = c.perturbation * fluid.u_lattice

    def velocity_on(box: Box) -> np.ndarray:
        out = np.zeros((2,) + box_shape(box))
        out[0] = 0.0 if not schedule.steady else u_lat[box[1]][None, :]
        out[1] = perturbation.on(box) * amplitude
        out[:, solid[box]] = 0.0
        return out

    return CylinderCase(
        name="cylinder",
        setup=setup,
        units=units,
        density=ones_field(shape),
        velocity=GridField(shape, np.float64, velocity_on, (2,)),
        default_steps=units.steps_for(c.duration),
        origin=origin,
        mach=mach,
        reynolds=u_mean * c.diameter / c.viscosity,
        png_field="vorticity",
        measures_forces=True,
        info={
            "u_mean": u_mean,
            "u_mean_lattice": units.to_lattice_velocity(u_mean),
            "diameter": c.diameter,
            "d_cells": 2.0 * r,
            "stats_fraction": c.stats_fraction,
            "channel_height_m": height,
            "channel_length_m": nx * dx,
            "obstacle_cells": obstacle.count_nonzero(),
        },
    )


def circle_link_fractions(
    lattice, shape, obstacle: np.ndarray, solid: np.ndarray, center, radius: float
) -> np.ndarray:
    """Link fractions for interpolated bounce-back.

    For a fluid node x and a direction c_i whose neighbour x + c_i lies in the obstacle, the
    fraction q in (0, 1] with |x + q c_i - center| = radius (the nearer root of the quadratic);
    0.5 on every other link (flat walls half-way). All in index (cell) units.

    Returns:
        (q, *shape) array.
    """
    obstacle = np.asarray(obstacle)
    full = tuple(slice(0, n) for n in shape)
    return _circle_link_fractions_on(
        lattice, shape, full, lambda box: obstacle[box], ~np.asarray(solid), center, radius
    )


def _circle_link_fractions_on(
    lattice, shape, box, obstacle_on, fluid: np.ndarray, center, radius: float
) -> np.ndarray:
    """``circle_link_fractions`` on a box of nodes: (q, *box shape). ``obstacle_on(box)`` gives
    the obstacle mask on a box (read on ``box`` widened by one ghost node, clipped to the
    grid); ``fluid`` is the fluid mask on ``box``."""
    n0, n1 = shape
    b0, b1 = box
    out = np.full((lattice.q,) + box_shape(box), 0.5)
    ghost = (slice(max(b0.start - 1, 0), min(b0.stop + 1, n0)),
             slice(max(b1.start - 1, 0), min(b1.stop + 1, n1)))  # fmt: skip
    near = obstacle_on(ghost)
    ii, jj = np.meshgrid(np.arange(b0.start, b0.stop), np.arange(b1.start, b1.stop), indexing="ij")
    px, py = ii - center[0], jj - center[1]
    for i in range(1, lattice.q):
        cx, cy = (int(v) for v in lattice.c[i])
        # neighbour x + c_i, no wrap-around: the cylinder is clear of the box edges
        neighbour = np.zeros(out.shape[1:], dtype=bool)
        lo0, hi0 = max(b0.start, -cx, 0), min(b0.stop, n0 - max(cx, 0))
        lo1, hi1 = max(b1.start, -cy, 0), min(b1.stop, n1 - max(cy, 0))
        if lo0 < hi0 and lo1 < hi1:
            neighbour[lo0 - b0.start : hi0 - b0.start, lo1 - b1.start : hi1 - b1.start] = near[
                lo0 + cx - ghost[0].start : hi0 + cx - ghost[0].start,
                lo1 + cy - ghost[1].start : hi1 + cy - ghost[1].start,
            ]
        links = neighbour & fluid
        a = cx * cx + cy * cy
        b = px * cx + py * cy
        c0 = px * px + py * py - radius * radius
        disc = np.maximum(b * b - a * c0, 0.0)
        q = (-b - np.sqrt(disc)) / a
        out[i][links] = np.clip(q[links], 1e-6, 1.0)
    return out


def sponge_layer(
    shape: tuple[int, ...], thickness: float, tau: float, factor: float
) -> GridField | None:
    """Added relaxation time dtau (nx, ny) of an absorbing layer ``thickness`` nodes thick
    before the high-x face: the viscosity rises quadratically from the fluid's to ``factor``
    times it at the outlet, dtau = (tau - 1/2)(factor - 1) s^2 with s from 0 at the layer's
    start to 1; it damps vortices and pressure waves before the outlet can reflect them.
    None without a layer."""
    if thickness <= 0.0 or factor <= 1.0:
        return None
    x = np.arange(shape[0]) + 0.5
    start = shape[0] - thickness
    ramp = np.clip((x - start) / thickness, 0.0, 1.0) ** 2
    dtau = (tau - 0.5) * (factor - 1.0) * ramp
    extra = (None,) * (len(shape) - 1)
    return GridField(
        shape,
        np.float64,
        lambda box: np.broadcast_to(dtau[box[0]][(slice(None), *extra)], box_shape(box)).copy(),
    )


class _Perturbation:
    """Smooth random transverse field (nx, ny) with max |v| = 1, zero on the walls, on any box
    of nodes (x, y: the nodes' coordinates, m)."""

    def __init__(self, seed: int, x: np.ndarray, y: np.ndarray, height: float, length: float):
        rng = np.random.default_rng(seed)
        self.modes = []
        for m in range(1, 4):
            for n in range(1, 4):
                amp, phase = rng.standard_normal(), rng.uniform(0, 2 * np.pi)
                self.modes.append((m, n, amp, phase))
        self.x, self.y, self.height, self.length = x, y, height, length
        # the peak over the whole grid, a slab of x at a time
        rows = max(1, (1 << 22) // max(1, len(y)))
        all_y = slice(0, len(y))
        self.peak = max(
            float(np.max(np.abs(self._raw((slice(a, min(a + rows, len(x))), all_y)))))
            for a in range(0, len(x), rows)
        )

    def _raw(self, box: Box) -> np.ndarray:
        x, y = self.x[box[0]], self.y[box[1]]
        field = np.zeros((len(x), len(y)))
        for m, n, amp, phase in self.modes:
            field += amp * np.outer(
                np.sin(m * np.pi * x / self.length + phase),
                np.sin(n * np.pi * np.clip(y, 0, self.height) / self.height),
            )
        return field

    def on(self, box: Box) -> np.ndarray:
        field = self._raw(box)
        return field / self.peak if self.peak > 0 else field
