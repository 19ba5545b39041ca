"""GPU acceptance check: ``make gpu-check`` (``python -m solver.bench gpu-check``).

One command, a few minutes on one GPU, that answers whether the fluid step is where it should be
on this device (issue 16):

1. the device, its memory and the measured copy bandwidth (a loop whose trip count is a runtime
   value, so XLA cannot fuse its iterations into one pass and overstate the roofline), compared
   with the datasheet where the device is known;
2. per lattice (D3Q19, D3Q27), storage type and kernel (``xla`` the pure-JAX step, ``pallas`` the
   fused one-buffer kernel in Pallas/Triton, fluid.kernel=pallas, ``cuda`` the native kernel's
   scheme in CUDA, fluid.kernel=cuda): MLUPS at 256^3, % of the copy roofline, peak
   bytes per cell from XLA's memory analysis and the largest cube that fits in the device memory;
   the one-buffer kernels' rows run again at that cube (a fluid at rest built on the device;
   fewer steps);
   the goals of the issue (D3Q19 float32 >= 80 % of the copy bandwidth and above FluidX3D's
   23,056 MLUPS; 16-bit storage above 36,610) marked met or not;
3. agreement with the CPU: a short run of the bench's shear wave (32^3, 100 steps) per lattice,
   storage and kernel on the GPU against the XLA step on the host CPU, the largest population
   difference against a bound (float32 round-off; for 16-bit storage a number of its roundings);
4. determinism: the same chunk twice per kernel, bitwise, and a scatter-add of contact-like
   forces twice (XLA:GPU's atomics reorder sums unless ``--xla_gpu_deterministic_ops`` is set);
5. with two or more GPUs: the Pallas kernel on two devices (slabs along x) against one, and the
   scaling benchmark (halo exchange time, weak scaling 1 -> N), for the XLA step and for the
   Pallas kernel on slabs along x;
6. the CUDA kernel's (fluid.kernel=cuda) throughput per threads-per-block choice.
The CUDA kernel's agreement also compares it with the native CPU kernel on the host, which
shares its per-cell code and rounding: expected to be the same bits.

Exit status 0 when every check ran (goals missed are reported, not failures), 1 when the CPU
agreement or determinism fails, 2 without a GPU (``--allow-cpu`` runs it on the CPU at a small
size, to test the script itself; ``--lattices``, ``--storages``, ``--kernels`` and ``--largest``
narrow it down; ``--parts`` picks the parts of 2-5 to run).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from kernels.lattices import LATTICES as LATTICES_BY_NAME
from kernels.storage import unit_roundoff
from solver.bench import fluid as fluid_bench
from solver.fluid import step as fluid_step

# datasheet memory bandwidth, bytes/s (HBM), by a substring of jax's device_kind
DATASHEET_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "GH200": 4.0e12}
FLUIDX3D_MLUPS = {"float32": 23_056.0, "float16": 36_610.0}  # one H200, D3Q19 (issue 16)
ROOFLINE_GOAL = 0.80
# float32 runs on two devices differ by rounding order only: a few ulps of the populations
# (~0.03-0.4) after 100 steps
CPU_AGREEMENT_BOUND = 1e-5
# 16-bit storage: the two devices round differently inside a step, and each stored value rounds
# once per step, so their difference grows like a random walk of storage roundings; 64 units of
# the largest |f - w| is a first guess (no GPU has calibrated it), far below what a wrong link
# or collision gives (|f - w| itself)
AGREEMENT_UNITS = 64
STORAGES = ("float32", "float16", "bfloat16")
LATTICES = ("D3Q19", "D3Q27")
# the pure-JAX step and the two one-buffer GPU kernels: Pallas/Triton (fluid.kernel=pallas) and
# the native kernel's scheme in CUDA (fluid.kernel=cuda)
KERNELS = ("xla", "pallas", "cuda")
# what a run measures; a device script with a short lease runs them in several calls, the
# headline first (launch/gpu_check_offline.sh)
PARTS = ("throughput", "agreement", "determinism", "scaling", "tuning")
# the CUDA kernel's threads per block along z that the tuning part times
BLOCKS = (64, 128, 256, 512)


def copy_bandwidth(n_bytes: int, iterations: int) -> float:
    """Bytes read + written per second by y <- y * s over ``n_bytes`` of float32.

    The trip count is an argument of the compiled loop, not a constant: XLA then keeps a real
    loop (a constant count may be unrolled and fused into one pass, 10x the true rate).
    """
    n = n_bytes // 4

    def body(x, scale, count):
        return lax.fori_loop(0, count, lambda _, y: y * scale, x)

    compiled = (
        jax.jit(body, donate_argnums=0)
        .lower(
            jax.ShapeDtypeStruct((n,), jnp.float32),
            jax.ShapeDtypeStruct((), jnp.float32),
            jax.ShapeDtypeStruct((), jnp.int32),
        )
        .compile()
    )
    x = compiled(jnp.ones((n,), jnp.float32), jnp.float32(1.0), jnp.int32(1))
    jax.block_until_ready(x)
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        x = compiled(x, jnp.float32(1.0), jnp.int32(iterations))
        jax.block_until_ready(x)
        best = max(best, 2 * n * 4 * iterations / (time.perf_counter() - start))
    return best


def datasheet(kind: str) -> float | None:
    for name, value in DATASHEET_BANDWIDTH.items():
        if name.lower() in kind.lower():
            return value
    return None


def device_memory(device) -> float | None:
    try:
        stats = device.memory_stats() or {}
    except (AttributeError, NotImplementedError, RuntimeError):
        return None
    limit = stats.get("bytes_limit")
    return float(limit) if limit else None


def _storage_kwargs(storage: str) -> dict | None:
    """bench_one's keyword for a storage type, or None where the bench has no such option."""
    import inspect

    if storage == "float32":
        return {}
    if "storage" in inspect.signature(fluid_bench.bench_one).parameters:
        return {"storage": storage}
    return None


