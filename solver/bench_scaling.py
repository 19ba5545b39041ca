"""Weak and strong scaling of the distributed fluid step over MPI processes and fake devices.

    python -m solver.bench scaling [--lattice D3Q19] [--local-size 64] [--global-size 128,64,64]
                                   [--processes 1,2] [--devices 1,2,4,8] [--modes weak,strong]
                                   [--halos mpi,xla] [--steps 40] [--repeats 5] [--json PATH]
                                   [--no-bind]

The parent process plans the runs and starts one worker per point (``python -m
solver.bench_scaling --worker ...``):

- MPI: ``mpirun -n P --bind-to core --map-by core`` (one process per core, one device per
  process), for each halo back end of --halos; the 1-process run is the common baseline.
- fake devices: one process with ``--xla_force_host_platform_device_count=N`` and the xla halo.
  Those N devices share the machine's cores, so their efficiency measures the overhead of the
  decomposition (halo copies, SPMD dispatch), not scaling onto more hardware.

Weak scaling keeps the block of every shard at ``local-size``^d cells and grows the grid along x
(mesh [P, 1, 1]); strong scaling splits the fixed ``global-size`` grid along x. Every worker
times, alternately and after a warm-up call:

- the copy kernel of ``solver.bench.measure_copy`` (the per-process memory roofline:
  bandwidth / (2 q sizeof(float32)) cell updates per second);
- the distributed chunk (``Distribution.chunk``, state donated) of ``steps`` steps;
- the same chunk on the shard's block alone with ``SingleHalo`` (periodic wrap, no
  communication): in every process at once under MPI, the N blocks one after another under fake
  devices (they share the cores either way).

Per point: ms/step (median of the repeats, slowest process), MLUPS, the halo fraction
1 - t_local / t_distributed (clipped at 0) and the parallel efficiency: MLUPS per core used,
relative to the 1-shard run. With one pinned core per process that is t(1)/t(P) for weak and
t(1)/(P t(P)) for strong scaling; for fake devices (fixed cores) it is MLUPS(N)/MLUPS(1).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from kernels.lattices import LATTICES, lattice_by_name
from solver.bench import build_setup, initial_fields, measure_copy
from solver.distributed.decomposition import Decomposition, choose_mesh
from solver.distributed.distribution import Distribution
from solver.distributed.runtime import Runtime, start
from solver.fluid_setup import FluidSetup
from solver.fluid_step import FluidState, initial_state, make_chunk, make_geometry

PRECISION = "float32"
MODES = ("weak", "strong")
HALOS = ("mpi", "xla")
WORKER_TIMEOUT_S = 3600
ROOT = Path(__file__).resolve().parent.parent
DEVICE_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=\S+")
FAKE_NOTE = (
    "fake devices share this machine's cores: their efficiency is MLUPS(N)/MLUPS(1) on the same "
    "cores and measures decomposition overhead, not scaling onto more hardware"
)


# ---------------------------------------------------------------------------------- worker


def _box(lattice: str, shape: Sequence[int]) -> FluidSetup:
    """The benchmark's periodic box (``solver.bench``'s flow) with ``shape`` cells."""
    return replace(build_setup(lattice, PRECISION, "periodic", 2), shape=tuple(shape))


def _barrier(runtime: Runtime) -> None:
    """Wait for every process, so that the timed sections run at the same time."""
    if runtime.comm is not None:
        runtime.comm.Barrier()
    elif runtime.process_count > 1:
        runtime.broadcast_text("")  # a collective every process must join


def _with_placed_time(state: FluidState) -> FluidState:
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
) -> dict:
    """Time the distributed chunk and its communication-free counterpart on this process.

    Returns this process's record: per-repeat seconds of the distributed chunk
    (``seconds``), of the local blocks (``seconds_local``) and copy bandwidths (bytes/s).
    """
    setup = _box(lattice, decomposition.shape)
    dist = Distribution(runtime, decomposition)
    density, velocity = initial_fields(setup)
    state = _with_placed_time(
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
        local_setup = _box(lattice, decomposition.local_shape)
        local_chunk = jax.jit(make_chunk(local_setup), static_argnums=2, donate_argnums=0)
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
        _barrier(runtime)
        bandwidths.append(copy_run())
        # alternate the order, so that neither always runs right after the copy's cache flush
        for name in list(runs)[:: 1 if r % 2 == 0 else -1]:
            _barrier(runtime)
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
    ``RESULT {json}`` line per mode and process."""
    runtime = start(args.halo)
    shards = runtime.device_count()
    d = lattice_by_name(args.lattice).d
    copy_run = measure_copy(PRECISION)
    for mode in args.modes:
        shape = mode_shape(mode, shards, args.local_size, args.global_size, d)
        mesh = (shards,) + (1,) * (d - 1)
        decomposition = choose_mesh(mesh, shape, shards, key=f"{mode} scaling mesh")
        record = time_point(
            runtime, decomposition, args.lattice, args.steps, args.repeats, copy_run
        )
        record.update(mode=mode, halo=args.halo)
        print("RESULT " + json.dumps(record), flush=True)
    if runtime.comm is None and runtime.process_count > 1:
        jax.distributed.shutdown()
    return 0


