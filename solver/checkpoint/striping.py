"""Lustre striping of checkpoint directories, set before anything is written into them.

A checkpoint of a large run is a few big files per process. On Lustre a file lives on
``stripe_count`` storage targets (OSTs) in ``stripe_size`` pieces; with the usual default of one
stripe, every process's multi-gigabyte file lands on a single target and the save is limited by
that target's bandwidth. ``lfs setstripe -c COUNT -S SIZE DIR`` on a directory sets the default
layout of the files created in it afterwards (Lustre Operations Manual, "Managing File Layout
(Striping) and Free Space"; existing files keep their layout), so the directory is striped right
after it is made and before Orbax writes into it. On any other filesystem no striping applies and
the result says so; a missing or failing ``lfs`` is reported, never raised, and the run goes on
with the filesystem's default layout. Nothing here logs: the caller logs the returned message once.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

LUSTRE_FSTYPE = "lustre"
LFS_TIMEOUT_S = 60

_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_SIZE_RE = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[kmgt]?)(?P<suffix>i?b)?", re.I)
_SIZE_FORMS = (
    "a positive whole number of bytes (1048576) or a number with a binary unit K, M, G or T "
    "(512K, 4M, 1.5G, 4MiB, 4MB; 1024-based, case-insensitive; a decimal only with a unit "
    "and only if it comes to whole bytes)"
)
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def parse_size(value: int | str) -> int:
    """A byte count from an integer or a size string: ``'4M'`` -> 4194304.

    Accepted: a positive ``int`` (not ``bool``); a string of digits (``'1048576'``); a number with
    a unit K, M, G or T, each a power of 1024, case-insensitive, optionally followed by ``B`` or
    ``iB`` (``'512K'``, ``'4MiB'``, ``'1gb'``). A decimal number is allowed only with a unit and
    only if the result is a whole number of bytes (``'1.5M'`` yes, ``'1.1K'`` no).

    Raises:
        ValueError: anything else (zero, negative, float, empty, unknown unit), naming the value
            and the accepted forms.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"size {value!r} is not valid: expected {_SIZE_FORMS}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"size {value!r} is not valid: expected {_SIZE_FORMS}")
        return value
    match = _SIZE_RE.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"size {value!r} is not valid: expected {_SIZE_FORMS}")
    number, unit, suffix = match["number"], match["unit"].lower(), match["suffix"]
    if unit == "" and (suffix is not None and suffix.lower() == "ib" or "." in number):
        raise ValueError(f"size {value!r} is not valid: expected {_SIZE_FORMS}")
    size = Decimal(number) * 1024 ** _UNITS[unit]
    if size <= 0 or size != size.to_integral_value():
        raise ValueError(f"size {value!r} is not valid: expected {_SIZE_FORMS}")
    return int(size)


