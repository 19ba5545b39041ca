"""Checkpoints under real faults: a killed MPI rank, damaged and half-written checkpoints,
incompatible restarts, and restores onto other decompositions.

Every run is a real ``python -m solver`` (under ``mpirun`` where it says so). The cavity has
resting and moving walls and its fields are bit-identical across decompositions, and a run's
chunk boundaries depend only on its config, so a resumed run must end with exactly the fields
of an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import h5py
import numpy as np
import pytest
from mpi import mpi_env, mpirun, mpirun_or_skip
from solver_cli import FAST_COMPILE, PRODUCTION, ROOT, child_env, run_solver

# Long enough that 2 processes on 2 cores step for several seconds after the first checkpoint;
# its runs compile at the production level (PRODUCTION), whose code steps faster
LONG = [
    "case=cavity",
    "case.resolution=254",
    "steps=3000",
    "chunk=100",
    "output.every=500",
    "output.png=false",
    "checkpoint.every_steps=300",
]
SHORT = [
    "case=cavity",
    "case.resolution=30",
    "steps=300",
    "chunk=50",
    "output.every=100",
    "output.png=false",
    "checkpoint.every_steps=100",
]
FAKE_DEVICES = {"XLA_FLAGS": f"--xla_force_host_platform_device_count=4 {FAST_COMPILE}"}
# ``python -c`` in place of ``-m solver`` under mpirun: the solver with JAX's device-collective
# barrier and broadcast refused, so Orbax's saves, deletions and restores must wait at
# jax.distributed's key-value barriers (no NCCL under halo=mpi, docs/checkpoints.md)
NO_DEVICE_BARRIERS = """
import runpy
from jax.experimental import multihost_utils

def refuse(*args, **kwargs):
    raise RuntimeError(f"a device collective between processes: {args}")

multihost_utils.sync_global_devices = multihost_utils.broadcast_one_to_all = refuse
runpy.run_module("solver", run_name="__main__", alter_sys=True)
"""


def fields(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every output step of fields.h5: {group: {density, velocity}}."""
    with h5py.File(run_dir / "fields.h5", "r") as f:
        return {
            k: {name: f[k][name][...] for name in ("density", "velocity")}
            for k in f
            if k.startswith("step")
        }


def assert_same_fields(ours: Path, reference: Path, steps: list[str] | None = None) -> None:
    a, b = fields(ours), fields(reference)
    steps = sorted(b) if steps is None else steps
    for step in steps:
        assert step in a, f"{ours} has no output {step} (it has {sorted(a)})"
        for name in ("density", "velocity"):
            assert np.array_equal(a[step][name], b[step][name]), f"{name} differs at {step}"


