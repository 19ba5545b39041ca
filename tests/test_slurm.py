"""Runs on a real one-node Slurm cluster (tests/cluster.py): `srun` with MPI halos, the sbatch
templates of launch/, and the Hydra Slurm launcher.

The templates: a plain run; the time-limit warning (USR1 to the batch shell, forwarded to the
solver; a fake solver that exits 75) and the requeue that follows; and the real solver stopped by
USR1 to its processes, which checkpoints, exits 75, is requeued, resumes in the same run dir and
ends bit-identical to an uninterrupted one-process run without Slurm.

Select with `pytest -m slurm`. The cluster tests skip unless this is root with Slurm, munge and
Open MPI installed (`make test` installs them when run as root). Grids are small and runs short:
the whole file takes about two minutes on two cores (the checkpoint-and-resume test about one of
them), longer when other work shares the cores.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import cluster
import h5py
import numpy as np
import pytest
from solver_cli import PRODUCTION, child_env, run_solver

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SINGLE_NODE = REPO / "launch" / "single_node.sbatch"
MULTI_NODE = REPO / "launch" / "multi_node.sbatch"
JOB_BODY = REPO / "launch" / "solver_job.sh"
# A 2D case that two processes on two cores finish in well under a minute: 18 x 18 cells with
# walls, split into two blocks of 9 x 18 cells, 40 steps.
SMALL_CASE = ("case=cavity", "case.resolution=16", "steps=40", "output.png=false")
TWO_BLOCKS = "domain.mesh=[2,1]"
# A cavity that two processes on two cores (2 x 64 x 128 cells) still step for about 12 s after
# its first checkpoint (step 500) is on disk, so a signal sent then stops it midway. One process
# without Slurm runs it in about 6 s.
RESUME_STEPS = 3000
RESUME_CASE = (
    "case=cavity",
    "case.resolution=126",
    f"steps={RESUME_STEPS}",
    "chunk=100",
    "output.every=500",
    "output.png=false",
    "checkpoint.every_steps=500",
)
# Wall-clock limits. Each job also gets a Slurm time limit, so nothing outlives a failed test.
SRUN_TIMEOUT_S = 150
JOB_TIMEOUT_S = 180
SWEEP_TIMEOUT_S = 240
REFERENCE_TIMEOUT_S = 300
# Times as `scontrol show job` prints them (local time).
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


@pytest.fixture(scope="session")
def slurm_cluster() -> cluster.Cluster:
    return cluster.cluster_for_tests()


def _env(**extra: str) -> dict[str, str]:
    """The environment of a job (tests/solver_cli.py: CPU, FAST_COMPILE unless said)."""
    return child_env(extra)


def _run_or_cancel(
    args: Sequence[str], job_name: str, timeout_s: float, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run a command that starts Slurm jobs named `job_name`; cancel them if it times out."""
    try:
        return cluster.run(args, timeout_s=timeout_s, cwd=cwd, env=env)
    except subprocess.TimeoutExpired as err:
        cluster.cancel_jobs_named(job_name)
        output = (err.stdout or b"")[-4000:]
        pytest.fail(f"`{' '.join(args)}` ran past {timeout_s} s; its jobs cancelled\n{output!r}")


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"({path} missing)"
    return f"--- {path} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def _cancel_on_failure(job_id: str, job_log: Path) -> Iterator[None]:
    """Cancel the job if the block fails, and add the job's log to the failure message."""
    try:
        yield
    except (AssertionError, cluster.ClusterError, subprocess.TimeoutExpired) as err:
        cluster.run(["scancel", job_id])
        raise AssertionError(f"{err}\n{_tail(job_log)}") from None


