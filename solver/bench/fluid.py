"""Benchmark of the fluid step against the device's memory-copy roofline.

    python -m solver.bench [--lattices D2Q9,D3Q19,D3Q27] [--precisions float32,float64]
                           [--sizes 64,128] [--steps 10] [--case periodic|walls|both]
                           [--repeats 5] [--json PATH] [--les none|smagorinsky]
                           [--collisions bgk,trt,regularized,kbc]
                           [--storages float32,float16,bfloat16] [--kernels xla,native,pallas,cuda]
    python -m solver.bench scaling ...   (weak and strong scaling: see solver/bench/scaling.py)
    python -m solver.bench checkpoint ...   (cost of checkpoints: see solver/bench/checkpoint.py)
    python -m solver.bench bodies ...   (rigid-body step throughput: see solver/bench/bodies.py)
    python -m solver.bench twin ...   (sensor ingestion rate: see solver/bench/twin.py)

For every lattice, precision, case and size it times the real solver chunk
(``solver.fluid.step.make_chunk`` on a ``FluidSetup``, jitted with the state donated, as the run
loop does) and reports, per row:

- MLUPS: million lattice-cell updates per second, solid cells included (median of the repeats);
- the device's memory-copy bandwidth, measured in the same run: y = x * s over a large array in a
  compiled loop, bytes read + written per second, timed alternately with the chunk so that load
  from other processes affects both alike;
- the roofline MLUPS = bandwidth / (2 q sizeof(dtype)): each cell update must read and write its q
  populations at least once;
- the achieved fraction of that roofline;
- the peak memory per cell, from XLA's compiled memory analysis (arguments + outputs + temporaries,
  aliased donated buffers counted once).

Collisions: ``--collisions`` (default bgk) adds one row per operator of ``solver.fluid.collide``
(kbc only on D2Q9 and D3Q27, and not with ``--les smagorinsky``: such rows are left out).

Storage: ``--storages`` (default: each precision's own) adds one row per storage dtype of the
populations (``FluidSetup.storage``, docs/storage.md: float16 and bfloat16 with float32 compute
only; other pairs are left out). The roofline of a row counts the bytes of its storage dtype,
2 q sizeof(storage) per cell, so a 16-bit row's roofline is twice the float32 one.

Kernels: ``--kernels`` (default xla) adds one row per step implementation: ``xla`` the pure-JAX
step on two ghost-padded buffers, ``native`` the in-place CPU kernel on one buffer
(solver/fluid/inplace_step.py; BGK/TRT, stored as computed or in float16: other rows are left
out), ``pallas`` the fused GPU kernel on one buffer (solver/fluid/pallas_step.py; BGK/TRT, stored
as computed, in float16 or bfloat16; on the CPU it runs interpreted, for tests only), ``cuda``
the native kernel's scheme for GPUs (kernels/native/lb_gpu.cu; BGK/TRT, stored as computed or
in float16; on the CPU its emulation, for tests only). All rows
of a size run in the same process with the copy bandwidth measured alongside, so their MLUPS,
roofline fractions and bytes per cell compare directly.

Cases: "periodic" is a fully periodic box; "walls" is a duct periodic along x with solid layers
on every other face (half-way bounce-back), which is what a channel or cavity pays for its walls.
A size n means an n^d box for the 3D lattices; 2D lattices use an edge of n^1.5 (rounded to a
multiple of 16) so that both have about the same number of cells, unless --sizes-2d is given.
float64 needs 64-bit JAX, which this command switches on for the float64 rows only.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import itertools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from kernels.lattices import LATTICES, lattice_by_name
from kernels.storage import SHIFTED, STORAGES
from solver.fluid import step as fluid_step
from solver.fluid.config import NATIVE_COLLISIONS
from solver.fluid.inplace_step import ONE_BUFFER_KERNELS, make_inplace_chunk
from solver.fluid.pallas_step import make_pallas_chunk
from solver.fluid.setup import COLLISIONS, KERNELS, TENSOR_PRODUCT_COLLISIONS, FluidSetup

PRECISIONS = ("float32", "float64")
CASES = ("periodic", "walls")
COPY_BYTES = 512 * 2**20  # well beyond the last-level cache (32 MiB here)
COPY_ITERATIONS = 10
TAU = 0.6  # lattice relaxation time of the benchmark flow; any stable value costs the same


@dataclass(frozen=True)
class BenchResult:
    """One row of the table. Rates are medians over the repeats; *_best are the fastest."""

    lattice: str
    precision: str
    case: str
    collision: str
    storage: str
    kernel: str
    shape: tuple[int, ...]
    cells: int
    steps: int
    mlups: float
    mlups_best: float
    bandwidth_gbs: float
    roofline_mlups: float
    fraction: float
    peak_bytes_per_cell: float
    compile_s: float


def measure_copy(dtype: str) -> Callable[[], float]:
    """Compile the copy kernel once; the returned function times one run, returns bytes/s."""
    itemsize = jnp.dtype(dtype).itemsize
    n = COPY_BYTES // itemsize

    def body(x: jax.Array, scale: jax.Array) -> jax.Array:
        # a scale the compiler cannot fold away, so each iteration reads and writes the array
        return lax.fori_loop(0, COPY_ITERATIONS, lambda _, y: y * scale, x)

    compiled = (
        jax.jit(body, donate_argnums=0)
        .lower(jax.ShapeDtypeStruct((n,), dtype), jax.ShapeDtypeStruct((), dtype))
        .compile()
    )
    scale = jnp.asarray(1.0, dtype)
    box = [compiled(jnp.ones((n,), dtype), scale)]
    jax.block_until_ready(box[0])
    moved = 2 * n * itemsize * COPY_ITERATIONS

    def run_once() -> float:
        start = time.perf_counter()
        box[0] = compiled(box[0], scale)
        jax.block_until_ready(box[0])
        return moved / (time.perf_counter() - start)

    return run_once


def build_setup(
    lattice_name: str,
    precision: str,
    case: str,
    edge: int,
    les: str = "none",
    collision: str = "bgk",
    storage: str | None = None,
    kernel: str = "xla",
) -> FluidSetup:
    """A box of edge^d cells; for "walls" solid layers on every face not normal to x; ``les``
    "smagorinsky" turns the subgrid model on (C_s = 0.17); ``collision`` names the operator,
    ``storage`` the populations' storage dtype (None: the precision), ``kernel`` the step."""
    lat = lattice_by_name(lattice_name)
    shape = (edge,) * lat.d
    solid = None
    if case == "walls":
        solid = np.zeros(shape, dtype=bool)
        for axis in range(1, lat.d):
            index = [slice(None)] * lat.d
            index[axis] = 0
            solid[tuple(index)] = True
            index[axis] = edge - 1
            solid[tuple(index)] = True
    return FluidSetup(lattice=lat, shape=shape, omega=1.0 / TAU, dtype=precision, solid=solid,
                      les=les, les_cs=0.17, collision=collision,
                      storage=None if storage == precision else storage,
                      kernel=kernel)  # fmt: skip