def kernel_stores(kernel: str, storage: str) -> bool:
    """Whether ``kernel`` keeps the populations in ``storage`` with float32 compute."""
    from solver.fluid.config import KERNEL_STORAGES

    return storage == "float32" or storage in KERNEL_STORAGES.get(kernel, (storage,))


def largest_cube(memory: float | None, per_cell: float) -> int | None:
    """The edge of the largest cube whose ``per_cell`` bytes fit in 90 % of ``memory``."""
    if not memory or not per_cell or not np.isfinite(per_cell):
        return None
    return int((0.9 * memory / per_cell) ** (1 / 3))


def rest_state(setup) -> fluid_step.FluidState:
    """Fluid at rest (f_i = w_i) made on the device: the largest cube's state (the host fields
    of ``initial_state`` would need four float64 values per cell, the device its q equilibria
    besides the state)."""
    lat = setup.lattice
    weights = np.asarray(lat.w).reshape((lat.q,) + (1,) * lat.d)

    @jax.jit
    def make():
        f = jnp.broadcast_to(jnp.asarray(weights, setup.dtype), (lat.q, *setup.shape))
        return fluid_step.encode_populations(setup, f)

    return fluid_step.FluidState(populations=make(), time=jnp.zeros((), jnp.int32))


def largest_cube_row(
    lattice: str,
    storage: str,
    edge: int,
    steps: int,
    repeats: int,
    copy_run,
    kernel: str,
    block: int | None = None,
) -> dict:
    """MLUPS, % of copy and bytes per cell of ``kernel`` on a periodic cube of ``edge``^3 at
    rest (the bench's timing, without its host-built shear wave); ``block``: the CUDA kernel's
    threads per block (None: its default)."""
    import statistics

    from solver.fluid.inplace_step import make_inplace_chunk

    setup = fluid_bench.build_setup(lattice, "float32", "periodic", edge, storage=storage,
                                    kernel=kernel)  # fmt: skip
    make = fluid_bench.chunk_maker(kernel)
    if kernel == "cuda" and block is not None:
        make = functools.partial(make_inplace_chunk, kernel="cuda", block=block)
    state, geometry = rest_state(setup), fluid_step.make_geometry(setup)
    compiled = (
        jax.jit(make(setup), static_argnums=2, donate_argnums=0)
        .lower(state, geometry, steps)
        .compile()
    )
    state = compiled(state, geometry)[0]
    jax.block_until_ready(state)
    seconds, bandwidths = [], []
    for _ in range(repeats):
        bandwidths.append(copy_run())
        start = time.perf_counter()
        state = compiled(state, geometry)[0]
        jax.block_until_ready(state)
        seconds.append(time.perf_counter() - start)
    finite = bool(jnp.all(jnp.isfinite(fluid_step.decode_populations(setup, state.populations))))
    del state
    mlups = setup.cells * steps / statistics.median(seconds) / 1e6
    itemsize = jnp.dtype(setup.storage_dtype).itemsize
    roofline = statistics.median(bandwidths) / (2 * setup.lattice.q * itemsize) / 1e6
    return {
        "mlups": mlups,
        "fraction": mlups / roofline,
        "bytes_per_cell": fluid_bench.peak_bytes(compiled) / setup.cells,
        "finite": finite,
    }


