"""The preflight under real `mpirun` (2 and 4 ranks) and real Slurm (tests/cluster.py).

Faults are injected with SOLVER_PREFLIGHT_INJECT (solver/preflight/inject.py): a jax version
that differs on rank 1, a bit flipped in rank 1's shard of the numerical canary, and rank 1
sleeping before each of its link exchanges. Each must be caught with its own exit code and a
message naming the rank or the link. The failing-preflight job (sbatch template, version
mismatch: the cheapest fault, it stops before any collective) is in `make test`; the MPI runs
and the acceptance template are `long` (tests/test_preflight.py covers the same checks on fake
devices in one process).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import cluster
import pytest
from mpi import mpirun

from solver.preflight import EXIT_CANARY, EXIT_VERSIONS
from solver.preflight.inject import ENV

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SINGLE_NODE = REPO / "launch" / "single_node.sbatch"
ACCEPTANCE = REPO / "launch" / "acceptance.sbatch"
QUICK = ["--storage-mib", "8", "--message-mib", "0.25", "--repeats", "3"]
JOB_TIMEOUT_S = 240


def _report(path: Path) -> dict:
    return json.loads((path / "preflight.json").read_text())


@pytest.mark.long
def test_mpi_four_ranks_pass(tmp_path: Path) -> None:
    args = ["-m", "solver.preflight", *QUICK, "--out", str(tmp_path), "domain.mesh=[2,2]",
            "domain.halo=mpi", f"checkpoint.dir={tmp_path}/ckpt"]  # fmt: skip
    done = mpirun(4, args, timeout=400)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = _report(tmp_path)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    assert {(link["a"], link["b"]) for link in report["links"]} == {(0, 2), (1, 3), (0, 1), (2, 3)}
    assert all(link["ok"] for link in report["links"]), report["links"]
    assert report["numerical"]["backend"] == "mpi"
    assert all(s["ok"] for s in report["numerical"]["shards"]), report["numerical"]
    assert len(report["storage"]["ranks"]) == 4


@pytest.mark.long
def test_mpi_version_mismatch_on_one_rank(tmp_path: Path) -> None:
    args = ["-m", "solver.preflight", *QUICK, "--out", str(tmp_path), "domain.mesh=[2,1]",
            "domain.halo=mpi"]  # fmt: skip
    done = mpirun(2, args, timeout=300, extra_env={ENV: "version@1"})
    assert done.returncode == EXIT_VERSIONS, done.stdout[-4000:] + done.stderr[-4000:]
    assert "jax differs across ranks: '0.10.2' on rank 0" in done.stderr or (
        "jax differs across ranks" in done.stderr and "+injected' on rank 1" in done.stderr
    ), done.stderr[-4000:]
    checks = {c["name"]: c["status"] for c in _report(tmp_path)["checks"]}
    assert checks["versions"] == "fail" and checks["numerical canary"] == "skip", checks


@pytest.mark.long
def test_mpi_corrupted_canary_and_slow_link_on_one_rank(tmp_path: Path) -> None:
    args = ["-m", "solver.preflight", *QUICK, "--out", str(tmp_path), "domain.mesh=[2,1]",
            "domain.halo=xla", f"checkpoint.dir={tmp_path}/ckpt"]  # fmt: skip
    done = mpirun(2, args, timeout=300, extra_env={ENV: "corrupt@1,delay@1=0.15"})
    output = done.stdout[-6000:] + done.stderr[-6000:]
    assert done.returncode == EXIT_CANARY, output
    assert "rank 1 (" in output and "computed shard 1 (cells [24:48) x [0:48))" in output, output
    assert "slow link 0<->1 (along x" in output, output
    report = _report(tmp_path)
    assert [s["ok"] for s in report["numerical"]["shards"]] == [True, False]


# ------------------------------------------------------------------------- Slurm


@pytest.fixture(scope="module")
def slurm_cluster() -> cluster.Cluster:
    return cluster.cluster_for_tests()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)  # the templates' CPU path sets it
    env.pop(ENV, None)
    env.update(SOLVER_ROOT=str(REPO), SOLVER_PYTHON=PYTHON, **extra)
    return env


def _tail(path: Path, lines: int = 60) -> str:
    if not path.exists():
        return f"({path} missing)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@pytest.mark.slurm
def test_sbatch_failing_preflight_stops_the_job(
    slurm_cluster: cluster.Cluster, tmp_path: Path
) -> None:
    """A version mismatch on task 1: the job ends with exit code 20 and the message, the solver
    never starts (no run.json) and the job is not requeued."""
    job_name = "pytest-preflight-fail"
    env = _env(**{ENV: "version@1", "PREFLIGHT_ARGS": " ".join(QUICK)})
    job_id = cluster.submit(
        [*("--gpus-per-node=0", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=4"),
         f"--job-name={job_name}", str(SINGLE_NODE), "case=cavity", "case.resolution=16",
         "steps=40", "domain.mesh=[2,1]", "domain.halo=mpi"],
        env=env, cwd=tmp_path,
    )  # fmt: skip
    info = cluster.wait_for_job(job_id, timeout_s=JOB_TIMEOUT_S)
    log_path = tmp_path / f"slurm-{job_name}-{job_id}.out"
    log = _tail(log_path)
    assert info.state == "FAILED" and info.exit_code == f"{EXIT_VERSIONS}:0", f"{info}\n{log}"
    assert info.fields.get("Restarts") == "0", info.fields
    text = log_path.read_text(errors="replace")
    assert "jax differs across ranks" in text and "+injected' on rank 1" in text, log
    assert "preflight failed (exit status 20" in text, log
    run_dir = tmp_path / "outputs" / f"{job_name}_{job_id}"
    assert _report(run_dir / "preflight")["exit_code"] == EXIT_VERSIONS
    assert not (run_dir / "run.json").exists(), "the solver ran after a failed preflight"


@pytest.mark.slurm
@pytest.mark.long
def test_srun_preflight_two_tasks_mpi(slurm_cluster: cluster.Cluster, tmp_path: Path) -> None:
    job_name = "pytest-preflight-srun"
    args = ["srun", "--mpi=pmix", "--ntasks=2", "--time=4", f"--job-name={job_name}", PYTHON,
            "-m", "solver.preflight", *QUICK, "--out", str(tmp_path), "domain.mesh=[2,1]",
            "domain.halo=mpi", f"checkpoint.dir={tmp_path}/ckpt"]  # fmt: skip
    env = _env(JAX_PLATFORMS="cpu")
    done = cluster.run(args, timeout_s=JOB_TIMEOUT_S, cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = _report(tmp_path)
    assert report["job"]["launcher"] == "srun" and report["job"]["processes"] == 2, report["job"]


@pytest.mark.slurm
@pytest.mark.long
def test_acceptance_template_writes_one_report_per_node(
    slurm_cluster: cluster.Cluster, tmp_path: Path
) -> None:
    job_name = "pytest-acceptance"
    reports = tmp_path / "acceptance"
    env = _env(
        ACCEPTANCE_DIR=str(reports),
        ACCEPTANCE_CASES="couette",
        ACCEPTANCE_SCALING="--lattice D2Q9 --local-size 16 --global-size 32,16 --processes 1,2 "
        "--devices 0 --steps 2 --repeats 1 --no-bind",
        PREFLIGHT_ARGS=" ".join(QUICK),
    )
    job_id = cluster.submit(
        [*("--gpus-per-node=0", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=8"),
         "--exclusive=user", f"--job-name={job_name}", str(ACCEPTANCE)],
        env=env, cwd=tmp_path,
    )  # fmt: skip
    info = cluster.wait_for_job(job_id, timeout_s=600)
    log = _tail(tmp_path / f"slurm-{job_name}-{job_id}.out")
    assert info.succeeded, f"{info.state} {info.exit_code}\n{log}"
    node = slurm_cluster.node
    text = (reports / node / "acceptance.txt").read_text()
    for step in ("preflight", "validation", "scaling"):
        assert any(line.startswith(step) and line.endswith("PASS") for line in text.splitlines()), (
            text
        )
    assert _report(reports / node / "preflight")["status"] == "pass"
    assert (reports / node / "scaling.json").is_file() and (reports / node / "validation").is_dir()
