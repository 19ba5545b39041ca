"""Bodies in the fluid owned by the shard that holds their centre (``coupling.bodies=owned``).

The fluid's device mesh (``domain.mesh``) cuts the grid into blocks; the shard of block
(i, j, k) owns the bodies whose centre lies in its block (clamped into the mesh, as
``layout.BodyLayout.owner_coords``) and holds them in the fixed-capacity slots of the body
decomposition (``records.SubdomainState``, gid -1: a free slot). Everything here talks to the
neighbours through the fluid's ``Halo`` (``shift`` of a block by one shard along one axis:
``lax.ppermute`` inside ``shard_map``, ``mpi4jax.sendrecv`` between processes, nothing on one
device), so one code path serves one device, fake devices and MPI processes.

Per fluid step (``solver.coupling.step``, owned path):
    1. ``migrate``: bodies whose centre left the block go to the neighbour, with their force,
       torque, spring histories and last hydrodynamic force;
    2. ``exchange_ghosts``: copies of the neighbours' bodies whose grid stencil or contact reach
       overlaps the block (``reach``), axis by axis (edges and corners by forwarding, as the
       fluid's halos), periodic over the mesh as the cover is (a sphere across a periodic face
       covers the other side). A body reaches a shard at most once (a later copy of an id
       already held is dropped: on a mesh of two blocks both neighbours are one shard);
    3. the cover of owned and ghost bodies, each shard's partial force and torque per copy;
    4. ``return_partials``: the ghosts' partials travel back to their owners (axis by axis, one
       hop per axis) and are added there;
    5. the owners advance: every body step exchanges ghosts again and evaluates the contacts of
       its owned bodies with owned and ghost partners (``forces.local_contacts``).

Between chunks the run loop holds the bodies whole on every shard (``to_owned`` /
``to_replicated`` at the chunk's ends), so checkpoints, outputs and the twin are those of a
replicated run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.sharding import PartitionSpec as P

from kernels.rigid_body import Bodies
from solver.bodies.step import BodySetup
from solver.distributed.bodies import clump_slots, records
from solver.distributed.bodies.clump_slots import MemberTable
from solver.distributed.bodies.exchange import _vacate as vacate_slots
from solver.distributed.bodies.exchange import owner_index
from solver.distributed.bodies.forces import KeptTable, unbuilt_table
from solver.distributed.bodies.layout import (
    CAPACITY_NAMES,
    BodyLayout,
    overflow_lines,
    sized_layout,
)
from solver.distributed.bodies.records import SubdomainState
from solver.distributed.decomposition import AXIS_NAMES
from solver.distributed.manual import shard_map
from solver.errors import ConfigError

COUPLING_KEYS = {
    "owned": "coupling.capacity",
    "ghost": "coupling.ghost_capacity",
    "migration": "coupling.migration_capacity",
    "cell": "coupling.cell_capacity",
    "partners": "coupling.max_partners",
}


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class OwnedBodies:
    """One shard's bodies inside the coupled chunk.

    Attributes:
        sub: the owned slots (records.SubdomainState; force and torque: the total at the
            body's time, as velocity Verlet wants them).
        hydro_force, hydro_torque: (C, 3) N, N m, the hydrodynamic force of the last fluid step.
        table: the owned bodies' pair table kept between body steps (``forces.KeptTable``;
            rebuilt at the chunk's first body step and whenever a slot changes hands).
    """

    sub: SubdomainState
    hydro_force: Array
    hydro_torque: Array
    table: KeptTable

    def replace(self, **changes) -> OwnedBodies:
        return dataclasses.replace(self, **changes)


def plan_fluid_layout(
    setup: BodySetup,
    mesh: Sequence[int],
    lower: Sequence[float],
    upper: Sequence[float],
    reach: float,
    *,
    capacity: int | None = None,
    ghost_capacity: int | None = None,
    migration_capacity: int | None = None,
    cell_capacity: int | None = None,
    max_partners: int | None = None,
) -> BodyLayout:
    """The split of a coupled scene over the fluid's mesh (host side, before tracing).

    Args:
        setup: the bodies of the whole scene (spheres and clumps: a clump is owned by the
            shard that holds its centre of mass, its members follow from its pose).
        mesh: the fluid's shards per axis (3).
        lower, upper: (3,) m, the grid's box (node i at lower + (i + 1/2) dx).
        reach: m, how far beyond its block a shard must see bodies: the grid stencil's reach
            and the contact reach (2 max radius + skin), whichever is larger, plus the motion
            of one fluid step.
        capacity ...: buffer sizes (see ``BodyLayout``); None: the whole scene (owned, ghost,
            migration), the cell list's capacity and twice its max_neighbors.

    Raises:
        ConfigError: a mesh that is not 3D, or a block narrower than ``reach``.
    """
    mesh = tuple(int(m) for m in mesh)
    if len(mesh) != 3:
        raise ConfigError("coupling.bodies", "owned", "replicated on a 2D mesh")
    for a, m in enumerate(mesh):
        width = (upper[a] - lower[a]) / m
        if m > 1 and width < reach:
            raise ConfigError(
                "coupling.bodies",
                "owned",
                f"replicated, or blocks at least as wide as a body's reach (stencil or contact "
                f"reach plus a step's motion) = {reach:.4g} m",
                hint=f"domain.mesh has {m} blocks along {AXIS_NAMES[a]}, {width:.4g} m wide; "
                f"use fewer",
            )
    n = setup.n_bodies
    split = any(m > 1 for m in mesh)
    given = (capacity, ghost_capacity, migration_capacity, cell_capacity, max_partners)
    defaults = (n, n, n, setup.grid.capacity,
                2 * setup.grid.max_neighbors)  # fmt: skip
    sizes = []
    for name, value, default in zip(CAPACITY_NAMES, given, defaults, strict=True):
        value = default if value is None else value
        if int(value) != value or value < 1:
            raise ConfigError(COUPLING_KEYS[name], value, "an integer >= 1")
        if not split and name in ("ghost", "migration"):
            value = 0  # one shard: nothing travels
        sizes.append(int(value))
    return sized_layout(setup, mesh, lower, upper, reach, sizes)


# ---------------------------------------------------------------- messages over the halo


def shard_coords(halo, block: Sequence[int]) -> Array:
    """(3,) int32 mesh coordinates of this shard (``block``: its fluid block's shape)."""
    origin = halo.origin(tuple(block))
    return jnp.stack([jnp.asarray(o, jnp.int32) // n for o, n in zip(origin, block, strict=True)])


def shard_rank(layout: BodyLayout, coords: Array) -> Array:
    """int32 rank of this shard, row-major over the mesh (x slowest)."""
    mx, my, mz = layout.mesh
    return (coords[0] * my + coords[1]) * mz + coords[2]


def _send(halo, block: Array, axis: int, direction: int) -> Array:
    """``block`` of the shard at -direction along ``axis`` (periodic over the mesh)."""
    offset = [0, 0, 0]
    offset[axis] = direction
    return halo.shift(block, tuple(offset))


def _direction(owner: Array, c: Array, m: int) -> tuple[Array, Array, Array]:
    """(to +1, to -1, farther) masks of entries whose owner index along an axis of m blocks
    differs from c (periodic: on two blocks both neighbours are one shard, reached by +1)."""
    delta = jnp.mod(owner - c, m)
    plus = delta == 1
    minus = (delta == m - 1) & ~plus
    return plus, minus, (delta != 0) & ~plus & ~minus


def exchange_ghosts(
    layout: BodyLayout, halo, coords: Array, gid: Array, bodies: Bodies
) -> tuple[Array, Bodies, Array]:
    """Copies of the neighbours' bodies within ``layout.reach`` of this block.

    Returns gid (G,) of the ghosts (-1 free), their Bodies (G slots) and the ghost buffer
    needed (int32: compare with ``ghost_capacity``)."""
    capacity = layout.ghost_capacity
    n = layout.n_bodies
    own_rows = records.ghost_columns(gid, bodies)
    ghost_rows = jnp.zeros((capacity, own_rows.shape[1]), own_rows.dtype)
    # by id: the bodies held here (index n, out of bounds, is dropped)
    seen = jnp.zeros((n,), bool).at[jnp.where(gid >= 0, gid, n)].set(True, mode="drop")
    arrived = jnp.zeros((), jnp.int32)
    needed = jnp.zeros((), jnp.int32)
    for axis, m in enumerate(layout.mesh):
        if m == 1:
            continue
        pool = jnp.concatenate([own_rows, ghost_rows])
        valid = pool[:, 0] > 0
        x = pool[:, 1 + axis]  # the position columns follow the id column
        low_face = layout.lower[axis] + coords[axis] * layout.block_width[axis]
        high_face = low_face + layout.block_width[axis]
        outbound = (
            (valid & (x >= high_face - layout.reach), +1),
            (valid & (x < low_face + layout.reach), -1),
        )
        for mask, direction in outbound:
            index, used, count = records.select(mask, capacity)
            needed = jnp.maximum(needed, count)
            received = _send(halo, records.gather_rows(pool, index, used), axis, direction)
            g = jnp.round(received[:, 0]).astype(jnp.int32) - 1
            got = (g >= 0) & ~seen[jnp.where(g >= 0, g, 0)]
            seen = seen.at[jnp.where(got, g, n)].set(True, mode="drop")
            ghost_rows = records.append_rows(ghost_rows, arrived, received, got)
            arrived = arrived + jnp.sum(got, dtype=jnp.int32)
    ghost_gid, ghosts = records.unpack_ghosts(ghost_rows, bodies)
    return ghost_gid, ghosts, jnp.maximum(needed, arrived)


def owner_coords(layout: BodyLayout, position: Array) -> Array:
    """(n, 3) int32 owner mesh coordinates of centres (n, 3) m."""
    return jnp.stack([owner_index(layout, position, a) for a in range(3)], axis=1)


def return_partials(
    layout: BodyLayout,
    halo,
    coords: Array,
    ghost_gid: Array,
    ghost_position: Array,
    values: Array,
    owned_gid: Array,
    owned_values: Array,
) -> tuple[Array, Array]:
    """The owners' totals: each ghost's partial ``values`` (G, k) sent to its owner (one hop
    per axis where the owner's index differs) and added to ``owned_values`` (C, k) there, in
    the order the rows arrive.

    Returns the totals (C, k) and the buffer needed (int32, compare with ghost_capacity)."""
    capacity = layout.ghost_capacity
    n = layout.n_bodies
    dtype = values.dtype
    owner = owner_coords(layout, ghost_position).astype(dtype)
    rows = jnp.concatenate([(ghost_gid + 1).astype(dtype)[:, None], owner, values], axis=1)
    rows = jnp.where((ghost_gid >= 0)[:, None], rows, 0.0)
    needed = jnp.zeros((), jnp.int32)
    for axis, m in enumerate(layout.mesh):
        if m == 1:
            continue
        valid = rows[:, 0] > 0
        target = jnp.round(rows[:, 1 + axis]).astype(jnp.int32)
        plus, minus, _ = _direction(target, coords[axis], m)
        parts = [jnp.where((valid & (target == coords[axis]))[:, None], rows, 0.0)]
        for mask, direction in ((valid & plus, +1), (valid & minus, -1)):
            index, used, count = records.select(mask, capacity)
            needed = jnp.maximum(needed, count)
            parts.append(_send(halo, records.gather_rows(rows, index, used), axis, direction))
        rows, count = _merge(jnp.concatenate(parts), n, capacity)
        needed = jnp.maximum(needed, count)
    slot_of = jnp.full((n + 1,), owned_gid.shape[0], jnp.int32)
    slot_of = slot_of.at[jnp.where(owned_gid >= 0, owned_gid, n)].set(
        jnp.arange(owned_gid.shape[0], dtype=jnp.int32)
    )
    slot_of = slot_of.at[n].set(owned_gid.shape[0])
    g = jnp.round(rows[:, 0]).astype(jnp.int32) - 1
    slot = slot_of[jnp.where(g >= 0, g, n)]
    total = owned_values.at[slot].add(rows[:, 4:], mode="drop")
    return total, needed


def _merge(pool: Array, n: int, capacity: int) -> tuple[Array, Array]:
    """Partial rows (M, 4 + k) with one row per body: the rows of one id summed (in the order
    of ``pool``), ``capacity`` rows in id order; and the number of ids (int32)."""
    g = jnp.round(pool[:, 0]).astype(jnp.int32) - 1
    key = jnp.where(g >= 0, g, n)
    head = jnp.zeros((n + 1, 4), pool.dtype).at[key].set(pool[:, :4])
    sums = jnp.zeros((n + 1, pool.shape[1] - 4), pool.dtype).at[key].add(pool[:, 4:])
    present = head[:n, 0] > 0  # id + 1 of the rows of that id
    index, used, count = records.select(present, capacity)
    return records.gather_rows(jnp.concatenate([head, sums], axis=1), index, used), count


def migrate(
    layout: BodyLayout, halo, coords: Array, owned: OwnedBodies
) -> tuple[OwnedBodies, Array, Array, Array]:
    """Hand the bodies whose centres left this block to the neighbours (as
    ``exchange.migrate``, with the last hydrodynamic force, over the halo).

    Returns the state, the largest message needed, the occupancy needed and the bodies that
    would have to jump more than one block (int32 each)."""
    capacity = layout.migration_capacity
    needed_message = jnp.zeros((), jnp.int32)
    needed_slots = jnp.sum(owned.sub.gid >= 0, dtype=jnp.int32)
    jumped = jnp.zeros((), jnp.int32)
    for axis, m in enumerate(layout.mesh):
        if m == 1:
            continue
        sub = owned.sub
        occupied = sub.gid >= 0
        owner = owner_index(layout, sub.bodies.position, axis)
        plus, minus, far = _direction(owner, coords[axis], m)
        jumped = jumped + jnp.sum(occupied & far, dtype=jnp.int32)
        rows = jnp.concatenate(
            [records.migrant_columns(sub), owned.hydro_force, owned.hydro_torque], axis=1
        )
        leaving = jnp.zeros_like(occupied)
        inbound = []
        for mask, direction in ((occupied & plus, +1), (occupied & minus, -1)):
            index, used, count = records.select(mask, capacity)
            needed_message = jnp.maximum(needed_message, count)
            leaving = leaving | records.first_of(mask, capacity)
            inbound.append(_send(halo, records.gather_rows(rows, index, used), axis, direction))
        owned = _vacate(owned, leaving)
        owned, needed = _insert(owned, jnp.concatenate(inbound))
        needed_slots = jnp.maximum(needed_slots, needed)
    return owned, needed_message, needed_slots, jumped


def _vacate(owned: OwnedBodies, leaving: Array) -> OwnedBodies:
    """Free the slots where ``leaving`` holds (as ``exchange._vacate``), hydro force too."""
    stay = ~leaving[:, None]
    return owned.replace(
        sub=vacate_slots(owned.sub, leaving),
        hydro_force=jnp.where(stay, owned.hydro_force, 0.0),
        hydro_torque=jnp.where(stay, owned.hydro_torque, 0.0),
    )


def _insert(owned: OwnedBodies, rows: Array) -> tuple[OwnedBodies, Array]:
    """Migrant rows (M, W' + 6) into the lowest free slots (as ``exchange._insert``)."""
    state = owned.sub
    capacity = state.gid.shape[0]
    arriving = rows[:, 0] > 0
    free = state.gid < 0
    free_slots, _ = records.compacted(free, capacity, fill_value=capacity)
    rank = jnp.cumsum(arriving) - 1
    slot = jnp.where(arriving, free_slots[jnp.clip(rank, 0, capacity - 1)], capacity)
    slot = jnp.where(rank < capacity, slot, capacity)
    incoming = records.unpack_migrants(rows, state)  # the trailing hydro columns are ignored
    needed = jnp.sum(~free, dtype=jnp.int32) + jnp.sum(arriving, dtype=jnp.int32)
    hydro = rows[:, -6:]
    merged, hydro_force, hydro_torque = records.put_in_slots(
        (state.replace(time=None, overflow=None), owned.hydro_force, owned.hydro_torque),
        (incoming.replace(time=None, overflow=None), hydro[:, :3], hydro[:, 3:]),
        slot,
    )
    return owned.replace(
        sub=merged.replace(time=state.time, overflow=state.overflow),
        hydro_force=hydro_force,
        hydro_torque=hydro_torque,
    ), needed


# ---------------------------------------------------------------- the chunk's two ends


def to_owned(
    layout: BodyLayout, coords: Array, replicated, members: MemberTable | None = None
) -> OwnedBodies:
    """This shard's slots from the bodies held whole (``solver.coupling.step.CoupledBodies``
    with full partner rows and ``overflow`` (shards, 6)): the owned bodies in id order.
    ``members``: the scene's clumps, whose contact tables are per member sphere (a slot's
    rows hold its members' rows one after another); None: spheres."""
    state = replicated.state
    capacity = layout.capacity
    width = 1 if members is None else members.width  # the contact rows of one slot
    owner = owner_coords(layout, state.bodies.position)
    mine = jnp.all(owner == coords[None, :], axis=1)
    index, used, count = records.select(mine, capacity)
    empty = records.empty_bodies(capacity, state.bodies.position.dtype)

    def pick(leaf, blank):
        mask = used.reshape((-1,) + (1,) * (leaf.ndim - 1))
        return jnp.where(mask, leaf[index], blank)

    def per_sphere(leaf, blank):
        if members is None:
            return pick(leaf, blank)
        return clump_slots.pick_rows(members, leaf, index, used, blank)

    bodies = jax.tree.map(pick, state.bodies, empty)
    overflow = replicated.overflow[shard_rank(layout, coords)]
    sub = SubdomainState(
        gid=jnp.where(used, index, -1),
        bodies=bodies,
        force=pick(state.force, 0.0),
        torque=pick(state.torque, 0.0),
        partners=per_sphere(state.partners, -1),
        history=per_sphere(state.history, 0.0),
        plane_history=per_sphere(state.plane_history, 0.0),
        contact_count=pick(state.contact_count, 0),
        time=jnp.reshape(state.time, (1,)).astype(jnp.int32),
        overflow=overflow.at[0].max(count),
    )
    return OwnedBodies(
        sub=sub,
        hydro_force=pick(replicated.hydro_force, 0.0),
        hydro_torque=pick(replicated.hydro_torque, 0.0),
        table=unbuilt_table(
            (capacity + layout.ghost_capacity) * width,
            capacity * width,
            layout.max_partners,
            state.bodies.position.dtype,
        ),
    )


def to_replicated(
    layout: BodyLayout,
    halo,
    coords: Array,
    owned: OwnedBodies,
    template,
    members: MemberTable | None = None,
):
    """The bodies whole on every shard (``template``: the chunk's input, for the layout), each
    row from its owner (a sum over the shards in which every other shard adds zeros); with
    ``members`` (clumps) the contact tables per member sphere (``to_owned``)."""
    n = layout.n_bodies
    sub = owned.sub
    slot_gid = jnp.where(sub.gid >= 0, sub.gid, n)

    def place(pairs: list[tuple[Array, Array]]) -> list[Array]:
        """Per-slot ``values`` (C, ...) as whole tables shaped and typed as ``like`` (n, ...):
        one scatter and one sum over the shards for all of them, as columns of the widest
        float type (ids, counts and flags are exact in it)."""
        dtype = jnp.result_type(
            *(like.dtype for _, like in pairs if jnp.issubdtype(like.dtype, jnp.floating))
        )
        columns = jnp.concatenate(
            [values.reshape(values.shape[0], -1).astype(dtype) for values, _ in pairs], axis=1
        )
        table = jnp.zeros((n + 1, columns.shape[1]), dtype).at[slot_gid].set(columns)
        summed, out, start = halo.sum(table[:n]), [], 0
        for values, like in pairs:
            width = math.prod(values.shape[1:])
            part = summed[:, start : start + width].reshape((n, *values.shape[1:]))
            out.append(part.astype(like.dtype))
            start += width
        return out

    def per_sphere(values, like):
        table = clump_slots.place_rows(members, values, sub.gid, like)
        return halo.sum(table).astype(like.dtype)

    state = template.state
    names = list(records.BODY_FIELDS)
    pairs = [(getattr(sub.bodies, name), getattr(state.bodies, name)) for name in names]
    pairs += [(sub.force, state.force), (sub.torque, state.torque),
              (sub.contact_count, state.contact_count), (owned.hydro_force, template.hydro_force),
              (owned.hydro_torque, template.hydro_torque)]  # fmt: skip
    tables = ((sub.partners, state.partners), (sub.history, state.history),
              (sub.plane_history, state.plane_history))  # fmt: skip
    if members is None:
        placed = place(pairs + list(tables))
        partners, history, plane_history = placed[-3:]
    else:
        placed = place(pairs)
        partners, history, plane_history = (per_sphere(v, like) for v, like in tables)
    body_values = placed[: len(names)]
    force, torque, contact_count, hydro_force, hydro_torque = placed[len(names) : len(names) + 5]
    rank = shard_rank(layout, coords)
    overflow = jnp.zeros_like(template.overflow).at[rank].set(sub.overflow)
    # the pair-table rebuilds of the chunk: the busiest shard's (each shard keeps its own)
    built = jnp.zeros((layout.shards,), jnp.int32).at[rank].set(owned.table.rebuilds)
    rebuilds = state.rebuilds + jnp.max(halo.sum(built)).astype(state.rebuilds.dtype)
    return template.replace(
        state=state.replace(
            bodies=Bodies(**dict(zip(names, body_values, strict=True))),
            force=force,
            torque=torque,
            partners=partners,
            history=history,
            plane_history=plane_history,
            contact_count=contact_count,
            time=jnp.reshape(sub.time, state.time.shape).astype(state.time.dtype),
            rebuilds=rebuilds,
        ),
        hydro_force=hydro_force,
        hydro_torque=hydro_torque,
        overflow=halo.sum(overflow),
    )


def owned_chunk(dist, setup, coupling, layout: BodyLayout) -> Callable:
    """jit-compiled chunk(state, geometry, n, extra) -> (state, forces, extra, reports), as
    ``Distribution.coupled_chunk``, with the bodies owned by shards inside the chunk (``extra``
    is held whole on every shard at both ends). ``coupling`` carries the layout (its passes
    around the collision are the owned ones, on either fluid kernel)."""
    from solver.distributed.halo import MpiHalo, XlaHalo
    from solver.fluid.inplace_step import require_kernel
    from solver.fluid.step import SINGLE, FluidState, make_geometry

    decomposition = dist.decomposition
    if setup.kernel != "xla":
        require_kernel(
            setup, shards=decomposition.shards, coupled=True, mesh=tuple(decomposition.mesh)
        )
    block = decomposition.local_shape
    members = None if coupling.bodies.spheres_only else MemberTable.of(coupling.bodies)

    def wrap(halo) -> Callable:
        # the XLA step's or the native kernel's, the bodies' passes owned (``coupling.owned``)
        inner = dist.shard_coupled_chunk(setup, coupling, halo)

        def local(state, geometry, n, extra):
            coords = shard_coords(halo, block)
            owned = to_owned(layout, coords, extra, members)
            state, forces, owned, reports = inner(state, geometry, n, owned)
            whole = to_replicated(layout, halo, coords, owned, extra, members)
            return state, forces, whole, reports

        return local

    if dist.backend == "single":
        local = wrap(SINGLE)
    elif dist.backend == "mpi":
        local = wrap(MpiHalo(dist.decomposition, dist.runtime.comm))
    else:
        inner = wrap(XlaHalo(dist.decomposition))
        state_spec = FluidState(populations=dist._spec(1), time=P())
        geometry_spec = make_geometry(setup, lambda arr, dtype, lead, face: dist._spec(lead, face))

        def local(state, geometry, n, extra):
            mapped = shard_map(
                functools.partial(_inner, inner, n),
                mesh=dist.mesh,
                in_specs=(state_spec, geometry_spec, P()),
                out_specs=(state_spec, P(), P(), P()),
                check_vma=False,
            )
            return mapped(state, geometry, extra)

    return jax.jit(local, static_argnums=2, donate_argnums=(0, 3))


def _inner(inner: Callable, n: int, state, geometry, extra):
    return inner(state, geometry, n, extra)


# ---------------------------------------------------------------- host side


def overflow_message(layout: BodyLayout, table: np.ndarray) -> str | None:
    """One line per shard whose body buffers were too small (``table`` (shards, 6)), or None."""
    return overflow_lines(layout, table, COUPLING_KEYS, "shard", "in a fluid step")


def buffer_use(layout: BodyLayout, table: np.ndarray) -> dict[str, dict[str, int | str]]:
    """Per buffer: its config key, its size and the most any shard needed in the run
    (``table`` (shards, 6), the sticky counts), for run.json: every slot costs each step, used
    or not, so a buffer far larger than its use is time lost (docs/coupling.md)."""
    table = np.asarray(table).reshape(-1, records.OVERFLOW_SLOTS)
    capacities = layout.capacities()
    return {
        name: {
            "key": COUPLING_KEYS[name],
            "size": int(capacities[name]),
            "most_needed": int(table[:, a].max()),
        }
        for a, name in enumerate(CAPACITY_NAMES)
    }


def reach_of(setup: BodySetup, dx: float, stencil_reach_cells: float, motion: float) -> float:
    """m: how far beyond a block its shard must see bodies (``plan_fluid_layout``)."""
    # a clump's members lie within its bounding radius of its centre (a sphere's: its radius)
    contact = 2.0 * float(np.max(setup.bounding_radius)) + float(setup.skin)
    return max(contact, stencil_reach_cells * dx) + motion


__all__ = [
    "OwnedBodies",
    "exchange_ghosts",
    "migrate",
    "overflow_message",
    "owned_chunk",
    "plan_fluid_layout",
    "return_partials",
    "to_owned",
    "to_replicated",
]
