"""Recursive regularized BGK collision on D2Q9, D3Q19 and D3Q27.

Malaspinas 2015, arXiv:1505.06900; Coreixas, Wissocq, Puigt, Boussuge & Sagaut 2017, Phys. Rev.
E 96, 033306. The non-equilibrium part is rebuilt from its Hermite moments before relaxing:
    f_i* = f_i^eq + (1 - omega) f_i^neq,reg + S_i,
    f_i^neq,reg = w_i [ H_i^(1).a^(1) / c_s^2 + H_i^(2):a^(2) / (2 c_s^4)
                        + H_i^(3):a^(3) / (6 c_s^6) ],
    a^(1) = sum_i c_i f_i^neq (zero, or -F/2 with Guo's half-force-shifted velocity),
    a^(2)_ab = sum_i H_iab^(2) f_i^neq = sum_i c_ia c_ib f_i^neq (f^neq carries no mass),
    a^(3)_abc = u_a a^(2)_bc + u_b a^(2)_ac + u_c a^(2)_ab (the recursive third order),
with the Hermite polynomials H^(2)_ab = c_a c_b - c_s^2 d_ab and
H^(3)_abc = c_a c_b c_c - c_s^2 (c_a d_bc + c_b d_ac + c_c d_ab).

Which third-order terms a lattice holds: those whose H^(3) is not identically zero on it (D2Q9:
xxy, xyy; D3Q19: the six of type xxy, not xyz; D3Q27: all seven; H_xxx vanishes on all three).
Each order is rebuilt in the dual basis of the lattice's Gram matrix G_mn = sum_i w_i H_mi H_ni,
so that f^neq,reg has exactly the moments a^(1), a^(2) and the lattice's part of a^(3). On D2Q9
and D3Q27 G is diagonal and this is the Hermite formula above; on D3Q19 H_xxy and H_yzz (and
the two other such pairs) are not orthogonal, and the pairs enter as (H_xxy + H_yzz)/(2 c_s^6)
and (H_xxy - H_yzz)/(6 c_s^6) (the D3Q19 form of Coreixas et al. 2017).

Second-moment dynamics are BGK's (the second moment relaxes as (1 - omega) a^(2)), so the
viscosity is c_s^2 (1/omega - 1/2) and Guo's source applies unchanged; only the higher-order,
non-hydrodynamic content of f^neq is filtered, which is what makes the operator robust at small
viscosity.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache

import numpy as np
from jax import Array

from kernels.equilibrium import Populations
from kernels.lattices import CS2, Lattice

Modes = tuple[tuple[tuple[int, ...], tuple[float, ...]], ...]  # (indices, per-direction K_i)


def hermite(lattice: Lattice, indices: tuple[int, ...]) -> np.ndarray:
    """(q,) the Hermite polynomial H^(n)_indices (n = 2 or 3) at the lattice velocities."""
    c = lattice.c.astype(float)
    if len(indices) == 2:
        a, b = indices
        return c[:, a] * c[:, b] - CS2 * (a == b)
    a, b, g = indices
    return c[:, a] * c[:, b] * c[:, g] - CS2 * (
        (a == b) * c[:, g] + (a == g) * c[:, b] + (b == g) * c[:, a]
    )


@cache
def reconstruction(lattice: Lattice, order: int) -> Modes:
    """The order-``order`` modes the lattice holds, each with K_i (q floats) such that
    f_i = sum_m K_mi A_m has the Hermite moments sum_i H_ni f_i = A_n (the dual basis of the
    Gram matrix, K = w H^T G^-1); exact zeros where the mode does not reach direction i."""
    combos = itertools.combinations_with_replacement(range(lattice.d), order)
    modes = [m for m in combos if np.abs(hermite(lattice, m)).max() > 1e-12]
    h = np.stack([hermite(lattice, m) for m in modes])  # (modes, q)
    gram = (h * lattice.w) @ h.T
    k = (lattice.w[:, None] * (h.T @ np.linalg.inv(gram))).T  # (modes, q)
    k[np.abs(k) < 1e-12 * np.abs(k).max()] = 0.0
    return tuple((m, tuple(float(x) for x in row)) for m, row in zip(modes, k, strict=True))


def second_moments(
    lattice: Lattice, populations: Populations, density: Array, velocity: Sequence[Array]
) -> dict[tuple[int, int], Array]:
    """a^(2)_ab = sum_i c_ia c_ib (f_i - f_i^eq) for a <= b, (*grid) each.

    Computed as sum_i c_ia c_ib f_i - rho (u_a u_b + c_s^2 d_ab) (the second moment of the
    second-order equilibrium, exact on all three lattices). Each is divided by rho and
    multiplied back: XLA does not copy a divide with many users into each of the q output
    fusions (which would each re-read the populations), so every a^(2)_ab is computed once
    (docs/performance.md, point 2). Stacking them into one array would not do: each element
    of a stack built without a concatenate evaluates every column.
    """
    out = {}
    for a, b in itertools.combinations_with_replacement(range(lattice.d), 2):
        total = 0.0
        for i in range(lattice.q):
            cc = int(lattice.c[i, a] * lattice.c[i, b])
            if cc == 1:
                total = total + populations[i]
            elif cc == -1:
                total = total - populations[i]
        flux = velocity[a] * velocity[b] + CS2 if a == b else velocity[a] * velocity[b]
        out[(a, b)] = density * ((total - density * flux) / density)
    return out


def recursive_third(
    second: dict[tuple[int, int], Array], velocity: Sequence[Array], modes: Modes
) -> dict[tuple[int, ...], Array]:
    """a^(3)_abc = u_a a^(2)_bc + u_b a^(2)_ac + u_c a^(2)_ab for the lattice's modes."""

    def pair(x: int, y: int) -> Array:
        return second[(min(x, y), max(x, y))]

    return {
        (a, b, g): velocity[a] * pair(b, g) + velocity[b] * pair(a, g) + velocity[g] * pair(a, b)
        for (a, b, g), _ in modes
    }


