"""Collision operators: BGK and two-relaxation-time (TRT), with Guo's body-force source.

BGK:  f_i* = f_i - omega (f_i - f_i^eq) + S_i
TRT:  (Ginzburg, Verhaeghe & d'Humieres 2008, Commun. Comput. Phys. 3, 427)
      f_i* = f_i - omega+ (f_i+ - f_i^eq+) - omega- (f_i- - f_i^eq-) + S_i,
      with f_i+- = (f_i +- f_ibar)/2 and the magic parameter
      Lambda = (1/omega+ - 1/2)(1/omega- - 1/2); Lambda = 3/16 puts half-way walls exactly mid-link.
Guo forcing (Guo, Zheng & Shi 2002, Phys. Rev. E 65, 046308), split into parts even and odd in c_i:
      S_i = (1 - omega+/2) w_i [(c_i.u)(c_i.F)/c_s^4 - (u.F)/c_s^2]
            + (1 - omega-/2) w_i (c_i.F)/c_s^2
For BGK omega- = omega+ and this is Guo's original source.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax import Array

from kernels.equilibrium import Populations, project
from kernels.lattices import CS2, Lattice


def trt_omega_minus(omega_plus: float, magic: float) -> float:
    """The odd relaxation rate from the even one and Lambda."""
    tau_minus = magic / (1.0 / omega_plus - 0.5) + 0.5
    return 1.0 / tau_minus


def bgk(lattice: Lattice, populations: Populations, equilibria: Populations, omega: float):
    """Single-relaxation-time collision, q arrays (*grid) in and out."""
    return tuple(
        populations[i] + omega * (equilibria[i] - populations[i]) for i in range(lattice.q)
    )


def trt(
    lattice: Lattice,
    populations: Populations,
    equilibria: Populations,
    omega_plus: float,
    omega_minus: float,
):
    """Two-relaxation-time collision, q arrays (*grid) in and out."""
    out = []
    for i in range(lattice.q):
        j = int(lattice.opposite[i])
        neq_i = populations[i] - equilibria[i]
        neq_j = populations[j] - equilibria[j]
        even = 0.5 * (neq_i + neq_j)
        odd = 0.5 * (neq_i - neq_j)
        out.append(populations[i] - omega_plus * even - omega_minus * odd)
    return tuple(out)


def guo_source(
    lattice: Lattice,
    velocity: Sequence[Array],
    force: Sequence[Array | float],
    omega_plus: float,
    omega_minus: float,
):
    """Guo's forcing term S_i, q arrays (*grid) (or scalars where they vanish).

    Args:
        velocity: d arrays (*grid), the force-corrected lattice velocity.
        force: d components of the force density (scalars or (*grid) arrays).
    """
    uf = sum(velocity[a] * force[a] for a in range(lattice.d))
    even_factor = 1.0 - 0.5 * omega_plus
    odd_factor = 1.0 - 0.5 * omega_minus
    out = []
    for i in range(lattice.q):
        w = float(lattice.w[i])
        cf = project(lattice, i, force)
        cu = project(lattice, i, velocity)
        even = w * (cu * cf * (1.0 / CS2**2) - uf * (1.0 / CS2))
        odd = w * cf * (1.0 / CS2)
        out.append(even_factor * even + odd_factor * odd)
    return tuple(out)
