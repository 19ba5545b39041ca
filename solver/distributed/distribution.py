"""Placing a run on its devices: sharding, the compiled chunk, gathering and global checks.

A ``Distribution`` joins a started ``Runtime`` to the ``Decomposition`` of one grid. The run
loop talks to it only between chunks:

- ``put`` / ``geometry``: fields of the whole grid -> device arrays (a global array sharded
  over the mesh for ``xla``; this process's block for ``mpi``). A lazy field
  (``solver.fluid.setup.GridField``) is evaluated only on the blocks this process holds.
- ``chunk``: the compiled fluid chunk, wrapped in ``shard_map`` for ``xla`` or given the MPI
  halo for ``mpi``; on one device the plain chunk.
- ``gather``: a field back on the host of process 0 (None on the others). Within one process
  it is a device-to-host copy; across processes ``xla`` all-gathers it slab by slab (no device
  holds more than one slab of it) and ``mpi`` uses ``MPI_Gather`` to rank 0. ``gather_plane``:
  one plane of it the same way.
- ``local_blocks`` / ``block_owners``: the blocks of a field that this process holds, and which
  process holds which block, without any communication (per-process field output).
- ``first_bad``: the global position of the first diverged cell, from every shard's check.
- ``global_view`` / ``restore_targets`` / ``local_view``: a state pytree as the global arrays a
  checkpoint holds, and back. Grid fields are the leaves whose trailing axes are the grid (the
  local block under ``mpi``); every other leaf is replicated.
- ``any_process``: flags OR-ed over the processes (stop signals, save decisions).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from solver.distributed.decomposition import Decomposition, choose_mesh
from solver.distributed.halo import MpiHalo, XlaHalo
from solver.distributed.manual import shard_map
from solver.distributed.runtime import Runtime
from solver.errors import ConfigError
from solver.fluid.grid_field import SLAB_CELLS, GridField
from solver.fluid.inplace_split import make_split_chunk
from solver.fluid.inplace_step import kernel_rates, make_inplace_chunk, require_kernel
from solver.fluid.padded import exchange_ghosts
from solver.fluid.pallas_split import make_pallas_split_chunk
from solver.fluid.pallas_step import make_pallas_chunk
from solver.fluid.setup import FluidSetup
from solver.fluid.step import (
    SINGLE,
    FluidGeometry,
    FluidState,
    StepCoupling,
    make_chunk,
    make_coupled_chunk,
    make_geometry,
)

# the most bytes of a field that an xla gather across processes replicates at once (per slab);
# SOLVER_GATHER_SLAB_BYTES lets the tests cut a small field into several slabs
GATHER_SLAB_BYTES = int(os.environ.get("SOLVER_GATHER_SLAB_BYTES", 1 << 28))


class Distribution:
    """One grid on the runtime's devices.

    Attributes:
        runtime: the started runtime.
        decomposition: the checked split of the grid.
        backend: "single" (one shard), "xla" or "mpi".
        overlap: the XLA step collides the planes other shards receive apart and sends them
            first (``solver.fluid.step.make_chunk``; ``domain.overlap``).
    """

    def __init__(
        self, runtime: Runtime, decomposition: Decomposition, overlap: bool = False
    ) -> None:
        self.runtime = runtime
        self.decomposition = decomposition
        # the XLA step sends its halo messages from planes collided apart (domain.overlap)
        self.overlap = overlap
        if decomposition.shards == 1 and runtime.process_count == 1:
            self.backend = "single"
        else:
            self.backend = runtime.halo
        self.mesh = None
        self._all_processes_mesh = None  # mpi: a mesh for checkpoints only
        if self.backend == "xla":
            devices = np.array(jax.devices()[: decomposition.shards]).reshape(decomposition.mesh)
            self.mesh = Mesh(devices, decomposition.axis_names)

    @property
    def is_root(self) -> bool:
        return self.runtime.is_root

    @property
    def devices(self) -> list[str]:
        if self.backend == "xla":
            return [str(dev) for dev in self.mesh.devices.ravel()]
        if self.backend == "mpi":
            return [f"{jax.devices()[0]} on each of {self.runtime.process_count} MPI ranks"]
        return [str(jax.devices()[0])]

    # ------------------------------------------------------------------ placing arrays

    def _spec(self, lead: int, skip_axis: int | None = None) -> P:
        names = [n for a, n in enumerate(self.decomposition.axis_names) if a != skip_axis]
        return P(*([None] * lead), *names)

    def put(self, array, lead: int = 0, dtype=None, skip_axis: int | None = None) -> Array:
        """A field over the whole grid, (*lead, *shape) (or a face without ``skip_axis``), onto
        the devices, in ``dtype``.

        ``array`` is a NumPy array or anything indexable by a tuple of slices with ``shape``
        and ``dtype`` (``solver.fluid.setup.GridField``): then only the blocks this process
        holds are computed (``mpi``: its own block; ``xla``: each addressable shard's index, as
        ``jax.make_array_from_callback`` asks), never the whole grid; on one device the whole
        grid is made (``np.asarray``).
        """
        if not hasattr(array, "dtype"):
            array = np.asarray(array)
        dtype = np.dtype(array.dtype if dtype is None else dtype)
        if self.backend == "single":
            return jnp.asarray(np.asarray(array, dtype=dtype))
        if self.backend == "mpi":
            block = self.decomposition.block(self.runtime.process_index)
            if skip_axis is not None:
                block = tuple(b for a, b in enumerate(block) if a != skip_axis)
            return jnp.asarray(_host_block(array, (slice(None),) * lead + block, dtype))
        sharding = NamedSharding(self.mesh, self._spec(lead, skip_axis))
        return jax.make_array_from_callback(
            tuple(array.shape), sharding, lambda index: _host_block(array, index, dtype)
        )

    def place(self, array: Array, lead: int = 0) -> Array:
        """A field already on the devices, (*lead, *shape), laid out as ``put`` lays out fields
        and a checkpoint restores them (every mesh axis named, size-1 axes included). An array
        that an eager computation made carries the layout XLA propagated, which drops mesh axes
        of size 1: the chunk would then lower to another program for a fresh run than for a
        resumed one, and a requeued job would miss the persistent compilation cache."""
        if self.backend != "xla":
            return array
        return jax.device_put(array, NamedSharding(self.mesh, self._spec(lead)))

    def replicate(self, value: Array) -> Array:
        """A value every shard holds whole (the step counter): placed as the chunk returns it,
        so the first and later chunks compile to one program."""
        if self.backend != "xla":
            return value
        return jax.device_put(value, NamedSharding(self.mesh, P()))

    def geometry(self, setup: FluidSetup) -> FluidGeometry:
        """The setup's geometry arrays on the devices, in the setup's dtype; lazy fields
        (``GridField``) are built only on this process's blocks (``put``)."""
        return make_geometry(setup, lambda arr, dtype, lead, face: self.put(arr, lead, dtype, face))

    # ------------------------------------------------------------------ the compiled chunk

    def chunk(self, setup: FluidSetup) -> Callable[[FluidState, FluidGeometry, int], tuple]:
        """jit-compiled chunk(state, geometry, n) -> (state, forces (n, d)); the state is
        donated and n is static."""
        if setup.kernel == "native" and self.backend == "single":
            local = make_inplace_chunk(setup)
        elif setup.kernel == "native":  # slabs along x (checked by require_kernel)
            local = self._native_split_chunk(setup)
        elif setup.kernel == "pallas" and self.backend == "single":
            local = make_pallas_chunk(setup)
        elif setup.kernel == "pallas":  # slabs along x (checked by require_kernel)
            local = self._pallas_split_chunk(setup)
        elif setup.kernel == "cuda":  # one device (checked by require_kernel)
            local = make_inplace_chunk(setup, "cuda")
        elif self.backend == "single":
            local = make_chunk(setup)
        elif self.backend == "mpi":
            halo = MpiHalo(self.decomposition, self.runtime.comm)
            local = make_chunk(setup, halo, self.overlap)
        else:
            local = self._sharded_chunk(setup)
        return jax.jit(local, static_argnums=2, donate_argnums=0)

    def _native_split_chunk(self, setup: FluidSetup) -> Callable:
        """The native kernel's chunk on this process's slab (mpi) or on every shard's slab
        inside ``shard_map`` (xla): solver/fluid/inplace_split.py."""
        decomposition = self.decomposition
        rates = kernel_rates(setup)
        block, shards = decomposition.local_shape, decomposition.shards
        if self.backend == "mpi":
            halo = MpiHalo(decomposition, self.runtime.comm)
            # this process's slab only: its wall links, from its planes of the geometry
            return make_split_chunk(setup, block, halo, lambda: 0, [halo.coords[0]], *rates)
        name = decomposition.axis_names[0]
        local = make_split_chunk(
            setup, block, XlaHalo(decomposition), lambda: lax.axis_index(name), shards, *rates
        )
        return self._mapped(setup, local)

    def _pallas_split_chunk(self, setup: FluidSetup) -> Callable:
        """The Pallas kernel's chunk on slabs along x: solver/fluid/pallas_split.py."""
        block = self.decomposition.local_shape
        if self.backend == "mpi":
            halo = MpiHalo(self.decomposition, self.runtime.comm)
            return make_pallas_split_chunk(setup, block, halo)
        local = make_pallas_split_chunk(setup, block, XlaHalo(self.decomposition))
        # Pallas's outputs carry no varying-axes annotation for shard_map's check
        return self._mapped(setup, local, check_vma=False)

    def _mapped(self, setup: FluidSetup, local: Callable, check_vma: bool = True) -> Callable:
        """A shard's chunk(state, geometry, n) run on every shard of the mesh (``shard_map``)."""
        state_spec = FluidState(populations=self._spec(1), time=P())
        geometry_spec = make_geometry(setup, lambda arr, dtype, lead, face: self._spec(lead, face))

        def chunk(state: FluidState, geometry: FluidGeometry, n: int):
            mapped = shard_map(
                functools.partial(_call_chunk, local, n),
                mesh=self.mesh,
                in_specs=(state_spec, geometry_spec),
                out_specs=(state_spec, P()),
                check_vma=check_vma,
            )
            return mapped(state, geometry)

        return chunk

    def _sharded_chunk(self, setup: FluidSetup) -> Callable:
        return self._mapped(setup, make_chunk(setup, XlaHalo(self.decomposition), self.overlap))

    def coupled_chunk(self, setup: FluidSetup, coupling: StepCoupling) -> Callable:
        """jit-compiled chunk(state, geometry, n, extra) -> (state, forces (n, d), extra,
        reports) of ``solver.fluid.step.make_coupled_chunk`` (or the native kernel's);
        ``extra`` (the coupled bodies) is replicated on every shard. The state and extra are
        donated, n is static."""
        if setup.kernel != "xla":  # exit 2 where the one-buffer kernel cannot take the bodies
            decomposition = self.decomposition
            require_kernel(
                setup, shards=decomposition.shards, coupled=True, mesh=tuple(decomposition.mesh)
            )
        if self.backend == "single":
            local = self.shard_coupled_chunk(setup, coupling, SINGLE)
        elif self.backend == "mpi":
            halo = MpiHalo(self.decomposition, self.runtime.comm)
            local = self.shard_coupled_chunk(setup, coupling, halo)
        else:
            inner = self.shard_coupled_chunk(setup, coupling, XlaHalo(self.decomposition))
            local = self._mapped_coupled(setup, inner)
        return jax.jit(local, static_argnums=2, donate_argnums=(0, 3))

    def shard_coupled_chunk(self, setup: FluidSetup, coupling: StepCoupling, halo) -> Callable:
        """One shard's coupled chunk(state, geometry, n, extra) on ``halo`` (``SINGLE``, this
        process's ``MpiHalo``, or the ``XlaHalo`` of a chunk inside ``shard_map``): the XLA
        step's (``make_coupled_chunk``), or with ``fluid.kernel=native`` the native kernel's on
        one device (solver/coupling/native.py) or on this shard's slab along x."""
        if setup.kernel != "native":
            return make_coupled_chunk(setup, halo, coupling)
        # the coupling's part of the solver, imported where it is used
        from solver.coupling.native import (
            make_native_coupled_chunk,
            make_native_coupled_split_chunk,
        )

        if self.backend == "single":
            return make_native_coupled_chunk(setup, coupling)
        decomposition = self.decomposition
        block = decomposition.local_shape
        if self.backend == "mpi":
            return make_native_coupled_split_chunk(
                setup, coupling, block, halo, lambda: 0, [halo.coords[0]]
            )
        name = decomposition.axis_names[0]
        return make_native_coupled_split_chunk(
            setup, coupling, block, halo, lambda: lax.axis_index(name), decomposition.shards
        )

    def _mapped_coupled(self, setup: FluidSetup, inner: Callable) -> Callable:
        """A shard's coupled chunk(state, geometry, n, extra) run on every shard of the mesh
        (``shard_map``; the bodies ``extra`` replicated)."""
        state_spec = FluidState(populations=self._spec(1), time=P())
        geometry_spec = make_geometry(setup, lambda arr, dtype, lead, face: self._spec(lead, face))

        def local(state, geometry, n, extra):
            mapped = shard_map(
                lambda s, g, e: inner(s, g, n, e),
                mesh=self.mesh,
                in_specs=(state_spec, geometry_spec, P()),
                out_specs=(state_spec, P(), P(), P()),
            )
            return mapped(state, geometry, extra)

        return local

    def exchange_probe(self, setup: FluidSetup) -> Callable[[Array], Array] | None:
        """jit-compiled probe(populations) -> one value per shard: the step's halo messages
        alone (``solver.fluid.padded.exchange_ghosts`` on the state's populations: the same
        blocks, routes and collectives as one step's ghost fill, nothing computed or stored),
        for the telemetry's exchange time. None with one shard (nothing is exchanged)."""
        if self.backend == "single":
            return None
        offsets = setup.lattice.c
        d = setup.lattice.d

        def first_values(received: list[Array]) -> Array:
            # one value of every message, so that none of them is optimised away
            total = sum(b.ravel()[0].astype(jnp.float32) for b in received)
            return jnp.reshape(total, (1,) * d)

        if self.backend == "mpi":
            halo = MpiHalo(self.decomposition, self.runtime.comm)
            return jax.jit(lambda f: first_values(exchange_ghosts(list(f), offsets, halo)))
        halo = XlaHalo(self.decomposition)
        mapped = shard_map(
            lambda f: first_values(exchange_ghosts(list(f), offsets, halo)),
            mesh=self.mesh,
            in_specs=(self._spec(1),),
            out_specs=self._spec(0),
        )
        return jax.jit(mapped)

    # ------------------------------------------------------------------ host side

    def gather(self, array: Array, lead: int = 0) -> np.ndarray | None:
        """The whole (*lead, *shape) field on process 0's host; None on the others."""
        if self.backend == "single":
            return np.asarray(array)
        if self.backend == "mpi":
            parts = self.runtime.comm.gather(np.asarray(array), root=0)
            if not self.is_root:
                return None
            out = np.empty(parts[0].shape[:lead] + self.decomposition.shape, parts[0].dtype)
            for rank, part in enumerate(parts):
                out[(slice(None),) * lead + self.decomposition.block(rank)] = part
            return out
        if array.is_fully_addressable:
            return np.asarray(array)
        return self._gather_slabs(array, lead)

    def _gather_slabs(self, array: Array, lead: int) -> np.ndarray | None:
        """xla across processes: the field in slabs along x, each all-gathered on the devices
        (JAX has no gather to one process), so that no device ever holds more than one slab
        of ``GATHER_SLAB_BYTES`` beside its own block; process 0 assembles the host copy."""
        from jax.experimental import multihost_utils

        shape = array.shape
        plane_bytes = array.dtype.itemsize * math.prod(shape) // shape[lead]
        rows = max(1, GATHER_SLAB_BYTES // max(plane_bytes, 1))
        out = np.empty(shape, array.dtype) if self.is_root else None
        for x0 in range(0, shape[lead], rows):
            index = (slice(None),) * lead + (slice(x0, min(x0 + rows, shape[lead])),)
            piece = np.asarray(multihost_utils.process_allgather(array[index], tiled=True))
            if out is not None:
                out[index] = piece
        return out

    def gather_plane(self, array: Array, axis: int, index: int, lead: int = 0) -> np.ndarray | None:
        """One plane of a field (*lead, *shape) on process 0's host, (*lead, *shape without
        ``axis``): the cell planes at ``index`` along grid axis ``axis``; None on the others.
        Only the plane travels (the final PNG of a grid too large to gather)."""
        at = (slice(None),) * (lead + axis) + (index,)
        if self.backend == "single":
            return np.asarray(array[at])
        if self.backend == "mpi":
            block = self.decomposition.block(self.runtime.process_index)
            span = block[axis]
            mine = None
            if span.start <= index < span.stop:
                local = (slice(None),) * (lead + axis) + (index - span.start,)
                rest = tuple(b for a, b in enumerate(block) if a != axis)
                mine = (rest, np.asarray(array[local]))
            parts = self.runtime.comm.gather(mine, root=0)
            if not self.is_root:
                return None
            shape = tuple(n for a, n in enumerate(self.decomposition.shape) if a != axis)
            first = next(p for p in parts if p is not None)[1]
            out = np.empty(first.shape[:lead] + shape, first.dtype)
            for part in parts:
                if part is not None:
                    out[(slice(None),) * lead + part[0]] = part[1]
            return out
        plane = array[at]
        if plane.is_fully_addressable:
            return np.asarray(plane)
        return self._gather_slabs(plane, lead)

    def block_owners(self, array: Array, lead: int = 0) -> dict[int, list[tuple[slice, ...]]]:
        """Which process writes which block of a grid field (*lead, *shape): process index ->
        global index ranges over the grid axes, in the order of their first cell. A block
        held by several processes (replicated) belongs to the lowest of them. The same on
        every process; no communication."""
        full = tuple(slice(0, n) for n in self.decomposition.shape)
        if self.backend == "single":
            return {0: [full]}
        if self.backend == "mpi":
            shards = range(self.decomposition.shards)
            return {rank: [self.decomposition.block(rank)] for rank in shards}
        owner: dict[tuple[int, ...], tuple[int, tuple[slice, ...]]] = {}
        for device, index in array.sharding.devices_indices_map(array.shape).items():
            block = _grid_slices(index[lead:], self.decomposition.shape)
            key = tuple(s.start for s in block)
            if key not in owner or device.process_index < owner[key][0]:
                owner[key] = (device.process_index, block)
        owners: dict[int, list[tuple[slice, ...]]] = {}
        for key in sorted(owner):
            process, block = owner[key]
            owners.setdefault(process, []).append(block)
        return owners

    def local_blocks(
        self, array: Array, lead: int = 0
    ) -> list[tuple[tuple[slice, ...], np.ndarray]]:
        """This process's blocks of a grid field (*lead, *shape) on the host: (global index
        ranges over the grid axes, (*lead, *block shape) array) for each block that
        ``block_owners`` gives this process, in that order. Nothing crosses processes: under
        ``xla`` these are addressable shards, under ``mpi`` the process's own block."""
        if self.backend == "single":
            return [(tuple(slice(0, n) for n in self.decomposition.shape), np.asarray(array))]
        process = self.runtime.process_index
        if self.backend == "mpi":
            return [(self.decomposition.block(process), np.asarray(array))]
        shards = {}
        for shard in array.addressable_shards:
            block = _grid_slices(shard.index[lead:], self.decomposition.shape)
            shards.setdefault(tuple(s.start for s in block), shard)
        blocks = self.block_owners(array, lead).get(process, [])
        return [(b, np.asarray(shards[tuple(s.start for s in b)].data)) for b in blocks]

    def first_bad(self, bad: Array, where: Array, value: Array) -> tuple[tuple, float] | None:
        """The global cell index and density of the first bad cell, or None if none is bad.

        ``bad``, ``where`` (flat index) and ``value`` come from a check over the state as this
        process sees it: the global array (single, xla) or its own block (mpi).
        """
        if self.backend != "mpi":
            if not bool(bad):
                return None
            index = np.unravel_index(int(where), self.decomposition.shape)
            return tuple(int(i) for i in index), float(value)
        mine = (bool(bad), int(where), float(value))
        found = self.runtime.comm.allgather(mine)
        for rank, (is_bad, flat, rho) in enumerate(found):
            if is_bad:
                local = np.unravel_index(flat, self.decomposition.local_shape)
                start = [b.start for b in self.decomposition.block(rank)]
                return tuple(int(s + i) for s, i in zip(start, local, strict=True)), rho
        return None

    # ------------------------------------------------------------------ checkpoints

    def _grid_lead(self, shape: tuple[int, ...]) -> int | None:
        """Leading axes before the grid axes of a leaf of this process, None if not a field."""
        grid = self.decomposition.local_shape if self.backend == "mpi" else self.decomposition.shape
        d = len(grid)
        if len(shape) >= d and tuple(shape[len(shape) - d :]) == tuple(grid):
            return len(shape) - d
        return None

    def _process_mesh(self) -> Mesh:
        """All processes' devices as one mesh, rank r at the mesh position of block r."""
        if self._all_processes_mesh is None:
            devices = sorted(jax.devices(), key=lambda dev: (dev.process_index, dev.id))
            self._all_processes_mesh = Mesh(
                np.array(devices[: self.decomposition.shards]).reshape(self.decomposition.mesh),
                self.decomposition.axis_names,
            )
        return self._all_processes_mesh

    def _leaf_sharding(self, lead: int | None):
        if self.backend == "single":
            return jax.sharding.SingleDeviceSharding(jax.devices()[0])
        mesh = self._process_mesh() if self.backend == "mpi" else self.mesh
        return NamedSharding(mesh, P() if lead is None else self._spec(lead))

    def global_view(self, tree):
        """The state as global arrays: unchanged for single and xla; under mpi each process's
        blocks joined (without copying) into arrays over all processes."""
        if self.backend != "mpi":
            return tree

        def join(leaf):
            lead = self._grid_lead(leaf.shape)
            shape = leaf.shape if lead is None else leaf.shape[:lead] + self.decomposition.shape
            return jax.make_array_from_single_device_arrays(
                shape, self._leaf_sharding(lead), [leaf]
            )

        return jax.tree.map(join, tree)

    def restore_targets(self, tree):
        """Abstract global arrays (shape, dtype, sharding) to restore ``tree``'s leaves into,
        laid out on this run's mesh."""

        def target(leaf):
            lead = self._grid_lead(leaf.shape)
            shape = leaf.shape
            if self.backend == "mpi" and lead is not None:
                shape = leaf.shape[:lead] + self.decomposition.shape
            return jax.ShapeDtypeStruct(shape, leaf.dtype, sharding=self._leaf_sharding(lead))

        return jax.tree.map(target, tree)

    def local_view(self, tree):
        """Inverse of ``global_view``: under mpi, this process's block of every leaf.

        Single-device and mpi leaves come back uncommitted, as a fresh state is: a restored
        array pinned to its device would make the chunk lower with sharding annotations, i.e.
        a second compilation of the same program on every resume (and a persistent-cache miss).
        """
        if self.backend == "xla":
            return tree
        if self.backend == "mpi":
            tree = jax.tree.map(lambda leaf: leaf.addressable_data(0), tree)
        return jax.tree.map(lambda leaf: jnp.asarray(np.asarray(leaf)), tree)

    def block_offset(self, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        """Global index of this process's first element of a leaf of ``shape`` (as held
        here), or None for a replicated leaf."""
        lead = self._grid_lead(shape)
        if lead is None:
            return None
        if self.backend != "mpi":
            return (0,) * len(shape)
        start = [b.start for b in self.decomposition.block(self.runtime.process_index)]
        return (0,) * lead + tuple(start)

    def any_process(self, flags: list[bool]) -> list[bool]:
        """Each flag OR-ed over all processes (every process must call this)."""
        return any_process(self.runtime, flags)

    def describe(self) -> dict:
        """How the state was laid out (stored with a checkpoint)."""
        return {
            "mesh": list(self.decomposition.mesh),
            "backend": self.backend,
            "processes": self.runtime.process_count,
        }

    def sum_blocks(self, values: list[int]) -> list[int]:
        """Per-block integers summed over the MPI processes (mpi); unchanged otherwise, where
        the arrays are global already. Every process must call this."""
        if self.backend != "mpi":
            return [int(v) for v in values]
        return [int(v) for v in self.runtime.comm.allreduce(np.asarray(values, dtype=object))]


def any_process(runtime: Runtime, flags: list[bool]) -> list[bool]:
    """Each flag OR-ed over all processes of ``runtime`` (every process must call this)."""
    if runtime.process_count == 1:
        return [bool(f) for f in flags]
    mine = np.asarray([int(bool(f)) for f in flags], dtype=np.int32)
    if runtime.comm is not None:
        from mpi4py import MPI

        out = np.empty_like(mine)
        runtime.comm.Allreduce(mine, out, op=MPI.MAX)
        return [bool(v) for v in out]
    from jax.experimental import multihost_utils

    every = np.asarray(multihost_utils.process_allgather(mine))
    return [bool(v) for v in every.reshape(-1, len(flags)).max(axis=0)]


class HostLayout:
    """A state that every process holds whole on the host (NumPy arrays), as checkpoints see
    it: the rigid-body models hand their state over in this form (gathered, in body order,
    without padding), so that a checkpoint restores onto any number of devices and processes.

    Offers what ``solver.checkpoint.session.RunCheckpoints`` asks of a layout; every leaf is
    replicated (Orbax writes NumPy leaves from process 0 and every process reads them).

    Args:
        runtime: the started runtime.
        description: how the model laid the state out (stored with a checkpoint), e.g.
            ``{"mesh": [2, 1, 1]}`` or ``{"members": 8}``.
    """

    backend = "host"

    def __init__(self, runtime: Runtime, description: dict) -> None:
        self.runtime = runtime
        self.description = description

    @property
    def is_root(self) -> bool:
        return self.runtime.is_root

    def describe(self) -> dict:
        return {**self.description, "backend": "host", "processes": self.runtime.process_count}

    def restore_targets(self, tree):
        """NumPy templates: Orbax restores NumPy arrays of their shape and dtype."""
        return jax.tree.map(np.asarray, tree)

    def global_view(self, tree):
        return tree

    def local_view(self, tree):
        return tree

    def block_offset(self, shape: tuple[int, ...]) -> None:
        return None  # every leaf is whole on every process

    def any_process(self, flags: list[bool]) -> list[bool]:
        return any_process(self.runtime, flags)

    def sum_blocks(self, values: list[int]) -> list[int]:
        return [int(v) for v in values]


def _host_block(array, index: tuple[slice, ...], dtype) -> np.ndarray:
    """``array[index]`` (slices over every axis) as a C-contiguous array of ``dtype``. A lazy
    field (``GridField``) is computed a slab of planes of the block at a time, each cast into
    the result as it comes: its float64 temporaries stay a slab's, not the block's."""
    if not isinstance(array, GridField):
        return np.ascontiguousarray(array[index], dtype=dtype)
    n_lead = len(array.lead)
    index = tuple(index) + (slice(None),) * (array.ndim - len(index))
    ranges = [range(*s.indices(n)) for s, n in zip(index, array.shape, strict=True)]
    if any(r.step != 1 for r in ranges) or not ranges[n_lead]:
        return np.ascontiguousarray(array[index], dtype=dtype)
    out = np.empty(tuple(len(r) for r in ranges), dtype=dtype)
    first = ranges[n_lead]
    plane = max(1, math.prod(len(r) for i, r in enumerate(ranges) if i != n_lead))
    rows = max(1, SLAB_CELLS // plane)
    for start in range(first.start, first.stop, rows):
        stop = min(start + rows, first.stop)
        part = (slice(start - first.start, stop - first.start),)
        where = (slice(None),) * n_lead + part
        out[where] = array[index[:n_lead] + (slice(start, stop),) + index[n_lead + 1 :]]
    return out


def slab_chunk(setup: FluidSetup, devices: list) -> Callable:
    """jit-compiled chunk(state, geometry, n) of the one-buffer kernel of ``setup`` (native or
    pallas) on ``devices`` as slabs along x, inside ``shard_map`` with the xla halo, for checks
    outside a run (``make gpu-check``); n is static."""
    mesh_shape = (len(devices),) + (1,) * (setup.lattice.d - 1)
    decomposition = Decomposition(tuple(setup.shape), mesh_shape)
    names = decomposition.axis_names
    mesh = Mesh(np.array(devices).reshape(mesh_shape), names)
    halo = XlaHalo(decomposition)
    if setup.kernel == "pallas":
        local = make_pallas_split_chunk(setup, decomposition.local_shape, halo)
    else:
        index = lambda: lax.axis_index(names[0])  # noqa: E731
        local = make_split_chunk(setup, decomposition.local_shape, halo, index,
                                 len(devices), *kernel_rates(setup))  # fmt: skip

    def spec(arr, dtype, lead, face):
        return P(*[None] * lead, *[n for a, n in enumerate(names) if a != face])

    state_spec = FluidState(populations=P(None, *names), time=P())

    def chunk(state: FluidState, geometry: FluidGeometry, n: int):
        return shard_map(
            functools.partial(_call_chunk, local, n),
            mesh=mesh,
            in_specs=(state_spec, make_geometry(setup, spec)),
            out_specs=(state_spec, P()),
            check_vma=False,
        )(state, geometry)

    return jax.jit(chunk, static_argnums=2)


def _grid_slices(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A shard's index over the grid axes with explicit starts and stops."""
    return tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, shape, strict=True))


def _call_chunk(local: Callable, n: int, state: FluidState, geometry: FluidGeometry):
    return local(state, geometry, n)


def distribute(
    runtime: Runtime,
    mesh_spec,
    shape: tuple[int, ...],
    overlap: bool = False,
    unsplit: tuple[int, ...] = (),
) -> Distribution:
    """Check ``domain.mesh`` against the grid, the devices and the processes, and place it.

    ``unsplit``: axes the mesh must leave whole (the setup's symmetry planes).

    Raises:
        ConfigError: see ``choose_mesh``; also a mesh whose shard count differs from the number
            of processes in a multi-process run, or an ``mpi`` halo asked to split a grid over
            the devices of a single process.
    """
    devices = runtime.device_count()
    processes = runtime.process_count
    if processes > 1 and not isinstance(mesh_spec, str) and math.prod(mesh_spec) != processes:
        raise ConfigError(
            "domain.mesh",
            list(mesh_spec),
            f"a mesh of exactly {processes} shards (one per process)",
            hint=f"it has {math.prod(mesh_spec)}; {processes} processes are running",
        )
    decomposition = choose_mesh(mesh_spec, shape, devices, unsplit=unsplit)
    if processes > 1 and decomposition.shards != processes:
        raise ConfigError(
            "domain.mesh",
            mesh_spec if isinstance(mesh_spec, str) else list(mesh_spec),
            f"a mesh of exactly {processes} shards (one per process)",
            hint=f"it has {decomposition.shards}; {processes} processes are running",
        )
    if runtime.halo == "mpi" and processes == 1 and decomposition.shards > 1:
        raise ConfigError(
            "domain.halo",
            "mpi",
            f"xla for a mesh of {decomposition.shards} shards in one process",
            hint="the mpi halo runs one shard per MPI process: launch "
            f"{decomposition.shards} processes with mpirun or srun",
        )
    return Distribution(runtime, decomposition, overlap)
