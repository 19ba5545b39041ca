"""Fluid-body coupling by the partially saturated cells method (PSM), lattice units.

Noble & Torczynski 1998 (Int. J. Mod. Phys. C 9, 1189): each cell holds a solid fraction
eps in [0, 1] and the solid's velocity u_s there. The collision blends the fluid's own
collision with a solid operator by the weight

    B = eps (tau - 1/2) / ((1 - eps) + (tau - 1/2)),

    f_i* = f_i + (1 - B) (f_i^fluid* - f_i) + B Omega_i^s,
    Omega_i^s = f_{-i} - f_{-i}^eq(rho, u) + f_i^eq(rho, u_s) - f_i,

where f^fluid* is the fluid operator's post-collision state (BGK, TRT, ... with its forcing)
and Omega^s bounces the non-equilibrium part back about the solid's velocity. The momentum the
solid operator removes from the fluid is the hydrodynamic force on the solid in that cell,

    F = - sum_i B Omega_i^s c_i        (lattice force: momentum per step per cell),

so fluid plus bodies conserve momentum exactly. Cells change between fluid and solid smoothly
(eps is continuous in the body's position), which is why PSM shows no force spikes when a body
moves across the grid, unlike bounce-back with refill.

Bodies reach the grid through a stencil: a cube of S^d cells per body starting at ``base``
(the cell index of its lower corner), holding every cell the body may cover. Fields of many
bodies are summed into the grid by scatter-add; per-body totals come back by gather. All
functions are pure and run unchanged on one shard's block (``origin``: the block's first cell
in the global grid) inside ``shard_map``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import Array

from kernels.equilibrium import equilibrium
from kernels.lattices import Lattice


def psm_weight(eps: Array, tau: float) -> Array:
    """Noble & Torczynski's weight B(eps, tau) of the solid operator; eps in [0, 1]."""
    eps = jnp.clip(eps, 0.0, 1.0)
    return eps * (tau - 0.5) / ((1.0 - eps) + (tau - 0.5))


def psm_blend(
    lattice: Lattice,
    f: Sequence[Array],
    fluid_post: Sequence[Array],
    rho: Array,
    u: Sequence[Array],
    weight: Array,
    u_solid: Sequence[Array],
) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
    """The PSM collision and the hydrodynamic force density on the solid.

    Args:
        f: q arrays (*shape), pre-collision populations.
        fluid_post: q arrays (*shape), the fluid operator's post-collision populations.
        rho: (*shape) density; u: d arrays (*shape) fluid velocity (as the fluid operator used).
        weight: (*shape) B from ``psm_weight``.
        u_solid: d arrays (*shape) velocity of the solid in each cell.

    Returns:
        (post, force): q arrays (*shape) post-collision populations and d arrays (*shape) the
        force on the solid per cell, lattice units.
    """
    q, d = lattice.q, lattice.d
    feq_fluid = equilibrium(lattice, rho, u)
    feq_solid = equilibrium(lattice, rho, u_solid)
    post, force = [], [jnp.zeros_like(rho) for _ in range(d)]
    for i in range(q):
        o = int(lattice.opposite[i])
        solid_term = weight * (f[o] - feq_fluid[o] + feq_solid[i] - f[i])
        post.append(f[i] + (1.0 - weight) * (fluid_post[i] - f[i]) + solid_term)
        for a in range(d):
            c = float(lattice.c[i, a])
            if c:
                force[a] = force[a] - c * solid_term
    return tuple(post), tuple(force)


# ---------------------------------------------------------------- bodies on the grid


def stencil_size(radius_cells: float) -> int:
    """S, the cells per axis of a stencil that holds every cell a sphere of radius r (cells)
    touches with ``sphere_fraction``: 2 r + 1 cells of partial cover plus one for the floor."""
    return int(np.ceil(2.0 * radius_cells + 1.0)) + 1


def stencil_offsets(size: int, d: int) -> np.ndarray:
    """(S^d, d) int32 offsets of the cells of a stencil, C order."""
    return np.array(list(itertools.product(range(size), repeat=d)), dtype=np.int32)


def stencil_base(center: Array, radius: Array) -> Array:
    """(n, d) int32 lower corner of each body's stencil.

    Args:
        center: (n, d) body centres in cell-index coordinates (cell i's centre at i).
        radius: (n,) radius in cells.
    """
    return jnp.floor(center - radius[:, None] - 0.5).astype(jnp.int32)


def sphere_fraction(center: Array, radius: Array, cells: Array) -> Array:
    """(n, S^d) solid fraction of each stencil cell covered by each sphere.

    eps = clip(r + 1/2 - |x - X|, 0, 1): the cell's cover by a ball approximated by its
    centre's distance to the surface, linear across one cell (the sphere's volume is
    reproduced to O(1/r^2), and eps is continuous in the position, so a moving body changes
    the cells it covers gradually).

    Args:
        center: (n, d) cell-index coordinates; radius: (n,) cells;
        cells: (n, S^d, d) the cells' integer indices (``base[:, None] + offsets``).
    """
    rel = cells.astype(center.dtype) - center[:, None, :]
    distance = jnp.sqrt(jnp.sum(rel * rel, axis=-1))
    return jnp.clip(radius[:, None] + 0.5 - distance, 0.0, 1.0)


def local_flat_index(
    cells: Array, origin: Sequence[Array | int], block: Sequence[int], grid: Sequence[int]
) -> Array:
    """Flat index of each global cell in this block, or the block size where it lies outside.

    Args:
        cells: (..., d) global cell indices (may lie outside the grid: wrapped periodically).
        origin: d global indices of the block's first cell.
        block: the block's shape; grid: the global grid's shape.
    """
    d = len(block)
    flat = jnp.zeros(cells.shape[:-1], jnp.int32)
    inside = jnp.ones(cells.shape[:-1], bool)
    for a in range(d):
        local = jnp.mod(cells[..., a], grid[a]) - origin[a]
        inside = inside & (local >= 0) & (local < block[a])
        flat = flat * block[a] + local
    size = int(np.prod(block))
    return jnp.where(inside, flat, size)


def scatter_to_block(values: Array, flat: Array, block: Sequence[int]) -> Array:
    """Sum per-stencil-cell values into the block: (n, S^d, k) -> (k, *block); cells outside
    the block (flat index = block size) are dropped."""
    size = int(np.prod(block))
    k = values.shape[-1]
    grid = jnp.zeros((size, k), values.dtype)
    grid = grid.at[flat.reshape(-1)].add(values.reshape(-1, k), mode="drop")
    return jnp.moveaxis(grid, -1, 0).reshape((k, *block))


def gather_from_block(field: Array, flat: Array) -> Array:
    """Per-stencil-cell values of a (k, *block) field: (n, S^d, k); zero outside the block."""
    k = field.shape[0]
    table = jnp.moveaxis(field.reshape(k, -1), 0, -1)
    return table.at[flat].get(mode="fill", fill_value=0.0)