def initial_fields(setup: FluidSetup) -> tuple[np.ndarray, np.ndarray]:
    """Density 1 and a small shear wave u_x = 0.01 sin(2 pi y / ny), lattice units."""
    shape = setup.shape
    y = np.arange(shape[1]) / shape[1]
    velocity = np.zeros((setup.lattice.d, *shape))
    ux = 0.01 * np.sin(2 * np.pi * y)
    velocity[0] = ux.reshape((1, -1) + (1,) * (setup.lattice.d - 2))
    return np.ones(shape), velocity


def chunk_maker(kernel: str) -> Callable[[FluidSetup], Callable]:
    """make(setup) -> chunk(state, geometry, n) of ``kernel`` (xla, native, pallas, cuda) on one
    device."""
    makers = {
        "native": make_inplace_chunk,
        "pallas": make_pallas_chunk,
        "cuda": lambda setup: make_inplace_chunk(setup, "cuda"),
    }
    return makers.get(kernel, fluid_step.make_chunk)


def _compile_chunk(
    setup: FluidSetup, steps: int
) -> tuple[Callable[[Any], Any], Any, jax.stages.Compiled]:
    """The solver chunk, jitted as the run loop does; returns (advance(state), state, compiled).

    Works with both chunk(state, n) and chunk(state, geometry, n).
    """
    chunk = chunk_maker(setup.kernel)(setup)
    density, velocity = initial_fields(setup)
    state = fluid_step.initial_state(setup, density, velocity)
    stored = setup.storage_dtype
    state = dataclasses.replace(state, populations=state.populations.astype(stored))
    takes_geometry = len(inspect.signature(chunk).parameters) == 3
    if takes_geometry:
        geometry = fluid_step.make_geometry(setup)
        jitted = jax.jit(chunk, static_argnums=2, donate_argnums=0)
        compiled = jitted.lower(state, geometry, steps).compile()

        def advance(s):
            return compiled(s, geometry)[0]
    else:
        jitted = jax.jit(chunk, static_argnums=1, donate_argnums=0)
        compiled = jitted.lower(state, steps).compile()

        def advance(s):
            return compiled(s)[0]

    return advance, state, compiled


