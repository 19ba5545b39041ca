"""Content digest of a state pytree, independent of how the arrays are split.

A checkpoint stores the digest of the state it saved; after a restore the digest is computed
again and compared, so any damage to the data that reaches the restored arrays (a truncated or
overwritten file, a wrong block) is caught, whatever the file layout of the checkpoint.

Every element contributes ``mix(bits, global flat index)`` to a sum modulo 2^32. Integer sums
do not depend on order, so a block of a field, summed over all blocks, gives the same value as
the whole field on one device; the index weight makes swapped or shifted values visible.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_GOLDEN = np.uint32(0x9E3779B1)  # odd multiplier (Knuth's multiplicative hashing constant)
_OFFSET = np.uint32(0x7F4A7C15)


def _as_words(x: jax.Array) -> jax.Array:
    """The array's bit pattern as uint32 words, (*shape[, words per element])."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    size = x.dtype.itemsize
    if size == 4:
        return lax.bitcast_convert_type(x, jnp.uint32)
    if size == 8:
        return lax.bitcast_convert_type(x, jnp.uint32)  # (*shape, 2)
    if size == 2:
        return lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32)
    return lax.bitcast_convert_type(x, jnp.uint8).astype(jnp.uint32)


@functools.partial(jax.jit, static_argnums=(1, 2))
def block_digest(x: jax.Array, offset: tuple[int, ...], global_shape: tuple[int, ...]):
    """Digest (uint32) of block ``x`` that starts at ``offset`` in an array of
    ``global_shape``; the digests of all blocks sum (mod 2^32) to the whole array's."""
    words = _as_words(x)
    per_element = 1 if words.ndim == x.ndim else words.shape[-1]
    index = jnp.zeros(x.shape, jnp.uint32)
    stride = 1
    for axis in range(x.ndim - 1, -1, -1):
        along = lax.broadcasted_iota(jnp.uint32, x.shape, axis) + np.uint32(offset[axis])
        index = index + along * np.uint32(stride % (1 << 32))
        stride *= global_shape[axis]
    if per_element > 1:
        index = index[..., None] * np.uint32(per_element) + lax.broadcasted_iota(
            jnp.uint32, words.shape, words.ndim - 1
        )
    weight = index * _GOLDEN + _OFFSET
    mixed = (words * weight) ^ (words >> 13) ^ (weight >> 7)
    return jnp.sum(mixed, dtype=jnp.uint32)


def state_digest(tree, offsets, global_shapes) -> list[int]:
    """One digest per leaf of ``tree`` as this process holds it (a global array or a block).

    Args:
        tree: pytree of arrays.
        offsets: matching list of each leaf's block offset (zeros for a whole array).
        global_shapes: matching list of each leaf's global shape.
    """
    out = []
    for leaf, offset, shape in zip(jax.tree.leaves(tree), offsets, global_shapes, strict=True):
        value = block_digest(leaf, tuple(offset), tuple(shape))
        if not getattr(value, "is_fully_addressable", True):
            value = value.addressable_data(0)
        out.append(int(np.asarray(value)))
    return out