def _fields(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every output step of fields.h5: {group: {density, velocity}}."""
    with h5py.File(run_dir / "fields.h5", "r") as f:
        return {
            group: {name: f[group][name][...] for name in ("density", "velocity")}
            for group in f
            if group.startswith("step")
        }


def _assert_completed_run(run_dir: Path, processes: int, context: str = "") -> None:
    """Process 0's output files and a completed run.json; one log per process."""
    for name in ("fields.h5", "run.json"):
        assert (run_dir / name).is_file(), f"{run_dir / name} missing\n{context}"
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary.get("status") == "completed", f"run.json status {summary.get('status')!r}"
    for rank in range(processes):
        log = run_dir / "logs" / f"process_{rank}.log"
        assert log.is_file(), f"{log} missing\n{context}"


def test_srun_two_processes_with_mpi_halos(slurm_cluster: cluster.Cluster, tmp_path: Path) -> None:
    if importlib.util.find_spec("mpi4jax") is None:
        pytest.skip("mpi4jax is not installed (pip install -e '.[mpi]')")
    run_dir = tmp_path / "run"
    job_name = "pytest-srun-mpi"
    args = [
        *("srun", "--mpi=pmix", "--ntasks=2", "--time=3", f"--job-name={job_name}"),
        *(PYTHON, "-m", "solver", *SMALL_CASE, TWO_BLOCKS, "domain.halo=mpi"),
        f"hydra.run.dir={run_dir}",
    ]
    result = _run_or_cancel(args, job_name, SRUN_TIMEOUT_S, cwd=REPO, env=_env())
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"srun exited {result.returncode}\n{output}"
    _assert_completed_run(run_dir, processes=2, context=output)


def test_sbatch_single_node_template_on_cpu(slurm_cluster: cluster.Cluster, tmp_path: Path) -> None:
    job_name = "pytest-sbatch"
    # The template's CPU path: no GPUs requested, one CPU per task, JAX_PLATFORMS left to it.
    env = _env(SOLVER_ROOT=str(REPO), SOLVER_PYTHON=PYTHON)
    del env["JAX_PLATFORMS"]
    job_id = cluster.submit(
        [
            *("--gpus-per-node=0", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=4"),
            f"--job-name={job_name}",
            str(SINGLE_NODE),
            *SMALL_CASE,
            TWO_BLOCKS,
            "domain.halo=xla",
        ],
        env=env,
        cwd=tmp_path,
    )
    info = cluster.wait_for_job(job_id, timeout_s=JOB_TIMEOUT_S)
    job_log = _tail(tmp_path / f"slurm-{job_name}-{job_id}.out")
    assert info.succeeded, f"job {job_id} ended {info.state} (exit {info.exit_code})\n{job_log}"
    _assert_completed_run(tmp_path / "outputs" / f"{job_name}_{job_id}", 2, context=job_log)


# Stands in for python in the requeue test: the template calls it as `SOLVER_PYTHON -m solver
# hydra.run.dir=DIR ...`. The first run waits for USR1 and then does what the real solver does:
# once every process has the signal (the real one's checkpoint is collective), process 0 writes
# run.json with status "preempted", and every process exits with 75 ("stopped with a checkpoint",
# the only exit the job body requeues on). Process 1 exits 2 s after process 0, as a slower
# process might: srun (--kill-on-bad-exit) terminates it first (srun exits 143), and the job body
# must requeue all the same. The requeued run exits at once.
FAKE_SOLVER = r"""#!/bin/bash
for arg in "$@"; do [[ $arg == hydra.run.dir=* ]] && run_dir=${arg#hydra.run.dir=}; done
mkdir -p "$run_dir"
if ((${SLURM_RESTART_COUNT:-0} > 0)); then
    touch "$run_dir/restarted_$SLURM_PROCID"
    exit 0
fi
stop() {
    : >"$run_dir/usr1_$SLURM_PROCID"
    if ((SLURM_PROCID == 0)); then
        for _ in {1..100}; do [[ -e $run_dir/usr1_1 ]] && break; sleep 0.1; done
        echo '{"status": "preempted"}' >"$run_dir/run.json"
    else
        sleep 2
    fi
    exit 75
}
trap stop USR1
touch "$run_dir/ready_$SLURM_PROCID"
while true; do sleep 0.2; done
"""


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.5)


def _slurmd_spool_dir() -> Path:
    result = cluster.run(["scontrol", "show", "config"], timeout_s=10)
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmdSpoolDir":
            return Path(value.strip())
    return Path("/var/spool/slurmd")


def _step_leftovers(job_id: str) -> list[str]:
    """What the job's step daemons keep in slurmd's spool dir until they exit (their sockets,
    the PMIx server's socket and folder, e.g. `stepd.slurm.pmix.<job>.0`)."""
    spool = _slurmd_spool_dir()
    if not spool.is_dir():
        return []
    step = re.compile(rf"(^|[._]){re.escape(job_id)}\.\d+")
    return sorted(p.name for p in spool.iterdir() if step.search(p.name))


def _release_requeued(job_id: str, restarts: int, timeout_s: float = 90) -> None:
    """Wait until the job has requeued itself `restarts` times, then let it start at once.

    A requeued job is held about two minutes (Reason=BeginTime) before it may start again;
    production jobs wait that out, a test releases the job early, but not too early:
    - while the first run still ends, an update of its start time does not stick;
    - the old run's step daemon lives on for about 2.5 s after the requeue, and the new run's
      step, with the same id (<job>.0), fails to launch while the old one's PMIx socket is
      there ("Cannot bind() UNIX socket .../stepd.slurm.pmix.<job>.0: Address already in use");
    - slurmd refuses a job credential issued in the same second as (or before) the one in which
      it revoked the old credential for the requeue (`cred->ctime <= revoked`, whole seconds):
      the job then fails at launch ("Job credential revoked", ExitCode 1:0). The requeue resets
      SubmitTime; the release comes two seconds after it at the earliest.
    """
    holder: dict[str, cluster.JobInfo] = {}

    def requeued() -> bool:
        info = cluster.job_info(job_id)
        if info is None:
            return False
        holder["info"] = info
        return (
            info.state == "PENDING"
            and info.fields.get("Restarts") == str(restarts)
            and info.fields.get("Reason") == "BeginTime"
        )

    _wait_for(requeued, timeout_s, f"the job to requeue itself ({restarts} restart(s))")
    _wait_for(
        lambda: not _step_leftovers(job_id),
        timeout_s,
        "the step daemons of the first run to exit (their files in slurmd's spool dir)",
    )
    requeued_at = time.mktime(time.strptime(holder["info"].fields["SubmitTime"], TIME_FORMAT))
    time.sleep(max(0.0, requeued_at + 2.0 - time.time()))
    cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)