def peak_bytes(compiled: jax.stages.Compiled) -> float:
    """Peak device memory of one call from XLA's memory analysis, in bytes (nan if unknown)."""
    try:
        mem = compiled.memory_analysis()
        total = (
            mem.argument_size_in_bytes
            + mem.output_size_in_bytes
            - mem.alias_size_in_bytes
            + mem.temp_size_in_bytes
        )
        return float(total)
    except (AttributeError, NotImplementedError, TypeError):
        return float("nan")


def bench_one(
    lattice_name: str,
    precision: str,
    case: str,
    edge: int,
    steps: int,
    repeats: int,
    copy_run: Callable[[], float],
    les: str = "none",
    collision: str = "bgk",
    storage: str | None = None,
    kernel: str = "xla",
) -> BenchResult:
    """Time ``repeats`` chunks of ``steps`` steps, each right after one copy-bandwidth run."""
    setup = build_setup(lattice_name, precision, case, edge, les, collision, storage, kernel)
    start = time.perf_counter()
    advance, state, compiled = _compile_chunk(setup, steps)
    state = advance(state)  # first call: warm-up (allocation, page faults)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - start
    seconds, bandwidths = [], []
    for _ in range(repeats):
        bandwidths.append(copy_run())
        t0 = time.perf_counter()
        state = advance(state)
        jax.block_until_ready(state)
        seconds.append(time.perf_counter() - t0)
    populations = state.populations
    if not bool(jnp.all(jnp.isfinite(populations))):
        raise FloatingPointError(f"{lattice_name} {precision} {case} {edge}: non-finite state")
    cells = setup.cells
    q, itemsize = setup.lattice.q, jnp.dtype(setup.storage_dtype).itemsize
    mlups = cells * steps / statistics.median(seconds) / 1e6
    bandwidth = statistics.median(bandwidths)
    roofline = bandwidth / (2 * q * itemsize) / 1e6
    return BenchResult(
        lattice=setup.lattice.name,
        precision=precision,
        case=case,
        collision=collision if les == "none" else f"{collision}+les",
        storage=setup.storage_dtype,
        kernel=kernel,
        shape=tuple(setup.shape),
        cells=cells,
        steps=steps,
        mlups=mlups,
        mlups_best=cells * steps / min(seconds) / 1e6,
        bandwidth_gbs=bandwidth / 1e9,
        roofline_mlups=roofline,
        fraction=mlups / roofline,
        peak_bytes_per_cell=peak_bytes(compiled) / cells,
        compile_s=compile_s,
    )


def _edge_2d(n: int) -> int:
    """2D edge with about as many cells as an n^3 box, a multiple of 16."""
    return max(16, int(round(n**1.5 / 16)) * 16)


