"""The Pallas kernel split over devices along x (solver/fluid/pallas_split.py), in interpret
mode on the CPU: one shard (the periodic halo) and 2 fake devices (xla halo) against the
one-device Pallas chunk — moving walls with links across the shard faces, a body force, the
Smagorinsky model, float16 storage, even and odd chunk lengths.

Bitwise with XLA:CPU's fused multiply-adds off (``--xla_cpu_max_isa=AVX``, in the tests'
``FAST_COMPILE`` with -O0 and the older fusion emitter: the worker 41 -> 30 s): the split's sweeps
compute the same values in the same order, and the interpret mode's XLA program contracts
a*b + c differently when its structure changes (the ghost selects), which with FMA on moves
the last bit of a few moving-wall populations (measured 1.7e-16 in float64 after 3 steps; a
GPU's Triton compile contracts as it likes, so the GPU's bound is ulps, not bits). The mesh
checks of ``fluid.kernel=pallas`` are in tests/test_native_split.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import pytest
from solver_cli import FAST_COMPILE
from test_distributed_equality import fake_device_env, records

ROOT = Path(__file__).resolve().parent.parent
WORKER = str(Path(__file__).resolve().parent / "pallas_split_worker.py")


@pytest.mark.parametrize(
    ("flags", "comparisons"), [([], 5), pytest.param(["--long"], 6, marks=pytest.mark.long)]
)
def test_split_pallas_chunk_equals_one_device_bitwise_without_fma(flags, comparisons):
    result = subprocess.run(
        [sys.executable, WORKER, *flags],
        cwd=ROOT,
        env=fake_device_env(FAST_COMPILE),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = records(result.stdout)
    assert len(found) == comparisons, result.stdout
    for r in found:
        assert r["finite"], r
        assert r["bitwise"], r


def test_split_sweeps_lower_for_the_gpu_in_place():
    """The split chunk lowered for CUDA without a GPU (one shard, the periodic halo): every
    sweep, with its ghost-plane reads and writes, is one Triton kernel whose IR verifies, the
    odd sweep aliasing both the populations and the exchange buffer."""
    from jax._src.lib.mlir import ir
    from jax._src.pallas.triton import lowering as triton_lowering
    from native_split_worker import random_state
    from test_native_kernel import _setup
    from test_pallas_kernel import _custom_calls, cuda_target

    from solver.fluid.padded import SINGLE
    from solver.fluid.pallas_split import make_pallas_split_chunk
    from solver.fluid.step import make_geometry

    setup = _setup("D3Q19", (6, 5, 4), "float32", "trt", 2, True)
    chunk = make_pallas_split_chunk(setup, setup.shape, SINGLE, interpret=False)
    jitted = jax.jit(chunk, static_argnums=2, donate_argnums=0)
    state, geometry = random_state(setup), make_geometry(setup)  # eager: outside the mesh
    with cuda_target():
        lowered = jitted.trace(state, geometry, 3).lower(lowering_platforms=("cuda",))
    calls = _custom_calls(lowered.compiler_ir("stablehlo"))
    # even and odd sweeps in the loop, the last even sweep, the stream of the pairs
    assert [c.attributes["call_target_name"].value for c in calls] == ["__gpu$xla.gpu.triton"] * 4
    aliased = [str(c.attributes["output_operand_aliases"]).count("output_operand_alias")
               for c in calls]  # fmt: skip
    assert aliased == [1, 2, 1, 1], aliased
    for call in calls:
        triton_ir = ir.StringAttr(call.attributes["mhlo.backend_config"]["ir"]).value_bytes
        with triton_lowering._new_ir_context():
            assert ir.Module.parse(triton_ir).operation.verify()


@pytest.mark.long  # make gpu-check's two-device path, interpreted: the split itself is above
def test_gpu_check_compares_two_devices_with_one():
    env = fake_device_env()
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    args = ["--allow-cpu", "--edge", "8", "--steps", "3", "--lattices", "D3Q19", "--storages",
            "float32", "--kernels", "pallas", "--largest", "8"]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "solver.bench", "gpu-check", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "pallas on 2 devices (slabs along x, walls) against 1" in result.stdout
    assert "(within 1e-05)" in result.stdout
