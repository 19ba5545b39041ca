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
Smagorinsky LES (Hou, Sterling, Chen & Doolen 1996, Fields Inst. Commun. 6, 151): the even rate
becomes local, omega+ = 1/tau with tau = tau0 + nu_t/c_s^2 and nu_t = (C_s Delta)^2 |S| (Delta = 1
lattice unit), the strain rate taken from the non-equilibrium momentum flux of the same cell:
S_ab = -Q_ab / (2 rho c_s^2 tau), Q_ab = sum_i c_ia c_ib (f_i - f_i^eq) + (F_a u_b + u_a F_b)/2 (the
forcing part of the second moment, Kruger et al. 2017, The Lattice Boltzmann Method, sec. 6.5).
With |S| = sqrt(2 S_ab S_ab) that is a quadratic in tau, solved in closed form
(``smagorinsky_omega``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp
from jax import Array

from kernels.equilibrium import Populations, project
from kernels.lattices import CS2, Lattice


def trt_omega_minus(omega_plus: float | Array, magic: float) -> float | Array:
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


def smagorinsky_omega(
    lattice: Lattice,
    populations: Populations,
    equilibria: Populations,
    rho: Array,
    velocity: Sequence[Array],
    force: Sequence[Array | float] | None,
    omega0: float,
    smagorinsky: float,
) -> Array:
    """Local even relaxation rate 1/tau (*grid) of the Smagorinsky model, tau >= tau0 = 1/omega0.

    tau = (tau0 + sqrt(tau0^2 + 18 sqrt(2) C_s^2 |Q| / rho)) / 2, |Q| = sqrt(Q_ab Q_ab): the root of
    tau = tau0 + (C_s^2 / c_s^2) |S| with S from the non-equilibrium flux Q (module docstring;
    18 sqrt(2) = 2 sqrt(2) / c_s^4). Computed from the cell's own populations: no extra pass.

    Args:
        rho: (*grid) density; velocity: d arrays (*grid), the force-shifted velocity.
        force: None or d body-force density components.
        omega0: the molecular rate 1/tau0; smagorinsky: the constant C_s (> 0).
    """
    d = lattice.d
    neq = [populations[i] - equilibria[i] for i in range(lattice.q)]
    square = 0.0
    for a in range(d):
        for b in range(a, d):
            flux = sum(
                float(lattice.c[i, a] * lattice.c[i, b]) * neq[i]
                for i in range(lattice.q)
                if lattice.c[i, a] * lattice.c[i, b] != 0
            )
            if force is not None:
                flux = flux + 0.5 * (force[a] * velocity[b] + velocity[a] * force[b])
            square = square + (1.0 if a == b else 2.0) * flux * flux
    tau0 = 1.0 / omega0
    scale = 18.0 * math.sqrt(2.0) * smagorinsky**2
    # |Q| with a finite gradient where the flow is uniform (Q = 0)
    flowing = square > 0
    magnitude = jnp.where(flowing, jnp.sqrt(jnp.where(flowing, square, 1.0)), 0.0)
    tau = 0.5 * (tau0 + jnp.sqrt(tau0 * tau0 + scale * magnitude / rho))
    return 1.0 / tau
