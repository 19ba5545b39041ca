"""Outputs made once per test session and shared by the pytest-xdist workers.

A module fixture is made once per worker that runs a test of its module, and xdist tears it down
whenever a worker's queue runs empty, so a reference run (a solver subprocess writing a
directory) was often made twice. ``shared_directory`` makes it once in the session's base
temporary directory, which every worker sees, under a file lock: a worker that asks while
another is making it waits for that one instead of making its own.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_directory(
    factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]
) -> Path:
    """``root/name``, filled by ``make(path)`` the first time any worker asks for it (a
    ``make`` that fails leaves no directory marked done, so the next asker tries again)."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # .../pytest-N/popen-gwK: the parent is the session's
    root = root / "shared-runs"
    root.mkdir(exist_ok=True)
    path = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"{name}.done"
        if not done.exists():
            path.mkdir(exist_ok=True)
            make(path)
            done.touch()
    return path