# ---------------------------------------------------------------------------------- parent


@dataclass(frozen=True)
class ScalingRow:
    """One point of the table. Times are the median over repeats of the slowest process.

    Attributes:
        launch: "mpirun" or "fake" (fake CPU devices in one process).
        backend: "single" (one shard), "mpi" or "xla".
        shards: devices in the mesh (= processes under mpirun).
        cores: CPU cores the run's processes may use (union of their affinities).
        ms_per_step: distributed chunk, milliseconds per step.
        ms_per_step_local: the shards' blocks without communication, milliseconds per step.
        mlups: million cell updates per second, whole grid.
        roofline_mlups_per_process: copy bandwidth / (2 q 4 B) per process, measured alongside.
        halo_fraction: 1 - ms_per_step_local / ms_per_step, clipped at 0.
        cpu_share_local: CPU time / (wall time x cores) of the communication-free runs, lowest
            process: 1 when the run had its cores to itself, less when other jobs took them.
        efficiency: MLUPS per core relative to the 1-shard row of the same group (None without).
        efficiency_without_halo: the same from the communication-free times.
    """

    mode: str
    launch: str
    halo: str
    backend: str
    processes: int
    shards: int
    cores: int
    bind: str
    mesh: tuple[int, ...]
    global_shape: tuple[int, ...]
    local_shape: tuple[int, ...]
    steps: int
    ms_per_step: float
    ms_per_step_local: float
    mlups: float
    mlups_per_process: float
    bandwidth_gbs_per_process: float
    roofline_mlups_per_process: float
    fraction_of_roofline: float
    halo_fraction: float
    cpu_share_local: float
    efficiency: float | None
    efficiency_without_halo: float | None
    compile_s: float


def combine(records: list[dict], launch: str, bind: str, q: int) -> ScalingRow:
    """One row from the records of every process of one point."""
    first = records[0]
    steps = first["steps"]
    ms = max(statistics.median(r["seconds"]) for r in records) / steps * 1e3
    ms_local = max(statistics.median(r["seconds_local"]) for r in records) / steps * 1e3
    bandwidth = statistics.median(statistics.median(r["bandwidths"]) for r in records)
    cells = math.prod(first["global_shape"])
    mlups = cells / (ms * 1e-3) / 1e6
    processes = first["processes"]
    roofline = bandwidth / (2 * q * jnp.dtype(PRECISION).itemsize) / 1e6
    return ScalingRow(
        mode=first["mode"],
        launch=launch,
        halo=first["halo"] if first["backend"] != "single" else "-",
        backend=first["backend"],
        processes=processes,
        shards=first["shards"],
        cores=len({c for r in records for c in r["cores"]}),
        bind=bind,
        mesh=tuple(first["mesh"]),
        global_shape=tuple(first["global_shape"]),
        local_shape=tuple(first["local_shape"]),
        steps=steps,
        ms_per_step=ms,
        ms_per_step_local=ms_local,
        mlups=mlups,
        mlups_per_process=mlups / processes,
        bandwidth_gbs_per_process=bandwidth / 1e9,
        roofline_mlups_per_process=roofline,
        fraction_of_roofline=mlups / processes / roofline,
        halo_fraction=max(0.0, 1.0 - ms_local / ms),
        cpu_share_local=min(statistics.median(r["cpu_share_local"]) for r in records),
        efficiency=None,
        efficiency_without_halo=None,
        compile_s=max(r["compile_s"] for r in records),
    )


