"""Rigid-body runs get what the fluid has: checkpoints, resume, stop signals, the Python API.

Every run goes through the one run loop (``solver.run.simulate``), in this process where one
device is enough, under ``mpirun`` or with fake devices where the layout must change. A body
run's chunk boundaries depend only on its config, so a resume on the same layout must end with
exactly the state, energies and diagnostics of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from hooks import SignalAt
from mpi import mpi_env, mpirun, mpirun_or_skip
from solver_cli import FAST_COMPILE, ROOT, run_solver

from solver.api import compose_config, run
from solver.app import enable_precision
from solver.errors import ConfigError, PreemptedError
from solver.run import simulate

# 16 spheres dropped into a small box (soft, strong gravity): the first contact at step 64,
# 48 contacts with tangential histories by step 400
SCENE = [
    "case=box_fill",
    "case.count=16",
    "case.box=[0.03,0.03,0.05]",
    "case.fill_from=0.0",
    "case.gravity=100",
    "case.material.young=1.0e+6",
    "steps=400",
    "chunk=100",
    "case.output_every=100",
    "checkpoint.every_steps=200",
    "checkpoint.every_minutes=null",
]
FIELDS = ("position", "orientation", "velocity", "angular_velocity", "contact_count")
# decomposed (2 MPI processes) against one device: the bound of tests/test_body_decomposition.py
# (forces of a pair summed in another order round differently; differences grow with contacts)
DECOMPOSED_RELATIVE = 1e-10


def final_state(run_dir: Path, name: str = "bodies.h5") -> dict[str, np.ndarray]:
    with h5py.File(run_dir / name, "r") as f:
        last = sorted(k for k in f if k.startswith("step_"))[-1]
        return {k: f[last][k][...] for k in FIELDS}


def assert_same_state(ours: Path, reference: Path) -> None:
    a, b = final_state(ours), final_state(reference)
    for key in FIELDS:
        assert np.array_equal(a[key], b[key]), f"{key} differs from the uninterrupted run"


def assert_close_state(ours: Path, reference: Path, relative: float) -> None:
    a, b = final_state(ours), final_state(reference)
    for key in ("position", "velocity"):
        scale = np.abs(b[key]).max()
        error = np.abs(a[key] - b[key]).max() / scale
        assert error <= relative, f"{key}: relative difference {error:.3g} > {relative}"
    assert np.array_equal(a["contact_count"], b["contact_count"]), "contact counts differ"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run (one device)."""
    out = tmp_path_factory.mktemp("reference")
    enable_precision("float64")
    simulate(compose_config(SCENE), out, interactive=False)
    return out


def test_sigterm_stops_with_a_checkpoint_and_the_rerun_resumes_bit_identical(tmp_path, reference):
    enable_precision("float64")
    config = compose_config(SCENE)
    with pytest.raises(PreemptedError) as stopped:
        simulate(config, tmp_path, interactive=False, hook=SignalAt(100))
    assert stopped.value.resumable
    assert "stopped by SIGTERM at step 100 of 400" in str(stopped.value)
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "preempted" and summary["steps"] == 100
    assert (tmp_path / "checkpoints" / "100" / "manifest.json").is_file()

    outcome = simulate(config, tmp_path, interactive=False)  # the same command again
    assert outcome.summary["checkpoint"]["resumed_from"]["step"] == 100
    assert outcome.summary["status"] == "completed" and outcome.summary["steps"] == 400
    assert_same_state(tmp_path, reference)
    ours = (tmp_path / "energies.csv").read_text()
    assert ours == (reference / "energies.csv").read_text(), "energies.csv differs"
    expected = json.loads((reference / "run.json").read_text())
    assert outcome.summary["diagnostics"] == expected["diagnostics"]
    assert outcome.summary["energy"] == expected["energy"]
    with h5py.File(tmp_path / "bodies.h5", "r") as f:
        steps = sorted(int(f[k].attrs["step"]) for k in f if k.startswith("step_"))
    assert steps == [0, 100, 200, 300, 400]  # every output once, none lost or doubled


class ServiceStopAt(SignalAt):
    """An unbounded hook (a service, as the twin): the run ends only by SIGTERM."""

    name, unbounded = "service_stop_at", True


def test_a_service_run_goes_past_the_case_length_and_ends_on_sigterm(tmp_path):
    """An unbounded run has no last step: the case's own length (400) must not end a chunk
    early (a zero-step chunk once crashed the live twin there)."""
    enable_precision("float64")
    config = compose_config([*SCENE, "checkpoint=none", "case.output_every=null"])
    with pytest.raises(PreemptedError) as stopped:
        simulate(config, tmp_path, interactive=False, hook=ServiceStopAt(700))
    assert stopped.value.shutdown
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] == 700


def test_restart_from_another_run_dir_and_the_python_api(tmp_path, reference):
    """``checkpoint.resume=PATH`` into a new directory, through ``solver.api.run``."""
    result = run(
        [*SCENE, "checkpoint=default", f"checkpoint.resume={reference}/checkpoints/200"],
        output_dir=tmp_path,
    )
    assert result.summary["checkpoint"]["resumed_from"]["step"] == 200
    assert_same_state(tmp_path, reference)
    fields = result.fields()
    assert fields["position"].shape == (16, 3)
    assert np.array_equal(fields["position"], final_state(reference)["position"])


