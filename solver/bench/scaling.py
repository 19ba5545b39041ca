"""Weak and strong scaling of the distributed fluid step over MPI processes and fake devices.

    python -m solver.bench scaling [--lattice D3Q19] [--local-size 64] [--global-size 128,64,64]
                                   [--processes 1,2] [--devices 1,2,4,8] [--modes weak,strong]
                                   [--halos mpi,xla] [--steps 40] [--repeats 5] [--json PATH]
                                   [--no-bind]

The parent process plans the runs and starts one worker per point (``python -m
solver.bench.scaling --worker ...``):

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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import jax
import jax.numpy as jnp

from kernels.lattices import LATTICES, lattice_by_name
from solver.bench.scaling_worker import PRECISION, run_worker
from solver.distributed.decomposition import choose_mesh

MODES = ("weak", "strong")
HALOS = ("mpi", "xla")
WORKER_TIMEOUT_S = 3600
ROOT = Path(__file__).resolve().parent.parent
DEVICE_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=\S+")
FAKE_NOTE = (
    "fake devices share this machine's cores: their efficiency is MLUPS(N)/MLUPS(1) on the same "
    "cores and measures decomposition overhead, not scaling onto more hardware"
)


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


# What an MPI process carries in its environment once MPI is initialised (Open MPI's
# singleton init by mpi4py sets PMIX_*, ORTE_* and OMPI_MCA_orte_* / ess / pmix, a launched
# rank OMPI_COMM_WORLD_* and the like): inherited by a child's mpirun, they make it take itself
# for a rank of the parent's job, and it exits 1 without a word (a benchmark started from a
# Python process that had imported mpi4py). The user's own MCA settings stay.
_LAUNCH_PREFIXES = ("PMIX_", "ORTE_", "OMPI_")
_KEPT_PREFIXES = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_MCA_")
_DROPPED_MCA = ("OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix", "OMPI_MCA_initial_wdir")


def without_launch(env: dict[str, str]) -> dict[str, str]:
    """``env`` less the variables of an MPI process's own launch, so that an ``mpirun``
    started with it launches a job of its own."""
    return {
        name: value
        for name, value in env.items()
        if not name.startswith(_LAUNCH_PREFIXES)
        or (name.startswith(_KEPT_PREFIXES) and not name.startswith(_DROPPED_MCA))
    }


def child_env(fake_devices: int | None) -> dict[str, str]:
    """The environment of a worker: fake CPU devices, or one device per MPI process (the
    parent's own MPI launch variables dropped, ``without_launch``)."""
    env = without_launch(dict(os.environ))
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
        "solver.bench.scaling",
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
        "--kernel",
        args.kernel,
        *(["--overlap"] if args.overlap else []),
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
                launches.append(Launch("mpirun", command, child_env(None), bind, label))
    if args.devices:
        notes.append(FAKE_NOTE)
    for n in args.devices:
        command = _worker_args(args, "xla")
        launches.append(Launch("fake", command, child_env(n), "none", f"{n} fake devices"))
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
        f"scaling of {lat.name} {PRECISION}, kernel {args.kernel}"
        f"{' (halo overlap)' if args.overlap else ''}: weak "
        f"{args.local_size}^{lat.d} cells per shard (grid grows along x), strong "
        f"{'x'.join(map(str, args.global_size))}; "
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
            results = Path(tempfile.mkdtemp(prefix="results-", dir=cache))
            done = subprocess.run(
                [*launch.command, "--results", str(results)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=WORKER_TIMEOUT_S,
            )
            records = [
                json.loads(line)
                for path in sorted(results.glob("process_*.jsonl"))
                for line in path.read_text().splitlines()
                if line.strip()
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
            "kernel": args.kernel,
            "overlap": args.overlap,
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
    parser.add_argument(
        "--kernel",
        choices=("xla", "native", "pallas"),
        default="xla",
        help="the fluid step: the pure-JAX one, the native in-place CPU kernel or the Pallas "
        "GPU kernel (both on slabs along x; pallas runs interpreted on a CPU: tests only)",
    )
    parser.add_argument(
        "--overlap",
        action="store_true",
        help="the XLA step sends its halo messages from boundary planes collided apart "
        "(domain.overlap=true)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed chunks per point (median)")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write results here")
    parser.add_argument("--no-bind", action="store_true", help="do not pin MPI processes to cores")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
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
    if args.worker:
        return run_worker(args)
    return run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
