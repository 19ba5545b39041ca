"""Coupled runs through the run loop: decompositions, processes, stop and resume.

A tiny settling sphere (a 30 x 30 x 45 mm box at 4 cells per diameter: 10 x 10 x 14 nodes with
the walls) keeps every run to a few seconds after compiling. The bodies are replicated on every
shard and their force is a sum over shards, so a split run adds the same cell forces in another
order: equal to one device to float32 round-off, not bit for bit (the bound below).
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from hooks import SignalAt
from mpi import mpirun
from solver_cli import FAST_COMPILE, run_solver

from solver.api import compose_config
from solver.errors import PreemptedError
from solver.run import simulate

TINY = [
    "case=settling_sphere", "fluid=d3q19", "coupling=psm", "case.box=[0.03,0.03,0.045]",
    "case.resolution=4", "case.start_gap=0.015", "steps=24", "chunk=12", "output.every=12",
    "output.png=false",
]  # fmt: skip
# Split runs sum the cells' forces on a body in another order (float32): measured relative
# differences of the tracked velocity up to ~1e-6 after 24 steps; the bound leaves 10x.
SPLIT_RELATIVE = 1e-5
# The single, split and MPI runs compile with LLVM's optimisations off: 24 steps, so compiling
# is nearly all their time; whether a split equals one device is a property of the XLA program
# (as in test_distributed_equality.py)


def track(run_dir: Path) -> np.ndarray:
    """(rows, 9) position, velocity and force of the tracked body, every step."""
    data = np.genfromtxt(run_dir / "bodies_track.csv", delimiter=",", skip_header=1)
    return data[:, 3:]


def velocity_field(run_dir: Path) -> np.ndarray:
    with h5py.File(run_dir / "fields.h5", "r") as f:
        last = sorted(k for k in f if k.startswith("step"))[-1]
        return f[last]["velocity"][...]


def assert_close(ours: Path, reference: Path, relative: float) -> None:
    a, b = track(ours), track(reference)
    assert a.shape == b.shape
    for name, cols in (("position", slice(0, 3)), ("velocity", slice(3, 6))):
        scale = np.abs(b[:, cols]).max()
        error = np.abs(a[:, cols] - b[:, cols]).max() / scale
        assert error <= relative, f"{name}: relative difference {error:.3g} > {relative}"
    u_a, u_b = velocity_field(ours), velocity_field(reference)
    error = np.abs(u_a - u_b).max() / np.abs(u_b).max()
    assert error <= relative, f"fluid velocity: relative difference {error:.3g} > {relative}"


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single")
    result = run_solver(
        [*TINY, "checkpoint=none", "domain=single", f"hydra.run.dir={out}"],
        {"XLA_FLAGS": FAST_COMPILE},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "completed" and summary["coupling"]["bodies"] == 1
    assert track(out)[-1, 5] < 0, "the sphere settles (moves down)"
    return out


# make test-long (~80 s with its share of the reference run): make test keeps the two-process
# MPI equality, which crosses the same shard boundary with real messages
@pytest.mark.long
def test_eight_fake_devices_match_one(single, tmp_path):
    out = tmp_path / "run"
    result = run_solver(
        [*TINY, "checkpoint=none", "domain.mesh=[2,2,2]", f"hydra.run.dir={out}"],
        {"XLA_FLAGS": f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["domain"]["mesh"] == [2, 2, 2]
    assert_close(out, single, SPLIT_RELATIVE)


def test_two_mpi_processes_match_one(single, tmp_path):
    out = tmp_path / "run"
    args = [*TINY, "checkpoint=none", "domain.mesh=[1,1,2]", "domain.halo=mpi"]
    result = mpirun(
        2, ["-m", "solver", *args, f"hydra.run.dir={out}"], extra_env={"XLA_FLAGS": FAST_COMPILE}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["domain"]["processes"] == 2
    assert_close(out, single, SPLIT_RELATIVE)


def test_sigterm_checkpoint_and_resume_are_bit_identical(tmp_path):
    """Stopped at step 12 of 24 with a checkpoint, the same command resumes; the bodies, their
    history and the fluid end exactly as in an uninterrupted run (same device, same chunks)."""
    config = compose_config([*TINY, "checkpoint.every_steps=12", "checkpoint.every_minutes=null"])
    reference = tmp_path / "reference"
    simulate(config, reference, interactive=False)
    stopped = tmp_path / "stopped"
    with pytest.raises(PreemptedError) as err:
        simulate(config, stopped, interactive=False, hook=SignalAt(12))
    assert err.value.resumable
    outcome = simulate(config, stopped, interactive=False)
    assert outcome.summary["checkpoint"]["resumed_from"]["step"] == 12
    assert np.array_equal(track(stopped), track(reference)), "bodies_track.csv differs"
    assert np.array_equal(velocity_field(stopped), velocity_field(reference))
    with h5py.File(stopped / "bodies.h5", "r") as f:
        steps = sorted(int(f[k].attrs["step"]) for k in f if k.startswith("step_"))
    assert steps == [0, 12, 24]
