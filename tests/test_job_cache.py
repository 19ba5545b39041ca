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
from solver_cli import FAST_COMPILE, run_solver

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


def test_resumed_run_on_a_mesh_lowers_the_fresh_runs_chunk(tmp_path):
    """A run resumed from its checkpoint on a 2 x 1 mesh lowers the chunk to the program the
    fresh run compiled, so a requeued job loads it from the cache. JAX's key hashes the
    program's argument shardings: a fresh state laid out as XLA propagated it (without the
    mesh axis of size 1) against a restored one with every axis named gave a second program on
    every resume (found in the Slurm requeue's process logs, 2026-12-07)."""
    cache = tmp_path / "cache"
    env = {
        "XLA_FLAGS": f"--xla_force_host_platform_device_count=2 {FAST_COMPILE}",
        "JAX_COMPILATION_CACHE_DIR": str(cache),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    run_dir = tmp_path / "run"
    args = ["case=cavity", "case.resolution=8", "chunk=10", "output=none", "telemetry=none",
            "checkpoint.every_steps=10", "domain.mesh=[2,1]", "domain.halo=xla",
            f"hydra.run.dir={run_dir}"]  # fmt: skip
    first = run_solver([*args, "steps=20"], env, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    chunks = sorted(p.name for p in cache.glob("jit_chunk-*"))
    assert len(chunks) == 1, f"expected one chunk program in the cache, found {chunks}"
    second = run_solver([*args, "steps=40"], env, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = json.loads((run_dir / "run.json").read_text())["checkpoint"]["resumed_from"]
    assert resumed["step"] == 20, resumed
    assert sorted(p.name for p in cache.glob("jit_chunk-*")) == chunks, (
        "the resumed run compiled another chunk program"
    )
