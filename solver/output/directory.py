"""Whether a run can write into a directory, checked before the run starts.

A directory that cannot be made (under /proc, below a file, on a read-only mount, without
permission) otherwise surfaces as an OSError traceback deep in a writer. ``directory_problem``
makes the directory (and its parents) as the run would, writes and removes a probe file in it,
and returns the reason in words; ``check_directory`` raises it as a ConfigError for the key that
named the directory.
"""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

from solver.errors import ConfigError

ALLOWED = "a directory that can be created and written"


def _nearest_existing(path: Path) -> Path:
    candidate = path
    while not candidate.exists() and candidate.parent != candidate:
        candidate = candidate.parent
    return candidate


def _filesystem(path: Path) -> str:
    """`` (on proc, mounted at /proc)``: the filesystem holding `path`, when it can be told."""
    from solver.checkpoint.striping import filesystem_type

    fstype, mount_point = filesystem_type(path)
    return "" if fstype == "unknown" else f" (on {fstype}, mounted at {mount_point})"


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def directory_problem(path: str | Path) -> str | None:
    """None if `path` is (now) a directory this process can create files in; else the reason.

    The directory and its missing parents are created, as the writers would; an existing one is
    left as it is apart from a probe file made and removed at once.
    """
    path = Path(path).expanduser().absolute()
    existing = _nearest_existing(path)
    if existing.exists() and not existing.is_dir():
        what = "it" if existing == path else str(existing)
        return f"{what} is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.EPERM, errno.EACCES, errno.EROFS):
            return f"cannot create it in {existing}{_filesystem(existing)}: {_reason(error)}"
        return f"cannot create it: {_reason(error)}"
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as error:
        return f"cannot write into it{_filesystem(path)}: {_reason(error)}"
    return None


def check_directory(key: str, path: str | Path, hint: str = "") -> Path:
    """Make `path` ready for writing; ConfigError naming `key`, the path and the reason if not.

    Returns:
        the absolute path.
    """
    problem = directory_problem(path)
    if problem is not None:
        raise ConfigError(key, str(path), ALLOWED, hint=problem + (f" ({hint})" if hint else ""))
    return Path(path).expanduser().absolute()
