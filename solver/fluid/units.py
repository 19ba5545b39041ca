"""Conversion between physical (SI) and lattice units.

A case fixes three scales:

- ``dx`` (m): the cell size, from a characteristic length and the resolution,
  ``dx = length / cells``;
- ``dt`` (s): the time step, from the characteristic (peak) velocity ``U`` and the target lattice
  velocity ``u_lattice``, ``dt = u_lattice dx / U`` (so that U is ``u_lattice`` cells per step);
- ``rho0`` (kg/m^3): the reference density, which is 1 in lattice units.

Every other quantity converts by its dimension: a velocity by dx/dt, a kinematic viscosity by
dx^2/dt, an acceleration by dx/dt^2, a force density by rho0 dx/dt^2, a pressure by
rho0 (dx/dt)^2. The lattice viscosity fixes the relaxation time, ``nu_lattice = c_s^2 (tau - 1/2)``
with ``c_s^2 = 1/3``, and the lattice Mach number is ``u_lattice / c_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernels.lattices import CS2


@dataclass(frozen=True)
class UnitConverter:
    """Physical <-> lattice conversion.

    Attributes:
        dx: cell size in m.
        dt: time step in s.
        rho0: reference density in kg/m^3 (lattice density 1).
    """

    dx: float
    dt: float
    rho0: float = 1.0

    @classmethod
    def from_scales(
        cls, length: float, cells: float, velocity: float, u_lattice: float, rho0: float = 1.0
    ) -> UnitConverter:
        """dx = length / cells; dt such that ``velocity`` (m/s) becomes ``u_lattice``."""
        dx = length / cells
        return cls(dx=dx, dt=u_lattice * dx / velocity, rho0=rho0)

    # lattice -> physical
    @property
    def velocity_scale(self) -> float:
        """m/s per lattice velocity unit (dx/dt)."""
        return self.dx / self.dt

    def to_lattice_velocity(self, u: float) -> float:
        return u * self.dt / self.dx

    def to_lattice_viscosity(self, nu: float) -> float:
        """Kinematic viscosity nu (m^2/s) in lattice units."""
        return nu * self.dt / self.dx**2

    def to_lattice_acceleration(self, g: float) -> float:
        """Acceleration (m/s^2) in lattice units (= force density at lattice density 1)."""
        return g * self.dt**2 / self.dx

    def to_lattice_length(self, length: float) -> float:
        return length / self.dx

    def to_lattice_frequency(self, omega: float) -> float:
        """Angular frequency (rad/s) in radians per time step."""
        return omega * self.dt

    def to_lattice_density(self, rho: float) -> float:
        return rho / self.rho0

    def pressure_to_lattice_density(self, p: float) -> float:
        """Density deviation that carries a pressure deviation p (Pa): delta rho = p / c_s^2."""
        return p / (self.rho0 * self.velocity_scale**2) / CS2

    def to_physical_velocity(self, u):
        return u * self.velocity_scale

    def to_physical_density(self, rho):
        return rho * self.rho0

    def to_physical_time(self, steps):
        return steps * self.dt

    def steps_for(self, duration: float) -> int:
        """Steps that cover ``duration`` seconds (at least 1)."""
        return max(1, math.ceil(duration / self.dt - 1e-9))

    def tau(self, nu: float) -> float:
        """BGK relaxation time for the physical viscosity nu: 1/2 + nu_lattice / c_s^2."""
        return 0.5 + self.to_lattice_viscosity(nu) / CS2

    def as_dict(self) -> dict:
        return {"dx": self.dx, "dt": self.dt, "rho0": self.rho0}


def mach(u_lattice: float) -> float:
    """Lattice Mach number u / c_s."""
    return u_lattice / math.sqrt(CS2)