def test_a_checkpoint_of_another_case_is_refused_and_loses_nothing(tmp_path, reference):
    shutil.copytree(reference, tmp_path / "run")
    before = (tmp_path / "run" / "bodies.h5").read_bytes()
    enable_precision("float64")
    with pytest.raises(ConfigError) as refused:
        simulate(compose_config([*SCENE, "case.count=15"]), tmp_path / "run", interactive=False)
    message = str(refused.value)
    assert message.startswith("checkpoint.resume = ") and "\n" not in message
    assert "bodies 16 in the checkpoint, 15 now" in message
    assert (tmp_path / "run" / "bodies.h5").read_bytes() == before


def test_ensemble_saved_on_four_devices_resumes_on_one(tmp_path):
    """Members padded to 4 fake devices; restored unpadded onto this process's one device."""
    ensemble = [
        "case=bounce",
        "bodies.ensemble.size=3",
        "bodies.ensemble.sweep.restitution=[0.5,0.7,0.9]",
        "steps=600",
        "chunk=100",
        "checkpoint.every_steps=300",
        "checkpoint.every_minutes=null",
    ]
    saved = tmp_path / "four"
    result = run_solver(
        [*ensemble, f"hydra.run.dir={saved}"],
        {"XLA_FLAGS": f"--xla_force_host_platform_device_count=4 {FAST_COMPILE}"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((saved / "run.json").read_text())
    assert summary["ensemble"]["padded_size"] == 4

    resume = [*ensemble, "checkpoint=default", f"checkpoint.resume={saved}/checkpoints/300"]
    resumed = run(resume, output_dir=tmp_path / "one")
    assert resumed.summary["checkpoint"]["resumed_from"]["saved_on"]["devices"] == 4
    assert resumed.summary["ensemble"]["padded_size"] == 3
    with h5py.File(saved / "ensemble.h5") as a, h5py.File(tmp_path / "one" / "ensemble.h5") as b:
        for key in ("position", "velocity", "angular_velocity"):
            assert np.array_equal(a["states"][key][...], b["states"][key][...]), key
        assert np.array_equal(a["energy"]["kinetic"][...], b["energy"]["kinetic"][...])
    assert resumed.summary["ensemble"]["aggregate"] == summary["ensemble"]["aggregate"]


# ---------------------------------------------------------------------------- decomposed


def _wait_for(condition, timeout_s: float, what: str, process) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended (exit {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


# decomposed resume and restore also: test_decomposed_resume_on_the_same_mesh_is_bit_identical
@pytest.mark.long
def test_decomposed_scene_sigterm_under_mpirun_then_resume_and_restore_on_another_mesh(
    tmp_path, reference
):
    """bodies.mesh=[2,1,1] over 2 MPI processes: SIGTERM to both ranks (as Slurm sends it)
    during start-up, a checkpoint at the first chunk end, exit 75; the same command resumes;
    the 2-process checkpoint also restores onto one device ([1,1,1]). Both agree with the
    one-device run."""
    launcher = mpirun_or_skip()
    run_dir = tmp_path / "run"
    args = [*SCENE, "bodies.mesh=[2,1,1]", f"hydra.run.dir={run_dir}"]
    command = [launcher, "-n", "2", "--bind-to", "none", sys.executable, "-m", "solver", *args]
    first = subprocess.Popen(command, cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        log = run_dir / "logs" / "process_0.log"
        _wait_for(
            lambda: log.is_file() and "split over a 2x1x1 mesh" in log.read_text(),
            300,
            "the run to start (compilation still going on)",
            first,
        )
        ranks = subprocess.run(["pgrep", "-P", str(first.pid)], capture_output=True,
                               text=True).stdout.split()  # fmt: skip
        assert len(ranks) == 2, f"mpirun children: {ranks}"
        for pid in ranks:
            os.kill(int(pid), signal.SIGTERM)
        output, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    summary = json.loads((run_dir / "run.json").read_text())
    if summary["status"] == "completed":
        pytest.fail("the run finished before the signal")
    assert first.returncode == 75, output[-3000:]
    assert summary["status"] == "preempted"
    step = summary["steps"]
    assert 100 <= step < 400

    second = mpirun(2, ["-m", "solver", *args])
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 400
    assert summary["checkpoint"]["resumed_from"]["step"] == step
    assert summary["decomposition"]["mesh"] == [2, 1, 1]
    assert_close_state(run_dir, reference, DECOMPOSED_RELATIVE)

    enable_precision("float64")
    other = tmp_path / "one_device"
    run([*SCENE, "bodies.mesh=[1,1,1]", "checkpoint=default",
         f"checkpoint.resume={run_dir}/checkpoints/200"], output_dir=other)  # fmt: skip
    assert_close_state(other, reference, DECOMPOSED_RELATIVE)


def test_decomposed_resume_on_the_same_mesh_is_bit_identical(tmp_path):
    """The raw subdomain slots come back as they were (slot order included)."""
    enable_precision("float64")
    first = run([*SCENE, "bodies.mesh=[1,1,1]", "checkpoint=default"], output_dir=tmp_path / "a")
    assert first.summary["decomposition"]["mesh"] == [1, 1, 1]
    run([*SCENE, "bodies.mesh=[1,1,1]", "checkpoint=default",
         f"checkpoint.resume={tmp_path}/a/checkpoints/200"], output_dir=tmp_path / "b")  # fmt: skip
    assert_same_state(tmp_path / "b", tmp_path / "a")
