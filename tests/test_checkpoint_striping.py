"""Lustre striping of checkpoint directories (solver/checkpoint/striping.py).

Lustre cannot run here, so these tests fake both ends: a mounts file written in tmp_path (fstab
format, as /proc/self/mounts) that declares chosen tmp_path directories to be Lustre or ext4 and
is passed with ``mounts=``, and a fake ``lfs``, an executable shell script in tmp_path put first
on PATH that appends its argv to a log file and exits 0 (or prints an error and exits 1). The
tests check which command line would reach a real ``lfs``, not that Lustre applies the layout.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from solver.checkpoint.striping import (
    StripingResult,
    filesystem_type,
    ocdbt_file_size,
    parse_size,
    prepare_directory,
)

MiB = 1024**2
GiB = 1024**3
LFS_ERROR = "error: setstripe: cannot set default layout: Operation not permitted"


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _write_mounts(tmp_path: Path, entries: list[tuple[str, str]]) -> Path:
    """A mounts file: "/" on ext4, then (escaped mount point, fstype) entries in order."""
    lines = ["/dev/sda1 / ext4 rw,relatime 0 0"]
    lines += [f"dev{i} {point} {fstype} rw 0 0" for i, (point, fstype) in enumerate(entries)]
    mounts = tmp_path / "mounts"
    mounts.write_text("\n".join(lines) + "\n")
    return mounts


@pytest.fixture
def lustre(tmp_path: Path) -> tuple[Path, Path]:
    """(Lustre mount directory, mounts file): tmp_path/lus on Lustre, the rest on ext4."""
    root = tmp_path / "lus"
    root.mkdir()
    return root, _write_mounts(tmp_path, [(_real(root), "lustre")])


def _fake_lfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> Path:
    """Put a fake `lfs` first on PATH; returns its log (one line per call, args tab-separated)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "lfs.log"
    log.touch()
    body = f"printf '%s\\t' \"$@\" >> '{log}'\nprintf '\\n' >> '{log}'\n"
    if fail:
        body += f"echo '{LFS_ERROR}' >&2\necho 'second line' >&2\nexit 1\n"
    else:
        body += "exit 0\n"
    script = bin_dir / "lfs"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return log


def _calls(log: Path) -> list[list[str]]:
    return [line.split("\t")[:-1] for line in log.read_text().splitlines()]


# --- parse_size ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("4M", 4 * MiB),
        ("1G", GiB),
        ("512K", 512 * 1024),
        ("2T", 2 * 1024**4),
        ("1048576", 1048576),
        (1048576, 1048576),
        ("4m", 4 * MiB),
        ("4MB", 4 * MiB),
        ("4MiB", 4 * MiB),
        ("4mib", 4 * MiB),
        (" 64 K ", 64 * 1024),
        ("100B", 100),
        ("1.5M", 3 * MiB // 2),
        ("0.5K", 512),
    ],
)
def test_parse_size_accepts(value: int | str, expected: int) -> None:
    assert parse_size(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "0",
        0,
        -1,
        "-4M",
        True,
        False,
        1.5,
        "1.5",
        "2.0",
        "1.1K",
        "4X",
        "",
        "M",
        "4iB",
        "1e6",
        "4 MM",
        None,
    ],
)
def test_parse_size_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="K, M, G or T") as error:
        parse_size(value)  # type: ignore[arg-type]
    message = str(error.value)
    assert repr(value) in message
    assert "\n" not in message


# --- filesystem_type ----------------------------------------------------------------------------


def test_filesystem_type_longest_prefix(tmp_path: Path) -> None:
    outer = tmp_path / "scratch"
    inner = outer / "project"
    inner.mkdir(parents=True)
    mounts = _write_mounts(tmp_path, [(_real(inner), "lustre"), (_real(outer), "nfs")])
    assert filesystem_type(inner / "run", mounts) == ("lustre", _real(inner))
    assert filesystem_type(outer, mounts) == ("nfs", _real(outer))
    assert filesystem_type(tmp_path, mounts) == ("ext4", "/")


