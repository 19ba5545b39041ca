"""Contact forces on a subdomain's owned bodies from its owned bodies and ghosts.

The pair laws are those of the single-device step (``solver.bodies.step``), and each pair is
evaluated exactly as there: its operands are ordered by global id (the lower id is "i", the
normal points from the higher id to the lower), its spring history is the one of that
orientation, and a body's force is summed in the single-device order. ``contact_forces`` there
scatter-adds, for body o, first the pairs (o, j > o) in ascending j, then (i < o, o) in
ascending i, then the plane pairs in plane order, then gravity; here each owned body has a full
neighbour row (partners on both sides) sorted into that order and summed left to right. Pairs
the two runs list but which do not touch add exact zeros. So a subdomain reproduces the
single-device forces to the last bit unless the compiler rounds an expression differently for
arrays of another length (XLA:CPU fuses a*b + c in vectorised loop bodies; see
tests/test_distributed_equality.py); docs/body_decomposition.md gives the measured difference.

A pair between an owned body and a ghost is evaluated by both subdomains, each from its own copy
of the spring history; both copies follow the same update from the same inputs and so stay
equal, and the copy travels with its body when it migrates.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from kernels import contact_models as cm
from kernels import rigid_body
from kernels.contact import sphere_plane, sphere_sphere
from kernels.neighbor_search import NEIGHBOR_OFFSETS, CellGrid, bin_bodies, cell_coordinates
from kernels.rigid_body import Bodies
from solver.bodies.step import (
    BodySetup,
    ContactParams,
    _mass_inverse,
    _pair_laws,
    bucket_capacities,
    carry_history,
    compacted,
    over_prefix,
)
from solver.distributed.bodies.records import BODY_FIELDS


class LocalContacts(NamedTuple):
    """Forces on the C owned slots of a subdomain and what they need next step."""

    force: Array  # (C, 3) N, contacts plus gravity
    torque: Array  # (C, 3) N m
    partners: Array  # (C, K) int32 global ids, in summation order, -1 padding
    history: Array  # (C, K, 3) m
    plane_history: Array  # (C, p, 3) m
    contact_count: Array  # (C,) int32
    cell_count: Array  # int32, bodies in the fullest cell (capacity needed)
    partner_count: Array  # int32, the longest row (max_partners needed)
    ghost_contacts: Array  # int32, active contacts of owned bodies with ghosts
    kept: KeptTable | None = None  # the pair table for the next step (``local_contacts``)


class KeptTable(NamedTuple):
    """The owned bodies' pair table kept from one body step to the next (a Verlet list over
    the owned and ghost slots, as the single-device step keeps its own): valid while the slots
    hold the bodies they held when it was built and none of them has moved more than
    ``BodySetup.rebuild_distance`` since."""

    gid: Array  # (n,) int32 the slots' global ids at the build; -2 everywhere: never built
    position: Array  # (n, 3) m, their centres then
    table: Array  # (rows, K) int32 local partner slots in summation order, -1 padding
    slots: Array  # (rows K,) int32 the listed entries of the flat table, ascending, padded
    count: Array  # int32: how many
    rebuilds: Array  # int32: the builds so far (the first included)


def unbuilt_table(slots: int, rows: int, width: int, dtype) -> KeptTable:
    """A ``KeptTable`` that the next step rebuilds (for ``slots`` owned and ghost slots)."""
    return KeptTable(
        gid=jnp.full((slots,), -2, jnp.int32),
        position=jnp.zeros((slots, 3), dtype),
        table=jnp.full((rows, width), -1, jnp.int32),
        slots=jnp.full((rows * width,), rows * width, jnp.int32),
        count=jnp.zeros((), jnp.int32),
        rebuilds=jnp.zeros((), jnp.int32),
    )


def full_neighbors(
    grid: CellGrid,
    positions: Array,
    binned: Array,
    radii: Array,
    active: Array,
    rows: int,
    skin: float,
    group: Array | None = None,
) -> tuple[Array, Array, Array]:
    """Every partner (both directions) of the first ``rows`` bodies, from a cell list.

    The same cell-index search as ``kernels.neighbor_search.neighbor_pairs`` (27 cells around a
    body, pairs within r_i + r_j + skin), with rows for the owned bodies only and partners on
    both sides of them.

    Args:
        positions: (n, 3) centres, m; binned: (n, 3) the same shifted into the grid's frame.
        radii: (n,) m; active: (n,) bool.
        group: (n,) int32, the slot of each sphere's body (clump members): spheres of one
            body are not partners; None: every sphere is its own body.

    Returns:
        table (rows, max_neighbors) int32 local indices (-1 padding, unordered), the true row
        lengths (rows,) int32 and the fullest cell's count (int32).
    """
    width = grid.max_neighbors
    cells = bin_bodies(grid, binned, active)
    index = jnp.arange(rows, dtype=jnp.int32)
    shape = jnp.asarray(grid.shape, jnp.int32)
    own = cell_coordinates(grid, binned[:rows])
    _, ny, nz = grid.shape

    def visit(carry, offset):
        table, count = carry
        coords = own + offset
        inside = active[:rows] & jnp.all((coords >= 0) & (coords < shape), axis=1)
        c = jnp.clip(coords, 0, shape - 1)
        candidates = cells.members[(c[:, 0] * ny + c[:, 1]) * nz + c[:, 2]]  # (rows, capacity)
        valid = inside[:, None] & (candidates >= 0) & (candidates != index[:, None])
        if group is not None:  # two members of one clump never touch
            valid = valid & (group[jnp.maximum(candidates, 0)] != group[:rows, None])
        separation = positions[candidates] - positions[:rows, None, :]
        reach = radii[:rows, None] + radii[candidates] + skin
        valid = valid & (jnp.sum(separation * separation, axis=-1) <= reach * reach)
        slot = jnp.where(valid, count[:, None] + jnp.cumsum(valid, axis=1) - 1, width)
        table = table.at[index[:, None], slot].set(candidates, mode="drop")
        return (table, count + jnp.sum(valid, axis=1, dtype=jnp.int32)), None

    init = (jnp.full((rows, width), -1, jnp.int32), jnp.zeros((rows,), jnp.int32))
    (table, count), _ = jax.lax.scan(visit, init, jnp.asarray(NEIGHBOR_OFFSETS))
    return table, count, cells.worst_count


def _summation_order(table: Array, gid: Array, rows: int, n_bodies: int) -> Array:
    """Rows of ``table`` (local indices) sorted as the single-device scatter sums them: higher
    ids ascending, then lower ids ascending, padding last."""
    own = gid[:rows, None]
    partner = gid[jnp.where(table >= 0, table, 0)]
    key = jnp.where(partner > own, partner, partner + n_bodies)
    key = jnp.where(table >= 0, key, 2 * n_bodies)
    order = jnp.argsort(key, axis=1, stable=True)
    return jnp.take_along_axis(table, order, axis=1)


def _laws(*args) -> tuple[Array, Array, Array]:
    """``solver.bodies.step._pair_laws``: force on i, rolling torque on i, new history (P, 3)
    (its further results, e.g. the elastic energy, are not needed here)."""
    return _pair_laws(*args)[:3]


def _in_order(values: Array) -> Array:
    """Sum (rows, K, 3) over K strictly left to right (the order a scatter-add uses); a loop,
    not a reduction, which XLA may reassociate (and unrolling would slow the compile)."""
    return jax.lax.fori_loop(
        0, values.shape[1], lambda k, total: total + values[:, k], jnp.zeros_like(values[:, 0])
    )


def local_contacts(
    setup: BodySetup,
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
    *,
    group: Array | None = None,
    id_count: int | None = None,
    gravity: bool = True,
) -> LocalContacts:
    """Forces on the owned bodies (the first ``rows`` slots) from owned bodies and ghosts.

    With clumps the slots are the member spheres of the owned and ghost bodies
    (``clump_slots.member_bodies``): ``gid`` their sphere ids, ``group`` their bodies' slots
    (members of one body are never partners), ``id_count`` the scene's spheres, and
    ``gravity`` False (the caller adds each body's weight once); the rows' forces and torques
    (about each sphere's centre) are then the members', which the caller sums per body.

    Args:
        grid: the subdomain's cell list (``BodyLayout.local_grid``), whose corner is ``origin``.
        origin: (3,) m, the lower corner of the subdomain's cell list in the box.
        gid: (n,) int32 global ids of owned slots then ghost slots, -1 free.
        bodies: their state (n slots).
        partners, history, plane_history: the owned bodies' tables of the previous step (global
            ids), (rows, K), (rows, K, 3), (rows, p, 3).
        params: the scene's material values (per global id), planes and gravity.
        kept: the pair table of the previous step; it is kept (no cell list, no sort, the
            springs as they are) while every slot holds the body it held at the build and none
            has moved more than ``setup.rebuild_distance``, else rebuilt (``lax.cond``). A
            kept table gives the forces of a rebuilt one: its extra pairs are not touching and
            add exact zeros, its touching pairs sit in the same (global id) order. None:
            rebuilt, and no table returned.
    """
    p = setup.n_planes
    active = gid >= 0
    ids = jnp.where(active, gid, 0)
    dtype = bodies.position.dtype
    radius = jnp.asarray(setup.radius, dtype)[ids]
    x, v = bodies.position, bodies.velocity
    omega = rigid_body.angular_velocity(bodies)
    inverse_mass = _mass_inverse(bodies)

    def rebuild(_) -> tuple:
        """(table, its listed entries and their count, partners, carried springs, (the longest
        row, the fullest cell)) from a fresh cell list."""
        table, row_length, cell_count = full_neighbors(
            grid, x, x - origin, radius, active, rows, setup.skin, group
        )
        ids_total = setup.n_bodies if id_count is None else id_count
        table = _summation_order(table, gid, rows, ids_total)
        new_partners = jnp.where(table >= 0, gid[jnp.where(table >= 0, table, 0)], -1)
        old_history = carry_history(partners, history, new_partners)
        slots, listed_count = compacted(table >= 0)
        counts = (jnp.max(row_length), cell_count)
        return table, slots, listed_count, new_partners, old_history, counts

    if kept is None:
        table, slots, listed_count, new_partners, old_history, counts = rebuild(None)
    else:
        # kept while the slots hold the bodies of the build and the previous step's partners
        # are the table's: nothing to rebuild or to carry (the counts were taken at the build)
        def keep(_) -> tuple:
            zero = jnp.zeros((), jnp.int32)
            return kept.table, kept.slots, kept.count, partners, history, (zero, zero)

        listed = jnp.where(kept.table >= 0, gid[jnp.where(kept.table >= 0, kept.table, 0)], -1)
        drift = jnp.where(active, jnp.sum((x - kept.position) ** 2, axis=1), 0.0)
        rebuilt = (
            jnp.any(gid != kept.gid) | jnp.any(partners != listed)
            | (jnp.max(drift) > setup.rebuild_distance**2)
        )  # fmt: skip
        table, slots, listed_count, new_partners, old_history, counts = jax.lax.cond(
            rebuilt, rebuild, keep, None
        )
        kept = KeptTable(
            gid, jnp.where(rebuilt, x, kept.position), table, slots, listed_count,
            kept.rebuilds + rebuilt.astype(jnp.int32),
        )  # fmt: skip
    partner_count, cell_count = counts

    width = table.shape[1]
    total = rows * width
    flat_table = table.reshape(-1)
    flat_history = old_history.reshape(-1, 3)
    young, poisson = params.young, params.poisson
    friction, rolling = params.friction, params.rolling_friction
    # per sphere and plane (solver.bodies.step.contact_forces): min of betas = beta of the min e
    beta = cm.restitution_beta(params.restitution)
    use_rolling = bool(np.any(setup.rolling_friction > 0))

    def pairs(size: int) -> tuple[Array, Array, Array, Array]:
        """The table's first ``size`` listed entries (``slots``, row-major) evaluated and put
        back in their places: force and torque on the row's body, the spring (total, 3), and
        whether the pair touches (total,); every other entry zeros, as an entry of no pair
        gives."""
        entry = slots[:size]
        valid = entry < total
        at = jnp.where(valid, entry, 0)
        owner = at // width
        other = jnp.where(valid, flat_table[at], 0)
        owner_first = gid[owner] < gid[other]
        i = jnp.where(owner_first, owner, other)  # the pair's lower id: "i" of the 1-device run
        js = jnp.where(owner_first, other, owner)
        gi, gj = ids[i], ids[js]
        geometry = sphere_sphere(
            x[i], radius[i], v[i], omega[i], x[js], radius[js], v[js], omega[js], valid
        )
        inverse_sum = inverse_mass[i] + inverse_mass[js]
        k_linear = None
        if setup.contact_model == "linear":
            k_linear = 1.0 / (1.0 / params.stiffness[gi] + 1.0 / params.stiffness[gj])
        force_ij, roll_ij, spring = _laws(
            setup,
            geometry,
            cm.effective_modulus(young[gi], poisson[gi], young[gj], poisson[gj]),
            cm.effective_shear_modulus(young[gi], poisson[gi], young[gj], poisson[gj]),
            cm.effective_radius(radius[i], radius[js]),
            1.0 / jnp.where(inverse_sum > 0, inverse_sum, 1.0),
            k_linear,
            cm.mixed_coefficient(beta[gi], beta[gj]),
            cm.mixed_coefficient(friction[gi], friction[gj]),
            cm.mixed_coefficient(rolling[gi], rolling[gj]) if use_rolling else None,
            flat_history[at],
        )
        # as kernels.contact.accumulate: i gets F and (c - x_i) x F + M, j gets -F,
        # (c - x_j) x -F - M
        first = owner_first[:, None]
        on_owner = jnp.where(valid[:, None], jnp.where(first, force_ij, -force_ij), 0.0)
        arm = geometry.contact_point - x[owner]
        torque = jnp.cross(arm, on_owner) + jnp.where(first, roll_ij, -roll_ij)
        torque = jnp.where(valid[:, None], torque, 0.0)

        # (the entries past the listed ones are dropped by place: masking the springs too
        # changed how XLA fuses the laws, and with it their last bits against one device)
        def place(values: Array) -> Array:
            blank = jnp.zeros((total, *values.shape[1:]), values.dtype)
            return blank.at[entry].set(values, mode="drop")

        return place(on_owner), place(torque), place(spring), place(geometry.active & valid)

    on_owner, torque, new_history, touching = over_prefix(
        listed_count, bucket_capacities(total), pairs
    )
    force = _in_order(on_owner.reshape(rows, width, 3))
    torque = _in_order(torque.reshape(rows, width, 3))
    count = jnp.sum(touching.reshape(rows, width), axis=1, dtype=jnp.int32)
    ghost_contacts = jnp.sum(touching & (flat_table >= rows), dtype=jnp.int32)

    new_plane_history = plane_history
    if p:
        own_ids = ids[:rows]
        b = jnp.repeat(jnp.arange(rows, dtype=jnp.int32), p)
        k = jnp.tile(jnp.arange(p, dtype=jnp.int32), rows)
        gb = own_ids[b]
        plane_geometry = sphere_plane(
            x[b], radius[b], v[b], omega[b], params.plane_point[k],
            params.plane_normal[k], params.plane_velocity[k], active[b],
        )  # fmt: skip
        k_plane = None
        if setup.contact_model == "linear":
            k_plane = 1.0 / (1.0 / params.stiffness[gb] + 1.0 / params.plane_stiffness[k])
        inv = inverse_mass[b]
        force_bp, roll_bp, flat_history = _laws(
            setup,
            plane_geometry,
            cm.effective_modulus(young[gb], poisson[gb], params.plane_young[k],
                                 params.plane_poisson[k]),
            cm.effective_shear_modulus(young[gb], poisson[gb], params.plane_young[k],
                                       params.plane_poisson[k]),
            radius[b],
            1.0 / jnp.where(inv > 0, inv, 1.0),
            k_plane,
            cm.mixed_coefficient(beta[gb], cm.restitution_beta(params.plane_restitution)[k]),
            cm.mixed_coefficient(friction[gb], params.plane_friction[k]),
            cm.mixed_coefficient(rolling[gb], params.plane_rolling_friction[k])
            if use_rolling
            else None,
            plane_history.reshape(-1, 3),
        )  # fmt: skip
        valid_b = active[b][:, None]
        f_b = jnp.where(valid_b, force_bp, 0.0)
        t_b = jnp.where(valid_b, jnp.cross(plane_geometry.contact_point - x[b], f_b) + roll_bp, 0.0)
        force = force + _in_order(f_b.reshape(rows, p, 3))
        torque = torque + _in_order(t_b.reshape(rows, p, 3))
        count = count + jnp.sum(plane_geometry.active.reshape(rows, p), axis=1, dtype=jnp.int32)
        new_plane_history = flat_history.reshape(rows, p, 3)

    if gravity:
        owned = bodies.replace(**{k: getattr(bodies, k)[:rows] for k in BODY_FIELDS})
        force = force + rigid_body.gravity_force(owned, params.gravity)
    return LocalContacts(
        force=force,
        torque=torque,
        partners=new_partners,
        history=new_history.reshape(rows, width, 3),
        plane_history=new_plane_history,
        contact_count=count,
        cell_count=cell_count,
        partner_count=partner_count,
        ghost_contacts=ghost_contacts,
        kept=kept,
    )
