"""Service mode: ``twin=mqtt`` runs until SIGTERM, then checkpoints and exits 0; a restart in
the same run directory resumes from that checkpoint (real Mosquitto broker, real signals)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from solver.twin.quarantine import read_quarantine
from tests.broker import Mosquitto, free_port
from tests.solver_cli import ROOT

mqtt = pytest.importorskip("paho.mqtt.client")

SIM_TIME = "solver_twin_simulation_time_seconds"
PACE_SLACK_S = 0.1  # s: a chunk (20 steps, 0.013 s) plus the scrape's own delay


def _metric(port: int, name: str) -> float | None:
    url = f"http://127.0.0.1:{port}/metrics"
    with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=2) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def _service(broker_port: int, metrics_port: int, run_dir, log_path) -> subprocess.Popen:
    command = [sys.executable, "-m", "solver", "case=cylinder", "case.resolution=10",
               "fluid.collision=bgk", "twin=mqtt",  # a coarse grid: quick to compile and run
               "twin.mqtt.host=127.0.0.1", f"twin.mqtt.port={broker_port}",
               f"twin.metrics_port={metrics_port}", "twin.mqtt.reconnect_min_s=0.1",
               "output.every=600", "chunk=50", "twin.time_origin=0.0", "twin.pace=null",
               "twin.forecast.enabled=true",
               "twin.forecast.every=0.05", "twin.forecast.horizon=0.02",
               "twin.forecast.output_every=0.01", "twin.forecast.topic=twin/forecast",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, stdout=log_path.open("w"), stderr=subprocess.STDOUT)


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.timeout(900)
def test_sigterm_checkpoints_exits_zero_and_restart_resumes(tmp_path):
    broker = Mosquitto(tmp_path / "broker")
    broker.start()
    run_dir = tmp_path / "run"
    metrics_port = free_port()
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="plant")
    forecasts: list[dict] = []
    listener = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="dashboard")
    listener.on_message = lambda client, userdata, message: forecasts.append(
        json.loads(message.payload)
    )
    listener.on_connect = lambda client, *args: client.subscribe("twin/forecast", qos=1)
    try:
        listener.connect("127.0.0.1", broker.port)
        listener.loop_start()
        service = _service(broker.port, metrics_port, run_dir, tmp_path / "first.log")
        assert _wait_for(lambda: _metric(metrics_port, "solver_twin_simulation_time_seconds"),
                         300), (tmp_path / "first.log").read_text()[-2000:]  # fmt: skip
        publisher.connect("127.0.0.1", broker.port)
        publisher.loop_start()
        for k in range(20):
            item = {"sensor": "inflow", "time": 0.001 * (k + 1), "value": 1.5}
            publisher.publish("sensors/inflow", json.dumps(item), qos=1)
        publisher.publish("sensors/junk", b"not json", qos=1)
        assert _wait_for(lambda: (_metric(metrics_port, "solver_twin_messages_total") or 0) >= 21,
                         60)  # fmt: skip
        assert _wait_for(lambda: len(forecasts) > 0, 120), "no forecast was published"
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0, (tmp_path / "first.log").read_text()[-3000:]
        forecast = forecasts[0]
        assert forecast["scenario_inflow_factors"] == [0.8, 1.0, 1.2]
        assert len(forecast["time_s"]) == 2 and forecast["horizon_s"] > 0
        probe = forecast["probes"]["u_38_20"]
        assert len(probe["mean"]) == 2 and len(probe["scenarios"]) == 3
        first = json.loads((run_dir / "run.json").read_text())
        assert first["status"] == "stopped"
        assert first["twin"]["accepted"] == 20
        assert first["twin"]["rejected_by_reason"] == {"json": 1}
        saved = max(save["step"] for save in first["checkpoint"]["saves"])
        assert saved == first["steps"] > 0  # the stop saved the state it stopped at

        service = _service(broker.port, metrics_port, run_dir, tmp_path / "second.log")
        assert _wait_for(
            lambda: (_metric(metrics_port, "solver_twin_simulation_time_seconds") or 0)
            > saved * first["units"]["dt"], 300
        ), (tmp_path / "second.log").read_text()[-2000:]  # fmt: skip
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0
        second = json.loads((run_dir / "run.json").read_text())
        assert second["status"] == "stopped" and second["steps"] > saved
        assert second["checkpoint"]["resumed_from"]["step"] == saved
    finally:
        publisher.loop_stop()
        listener.loop_stop()
        with contextlib.suppress(Exception):
            service.kill()
        broker.stop()


@pytest.mark.timeout(600)
def test_real_time_pacing_and_live_time_origin(tmp_path):
    """pace=1.0 holds the simulation to the wall clock (never ahead of it; how fast it catches up
    after compiling depends on the machine's load, so that is not asserted), and
    time_origin=null maps UNIX-time readings to it."""
    broker = Mosquitto(tmp_path / "broker")
    broker.start()
    run_dir = tmp_path / "run"
    metrics_port = free_port()
    command = [sys.executable, "-m", "solver", "case=cylinder", "case.resolution=10",
               "fluid.collision=bgk", "twin=mqtt", "twin.mqtt.host=127.0.0.1",
               f"twin.mqtt.port={broker.port}", f"twin.metrics_port={metrics_port}",
               "twin.pace=1.0", "chunk=20", "checkpoint=none", "output=none",
               "twin.realtime.startup_check=0.5",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    log = tmp_path / "service.log"
    service = subprocess.Popen(command, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="plant-clock")
    try:
        assert _wait_for(lambda: _metric(metrics_port, "solver_twin_simulation_time_seconds"),
                         300), log.read_text()[-2000:]  # fmt: skip
        samples = []  # (UNIX wall time, simulated time)
        publisher.connect("127.0.0.1", broker.port)
        publisher.loop_start()
        for _ in range(3):  # readings stamped with the wall clock: in step with the twin
            item = {"sensor": "inflow", "time": time.time(), "value": 1.5}
            publisher.publish("sensors/inflow", json.dumps(item), qos=1)
            samples.append(
                (time.time(), _metric(metrics_port, "solver_twin_simulation_time_seconds"))
            )
            time.sleep(0.5)
        assert _wait_for(
            lambda: (_metric(metrics_port, "solver_twin_readings_accepted_total") or 0) >= 3, 30
        )  # fmt: skip
        for _ in range(10):
            samples.append(
                (time.time(), _metric(metrics_port, "solver_twin_simulation_time_seconds"))
            )
            time.sleep(0.3)
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0, log.read_text()[-2000:]
    finally:
        publisher.loop_stop()
        with contextlib.suppress(Exception):
            service.kill()
        broker.stop()
    summary = json.loads((run_dir / "run.json").read_text())["twin"]
    assert summary["accepted"] == 3 and summary["rejected"] == 0
    origin = summary["time_origin_s"]
    # never ahead of the wall clock (a scrape may see the value of the chunk about to end)
    ahead = [sim - (wall - origin) for wall, sim in samples if sim is not None]
    assert ahead and max(ahead) < PACE_SLACK_S, ahead


@pytest.mark.timeout(600)
def test_a_twin_too_slow_for_real_time_warns_and_skips_ahead_after_a_stall(tmp_path):
    """A grid too fine for real time on this machine: the start-up check says so, the twin warns
    that it cannot keep pace, and with skip_ahead it re-synchronises after being stopped for
    5 s (SIGSTOP/SIGCONT): back within max_lag of the present, the readings it jumped over in
    the quarantine as stale, nothing lost (every published reading accepted or quarantined),
    staleness never negative."""
    broker = Mosquitto(tmp_path / "broker")
    broker.start()
    run_dir = tmp_path / "run"
    metrics_port = free_port()
    max_lag = 2.0
    # resolution 30: 1.5^3 = 3.4x the default cylinder's cost, which itself runs at 0.6-0.85x
    # real time on a quiet 2-core machine
    command = [sys.executable, "-m", "solver", "case=cylinder", "case.resolution=30",
               "twin=mqtt", "twin.mqtt.host=127.0.0.1", f"twin.mqtt.port={broker.port}",
               f"twin.metrics_port={metrics_port}", "twin.realtime.behind=skip_ahead",
               f"twin.realtime.max_lag={max_lag}", "twin.realtime.window=2",
               "twin.realtime.startup_check=0.5", "chunk=50", "checkpoint=none", "output=none",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    log = tmp_path / "service.log"
    service = subprocess.Popen(command, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="plant-slow")
    published = [0]
    stop = threading.Event()

    def publish() -> None:  # an inflow reading stamped with the wall clock every 50 ms
        while not stop.is_set():
            item = {"sensor": "inflow", "time": time.time(), "value": 1.5}
            publisher.publish("sensors/inflow", json.dumps(item), qos=1)
            published[0] += 1
            time.sleep(0.05)

    try:
        assert _wait_for(lambda: _metric(metrics_port, "solver_twin_ready") == 1.0, 300), (
            log.read_text()[-2000:]
        )
        publisher.connect("127.0.0.1", broker.port)
        publisher.loop_start()
        threading.Thread(target=publish, daemon=True).start()
        assert _wait_for(lambda: "cannot keep pace:" in log.read_text(), 60), log.read_text()
        skips_before = _metric(metrics_port, "solver_twin_skips_total") or 0.0
        service.send_signal(signal.SIGSTOP)
        time.sleep(5.0)
        service.send_signal(signal.SIGCONT)
        stalled_at = time.time()
        assert _wait_for(
            lambda: (_metric(metrics_port, "solver_twin_skips_total") or 0) > skips_before, 30
        ), log.read_text()[-2000:]  # fmt: skip
        # from now on never further behind than max_lag plus one chunk (a fraction of a second)
        behind = []
        while time.time() < stalled_at + 4.0:
            behind.append(_metric(metrics_port, "solver_twin_behind_seconds"))
            time.sleep(0.3)
        stop.set()
        time.sleep(0.2)
        sent = published[0]
        assert _wait_for(
            lambda: (_metric(metrics_port, "solver_twin_messages_total") or 0) >= sent, 60
        )  # fmt: skip
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=120) == 0, log.read_text()[-2000:]
    finally:
        stop.set()
        publisher.loop_stop()
        with contextlib.suppress(Exception):
            service.kill()
        broker.stop()
    text = log.read_text()
    assert "this case cannot keep pace on this hardware; to keep it: case.resolution=" in text
    behind = [b for b in behind if b is not None]
    assert behind and max(behind) < max_lag + 1.0, behind
    twin = json.loads((run_dir / "run.json").read_text())["twin"]
    realtime = twin["realtime"]
    assert realtime["startup_check"]["can_keep_pace"] is False
    assert realtime["warnings"] >= 1 and realtime["factor"] < 1.0
    stall = max(realtime["skips"], key=lambda s: s["skipped_s"])
    assert stall["skipped_s"] >= 5.0 and stall["stale"] > 0  # the stall's backlog
    assert realtime["max_behind_s"] >= 5.0
    # nothing lost silently: every reading accepted or in the quarantine with its reason
    assert twin["messages"] == twin["readings"] == sent
    assert twin["accepted"] + twin["rejected"] + twin["duplicates"] == sent
    assert set(twin["rejected_by_reason"]) == {"stale"}
    records = read_quarantine(run_dir / "quarantine.jsonl")
    assert len(records) == twin["rejected"] == sum(s["stale"] for s in realtime["skips"])
    assert all(r["reason"] == "stale" for r in records)
    assert all(age >= 0.0 for age in twin["staleness_s"].values()), twin["staleness_s"]
