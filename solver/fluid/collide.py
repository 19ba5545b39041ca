"""Collision parts of the fluid step: moments once, then one operator chosen by name.

A collision part is one function with the signature of ``Operator``::

    operator(f, rho, u, force, params) -> f_post

    f:      q arrays (*shape), the pre-collision populations f_i(x, t), lattice units
    rho:    (*shape) density, rho = sum_i f_i
    u:      d arrays (*shape), velocity with Guo's half-force shift, u = (sum_i c_i f_i + F/2) / rho
    force:  None, or d body-force density components (scalars or 0-d arrays) at this step
    params: the static ``CollisionParams`` read from the setup on the host
    f_post: q arrays (*shape), the post-collision populations f_i*(x, t), forcing included

registered in ``OPERATORS`` under the name ``FluidSetup.collision`` takes. The step computes
(rho, u) once per step (``moments``), calls the setup's operator and casts to the storage dtype
(``make_collide``). Each operator adds the forcing its relaxation rates call for (Guo's source,
kernels/collision.py), because those rates are its own (two for TRT, a local one for LES).

Operators: ``bgk``, ``trt`` (kernels/collision.py), ``regularized`` (recursive regularized BGK,
kernels/collision_regularized.py) and ``kbc`` (entropic multi-relaxation, D2Q9 and D3Q27,
kernels/collision_kbc.py); BGK, TRT and regularized take the Smagorinsky rate (``even_rate``).
Adding an operator is one function here and one entry in ``OPERATORS`` (plus the name in
``solver.fluid.setup.COLLISIONS``); any static parameter it needs goes into ``CollisionParams``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels import collision, collision_kbc, collision_regularized
from kernels.equilibrium import Populations, equilibrium
from kernels.lattices import Lattice
from solver.fluid.setup import FluidSetup

Force = Sequence[Array | float] | None


@dataclass(frozen=True)
class CollisionParams:
    """Static collision parameters, read from the ``FluidSetup`` on the host.

    Attributes:
        lattice: the velocity set.
        omega: relaxation rate 1/tau of the viscous (even) moments (inside a step: a (*shape)
            array where a sponge layer raises tau).
        trt_magic: TRT magic parameter Lambda, fixing the odd rate (TRT only).
        dtype: storage dtype of the populations.
        smagorinsky: the Smagorinsky constant C_s, or 0 without a subgrid model.
    """

    lattice: Lattice
    omega: float
    trt_magic: float
    dtype: np.dtype
    smagorinsky: float = 0.0

    @classmethod
    def from_setup(cls, setup: FluidSetup) -> CollisionParams:
        smagorinsky = setup.les_cs if setup.les == "smagorinsky" else 0.0
        return cls(setup.lattice, setup.omega, setup.trt_magic, jnp.dtype(setup.dtype),
                   smagorinsky)  # fmt: skip


Operator = Callable[[Populations, Array, Sequence[Array], Force, CollisionParams], tuple]


def body_force_at(setup: FluidSetup, time: Array) -> tuple | None:
    """Body force density (d scalars, lattice units) at step ``time``; None without a force."""
    bf = setup.body_force
    if bf is None:
        return None
    if bf.amplitude is None or not any(bf.amplitude):
        return tuple(float(c) for c in bf.constant)
    s = jnp.sin(bf.angular_frequency * time.astype(setup.dtype) + bf.phase)
    return tuple(c + a * s for c, a in zip(bf.constant, bf.amplitude, strict=True))


def moments(
    lattice: Lattice, f: Populations, force: Force, dtype: np.dtype
) -> tuple[Array, list[Array]]:
    """Density rho (*shape) and the force-shifted velocity u (d arrays (*shape)) of q arrays f:
    the columns of ``moment_table``."""
    both = moment_table(lattice, f, force, dtype)
    return both[..., 0], [both[..., 1 + a] for a in range(lattice.d)]


def moment_table(lattice: Lattice, f: Populations, force: Force, dtype: np.dtype) -> Array:
    """(*shape, d+1) array of rho and the force-shifted velocity u of q arrays f.

    rho = sum_i f_i, u = (sum_i c_i f_i + F/2) / rho (Guo, Zheng & Shi 2002).

    Computed as one materialised (*shape, d+1) array: every population enters as
    f_i[..., None] * (1, c_i), divided by (1, rho, ..., rho). The divide keeps XLA from re-fusing
    the moments into the q output fusions (which would each re-read all q inputs); avoiding a
    concatenate keeps the fusion vectorised (with 27 inputs LLVM left the concatenate form
    scalar: D3Q27 1.5x faster periodic, 2.7x with walls). docs/performance.md, point 7.
    """
    q = lattice.q
    rows = np.concatenate([np.ones((q, 1)), lattice.c], axis=1).astype(dtype)  # (q, d+1)
    sums = sum(f[i][..., None] * rows[i] for i in range(q))
    if force is not None:
        half_force = [jnp.zeros((), dtype)] + [jnp.asarray(0.5 * c, dtype) for c in force]
        sums = sums + jnp.stack(half_force)
    rho_col = sum(f[i] for i in range(q))[..., None]
    first = lax.broadcasted_iota(jnp.int32, sums.shape, sums.ndim - 1) == 0
    return sums / jnp.where(first, jnp.ones_like(rho_col), rho_col)


def with_guo_source(
    lattice: Lattice,
    post: Sequence[Array],
    u: Sequence[Array],
    force: Force,
    omega_plus: float,
    omega_minus: float,
) -> tuple[Array, ...]:
    """post_i + S_i with Guo's source split into even (omega+) and odd (omega-) parts."""
    if force is None:
        return tuple(post)
    src = collision.guo_source(lattice, u, force, omega_plus, omega_minus)
    return tuple(post[i] + src[i] for i in range(lattice.q))


