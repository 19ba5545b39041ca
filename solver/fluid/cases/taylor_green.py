"""Decaying Taylor-Green vortex array in a periodic box (2D, or 3D on a 3D lattice).

Exact solutions from ``fluid.analytic``: in 2D the vortex array; on a 3D lattice the same array
extruded along z (variant ``vortex``) or the fully 3D Arnold-Beltrami-Childress flow (variant
``beltrami``). Variant ``brachet`` is the classic 3D vortex that transitions to turbulence
(Brachet et al. 1983): no exact solution, so the run records the kinetic energy after every
chunk and reports its dissipation rate (the Re = 1600 benchmark's peak is ~0.0128 near t* = 9).
The box [0, L)^d is periodic with nodes at (i + 0.5) dx; the initial density
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
    ones_field,
    relative_l2,
    zeros_field,
)
from solver.fluid.config import TaylorGreenConfig
from solver.fluid.grid_field import Box, GridField

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
        if c.variant == "brachet":  # no closed form after t = 0
            ux, uy, uz, p = analytic.taylor_green_brachet(*grids, c.u0, c.length, c.density)
            return np.stack([ux, uy, uz]), p
        fn = analytic.beltrami_abc if c.variant == "beltrami" else analytic.taylor_green_3d
        ux, uy, uz, p = fn(*grids, *args)
        return np.stack([ux, uy, uz]), p

    def diagnostics(self, data: RunData) -> dict:
        if self.tracks_energy:
            return self.turbulence_diagnostics(data)
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

    def turbulence_diagnostics(self, data: RunData) -> dict:
        """Kinetic energy and its dissipation rate in convective units (the Brachet vortex):
        t* = t U0 k, E* = <rho |u|^2 / 2> / (rho0 U0^2), eps* = -dE*/dt*, k = 2 pi / L.

        The initial field is not in acoustic equilibrium with the lattice's compressibility:
        kinetic energy sloshes into pressure waves and back with the period L / c_s of the box
        (eps* alternated between 0.014 and 0.0004 every 5 steps on 16^3). eps* is therefore the
        slope over one such period centred on each sample (E* itself is reported raw).
        """
        if data.energy is None or len(data.energy) < 3:
            return {}
        c: TaylorGreenConfig = self.info["config"]
        k = 2.0 * np.pi / c.length
        u0_lat = self.units.to_lattice_velocity(c.u0)
        steps = data.energy[:, 0]
        t = self.units.to_physical_time(steps) * c.u0 * k
        energy = data.energy[:, 1] / u0_lat**2
        period = self.setup.shape[0] * np.sqrt(3.0)  # steps: box length / c_s
        spacing = float(np.median(np.diff(steps)))
        half = max(1, int(round(0.5 * period / spacing)))
        n = len(energy)
        lo = np.clip(np.arange(n) - half, 0, n - 1)
        hi = np.clip(np.arange(n) + half, 0, n - 1)
        dissipation = -(energy[hi] - energy[lo]) / (t[hi] - t[lo])
        peak = int(np.argmax(dissipation))
        return {
            "convective_time": float(t[-1]),
            "energy_initial": float(energy[0]),
            "dissipation_initial": float(dissipation[0]),
            "dissipation_initial_exact": 3.0 / (4.0 * self.reynolds),
            "dissipation_window_steps": int(2 * half * spacing),
            "dissipation_peak": float(dissipation[peak]),
            "dissipation_peak_time": float(t[peak]),
            "series": {
                "time": t.tolist(),
                "energy": energy.tolist(),
                "dissipation": dissipation.tolist(),
            },
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
    brachet = lattice.d == 3 and c.variant == "brachet"
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
        density=ones_field(shape),
        velocity=zeros_field(shape, (lattice.d,)),
        default_steps=units.steps_for(c.duration),
        origin=(0.0,) * lattice.d,
        mach=mach,
        # the Brachet vortex's Reynolds number is that of its length scale L / (2 pi)
        reynolds=c.u0 * c.length / c.viscosity / (2.0 * np.pi if brachet else 1.0),
        tracks_energy=brachet,
        info={"config": c, "peak_speed_m_s": peak},
    )
    exact = _ExactOnBox(c, lattice.d, case.coordinates())
    gradient = None
    if brachet:  # d u_lat / d x_lat = (d u / d x) dt
        gradient = GridField(
            shape, np.float64, lambda box: exact.gradient(box) * units.dt, (lattice.d,) * 2
        )
    return dataclasses.replace(
        case,
        density=GridField(
            shape,
            np.float64,
            lambda box: 1.0 + units.pressure_to_lattice_density(exact.fields(box, "density")[1]),
        ),
        velocity=GridField(
            shape,
            np.float64,
            lambda box: units.to_lattice_velocity(exact.fields(box, "velocity")[0]),
            (lattice.d,),
        ),
        velocity_gradient=gradient,
    )


class _ExactOnBox:
    """The analytic initial fields on a box of nodes (the initial density and velocity of one
    block), computed once for the two fields that read them."""

    def __init__(self, c: TaylorGreenConfig, dimension: int, coordinates: list[np.ndarray]):
        self.c, self.dimension, self.coordinates = c, dimension, coordinates
        self._key, self._fields, self._waiting = None, None, set()

    def _nodes(self, box: Box) -> list[np.ndarray]:
        return [x[s] for x, s in zip(self.coordinates, box, strict=True)]

    def fields(self, box: Box, reader: str) -> tuple[np.ndarray, np.ndarray]:
        """(velocity (d, *box) m/s, pressure (*box) Pa) at t = 0; kept until both the density
        and the velocity have read this box."""
        key = tuple((s.start, s.stop) for s in box)
        if key != self._key or reader not in self._waiting:
            nodes = self._nodes(box)
            self._fields = TaylorGreenCase.exact_fields(self.c, self.dimension, nodes, 0.0)
            self._key, self._waiting = key, {"density", "velocity"}
        fields = self._fields
        self._waiting.discard(reader)
        if not self._waiting:
            self._key, self._fields = None, None
        return fields

    def gradient(self, box: Box) -> np.ndarray:
        """(3, 3, *box) d u_b / d x_a of the Brachet vortex, 1/s."""
        grids = np.meshgrid(*self._nodes(box), indexing="ij")
        return analytic.taylor_green_brachet_gradient(*grids, self.c.u0, self.c.length)
