"""Running ``python -m solver`` from tests, on the CPU, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# XLA_FLAGS for runs whose arithmetic a test does not examine, or compares only with runs
# compiled alike: no LLVM optimisation, so the compilation (most of a small run's time) is
# shorter, and without FMA contraction a split run rounds as the whole one does.
FAST_COMPILE = "--xla_backend_optimization_level=0"
# the same for a program compiled in the test's own process: jax.jit(..., compiler_options=)
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0}


def run_solver(
    args: list[str], env_extra: dict | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``python -m solver ARGS``; output captured as text."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "solver", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
