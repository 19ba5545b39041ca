"""Ghosts and migration: the two ways bodies travel between subdomains, by ``lax.ppermute``.

Both run inside ``shard_map`` over a mesh with axes ("x", "y", "z") and go axis by axis, in
both directions along each split axis, between direct neighbours only (the box is not periodic:
the first and last block of an axis send nothing outward). Going axis by axis delivers edges and
corners too: what arrived along x is forwarded along y and then z, as the fluid's halos fill
their corners. Every message is one fixed-size float buffer; a ``ppermute`` delivers zeros where
no neighbour sends, which reads as empty rows (id + 1 = 0, ``records``).

- Ghosts: every owned body, and every ghost received along an earlier axis, within ``reach`` of
  a face is copied to the subdomain behind that face. A subdomain's owned bodies then see every
  body within ``reach`` of them.
- Migration: a body whose centre left the block goes, with its force, torque and spring
  histories, to the neighbour along each axis where its owner index differs from ours. A body
  can move at most one block per step; a larger jump is counted (the caller reports it).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array, lax

from kernels.rigid_body import Bodies
from solver.distributed.bodies import records
from solver.distributed.bodies.layout import BodyLayout
from solver.distributed.bodies.records import SubdomainState


def mesh_coords(layout: BodyLayout) -> Array:
    """(3,) int32 mesh coordinates of this subdomain (inside ``shard_map``)."""
    return jnp.stack([lax.axis_index(name) for name in layout.axis_names]).astype(jnp.int32)


def _send(block: Array, layout: BodyLayout, axis: int, direction: int) -> Array:
    """``block`` of the neighbour at -direction along ``axis`` (zeros at the box's edge)."""
    m = layout.mesh[axis]
    perm = [(c, c + direction) for c in range(m) if 0 <= c + direction < m]
    return lax.ppermute(block, layout.axis_names[axis], perm)


def owner_index(layout: BodyLayout, position: Array, axis: int) -> Array:
    """(n,) int32 owner block index along ``axis`` of centres (n, 3) m (clamped into the mesh;
    the same arithmetic as ``BodyLayout.owner_coords``)."""
    lower = layout.lower[axis]
    width = layout.block_width[axis]
    index = jnp.floor((position[:, axis] - lower) / width)
    index = jnp.where(jnp.isnan(index), 0, index)
    return jnp.clip(index, 0, layout.mesh[axis] - 1).astype(jnp.int32)


def exchange_ghosts(
    layout: BodyLayout, coords: Array, gid: Array, bodies: Bodies
) -> tuple[Array, Bodies, Array]:
    """The ghosts of this subdomain: copies of the neighbours' bodies near its faces.

    Args:
        coords: (3,) this subdomain's mesh coordinates.
        gid: (C,) ids of the owned slots (-1 free); bodies: their state.

    Returns:
        gid (G,) of the ghosts (-1 free), their Bodies (G slots), and the number of ghosts
        sent here (int32; more than G = ``ghost_capacity`` means some were lost; after a loss
        it is a lower bound of the size needed, as lost ghosts are not forwarded).
    """
    capacity = layout.ghost_capacity
    dtype = bodies.position.dtype
    own_rows = records.ghost_columns(gid, bodies)
    ghost_rows = jnp.zeros((capacity, own_rows.shape[1]), dtype)
    arrived = jnp.zeros((), jnp.int32)
    needed = jnp.zeros((), jnp.int32)
    for axis, m in enumerate(layout.mesh):
        if m == 1:
            continue
        pool = jnp.concatenate([own_rows, ghost_rows])
        valid = pool[:, 0] > 0
        x = pool[:, 1 + axis]  # the position columns follow the id column
        c = coords[axis]
        low_face = layout.lower[axis] + c * layout.block_width[axis]
        high_face = low_face + layout.block_width[axis]
        outbound = (
            (valid & (c < m - 1) & (x >= high_face - layout.reach), +1),
            (valid & (c > 0) & (x < low_face + layout.reach), -1),
        )
        for mask, direction in outbound:
            index, used, count = records.select(mask, capacity)
            received = _send(records.gather_rows(pool, index, used), layout, axis, direction)
            # the true count travels too, so that an overflow report gives the size needed
            needed = needed + _send(count, layout, axis, direction)
            got = received[:, 0] > 0
            ghost_rows = records.append_rows(ghost_rows, arrived, received, got)
            arrived = arrived + jnp.sum(got, dtype=jnp.int32)
    ghost_gid, ghosts = records.unpack_ghosts(ghost_rows, bodies)
    return ghost_gid, ghosts, needed


def migrate(
    layout: BodyLayout, coords: Array, state: SubdomainState
) -> tuple[SubdomainState, Array, Array, Array]:
    """Hand the bodies whose centres left this block over to the neighbours.

    Returns:
        the state after migration; the largest message needed (int32, compare with
        ``migration_capacity``); the occupancy needed (int32, compare with ``capacity``); the
        bodies that jumped more than one block (int32). A body that did not fit its message
        stays here (and is counted); one that finds no free slot is lost (and counted).
    """
    capacity = layout.migration_capacity
    needed_message = jnp.zeros((), jnp.int32)
    needed_slots = jnp.sum(state.gid >= 0, dtype=jnp.int32)
    jumped = jnp.zeros((), jnp.int32)
    for axis, m in enumerate(layout.mesh):
        if m == 1:
            continue
        c = coords[axis]
        owner = owner_index(layout, state.bodies.position, axis)
        occupied = state.gid >= 0
        jumped = jumped + jnp.sum(occupied & (jnp.abs(owner - c) > 1), dtype=jnp.int32)
        rows = records.migrant_columns(state)
        leaving = jnp.zeros_like(occupied)
        inbound = []
        for mask, direction in ((occupied & (owner > c), +1), (occupied & (owner < c), -1)):
            index, used, count = records.select(mask, capacity)
            needed_message = jnp.maximum(needed_message, count)
            leaving = leaving | records.first_of(mask, capacity)
            inbound.append(_send(records.gather_rows(rows, index, used), layout, axis, direction))
        state = _vacate(state, leaving)
        state, needed = _insert(state, jnp.concatenate(inbound))
        needed_slots = jnp.maximum(needed_slots, needed)
    return state, needed_message, needed_slots, jumped


def _vacate(state: SubdomainState, leaving: Array) -> SubdomainState:
    """Free the slots where ``leaving`` holds (reset to the neutral body, zero histories)."""
    empty = records.empty_bodies(state.gid.shape[0], state.bodies.position.dtype)
    stay = ~leaving

    def keep(value, blank):
        return jnp.where(stay.reshape((-1,) + (1,) * (value.ndim - 1)), value, blank)

    return state.replace(
        gid=jnp.where(stay, state.gid, -1),
        bodies=Bodies(
            **{
                name: keep(getattr(state.bodies, name), getattr(empty, name))
                for name in records.BODY_FIELDS
            }
        ),
        force=keep(state.force, 0.0),
        torque=keep(state.torque, 0.0),
        partners=keep(state.partners, -1),
        history=keep(state.history, 0.0),
        plane_history=keep(state.plane_history, 0.0),
        contact_count=keep(state.contact_count, 0),
    )


def _insert(state: SubdomainState, rows: Array) -> tuple[SubdomainState, Array]:
    """Put the non-empty migrant rows (M, W') into free slots, lowest slots first.

    Returns the state and the occupancy it needed (more than the capacity: bodies were lost).
    """
    capacity = state.gid.shape[0]
    arriving = rows[:, 0] > 0
    free = state.gid < 0
    free_slots, _ = records.compacted(free, capacity, fill_value=capacity)
    rank = jnp.cumsum(arriving) - 1
    slot = jnp.where(arriving, free_slots[jnp.clip(rank, 0, capacity - 1)], capacity)
    slot = jnp.where(rank < capacity, slot, capacity)
    incoming = records.unpack_migrants(rows, state)
    needed = jnp.sum(~free, dtype=jnp.int32) + jnp.sum(arriving, dtype=jnp.int32)
    # time and overflow are not per slot: left out of the map (None is an empty subtree)
    merged = records.put_in_slots(
        state.replace(time=None, overflow=None), incoming.replace(time=None, overflow=None), slot
    )
    return merged.replace(time=state.time, overflow=state.overflow), needed
