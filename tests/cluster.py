"""A real one-node Slurm cluster for the tests: start it, submit to it, wait for jobs.

The cluster is munge + slurmctld + slurmd on this machine, configured by `/etc/slurm/slurm.conf`
written here (the recipe of `shared/notes/local-slurm.md`). It needs root and Debian's
`slurm-wlm munge libopenmpi-dev openmpi-bin` (`make test` installs them when run as root).
Starting is idempotent: a cluster that already answers `sinfo` with a usable node is reused as it
is, and the daemons, once started, outlive the test session so the next session starts at once.
Every wait has a timeout, and the daemons' standard streams are detached so CI never waits on them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

SLURM_CONF = Path("/etc/slurm/slurm.conf")
SLURM_LOG_DIR = Path("/var/log/slurm")
MUNGE_RUN_DIR = Path("/run/munge")
START_LOCK = Path("/run/lock/lbsolver-test-cluster.lock")  # serialises cluster starts
PARTITION = "debug"
# The first line of the slurm.conf written here; a slurm.conf without it is never overwritten.
CONF_MARKER = "# Written by tests/cluster.py: a one-node test cluster."
REQUIRED_COMMANDS = (
    "munged",
    "munge",
    "unmunge",
    "slurmctld",
    "slurmd",
    "srun",
    "sbatch",
    "squeue",
    "scontrol",
    "scancel",
    "sinfo",
    "mpirun",
)
# Node states (sinfo %t, without the flag suffixes *~#!%$@^-) in which the node runs jobs.
USABLE_NODE_STATES = frozenset({"idle", "mix", "alloc", "comp"})
# Job states (scontrol JobState) after which the job will not run again by itself.
FINAL_JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
COMMAND_TIMEOUT_S = 30.0


class ClusterError(RuntimeError):
    """The cluster could not be started or a job did not finish; the message quotes the logs."""


@dataclass(frozen=True)
class Cluster:
    """A running cluster: its node, default partition, task slots, and who started it."""

    node: str
    partition: str
    cpus: int
    started_here: bool


@dataclass(frozen=True)
class JobInfo:
    """A job as `scontrol show job` reports it: state (e.g. COMPLETED), exit code (e.g. 0:0)."""

    job_id: str
    state: str
    exit_code: str
    fields: Mapping[str, str]

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == "0:0"


def unavailable_reason() -> str | None:
    """Why no cluster can be started here (not root, packages missing), or None if one can."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (it writes /etc/slurm and starts daemons)"
    missing = [name for name in REQUIRED_COMMANDS if shutil.which(name) is None]
    if missing:
        return (
            f"commands missing: {', '.join(missing)}; install the Debian packages "
            "`slurm-wlm munge libopenmpi-dev openmpi-bin` (`make test` does it as root)"
        )
    return None


def node_name() -> str:
    """The host's short name, as slurmd registers it (`hostname -s`)."""
    return socket.gethostname().split(".")[0]


