"""Bad input refused at start-up in one line (exit 2), and a validation suite that stops on
SIGTERM (exit 75) with the report of what finished: the app as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from solver_cli import ROOT, run_solver

from solver.distributed.runtime import check_granted_gpus, granted_gpus
from solver.errors import ConfigError, PreemptedError
from solver.output.directory import check_directory, directory_problem
from validation.report import CaseResult, Check

SMALL_RUN = ["case=poiseuille", "case.resolution=8", "steps=4", "chunk=2", "output=none"]
# start-up (Python, JAX, Hydra) takes a few seconds; a grid that were allocated first would take
# half a minute or more before failing
QUICK_S = 60


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("error: bad configuration: ")
    return lines[0]


# ------------------------------------------------------------------ checkpoint.dir


def test_directory_problem_names_the_reason(tmp_path):
    (tmp_path / "file").write_text("")
    assert directory_problem(tmp_path / "new" / "dir") is None
    assert (tmp_path / "new" / "dir").is_dir() and not any((tmp_path / "new" / "dir").iterdir())
    assert directory_problem(tmp_path / "file") == "it is a file, not a directory"
    assert "is a file" in directory_problem(tmp_path / "file" / "below")
    if Path("/proc/self").is_dir():
        assert "cannot create it in /proc" in directory_problem("/proc/nope")
    with pytest.raises(Exception, match=r"checkpoint.dir = .*: allowed a directory"):
        check_directory("checkpoint.dir", tmp_path / "file")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_unwritable_checkpoint_dir_exits_2_with_one_line(tmp_path):
    result = run_solver([*SMALL_RUN, "checkpoint.dir=/proc/nope", f"hydra.run.dir={tmp_path}"])
    line = _one_line(result)
    assert "checkpoint.dir = '/proc/nope'" in line and "cannot create it in /proc" in line


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_unwritable_run_dir_exits_2_with_one_line(tmp_path):
    """Hydra creates its run dir before the app runs: the app checks it first."""
    result = run_solver([*SMALL_RUN, "hydra.run.dir=/proc/nope/run"])
    line = _one_line(result)
    assert "hydra.run.dir = '/proc/nope/run'" in line and "cannot create it in /proc" in line


# ------------------------------------------------------------------ case.resolution


@pytest.mark.parametrize(
    "overrides",
    [
        ["case=cavity", "case.resolution=100000"],
        ["case=taylor_green", "fluid=d3q19", "case.resolution=2000"],
    ],
    ids=["cavity", "taylor_green_3d"],
)
def test_grid_too_large_for_memory_exits_2_at_once(tmp_path, overrides):
    start = time.perf_counter()
    result = run_solver([*overrides, "checkpoint=none", f"hydra.run.dir={tmp_path}"], timeout=120)
    elapsed = time.perf_counter() - start
    line = _one_line(result)
    resolution = overrides[-1].split("=")[1]
    assert f"case.resolution = {resolution}: allowed <= " in line
    assert "grid needs about" in line and "available" in line
    assert elapsed < QUICK_S, f"took {elapsed:.0f} s"


# ------------------------------------------------------------------ case.file


@pytest.mark.parametrize(
    ("file", "reason"),
    [
        ("/etc/passwd", "its name has no .yaml, .yml, .h5 or .hdf5 suffix"),
        ("{tmp}/missing.yaml", "no such file"),
        ("{tmp}", "its name has no"),  # a directory without a suffix
        ("{tmp}/list.yaml", "not a YAML mapping"),
    ],
    ids=["passwd", "missing", "directory", "not_a_mapping"],
)
def test_scene_file_that_is_no_scene_exits_2_naming_case_file(tmp_path, file, reason):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    path = file.format(tmp=tmp_path)
    if path == str(tmp_path):
        reason = "it is a directory"
    result = run_solver(["case=scene", f"case.file={path}", f"hydra.run.dir={tmp_path / 'run'}"])
    line = _one_line(result)
    assert f"case.file = '{path}'" in line and reason in line


# ------------------------------------------------------------------ validation stops on SIGTERM


def _suite(monkeypatch, tmp_path, cases: dict) -> tuple[int, str]:
    import validation.__main__ as suite

    monkeypatch.setattr(suite, "CASES", cases)
    monkeypatch.setattr(suite, "_environment", lambda: "test.")
    code = suite.main(["--out", str(tmp_path), *cases])
    return code, (tmp_path / "report.md").read_text()


def _finished(ctx) -> CaseResult:
    return CaseResult("first", checks=[Check("first", "q", 1.0, 1.0, 0.0, 0.1)])


def test_stop_between_runs_interrupts_the_case_and_keeps_the_report(monkeypatch, tmp_path):
    ran = []

    def stopped_between_runs(ctx):
        os.kill(os.getpid(), signal.SIGTERM)  # recorded; the next run does not start
        ctx.simulate("second", "run", ["steps=1"])
        ran.append("second went on")
        return CaseResult("second")

    def third(ctx):
        ran.append("third")
        return _finished(ctx)

    cases = {"first": _finished, "second": stopped_between_runs, "third": third}
    code, report = _suite(monkeypatch, tmp_path, cases)
    assert code == 75 and ran == []
    assert "| first | q |" in report and "1 of 1 checks passed" in report
    assert "second was interrupted (stopped by SIGTERM)" in report and "not run: third" in report
    assert "### second (interrupted after" in report
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


def test_a_preempted_solver_run_interrupts_the_case(monkeypatch, tmp_path):
    def preempted(ctx):  # what a solver run raises after its own handler took the signal
        raise PreemptedError("stopped by SIGUSR1 at step 8 of 100", {}, tmp_path, False)

    code, report = _suite(monkeypatch, tmp_path, {"first": _finished, "second": preempted})
    assert code == 75 and "| first | q |" in report
    assert "second was interrupted" in report and "FAIL" not in report


def test_sigterm_stops_the_validation_suite(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "validation", "--fast", "--out", str(tmp_path)]
    proc = subprocess.Popen(
        [*command, "couette", "poiseuille"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        for line in proc.stdout:  # wait until the first case has started
            seen.append(line)
            if line.startswith("== couette"):
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(seen) + out
    assert proc.returncode == 75, err
    assert "== poiseuille" not in out and not (tmp_path / "runs" / "poiseuille").exists()
    assert "interrupted: couette, not run: poiseuille" in err
    report = (tmp_path / "report.md").read_text()
    assert "couette was interrupted (stopped by SIGTERM)" in report
    assert "not run: poiseuille" in report


# ------------------------------------------------------------------ GPUs granted, CPU back end


def test_granted_gpus_reads_slurm():
    assert granted_gpus({}) == 0
    assert granted_gpus({"SLURM_GPUS_ON_NODE": "4"}) == 0  # not a Slurm job
    assert granted_gpus({"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "4"}) == 4
    assert granted_gpus({"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1,3"}) == 3
    assert granted_gpus({"SLURM_JOB_ID": "7"}) == 0
    job = {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "2"}
    check_granted_gpus(job, "gpu")
    check_granted_gpus({**job, "JAX_PLATFORMS": "cpu"}, "cpu")  # CPUs asked for on purpose
    check_granted_gpus({"SLURM_JOB_ID": "7"}, "cpu")
    with pytest.raises(ConfigError, match=r"JAX back end = 'cpu': allowed gpu \(Slurm granted 2"):
        check_granted_gpus(job, "cpu")


def test_gpu_job_without_a_gpu_jaxlib_exits_2_at_start(tmp_path):
    """No GPU here: the Slurm variables of a job granted GPUs are set by hand, JAX finds none
    (this machine's jaxlib is the CPU one), and the run stops before it compiles anything."""
    result = run_solver(
        [*SMALL_RUN, f"hydra.run.dir={tmp_path}"],
        env_extra={"JAX_PLATFORMS": "", "SLURM_JOB_ID": "1", "SLURM_GPUS_ON_NODE": "2"},
    )
    line = _one_line(result)
    assert "JAX back end = 'cpu': allowed gpu (Slurm granted 2 GPU(s)" in line
    assert "make gpu-install" in line
