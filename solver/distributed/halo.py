"""Halo back ends: where a ghost block comes from.

The fluid step fills every ghost region of a padded buffer from a block of its own interior
(``solver.fluid.step.write_padded``) and asks the halo to ``shift`` that block by the offset of
the ghost region. On one device the shift is the identity (a periodic edge: the block wraps
around onto the same array). Split over a mesh, the block travels to the neighbouring shard
instead, so a subdomain edge is one more kind of ghost fill and serial and parallel runs take
the same code path.

- ``SingleHalo``: one device, every edge periodic.
- ``XlaHalo``: inside ``shard_map``; ``lax.ppermute`` over the mesh axes the shift crosses
  (diagonal shifts go straight to the diagonal neighbour, one collective per ghost region).
- ``MpiHalo``: one process per device; ``mpi4jax.sendrecv`` on a cloned communicator.

Every block bound for the same neighbour in one step travels as one message
(``shift_together``).

Edges and corners (the regions that diagonal directions read in D3Q19 and D3Q27) use the
same shift with two or three non-zero components.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import jax.numpy as jnp
from jax import Array, lax

from solver.distributed.decomposition import Decomposition


class Halo(Protocol):
    def shift(self, block: Array, offset: Sequence[int]) -> Array:
        """The block sent by the shard at ``-offset`` (periodic over the mesh); offset in
        {-1, 0, 1} per spatial axis."""

    def route(self, offset: Sequence[int]) -> tuple[int, ...]:
        """The shift that actually crosses shards: ``offset`` with unsplit axes zeroed (all
        zeros: the block stays on this shard)."""

    def at_edge(self, axis: int, side: str) -> Array | bool:
        """Whether this shard holds the global ``side`` ("low"/"high") face along ``axis``."""

    def sum(self, x: Array) -> Array:
        """Sum of ``x`` over all shards (every shard gets the result)."""

    def origin(self, block: Sequence[int]) -> tuple[Array | int, ...]:
        """Global index of this shard's first cell along each axis (``block``: its shape)."""

    def block_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The shape of every shard's block of a global grid of ``shape`` (cells)."""


class SingleHalo:
    """One device: shifts wrap onto the same array; every face is a global face."""

    def shift(self, block: Array, offset: Sequence[int]) -> Array:
        return block

    def route(self, offset: Sequence[int]) -> tuple[int, ...]:
        return (0,) * len(offset)

    def at_edge(self, axis: int, side: str) -> bool:
        return True

    def sum(self, x: Array) -> Array:
        return x

    def origin(self, block: Sequence[int]) -> tuple[int, ...]:
        return (0,) * len(block)

    def block_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return tuple(shape)


class XlaHalo:
    """Inside ``shard_map`` over a mesh whose axis names are ``decomposition.axis_names``."""

    def __init__(self, decomposition: Decomposition) -> None:
        self.mesh = decomposition.mesh
        self.names = decomposition.axis_names

    def shift(self, block: Array, offset: Sequence[int]) -> Array:
        axes = [a for a, o in enumerate(offset) if o and self.mesh[a] > 1]
        if not axes:
            return block
        sizes = [self.mesh[a] for a in axes]
        perm = []
        # ppermute over a tuple of axes indexes the shards row-major in the tuple's order
        for coords in itertools.product(*(range(m) for m in sizes)):
            dest = [(c + offset[a]) % m for c, a, m in zip(coords, axes, sizes, strict=True)]
            perm.append((_linear(coords, sizes), _linear(dest, sizes)))
        return lax.ppermute(block, tuple(self.names[a] for a in axes), perm)

    def route(self, offset: Sequence[int]) -> tuple[int, ...]:
        return _crossing(offset, self.mesh)

    def at_edge(self, axis: int, side: str) -> Array | bool:
        m = self.mesh[axis]
        if m == 1:
            return True
        index = lax.axis_index(self.names[axis])
        return index == 0 if side == "low" else index == m - 1

    def sum(self, x: Array) -> Array:
        # over every mesh axis, size-1 ones included: sharded inputs vary over all of them
        return lax.psum(x, self.names)

    def origin(self, block: Sequence[int]) -> tuple[Array | int, ...]:
        return tuple(
            lax.axis_index(name) * n if m > 1 else 0
            for name, n, m in zip(self.names, block, self.mesh, strict=True)
        )

    def block_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return _divided(shape, self.mesh)


class MpiHalo:
    """One process per shard; ``comm`` is this run's own (cloned) communicator, whose rank r
    holds shard r of ``decomposition``."""

    def __init__(self, decomposition: Decomposition, comm) -> None:
        self.decomposition = decomposition
        self.comm = comm
        self.coords = decomposition.coords(comm.Get_rank())

    def shift(self, block: Array, offset: Sequence[int]) -> Array:
        import mpi4jax

        step = _crossing(offset, self.decomposition.mesh)
        if not any(step):
            return block
        dest = self.decomposition.rank([c + s for c, s in zip(self.coords, step, strict=True)])
        source = self.decomposition.rank([c - s for c, s in zip(self.coords, step, strict=True)])
        # one tag per shift, so two shifts between the same pair of ranks never cross
        tag = _linear([s + 1 for s in step], [3] * len(step))
        return mpi4jax.sendrecv(
            block, jnp.empty_like(block), source, dest, sendtag=tag, recvtag=tag, comm=self.comm
        )

    def route(self, offset: Sequence[int]) -> tuple[int, ...]:
        return _crossing(offset, self.decomposition.mesh)

    def at_edge(self, axis: int, side: str) -> bool:
        c, m = self.coords[axis], self.decomposition.mesh[axis]
        return c == 0 if side == "low" else c == m - 1

    def sum(self, x: Array) -> Array:
        import mpi4jax
        from mpi4py import MPI

        if self.comm.Get_size() == 1:
            return x
        return mpi4jax.allreduce(x, op=MPI.SUM, comm=self.comm)

    def origin(self, block: Sequence[int]) -> tuple[int, ...]:
        return tuple(int(c) * n for c, n in zip(self.coords, block, strict=True))

    def block_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return _divided(shape, self.decomposition.mesh)


def shift_together(halo: Halo, blocks: Sequence[Array], offset: Sequence[int]) -> list[Array]:
    """``halo.shift`` of several blocks bound for the same neighbour, as one message.

    A step sends the ghost blocks of every direction that crosses a face; packing them into
    one buffer per neighbour turns ~26 small messages per step (D3Q19) into one per neighbour,
    which is what latency-bound halo exchanges need. All blocks share one dtype.
    """
    if len(blocks) == 1:
        return [halo.shift(blocks[0], offset)]
    packed = halo.shift(jnp.concatenate([b.ravel() for b in blocks]), offset)
    out, start = [], 0
    for b in blocks:
        out.append(packed[start : start + b.size].reshape(b.shape))
        start += b.size
    return out


def _crossing(offset: Sequence[int], mesh: Sequence[int]) -> tuple[int, ...]:
    """``offset`` with the axes the mesh does not split zeroed."""
    return tuple(int(o) if m > 1 else 0 for o, m in zip(offset, mesh, strict=True))


def _divided(shape: Sequence[int], mesh: Sequence[int]) -> tuple[int, ...]:
    """The block of a grid of ``shape`` split evenly over ``mesh`` (the decomposition checks
    that it divides)."""
    return tuple(n // m for n, m in zip(shape, mesh, strict=True))


def _linear(coords: Sequence[int], sizes: Sequence[int]) -> int:
    r = 0
    for c, m in zip(coords, sizes, strict=True):
        r = r * m + c
    return r