def regularized_nonequilibrium(
    lattice: Lattice,
    first: Sequence[Array | float] | None,
    second: dict[tuple[int, int], Array],
    third: dict[tuple[int, ...], Array],
) -> list[Array]:
    """f_i^neq,reg, q arrays (*grid), from the Hermite moments a^(1) (None: zero), a^(2) and
    a^(3) (the lattice's modes)."""
    out = []
    for i in range(lattice.q):
        total = 0.0
        if first is not None:
            for a in range(lattice.d):
                ca = int(lattice.c[i, a])
                if ca != 0:
                    total = total + (ca * float(lattice.w[i]) / CS2) * first[a]
        for order, moments in ((2, second), (3, third)):
            for m, k in reconstruction(lattice, order):
                if k[i] != 0.0:
                    total = total + k[i] * moments[m]
        out.append(total)
    return out


def regularized(
    lattice: Lattice,
    populations: Populations,
    equilibria: Populations,
    density: Array,
    velocity: Sequence[Array],
    omega: float | Array,
    first: Sequence[Array | float] | None = None,
) -> tuple[Array, ...]:
    """Recursive regularized BGK without the forcing source, q arrays (*grid) in and out.

    Args:
        populations, equilibria: q arrays (*grid), f_i and f_i^eq(rho, u).
        density: (*grid) rho; velocity: d arrays (*grid), the u of the equilibrium.
        omega: 1/tau, a scalar or (*grid) (a local LES rate).
        first: a^(1) = sum_i c_i (f_i - f_i^eq), d scalars or arrays, known to the caller (-F/2
            with Guo's shifted velocity); None: zero.
    """
    second = second_moments(lattice, populations, density, velocity)
    third = recursive_third(second, velocity, reconstruction(lattice, 3))
    neq = regularized_nonequilibrium(lattice, first, second, third)
    keep = 1.0 - omega
    return tuple(equilibria[i] + keep * neq[i] for i in range(lattice.q))
