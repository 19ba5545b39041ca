"""The worker of ``python -m solver.bench scaling``: times one scaling point in the processes and
on the devices it was started with (see ``solver.bench.scaling`` for what is measured)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from kernels.lattices import lattice_by_name
from solver.bench.fluid import build_setup, initial_fields, measure_copy
from solver.distributed.decomposition import Decomposition, choose_mesh
from solver.distributed.distribution import Distribution
from solver.distributed.runtime import Runtime, start
from solver.fluid.inplace_step import make_inplace_chunk
from solver.fluid.pallas_step import make_pallas_chunk
from solver.fluid.setup import FluidSetup
from solver.fluid.step import FluidState, initial_state, make_chunk, make_geometry

PRECISION = "float32"  # the scaling benchmark's storage and arithmetic


def _box(lattice: str, shape: Sequence[int], kernel: str = "xla") -> FluidSetup:
    """The benchmark's periodic box (``solver.bench``'s flow) with ``shape`` cells, advanced
    by ``kernel`` ("xla", "native" or "pallas")."""
    setup = build_setup(lattice, PRECISION, "periodic", 2)
    return replace(setup, shape=tuple(shape), kernel=kernel)


def barrier(runtime: Runtime) -> None:
    """Wait for every process, so that the timed sections run at the same time."""
    if runtime.comm is not None:
        runtime.comm.Barrier()
    elif runtime.process_count > 1:
        runtime.broadcast_text("")  # a collective every process must join


def with_placed_time(state: FluidState) -> FluidState:
    """The state with its step counter placed as the chunk returns it (replicated over the
    populations' devices). Left uncommitted, as ``initial_state`` makes it, the sharded chunk
    compiles twice: once for the first call and again for its own output's placement."""
    sharding = state.populations.sharding
    if isinstance(sharding, NamedSharding):
        sharding = NamedSharding(sharding.mesh, PartitionSpec())
    return state.replace(time=jax.device_put(state.time, sharding))


def _timed(run: Callable[[], Any], cpu: list[float] | None = None) -> float:
    """Wall seconds of ``run``; appends to ``cpu`` the share of this process's cores it got
    (process CPU time / (wall time x cores it may use)): below 1, other jobs took cores."""
    start_s, start_cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(run())
    wall = time.perf_counter() - start_s
    if cpu is not None:
        cpu.append((time.process_time() - start_cpu) / (wall * len(os.sched_getaffinity(0))))
    return wall


def mode_shape(mode: str, shards: int, local_size: int, global_size: Sequence[int], d: int):
    """Global grid of a point: weak grows a local_size^d block along x, strong is fixed."""
    if mode == "weak":
        return (shards * local_size,) + (local_size,) * (d - 1)
    return tuple(global_size)


def time_point(
    runtime: Runtime,
    decomposition: Decomposition,
    lattice: str,
    steps: int,
    repeats: int,
    copy_run: Callable[[], float],
    kernel: str = "xla",
    overlap: bool = False,
) -> dict:
    """Time the distributed chunk and its communication-free counterpart on this process.

    Returns this process's record: per-repeat seconds of the distributed chunk
    (``seconds``), of the local blocks (``seconds_local``) and copy bandwidths (bytes/s).
    """
    setup = _box(lattice, decomposition.shape, kernel)
    dist = Distribution(runtime, decomposition, overlap)
    density, velocity = initial_fields(setup)
    state = with_placed_time(
        initial_state(setup, dist.put(density, 0, setup.dtype), dist.put(velocity, 1, setup.dtype))
    )
    geometry = dist.geometry(setup)
    chunk = dist.chunk(setup)
    box = {"dist": state}

    def run_distributed():
        box["dist"] = chunk(box["dist"], geometry, steps)[0]
        return box["dist"]

    runs = {"distributed": run_distributed}
    if dist.backend != "single":  # with one shard the distributed chunk is the local one
        # the same step on this shard's block alone: periodic wrap instead of neighbours
        local_setup = _box(lattice, decomposition.local_shape, kernel)
        step = {"native": make_inplace_chunk, "pallas": make_pallas_chunk}.get(kernel, make_chunk)
        local_chunk = jax.jit(step(local_setup), static_argnums=2, donate_argnums=0)
        local_geometry = make_geometry(local_setup)
        # one block per process; fake devices: all N blocks, run in turn on the same cores
        blocks = decomposition.shards if runtime.process_count == 1 else 1
        box["local"] = [
            initial_state(local_setup, *initial_fields(local_setup)) for _ in range(blocks)
        ]

        def run_local():
            box["local"] = [local_chunk(s, local_geometry, steps)[0] for s in box["local"]]
            return box["local"]

        runs["local"] = run_local
    warmup_s = [_timed(run) for run in runs.values()]  # compile, allocate, page in
    warmup_s += [_timed(run) for run in runs.values()]  # a recompile would show here
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    cpu_share: dict[str, list[float]] = {name: [] for name in runs}
    bandwidths = []
    for r in range(repeats):
        barrier(runtime)
        bandwidths.append(copy_run())
        # alternate the order, so that neither always runs right after the copy's cache flush
        for name in list(runs)[:: 1 if r % 2 == 0 else -1]:
            barrier(runtime)
            seconds[name].append(_timed(runs[name], cpu_share[name]))
    seconds.setdefault("local", seconds["distributed"])
    cpu_share.setdefault("local", cpu_share["distributed"])
    finite = all(bool(jnp.isfinite(s.populations).all()) for s in box.get("local", []))
    if dist.backend == "mpi" or runtime.process_count == 1:
        finite = finite and bool(jnp.isfinite(box["dist"].populations).all())
    if not finite:
        raise FloatingPointError(f"{lattice} {decomposition}: non-finite populations")
    return {
        "backend": dist.backend,
        "processes": runtime.process_count,
        "rank": runtime.process_index,
        "shards": decomposition.shards,
        "mesh": list(decomposition.mesh),
        "global_shape": list(decomposition.shape),
        "local_shape": list(decomposition.local_shape),
        "steps": steps,
        "seconds": seconds["distributed"],
        "seconds_local": seconds["local"],
        "cpu_share": cpu_share["distributed"],
        "cpu_share_local": cpu_share["local"],
        "bandwidths": bandwidths,
        "compile_s": sum(warmup_s[: len(runs)]),
        "warmup_s": warmup_s,
        "cores": sorted(os.sched_getaffinity(0)),
        "device": str(jax.devices()[0]),
    }


def run_worker(args: argparse.Namespace) -> int:
    """Worker: time every mode on the devices and processes it was started with; print one
    ``RESULT {json}`` line per mode and process, and append it to ``--results``/process_<i>.jsonl
    when given."""
    runtime = start(args.halo)
    shards = runtime.device_count()
    d = lattice_by_name(args.lattice).d
    copy_run = measure_copy(PRECISION)
    for mode in args.modes:
        shape = mode_shape(mode, shards, args.local_size, args.global_size, d)
        mesh = (shards,) + (1,) * (d - 1)
        decomposition = choose_mesh(mesh, shape, shards, key=f"{mode} scaling mesh")
        record = time_point(
            runtime,
            decomposition,
            args.lattice,
            args.steps,
            args.repeats,
            copy_run,
            args.kernel,
            args.overlap,
        )
        record.update(mode=mode, halo=args.halo)
        print("RESULT " + json.dumps(record), flush=True)
        if args.results:
            # a file per process: ranks printing at once can interleave on mpirun's stdout
            path = os.path.join(args.results, f"process_{runtime.process_index}.jsonl")
            with open(path, "a") as fh:
                fh.write(json.dumps(record) + "\n")
    runtime.shutdown()
    return 0