def throughput_rows(
    edge: int,
    steps: int,
    repeats: int,
    memory: float | None,
    kernels: tuple[str, ...] = KERNELS,
    lattices: tuple[str, ...] = LATTICES,
    storages: tuple[str, ...] = STORAGES,
    largest: int | None = None,
    largest_steps: int | None = None,
) -> list[dict]:
    """Per lattice, storage and kernel: the bench's row at ``edge``^3 and the largest cube that
    fits (estimated from its bytes per cell); the one-buffer kernels' rows also run at that cube
    (``largest`` overrides its edge), with ``largest_steps`` per chunk (default steps / 5: a
    chunk of the largest cube takes seconds)."""
    copy_run = fluid_bench.measure_copy("float32")
    rows = []
    for lattice in lattices:
        for storage in storages:
            kwargs = _storage_kwargs(storage)
            if kwargs is None:
                print(f"  {lattice} {storage}: storage type not in this build, skipped")
                continue
            for kernel in kernels:
                if not kernel_stores(kernel, storage):
                    continue
                r = fluid_bench.bench_one(lattice, "float32", "periodic", edge, steps, repeats,
                                          copy_run, kernel=kernel, **kwargs)  # fmt: skip
                per_cell = r.peak_bytes_per_cell
                fits = largest_cube(memory, per_cell)
                row = {
                    "lattice": lattice,
                    "storage": storage,
                    "kernel": kernel,
                    "edge": edge,
                    "mlups": r.mlups,
                    "fraction": r.fraction,
                    "bytes_per_cell": per_cell,
                    "largest_cube": fits,
                }
                rows.append(row)
                goal = FLUIDX3D_MLUPS.get("float16" if storage != "float32" else "float32")
                note = ""
                if lattice == "D3Q19" and goal is not None:
                    met = r.mlups > goal and (storage != "float32" or r.fraction >= ROOFLINE_GOAL)
                    note = f"  goal (> {goal:,.0f} MLUPS): {'met' if met else 'NOT met'}"
                print(
                    f"  {lattice} {storage:>8} {kernel:>6}: {r.mlups:10.1f} MLUPS, "
                    f"{100 * r.fraction:5.1f} % of copy, {per_cell:6.1f} B/cell, largest cube "
                    f"{f'{fits}^3' if fits else '-'}{note}",
                    flush=True,
                )
                big = largest if largest is not None else fits
                if kernel != "xla" and big:
                    big_steps = largest_steps or max(2, steps // 5)
                    try:
                        b = largest_cube_row(lattice, storage, big, big_steps, repeats, copy_run,
                                             kernel)  # fmt: skip
                    except Exception as error:  # noqa: BLE001 - out of memory above all
                        # the estimate from the 256^3 program may miss the large one's buffers:
                        # say so and go on to the next row (a lease allows one run)
                        first = (str(error).strip().splitlines() or [""])[0][:200]
                        print(f"  {lattice} {storage:>8} {kernel:>6} at {big}^3: FAILED "
                              f"({type(error).__name__}: {first})", flush=True)  # fmt: skip
                        continue
                    rows.append({**row, "edge": big, "mlups": b["mlups"],
                                 "fraction": b["fraction"],
                                 "bytes_per_cell": b["bytes_per_cell"]})  # fmt: skip
                    print(
                        f"  {lattice} {storage:>8} {kernel:>6} at {big}^3: {b['mlups']:10.1f} "
                        f"MLUPS, {100 * b['fraction']:5.1f} % of copy, "
                        f"{b['bytes_per_cell']:6.1f} B/cell"
                        + ("" if b["finite"] else "  NON-FINITE state"),
                        flush=True,
                    )
    return rows


def _shear_wave(
    device,
    edge: int,
    steps: int,
    lattice: str = "D3Q19",
    storage: str = "float32",
    kernel: str = "xla",
    case: str = "periodic",
) -> np.ndarray:
    """The bench's shear wave (``case`` periodic, or walls: solid layers across y and z) after
    ``steps`` steps of ``kernel`` on ``device``: the decoded populations f (q, *shape),
    float32."""
    setup = fluid_bench.build_setup(lattice, "float32", case, edge, storage=storage,
                                    kernel=kernel)  # fmt: skip
    density, velocity = fluid_bench.initial_fields(setup)
    make = fluid_bench.chunk_maker(kernel)
    with jax.default_device(device):
        state = fluid_step.initial_state(setup, density, velocity)
        geometry = fluid_step.make_geometry(setup)
        chunk = jax.jit(make(setup), static_argnums=2)
        state, _ = chunk(state, geometry, steps)
        return np.asarray(fluid_step.decode_populations(setup, state.populations))


def split_agreement(edge: int, steps: int, lattice: str = "D3Q19") -> float:
    """The Pallas kernel on two devices as slabs along x (solver/fluid/pallas_split.py) against
    the same kernel on one: the largest |f - f_one| of the bench's box with walls (solid layers
    across y and z, periodic along the split) after ``steps`` steps, float32."""
    from solver.distributed.distribution import slab_chunk
    from solver.fluid.pallas_step import make_pallas_chunk

    setup = fluid_bench.build_setup(lattice, "float32", "walls", edge, kernel="pallas")
    density, velocity = fluid_bench.initial_fields(setup)
    state = fluid_step.initial_state(setup, density, velocity)
    geometry = fluid_step.make_geometry(setup)
    one = jax.jit(make_pallas_chunk(setup), static_argnums=2)(state, geometry, steps)[0]
    two = slab_chunk(setup, jax.devices()[:2])(state, geometry, steps)[0]
    a = np.asarray(fluid_step.decode_populations(setup, one.populations))
    b = np.asarray(fluid_step.decode_populations(setup, two.populations))
    return float(np.abs(a - b).max())


def agreement_bound(storage: str, reference: np.ndarray, weights: np.ndarray) -> float:
    """The largest |f - f_cpu| accepted: float32 round-off (CPU_AGREEMENT_BOUND), or for a
    16-bit storage AGREEMENT_UNITS of its rounding of the largest |f - w| of the reference."""
    if storage == "float32":
        return CPU_AGREEMENT_BOUND
    shape = (-1,) + (1,) * (reference.ndim - 1)
    amplitude = float(np.abs(reference - np.asarray(weights).reshape(shape)).max())
    return max(CPU_AGREEMENT_BOUND, AGREEMENT_UNITS * unit_roundoff(storage) * amplitude)


@functools.cache
def _cpu_reference(edge: int, steps: int, lattice: str, storage: str) -> np.ndarray:
    """The XLA step's shear wave on the host CPU, made once for both kernels' rows."""
    return _shear_wave(jax.devices("cpu")[0], edge, steps, lattice, storage, "xla")


def cpu_agreement(
    edge: int = 32,
    steps: int = 100,
    lattice: str = "D3Q19",
    storage: str = "float32",
    kernel: str = "xla",
) -> tuple[float, float]:
    """(max |f - f_cpu|, its bound) after ``steps`` steps of the bench's shear wave on
    ``edge``^3: ``kernel`` on the default device against the XLA step on the host CPU."""
    ours = _shear_wave(jax.devices()[0], edge, steps, lattice, storage, kernel)
    cpu = _cpu_reference(edge, steps, lattice, storage)
    weights = LATTICES_BY_NAME[lattice].w
    return float(np.max(np.abs(ours - cpu))), agreement_bound(storage, cpu, weights)


def native_agreement(
    edge: int, steps: int, lattice: str = "D3Q19", storage: str = "float32"
) -> float:
    """The CUDA kernel on the GPU against the native kernel on the host CPU, the same scheme
    and per-cell code compiled without contraction on both: the largest |f_cuda - f_native| of
    the bench's box with walls after ``steps`` steps (0.0: the same bits)."""
    ours = _shear_wave(jax.devices()[0], edge, steps, lattice, storage, "cuda", "walls")
    cpu = _shear_wave(jax.devices("cpu")[0], edge, steps, lattice, storage, "native", "walls")
    return float(np.max(np.abs(ours - cpu)))


def block_rows(edge: int, steps: int, repeats: int, blocks: tuple[int, ...] = BLOCKS) -> None:
    """The CUDA kernel's D3Q19 float32 throughput at ``edge``^3 per threads-per-block choice
    (its one tuning parameter)."""
    copy_run = fluid_bench.measure_copy("float32")
    for block in blocks:
        r = largest_cube_row("D3Q19", "float32", edge, steps, repeats, copy_run, "cuda", block)
        print(f"  D3Q19  float32   cuda block {block:4d}: {r['mlups']:10.1f} MLUPS, "
              f"{100 * r['fraction']:5.1f} % of copy", flush=True)  # fmt: skip


def deterministic_chunk(edge: int = 64, steps: int = 50, kernel: str = "xla") -> bool:
    a = _shear_wave(jax.devices()[0], edge, steps, kernel=kernel)
    b = _shear_wave(jax.devices()[0], edge, steps, kernel=kernel)
    return bool(np.array_equal(a, b))


def deterministic_scatter(bodies: int = 100_000, pairs: int = 1_000_000) -> bool:
    """Contact-like force accumulation (forces of many pairs added onto their bodies) twice."""
    key = jax.random.PRNGKey(0)
    index = jax.random.randint(key, (pairs,), 0, bodies)
    force = jax.random.normal(jax.random.PRNGKey(1), (pairs, 3), jnp.float32)

    @jax.jit
    def accumulate(index, force):
        return jnp.zeros((bodies, 3), jnp.float32).at[index].add(force)

    first = np.asarray(accumulate(index, force))
    return all(np.array_equal(first, np.asarray(accumulate(index, force))) for _ in range(3))


def scaling(edge: int) -> int:
    from solver.bench import scaling as scaling_bench

    count = len(jax.devices())
    status = 0
    # the pure-JAX step's halo, the same with the messages sent from planes collided apart
    # (domain.overlap: whether XLA:GPU overlaps them with the collision), the one-buffer kernel
    for kernel, overlap in (("xla", False), ("xla", True), ("pallas", False)):
        status |= scaling_bench.main(
            ["--processes", f"1,{count}", "--devices", "0", "--local-size", str(edge),
             "--steps", "20", "--repeats", "3", "--kernel", kernel,
             *(["--overlap"] if overlap else [])]
        )  # fmt: skip
    return status


def _names(text: str, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    for name in names:
        if name not in allowed:
            raise SystemExit(f"gpu-check: {option} {name!r} not in {', '.join(allowed)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m solver.bench gpu-check",
                                     description=__doc__.split("\n\n")[1])  # fmt: skip
    parser.add_argument("--edge", type=int, default=256, help="cube edge of the throughput rows")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed chunk")
    parser.add_argument("--repeats", type=int, default=5, help="timed chunks per row (median)")
    parser.add_argument("--lattices", default=",".join(LATTICES), help="comma-separated")
    parser.add_argument("--storages", default=",".join(STORAGES), help="comma-separated")
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="comma-separated parts to run: throughput (2), agreement (3), "
                        "determinism (4), scaling (5: the 2-device checks), tuning (6: the "
                        "CUDA kernel's threads per block)")  # fmt: skip
    parser.add_argument("--largest", type=int, default=None,
                        help="edge of the pallas rows' largest cube (default: the largest that "
                        "fits in the device memory; none without a memory figure)")  # fmt: skip
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on the CPU (to test this script; sizes shrink, the pallas "
                        "kernel is interpreted)")  # fmt: skip
    args = parser.parse_args(argv)
    args.lattices = _names(args.lattices, LATTICES, "--lattices")
    args.storages = _names(args.storages, STORAGES, "--storages")
    args.kernels = _names(args.kernels, KERNELS, "--kernels")
    args.parts = _names(args.parts, PARTS, "--parts")
    return args


def agreement_rows(args: argparse.Namespace, edge: int, steps: int) -> int:
    """Print each lattice, storage and kernel's agreement with the XLA step on the host CPU;
    the number of rows out of bounds."""
    failures = 0
    for lattice, storage, kernel in itertools.product(args.lattices, args.storages, args.kernels):
        if not kernel_stores(kernel, storage):
            continue
        diff, bound = cpu_agreement(edge, steps, lattice, storage, kernel)
        ok = diff <= bound
        failures += not ok
        print(f"  {lattice} {storage:>8} {kernel:>6}: max |df| = {diff:.2e} (bound {bound:.1e}): "
              f"{'ok' if ok else 'FAIL'}", flush=True)  # fmt: skip
    return failures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = jax.devices()[0]
    on_gpu = device.platform == "gpu"
    if not on_gpu and not args.allow_cpu:
        print(f"gpu-check: JAX's back end is {device.platform}, not gpu: no CUDA jaxlib or no "
              "visible GPU (make gpu-install)", file=sys.stderr)  # fmt: skip
        return 2
    # the CPU agreement and determinism runs: a small shear wave (tiny on the CPU: the script's
    # own test, with the pallas kernel interpreted)
    check_edge, check_steps, determinism_edge = 32, 100, 64
    if not on_gpu:
        args.edge, args.steps, args.repeats = min(args.edge, 32), min(args.steps, 5), 1
        check_edge = determinism_edge = min(8, args.edge)
        check_steps = args.steps
    if on_gpu and "cuda" in args.kernels:
        from solver.fluid.cuda import cuda_arch, nvcc

        if nvcc() is None:
            print("cuda: no nvcc on this node (put CUDA's bin/ on the PATH or set $NVCC): the "
                  "CUDA kernel's rows and checks are skipped")  # fmt: skip
            args.kernels = tuple(k for k in args.kernels if k != "cuda")
        else:
            print(f"cuda: {nvcc()}, building for {cuda_arch()}")
    memory = device_memory(device)
    size = f", memory {memory / 2**30:.1f} GiB" if memory else ""
    print(f"device: {device.device_kind} x{len(jax.devices())}, jax {jax.__version__}{size}")
    bandwidth = copy_bandwidth(2**30 if on_gpu else 2**26, 20 if on_gpu else 3)
    sheet = datasheet(device.device_kind)
    print(f"copy bandwidth: {bandwidth / 1e9:,.0f} GB/s"
          + (f" ({100 * bandwidth / sheet:.0f} % of the datasheet's {sheet / 1e12:.2f} TB/s)"
             if sheet else ""))  # fmt: skip
    if sheet and bandwidth > 1.05 * sheet:
        print("  the probe exceeds the datasheet: it is not measuring memory traffic")
    failures = 0
    if "throughput" in args.parts:
        print(f"throughput at {args.edge}^3 (float32 compute), kernels {', '.join(args.kernels)}:")
        # on the CPU every run takes the same number of steps: one compiled program serves them
        throughput_rows(args.edge, args.steps, args.repeats, memory, args.kernels, args.lattices,
                        args.storages, args.largest, None if on_gpu else args.steps)  # fmt: skip
    if "agreement" in args.parts:
        print(f"agreement with the CPU (XLA step on the host; shear wave {check_edge}^3, "
              f"{check_steps} steps):")  # fmt: skip
        failures += agreement_rows(args, check_edge, check_steps)
        if "cuda" in args.kernels:
            # an odd chunk, so that the in-place stream of the pairs runs too; the box's walls
            # exercise the link repairs
            for lattice, storage in itertools.product(args.lattices, args.storages):
                if not kernel_stores("cuda", storage):
                    continue
                diff = native_agreement(check_edge, check_steps + 1, lattice, storage)
                failures += diff != 0.0
                verdict = "the same bits" if diff == 0.0 else f"DIFFERS (max |df| {diff:.2e})"
                print(f"  {lattice} {storage:>8}   cuda against the native CPU kernel (walls, "
                      f"{check_steps + 1} steps): {verdict}", flush=True)  # fmt: skip
    if "determinism" in args.parts:
        chunks = {k: deterministic_chunk(determinism_edge, check_steps, k) for k in args.kernels}
        scatter_ok = deterministic_scatter()
        failures += sum(not ok for ok in chunks.values()) + (not scatter_ok)
        scatter = "bitwise" if scatter_ok else "DIFFERS (set --xla_gpu_deterministic_ops)"
        per_kernel = ", ".join(f"{k} {'bitwise' if ok else 'DIFFERS'}" for k, ok in chunks.items())
        print(f"determinism: fluid chunk {per_kernel}; scatter-add of contact forces {scatter}")
    if "tuning" in args.parts and "cuda" in args.kernels:
        print(f"the CUDA kernel's threads per block (D3Q19 float32, {args.edge}^3):")
        block_rows(args.edge, args.steps, args.repeats)
    if "scaling" in args.parts:
        if len(jax.devices()) >= 2 and "pallas" in args.kernels:
            diff = split_agreement(check_edge, check_steps)
            ok = diff <= CPU_AGREEMENT_BOUND
            failures += not ok
            verdict = "within" if ok else "ABOVE"
            print(f"pallas on 2 devices (slabs along x, walls) against 1: max |f - f_one| "
                  f"{diff:.2e} ({verdict} {CPU_AGREEMENT_BOUND:.0e})")  # fmt: skip
        if on_gpu and len(jax.devices()) >= 2:
            print("scaling:")
            scaling(args.edge)
        elif on_gpu:
            print("scaling: one GPU, no halo exchange to measure")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