def with_efficiencies(rows: list[ScalingRow], halos: Sequence[str]) -> list[ScalingRow]:
    """Fill in the efficiencies against the 1-shard row of the same mode and launch (the
    1-process MPI row is the baseline of every halo back end)."""
    out = []
    for row in rows:
        base = next(
            (b for b in rows if (b.mode, b.launch, b.shards) == (row.mode, row.launch, 1)), None
        )
        if base is None:
            out.append(row)
            continue
        cells = math.prod(row.global_shape) / math.prod(base.global_shape)
        per_core = base.cores / row.cores

        def eff(t_base: float, t_row: float, cells=cells, per_core=per_core) -> float:
            return cells * t_base / t_row * per_core

        out.append(
            replace(
                row,
                efficiency=eff(base.ms_per_step, row.ms_per_step),
                efficiency_without_halo=eff(base.ms_per_step_local, row.ms_per_step_local),
            )
        )
    order = {h: i for i, h in enumerate(("-", *halos))}
    return sorted(out, key=lambda r: (r.launch != "mpirun", r.mode, order[r.halo], r.shards))


def format_table(rows: list[ScalingRow]) -> str:
    """Fixed-width text table of the rows."""
    head = (
        f"{'mode':6} {'launch':6} {'backend':7} {'P':>2} {'dev':>3} {'cores':>5} {'mesh':>7} "
        f"{'global':>11} {'local':>10} {'ms/step':>8} {'local ms':>8} {'MLUPS':>7} "
        f"{'MLUPS/p':>7} {'roof/p':>6} {'of roof':>7} {'halo %':>6} {'cpu %':>6} {'eff':>6} "
        f"{'eff0':>6}"
    )
    lines = [head, "-" * len(head)]

    def shape(s: Sequence[int]) -> str:
        return "x".join(str(n) for n in s)

    def pct(x: float | None) -> str:
        return "     -" if x is None else f"{100 * x:5.1f}%"

    for r in rows:
        lines.append(
            f"{r.mode:6} {r.launch:6} {r.backend:7} {r.processes:2d} {r.shards:3d} {r.cores:5d} "
            f"{shape(r.mesh):>7} {shape(r.global_shape):>11} {shape(r.local_shape):>10} "
            f"{r.ms_per_step:8.2f} {r.ms_per_step_local:8.2f} {r.mlups:7.1f} "
            f"{r.mlups_per_process:7.1f} {r.roofline_mlups_per_process:6.0f} "
            f"{pct(r.fraction_of_roofline)} {pct(r.halo_fraction)} {pct(r.cpu_share_local)} "
            f"{pct(r.efficiency)} "
            f"{pct(r.efficiency_without_halo)}"
        )
    return "\n".join(lines)


def _has_gpu_plugin() -> bool:
    return any(
        importlib.util.find_spec(name) is not None
        for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin")
    )


def _child_env(fake_devices: int | None) -> dict[str, str]:
    """The environment of a worker: fake CPU devices, or one device per MPI process."""
    env = dict(os.environ)
    flags = DEVICE_COUNT_FLAG.sub("", env.get("XLA_FLAGS", "")).split()
    if fake_devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={fake_devices}")
        env["JAX_PLATFORMS"] = "cpu"
    elif env.get("JAX_PLATFORMS", "").strip() == "cpu" or not _has_gpu_plugin():
        env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = " ".join(flags)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _worker_args(args: argparse.Namespace, halo: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "solver.bench_scaling",
        "--worker",
        "--halo",
        halo,
        "--lattice",
        args.lattice,
        "--local-size",
        str(args.local_size),
        "--global-size",
        ",".join(str(n) for n in args.global_size),
        "--modes",
        ",".join(args.modes),
        "--steps",
        str(args.steps),
        "--repeats",
        str(args.repeats),
    ]


