"""Nudging (Newtonian relaxation) of a lattice-Boltzmann velocity field toward point probes.

Observation operator: the model velocity at a probe is the multilinear interpolation of the
node values around its position (``probe_stencils`` / ``sample``). The correction spreads each
probe's innovation over the nodes within ``radius`` with the compactly supported Wendland C2
weight w(r) = (1 - r/R)^4 (4 r/R + 1) (Wendland 1995, Adv. Comput. Math. 4, 389), so that

    u_new(x) = u(x) + gain * sum_p w(|x - x_p|) (y_p - H_p u),

and the populations are shifted by the change of their equilibrium,
f_i <- f_i + f_i^eq(rho, u_new) - f_i^eq(rho, u), which changes the momentum by exactly
rho (u_new - u) and leaves the density and the non-equilibrium part alone.
Positions are in lattice units (node index coordinates); everything is pure array math.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import Array

from kernels.equilibrium import density_velocity, equilibrium
from kernels.lattices import Lattice


class ProbeStencils(NamedTuple):
    """Interpolation stencils of P probes in a d-dimensional grid (host-side constants).

    Attributes:
        index: (P, 2^d, d) int node indices of the corners around each probe.
        weight: (P, 2^d) multilinear weights (each row sums to 1).
    """

    index: np.ndarray
    weight: np.ndarray


def probe_stencils(positions: np.ndarray, shape: tuple[int, ...]) -> ProbeStencils:
    """Stencils of probes at ``positions`` (P, d) in lattice units, inside [0, n-1] per axis."""
    positions = np.asarray(positions, dtype=np.float64)
    d = len(shape)
    if positions.ndim != 2 or positions.shape[1] != d:
        raise ValueError(f"positions must be (P, {d}), got {positions.shape}")
    upper = np.asarray(shape) - 1
    if np.any(positions < 0) or np.any(positions > upper):
        raise ValueError(f"probe positions must lie in [0, n-1] per axis {tuple(upper)}")
    base = np.minimum(np.floor(positions).astype(int), np.maximum(upper - 1, 0))
    frac = positions - base
    corners = np.array(list(itertools.product((0, 1), repeat=d)))  # (2^d, d)
    index = np.minimum(base[:, None, :] + corners[None], upper)
    weight = np.prod(np.where(corners[None] == 1, frac[:, None, :], 1.0 - frac[:, None, :]), axis=2)
    return ProbeStencils(index, weight)


def sample(velocity: Array, stencils: ProbeStencils) -> Array:
    """Model velocity at the probes, (P, d), from velocity (d, *grid)."""
    idx = tuple(jnp.asarray(stencils.index[..., k]) for k in range(stencils.index.shape[-1]))
    values = velocity[(slice(None), *idx)]  # (d, P, 2^d)
    return jnp.einsum("dpc,pc->pd", values, jnp.asarray(stencils.weight, velocity.dtype))


def spreading_weights(positions: np.ndarray, shape: tuple[int, ...], radius: float) -> np.ndarray:
    """Wendland C2 weights (P, *grid) of every node for each probe; 0 beyond ``radius`` cells."""
    if not radius > 0:
        raise ValueError(f"radius must be > 0 cells, got {radius}")
    axes = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
    grid = np.stack(axes)  # (d, *grid)
    positions = np.asarray(positions, dtype=np.float64)
    out = np.empty((positions.shape[0], *shape))
    for p, x in enumerate(positions):
        r = np.sqrt(sum((grid[k] - x[k]) ** 2 for k in range(len(shape)))) / radius
        out[p] = np.where(r < 1.0, (1.0 - r) ** 4 * (4.0 * r + 1.0), 0.0)
    return out


def velocity_correction(weights: Array, innovation: Array, gain: float) -> Array:
    """du (d, *grid) = gain * sum_p weights[p] * innovation[p]; weights (P, *grid), innovation
    (P, d) in lattice velocity units, gain in (0, 1] per application."""
    return gain * jnp.tensordot(innovation.T, weights, axes=1)


def nudge_populations(
    lattice: Lattice, populations: Array, velocity_change: Array, mask: Array | None = None
) -> Array:
    """Populations (q, *grid) with the velocity raised by ``velocity_change`` (d, *grid).

    ``mask`` (*grid) bool: nodes that may change (fluid nodes; solids and boundaries stay).
    """
    rho, u = density_velocity(lattice, populations)
    if mask is not None:
        velocity_change = jnp.where(mask, velocity_change, 0.0)
    u_new = [u[k] + velocity_change[k] for k in range(lattice.d)]
    old = equilibrium(lattice, rho, u)
    new = equilibrium(lattice, rho, u_new)
    return jnp.stack([populations[i] + new[i] - old[i] for i in range(lattice.q)])
