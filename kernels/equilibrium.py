"""Second-order Maxwell-Boltzmann equilibrium and the velocity moments of the populations.

Populations are passed as a (q, *grid) array or a sequence of q arrays of shape (*grid); results
are tuples of per-direction arrays, so a step can keep all q directions unrolled and let XLA fuse
them (see docs/performance.md).

Equilibrium (Qian et al. 1992):
    f_i^eq = w_i rho [1 + (c_i.u)/c_s^2 + (c_i.u)^2/(2 c_s^4) - (u.u)/(2 c_s^2)]
"""

from __future__ import annotations

from collections.abc import Sequence

from jax import Array

from kernels.lattices import CS2, Lattice

Populations = Sequence[Array]


def project(lattice: Lattice, i: int, vector: Sequence[Array | float]) -> Array | float:
    """c_i . v for a d-component vector field, skipping zero components of c_i."""
    total = 0.0
    for a in range(lattice.d):
        ca = int(lattice.c[i, a])
        if ca == 1:
            total = total + vector[a]
        elif ca == -1:
            total = total - vector[a]
    return total


def equilibrium(lattice: Lattice, density: Array, velocity: Sequence[Array]) -> tuple[Array, ...]:
    """Equilibrium populations.

    Args:
        density: (*grid) lattice density.
        velocity: (d, *grid) lattice velocity, or a sequence of d arrays.
    Returns:
        q arrays (*grid).
    """
    # constant factors as Python floats so XLA sees multiplies: a divide is "expensive" to
    # XLA, and a shared one (base) would be materialised as an extra full-size array
    usq = sum(velocity[a] * velocity[a] for a in range(lattice.d))
    base = 1.0 - usq * (0.5 / CS2)
    out = []
    for i in range(lattice.q):
        cu = project(lattice, i, velocity)
        if i == 0 or isinstance(cu, float):
            out.append(float(lattice.w[i]) * density * base)
        else:
            out.append(
                float(lattice.w[i]) * density * (base + cu * (1.0 / CS2) + cu * cu * (0.5 / CS2**2))
            )
    return tuple(out)


def density(populations: Populations) -> Array:
    """rho = sum_i f_i, shape (*grid)."""
    return sum(populations[i] for i in range(len(populations)))


def momentum(lattice: Lattice, populations: Populations) -> tuple[Array, ...]:
    """rho u = sum_i c_i f_i (without force correction), d arrays (*grid)."""
    out = []
    for a in range(lattice.d):
        plus = [populations[i] for i in range(lattice.q) if lattice.c[i, a] == 1]
        minus = [populations[i] for i in range(lattice.q) if lattice.c[i, a] == -1]
        out.append(sum(plus) - sum(minus))
    return tuple(out)


def density_velocity(
    lattice: Lattice, populations: Populations, force: Sequence[Array | float] | None = None
) -> tuple[Array, tuple[Array, ...]]:
    """Density and velocity; with a body force, u = (sum_i c_i f_i + F/2) / rho (Guo et al. 2002).

    Args:
        populations: q arrays (*grid).
        force: None or d components of the force density (scalars or (*grid) arrays).
    Returns:
        density (*grid) and d velocity arrays (*grid).
    """
    rho = density(populations)
    mom = momentum(lattice, populations)
    inv_rho = 1.0 / rho
    if force is None:
        return rho, tuple(m * inv_rho for m in mom)
    return rho, tuple((m + 0.5 * force[a]) * inv_rho for a, m in enumerate(mom))


def stress(lattice: Lattice, populations: Populations, equilibria: Populations, omega: float):
    """Deviatoric viscous stress sigma_ab = -(1 - omega/2) sum_i c_ia c_ib (f_i - f_i^eq).

    Returns a dict {(a, b): (*grid)} for a <= b, in lattice units (density x velocity^2).
    """
    factor = -(1.0 - 0.5 * omega)
    out = {}
    for a in range(lattice.d):
        for b in range(a, lattice.d):
            terms = [
                int(lattice.c[i, a] * lattice.c[i, b]) * (populations[i] - equilibria[i])
                for i in range(lattice.q)
                if lattice.c[i, a] * lattice.c[i, b] != 0
            ]
            out[(a, b)] = factor * sum(terms)
    return out
