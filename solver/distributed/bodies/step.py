"""One subdomain's time step (runs inside ``shard_map``): the single-device step, split.

Velocity Verlet as in ``solver.bodies.step`` (kernels.rigid_body: kick dt/2, drift dt, forces,
kick dt/2), with the communication placed between the drift and the forces:
    1. kick and drift the owned bodies;
    2. migrate: bodies whose centre left the block move to the neighbour, with their force,
       torque and spring histories (so the migration of step k is the one "after the
       integration" of step k - 1, and owners are exact where forces are computed);
    3. exchange ghosts (copies of the bodies within reach of a face);
    4. contact forces on the owned bodies from owned bodies and ghosts, plus gravity;
    5. kick the owned bodies.
Diagnostics are global sums (``psum`` over the mesh).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import Array, lax

from kernels import rigid_body
from kernels.rigid_body import Bodies
from solver.bodies.step import BodySetup, ContactParams
from solver.distributed.bodies import clump_slots, exchange
from solver.distributed.bodies.clump_slots import MemberTable
from solver.distributed.bodies.forces import KeptTable, local_contacts, unbuilt_table
from solver.distributed.bodies.layout import BodyLayout
from solver.distributed.bodies.records import SubdomainState


class SpatialDiagnostics(NamedTuple):
    """Per-step totals over the whole scene (as ``solver.bodies.step.BodyDiagnostics``) and the
    traffic of the decomposition."""

    kinetic_energy: Array  # J
    potential_energy: Array  # J, -sum m g . x
    momentum: Array  # (3,) kg m/s
    angular_momentum: Array  # (3,) kg m^2/s about the origin
    contacts: Array  # int32, sum of contact counts (a sphere-sphere pair counts twice)
    migrated: Array  # int32, bodies that changed subdomain this step
    ghosts: Array  # int32, ghost copies received, all subdomains together
    ghost_contacts: Array  # int32, contacts between an owned body and a ghost (twice per pair)
    rebuilt: Array  # int32, subdomains that rebuilt their pair table at this step


def _origin(layout: BodyLayout, coords: Array, dtype) -> Array:
    """(3,) m, lower corner of this subdomain's cell list."""
    _, offset = layout.local_grid()
    lower = jnp.asarray(layout.lower, dtype)
    width = jnp.asarray(layout.block_width, dtype)
    split = jnp.asarray([m > 1 for m in layout.mesh])
    return jnp.where(split, lower + coords.astype(dtype) * width, lower) + jnp.asarray(
        offset, dtype
    )


def _concat(a: Bodies, b: Bodies) -> Bodies:
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)


def _forces(
    setup: BodySetup,
    layout: BodyLayout,
    coords: Array,
    state: SubdomainState,
    params: ContactParams,
    table: KeptTable | None = None,
) -> tuple[SubdomainState, Array, Array, KeptTable | None]:
    """Ghosts, then the forces on the owned bodies of ``state`` (positions as they are), over
    the pair ``table`` of the previous step where it still holds (``local_contacts``).

    Returns the state with new force, torque, tables and counts (overflow updated), the
    number of ghosts received, the contacts with ghosts and the pair table to keep.
    """
    grid, _ = layout.local_grid()
    ghost_gid, ghosts, ghost_count = exchange.exchange_ghosts(
        layout, coords, state.gid, state.bodies
    )
    capacity = state.gid.shape[0]
    args = (
        grid, _origin(layout, coords, state.bodies.position.dtype),
        jnp.concatenate([state.gid, ghost_gid]), _concat(state.bodies, ghosts), capacity,
        state.partners, state.history, state.plane_history, params, table,
    )  # fmt: skip
    if setup.spheres_only:
        result = local_contacts(setup, *args)
    else:  # over the clumps' members, summed per slot
        result = clump_slots.slot_contacts(setup, MemberTable.of(setup), *args)
    seen = jnp.stack([
        jnp.zeros((), jnp.int32), ghost_count, jnp.zeros((), jnp.int32),
        result.cell_count, result.partner_count, jnp.zeros((), jnp.int32),
    ])  # fmt: skip
    state = state.replace(
        force=result.force,
        torque=result.torque,
        partners=result.partners,
        history=result.history,
        plane_history=result.plane_history,
        contact_count=result.contact_count,
        overflow=jnp.maximum(state.overflow, seen),
    )
    return state, ghost_count, result.ghost_contacts, result.kept