def solver_ok(args: list[str], env: dict | None = None) -> str:
    """Run; its log and messages (stdout and stderr) as one text."""
    result = run_solver(args, env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def resumed_step(log_text: str) -> int:
    line = next((x for x in log_text.splitlines() if "resumed from" in x), None)
    assert line is not None, f"no 'resumed from' line in:\n{log_text[-2000:]}"
    return int(line.split("(step ")[1].split(",")[0])


@pytest.fixture(scope="module")
def short_reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("short_reference")
    solver_ok([*SHORT, "checkpoint=none", "checkpoint.every_steps=100", f"hydra.run.dir={out}"])
    return out


# ---------------------------------------------------------------------------- a killed rank


def _wait_for(condition, timeout_s: float, what: str, process=None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the run ended (exit {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def _solver_ranks(mpirun_pid: int) -> list[int]:
    """PIDs of the python processes mpirun started."""
    out = subprocess.run(
        ["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True
    ).stdout.split()
    return [int(p) for p in out]


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("long_reference")
    solver_ok([*LONG, "domain=single", f"hydra.run.dir={out}"], PRODUCTION)
    return out


def test_sigkill_of_one_mpi_rank_then_resume_equals_uninterrupted(tmp_path, long_reference):
    launcher = mpirun_or_skip()
    reference = long_reference

    run_dir = tmp_path / "run"
    args = [*LONG, "domain.halo=mpi", "domain.mesh=[2,1]", f"hydra.run.dir={run_dir}"]
    solver = ["-c", NO_DEVICE_BARRIERS]
    command = [launcher, "-n", "2", "--bind-to", "none", sys.executable, *solver, *args]
    first = subprocess.Popen(
        command,
        cwd=ROOT,
        env=mpi_env(PRODUCTION),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(
            lambda: (run_dir / "checkpoints" / "300" / "manifest.json").is_file(),
            300,
            "the first checkpoint",
            first,
        )
        ranks = _solver_ranks(first.pid)
        assert len(ranks) == 2, f"mpirun children: {ranks}"
        os.kill(ranks[1], signal.SIGKILL)
        output, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode != 0, "mpirun should fail when a rank is killed"
    status = (
        json.loads((run_dir / "run.json").read_text())["status"]
        if (run_dir / "run.json").exists()
        else None
    )
    assert status != "completed", "the run finished before the kill: make LONG longer"

    second = mpirun(2, [*solver, *args], extra_env=PRODUCTION)
    assert second.returncode == 0, second.stderr[-3000:]
    step = resumed_step((run_dir / "logs" / "process_0.log").read_text())
    assert 0 < step < 3000
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 3000
    assert summary["checkpoint"]["resumed_from"]["step"] == step
    assert_same_fields(run_dir, reference)


# ---------------------------------------------------------------------------- signals


def _start_solver(args: list[str], run_dir: Path, env: dict | None = None) -> subprocess.Popen:
    """``python -m solver ARGS`` into ``run_dir``, in the background, output captured; compiled
    as run_solver compiles (FAST_COMPILE unless ``env`` says otherwise)."""
    return subprocess.Popen(
        [sys.executable, "-m", "solver", *args, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        env=child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _start_and_signal(
    args: list[str], run_dir: Path, signum: int, env: dict | None = None
) -> subprocess.Popen:
    """Start ``python -m solver``, send ``signum`` as soon as the run has started (its log
    names the domain: start-up and compilation are still going on), wait for the end."""
    process = _start_solver(args, run_dir, env)
    log = run_dir / "solver.log"
    try:
        _wait_for(
            lambda: log.is_file() and "domain: mesh" in log.read_text(),
            120,
            "the run to start",
            process,
        )
        process.send_signal(signum)
        process.stdout_text, process.stderr_text = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process


def test_sigterm_during_start_up_stops_with_a_checkpoint_then_resumes(tmp_path, long_reference):
    run_dir = tmp_path / "run"
    stopped = _start_and_signal([*LONG, "domain=single"], run_dir, signal.SIGTERM, PRODUCTION)
    assert stopped.returncode == 75, stopped.stderr_text[-3000:]
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "preempted" and 0 < summary["steps"] < 3000
    step = summary["steps"]
    assert f"stopped by SIGTERM at step {step} of 3000" in stopped.stderr_text
    assert (run_dir / "checkpoints" / str(step) / "manifest.json").is_file()

    log = solver_ok([*LONG, "domain=single", f"hydra.run.dir={run_dir}"], PRODUCTION)
    assert resumed_step(log) == step
    assert_same_fields(run_dir, long_reference)


def test_signal_with_checkpoints_off_stops_cleanly_without_one(tmp_path):
    run_dir = tmp_path / "run"
    stopped = _start_and_signal(
        [*LONG, "domain=single", "checkpoint=none"], run_dir, signal.SIGUSR1
    )
    assert stopped.returncode == 76, stopped.stderr_text[-3000:]
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] < 3000
    assert "no checkpoint" in stopped.stderr_text
    assert not (run_dir / "checkpoints").exists()
    assert "step_00000000" in fields(run_dir), "the output written so far is kept"


def test_second_run_in_a_busy_run_dir_stops_before_writing(tmp_path):
    """Two runs in one directory would overwrite each other's checkpoints and fields: the
    second is refused (exit 2, one line naming the first's pid) while the first goes on, and
    the directory is free again once the first has ended."""
    from solver.run_lock import LOCK_NAME, hold_run_dir

    run_dir = tmp_path / "run"
    endless = ["case=cavity", "case.resolution=32", "steps=100000000", "chunk=100"]
    endless += ["output.every=100000000", "output.png=false", "checkpoint=none"]
    first = _start_solver(endless, run_dir)
    try:
        log = run_dir / "solver.log"
        _wait_for(lambda: log.is_file() and "domain: mesh" in log.read_text(), 120, "start", first)
        second = run_solver([*SHORT, f"hydra.run.dir={run_dir}"])
        assert second.returncode == 2, second.stderr[-2000:]
        error = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(error) == 1 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert f"hydra.run.dir = '{run_dir}': allowed a directory no other" in error[0], error
        assert f"another run (pid {first.pid} on " in error[0], error[0]
        assert not (run_dir / "checkpoints").exists(), "the refused run wrote a checkpoint"
        assert first.poll() is None, "the first run was disturbed"
        first.send_signal(signal.SIGUSR1)
        _, stderr = first.communicate(timeout=120)
        assert first.returncode == 76, stderr[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
    assert (run_dir / LOCK_NAME).read_text().startswith(f"pid {first.pid} on ")
    with ExitStack() as stack:
        assert hold_run_dir(run_dir, stack) is None, "the ended run still holds its directory"


# ---------------------------------------------------------------------------- damaged checkpoints


def test_truncated_file_in_newest_checkpoint_falls_back_to_previous(tmp_path, short_reference):
    run_dir = tmp_path / "run"
    solver_ok([*SHORT, f"hydra.run.dir={run_dir}"])
    newest = run_dir / "checkpoints" / "300"
    victim = max((p for p in newest.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size // 2)

    log = solver_ok([*SHORT, f"hydra.run.dir={run_dir}"])
    assert f"checkpoint {newest} is damaged: {victim}" in log, log[-3000:]
    assert resumed_step(log) == 200
    assert newest.joinpath("manifest.json").is_file(), "step 300 is written again"
    rejected = list((run_dir / "checkpoints" / "rejected").glob("300_*"))
    assert rejected, "the damaged step is kept aside for inspection"
    assert_same_fields(run_dir, short_reference)


def test_half_written_checkpoints_are_never_loaded(tmp_path, short_reference):
    run_dir = tmp_path / "run"
    solver_ok([*SHORT, f"hydra.run.dir={run_dir}"])
    checkpoints = run_dir / "checkpoints"
    # The process died between Orbax's commit and the manifest: step 300 is incomplete.
    (checkpoints / "300" / "manifest.json").unlink()
    # ... and a save that died mid-write leaves Orbax's temporary directory behind.
    tmp = checkpoints / "400.orbax-checkpoint-tmp-1700000000000000"
    (tmp / "state").mkdir(parents=True)
    (tmp / "state" / "garbage").write_bytes(b"\0" * 100)
    # A flipped byte that keeps the size: caught by the content digest.
    data = max(
        (p for p in (checkpoints / "200").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
    )
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(raw)

    log = solver_ok([*SHORT, "steps=300", f"hydra.run.dir={run_dir}"])
    assert "checkpoint " + str(checkpoints / "300") + " is incomplete" in log, log[-3000:]
    assert "does not match the digest" in log or "could not be read" in log, log[-3000:]
    assert resumed_step(log) == 100
    assert_same_fields(run_dir, short_reference)


# ---------------------------------------------------------------------------- bad restarts


def test_incompatible_resume_is_a_config_error_and_loses_nothing(tmp_path):
    run_dir = tmp_path / "run"
    solver_ok([*SHORT, f"hydra.run.dir={run_dir}"])
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}
    fields_before = fields(run_dir)

    result = run_solver(
        [*SHORT, "case.resolution=40", "fluid.precision=float64", f"hydra.run.dir={run_dir}"]
    )
    assert result.returncode == 2, result.stderr[-2000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "shape [32, 32] in the checkpoint, [42, 42] now" in error[0], error[0]
    assert "precision float32 in the checkpoint, float64 now" in error[0], error[0]
    for path, mtime in before.items():
        if path.name not in ("solver.log", ".run.lock") and ".hydra" not in path.parts:
            assert path.stat().st_mtime_ns == mtime, f"{path} was touched"
    assert fields(run_dir).keys() == fields_before.keys()

    fewer = run_solver([*SHORT, "steps=200", f"hydra.run.dir={run_dir}"])
    assert fewer.returncode == 2 and "error: bad configuration: steps = 200" in fewer.stderr

    never = run_solver([*SHORT, "checkpoint.resume=never", f"hydra.run.dir={run_dir}"])
    assert never.returncode == 2 and "checkpoint.resume" in never.stderr, never.stderr[-2000:]

    missing = run_solver([*SHORT, f"checkpoint.resume={tmp_path / 'nope'}"])
    assert missing.returncode == 2 and "checkpoint.resume" in missing.stderr


# ---------------------------------------------------------------------------- other decompositions


@pytest.mark.parametrize(("saved_on", "restored_on"), [("[2,2]", "[4,1]"), ("[2,2]", "single")])
def test_restore_on_another_mesh_of_fake_devices(tmp_path, short_reference, saved_on, restored_on):
    saved = tmp_path / "saved"
    solver_ok(
        [*SHORT, "steps=200", f"domain.mesh={saved_on}", f"hydra.run.dir={saved}"], FAKE_DEVICES
    )
    restored = tmp_path / "restored"
    domain = "domain=single" if restored_on == "single" else f"domain.mesh={restored_on}"
    log = solver_ok(
        [
            *SHORT,
            domain,
            f"checkpoint.resume={saved / 'checkpoints' / '200'}",
            f"hydra.run.dir={restored}",
        ],
        FAKE_DEVICES,
    )
    assert resumed_step(log) == 200
    summary = json.loads((restored / "run.json").read_text())
    assert summary["checkpoint"]["resumed_from"]["saved_on"]["mesh"] == [2, 2]
    assert fields(restored).keys() == {"step_00000200", "step_00000300"}
    # the restored state itself, then 100 more steps on the new mesh
    assert_same_fields(restored, saved, ["step_00000200"])
    assert_same_fields(restored, short_reference, ["step_00000200", "step_00000300"])


@pytest.mark.long  # restores onto other meshes run on fake devices in make test
def test_restore_two_mpi_processes_on_four_and_on_one(tmp_path, short_reference):
    saved = tmp_path / "saved"
    args = [*SHORT, "steps=200", "domain.halo=mpi", "domain.mesh=[2,1]", f"hydra.run.dir={saved}"]
    first = mpirun(2, ["-m", "solver", *args])
    assert first.returncode == 0, first.stderr[-3000:]
    source = f"checkpoint.resume={saved / 'checkpoints'}"

    four = tmp_path / "four"
    args = [*SHORT, "domain.halo=mpi", "domain.mesh=[2,2]", source, f"hydra.run.dir={four}"]
    result = mpirun(4, ["-m", "solver", *args])
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(4):
        assert resumed_step((four / "logs" / f"process_{rank}.log").read_text()) == 200

    one = tmp_path / "one"
    solver_ok([*SHORT, "domain=single", source, f"hydra.run.dir={one}"])
    for run in (four, one):
        assert_same_fields(run, saved, ["step_00000200"])
        assert_same_fields(run, short_reference, ["step_00000200", "step_00000300"])


# ---------------------------------------------------------------------------- policy


def test_time_interval_and_keep(tmp_path):
    run_dir = tmp_path / "run"
    solver_ok(
        [
            *SHORT,
            "checkpoint.every_steps=null",
            "checkpoint.every_minutes=1e-6",  # due at every chunk end
            "checkpoint.keep=2",
            "checkpoint.async_save=false",
            f"hydra.run.dir={run_dir}",
        ]
    )
    summary = json.loads((run_dir / "run.json").read_text())["checkpoint"]
    assert [s["step"] for s in summary["saves"]] == [50, 100, 150, 200, 250, 300]
    assert all(s["bytes"] > 0 and s["gb_per_s"] > 0 for s in summary["saves"])
    kept = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert kept == [250, 300]


def test_checkpoint_none_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    solver_ok([*SHORT, "checkpoint=none", f"hydra.run.dir={run_dir}"])
    assert not (run_dir / "checkpoints").exists()
    assert json.loads((run_dir / "run.json").read_text())["checkpoint"]["enabled"] is False
