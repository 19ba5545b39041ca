"""`python -m solver` across devices and processes: same files, clear errors.

Real ``mpirun`` jobs (both halo back ends) against a single-process run of the same case; the
cavity has resting and moving walls, so its fields must match bit for bit. Every run compiles
as the tests' fast compiles do (``FAST_COMPILE``: no FMA, so a split program rounds as one
device's; four ranks compiling at once on two cores took 20 s each at the production level):
what is checked here is the app's plumbing across processes, and
tests/test_distributed_equality.py checks the production code generation's decompositions.
"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
from mpi import mpirun
from shared_runs import shared_directory
from solver_cli import FAST_COMPILE, run_solver

from solver.output.fields import check_xdmf

ROOT = Path(__file__).resolve().parent.parent
# 5 chunks: the first compiles, the next 4 are judged by the straggler detection (3 in a row)
CASE = ["case=cavity", "case.resolution=14", "steps=60", "output.every=12", "output.png=false"]
# the xla job's rank 1 spends this much extra host time per chunk (test-only variable): its
# telemetry must name it a straggler (tests/test_telemetry_mpi.py has the long variant that also
# scrapes both ranks' gauges from rank 0's endpoint)
STRAGGLER_DELAY = {"SOLVER_TELEMETRY_INJECT_DELAY": "1:0.3"}


def solver(args: list[str], env_extra: dict | None = None) -> subprocess.CompletedProcess:
    return run_solver(args, {"XLA_FLAGS": FAST_COMPILE, **(env_extra or {})})


def assert_same_field_files(ours: Path, reference: Path) -> None:
    """fields.h5 of ``ours`` (read through its virtual datasets when several processes wrote
    it) holds every group, dataset (bit for bit) and attribute of ``reference``'s; the same
    fields.xdmf."""
    with h5py.File(ours / "fields.h5", "r") as a, h5py.File(reference / "fields.h5", "r") as b:
        assert sorted(a) == sorted(b)

        def compare(name: str, item) -> None:
            other = a[name] if name else a
            assert set(other.attrs) == set(item.attrs), name
            for key, value in item.attrs.items():
                assert np.array_equal(other.attrs[key], value), f"{name}: attribute {key}"
            if isinstance(item, h5py.Dataset):
                assert other.shape == item.shape and other.dtype == item.dtype, name
                assert np.array_equal(other[...], item[...]), f"{name} differs from 1 process"

        compare("", b)
        b.visititems(compare)
    assert (ours / "fields.xdmf").read_text() == (reference / "fields.xdmf").read_text()
    assert check_xdmf(ours / "fields.xdmf") == []


@pytest.fixture(scope="module")
def single_run(tmp_path_factory) -> Path:
    """The one-process run (made once for all pytest workers)."""

    def make(out: Path) -> None:
        result = solver([*CASE, "domain=single", f"hydra.run.dir={out}"])
        assert result.returncode == 0, result.stderr[-2000:]

    return shared_directory(tmp_path_factory, "distributed-app-single", make)


@pytest.mark.parametrize(
    ("processes", "halo", "mesh"),
    [
        # make test-long (~24 s): the mpi halo's files over four processes on two split axes
        # (below) hold what two processes on one axis check
        pytest.param(2, "mpi", "[2,1]", marks=pytest.mark.long),
        (2, "xla", "auto"),
        (4, "mpi", "[2,2]"),
    ],
)
def test_mpirun_processes_match_single(single_run, tmp_path, processes, halo, mesh):
    out = tmp_path / "run"
    overrides = [f"domain.mesh={mesh}", f"domain.halo={halo}", f"hydra.run.dir={out}",
                 "telemetry.halo_every=2"]  # fmt: skip
    delay = STRAGGLER_DELAY if halo == "xla" else {}
    env = {"XLA_FLAGS": FAST_COMPILE, **delay}
    result = mpirun(processes, ["-m", "solver", *CASE, *overrides], extra_env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "run.json").read_text())
    stragglers = summary["telemetry"]["stragglers"]
    # the exchange probe ran in chunks 1 and 3 (0 compiles), on every rank
    with (out / "telemetry.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    probed = [(int(r["chunk"]), int(r["rank"])) for r in rows if r["exchange_s"]]
    assert sorted(probed) == [(c, r) for c in (1, 3) for r in range(processes)], probed
    assert all(float(r["exchange_s"]) > 0 for r in rows if r["exchange_s"])
    if delay:
        assert [s["rank"] for s in stragglers] == [1], stragglers
        assert "straggler: rank 1 on host" in (out / "logs" / "process_0.log").read_text()
    else:
        assert stragglers == [], stragglers
    assert summary["status"] == "completed"
    assert summary["domain"]["processes"] == processes
    assert summary["domain"]["halo"] == halo
    assert result.stdout.count("wall time") == 1, "only process 0 prints the summary"
    for rank in range(processes):
        log = (out / "logs" / f"process_{rank}.log").read_text()
        assert f"process {rank}" in log and "domain: mesh" in log
    # every process wrote its own block; fields.h5 reads as the one-process file
    parts = sorted(p.name for p in (out / "fields.h5.parts").iterdir())
    assert parts == [f"process_{rank:05d}.h5" for rank in range(processes)]
    with h5py.File(out / "fields.h5", "r") as f:
        assert f["step_00000060/density"].is_virtual
    assert_same_field_files(out, single_run)
    assert not (single_run / "fields.h5.parts").exists()


def test_mesh_not_matching_processes_is_config_error(tmp_path):
    result = mpirun(
        2,
        [
            "-m",
            "solver",
            *CASE,
            "domain.mesh=[2,2]",
            "domain.halo=mpi",
            f"hydra.run.dir={tmp_path}",
        ],
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "domain.mesh" in result.stderr and "2 processes" in result.stderr
    assert "Traceback" not in result.stderr


FAKE8 = {"XLA_FLAGS": f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}"}


@pytest.mark.parametrize(
    ("mesh", "words"),
    [
        ("[3,1]", ["16 cells along x", "3 shards"]),
        ("[4,4]", ["needs 16 devices", "8 are available"]),
        ("[2,2,2]", ["2 integers"]),
    ],
)
def test_bad_mesh_is_config_error(tmp_path, mesh, words):
    result = solver([*CASE, f"domain.mesh={mesh}", f"hydra.run.dir={tmp_path}"], FAKE8)
    assert result.returncode == 2, result.stderr[-2000:]
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("error: bad configuration: domain.mesh")
    for word in words:
        assert word in line


def test_fake_devices_app_run_matches_single(single_run, tmp_path):
    out = tmp_path / "run"
    result = solver([*CASE, "domain.mesh=[2,4]", f"hydra.run.dir={out}"], FAKE8)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((out / "run.json").read_text())
    assert summary["domain"]["mesh"] == [2, 4] and len(summary["devices"]) == 8
    # one process with several devices: one file, as on one device
    assert not (out / "fields.h5.parts").exists()
    assert_same_field_files(out, single_run)
