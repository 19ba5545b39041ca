"""Streaming: populations move one link along their velocity each step.

Pull form: f_i(x, t+1) = f_i*(x - c_i, t). Domain edges are periodic; walls, inlets and
neighbouring subdomains overwrite what wraps around (they are boundary rules, see boundaries.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jax import Array

from kernels.lattices import Lattice


def shift(field: Array, offset: Sequence[int]) -> Array:
    """Periodic shift of a (*grid) field: out(x) = field(x - offset)."""
    axes = tuple(a for a, s in enumerate(offset) if s != 0)
    if not axes:
        return field
    return jnp.roll(field, tuple(int(offset[a]) for a in axes), axis=axes)


def stream(lattice: Lattice, populations: Sequence[Array]) -> tuple[Array, ...]:
    """Periodic pull streaming of q arrays (*grid)."""
    return tuple(shift(populations[i], lattice.c[i]) for i in range(lattice.q))
