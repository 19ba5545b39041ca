"""Keep XLA from recomputing a cheap value in every consumer: write it to memory once.

XLA fuses a cheap elementwise producer into each of its consumers. For a gather that is
costly: the gather's fusion recomputes the producer for every element it loads, at random
positions, once per consumer (the coupled step's stencil index was computed ~50 integer
operations per loaded value, four times per 4-wide row, in three gathers and a scatter:
docs/performance.md). ``lax.optimization_barrier`` stops this on GPU, but XLA:CPU expands the
barrier before it fuses; there the value is passed through a conditional, whose results are
buffers (a few microseconds per call). Neither changes a value or a gradient.
"""

from __future__ import annotations

from typing import TypeVar

import jax
import jax.numpy as jnp
from jax import Array, lax

T = TypeVar("T")


def materialised(tree: T, token: Array) -> T:
    """``tree`` unchanged, computed once into memory before any consumer reads it.

    Args:
        tree: a pytree of arrays.
        token: a traced scalar that is >= 0 (a step counter): the CPU conditional's predicate,
            which XLA cannot fold away (were it negative, the CPU result would be zeros).
    """
    if jax.default_backend() != "cpu":
        return lax.optimization_barrier(tree)
    # two different branches: XLA replaces a conditional whose branches are equal by one
    return lax.cond(token >= 0, _same, _zeros, tree)


def _same(tree):
    return tree


def _zeros(tree):
    return jax.tree.map(jnp.zeros_like, tree)
