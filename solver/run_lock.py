"""One run per run directory.

Two runs writing into one directory overwrite each other's checkpoints and fields (two runs
started in the same second share Hydra's default ``outputs/<case>/<date_time>``; a resubmitted
job may start while the first still runs). Process 0 of a run holds an exclusive ``flock`` on
``<run dir>/.run.lock`` for the run's lifetime; the kernel drops it when the process ends, a
crash included, so a later run in the same directory (a resume) always gets it. A second run
finds it held and stops before it writes anything.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from contextlib import ExitStack
from pathlib import Path

LOCK_NAME = ".run.lock"

log = logging.getLogger("solver")


def hold_run_dir(output_dir: Path, cleanup: ExitStack) -> str | None:
    """Take ``output_dir``'s lock until ``cleanup`` closes (or the process ends).

    Returns:
        None when this run holds it (or the filesystem has no ``flock``: then unprotected, with
        a warning), else who holds it ("pid N on HOST").
    """
    path = Path(output_dir) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 256).decode(errors="replace").strip() or "holder unknown"
        os.close(fd)
        return holder
    except OSError as err:  # e.g. a Lustre mount without the flock option
        os.close(fd)
        log.warning("run dir: no lock on %s (%s): two runs in it would not be stopped", path, err)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    cleanup.callback(os.close, fd)  # closing the descriptor drops the lock
    return None
