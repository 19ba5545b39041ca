"""Prometheus metrics of a running twin, scraped over HTTP while the solver runs."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import urllib.request

from solver.twin.metrics import TwinMetrics
from tests.broker import free_port
from tests.solver_cli import ROOT


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return response.read().decode()


def _value(text: str, name: str, labels: str = "") -> float | None:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_counters_follow_the_totals():
    metrics = TwinMetrics(port=0)
    try:
        for total in (3, 10):
            metrics.update({"messages": total, "accepted": total - 1}, {"json": total // 3},
                           0.5, 120.0, 1.25, 0.01, {"u1": 0.02})  # fmt: skip
        text = _scrape(metrics.port)
    finally:
        metrics.close()
    assert _value(text, "solver_twin_messages_total") == 10
    assert _value(text, "solver_twin_readings_accepted_total") == 9
    assert _value(text, "solver_twin_readings_rejected_total", '{reason="json"}') == 3
    assert _value(text, "solver_twin_steps_per_second") == 120.0
    assert _value(text, "solver_twin_sensor_staleness_seconds", '{sensor="u1"}') == 0.02


def test_metrics_are_served_while_a_twin_runs(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "solver", "case=cylinder", "twin=replay",
               "twin.compare_free_run=false", f"twin.metrics_port={port}", "case.duration=0.3",
               "checkpoint=none", "output=none", f"hydra.run.dir={tmp_path}"]  # fmt: skip
    log = tmp_path / "solver.log"
    seen = []
    with log.open("w") as sink:  # a file, not a pipe: a full pipe would block the solver
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while process.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    seen.append(_scrape(port))
                time.sleep(0.2)
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, log.read_text()[-2000:]
    assert seen, "no scrape succeeded while the run was going"
    messages = [_value(text, "solver_twin_messages_total") or 0 for text in seen]
    assert messages == sorted(messages) and messages[-1] > 0  # counters only grow
    assert max(_value(text, "solver_twin_steps_per_second") or 0 for text in seen) > 0
    assert any(_value(text, "solver_twin_simulation_time_seconds") for text in seen)
