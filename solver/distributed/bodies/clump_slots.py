"""Clumps in a shard's body slots: each slot's member spheres, and their forces back per body.

A shard holds bodies in slots (``records.SubdomainState``); a clump's slot carries its pose,
and its members follow from the pose and the scene's member table, which is static and known
to every shard (``MemberTable``: the sphere ids of each body, padded to the largest clump, and
each sphere's offset in its body's principal frame). So only poses travel between shards, as
for spheres, and contacts, cover and lubrication run over member spheres:

- ``member_bodies``: the members of every slot as slots of their own (sphere ids, centres and
  velocities; mass, inertia and spin their body's), member k of slot b at row b M + k;
- ``slot_contacts``: ``forces.local_contacts`` over the members of the owned and ghost slots,
  summed onto the owned slots (the contact tables one row per member, M rows per slot);
- ``to_slots``: forces and torques per member summed onto their slots (torques about the
  body's centre of mass: the member's own plus (x_k - X_b) x F_k), as the single-device
  coupling sums a clump (``PsmCoupling._to_bodies``);
- ``pick_rows`` / ``place_rows``: the per-sphere tables of the whole scene (contact partners,
  springs) to per-slot rows of M members and back.

A plain sphere is a body of one member: width 1, its own id, offset zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from kernels import clump, rigid_body
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bodies.step import BodySetup, ContactParams
from solver.distributed.bodies.forces import KeptTable, LocalContacts, local_contacts
from solver.distributed.bodies.records import BODY_FIELDS


@dataclass(frozen=True, eq=False)
class MemberTable:
    """The scene's clumps (static, host side).

    Attributes:
        members: (n, M) int32 sphere ids of each body in ascending order, -1 padding.
        offset: (s, 3) m, each sphere's centre in its body's principal frame.
        n_spheres: s.
    """

    members: np.ndarray
    offset: np.ndarray
    n_spheres: int

    @property
    def width(self) -> int:
        """M, the most members of one body."""
        return int(self.members.shape[1])

    @classmethod
    def of(cls, setup: BodySetup) -> MemberTable:
        owner = np.asarray(setup.member_body)
        n, s = setup.n_bodies, setup.n_spheres
        counts = np.bincount(owner, minlength=n)
        members = np.full((n, int(counts.max())), -1, np.int32)
        order = np.argsort(owner, kind="stable")  # each body's spheres in ascending id
        rank = np.arange(s) - np.repeat(np.cumsum(counts) - counts, counts)
        members[owner[order], rank] = order
        return cls(members, np.asarray(setup.member_offset, np.float64), s)


def member_ids(table: MemberTable, gid: Array) -> Array:
    """(S M,) int32 sphere ids of the members of slots with body ids ``gid`` (S,), -1 for a
    free slot and for padding."""
    members = jnp.asarray(table.members)
    ids = members[jnp.where(gid >= 0, gid, 0)]
    return jnp.where((gid >= 0)[:, None], ids, -1).reshape(-1)


def rows_per_slot(setup: BodySetup) -> int:
    """Contact rows one slot holds: M for clumps (its members'), 1 for plain spheres."""
    return 1 if setup.spheres_only else MemberTable.of(setup).width


def member_bodies(
    table: MemberTable, gid: Array, bodies: Bodies
) -> tuple[Array, Bodies, Array, Array]:
    """The members of the slots (gid (S,), bodies S slots) as S M sphere slots, member k of
    slot b at row b M + k.

    Returns:
        sphere ids (S M,) int32 (-1: no sphere), their Bodies (centre and velocity the
        member's, every other field its body's, so that a contact sees the body's mass and
        spin), the slot of each member (S M,) int32 and its angular velocity (S M, 3) rad/s.
    """
    width = table.width
    slots = gid.shape[0]
    sid = member_ids(table, gid)
    owner = jnp.arange(slots * width, dtype=jnp.int32) // width  # no scatter (jnp.repeat's)
    dtype = bodies.position.dtype
    offset = jnp.asarray(table.offset, dtype)[jnp.where(sid >= 0, sid, 0)]
    offset = jnp.where((sid >= 0)[:, None], offset, 0.0)
    omega = rigid_body.angular_velocity(bodies)
    x, v = clump.sphere_kinematics(
        bodies.position, bodies.velocity, bodies.orientation, omega, owner, offset
    )
    # each slot's fields repeated for its M members (a copy, no gather)
    repeated = {name: jnp.repeat(getattr(bodies, name), width, axis=0) for name in BODY_FIELDS}
    repeated.update(position=x, velocity=v)
    return sid, Bodies(**repeated), owner, jnp.repeat(omega, width, axis=0)


def to_slots(
    force: Array, torque: Array, xs: Array, position: Array, arm_scale: float = 1.0
) -> tuple[Array, Array]:
    """(S, 3) force and torque per slot from (S M, 3) per member, member k of slot b at row
    b M + k (``member_bodies``; torque about the member's centre xs), the arm (x_k - X_b)
    arm_scale in the units of torque / force. A sum over each slot's M rows: no scatter (whose
    atomics would make the order, and the last bits, vary on a GPU)."""
    slots = position.shape[0]
    arm = ((xs.reshape(slots, -1, 3) - position[:, None, :]) * arm_scale).astype(force.dtype)
    force = force.reshape(slots, -1, 3)
    torque = torque.reshape(slots, -1, 3) + jnp.cross(arm, force)
    return jnp.sum(force, axis=1), jnp.sum(torque, axis=1)


def slot_contacts(
    setup: BodySetup,
    table: MemberTable,
    grid: CellGrid,
    origin: Array,
    gid: Array,
    bodies: Bodies,
    rows: int,
    partners: Array,
    history: Array,
    plane_history: Array,
    params: ContactParams,
    kept: KeptTable | None = None,
    member_force: Callable | None = None,
) -> LocalContacts:
    """``forces.local_contacts`` for slots that hold clumps: the first ``rows`` slots of gid
    (owned, then ghosts) with their tables (rows, M K), (rows, M K, 3), (rows, M p, 3).

    ``member_force(sphere ids, member Bodies, partner rows, slot of each member)`` adds a force
    on each owned member (the lubrication of a coupled run), (rows M, 3) N. Returns the
    forces (with each body's weight, once), torques about the centres of mass, tables and
    contact counts per owned slot; the kept pair table is over the members.
    """
    width = table.width
    sid, spheres, slot, _ = member_bodies(table, gid, bodies)
    m = rows * width
    result = local_contacts(
        setup, grid, origin, sid, spheres, m, partners.reshape(m, -1),
        history.reshape(m, -1, 3), plane_history.reshape(m, -1, 3), params, kept,
        group=slot, id_count=table.n_spheres, gravity=False,
    )  # fmt: skip
    on_member = result.force
    if member_force is not None:
        on_member = on_member + member_force(sid, spheres, result.partners, slot)
    owned = jax.tree.map(lambda leaf: leaf[:rows], bodies)
    force, torque = to_slots(on_member, result.torque, spheres.position[:m], owned.position)
    return result._replace(
        force=force + rigid_body.gravity_force(owned, params.gravity),
        torque=torque,
        partners=result.partners.reshape(rows, -1),
        history=result.history.reshape(rows, -1, 3),
        plane_history=result.plane_history.reshape(rows, -1, 3),
        contact_count=result.contact_count.reshape(rows, width).sum(axis=1, dtype=jnp.int32),
    )


def pick_rows(table: MemberTable, leaf: Array, index: Array, used: Array, blank) -> Array:
    """Per-slot rows (C, M w, ...) from a per-sphere table ``leaf`` (s, w, ...) for the bodies
    ``index`` (C,) where ``used``; ``blank`` elsewhere."""
    members = jnp.asarray(table.members)[index]  # (C, M)
    present = used[:, None] & (members >= 0)
    rows = leaf[jnp.where(present, members, 0)]  # (C, M, w, ...)
    rows = jnp.where(present.reshape(present.shape + (1,) * (leaf.ndim - 1)), rows, blank)
    return rows.reshape((index.shape[0], -1) + leaf.shape[2:])


def place_rows(table: MemberTable, values: Array, gid: Array, like: Array) -> Array:
    """A per-sphere table (s, w, ...) shaped as ``like`` from per-slot rows (C, M w, ...) of
    the bodies ``gid`` (C,), zeros where no slot holds the sphere (summed over shards)."""
    s = table.n_spheres
    sid = member_ids(table, gid)
    rows = values.reshape((sid.shape[0],) + like.shape[1:])
    target = jnp.zeros((s + 1,) + like.shape[1:], values.dtype)
    return target.at[jnp.where(sid >= 0, sid, s)].set(rows)[:s]


__all__ = [
    "MemberTable",
    "member_bodies",
    "member_ids",
    "pick_rows",
    "place_rows",
    "rows_per_slot",
    "slot_contacts",
    "to_slots",
]