def mpi_binding(processes: int, cores: int, no_bind: bool) -> tuple[list[str], str]:
    """mpirun options placing the processes, and how to describe them."""
    if no_bind:
        return ["--bind-to", "none"], "none"
    if processes <= cores:
        return ["--bind-to", "core", "--map-by", "core"], "core"
    return ["--oversubscribe", "--bind-to", "none"], "none (oversubscribed)"


@dataclass(frozen=True)
class Launch:
    """One worker to start: its command, environment and how its processes are placed."""

    kind: str
    command: list[str]
    env: dict[str, str]
    bind: str
    label: str


def plan(args: argparse.Namespace, notes: list[str]) -> list[Launch]:
    """Every worker to start; reasons for skipped ones go to ``notes``."""
    launches = []
    cores = len(os.sched_getaffinity(0))
    mpirun = shutil.which("mpirun")
    halos = list(args.halos)
    if args.processes and mpirun is None:
        notes.append("mpirun not found: MPI rows skipped (install Open MPI to measure them)")
    if args.processes and "mpi" in halos and importlib.util.find_spec("mpi4jax") is None:
        notes.append("mpi4jax not importable: the mpi halo rows are skipped")
        halos.remove("mpi")
    if mpirun is not None and halos:
        for p in args.processes:
            bind_args, bind = mpi_binding(p, cores, args.no_bind)
            if p > cores and not args.no_bind:
                notes.append(
                    f"{p} processes on {cores} cores: oversubscribed, --bind-to none "
                    "(cores are shared, so the efficiency is not one of more hardware)"
                )
            # one process runs the same single-device program whatever the halo: run it once
            for halo in halos[:1] if p == 1 else halos:
                command = [mpirun, "-n", str(p), *bind_args, *_worker_args(args, halo)]
                label = f"mpirun -n {p} ({halo} halo, bind {bind})"
                launches.append(Launch("mpirun", command, _child_env(None), bind, label))
    if args.devices:
        notes.append(FAKE_NOTE)
    for n in args.devices:
        command = _worker_args(args, "xla")
        launches.append(Launch("fake", command, _child_env(n), "none", f"{n} fake devices"))
    return launches