def even_rate(
    f: Populations,
    feq: Populations,
    rho: Array,
    u: Sequence[Array],
    force: Force,
    params: CollisionParams,
) -> float | Array:
    """The rate of the viscous (even) moments: params.omega, or per cell (*shape) from the
    Smagorinsky model when params.smagorinsky > 0 (kernels.collision.smagorinsky_omega)."""
    if params.smagorinsky <= 0.0:
        return params.omega
    return collision.smagorinsky_omega(
        params.lattice, f, feq, rho, u, force, params.omega, params.smagorinsky
    )


def bgk(
    f: Populations, rho: Array, u: Sequence[Array], force: Force, params: CollisionParams
) -> tuple[Array, ...]:
    """BGK: f_i* = f_i - omega (f_i - f_i^eq(rho, u)) + S_i, one rate for every moment."""
    lat = params.lattice
    feq = equilibrium(lat, rho, u)
    omega = even_rate(f, feq, rho, u, force, params)
    post = collision.bgk(lat, f, feq, omega)
    return with_guo_source(lat, post, u, force, omega, omega)


def trt(
    f: Populations, rho: Array, u: Sequence[Array], force: Force, params: CollisionParams
) -> tuple[Array, ...]:
    """TRT (Ginzburg et al. 2008): omega+ on the even parts f_i+ - f_i^eq+, omega- on the odd
    parts, with Lambda = (1/omega+ - 1/2)(1/omega- - 1/2) = params.trt_magic."""
    lat = params.lattice
    feq = equilibrium(lat, rho, u)
    omega = even_rate(f, feq, rho, u, force, params)
    omega_minus = collision.trt_omega_minus(omega, params.trt_magic)
    post = collision.trt(lat, f, feq, omega, omega_minus)
    return with_guo_source(lat, post, u, force, omega, omega_minus)


def regularized(
    f: Populations, rho: Array, u: Sequence[Array], force: Force, params: CollisionParams
) -> tuple[Array, ...]:
    """Recursive regularized BGK (Malaspinas 2015; Coreixas et al. 2017,
    kernels/collision_regularized.py): f_i* = f_i^eq + (1 - omega) f_i^neq,reg + S_i, with the
    local Smagorinsky rate when params.smagorinsky > 0. The first-order part of f^neq is the
    half-force shift of u, a^(1) = -F/2, relaxed at omega like the rest (Guo's source with one
    rate, as for BGK)."""
    lat = params.lattice
    feq = equilibrium(lat, rho, u)
    omega = even_rate(f, feq, rho, u, force, params)
    first = None if force is None else [-0.5 * c for c in force]
    post = collision_regularized.regularized(lat, f, feq, rho, u, omega, first)
    return with_guo_source(lat, post, u, force, omega, omega)


def kbc(
    f: Populations, rho: Array, u: Sequence[Array], force: Force, params: CollisionParams
) -> tuple[Array, ...]:
    """KBC entropic multi-relaxation (Karlin, Bosch & Chikatamarla 2014; Bosch et al. 2015,
    kernels/collision_kbc.py), D2Q9 and D3Q27: the shear part relaxed at omega, the higher-order
    part at beta gamma with the entropic stabiliser gamma. Guo's source with omega for both
    parities (the force's first-moment mismatch relaxes at omega, as in BGK). No subgrid model:
    the stabiliser is KBC's own (the setup rejects fluid.les with kbc)."""
    lat = params.lattice
    if params.smagorinsky > 0.0:
        raise ValueError("kbc takes no subgrid model (its entropic stabiliser replaces it)")
    feq = equilibrium(lat, rho, u)
    first = None if force is None else [-0.5 * c for c in force]
    post = collision_kbc.kbc(lat, f, feq, rho, u, params.omega, first)
    return with_guo_source(lat, post, u, force, params.omega, params.omega)


OPERATORS: dict[str, Operator] = {"bgk": bgk, "trt": trt, "regularized": regularized, "kbc": kbc}


def make_collide(setup: FluidSetup) -> Callable[..., tuple[Array, ...]]:
    """The setup's collision as collide(f, time, sponge=None) -> f_post: q arrays (*shape) in
    and out, the output in the storage dtype; ``time`` (int32 scalar) sets a time-dependent
    body force; ``sponge`` ((*shape) or None, the geometry's absorbing layer) adds its
    relaxation time to tau there."""
    if setup.collision not in OPERATORS:
        raise ValueError(f"collision {setup.collision!r} not in {sorted(OPERATORS)}")
    operator = OPERATORS[setup.collision]
    params = CollisionParams.from_setup(setup)

    def collide(f: Sequence[Array], time: Array, sponge: Array | None = None) -> tuple[Array, ...]:
        force = body_force_at(setup, time)
        rho, u = moments(params.lattice, f, force, params.dtype)
        local = params
        if sponge is not None:
            local = dataclasses.replace(params, omega=1.0 / (1.0 / params.omega + sponge))
        post = operator(f, rho, u, force, local)
        return tuple(p.astype(params.dtype) for p in post)

    return collide