def slurm_conf(node: str, cpus: int, memory_mb: int) -> str:
    """slurm.conf for one node that offers `cpus` task slots, whatever its core count.

    `SlurmdParameters=config_overrides` makes slurmd take the node's CPUs from this file, so a
    2-core machine runs `srun -n 4` without `--overcommit` (`OverSubscribe` alone lets several
    jobs share a core, not one job place more tasks than cores); `OverSubscribe=FORCE:4` lets up
    to four such jobs share the node.
    """
    return f"""{CONF_MARKER}
ClusterName=local
SlurmctldHost={node}
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile={SLURM_LOG_DIR}/slurmctld.log
SlurmdLogFile={SLURM_LOG_DIR}/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
NodeName={node} CPUs={cpus} Sockets=1 CoresPerSocket={cpus} ThreadsPerCore=1 RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""  # noqa: E501


def run(
    args: Sequence[str],
    timeout_s: float = COMMAND_TIMEOUT_S,
    check: bool = False,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion with a timeout; stdin closed, output captured as text."""
    result = subprocess.run(
        list(args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else dict(env),
        cwd=cwd,
        check=False,
    )
    if check and result.returncode != 0:
        raise ClusterError(
            f"`{' '.join(args)}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def _start_daemon(args: Sequence[str]) -> None:
    """Start a daemon detached from this process (own session, no inherited streams)."""
    result = subprocess.run(
        list(args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise ClusterError(f"`{' '.join(args)}` exited {result.returncode}: {result.stderr}")


def _is_running(program: str) -> bool:
    """Whether a process with exactly this program name runs (pgrep -x: no pattern matching)."""
    return run(["pgrep", "-x", program]).returncode == 0


def _wait_until(condition, timeout_s: float, what: str, poll_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise ClusterError(
                f"timed out after {timeout_s:.0f} s waiting for {what}\n{log_tail()}"
            )
        time.sleep(poll_s)


def munge_works() -> bool:
    """Whether a munge credential round-trips (`munge -n | unmunge`)."""
    try:
        credential = run(["munge", "-n"], timeout_s=10)
        if credential.returncode != 0:
            return False
        decoded = subprocess.run(
            ["unmunge"], input=credential.stdout, capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return False
    return decoded.returncode == 0


def _start_munge() -> None:
    MUNGE_RUN_DIR.mkdir(parents=True, exist_ok=True)
    shutil.chown(MUNGE_RUN_DIR, "munge", "munge")
    if not _is_running("munged"):
        # As the munge user, as its service does: root would need --force and warn about files.
        _start_daemon(["runuser", "-u", "munge", "--", "munged"])
    _wait_until(munge_works, 20, "munge to issue and decode a credential")


def _memory_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                # slurmd drains a node that reports less memory than configured; keep a margin.
                return int(int(line.split()[1]) / 1024 * 0.9)
    raise ClusterError("no MemTotal in /proc/meminfo")


def node_state(node: str) -> str | None:
    """The node's state as sinfo prints it (idle, mix, down, ...) without flags; None if unknown."""
    try:
        result = run(["sinfo", "-h", "-N", "-n", node, "-o", "%t"], timeout_s=10)
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0 or not result.stdout.strip():
        return None
    return result.stdout.split()[0].rstrip("*~#!%$@^-")


def log_tail(lines: int = 20) -> str:
    """The last lines of the Slurm daemons' logs, for error messages."""
    parts = []
    for name in ("slurmctld.log", "slurmd.log"):
        path = SLURM_LOG_DIR / name
        if path.exists():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path} ---\n" + "\n".join(text))
    return "\n".join(parts)


def _stop_slurm() -> None:
    """Stop slurmctld and slurmd the way Slurm offers (`scontrol shutdown`), and wait."""
    run(["scontrol", "shutdown"], timeout_s=10)
    _wait_until(
        lambda: not (_is_running("slurmctld") or _is_running("slurmd")), 30, "Slurm to stop"
    )


def ensure_cluster(cpus: int = 4, timeout_s: float = 90.0) -> Cluster:
    """Start munge, slurmctld and slurmd unless they already serve a usable node; wait for it.

    cpus: task slots of the node (see `slurm_conf`). A running cluster whose slurm.conf is the one
    this function would write is reused; one started from an older version of it is restarted.
    """
    node = node_name()
    try:
        socket.gethostbyname(node)
    except OSError as err:
        raise ClusterError(
            f"host name {node!r} does not resolve ({err}); add it to /etc/hosts"
        ) from err
    conf = slurm_conf(node, cpus, _memory_mb())
    existing = SLURM_CONF.read_text() if SLURM_CONF.exists() else None
    if existing is not None and not existing.startswith(CONF_MARKER):
        if node_state(node) in USABLE_NODE_STATES:
            # Someone else's cluster: use it as it is, never rewrite its configuration.
            return Cluster(node=node, partition=PARTITION, cpus=cpus, started_here=False)
        raise ClusterError(f"{SLURM_CONF} exists and was not written by tests/cluster.py")
    if existing == conf and node_state(node) in USABLE_NODE_STATES:
        return Cluster(node=node, partition=PARTITION, cpus=cpus, started_here=False)
    if existing != conf:
        if _is_running("slurmctld") or _is_running("slurmd"):
            _stop_slurm()
        SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
        SLURM_CONF.write_text(conf)
    for folder in ("/var/spool/slurmctld", "/var/spool/slurmd", str(SLURM_LOG_DIR)):
        Path(folder).mkdir(parents=True, exist_ok=True)

    _start_munge()
    if not _is_running("slurmctld"):
        _start_daemon(["slurmctld"])
    _wait_until(lambda: run(["scontrol", "ping"], timeout_s=10).returncode == 0, 30, "slurmctld")
    if not _is_running("slurmd"):
        _start_daemon(["slurmd"])

    def node_usable() -> bool:
        state = node_state(node)
        if state in {"down", "drain", "drng"}:
            # A node left down by an earlier run (e.g. a restarted slurmd): put it back in service.
            run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout_s=10)
        return state in USABLE_NODE_STATES

    _wait_until(node_usable, timeout_s, f"node {node} to become idle in sinfo", poll_s=1.0)
    return Cluster(node=node, partition=PARTITION, cpus=cpus, started_here=True)


def submit(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> str:
    """`sbatch --parsable ARGS`; returns the job id."""
    result = run(["sbatch", "--parsable", *args], env=env, cwd=cwd, check=True)
    return result.stdout.strip().split(";")[0]


def job_info(job_id: str) -> JobInfo | None:
    """The job's record from `scontrol show job` (accounting is off here), None once forgotten."""
    result = run(["scontrol", "show", "job", "--oneliner", job_id], timeout_s=10)
    if result.returncode != 0 or "JobState=" not in result.stdout:
        return None
    # One line per job (several for an array); the first is the one asked for.
    fields = dict(
        item.split("=", 1) for item in result.stdout.splitlines()[0].split() if "=" in item
    )
    return JobInfo(
        job_id=job_id,
        state=fields.get("JobState", "UNKNOWN"),
        exit_code=fields.get("ExitCode", ""),
        fields=fields,
    )


def wait_for_job(job_id: str, timeout_s: float = 180.0, poll_s: float = 1.0) -> JobInfo:
    """Poll until the job reaches a final state; on timeout cancel it and raise ClusterError."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = job_info(job_id)
        if info is None:
            raise ClusterError(f"job {job_id} is unknown to slurmctld")
        if info.state in FINAL_JOB_STATES:
            return info
        if time.monotonic() > deadline:
            run(["scancel", job_id], timeout_s=10)
            raise ClusterError(
                f"job {job_id} still {info.state} after {timeout_s:.0f} s; cancelled\n{log_tail()}"
            )
        time.sleep(poll_s)


def jobs_named(name: str) -> list[str]:
    """Ids of the queued or running jobs with this name (squeue), array tasks included."""
    result = run(["squeue", "-h", "-n", name, "-o", "%i"], timeout_s=10)
    return result.stdout.split() if result.returncode == 0 else []


def cancel_jobs_named(name: str) -> None:
    """Cancel every job with this name (cleanup after a failed or timed-out test)."""
    run(["scancel", "--name", name], timeout_s=10)


@contextlib.contextmanager
def _start_lock():
    """Hold an exclusive lock while starting the daemons: two test processes starting the
    cluster at once both find munged absent, start it, and the second munged exits 1 on the
    first one's socket (seen in a full run). The second now waits and reuses the cluster."""
    START_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(START_LOCK, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cluster_for_tests() -> Cluster:
    """The body of a test fixture: skip when no cluster can run here, fail when one should but
    does not start, else return the running cluster. Use it in a session-scoped fixture::

        @pytest.fixture(scope="session")
        def slurm_cluster() -> cluster.Cluster:
            return cluster.cluster_for_tests()
    """
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    try:
        with _start_lock():
            return ensure_cluster()
    except (ClusterError, subprocess.TimeoutExpired) as err:
        pytest.fail(f"the Slurm test cluster did not start: {err}")
