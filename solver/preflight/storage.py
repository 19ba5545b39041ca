"""Write and read speed of the checkpoint directory, every process at once (as a checkpoint
save writes), and the Lustre striping the files there get.

Each process writes one file of ``size_mib`` MiB in 4 MiB pieces, fsyncs it, asks the kernel
to drop it from the page cache (``posix_fadvise(DONTNEED)``), reads it back and checks its
digest, then deletes it. Speeds are MB/s (1e6 bytes per second) from wall time, fsync included.
Dropping the cache is a request: a filesystem that keeps the pages anyway reports a read speed
of memory, which the report cannot tell apart.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from solver.checkpoint.striping import LFS_TIMEOUT_S, LUSTRE_FSTYPE, filesystem_type

PIECE_BYTES = 4 * 1024 * 1024


def speed_test(directory: Path, rank: int, size_mib: int) -> dict:
    """This process's write and read speed in ``directory`` (created if missing).

    Returns:
        {"rank", "host", "path", "bytes", "write_mbps", "read_mbps", "ok"} (ok: the bytes read
        back are the bytes written).
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".preflight_{socket.gethostname()}_{rank}_{os.getpid()}.bin"
    piece = os.urandom(PIECE_BYTES)
    total = max(1, size_mib) * 1024 * 1024
    pieces = total // PIECE_BYTES
    tail = piece[: total - pieces * PIECE_BYTES]
    written = hashlib.sha256()
    try:
        start = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(pieces):
                os.write(fd, piece)
                written.update(piece)
            if tail:
                os.write(fd, tail)
                written.update(tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        write_s = time.perf_counter() - start
        _drop_cache(path)
        read = hashlib.sha256()
        start = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(PIECE_BYTES):
                read.update(chunk)
        read_s = time.perf_counter() - start
    finally:
        path.unlink(missing_ok=True)
    return {
        "rank": rank,
        "host": socket.gethostname(),
        "path": str(directory),
        "bytes": total,
        "write_mbps": total / write_s / 1e6,
        "read_mbps": total / read_s / 1e6,
        "ok": read.digest() == written.digest(),
    }


def _drop_cache(path: Path) -> None:
    if not hasattr(os, "posix_fadvise"):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def striping(directory: Path, mounts: Path = Path("/proc/self/mounts"), lfs: str = "lfs") -> dict:
    """The directory's filesystem and, on Lustre, its default layout (``lfs getstripe -d``).

    Returns:
        {"fstype", "mount_point", "layout"}: layout is lfs's output as one line, or a line
        saying why there is none (not Lustre, lfs missing or failing).
    """
    fstype, mount_point = filesystem_type(directory, mounts)
    out = {"fstype": fstype, "mount_point": mount_point, "layout": None}
    if fstype != LUSTRE_FSTYPE:
        out["layout"] = f"not Lustre ({fstype}): no striping"
        return out
    executable = shutil.which(lfs)
    if executable is None:
        out["layout"] = f"{lfs!r} not found on PATH: layout unknown"
        return out
    try:
        done = subprocess.run(
            [executable, "getstripe", "-d", str(directory)],
            capture_output=True, text=True, timeout=LFS_TIMEOUT_S, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        out["layout"] = f"lfs getstripe failed: {err}"
        return out
    text = done.stdout if done.returncode == 0 else done.stderr
    out["layout"] = " ".join(text.split()) or f"lfs getstripe exited {done.returncode}"
    return out
