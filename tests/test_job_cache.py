"""launch/solver_job.sh keeps JAX's persistent compilation cache on the shared filesystem: a
second job (a requeue, or the next job of the same case) loads the compiled chunks instead of
compiling them. Runs the job body without Slurm: a stand-in ``srun`` runs its command once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JOB_BODY = REPO / "launch" / "solver_job.sh"
CASE = ("case=cavity", "case.resolution=8", "steps=10", "chunk=10", "output=none",
        "checkpoint=none", "telemetry=none", "fluid.collision=bgk")  # fmt: skip
FAKE_SRUN = """#!/bin/bash
while [[ $1 == -* ]]; do shift; done
exec "$@"
"""


def _job(tmp_path: Path, run_dir: Path, **extra: str) -> dict:
    """Source the job body as the batch shell would (one task, no GPUs, no preflight); the
    run's run.json."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}  # conftest's cache
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        SOLVER_ROOT=str(REPO),
        SOLVER_PYTHON=sys.executable,
        SOLVER_RUN_DIR=str(run_dir),
        PREFLIGHT="0",
        SLURM_JOB_NAME="cache",
        SLURM_JOB_ID="1",
        SLURM_NTASKS="1",
        SLURM_NTASKS_PER_NODE="1",
        SLURM_GPUS_PER_NODE="0",
        SLURM_JOB_NODELIST="localhost",
        # CPU programs of a 16^2 cavity compile in well under JAX's 1 s default
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        **extra,
    )
    result = subprocess.run(
        ["bash", "-c", f'source {JOB_BODY} "$@"', "job", *CASE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((run_dir / "run.json").read_text())


@pytest.mark.long  # two job bodies, 7-18 s; the job script itself runs in make test (test_slurm)
def test_second_job_loads_compiled_programs_from_the_cache(tmp_path):
    first_dir = tmp_path / "first"
    cache = first_dir / "jax_cache"  # the default: shared by the requeues of one job
    first = _job(tmp_path, first_dir)
    entries = {p.name for p in cache.iterdir() if p.name.startswith("jit_")}
    assert entries, f"no cache entries in {cache}: {sorted(p.name for p in cache.iterdir())}"
    # another job naming the same directory loads them (and writes nothing new)
    second = _job(tmp_path, tmp_path / "second", JAX_COMPILATION_CACHE_DIR=str(cache))
    assert {p.name for p in cache.iterdir() if p.name.startswith("jit_")} == entries
    assert second["compile_time_s"] < first["compile_time_s"], (first, second)
