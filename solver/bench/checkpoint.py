"""Cost of checkpoints to a running simulation, and checkpoint write and restore throughput.

    python -m solver.bench checkpoint [--lattice D3Q19] [--shape 128 128 128]
                                      [--precision float32] [--chunk 20] [--chunks 30]
                                      [--every 10] [--dir DIR] [--repeat 3] [--json]

The fluid chunk of ``solver.bench`` (periodic box, shear wave, plus noise so that the
checkpoints do not compress away: see ``noisy_fields``) runs on one device through a
``Distribution`` (backend "single"), compiled and warmed up first, as is one save and restore.
Each mode then times ``chunks`` chunks of ``chunk`` steps, the state made ready after every
chunk as the run loop's health check does:

- ``none``: no checkpoints (``checkpoint.enabled=false``);
- ``async``: ``RunCheckpoints`` with ``async_save=true``, ``keep=2``, 1 GiB data files: the run
  loop's own checkpoint calls (``after_chunk`` between chunks: poll the pending save, then save
  when due, with the content digest and metadata the run stores), a save every ``every``
  chunks, the first one before the first timed chunk, so that each save has ``every`` chunks
  to finish in the background;
- ``blocking``: the same with ``async_save=false``.

A mode's wall time ends after ``finish`` (the wait for the last save), so work an asynchronous
save leaves behind is counted. The three modes run interleaved ``repeat`` times (the order
rotates each time) and every figure is the median over the repeats, so that load from other
processes on this small machine shows in all modes alike. Each mode and repeat writes into its
own subdirectory, removed after its restore is timed.

Reported per mode: MLUPS (million cell updates per second over the whole mode), the drop of the
step rate relative to ``none`` in %, saves, bytes per checkpoint (its manifest), the mean time
the run waited per save (``SaveRecord.blocking_s``), the write throughput of blocking saves
(bytes / ``SaveRecord.total_s``, GB/s = 1e9 B/s) and the restore throughput (``restore`` of the
last checkpoint into abstract targets with this run's sharding, bytes / seconds; the restored
state is checked against the digest saved with it).

Ceilings, measured on the spot in the same directory with the same number of bytes: the
sequential write bandwidth (NumPy ``tofile`` + ``fsync``) and the read bandwidth (``fromfile``
of the file just written: that read, like the restore of a checkpoint just written, may come
from the page cache, not from the device).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import jax
import jax.numpy as jnp
import numpy as np

from kernels.lattices import LATTICES, lattice_by_name
from solver.bench.fluid import PRECISIONS, build_setup, initial_fields
from solver.checkpoint.config import CheckpointConfig
from solver.checkpoint.digest import state_digest
from solver.checkpoint.session import RunCheckpoints
from solver.checkpoint.store import CheckpointStore
from solver.distributed.distribution import Distribution, distribute
from solver.distributed.runtime import start
from solver.fluid.setup import FluidSetup
from solver.fluid.step import FluidState, initial_state

MODES = ("none", "async", "blocking")
KEEP = 2  # newest checkpoints kept, as a run would
FILE_SIZE = 1 << 30  # bytes per Orbax data file (checkpoint.file_size default)
TARGET_DROP_PCT = 5.0  # the issue's limit on the step-rate drop from asynchronous saves
IDENTITY_CASE = "bench-checkpoint"
BUSY_CPU_SHARE = 0.8  # 128^3 alone keeps ~0.9 of 2 cores busy; a "none" run below: competition
NOISE = 0.01  # amplitude of the random part of the initial density and velocity, lattice units


@dataclasses.dataclass(frozen=True)
class ModeRun:
    """One timed run of one mode.

    Attributes:
        wall_s: seconds from the first chunk to the end of the last save, s.
        mlups: million cell updates per second over ``wall_s``.
        cpu_share: this process's CPU seconds / (``wall_s`` x the cores it may use); well
            below 1 in mode "none" means that other jobs took cores.
        saves: checkpoints saved.
        bytes: bytes per checkpoint (its manifest; 0 without saves).
        blocking_s: per save, seconds the run waited in ``save``.
        total_s: per save, seconds from its start until it was seen complete (for an
            asynchronous save, at the next chunk boundary after it ended).
        restore_s: seconds to restore the last checkpoint (None without saves).
    """

    wall_s: float
    mlups: float
    cpu_share: float
    saves: int
    bytes: int
    blocking_s: list[float]
    total_s: list[float]
    restore_s: float | None


# ---------------------------------------------------------------------------------- set-up


def build(args: argparse.Namespace) -> tuple[FluidSetup, Distribution, Callable, FluidState]:
    """The benchmark box on one device: (setup, distribution, advance(state) -> state, state).

    ``advance`` runs one compiled chunk of ``args.chunk`` steps (state donated) and waits for
    its result, as the run loop's health check does. It has run twice before this returns
    (compile, then page in); the state is the one after those runs.
    """
    setup = dataclasses.replace(
        build_setup(args.lattice, args.precision, "periodic", 2), shape=tuple(args.shape)
    )
    dist = distribute(start("xla"), "single", setup.shape)
    density, velocity = noisy_fields(setup)
    state = initial_state(
        setup, dist.put(density, 0, setup.dtype), dist.put(velocity, 1, setup.dtype)
    )
    state = state.replace(time=dist.replicate(state.time))
    geometry = dist.geometry(setup)
    chunk = dist.chunk(setup)

    def advance(s: FluidState) -> FluidState:
        return jax.block_until_ready(chunk(s, geometry, args.chunk)[0])

    state = advance(advance(state))
    return setup, dist, advance, state


def noisy_fields(setup: FluidSetup) -> tuple[np.ndarray, np.ndarray]:
    """``solver.bench``'s density and shear wave, lattice units, plus uniform noise of
    +-``NOISE`` in every cell (seeded).

    With ``checkpoint.compress=true`` Orbax compresses checkpoints (zstd): the smooth wave
    alone, the same along x and z, shrank about 900-fold (22 kB for a 64^3 D3Q19 state of
    20 MB), so its checkpoints would measure almost no writing. With the noise the low mantissa
    bits differ from cell to cell, as in a developed flow, and zstd saves about a quarter. The
    default (no compression) writes the state as it is; the report gives both sizes."""
    density, velocity = initial_fields(setup)
    rng = np.random.default_rng(0)
    density = density + NOISE * rng.uniform(-1.0, 1.0, density.shape)
    velocity = velocity + NOISE * rng.uniform(-1.0, 1.0, velocity.shape)
    return density, velocity


def checkpoint_config(mode: str, directory: Path, every_steps: int) -> CheckpointConfig:
    """The ``checkpoint`` section of a run in ``mode`` writing into ``directory``."""
    if mode == "none":
        return CheckpointConfig.disabled()
    return CheckpointConfig(
        enabled=True,
        every_steps=every_steps,
        every_minutes=None,
        keep=KEEP,
        dir=str(directory),
        async_save=mode == "async",
        resume="never",
        final=False,
        stripe_count=None,
        stripe_size=None,
        file_size=FILE_SIZE,
    )


def _extras(step: int) -> Callable[[], tuple[dict, dict]]:
    """Host arrays and metadata of a save at ``step``, as the run loop hands them over."""
    return lambda: ({"step": np.asarray([step], dtype=np.int64)}, {"time_s": float(step)})


# ---------------------------------------------------------------------------------- timing


def run_mode(
    mode: str,
    directory: Path,
    args: argparse.Namespace,
    setup: FluidSetup,
    dist: Distribution,
    advance: Callable[[FluidState], FluidState],
    state: FluidState,
) -> tuple[FluidState, ModeRun]:
    """Time ``args.chunks`` chunks in ``mode``; returns the advanced state and the run.

    Checkpoint steps count from the start of this mode (0, every x chunk, ...); the run is
    taken to go on after the timed window, so the last chunk triggers no final save.
    """
    every_steps = args.every * args.chunk
    total = (args.chunks + 1) * args.chunk
    identity = {
        "case": IDENTITY_CASE,
        "lattice": setup.lattice.name,
        "shape": list(setup.shape),
        "precision": setup.dtype,
    }
    checkpoints = RunCheckpoints(
        checkpoint_config(mode, directory, every_steps), directory, dist, identity, {}
    )
    done = 0
    start_s, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(args.chunks):
        checkpoints.after_chunk(done, total, state, _extras(done), False)
        state = advance(state)
        done += args.chunk
    checkpoints.finish(done, state, _extras(done))
    wall_s = time.perf_counter() - start_s
    cpu_share = (time.process_time() - start_cpu) / (wall_s * len(os.sched_getaffinity(0)))
    records = checkpoints.store.records if checkpoints.store is not None else []
    restore_s = None
    if records:
        restore_s = time_restore(directory, records[-1].step, dist, state)
    return state, ModeRun(
        wall_s=wall_s,
        mlups=setup.cells * done / wall_s / 1e6,
        cpu_share=cpu_share,
        saves=len(records),
        bytes=records[-1].bytes if records else 0,
        blocking_s=[r.blocking_s for r in records],
        total_s=[r.total_s for r in records],
        restore_s=restore_s,
    )


def time_restore(directory: Path, step: int, dist: Distribution, template: FluidState) -> float:
    """Seconds to restore ``step`` onto this run's layout (state made ready, host arrays
    read). Raises ``RuntimeError`` when the restored state does not match the digest saved
    with it."""
    store = CheckpointStore(directory, KEEP, False, FILE_SIZE, dist.is_root)
    targets = dist.restore_targets(template)
    start_s = time.perf_counter()
    state, _ = store.restore(step, targets)
    jax.block_until_ready(state)
    seconds = time.perf_counter() - start_s
    leaves = jax.tree.leaves(state)
    digest = state_digest(state, [(0,) * x.ndim for x in leaves], [x.shape for x in leaves])
    saved = store.read_meta(step).get("digest")
    if [d % (1 << 32) for d in digest] != saved:
        raise RuntimeError(f"checkpoint {directory / str(step)}: restored state != saved digest")
    store.manager.close()
    return seconds


def measure_ceilings(directory: Path, data: np.ndarray) -> tuple[float, float]:
    """(write, read) seconds for ``data`` in one file in ``directory``: NumPy ``tofile`` then
    ``fsync``; ``fromfile`` right after (possibly served from the page cache)."""
    path = directory / "ceiling.bin"
    start_s = time.perf_counter()
    with open(path, "wb") as fh:
        data.tofile(fh)
        fh.flush()
        os.fsync(fh.fileno())
    write_s = time.perf_counter() - start_s
    start_s = time.perf_counter()
    back = np.fromfile(path, dtype=data.dtype)
    read_s = time.perf_counter() - start_s
    path.unlink()
    if back.size != data.size:
        raise OSError(f"{path}: read {back.size} bytes back, wrote {data.size}")
    return write_s, read_s


# ---------------------------------------------------------------------------------- report


def summarize(
    runs: dict[str, list[ModeRun]], ceilings: list[tuple[float, float]], args, setup
) -> dict:
    """Medians over the repeats, per mode and for the ceilings; the verdict on the target."""
    nbytes = max(r.bytes for rs in runs.values() for r in rs)
    state_bytes = setup.lattice.q * setup.cells * np.dtype(setup.dtype).itemsize
    write_ceiling = statistics.median(nbytes / w for w, _ in ceilings) / 1e9
    read_ceiling = statistics.median(nbytes / r for _, r in ceilings) / 1e9
    base = statistics.median(r.mlups for r in runs["none"])
    modes = {}
    for mode, rs in runs.items():
        mlups = statistics.median(r.mlups for r in rs)
        blocking = [b for r in rs for b in r.blocking_s]
        totals = [t for r in rs for t in r.total_s]
        restores = [r.bytes / r.restore_s / 1e9 for r in rs if r.restore_s]
        write = None
        if mode == "blocking" and totals:
            write = statistics.median(r.bytes / t / 1e9 for r in rs for t in r.total_s)
        restore = statistics.median(restores) if restores else None
        modes[mode] = {
            "mlups": mlups,
            "mlups_runs": [r.mlups for r in rs],
            "wall_s_runs": [r.wall_s for r in rs],
            "drop_pct": 100.0 * (1.0 - mlups / base),
            "drop_pct_paired": statistics.median(
                100.0 * (1.0 - r.mlups / b.mlups) for r, b in zip(rs, runs["none"], strict=True)
            ),
            "cpu_share": statistics.median(r.cpu_share for r in rs),
            "cpu_share_runs": [r.cpu_share for r in rs],
            "saves": statistics.median(r.saves for r in rs),
            "bytes_per_checkpoint": max(r.bytes for r in rs),
            "blocking_s_mean": statistics.fmean(blocking) if blocking else None,
            "save_total_s_mean": statistics.fmean(totals) if totals else None,
            "write_gbs": write,
            "write_of_ceiling": write / write_ceiling if write else None,
            "restore_s": statistics.median(r.restore_s for r in rs) if restores else None,
            "restore_gbs": restore,
            "restore_of_ceiling": restore / read_ceiling if restore else None,
        }
    every_steps = args.every * args.chunk
    seconds_between = setup.cells * every_steps / (modes["async"]["mlups"] * 1e6)
    drop = modes["async"]["drop_pct_paired"]
    return {
        "lattice": setup.lattice.name,
        "shape": list(setup.shape),
        "precision": setup.dtype,
        "cells": setup.cells,
        "state_bytes": state_bytes,
        "checkpoint_bytes": nbytes,
        "chunk": args.chunk,
        "chunks": args.chunks,
        "every_chunks": args.every,
        "repeat": args.repeat,
        "modes": modes,
        "ceilings": {
            "bytes": nbytes,
            "write_gbs": write_ceiling,
            "read_gbs": read_ceiling,
            "write_s_runs": [w for w, _ in ceilings],
            "read_s_runs": [r for _, r in ceilings],
            "write_method": "numpy tofile + fsync, one file, same directory",
            "read_method": "numpy fromfile of the file just written (may be the page cache)",
        },
        "verdict": {
            "target_drop_pct": TARGET_DROP_PCT,
            "async_drop_pct": drop,
            "basis": "median over repeats of the drop against the none run of the same repeat",
            "met": drop <= TARGET_DROP_PCT,
            "save_every_steps": every_steps,
            "seconds_between_saves": seconds_between,
        },
    }


def _fmt(value: float | None, spec: str, width: int) -> str:
    """``value`` formatted to ``width`` characters, or a right-aligned "-" for None."""
    return f"{'-':>{width}}" if value is None else f"{value:{width}{spec}}"


def _pct(percent: float | None, spec: str, width: int) -> str:
    """A percentage of ``width`` characters with its sign, or a right-aligned "-"."""
    return f"{'-':>{width}}" if percent is None else _fmt(percent, spec, width - 1) + "%"


def format_report(summary: dict) -> str:
    """The table, the ceilings line and the verdict line."""
    head = (
        f"{'mode':8} {'MLUPS':>7} {'drop':>7} {'paired':>7} {'cpu':>5} {'saves':>5} "
        f"{'MB/ckpt':>8} {'wait s/save':>11} {'write GB/s':>10} {'of ceil':>7} "
        f"{'restore GB/s':>12} {'of ceil':>7}"
    )
    lines = [head, "-" * len(head)]
    for mode, m in summary["modes"].items():
        write_pct, restore_pct = (
            None if m[k] is None else 100 * m[k] for k in ("write_of_ceiling", "restore_of_ceiling")
        )
        drop, paired = (None, None) if mode == "none" else (m["drop_pct"], m["drop_pct_paired"])
        mb = m["bytes_per_checkpoint"] / 1e6 if m["bytes_per_checkpoint"] else None
        lines.append(
            f"{mode:8} {m['mlups']:7.2f} {_pct(drop, '.1f', 7)} {_pct(paired, '.1f', 7)} "
            f"{_pct(100 * m['cpu_share'], '.0f', 5)} {m['saves']:5.0f} "
            f"{_fmt(mb, '.1f', 8)} {_fmt(m['blocking_s_mean'], '.3f', 11)} "
            f"{_fmt(m['write_gbs'], '.3f', 10)} {_pct(write_pct, '.0f', 7)} "
            f"{_fmt(m['restore_gbs'], '.3f', 12)} {_pct(restore_pct, '.0f', 7)}"
        )
    c, v = summary["ceilings"], summary["verdict"]
    lines.append(
        f"a checkpoint holds {summary['checkpoint_bytes'] / 1e6:.1f} MB for "
        f"{summary['state_bytes'] / 1e6:.1f} MB of populations (checkpoint.compress=false)"
    )
    lines.append(
        f"ceilings for {c['bytes'] / 1e6:.1f} MB in the same directory: write {c['write_gbs']:.3f} "
        f"GB/s (numpy tofile + fsync), read {c['read_gbs']:.3f} GB/s (fromfile right after the "
        "write: may come from the page cache, as may the restore of a checkpoint just written)"
    )
    lines.append(
        "MLUPS over the whole mode incl. the wait for the last save; drop = step-rate loss vs "
        "none from the medians, paired = median of the drops against the none run of the same "
        "repeat; cpu = process CPU time / (wall x cores); wait = time the run spent in save(); "
        f"write GB/s = bytes / save time (blocking only); medians of {summary['repeat']} "
        "interleaved repeats; GB = 1e9 B"
    )
    lines.append(
        f"verdict: async saves {'MEET' if v['met'] else 'MISS'} the {v['target_drop_pct']:.0f}% "
        f"target: step rate {v['async_drop_pct']:.1f}% lower (paired) with one save every "
        f"{v['save_every_steps']} steps ({summary['every_chunks']} chunks of "
        f"{summary['chunk']}), i.e. about every {v['seconds_between_saves']:.1f} s of this run"
    )
    busy = min(summary["modes"]["none"]["cpu_share_runs"])
    if busy < BUSY_CPU_SHARE:
        lines.append(
            f"note: a run without saves kept only {100 * busy:.0f}% of its cores busy: other "
            "jobs may have taken cores (or the grid is too small to fill them); the figures "
            "are noisy, compare the paired drops"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- command


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m solver.bench checkpoint",
        description="Step-rate cost of asynchronous and blocking checkpoint saves, and "
        "checkpoint write/restore throughput against the filesystem's bandwidth.",
    )
    parser.add_argument("--lattice", default="D3Q19", help=f"one of {', '.join(LATTICES)}")
    parser.add_argument(
        "--shape", type=int, nargs="+", default=[128, 128, 128], help="cells per axis"
    )
    parser.add_argument("--precision", choices=PRECISIONS, default="float32")
    parser.add_argument("--chunk", type=int, default=20, help="steps per compiled chunk")
    parser.add_argument("--chunks", type=int, default=30, help="chunks timed per mode")
    parser.add_argument("--every", type=int, default=10, help="save every N chunks")
    parser.add_argument(
        "--dir",
        default=None,
        help="where to write (the filesystem measured); a fresh folder is made inside it and "
        "removed at the end (default: the system temp dir)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs per mode (median)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    if args.lattice.upper() not in LATTICES:
        parser.error(f"--lattice: unknown {args.lattice!r}; allowed: {', '.join(LATTICES)}")
    args.lattice = lattice_by_name(args.lattice).name
    d = lattice_by_name(args.lattice).d
    if len(args.shape) != d or any(n < 2 for n in args.shape):
        parser.error(f"--shape {args.shape}: {args.lattice} needs {d} sizes, each >= 2")
    for name in ("chunk", "chunks", "every", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} ({getattr(args, name)}) must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: TextIO = sys.stderr if args.json else sys.stdout
    # 64-bit JAX only for float64: NumPy float64 constants would promote a float32 step
    jax.config.update("jax_enable_x64", args.precision == "float64")
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="lb-bench-checkpoint-", dir=args.dir)).absolute()
    try:
        setup, dist, advance, state = build(args)
        # one untimed save and restore: compiles the digest and starts Orbax's machinery
        state, _ = run_mode("async", root / "warm-up", _one_save(args), setup, dist, advance, state)
        shutil.rmtree(root / "warm-up")
        print(
            f"checkpoint cost of {setup.lattice.name} {setup.dtype} "
            f"{'x'.join(map(str, setup.shape))} on {jax.devices()[0]}: {args.chunks} chunks of "
            f"{args.chunk} steps per mode, a save every {args.every} chunks, {args.repeat} "
            f"repeat(s); {os.cpu_count()} cores, load average {load_before[0]:.2f}; in {root}",
            file=out,
            flush=True,
        )
        runs: dict[str, list[ModeRun]] = {mode: [] for mode in MODES}
        ceilings = []
        data = None
        for r in range(args.repeat):
            for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
                directory = root / f"repeat{r}-{mode}"
                state, run = run_mode(mode, directory, args, setup, dist, advance, state)
                if directory.exists():  # mode "none" writes nothing
                    shutil.rmtree(directory)
                runs[mode].append(run)
                print(
                    f"repeat {r + 1}: {mode:8} {run.mlups:8.2f} MLUPS, {run.saves} saves, "
                    f"{run.wall_s:.2f} s, cpu share {100 * run.cpu_share:.0f}%",
                    file=out,
                    flush=True,
                )
            if data is None:
                nbytes = max(x.bytes for x in runs["blocking"] + runs["async"])
                data = np.frombuffer(np.random.default_rng(0).bytes(nbytes), dtype=np.uint8)
            ceilings.append(measure_ceilings(root, data))
        if not bool(jnp.isfinite(state.populations).all()):
            raise FloatingPointError(f"{setup.lattice.name} {setup.shape}: non-finite state")
        summary = summarize(runs, ceilings, args, setup)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    summary.update(
        dir=str(root),
        dir_removed=not root.exists(),
        device=str(jax.devices()[0]),
        cpu_count=os.cpu_count(),
        jax=jax.__version__,
        load_average_before=list(load_before),
        load_average_after=list(load_after),
    )
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print()
        print(format_report(summary))
        print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    return 0


def _one_save(args: argparse.Namespace) -> argparse.Namespace:
    """Settings of the warm-up: one chunk with one save."""
    return argparse.Namespace(**{**vars(args), "chunks": 1, "every": 1})


if __name__ == "__main__":
    sys.exit(main())
