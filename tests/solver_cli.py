"""Running ``python -m solver`` from tests, on the CPU, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
