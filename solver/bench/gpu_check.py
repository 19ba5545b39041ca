"""GPU acceptance check: ``make gpu-check`` (``python -m solver.bench gpu-check``).

One command, a few minutes on one GPU, that answers whether the fluid step is where it should be
on this device (issue 16):

1. the device, its memory and the measured copy bandwidth (a loop whose trip count is a runtime
   value, so XLA cannot fuse its iterations into one pass and overstate the roofline), compared
   with the datasheet where the device is known;
2. per lattice (D3Q19, D3Q27) and storage type: MLUPS at 256^3, % of the copy roofline, peak
   bytes per cell from XLA's memory analysis and the largest cube that fits in the device memory;
   the goals of the issue (D3Q19 float32 >= 80 % of the copy bandwidth and above FluidX3D's
   23,056 MLUPS; 16-bit storage above 36,610) marked met or not;
3. agreement with the CPU: a short run of the bench's shear wave (D3Q19, 32^3) on the GPU and
   on the host CPU, the largest population difference against a float32 round-off bound;
4. determinism: the same chunk twice, bitwise, and a scatter-add of contact-like forces twice
   (XLA:GPU's atomics reorder sums unless ``--xla_gpu_deterministic_ops`` is set);
5. with two or more GPUs: the scaling benchmark (halo exchange time, weak scaling 1 -> N).

Exit status 0 when every check ran (goals missed are reported, not failures), 1 when the CPU
agreement or determinism fails, 2 without a GPU (``--allow-cpu`` runs it on the CPU at a small
size, to test the script itself).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from solver.bench import fluid as fluid_bench
from solver.fluid import step as fluid_step

# datasheet memory bandwidth, bytes/s (HBM), by a substring of jax's device_kind
DATASHEET_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "GH200": 4.0e12}
FLUIDX3D_MLUPS = {"float32": 23_056.0, "float16": 36_610.0}  # one H200, D3Q19 (issue 16)
ROOFLINE_GOAL = 0.80
# float32 runs on two devices differ by rounding order only: a few ulps of the populations
# (~0.03-0.4) after 100 steps
CPU_AGREEMENT_BOUND = 1e-5
STORAGES = ("float32", "float16", "bfloat16")


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


def throughput_rows(edge: int, steps: int, repeats: int, memory: float | None) -> list[dict]:
    copy_run = fluid_bench.measure_copy("float32")
    rows = []
    for lattice in ("D3Q19", "D3Q27"):
        for storage in STORAGES:
            kwargs = _storage_kwargs(storage)
            if kwargs is None:
                print(f"  {lattice} {storage}: storage type not in this build, skipped")
                continue
            r = fluid_bench.bench_one(
                lattice, "float32", "periodic", edge, steps, repeats, copy_run, **kwargs
            )
            per_cell = r.peak_bytes_per_cell
            largest = int((0.9 * memory / per_cell) ** (1 / 3)) if memory and per_cell else None
            row = {
                "lattice": lattice,
                "storage": storage,
                "mlups": r.mlups,
                "fraction": r.fraction,
                "bytes_per_cell": per_cell,
                "largest_cube": largest,
            }
            rows.append(row)
            goal = FLUIDX3D_MLUPS.get("float16" if storage != "float32" else "float32")
            note = ""
            if lattice == "D3Q19" and goal is not None:
                met = r.mlups > goal and (storage != "float32" or r.fraction >= ROOFLINE_GOAL)
                note = f"  goal (> {goal:,.0f} MLUPS): {'met' if met else 'NOT met'}"
            print(
                f"  {lattice} {storage:>8}: {r.mlups:10.1f} MLUPS, {100 * r.fraction:5.1f} % of "
                f"copy, {per_cell:6.1f} B/cell, largest cube "
                f"{f'{largest}^3' if largest else '-'}{note}",
                flush=True,
            )
    return rows


def _shear_wave(device, edge: int, steps: int) -> np.ndarray:
    setup = fluid_bench.build_setup("D3Q19", "float32", "periodic", edge)
    density, velocity = fluid_bench.initial_fields(setup)
    with jax.default_device(device):
        state = fluid_step.initial_state(setup, density, velocity)
        geometry = fluid_step.make_geometry(setup)
        chunk = jax.jit(fluid_step.make_chunk(setup), static_argnums=2)
        state, _ = chunk(state, geometry, steps)
        return np.asarray(state.populations)


def cpu_agreement(edge: int = 32, steps: int = 100) -> float:
    """max |f_gpu - f_cpu| after ``steps`` steps of the bench's shear wave on ``edge``^3."""
    gpu = _shear_wave(jax.devices()[0], edge, steps)
    cpu = _shear_wave(jax.devices("cpu")[0], edge, steps)
    return float(np.max(np.abs(gpu - cpu)))


def deterministic_chunk(edge: int = 64, steps: int = 50) -> bool:
    a = _shear_wave(jax.devices()[0], edge, steps)
    b = _shear_wave(jax.devices()[0], edge, steps)
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
    return scaling_bench.main(
        ["--processes", f"1,{count}", "--local-size", str(edge), "--steps", "20", "--repeats", "3"]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m solver.bench gpu-check",
                                     description=__doc__.split("\n\n")[1])  # fmt: skip
    parser.add_argument("--edge", type=int, default=256, help="cube edge of the throughput rows")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed chunk")
    parser.add_argument("--repeats", type=int, default=5, help="timed chunks per row (median)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run on the CPU (to test this script; sizes shrink)")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = jax.devices()[0]
    on_gpu = device.platform == "gpu"
    if not on_gpu and not args.allow_cpu:
        print(f"gpu-check: JAX's back end is {device.platform}, not gpu: no CUDA jaxlib or no "
              "visible GPU (make gpu-install)", file=sys.stderr)  # fmt: skip
        return 2
    if not on_gpu:
        args.edge, args.steps, args.repeats = min(args.edge, 32), min(args.steps, 5), 1
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
    print(f"throughput at {args.edge}^3 (float32 compute):")
    throughput_rows(args.edge, args.steps, args.repeats, memory)
    failures = 0
    if len(jax.devices("cpu")) and on_gpu:
        diff = cpu_agreement()
        ok = diff <= CPU_AGREEMENT_BOUND
        failures += not ok
        print(f"agreement with the CPU (shear wave, D3Q19 32^3, 100 steps): max |df| = {diff:.2e} "
              f"(bound {CPU_AGREEMENT_BOUND:g}): {'ok' if ok else 'FAIL'}")  # fmt: skip
    chunk_ok, scatter_ok = deterministic_chunk(), deterministic_scatter()
    failures += (not chunk_ok) + (not scatter_ok)
    scatter = "bitwise" if scatter_ok else "DIFFERS (set --xla_gpu_deterministic_ops)"
    print(
        f"determinism: fluid chunk {'bitwise' if chunk_ok else 'DIFFERS'}, scatter-add of "
        f"contact forces {scatter}"
    )
    if on_gpu and len(jax.devices()) >= 2:
        print("scaling:")
        scaling(args.edge)
    elif on_gpu:
        print("scaling: one GPU, no halo exchange to measure")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
