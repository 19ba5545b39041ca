"""Running ``python -m solver`` from tests, on the CPU, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from solver import xla_options

ROOT = Path(__file__).resolve().parent.parent
# XLA_FLAGS for runs whose arithmetic a test does not examine, or compares only with runs
# compiled alike: no LLVM optimisation, so the compilation (most of a small run's time) is
# shorter, and XLA:CPU's older fusion emitter (LLVM IR straight from each fusion, not through the
# MLIR pipelines of the default one), which compiles in half the time or less again (measured
# 2026-12-07 at -O0 on a 2-core machine, alternated: a D3Q19 PSM duct's coupled chunk
# 11.4-14.2 -> 7.9-10.0 s, a lid-driven cavity's chunk 1.2-1.7 -> 0.5-0.7 s, a 200-sphere
# body chunk 2.8-3.3 -> 1.3-1.5 s; but it turns every scatter into a loop of its own: keep
# scatters out of the hot code, docs/performance.md "Start-up and compile time"). That emitter
# contracts a multiply and an add into an FMA even at -O0, differently for different array
# shapes (a D2Q9 channel on 2 x 2 devices then differs from one device by 2e-7, measured); with
# the instruction set capped at AVX there is no FMA instruction, and a split run rounds as the
# whole one does again. (x86 only: the CI and development machines; on another CPU the ISA cap
# would need its counterpart there.)
# jaxlib 0.11 has no older emitter (nor its option, which would abort a run started with it in
# XLA_FLAGS): there the new emitters at -O0 under the same AVX cap (solver/xla_options.py).
FAST_CODEGEN = xla_options.known({"xla_cpu_use_fusion_emitters": False, "xla_cpu_max_isa": "AVX"})
FAST_COMPILE = xla_options.as_flags({"xla_backend_optimization_level": 0, **FAST_CODEGEN})
# XLA_FLAGS of a run long enough that its stepping outweighs its compilation (thousands of
# steps): the production level, whose code runs several times faster (measured 2026-12-07 in the
# whole suite: the twin experiment's three cylinder runs 29 s at this level, 86 s with
# FAST_COMPILE; a 254^2 cavity's 3,000 steps and their resumes 49 -> 102 s)
PRODUCTION = {"XLA_FLAGS": ""}
# FAST_COMPILE for a program compiled in the test's own process: jax.jit(..., compiler_options=)
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0, **FAST_CODEGEN}


def child_env(extra: dict | None = None) -> dict:
    """The environment of a run a test starts: CPU, compiled with FAST_COMPILE unless ``extra``
    (or the test's own environment) sets XLA_FLAGS."""
    return {"XLA_FLAGS": FAST_COMPILE, **os.environ, "JAX_PLATFORMS": "cpu", **(extra or {})}


def run_solver(
    args: list[str], env_extra: dict | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``python -m solver ARGS`` in ``child_env(env_extra)``; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "solver", *args],
        cwd=ROOT,
        env=child_env(env_extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
