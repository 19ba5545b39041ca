"""Launching real MPI jobs from tests: ``mpirun`` with the options this machine needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from solver_cli import FAST_COMPILE

ROOT = Path(__file__).resolve().parent.parent


def mpirun_or_skip() -> str:
    """Path of Open MPI's mpirun and mpi4jax importable, else skip (say why)."""
    path = shutil.which("mpirun")
    if path is None:
        pytest.skip("mpirun not found (make test installs Open MPI when run as root)")
    try:
        import mpi4jax  # noqa: F401
    except ImportError as err:
        pytest.skip(f"mpi4jax not importable: {err}")
    return path


def mpi_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # one device per process, compiled fast (tests/solver_cli.py) unless extra says otherwise
    env["XLA_FLAGS"] = FAST_COMPILE
    env.update(
        JAX_PLATFORMS="cpu",
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",  # 4 ranks on 2 cores
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


def mpirun(
    n: int, args: list[str], timeout: float = 600, extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    """``mpirun -n N python ARGS`` from the repository root; output captured as text."""
    command = [mpirun_or_skip(), "-n", str(n), "--bind-to", "none", sys.executable, *args]
    return subprocess.run(
        command,
        cwd=ROOT,
        env=mpi_env(extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
