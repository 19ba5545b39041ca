"""The per-subdomain body arrays and the flat records they travel in between subdomains.

A subdomain holds ``capacity`` slots; slot s is occupied where ``gid[s] >= 0`` (the body's
global id, its index in the single-device scene). Free slots hold a neutral body (at the origin,
at rest, infinitely heavy, identity orientation) so that kernels applied to all slots stay
finite and give zero forces and energies for them.

A body leaves its subdomain as one row of floats (``pack``): its id + 1 (so that the all-zero row
a ``ppermute`` delivers where no neighbour sends reads as empty), its state and, for migration,
its force, torque, contact count and tangential spring histories keyed by the partners' global
ids. Integers are exact in float64 up to 2**53 and in float32 up to 2**24 ids.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import Array

from kernels.rigid_body import Bodies

BODY_FIELDS = tuple(f.name for f in dataclasses.fields(Bodies))
OVERFLOW_SLOTS = 6  # the needed sizes of CAPACITY_NAMES, then bodies that jumped > 1 block


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class SubdomainState:
    """One subdomain's bodies (inside ``shard_map``; globally every leaf gains a leading
    subdomain axis folded into its first axis).

    Attributes:
        gid: (C,) int32 global id of the body in each slot, -1 for a free slot.
        bodies: Bodies of C slots.
        force, torque: (C, 3) N and N m acting at ``time``.
        partners: (C, K) int32 global ids of each body's partners (both directions), -1 padding.
        history: (C, K, 3) m, the tangential spring of each pair, oriented as in the
            single-device run (from the pair's lower id to its higher id).
        plane_history: (C, p, 3) m.
        contact_count: (C,) int32 active contacts.
        time: (1,) int32 steps done.
        overflow: (6,) int32, sticky: the largest owned, ghost, migration, cell and partner
            counts seen (compare with the capacities) and the number of bodies that tried to
            move more than one block in a step.
    """

    gid: Array
    bodies: Bodies
    force: Array
    torque: Array
    partners: Array
    history: Array
    plane_history: Array
    contact_count: Array
    time: Array
    overflow: Array

    def replace(self, **changes) -> SubdomainState:
        return dataclasses.replace(self, **changes)


def empty_bodies(count: int, dtype) -> Bodies:
    """``count`` neutral bodies for free slots (see module docstring)."""
    zeros3 = jnp.zeros((count, 3), dtype)
    return Bodies(
        position=zeros3,
        orientation=jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.0, 0.0], dtype), (count, 4)),
        velocity=zeros3,
        angular_momentum=zeros3,
        prescribed_angular_velocity=zeros3,
        inverse_mass=jnp.zeros((count,), dtype),
        inverse_inertia=zeros3,
        kinematic=jnp.zeros((count,), bool),
    )


def _columns(array: Array, dtype) -> Array:
    """(C, ...) -> (C, width) in ``dtype``."""
    return array.reshape(array.shape[0], -1).astype(dtype)


def ghost_columns(gid: Array, bodies: Bodies) -> Array:
    """(C, W) rows of id + 1 and the body state: all a neighbour needs to compute contacts."""
    dtype = bodies.position.dtype
    parts = [_columns(gid + 1, dtype)]
    parts += [_columns(getattr(bodies, name), dtype) for name in BODY_FIELDS]
    return jnp.concatenate(parts, axis=1)


def migrant_columns(state: SubdomainState) -> Array:
    """(C, W') rows: the ghost columns plus force, torque, contact count and histories."""
    dtype = state.bodies.position.dtype
    parts = [ghost_columns(state.gid, state.bodies)]
    for leaf in (state.force, state.torque, state.contact_count, state.partners):
        parts.append(_columns(leaf, dtype))
    parts += [_columns(state.history, dtype), _columns(state.plane_history, dtype)]
    return jnp.concatenate(parts, axis=1)


def _split(rows: Array, shapes: list[tuple[int, ...]]) -> list[Array]:
    out, start = [], 0
    for shape in shapes:
        width = math.prod(shape)
        out.append(rows[:, start : start + width].reshape((rows.shape[0], *shape)))
        start += width
    return out


def _body_shapes(template: Bodies) -> list[tuple[int, ...]]:
    return [getattr(template, name).shape[1:] for name in BODY_FIELDS]


def unpack_ghosts(rows: Array, template: Bodies) -> tuple[Array, Bodies]:
    """(gid (M,), Bodies of M) from ghost rows (M, W); empty rows get gid -1."""
    shapes = [(), *_body_shapes(template)]
    gid_f, *fields = _split(rows, shapes)
    gid = jnp.round(gid_f).astype(jnp.int32) - 1
    values = {
        name: value.astype(getattr(template, name).dtype)
        for name, value in zip(BODY_FIELDS, fields, strict=True)
    }
    return gid, Bodies(**values)


def unpack_migrants(rows: Array, state: SubdomainState) -> SubdomainState:
    """Rows (M, W') as a SubdomainState of M slots (time and overflow taken from ``state``)."""
    width = 1 + sum(math.prod(shape) for shape in _body_shapes(state.bodies))
    gid, bodies = unpack_ghosts(rows[:, :width], state.bodies)
    # per body, or per clump member (``clump_slots``): the tables' shapes past the slot axis
    tables = [state.partners.shape[1:], state.history.shape[1:], state.plane_history.shape[1:]]
    force, torque, count, partners, history, plane = _split(
        rows[:, width:], [(3,), (3,), (), *tables]
    )
    return state.replace(
        gid=gid,
        bodies=bodies,
        force=force,
        torque=torque,
        partners=jnp.round(partners).astype(jnp.int32),
        history=history,
        plane_history=plane,
        contact_count=jnp.round(count).astype(jnp.int32),
    )


def select(mask: Array, size: int) -> tuple[Array, Array, Array]:
    """The first ``size`` indices where ``mask`` holds, in ascending order.

    Returns:
        index (size,) int32 (0 where unused), used (size,) bool, count: int32 true number of
        selected entries (more than ``size`` means the buffer overflowed).
    """
    index, count = compacted(mask, size, fill_value=0)
    return index, jnp.arange(size) < count, count


def compacted(mask: Array, size: int, fill_value: int) -> tuple[Array, Array]:
    """The first ``size`` indices (size,) int32 where ``mask`` (n,) holds, ascending, padded
    with ``fill_value``, and their true count (int32).

    One stable sort of the keys (the selected entries first), not ``jnp.nonzero``: that is a
    scatter and two cumulative sums, and XLA:CPU emits each scatter as a loop of its own
    (docs/performance.md "Start-up and compile time"); the indices are the same."""
    n = mask.shape[0]
    order = jnp.argsort(~mask, stable=True).astype(jnp.int32)
    if size > n:
        order = jnp.concatenate([order, jnp.zeros((size - n,), jnp.int32)])
    count = jnp.sum(mask, dtype=jnp.int32)
    return jnp.where(jnp.arange(size) < count, order[:size], fill_value), count


def first_of(mask: Array, size: int) -> Array:
    """``mask`` (n,) bool with only its first ``size`` true entries kept: the entries
    ``select(mask, size)`` picks."""
    return mask & (jnp.cumsum(mask, dtype=jnp.int32) <= size)


def append_rows(rows: Array, start: Array, received: Array, got: Array) -> Array:
    """``rows`` (G, W) with the rows of ``received`` (M, W) where ``got`` (M,) holds written
    in their order from row ``start`` (int32) on, those past G dropped: as
    ``rows.at[start + cumsum(got) - 1].set(received, mode="drop")`` with a sort and a gather
    in place of the scatter (``put_in_slots``)."""
    size = rows.shape[0]
    source, count = compacted(got, size, fill_value=0)
    rank = jnp.arange(size, dtype=jnp.int32) - start
    take = (rank >= 0) & (rank < count)
    picked = received[source[jnp.clip(rank, 0, size - 1)]]
    return jnp.where(take[:, None], picked, rows)


def put_in_slots(targets, values, slot: Array):
    """Leaf by leaf ``target.at[slot].set(value, mode="drop")`` for the pytrees ``targets``
    (leaves (C, ...)) and ``values`` (leaves (M, ...)), ``slot`` (M,) int32 distinct rows of
    the targets (C or more: dropped).

    One scatter of the row numbers, then a gather per leaf: XLA:CPU emits every scatter as
    a loop of its own, and a state has fifteen leaves (docs/performance.md "Start-up and
    compile time")."""
    capacity = jax.tree.leaves(targets)[0].shape[0]
    rows = slot.shape[0]
    if rows == 0:
        return targets
    source = jnp.full((capacity,), rows, jnp.int32)
    source = source.at[slot].set(jnp.arange(rows, dtype=jnp.int32), mode="drop")
    take = source < rows
    safe = jnp.minimum(source, rows - 1)

    def put(target: Array, value: Array) -> Array:
        mask = take.reshape((-1,) + (1,) * (target.ndim - 1))
        return jnp.where(mask, value[safe].astype(target.dtype), target)

    return jax.tree.map(put, targets, values)


def gather_rows(columns: Array, index: Array, used: Array) -> Array:
    """Rows ``columns[index]`` with unused ones zeroed (an empty record)."""
    return jnp.where(used[:, None], columns[index], 0.0)