def _diagnostics(
    layout: BodyLayout,
    state: SubdomainState,
    params: ContactParams,
    migrated: Array,
    ghosts: Array,
    ghost_contacts: Array,
    rebuilt: Array,
) -> SpatialDiagnostics:
    bodies = state.bodies
    dynamic = (~bodies.kinematic) & (state.gid >= 0)
    weight = rigid_body.gravity_force(bodies, params.gravity)
    local = SpatialDiagnostics(
        kinetic_energy=jnp.sum(jnp.where(dynamic, rigid_body.kinetic_energy(bodies), 0.0)),
        potential_energy=-jnp.sum(jnp.where(dynamic[:, None], weight * bodies.position, 0.0)),
        momentum=jnp.sum(
            jnp.where(dynamic[:, None], rigid_body.linear_momentum(bodies), 0.0), axis=0
        ),
        angular_momentum=jnp.sum(
            jnp.where(
                dynamic[:, None], rigid_body.angular_momentum_about(bodies, jnp.zeros(3)), 0.0
            ),
            axis=0,
        ),  # fmt: skip
        contacts=jnp.sum(jnp.where(state.gid >= 0, state.contact_count, 0)),
        migrated=migrated,
        ghosts=ghosts,
        ghost_contacts=ghost_contacts,
        rebuilt=rebuilt,
    )
    return jax.tree.map(lambda x: lax.psum(x, layout.axis_names), local)


def make_local_initial(
    setup: BodySetup, layout: BodyLayout
) -> Callable[[SubdomainState, ContactParams], SubdomainState]:
    """initial(state, params) -> the state with the forces at time 0 (empty histories)."""

    def initial(state: SubdomainState, params: ContactParams) -> SubdomainState:
        coords = exchange.mesh_coords(layout)
        state, _, _, _ = _forces(setup, layout, coords, state, params)
        occupied = jnp.sum(state.gid >= 0, dtype=jnp.int32)
        return state.replace(overflow=state.overflow.at[0].max(occupied))

    return initial


def _choose(keep: Array, old, new):
    """``old`` where ``keep`` (a scalar bool) else ``new``, leaf by leaf: a select, exact."""
    return jax.tree.map(lambda o, n: jnp.where(keep, o, n), old, new)


NORMAL, INITIAL, SKIP = 0, 1, 2
"""Modes of a pass of the step body: a full step; the forces at time 0 only (kicks and drift
off); nothing (the state passes through unchanged)."""


def make_local_chunk(
    setup: BodySetup, layout: BodyLayout
) -> Callable[..., tuple[SubdomainState, SpatialDiagnostics]]:
    """chunk(state, n, params, start) -> (state after n steps, SpatialDiagnostics with leading
    axis n).

    ``n`` is static; ``start`` is a traced bool, so one compiled program serves the first
    chunk and the later ones. The scan makes n + 1 passes of one step body; the first is, with
    ``start``, the force evaluation at time 0 of a freshly placed state (kicks and drift
    switched off by selects, so exact), and otherwise a pass that changes nothing. A single copy
    of the force code in the program halves XLA's compile time, which dominates short runs.
    Call inside ``shard_map`` over a mesh with axes ("x", "y", "z").
    """
    dt = setup.dt

    def one_step(
        state: SubdomainState, table: KeptTable, params: ContactParams, mode: Array
    ) -> tuple[SubdomainState, KeptTable, SpatialDiagnostics]:
        coords = exchange.mesh_coords(layout)
        still = mode != NORMAL
        start = state
        bodies = rigid_body.kick(state.bodies, state.force, state.torque, 0.5 * dt)
        state = state.replace(bodies=_choose(still, state.bodies, rigid_body.drift(bodies, dt)))
        before = state.gid
        state, message, slots, jumped = exchange.migrate(layout, coords, state)
        moved = jnp.sum((before >= 0) & (state.gid != before), dtype=jnp.int32)
        state = state.replace(
            overflow=state.overflow.at[0].max(slots).at[2].max(message).at[5].add(jumped)
        )
        built = table.rebuilds
        state, ghosts, ghost_contacts, table = _forces(setup, layout, coords, state, params, table)
        bodies = rigid_body.kick(state.bodies, state.force, state.torque, 0.5 * dt)
        state = state.replace(
            bodies=_choose(still, state.bodies, bodies),
            time=state.time + jnp.where(still, 0, 1).astype(state.time.dtype),
        )
        state = _choose(mode == SKIP, start, state)
        rebuilt = table.rebuilds - built
        diagnostics = _diagnostics(
            layout, state, params, moved, ghosts, ghost_contacts, rebuilt
        )  # fmt: skip
        return state, table, diagnostics

    def chunk(
        state: SubdomainState, n: int, params: ContactParams, start: Array
    ) -> tuple[SubdomainState, SpatialDiagnostics]:
        first = jnp.where(start, INITIAL, SKIP)
        modes = jnp.full((n + 1,), NORMAL, jnp.int32).at[0].set(first)
        # the pair table lives for the chunk (rebuilt at its first pass): not in the state
        capacity = state.gid.shape[0]
        width = clump_slots.rows_per_slot(setup)
        table = unbuilt_table(
            (capacity + layout.ghost_capacity) * width, capacity * width, layout.max_partners,
            state.bodies.position.dtype,
        )  # fmt: skip

        def body(carry, mode):
            state, table, diagnostics = one_step(*carry, params, mode)
            return (state, table), diagnostics

        (state, _), diagnostics = lax.scan(body, (state, table), modes)
        return state, jax.tree.map(lambda d: d[1:], diagnostics)

    return chunk