def format_table(rows: list[BenchResult]) -> str:
    """Fixed-width text table of the results."""
    head = (
        f"{'lattice':7} {'prec':7} {'storage':8} {'kernel':6} {'case':8} {'collision':11} "
        f"{'shape':>15} "
        f"{'MLUPS':>8} "
        f"{'best':>8} "
        f"{'copy GB/s':>9} {'roof MLUPS':>10} {'of roof':>7} {'B/cell':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        shape = "x".join(str(s) for s in r.shape)
        lines.append(
            f"{r.lattice:7} {r.precision:7} {r.storage:8} {r.kernel:6} {r.case:8} "
            f"{r.collision:11} {shape:>15} "
            f"{r.mlups:8.1f} "
            f"{r.mlups_best:8.1f} {r.bandwidth_gbs:9.1f} {r.roofline_mlups:10.0f} "
            f"{100 * r.fraction:6.1f}% {r.peak_bytes_per_cell:7.0f}"
        )
    return "\n".join(lines)


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _positive_ints(text: str) -> list[int]:
    values = [int(t) for t in _csv(text)]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m solver.bench",
        description="MLUPS of the fluid step against the measured memory-copy roofline.",
    )
    parser.add_argument("--lattices", default="D2Q9,D3Q19,D3Q27", help="comma-separated")
    parser.add_argument("--precisions", default="float32,float64", help="comma-separated")
    parser.add_argument(
        "--sizes",
        type=_positive_ints,
        default=[64, 128],
        help="box edges for 3D lattices, comma-separated (default 64,128)",
    )
    parser.add_argument(
        "--sizes-2d",
        type=_positive_ints,
        default=None,
        help="box edges for 2D lattices (default: n^1.5 for each n of --sizes)",
    )
    parser.add_argument("--steps", type=int, default=20, help="steps per timed chunk (default 20)")
    parser.add_argument("--repeats", type=int, default=5, help="timed chunks per row (median)")
    parser.add_argument("--case", choices=("periodic", "walls", "both"), default="both")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write results here")
    parser.add_argument("--les", default="none",
                        help="comma-separated subgrid models, none,smagorinsky (C_s = 0.17): "
                        "each row is run with each")  # fmt: skip
    parser.add_argument("--collisions", default="bgk",
                        help=f"comma-separated: {','.join(COLLISIONS)} (default bgk)")  # fmt: skip
    parser.add_argument("--storages", default="",
                        help=f"comma-separated: {','.join(STORAGES)} (default: the precision; "
                        f"{' and '.join(SHIFTED)} with float32 only)")  # fmt: skip
    parser.add_argument("--kernels", default="xla",
                        help=f"comma-separated: {','.join(KERNELS)} (default xla; native, "
                        "pallas and cuda: the one-buffer kernels, BGK/TRT rows only)")  # fmt: skip
    args = parser.parse_args(argv)
    args.storages = [c.lower() for c in _csv(args.storages)]
    args.kernels = [c.lower() for c in _csv(args.kernels)]
    for c in args.kernels:
        if c not in KERNELS:
            parser.error(f"--kernels: unknown {c!r}; allowed: {', '.join(KERNELS)}")
    for c in args.storages:
        if c not in STORAGES:
            parser.error(f"--storages: unknown {c!r}; allowed: {', '.join(STORAGES)}")
    args.lattices = _csv(args.lattices)
    args.precisions = _csv(args.precisions)
    args.collisions = [c.lower() for c in _csv(args.collisions)]
    args.les = [c.lower() for c in _csv(args.les)] or ["none"]
    for c in args.les:
        if c not in ("none", "smagorinsky"):
            parser.error(f"--les: unknown {c!r}; allowed: none, smagorinsky")
    for c in args.collisions:
        if c not in COLLISIONS:
            parser.error(f"--collisions: unknown {c!r}; allowed: {', '.join(COLLISIONS)}")
    for name in args.lattices:
        if name.upper() not in LATTICES:
            parser.error(f"--lattices: unknown {name!r}; allowed: {', '.join(LATTICES)}")
    for p in args.precisions:
        if p not in PRECISIONS:
            parser.error(f"--precisions: unknown {p!r}; allowed: {', '.join(PRECISIONS)}")
    if args.steps < 1 or args.repeats < 1:
        parser.error(f"--steps ({args.steps}) and --repeats ({args.repeats}) must be >= 1")
    return args