def test_filesystem_type_matches_whole_components(tmp_path: Path) -> None:
    (tmp_path / "mnt" / "a").mkdir(parents=True)
    (tmp_path / "mnt" / "ab").mkdir()
    mounts = _write_mounts(tmp_path, [(_real(tmp_path / "mnt" / "a"), "lustre")])
    assert filesystem_type(tmp_path / "mnt" / "ab", mounts) == ("ext4", "/")
    assert filesystem_type(tmp_path / "mnt" / "a", mounts) == ("lustre", _real(tmp_path / "mnt/a"))


def test_filesystem_type_decodes_octal_escapes(tmp_path: Path) -> None:
    mount_dir = tmp_path / "lus tre\\x"
    mount_dir.mkdir()
    escaped = _real(mount_dir).replace("\\", "\\134").replace(" ", "\\040")
    mounts = _write_mounts(tmp_path, [(escaped, "lustre")])
    assert filesystem_type(mount_dir / "ckpt", mounts) == ("lustre", _real(mount_dir))


def test_filesystem_type_nonexistent_path_uses_ancestor(lustre: tuple[Path, Path]) -> None:
    root, mounts = lustre
    missing = root / "not" / "yet" / "there"
    assert filesystem_type(missing, mounts) == ("lustre", _real(root))
    assert not (root / "not").exists()


def test_filesystem_type_follows_symlinks(tmp_path: Path, lustre: tuple[Path, Path]) -> None:
    root, mounts = lustre
    link = tmp_path / "link"
    link.symlink_to(root)
    assert filesystem_type(link / "ckpt", mounts) == ("lustre", _real(root))


def test_filesystem_type_last_of_equal_mounts_wins(tmp_path: Path) -> None:
    point = _real(tmp_path)
    mounts = _write_mounts(tmp_path, [(point, "tmpfs"), (point, "lustre")])
    assert filesystem_type(tmp_path, mounts) == ("lustre", point)


def test_filesystem_type_unreadable_mounts(tmp_path: Path) -> None:
    assert filesystem_type(tmp_path, tmp_path / "no-such-mounts") == ("unknown", "")


# --- prepare_directory --------------------------------------------------------------------------