def test_sbatch_template_forwards_warning_and_requeues(
    slurm_cluster: cluster.Cluster, tmp_path: Path
) -> None:
    fake = tmp_path / "fake_python"
    fake.write_text(FAKE_SOLVER)
    fake.chmod(0o755)
    job_name = "pytest-requeue"
    # PREFLIGHT=0: the fake python cannot run `-m solver.preflight`
    env = _env(SOLVER_ROOT=str(REPO), SOLVER_PYTHON=str(fake), SOLVER_MAX_REQUEUES="1",
               PREFLIGHT="0")  # fmt: skip
    job_id = cluster.submit(
        [
            *("--gpus-per-node=0", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=4"),
            f"--job-name={job_name}",
            str(SINGLE_NODE),
        ],
        env=env,
        cwd=tmp_path,
    )
    run_dir = tmp_path / "outputs" / f"{job_name}_{job_id}"
    job_log = tmp_path / f"slurm-{job_name}-{job_id}.out"
    with _cancel_on_failure(job_id, job_log):
        ready = [run_dir / f"ready_{rank}" for rank in range(2)]
        _wait_for(lambda: all(p.exists() for p in ready), 60, "both tasks to start")
        # What Slurm does 120 s before the time limit (--signal=B:USR1@120), now.
        cluster.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
        _release_requeued(job_id, restarts=1)
        info = cluster.wait_for_job(job_id, timeout_s=JOB_TIMEOUT_S)
    log = _tail(job_log)
    assert info.succeeded, f"job {job_id} ended {info.state} (exit {info.exit_code})\n{log}"
    text = job_log.read_text(errors="replace")
    assert "time limit near (USR1)" in text, f"the batch shell did not get USR1\n{log}"
    assert f"requeueing job {job_id}" in text, f"the job body did not requeue\n{log}"
    for rank in range(2):
        assert (run_dir / f"usr1_{rank}").exists(), f"task {rank} got no USR1\n{log}"
        assert (run_dir / f"restarted_{rank}").exists(), f"task {rank} did not run again\n{log}"


def test_usr1_checkpoints_requeues_and_resumes_bitwise(
    slurm_cluster: cluster.Cluster, tmp_path: Path
) -> None:
    """The real solver under the template: `scancel --signal=USR1` (to the job step's tasks, the
    solver processes) mid-run makes them checkpoint and exit 75, the job body requeues the job,
    and the requeued job resumes in the same run dir from that checkpoint and ends with fields
    bit-identical to an uninterrupted one-process run without Slurm."""
    job_name = "pytest-resume"
    # PREFLIGHT=0: two job starts, and the preflight is tested in tests/test_preflight_processes.py
    # the production level (PRODUCTION): 3,000 steps of a 126^2 cavity step longer than they
    # compile (in the suite the jobs' and the reference's processes 51 s, 59 s with FAST_COMPILE;
    # the test alone 40-41 s against 42 s, measured 2026-12-07)
    env = _env(SOLVER_ROOT=str(REPO), SOLVER_PYTHON=PYTHON, PREFLIGHT="0", **PRODUCTION)
    del env["JAX_PLATFORMS"]  # the template's CPU path sets it
    overrides = [*RESUME_CASE, TWO_BLOCKS, "domain.halo=xla"]
    job_id = cluster.submit(
        [
            *("--gpus-per-node=0", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=6"),
            f"--job-name={job_name}",
            str(SINGLE_NODE),
            *overrides,
        ],
        env=env,
        cwd=tmp_path,
    )
    run_dir = tmp_path / "outputs" / f"{job_name}_{job_id}"
    job_log = tmp_path / f"slurm-{job_name}-{job_id}.out"
    first_checkpoint = run_dir / "checkpoints" / "500" / "manifest.json"
    with _cancel_on_failure(job_id, job_log):
        # The first checkpoint is on disk: the solver is stepping, with 2500 steps to go.
        _wait_for(first_checkpoint.exists, JOB_TIMEOUT_S, str(first_checkpoint))
        # No --batch: Slurm signals the tasks of the job's steps, not the batch shell.
        cluster.run(["scancel", "--signal=USR1", job_id], check=True)
        _release_requeued(job_id, restarts=1)
        info = cluster.wait_for_job(job_id, timeout_s=JOB_TIMEOUT_S)
    log = _tail(job_log, 60)
    assert info.succeeded, f"job {job_id} ended {info.state} (exit {info.exit_code})\n{log}"
    assert info.fields.get("Restarts") == "1", f"Restarts={info.fields.get('Restarts')}\n{log}"

    # First run: every process stopped at the same chunk end with a checkpoint there (the
    # message goes to stderr, i.e. the job's .out file); the job body requeued the job.
    text = job_log.read_text(errors="replace")
    stops = re.findall(
        rf"stopped by SIGUSR1 at step (\d+) of {RESUME_STEPS}: "
        r"checkpoint at step (\d+) in (.+?); rerun",
        text,
    )
    assert len(stops) == 2, f"expected one stop message per process, got {stops}\n{log}"
    stop_step = int(stops[0][0])
    assert all(s == (str(stop_step), str(stop_step), stops[0][2]) for s in stops), stops
    assert 0 < stop_step < RESUME_STEPS, f"stopped at step {stop_step}\n{log}"
    checkpoints = (run_dir / "checkpoints").resolve()
    assert Path(stops[0][2]).resolve() == checkpoints, f"checkpoint in {stops[0][2]}\n{log}"
    assert f"requeueing job {job_id}" in text, f"the job body did not requeue\n{log}"
    assert "(restart 1)" in text, f"no second run in the job log\n{log}"

    # Requeued run: every process resumed from the stop's checkpoint.
    for rank in range(2):
        process_log = run_dir / "logs" / f"process_{rank}.log"
        resumed = re.findall(r"resumed from (\S+) \(step (\d+)", process_log.read_text())
        assert resumed, f"no 'resumed from' in {process_log}\n{_tail(process_log)}"
        path, step = resumed[-1]
        assert int(step) == stop_step, f"process {rank} resumed from step {step}, not {stop_step}"
        assert Path(path).resolve() == checkpoints / str(stop_step), path
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary.get("status") == "completed", f"run.json status {summary.get('status')!r}"
    assert summary.get("steps") == RESUME_STEPS, f"run.json steps {summary.get('steps')!r}"
    resumed_from = (summary.get("checkpoint") or {}).get("resumed_from") or {}
    assert resumed_from.get("step") == stop_step, f"run.json resumed_from {resumed_from}"

    # The same case uninterrupted, in one process without Slurm: identical fields, bit for bit.
    reference = tmp_path / "reference"
    result = run_solver(
        [*RESUME_CASE, "domain=single", f"hydra.run.dir={reference}"],
        PRODUCTION,
        timeout=REFERENCE_TIMEOUT_S,
    )
    assert result.returncode == 0, (
        f"reference run exited {result.returncode}\n{result.stderr[-3000:]}"
    )
    ours, expected = _fields(run_dir), _fields(reference)
    assert sorted(ours) == sorted(expected), f"output steps {sorted(ours)} != {sorted(expected)}"
    final = max(expected)
    for group in sorted(expected):
        for name in ("density", "velocity"):
            assert np.array_equal(ours[group][name], expected[group][name]), (
                f"{name} at {group} differs from the uninterrupted run "
                f"(max |diff| {np.max(np.abs(ours[group][name] - expected[group][name]))}; "
                f"final output {final}; stopped at step {stop_step})"
            )


# make test-long (~35 s): make test submits the job templates through the same cluster
# (test_sbatch_single_node_template_on_cpu, the USR1 requeue); this is Hydra's own launcher
@pytest.mark.long
def test_hydra_slurm_launcher_sweep(slurm_cluster: cluster.Cluster, tmp_path: Path) -> None:
    """Two sweep points, two Slurm jobs (one array) of two MPI processes each."""
    for module in ("hydra_plugins.hydra_submitit_launcher", "mpi4jax"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[slurm,mpi]')")
    sweep_dir = tmp_path / "sweep"
    job_name = "pytest-sweep"
    args = [
        *(PYTHON, "-m", "solver", "-m", "hydra/launcher=slurm", *SMALL_CASE),
        *(TWO_BLOCKS, "domain.halo=mpi", "fluid.u_lattice=0.05,0.1"),
        f"hydra.sweep.dir={sweep_dir}",
        # No GPUs on the test cluster; the sweep's jobs must not outlive the test.
        *("hydra.launcher.gpus_per_node=null", "hydra.launcher.tasks_per_node=2"),
        *("hydra.launcher.timeout_min=4", f"hydra.launcher.name={job_name}"),
    ]
    result = _run_or_cancel(args, job_name, SWEEP_TIMEOUT_S, cwd=REPO, env=_env())
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"the sweep exited {result.returncode}\n{output}"
    # One job array with one task per sweep point: folders <array id>_<index> of submitit.
    array_tasks = sorted(
        p.name.split("_")[1] for p in (sweep_dir / ".submitit").glob("*_*") if p.is_dir()
    )
    assert array_tasks == ["0", "1"], f"submitit job folders: {array_tasks}\n{output}"
    for job_num, u_lattice in (("0", "0.05"), ("1", "0.1")):
        run_dir = sweep_dir / job_num
        _assert_completed_run(run_dir, processes=2, context=output)
        overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
        assert f"fluid.u_lattice={u_lattice}" in overrides, overrides


def test_slurm_launcher_config_matches_the_plugin() -> None:
    """configs/hydra/launcher/slurm.yaml composes over the plugin's schema (no unknown keys)."""
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        pytest.skip("hydra-submitit-launcher is not installed (pip install -e '.[slurm]')")
    args = [
        PYTHON,
        "-m",
        "solver",
        "hydra/launcher=slurm",
        *("--cfg", "hydra", "-p", "hydra.launcher"),
    ]
    result = cluster.run(args, timeout_s=60, cwd=REPO, env=_env())
    assert result.returncode == 0, result.stderr
    assert "submitit_launcher.SlurmLauncher" in result.stdout, result.stdout
    assert "export SLURM_MPI_TYPE=pmix" in result.stdout, result.stdout


@pytest.mark.parametrize("script", [SINGLE_NODE, MULTI_NODE, JOB_BODY], ids=lambda p: p.name)
def test_launch_scripts_parse(script: Path) -> None:
    result = cluster.run(["bash", "-n", str(script)], timeout_s=10)
    assert result.returncode == 0, result.stderr


def test_job_body_rejects_tasks_not_matching_gpus(tmp_path: Path) -> None:
    """One task per GPU: 2 tasks on a 4-GPU node stop before srun, with a message saying so."""
    env = _env(
        SLURM_SUBMIT_DIR=str(REPO),
        SLURM_GPUS_PER_NODE="h100:4",
        SLURM_NTASKS_PER_NODE="2",
        SLURM_JOB_NAME="x",
        SLURM_JOB_ID="1",
    )
    result = cluster.run(["bash", "-c", f"source {JOB_BODY}"], timeout_s=10, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "2 tasks per node but 4 GPUs per node" in result.stderr, result.stderr
