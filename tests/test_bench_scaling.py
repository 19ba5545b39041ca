"""`python -m solver.bench scaling` runs every point and reports consistent figures (no timing).

Tiny grids and D2Q9: what is checked is the plumbing (workers under mpirun and with fake
devices, the table, the JSON), and D2Q9 compiles several times faster than the 3D lattices.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
Q_D2Q9 = 9
LOCAL_SIZE = 8
GLOBAL_SIZE = (16, 8)
MODES = ("weak", "strong")
MPI_AVAILABLE = shutil.which("mpirun") is not None and all(
    importlib.util.find_spec(m) is not None for m in ("mpi4py", "mpi4jax")
)
ROW_FIELDS = {
    "mode",
    "launch",
    "halo",
    "backend",
    "processes",
    "shards",
    "cores",
    "mesh",
    "global_shape",
    "local_shape",
    "ms_per_step",
    "ms_per_step_local",
    "mlups",
    "mlups_per_process",
    "bandwidth_gbs_per_process",
    "roofline_mlups_per_process",
    "fraction_of_roofline",
    "halo_fraction",
    "efficiency",
    "efficiency_without_halo",
}


def _command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "solver.bench", "scaling", *extra]


@pytest.fixture(scope="module")
def scaling(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """One run of the command: 1 and 2 fake devices, and 1 and 2 MPI ranks when available."""
    out = tmp_path_factory.mktemp("scaling") / "scaling.json"
    args = ["--lattice", "D2Q9", "--local-size", str(LOCAL_SIZE)]
    args += ["--global-size", ",".join(map(str, GLOBAL_SIZE)), "--steps", "2", "--repeats", "1"]
    args += ["--devices", "1,2", "--processes", "1,2" if MPI_AVAILABLE else "0"]
    args += ["--modes", ",".join(MODES), "--halos", "mpi,xla", "--json", str(out)]
    done = subprocess.run(_command(*args), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text())


def _check_row(row: dict) -> None:
    name = f"{row['mode']} {row['launch']} {row['backend']} x{row['shards']}"
    assert set(row) >= ROW_FIELDS, f"{name}: missing {ROW_FIELDS - set(row)}"
    blocks = zip(row["global_shape"], row["mesh"], strict=True)
    assert [g // m for g, m in blocks] == row["local_shape"], name
    expected = (row["shards"] * LOCAL_SIZE, LOCAL_SIZE) if row["mode"] == "weak" else GLOBAL_SIZE
    assert tuple(row["global_shape"]) == expected, name
    assert math.isfinite(row["ms_per_step"]) and row["ms_per_step"] > 0, name
    cells = math.prod(row["global_shape"])
    assert row["mlups"] == pytest.approx(cells / row["ms_per_step"] / 1e3, rel=1e-6), name
    # the roofline: every cell update reads and writes its q float32 populations once
    roofline = row["bandwidth_gbs_per_process"] * 1e9 / (2 * Q_D2Q9 * 4) / 1e6
    assert row["roofline_mlups_per_process"] == pytest.approx(roofline, rel=1e-6), name
    assert 0.0 <= row["halo_fraction"] <= 1.0, f"{name}: halo fraction {row['halo_fraction']}"
    for key in ("efficiency", "efficiency_without_halo"):
        assert math.isfinite(row[key]) and row[key] > 0, f"{name}: {key} {row[key]}"
    if row["shards"] == 1:
        assert row["efficiency"] == pytest.approx(1.0), name


@pytest.mark.long  # a benchmark's rows; the scaling worker's physics is in the equality tests
def test_fake_device_rows(scaling):
    done, payload = scaling
    assert "fake devices share" in done.stdout and "halo %" in done.stdout
    assert {"lattice", "steps", "repeats", "load_average_before", "rows"} <= set(payload)
    rows = [r for r in payload["rows"] if r["launch"] == "fake"]
    found = {(r["mode"], r["backend"], r["shards"], r["processes"]) for r in rows}
    assert found == {(m, b, n, 1) for m in MODES for b, n in (("single", 1), ("xla", 2))}
    for row in rows:
        _check_row(row)


@pytest.mark.long  # the same benchmark run as test_fake_device_rows (one fixture, 57 s)
def test_mpi_rows(scaling):
    if not MPI_AVAILABLE:
        pytest.skip("mpirun, mpi4py or mpi4jax missing: no MPI rows")
    _, payload = scaling
    rows = [r for r in payload["rows"] if r["launch"] == "mpirun"]
    found = {(r["mode"], r["backend"], r["processes"]) for r in rows}
    expected = {(m, b, p) for m in MODES for b, p in (("single", 1), ("mpi", 2), ("xla", 2))}
    assert found == expected
    for row in rows:
        _check_row(row)
        assert row["shards"] == row["processes"]


def test_strong_size_that_does_not_divide_is_refused_before_any_worker():
    args = ["--lattice", "D2Q9", "--global-size", "15,8", "--processes", "0", "--devices", "2"]
    done = subprocess.run(
        _command(*args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "15 cells along x do not divide into 2 shards" in done.stderr


@pytest.mark.long  # plumbing only: the split kernel is checked in tests/test_native_split.py
def test_native_kernel_rows(tmp_path):
    out = tmp_path / "scaling.json"
    args = ["--lattice", "D2Q9", "--local-size", str(LOCAL_SIZE), "--kernel", "native"]
    args += ["--steps", "3", "--repeats", "1", "--devices", "1,2", "--processes", "0"]
    args += ["--global-size", "16,8", "--modes", "weak", "--json", str(out)]
    done = subprocess.run(_command(*args), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kernel native" in done.stdout
    payload = json.loads(out.read_text())
    assert payload["kernel"] == "native"
    assert {(r["backend"], r["shards"]) for r in payload["rows"]} == {("single", 1), ("xla", 2)}
    for row in payload["rows"]:
        _check_row(row)