def test_prepare_directory_lustre_runs_setstripe(
    tmp_path: Path, lustre: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, mounts = lustre
    log = _fake_lfs(tmp_path, monkeypatch)
    directory = root / "run" / "checkpoints"
    result = prepare_directory(directory, stripe_count=4, stripe_size=4 * MiB, mounts=mounts)
    assert directory.is_dir()
    assert _calls(log) == [["setstripe", "-c", "4", "-S", "4194304", str(directory)]]
    command = (str(tmp_path / "bin" / "lfs"), "setstripe", "-c", "4", "-S", "4194304")
    assert result == StripingResult(
        applied=True,
        fstype="lustre",
        mount_point=_real(root),
        command=(*command, str(directory)),
        message=result.message,
    )
    assert "setstripe -c 4 -S 4194304" in result.message
    assert "\n" not in result.message


def test_prepare_directory_count_only(
    tmp_path: Path, lustre: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, mounts = lustre
    log = _fake_lfs(tmp_path, monkeypatch)
    result = prepare_directory(root / "ckpt", stripe_count=-1, stripe_size=None, mounts=mounts)
    assert result.applied
    assert _calls(log) == [["setstripe", "-c", "-1", str(root / "ckpt")]]


def test_prepare_directory_lustre_without_settings_keeps_default(
    tmp_path: Path, lustre: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, mounts = lustre
    log = _fake_lfs(tmp_path, monkeypatch)
    result = prepare_directory(root / "ckpt", stripe_count=None, stripe_size=None, mounts=mounts)
    assert (root / "ckpt").is_dir()
    assert _calls(log) == []
    assert (result.applied, result.fstype, result.command) == (False, "lustre", None)
    assert "default layout" in result.message


def test_prepare_directory_not_lustre_runs_nothing(
    tmp_path: Path, lustre: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, mounts = lustre
    log = _fake_lfs(tmp_path, monkeypatch)
    directory = tmp_path / "local" / "ckpt"
    result = prepare_directory(directory, stripe_count=4, stripe_size=4 * MiB, mounts=mounts)
    assert directory.is_dir()
    assert _calls(log) == []
    assert (result.applied, result.fstype, result.mount_point, result.command) == (
        False,
        "ext4",
        "/",
        None,
    )
    assert "not Lustre" in result.message
    assert "ext4" in result.message


def test_prepare_directory_unreadable_mounts_does_not_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_lfs(tmp_path, monkeypatch)
    result = prepare_directory(tmp_path / "ckpt", 4, 4 * MiB, mounts=tmp_path / "no-such-mounts")
    assert (tmp_path / "ckpt").is_dir()
    assert (result.applied, result.fstype, result.command) == (False, "unknown", None)
    assert _calls(log) == []


def test_prepare_directory_lfs_failure_is_reported(
    tmp_path: Path, lustre: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, mounts = lustre
    log = _fake_lfs(tmp_path, monkeypatch, fail=True)
    result = prepare_directory(root / "ckpt", stripe_count=8, stripe_size=None, mounts=mounts)
    assert _calls(log) == [["setstripe", "-c", "8", str(root / "ckpt")]]
    assert not result.applied
    assert result.command is not None and result.command[1:3] == ("setstripe", "-c")
    assert LFS_ERROR in result.message
    assert "setstripe -c 8" in result.message
    assert "second line" not in result.message
    assert "\n" not in result.message


def test_prepare_directory_lfs_missing_is_reported(
    tmp_path: Path, lustre: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, mounts = lustre
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    result = prepare_directory(root / "ckpt", stripe_count=4, stripe_size=MiB, mounts=mounts)
    assert (root / "ckpt").is_dir()
    assert not result.applied
    assert result.command == ("lfs", "setstripe", "-c", "4", "-S", str(MiB), str(root / "ckpt"))
    assert "not found" in result.message


@pytest.mark.parametrize(("count", "size"), [(-2, None), (None, 0), (None, -MiB), (True, None)])
def test_prepare_directory_rejects_bad_settings(
    tmp_path: Path, lustre: tuple[Path, Path], count: int | None, size: int | None
) -> None:
    root, mounts = lustre
    with pytest.raises(ValueError, match="stripe_"):
        prepare_directory(root / "ckpt", count, size, mounts=mounts)
    assert not (root / "ckpt").exists()


# --- ocdbt_file_size ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stripe_size", "stripe_count", "default", "expected"),
    [
        (None, 4, 2 * GiB, 2 * GiB),  # no stripe size: the default
        (None, None, 123, 123),
        (4 * MiB, 4, 2 * GiB, 2 * GiB),  # default already a whole number of stripe widths
        (MiB, 3, 10 * MiB, 9 * MiB),  # 10/3 = 3.33 widths -> 3
        (MiB, 3, 11 * MiB, 12 * MiB),  # 11/3 = 3.67 widths -> 4
        (2, 1, 3, 4),  # a tie rounds up
        (4 * MiB, 8, MiB, 32 * MiB),  # at least one stripe width
        (4 * MiB, -1, 10 * MiB, 12 * MiB),  # all OSTs: width unknown, one stripe
        (4 * MiB, 0, 10 * MiB, 12 * MiB),
        (4 * MiB, None, 9 * MiB, 8 * MiB),
    ],
)
def test_ocdbt_file_size(
    stripe_size: int | None, stripe_count: int | None, default: int, expected: int
) -> None:
    assert ocdbt_file_size(stripe_size, stripe_count, default) == expected


@pytest.mark.parametrize(("stripe_size", "default"), [(None, 0), (MiB, -1), (0, GiB), (-MiB, GiB)])
def test_ocdbt_file_size_rejects(stripe_size: int | None, default: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        ocdbt_file_size(stripe_size, 4, default)