def _decode_mount_field(field: str) -> str:
    """Undo the kernel's octal escapes in /proc/self/mounts (``\\040`` space, ``\\011`` tab,
    ``\\012`` newline, ``\\134`` backslash)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), field)


def _nearest_existing(path: Path) -> str:
    """The real path of `path`, or of its nearest existing ancestor if it does not exist yet."""
    candidate = os.path.abspath(path)
    while not os.path.exists(candidate):
        parent = os.path.dirname(candidate)
        if parent == candidate:
            break
        candidate = parent
    return os.path.realpath(candidate)


def _contains(mount_point: str, target: str) -> bool:
    """Whether `target` lies under `mount_point`, comparing whole path components."""
    if mount_point == "/":
        return target.startswith("/")
    return target == mount_point or target.startswith(mount_point.rstrip("/") + "/")


def filesystem_type(path: Path, mounts: Path = Path("/proc/self/mounts")) -> tuple[str, str]:
    """(fstype, mount point) of the filesystem holding `path`.

    The path may not exist yet: its nearest existing ancestor, resolved with ``os.path.realpath``,
    is looked up. The mount is the longest mount point in `mounts` (fstab format: device, mount
    point, fstype, ...) that contains the path component-wise (``/mnt/a`` does not contain
    ``/mnt/ab``); of equal mount points the last listed wins, as a later mount hides an earlier
    one. Octal escapes in mount points (``\\040`` etc.) are decoded.

    Returns:
        ``("unknown", "")`` if `mounts` cannot be read or no entry contains the path.
    """
    target = _nearest_existing(path)
    try:
        lines = mounts.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return ("unknown", "")
    best: tuple[str, str] = ("unknown", "")
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point, fstype = _decode_mount_field(fields[1]), fields[2]
        if _contains(mount_point, target) and len(mount_point) >= len(best[1]):
            best = (fstype, mount_point)
    return best


@dataclass(frozen=True)
class StripingResult:
    """What `prepare_directory` did.

    Attributes:
        applied: ``lfs setstripe`` ran and succeeded.
        fstype: filesystem type of the directory (``"unknown"`` if it could not be told).
        mount_point: where that filesystem is mounted (``""`` if unknown).
        command: the command line run, or that would have been run; None if none applies.
        message: one line for the log: what happened and why.
    """

    applied: bool
    fstype: str
    mount_point: str
    command: tuple[str, ...] | None
    message: str


def _not_positive(name: str, value: object) -> ValueError:
    return ValueError(f"{name}={value!r} is not valid: expected a positive byte count")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def prepare_directory(
    path: Path,
    stripe_count: int | None,
    stripe_size: int | None,
    mounts: Path = Path("/proc/self/mounts"),
    lfs: str = "lfs",
) -> StripingResult:
    """Create the checkpoint directory `path` and, on Lustre, set its stripe layout.

    The directory (and its parents) is created first, then its filesystem is looked up. On
    Lustre (fstype ``"lustre"``) with `stripe_count` or `stripe_size` given, ``lfs setstripe
    [-c COUNT] [-S SIZE] PATH`` runs on the directory before anything is written into it, so the
    files created in it inherit the layout. SIZE is passed in bytes; COUNT -1 means all OSTs
    (lfs's own meaning) and 0 the filesystem default. On Lustre with both None the default layout
    is kept and no command runs; on any other filesystem nothing runs.

    A missing `lfs` (not on PATH), a non-zero exit, a timeout (60 s) or a failure to start it is
    not raised: ``applied`` is False and the message names the command and the error (the first
    line of its stderr), and the run goes on with the default layout.

    Args:
        path: the checkpoint directory.
        stripe_count: number of OSTs per file, -1 for all, 0 for the default; None: not set.
        stripe_size: bytes per stripe (lfs wants a multiple of 64 KiB); None: not set.
        mounts: the mount table to read (fstab format).
        lfs: the ``lfs`` executable, looked up on PATH.

    Raises:
        ValueError: stripe_count below -1 or stripe_size not positive (a config error).
        OSError: the directory cannot be created.
    """
    if stripe_count is not None and (isinstance(stripe_count, bool) or stripe_count < -1):
        raise ValueError(
            f"stripe_count={stripe_count!r} is not valid: expected -1 (all OSTs), "
            "0 (filesystem default) or a positive number of OSTs"
        )
    if stripe_size is not None and (isinstance(stripe_size, bool) or stripe_size <= 0):
        raise _not_positive("stripe_size", stripe_size)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    fstype, mount_point = filesystem_type(path, mounts)
    where = f"checkpoint dir {path} is on {fstype} (mounted at {mount_point or '?'})"
    if fstype != LUSTRE_FSTYPE:
        return StripingResult(
            False, fstype, mount_point, None, f"{where}: not Lustre, no striping applies"
        )
    if stripe_count is None and stripe_size is None:
        return StripingResult(
            False,
            fstype,
            mount_point,
            None,
            f"{where}: no stripe count or size configured, the filesystem default layout is kept",
        )
    options: list[str] = []
    if stripe_count is not None:
        options += ["-c", str(stripe_count)]
    if stripe_size is not None:
        options += ["-S", str(stripe_size)]
    executable = shutil.which(lfs)
    if executable is None:
        command = (lfs, "setstripe", *options, str(path))
        return StripingResult(
            False,
            fstype,
            mount_point,
            command,
            f"{where}: {lfs!r} not found on PATH, could not run {shlex.join(command)}; "
            "keeping the default layout",
        )
    command = (executable, "setstripe", *options, str(path))
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=LFS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        error = f"timed out after {LFS_TIMEOUT_S} s"
    except OSError as exc:
        error = f"could not start: {exc}"
    else:
        if completed.returncode == 0:
            return StripingResult(
                True, fstype, mount_point, command, f"{where}: ran {shlex.join(command)}"
            )
        error = (
            _first_line(completed.stderr)
            or _first_line(completed.stdout)
            or f"exit status {completed.returncode}"
        )
    return StripingResult(
        False,
        fstype,
        mount_point,
        command,
        f"{where}: {shlex.join(command)} failed ({error}); keeping the default layout",
    )


def ocdbt_file_size(stripe_size: int | None, stripe_count: int | None, default: int) -> int:
    """Target size in bytes of each Orbax (OCDBT) data file (``ocdbt_target_data_file_size``).

    Orbax writes one set of data files per process. Capping each file's size splits a large shard
    into several files, which Lustre places on different storage targets, so many processes write
    to many targets at once.

    Rule: with `stripe_size` known, the whole multiple of the stripe width
    ``stripe_size * stripe_count`` (``stripe_count`` None, 0 or -1, whose width is not known here,
    count as 1) closest to `default` (ties round up), and at least one stripe width; without a
    stripe size, `default`. A file that is a whole number of stripe widths ends on a stripe
    boundary, so every target gets full stripes and no write covers only part of a stripe.

    Raises:
        ValueError: `default` or `stripe_size` not positive.
    """
    if default <= 0:
        raise _not_positive("default", default)
    if stripe_size is None:
        return default
    if stripe_size <= 0:
        raise _not_positive("stripe_size", stripe_size)
    width = stripe_size * (stripe_count if stripe_count is not None and stripe_count > 0 else 1)
    stripes = max(1, (default + width // 2) // width)
    return stripes * width
