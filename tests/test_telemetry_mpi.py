"""Straggler detection with real processes: ``mpirun -n 2`` with a host delay injected on rank 1
(``SOLVER_TELEMETRY_INJECT_DELAY``, test-only), the Prometheus endpoint of process 0 scraped
while the job runs (it must carry both ranks' gauges)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mpi import ROOT, mpi_env, mpirun_or_skip

DELAY_S = 0.3  # rank 1's extra host time per chunk: far above a 16 x 16 chunk's few ms
# 5 chunks of 12 steps on a 16 x 16 grid: the first compiles, 4 are judged
CASE = ["case=cavity", "case.resolution=14", "steps=60", "chunk=12", "output=none",
        "checkpoint=none"]  # fmt: skip


def _scrape_while_running(job: subprocess.Popen, log: Path) -> str:
    """The first metrics page with gauges of both ranks, fetched while the job runs ('' if the
    job ended first)."""
    port = None
    while job.poll() is None:
        if port is None and log.exists():
            match = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log.read_text())
            port = int(match.group(1)) if match else None
        if port is not None:
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                with urllib.request.urlopen(url, timeout=2) as response:
                    page = response.read().decode()
                if 'rank="1"' in page:
                    return page
            except OSError:
                pass
        time.sleep(0.05)
    return ""


# make test names the straggler in the 2-process xla job of tests/test_distributed_app.py
@pytest.mark.long
def test_mpi_straggler_named_with_host_in_log_and_run_json(tmp_path):
    out = tmp_path / "run"
    command = [mpirun_or_skip(), "-n", "2", "--bind-to", "none", sys.executable, "-m", "solver",
               *CASE, "domain.halo=xla", "telemetry.port=0", f"hydra.run.dir={out}"]  # fmt: skip
    env = mpi_env({"SOLVER_TELEMETRY_INJECT_DELAY": f"1:{DELAY_S}"})
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as job:  # fmt: skip
        page = _scrape_while_running(job, out / "logs" / "process_0.log")
        stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr[-3000:]
    summary = json.loads((out / "run.json").read_text())
    telemetry = summary["telemetry"]
    host = telemetry["ranks"][1]["host"]
    (straggler,) = telemetry["stragglers"]
    assert straggler["rank"] == 1 and straggler["host"] == host
    assert straggler["first_step"] == 24, "the first chunk compiles and is not judged"
    assert straggler["chunks"] == 4 and straggler["worst_ratio"] > 1.5
    log = (out / "logs" / "process_0.log").read_text()
    warning = [line for line in log.splitlines() if "straggler" in line]
    assert len(warning) == 1 and "WARNING" in warning[0]
    assert f"rank 1 on host {host}" in warning[0] and "steps 24-48" in warning[0]
    rows = list(csv.DictReader((out / "telemetry.csv").open()))
    assert sorted({r["rank"] for r in rows}) == ["0", "1"] and len(rows) == 10
    for row in rows[2:]:  # after compilation: rank 1 works longer, rank 0 waits for it
        if row["rank"] == "1":
            assert float(row["host_s"]) >= DELAY_S
        else:
            assert float(row["sync_wait_s"]) > 0.5 * DELAY_S
    assert telemetry["ranks"][0]["sync_wait_s_total"] > 4 * 0.5 * DELAY_S
    assert 'solver_run_step_seconds{host="' in page, "no page with both ranks was scraped"
    assert 'rank="0"' in page and 'rank="1"' in page
