"""Running a decomposed body scene: placement, the compiled chunk, overflow checks, gathering.

``simulate_spatial(setup, bodies, steps, mesh)`` is the whole thing; the pieces (``place``,
``compile_chunk``, ``overflow_message``, ``gather``) are for a run loop that writes output
between chunks. The subdomains' arrays are global arrays whose leading axis is the subdomain
rank times the capacity, sharded over a ``jax.sharding.Mesh`` with axes ("x", "y", "z"); the
step runs in ``shard_map`` and exchanges bodies by ``lax.ppermute``. That works within one
process (several devices, e.g. fake CPU devices) and across processes started with
``jax.distributed`` (``solver.distributed.runtime.start("xla")``, one device per process).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from kernels.rigid_body import Bodies
from solver.bodies.step import BodySetup, ContactParams
from solver.distributed.bodies import records
from solver.distributed.bodies.clump_slots import rows_per_slot
from solver.distributed.bodies.layout import BodyLayout, overflow_lines, plan_layout
from solver.distributed.bodies.records import SubdomainState
from solver.distributed.bodies.step import SpatialDiagnostics, make_local_chunk, make_local_initial
from solver.distributed.manual import shard_map

OVERFLOW_KEYS = {
    "owned": "bodies.capacity",
    "ghost": "bodies.ghost_capacity",
    "migration": "bodies.migration_capacity",
    "cell": "bodies.cell_capacity",
    "partners": "bodies.max_partners",
}


class BodyOverflowError(RuntimeError):
    """A subdomain's buffer was too small: bodies or pairs were lost. The message names the
    subdomain (rank and mesh coordinates), the buffer, its capacity and the size needed."""


@dataclass(frozen=True)
class SpatialResult:
    """The end of a decomposed run, on the host (process 0; None fields elsewhere).

    Attributes:
        bodies: Bodies of the whole scene in global id order (NumPy arrays).
        force, torque: (n, 3) N and N m acting at the final time.
        contact_count: (n,) int32.
        steps: steps done.
        diagnostics: SpatialDiagnostics, each with leading axis ``steps``.
        overflow: (subdomains, 6) int32, the largest counts seen per buffer (CAPACITY_NAMES,
            then bodies that jumped more than one block).
        layout: the layout that ran.
    """

    bodies: Bodies | None
    force: np.ndarray | None
    torque: np.ndarray | None
    contact_count: np.ndarray | None
    steps: int
    diagnostics: SpatialDiagnostics
    overflow: np.ndarray
    layout: BodyLayout


def device_mesh(layout: BodyLayout) -> Mesh:
    """The first ``layout.shards`` devices (all processes) as a mesh with axes x, y, z."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    if len(devices) < layout.shards:
        raise ValueError(
            f"bodies.mesh {list(layout.mesh)} needs {layout.shards} devices, "
            f"{len(devices)} are available"
        )
    return Mesh(np.array(devices[: layout.shards]).reshape(layout.mesh), layout.axis_names)


def _spec() -> P:
    return P(("x", "y", "z"))


def _state_spec(state: SubdomainState) -> SubdomainState:
    return jax.tree.map(lambda _: _spec(), state)