def supports(
    lattice, collision: str, les: str, kernel: str = "xla", storage: str = "", precision: str = ""
) -> bool:
    """Whether the setup accepts the operator here (KBC: tensor-product lattices, no LES) and
    the kernel runs it (native and pallas: BGK/TRT with or without LES, stored as computed
    or in their 16-bit storages, float16 for native, float16 and bfloat16 for pallas)."""
    if collision in TENSOR_PRODUCT_COLLISIONS and lattice.q != 3**lattice.d:
        return False
    if kernel in ONE_BUFFER_KERNELS and (
        collision not in NATIVE_COLLISIONS
        or storage not in (precision, *ONE_BUFFER_KERNELS[kernel][1])
    ):
        return False
    return not (collision == "kbc" and les != "none")


def storages_for(precision: str, storages: list[str]) -> list[str]:
    """The storage dtypes of ``storages`` that go with the compute ``precision`` (none given:
    the precision itself)."""
    if not storages:
        return [precision]
    allowed = (precision, *SHIFTED) if precision == "float32" else (precision,)
    return [s for s in storages if s in allowed]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = CASES if args.case == "both" else (args.case,)
    devices = jax.devices()
    print(
        f"device: {devices[0].platform} x{len(devices)} ({platform.processor() or 'cpu'}), "
        f"{os.cpu_count()} cores, jax {jax.__version__}; "
        f"copy kernel: {COPY_BYTES // 2**20} MiB x {COPY_ITERATIONS}; "
        f"{args.steps} steps per chunk, median of {args.repeats}; LES {', '.join(args.les)}; "
        f"collisions {', '.join(args.collisions)}; "
        f"storages {', '.join(args.storages) or 'as the precision'}; "
        f"kernels {', '.join(args.kernels)}",
        flush=True,
    )
    rows: list[BenchResult] = []
    x64_before = bool(jax.config.jax_enable_x64)
    for precision in args.precisions:
        # 64-bit mode only while float64 rows run: with it on, NumPy float64 constants in the
        # kernels (weights, velocities) would promote a float32 step to float64 arithmetic
        jax.config.update("jax_enable_x64", precision == "float64")
        copy_run = measure_copy(precision)
        for name in args.lattices:
            lat = lattice_by_name(name)
            edges = (
                (args.sizes_2d or [_edge_2d(n) for n in args.sizes]) if lat.d == 2 else args.sizes
            )
            storages = storages_for(precision, args.storages)
            for case, edge, collision, storage, kernel, les in itertools.product(
                cases, edges, args.collisions, storages, args.kernels, args.les
            ):
                if not supports(lat, collision, les, kernel, storage, precision):
                    continue
                row = bench_one(
                    lat.name,
                    precision,
                    case,
                    edge,
                    args.steps,
                    args.repeats,
                    copy_run,
                    les,
                    collision,
                    storage,
                    kernel,
                )
                rows.append(row)
                lines = format_table([row]).splitlines()
                print("\n".join(lines if len(rows) == 1 else lines[-1:]), flush=True)
    jax.config.update("jax_enable_x64", x64_before)
    print()
    print(format_table(rows))
    if args.json:
        payload = {
            "device": str(devices[0]),
            "devices": len(devices),
            "cpu_count": os.cpu_count(),
            "jax": jax.__version__,
            "rows": [asdict(r) for r in rows],
        }
        with open(args.json, "w") as fh:
            json.dump(payload, fh, indent=2)
        print(f"results written to {args.json}")
    return 0
