"""KBC entropic multi-relaxation collision on the tensor-product lattices D2Q9 and D3Q27.

Karlin, Bosch & Chikatamarla 2014, Phys. Rev. E 90, 031302(R); three-dimensional realisation
by Bosch, Chikatamarla & Karlin 2015, Phys. Rev. E 92, 043309.

The non-equilibrium populations are split by their natural (raw) moments
M_pq[r] = sum_i f_i c_ix^p c_iy^q c_iz^r (p, q, r in {0, 1, 2}: all 3^d are independent on a
tensor-product lattice): f - f^eq = Delta k + Delta s + Delta h with
    Delta k: the conserved part (density and momentum moments): zero without a body force; with
       Guo's half-force-shifted velocity, the first-moment mismatch -F/2;
    Delta s: the shear part, from the deviatoric second moments, the off-diagonal M_ab and the
       traceless diagonal D_aa = M_aa - T/d (T = sum_a M_aa). This is the "standard" choice, the
       shear stress only, on both lattices (D2Q9 as Karlin et al. 2014; on D3Q27 the
       natural-moment model with s from the deviatoric stress; Bosch et al. 2015 also discuss
       variants that move the trace or third moments into s, not implemented here);
    Delta h = f - f^eq - Delta k - Delta s: the trace and every moment of order > 2.
A part is rebuilt from its moments with the per-axis inverse of the moment map (velocities -1,
0, 1 on each axis): f(0) = m0 - m2, f(+-1) = (m2 +- m1) / 2.

Collision, with beta = omega / 2 = 1 / (2 tau):
    f_i* = f_i - omega (Delta k_i + Delta s_i) - beta gamma Delta h_i
(Delta k relaxes at omega as in BGK, so Guo's source applies unchanged). The entropic
stabiliser gamma makes the quadratic estimate of the post-collision entropy,
<f* - f^eq | f* - f^eq>, stationary:
    gamma = 1/beta - (2 - 1/beta) <Delta s|Delta h> / <Delta h|Delta h>,
    <X|Y> = sum_i X_i Y_i / f_i^eq;
gamma = 2 is BGK. Two guards, neither in the papers:
- where <Delta h|Delta h> is at or below the round-off floor of the populations, (8 eps)^2 rho
  (eps: the dtype's machine epsilon), Delta h is rounding noise and gamma = 2 (BGK);
- beta gamma is kept in [0, 2], so the higher-order part is never amplified
  (|1 - beta gamma| <= 1). This also bounds how much the rounding error of Delta h (of order
  eps f_i, present in every moment, the conserved ones included) can be scaled up: mass and
  momentum stay conserved to round-off.

Per cell the collision needs a few numbers that depend on all q populations (gamma's quotient
and the second moments); ``kbc`` has XLA compute each once, and each output population is formed
from its own f_i, f_i^eq and those numbers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache

import jax.numpy as jnp
from jax import Array

from kernels.collision_regularized import second_moments
from kernels.equilibrium import Populations
from kernels.lattices import CS2, Lattice

Value = Array | float  # a (*grid) array, or 0.0 where a term vanishes identically
Key = tuple[int, ...]  # per axis: a velocity component (-1, 0, 1) or a moment order (0, 1, 2)

# <Delta h|Delta h> <= (ROUND_OFF * eps)^2 * rho counts as Delta h = 0 (module docstring)
ROUND_OFF = 8.0
# the bound on beta gamma: the factor 1 - beta gamma of the higher-order part stays in [-1, 1]
MAX_RATE = 2.0


def check_lattice(lattice: Lattice) -> None:
    """ValueError unless the lattice is the full tensor product {-1, 0, 1}^d (D2Q9, D3Q27)."""
    if lattice.q != 3**lattice.d:
        raise ValueError(
            f"KBC needs a tensor-product lattice (D2Q9 or D3Q27), not {lattice.name} "
            f"(q = {lattice.q}, 3^d = {3**lattice.d})"
        )


@cache
def _directions(lattice: Lattice) -> dict[Key, int]:
    check_lattice(lattice)
    return {tuple(int(x) for x in lattice.c[i]): i for i in range(lattice.q)}


def _is_zero(x: Value) -> bool:
    return isinstance(x, float) and x == 0.0


def _plus(a: Value, b: Value) -> Value:
    return b if _is_zero(a) else a if _is_zero(b) else a + b


def _minus(a: Value, b: Value) -> Value:
    return -b if _is_zero(a) else a if _is_zero(b) else a - b


def _half(a: Value) -> Value:
    return 0.0 if _is_zero(a) else 0.5 * a


def _at(key: Key, axis: int, value: int) -> Key:
    return key[:axis] + (value,) + key[axis + 1 :]


def from_moments(lattice: Lattice, moments: dict[Key, Value]) -> tuple[Value, ...]:
    """The q populations (*grid) whose natural moments are ``moments`` ({(p, q[, r]): value},
    missing keys: 0), one axis at a time: f(0) = m0 - m2, f(+-1) = (m2 +- m1) / 2. Zero moments
    cost nothing; a population no moment reaches is 0.0."""
    d = lattice.d
    values: dict[Key, Value] = dict(moments)
    for axis in range(d):
        out = {}
        # positions before ``axis`` hold velocities already, the others still moment orders
        ranges = [(-1, 0, 1)] * axis + [(0,)] + [(0, 1, 2)] * (d - axis - 1)
        for key in itertools.product(*ranges):
            m0 = values.get(key, 0.0)
            m1 = values.get(_at(key, axis, 1), 0.0)
            m2 = values.get(_at(key, axis, 2), 0.0)
            out[key] = _minus(m0, m2)
            out[_at(key, axis, 1)] = _half(_plus(m2, m1))
            out[_at(key, axis, -1)] = _half(_minus(m2, m1))
        values = out
    return tuple(values[c] for c in _directions(lattice))


def _second_keys(d: int) -> list[Key]:
    """Natural-moment keys of the second moments M_ab, a <= b, in combinations order."""
    keys = []
    for a, b in itertools.combinations_with_replacement(range(d), 2):
        key = [0] * d
        key[a] += 1
        key[b] += 1
        keys.append(tuple(key))
    return keys


def shear_part(lattice: Lattice, second: Sequence[Value]) -> tuple[Value, ...]:
    """Delta s, q values (*grid), from the non-equilibrium second moments M_ab (a <= b, in
    itertools.combinations_with_replacement order): the off-diagonal ones and the traceless
    diagonal M_aa - T/d."""
    d = lattice.d
    keys = _second_keys(d)
    diagonal = [k for k in range(len(keys)) if max(keys[k]) == 2]
    mean = sum(second[k] for k in diagonal) * (1.0 / d)
    moments = {}
    for k, key in enumerate(keys):
        moments[key] = second[k] - mean if k in diagonal else second[k]
    return from_moments(lattice, moments)


def conserved_part(lattice: Lattice, first: Sequence[Value] | None) -> tuple[Value, ...]:
    """Delta k, q values: the populations of the first moments ``first`` (d values; None:
    zero), sum_i c_ia Delta k_i = first_a (the density moment of f - f^eq is zero)."""
    if first is None:
        return (0.0,) * lattice.q
    zero = (0,) * lattice.d
    return from_moments(lattice, {_at(zero, a, 1): first[a] for a in range(lattice.d)})


def decompose(
    lattice: Lattice,
    populations: Populations,
    equilibria: Populations,
    first: Sequence[Value] | None = None,
) -> tuple[tuple[Value, ...], tuple[Value, ...], tuple[Value, ...]]:
    """(Delta k, Delta s, Delta h), q values (*grid) each, summing to f - f^eq; ``first`` is the
    non-equilibrium first moment (-F/2 with Guo's shift; None: zero)."""
    check_lattice(lattice)
    neq = [populations[i] - equilibria[i] for i in range(lattice.q)]
    conserved = conserved_part(lattice, first)
    second = []
    for a, b in itertools.combinations_with_replacement(range(lattice.d), 2):
        cc = lattice.c[:, a] * lattice.c[:, b]
        second.append(sum(int(cc[i]) * neq[i] for i in range(lattice.q) if cc[i] != 0))
    shear = shear_part(lattice, second)
    higher = tuple(_minus(_minus(neq[i], conserved[i]), shear[i]) for i in range(lattice.q))
    return conserved, shear, higher


def entropic_products(
    shear: Sequence[Value],
    higher: Sequence[Value],
    equilibria: Populations | None = None,
    inverse: Array | None = None,
) -> tuple[Array, Array]:
    """(<Delta s|Delta h>, <Delta h|Delta h>) (*grid), <X|Y> = sum_i X_i Y_i / f_i^eq, with
    the weights from q arrays ``equilibria`` or from ``inverse`` ((*grid, q), 1/f_i^eq,
    ``inverse_equilibria``)."""
    sh, hh = 0.0, 0.0
    for i in range(len(higher)):
        h_over = higher[i] * inverse[..., i] if inverse is not None else higher[i] / equilibria[i]
        hh = hh + h_over * higher[i]
        if not _is_zero(shear[i]):
            sh = sh + h_over * shear[i]
    return sh, hh


def inverse_equilibria(lattice: Lattice, density: Array, velocity: Sequence[Array]) -> Array:
    """(*grid, q): 1/f_i^eq(rho, u) of the second-order equilibrium along a last axis, built by
    broadcasting the (q,) velocities and weights: one vectorised pass, and one divide that XLA
    writes to memory once instead of q divides it would materialise one by one
    (docs/performance.md, point 2)."""
    dtype = jnp.result_type(density)
    c = lattice.c.astype(dtype)
    cu = sum(velocity[a][..., None] * c[:, a] for a in range(lattice.d))
    usq = sum(velocity[a] * velocity[a] for a in range(lattice.d))[..., None]
    base = 1.0 + cu * (1.0 / CS2) + cu * cu * (0.5 / CS2**2) - usq * (0.5 / CS2)
    return 1.0 / (density[..., None] * lattice.w.astype(dtype) * base)


def _guarded(sh: Array, hh: Array, density: Array) -> tuple[Array, Array]:
    """(numerator, divisor) of ``quotient``'s X."""
    eps = float(jnp.finfo(jnp.result_type(hh)).eps)
    resolved = hh > (ROUND_OFF * eps) ** 2 * density
    return jnp.where(resolved, sh, -1.0), jnp.where(resolved, hh, 1.0)


def quotient(sh: Array, hh: Array, density: Array) -> Array:
    """X (*grid) such that beta gamma = 1 - (omega - 1) X before the bound: <Delta s|Delta h> /
    <Delta h|Delta h>, or -1 (gamma = 2, BGK) where <Delta h|Delta h> is at or below the
    round-off floor (ROUND_OFF eps)^2 rho."""
    numerator, divisor = _guarded(sh, hh, density)
    return numerator / divisor


def relaxation_rate(x: Array, omega: float | Array) -> Array:
    """beta gamma (*grid) of the higher-order part from ``quotient``'s X, within [0, MAX_RATE]."""
    return jnp.clip(1.0 - (omega - 1.0) * x, 0.0, MAX_RATE)


def stabiliser(sh: Array, hh: Array, omega: float | Array, density: Array) -> Array:
    """The entropic stabiliser gamma (*grid) with both guards (module docstring).

    Args:
        sh, hh: <Delta s|Delta h> and <Delta h|Delta h> (*grid), ``entropic_products``.
        omega: 1/tau = 2 beta, a scalar or (*grid).
        density: (*grid) rho.
    """
    return 2.0 * relaxation_rate(quotient(sh, hh, density), omega) / omega


def kbc(
    lattice: Lattice,
    populations: Populations,
    equilibria: Populations,
    density: Array,
    velocity: Sequence[Array],
    omega: float | Array,
    first: Sequence[Value] | None = None,
) -> tuple[Array, ...]:
    """KBC collision without the forcing source, q arrays (*grid) in and out (module
    docstring): f_i* = f_i + beta gamma (f_i^eq - f_i) + (beta gamma - omega)(Delta k_i +
    Delta s_i).

    Per cell, the non-equilibrium second moments (``second_moments``) and gamma's quotient X
    (a divide) are each computed once: XLA writes a divide with many users to memory rather
    than recompute it in each of the q output fusions; the outputs read them.

    Args:
        populations, equilibria: q arrays (*grid), f_i and f_i^eq(rho, u).
        density: (*grid) rho = sum_i f_i; velocity: d arrays (*grid), the u of the equilibrium.
        omega: 1/tau, the rate of the shear part, a scalar or (*grid).
        first: the non-equilibrium first moment sum_i c_i (f_i - f_i^eq), d scalars or arrays,
            known to the caller (-F/2 with Guo's shifted velocity); None: zero.
    """
    check_lattice(lattice)
    second = list(second_moments(lattice, populations, density, velocity).values())
    conserved = conserved_part(lattice, first)
    shear = shear_part(lattice, second)
    higher = [
        _minus(_minus(populations[i] - equilibria[i], conserved[i]), shear[i])
        for i in range(lattice.q)
    ]
    inverse = inverse_equilibria(lattice, density, velocity)
    rate = relaxation_rate(quotient(*entropic_products(shear, higher, inverse=inverse), density),
                           omega)  # fmt: skip
    out = []
    for i in range(lattice.q):
        slow = _plus(conserved[i], shear[i])  # the parts relaxed at omega
        # f^eq - f, not the f - f^eq of Delta h: a shared difference would be written to memory
        post = populations[i] + rate * (equilibria[i] - populations[i])
        if not _is_zero(slow):
            post = post + (rate - omega) * slow
        out.append(post)
    return tuple(out)