def host_subdomains(setup: BodySetup, layout: BodyLayout, bodies: Bodies) -> dict:
    """The scene cut into the subdomains' slot arrays on the host (NumPy).

    Returns a dict of the ``SubdomainState`` fields, each with leading axis shards * capacity.

    Raises:
        BodyOverflowError: a subdomain owns more bodies than ``layout.capacity`` at the start.
    """
    n, cap, s = setup.n_bodies, layout.capacity, layout.shards
    fields = {name: np.asarray(getattr(bodies, name)) for name in records.BODY_FIELDS}
    if fields["position"].shape != (n, 3):
        raise ValueError(f"bodies.position must be ({n}, 3), got {fields['position'].shape}")
    dtype = fields["position"].dtype
    owner = layout.owner_ranks(fields["position"])
    counts = np.bincount(owner, minlength=s)
    if counts.max() > cap:
        rank = int(np.argmax(counts))
        raise BodyOverflowError(
            f"subdomain {rank} {layout.decomposition.coords(rank)} owns {counts[rank]} bodies "
            f"at the start; bodies.capacity = {cap}"
        )
    empty = records.empty_bodies(1, dtype)
    out = {
        name: np.repeat(np.asarray(getattr(empty, name)), s * cap, axis=0)
        for name in records.BODY_FIELDS
    }
    gid = np.full(s * cap, -1, np.int32)
    for rank in range(s):
        mine = np.flatnonzero(owner == rank)  # ascending ids fill the lowest slots
        slots = rank * cap + np.arange(mine.size)
        gid[slots] = mine
        for name in records.BODY_FIELDS:
            out[name][slots] = fields[name][mine]
    # contact rows per member sphere: a slot holds its clump's M members' rows one after another
    width = rows_per_slot(setup)
    k, p = width * layout.max_partners, width * layout.n_planes
    return dict(
        gid=gid,
        bodies=Bodies(**out),
        force=np.zeros((s * cap, 3), dtype),
        torque=np.zeros((s * cap, 3), dtype),
        partners=np.full((s * cap, k), -1, np.int32),
        history=np.zeros((s * cap, k, 3), dtype),
        plane_history=np.zeros((s * cap, p, 3), dtype),
        contact_count=np.zeros(s * cap, np.int32),
        time=np.zeros(s, np.int32),
        overflow=np.zeros(s * records.OVERFLOW_SLOTS, np.int32),
    )


def place(setup: BodySetup, layout: BodyLayout, mesh: Mesh, bodies: Bodies) -> SubdomainState:
    """The scene on the devices: each subdomain's slots on its device (forces not yet set)."""
    host = host_subdomains(setup, layout, bodies)
    sharding = NamedSharding(mesh, _spec())

    def put(array):
        array = np.asarray(array)
        return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])

    return jax.tree.map(put, SubdomainState(**host))


def compile_initial(
    setup: BodySetup, layout: BodyLayout, mesh: Mesh, params: ContactParams
) -> Callable[[SubdomainState], SubdomainState]:
    """jit(initial): the forces at time 0 of a placed state."""
    local = make_local_initial(setup, layout)

    def initial(state: SubdomainState) -> SubdomainState:
        spec = _state_spec(state)
        mapped = shard_map(
            lambda s: local(s, params),
            mesh=mesh,
            in_specs=(spec,),
            out_specs=spec,
            check_vma=False,  # see compile_chunk
        )
        return mapped(state)

    return jax.jit(initial)


def compile_chunk(
    setup: BodySetup, layout: BodyLayout, mesh: Mesh, params: ContactParams
) -> Callable[[SubdomainState, int, bool], tuple[SubdomainState, SpatialDiagnostics]]:
    """jit(chunk)(state, n, start) -> (state after n steps, diagnostics (n, ...)); n static,
    the state donated. ``start`` (a bool, traced): the state comes from ``place`` and the
    chunk first computes the forces at time 0; False for the chunks after the first
    (``step.make_local_chunk``)."""
    local = make_local_chunk(setup, layout)

    def chunk(state: SubdomainState, n: int, start):
        spec = _state_spec(state)
        diagnostics_spec = SpatialDiagnostics(*(P() for _ in SpatialDiagnostics._fields))
        mapped = shard_map(
            lambda s, go: local(s, n, params, go),
            mesh=mesh,
            in_specs=(spec, P()),
            out_specs=(spec, diagnostics_spec),
            # the kernels' loops start from constants (replicated) and carry per-subdomain
            # values (varying): without the check they need no casts, and the diagnostics
            # are replicated by construction (psum)
            check_vma=False,
        )
        return mapped(state, jnp.asarray(start))

    return jax.jit(chunk, static_argnums=1, donate_argnums=0)


def host_array(array) -> np.ndarray:
    """A global array on this host whole (an all-gather across processes)."""
    if array.is_fully_addressable:
        return np.asarray(array)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def overflow_table(layout: BodyLayout, state: SubdomainState) -> np.ndarray:
    """(subdomains, 6) int32: the sticky counts of every subdomain (every process gets all)."""
    return host_array(state.overflow).reshape(layout.shards, records.OVERFLOW_SLOTS)


def overflow_message(layout: BodyLayout, table: np.ndarray) -> str | None:
    """One line per subdomain whose buffers were too small, or None if every one sufficed."""
    wider = min(w for w in layout.block_width)
    jumped = f"in a step (reduce dt, or use wider blocks than {wider:g} m)"
    return overflow_lines(layout, table, OVERFLOW_KEYS, "subdomain", jumped, ("ghost",))