def _check_sizes(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Fail before any worker starts if a strong-scaling split does not divide the grid."""
    d = lattice_by_name(args.lattice).d
    if len(args.global_size) != d:
        parser.error(f"--global-size {args.global_size} needs {d} sizes for {args.lattice}")
    if "strong" in args.modes:
        for n in sorted(set(args.processes) | set(args.devices)):
            try:
                choose_mesh((n,) + (1,) * (d - 1), args.global_size, n, key="--global-size")
            except ValueError as err:
                parser.error(f"strong scaling over {n} shards: {err}")


def run_parent(args: argparse.Namespace) -> int:
    lat = lattice_by_name(args.lattice)
    notes: list[str] = []
    launches = plan(args, notes)
    load_before = os.getloadavg()
    print(
        f"scaling of {lat.name} {PRECISION}: weak {args.local_size}^{lat.d} cells per shard "
        f"(grid grows along x), strong {'x'.join(map(str, args.global_size))}; "
        f"{args.steps} steps per chunk, median of {args.repeats}; {os.cpu_count()} cores, "
        f"jax {jax.__version__}; load average {load_before[0]:.2f}",
        flush=True,
    )
    for note in notes:
        print(f"note: {note}", flush=True)
    rows: list[ScalingRow] = []
    failures = 0
    with tempfile.TemporaryDirectory(prefix="lb-scaling-cache-") as cache:
        for launch in launches:
            env = dict(launch.env)
            # workers share compiled programs (the same block appears in several points);
            # a cache the caller set up is used instead of the temporary one
            env.setdefault("JAX_COMPILATION_CACHE_DIR", cache)
            env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
            print(f"running: {launch.label}", flush=True)
            done = subprocess.run(
                launch.command,
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=WORKER_TIMEOUT_S,
            )
            records = [
                json.loads(line[len("RESULT ") :])
                for line in done.stdout.splitlines()
                if line.startswith("RESULT ")
            ]
            if done.returncode != 0 or not records:
                failures += 1
                tail = (done.stderr or done.stdout)[-3000:]
                print(f"FAILED (exit {done.returncode}):\n{tail}", file=sys.stderr, flush=True)
                continue
            for mode in args.modes:
                mine = [r for r in records if r["mode"] == mode]
                if mine:
                    rows.append(combine(mine, launch.kind, launch.bind, lat.q))
    rows = with_efficiencies(rows, args.halos)
    load_after = os.getloadavg()
    print()
    print(format_table(rows))
    print(
        "ms/step: distributed chunk; local ms: the same blocks with no communication; "
        "MLUPS/p, roof/p: per process (roof = copy bandwidth / (2 q 4 B), measured alongside); "
        "halo % = 1 - local/distributed; cpu %: share of its cores the local run got (below "
        "100%: other jobs); eff: MLUPS per core relative to 1 shard (ceiling 100%); eff0: the "
        "same without communication (what is left is the sharing of memory bandwidth and "
        f"caches, or of the cores with other jobs). Load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after."
    )
    for note in notes:
        print(f"note: {note}")
    if args.json:
        payload = {
            "lattice": lat.name,
            "precision": PRECISION,
            "steps": args.steps,
            "repeats": args.repeats,
            "cpu_count": os.cpu_count(),
            "jax": jax.__version__,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "notes": notes,
            "rows": [asdict(r) for r in rows],
        }
        with open(args.json, "w") as fh:
            json.dump(payload, fh, indent=2)
        print(f"results written to {args.json}")
    return 1 if failures else 0


# ---------------------------------------------------------------------------------- command


def _counts(text: str) -> list[int]:
    """Comma-separated non-negative integers; 0 and empty entries mean none."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}") from err
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"counts must be >= 0, got {text!r}")
    return sorted({v for v in values if v > 0})


def _choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        values = [t.strip() for t in text.split(",") if t.strip()]
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"{text!r}: allowed {', '.join(allowed)}")
        return values

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m solver.bench scaling",
        description="Weak and strong scaling of the distributed fluid step (MPI processes and "
        "fake CPU devices): ms/step, halo fraction, parallel efficiency.",
    )
    parser.add_argument("--lattice", default="D3Q19", help=f"one of {', '.join(LATTICES)}")
    parser.add_argument("--local-size", type=int, default=64, help="weak: cells per shard edge")
    parser.add_argument(
        "--global-size",
        type=lambda t: tuple(int(n) for n in t.split(",")),
        default=(128, 64, 64),
        help="strong: the fixed grid, split along x (default 128,64,64)",
    )
    parser.add_argument("--processes", type=_counts, default=[1, 2], help="MPI ranks (0: none)")
    parser.add_argument(
        "--devices", type=_counts, default=[1, 2, 4, 8], help="fake CPU devices (0: none)"
    )
    parser.add_argument("--modes", type=_choices(MODES), default=list(MODES))
    parser.add_argument("--halos", type=_choices(HALOS), default=list(HALOS), help="MPI runs")
    parser.add_argument("--steps", type=int, default=40, help="steps per timed chunk")
    parser.add_argument("--repeats", type=int, default=5, help="timed chunks per point (median)")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write results here")
    parser.add_argument("--no-bind", action="store_true", help="do not pin MPI processes to cores")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--halo", choices=HALOS, default="xla", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.lattice.upper() not in LATTICES:
        parser.error(f"--lattice: unknown {args.lattice!r}; allowed: {', '.join(LATTICES)}")
    args.lattice = lattice_by_name(args.lattice).name
    if args.steps < 1 or args.repeats < 1 or args.local_size < 2:
        parser.error(
            f"--steps ({args.steps}), --repeats ({args.repeats}) must be >= 1 and "
            f"--local-size ({args.local_size}) >= 2"
        )
    if not args.worker:
        _check_sizes(args, parser)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_worker(args) if args.worker else run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
