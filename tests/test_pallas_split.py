"""The Pallas kernel split over devices along x (solver/fluid/pallas_split.py), in interpret
mode on the CPU: one shard (the periodic halo) and 2 fake devices (xla halo) against the
one-device Pallas chunk — moving walls with links across the shard faces, a body force, the
Smagorinsky model, float16 storage, even and odd chunk lengths.

Bitwise with XLA:CPU's fused multiply-adds off (``--xla_cpu_max_isa=AVX``): the split's sweeps
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

import pytest
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
        env=fake_device_env("--xla_cpu_max_isa=AVX"),
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