def gather(
    setup: BodySetup, layout: BodyLayout, state: SubdomainState
) -> tuple[Bodies, np.ndarray, np.ndarray, np.ndarray]:
    """(bodies, force, torque, contact_count) of the whole scene in global id order, NumPy.

    Every process must call it (an all-gather across processes).

    Raises:
        BodyOverflowError: some body is missing or held twice (a lost migrant).
    """
    gid = host_array(state.gid)
    held = gid >= 0
    ids = gid[held]
    n = setup.n_bodies
    if ids.size != n or np.unique(ids).size != n:
        missing = np.setdiff1d(np.arange(n), ids)
        raise BodyOverflowError(
            f"{n - np.unique(ids).size} bodies lost (e.g. ids {missing[:5].tolist()}); "
            f"see the overflow report"
        )
    order = np.argsort(ids)

    def pick(array):
        return host_array(array)[held][order]

    bodies = Bodies(**{name: pick(getattr(state.bodies, name)) for name in records.BODY_FIELDS})
    return bodies, pick(state.force), pick(state.torque), pick(state.contact_count)


def simulate_spatial(
    setup: BodySetup,
    bodies: Bodies,
    steps: int,
    mesh: Sequence[int],
    *,
    chunk: int | None = None,
    params: ContactParams | None = None,
    layout: BodyLayout | None = None,
    **capacities,
) -> SpatialResult:
    """Run a scene of spheres, clumps and planes for ``steps`` steps split over a device mesh.

    Args:
        setup: the single-device setup of the whole scene (``solver.bodies.step.BodySetup``).
        bodies: its initial state (n bodies, NumPy or JAX arrays, float64 advised).
        steps: time steps (each ``setup.dt``).
        mesh: subdomains along x, y, z, e.g. (2, 2, 2); their product of devices is used.
        chunk: steps per compiled chunk (overflow is checked between chunks); None: all.
        params: material values, planes and gravity; None: ``setup.params()``.
        layout: a layout from ``plan_layout``; None: planned here with ``capacities``
            (capacity, ghost_capacity, migration_capacity, cell_capacity, max_partners).

    Returns:
        SpatialResult with the final state in global id order and per-step diagnostics.

    Raises:
        BodyOverflowError: after the first chunk in which some subdomain's buffer overflowed,
            naming the subdomain, the buffer, its capacity and the size needed.
    """
    if layout is None:
        layout = plan_layout(setup, mesh, devices=jax.device_count(), **capacities)
    if tuple(mesh) != layout.mesh:
        raise ValueError(f"mesh {list(mesh)} differs from the layout's {list(layout.mesh)}")
    dtype = np.asarray(bodies.position).dtype
    if params is None:
        params = setup.params(jnp.dtype(dtype))
    device_grid = device_mesh(layout)
    state = place(setup, layout, device_grid, bodies)
    run_chunk = compile_chunk(setup, layout, device_grid, params)
    chunk = steps if chunk is None else max(1, min(int(chunk), steps))
    parts, done, message = [], 0, None
    if steps == 0:
        state = compile_initial(setup, layout, device_grid, params)(state)
        table = overflow_table(layout, state)
        message = overflow_message(layout, table)
    while message is None and done < steps:
        n = min(chunk, steps - done)
        state, diagnostics = run_chunk(state, n, done == 0)
        parts.append(jax.tree.map(host_array, diagnostics))
        done += n
        table = overflow_table(layout, state)
        message = overflow_message(layout, table)
    if message is not None:
        raise BodyOverflowError(f"after step {done}: {message}")
    empty = SpatialDiagnostics(*(np.zeros((0,)) for _ in SpatialDiagnostics._fields))
    diagnostics = jax.tree.map(lambda *xs: np.concatenate(xs), *parts) if parts else empty
    final, force, torque, count = gather(setup, layout, state)
    is_root = jax.process_index() == 0
    return SpatialResult(
        bodies=final if is_root else None,
        force=force if is_root else None,
        torque=torque if is_root else None,
        contact_count=count if is_root else None,
        steps=done,
        diagnostics=diagnostics,
        overflow=table,
        layout=layout,
    )
