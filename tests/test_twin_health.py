"""Liveness and readiness endpoints of the twin (``solver/twin/health.py``): the logic on the
real HTTP server in this process, then the real service (``python -m solver twin=mqtt``) with a
real Mosquitto broker: ready only while the broker is connected and the model steps, live through
a broker outage, and SIGTERM stops it within the Kubernetes manifest's grace period with exit code
0 and a checkpoint. No secret reaches the log, run.json, the probes or the metrics."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from solver.errors import ConfigError
from solver.twin.config import parse_twin
from solver.twin.health import Health, HealthServer
from tests.broker import Mosquitto, free_port
from tests.solver_cli import ROOT
from tests.test_twin_service import _metric, _wait_for

STATEFULSET = ROOT / "deploy" / "kubernetes" / "statefulset.yaml"
PASSWORD = "s3cret-Pa55word-for-the-twin"  # must appear nowhere but in its file


def _probe(port: int, path: str) -> tuple[int | None, dict]:
    """(HTTP status, JSON body) of GET 127.0.0.1:port/path; (None, {}) when nothing answers."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    except OSError:
        return None, {}


def _grace_period_s() -> float:
    pod = yaml.safe_load(STATEFULSET.read_text())["spec"]["template"]["spec"]
    return float(pod["terminationGracePeriodSeconds"])


def test_liveness_follows_the_loop_and_readiness_the_connection():
    """The real HTTP server on an ephemeral loopback port, real time: a deadline of 0.3 s."""
    connected = [False]
    health = Health(deadline=0.3, startup_deadline=0.5, connected=lambda: connected[0])
    server = HealthServer(health, 0)
    try:
        assert server.address == "127.0.0.1"  # the default bind address
        code, body = _probe(server.port, "/livez")
        assert (code, body["status"]) == (200, "starting")
        code, body = _probe(server.port, "/readyz")
        assert code == 503 and body["source_connected"] is False
        assert "broker is not connected" in body["reason"]
        time.sleep(0.6)  # past the start-up deadline without a chunk: stuck in the start
        code, body = _probe(server.port, "/livez")
        assert (code, body["status"]) == (503, "stalled") and "start-up deadline" in body["reason"]

        health.advanced(50)
        connected[0] = True
        code, body = _probe(server.port, "/livez")
        assert (code, body["status"], body["step"], body["chunks"]) == (200, "ok", 50, 1)
        code, body = _probe(server.port, "/readyz")
        assert (code, body["status"], body["source_connected"]) == (200, "ok", True)

        time.sleep(0.45)  # no chunk for longer than the deadline: the loop stalled
        code, body = _probe(server.port, "/livez")
        assert (code, body["status"]) == (503, "stalled")
        assert body["seconds_since_chunk"] > 0.3 and "deadline 0.3 s" in body["reason"]
        code, body = _probe(server.port, "/readyz")
        assert (code, body["status"]) == (503, "not_ready")  # a stalled twin is not ready

        health.advanced(100)  # advancing again: live and ready again
        assert _probe(server.port, "/livez")[0] == 200
        assert _probe(server.port, "/readyz")[0] == 200
        connected[0] = False  # a broker outage: not ready, still live
        assert _probe(server.port, "/readyz")[0] == 503
        assert _probe(server.port, "/livez")[0] == 200
        assert _probe(server.port, "/metrics")[0] == 404
    finally:
        server.close()
    assert _probe(server.port, "/livez") == (None, {})  # closed: the port is released


def test_a_replay_needs_no_connection_to_be_ready():
    health = Health(deadline=5.0, startup_deadline=5.0, connected=None)
    assert not health.readiness()[0]  # no chunk yet
    health.advanced(1)
    ready, body = health.readiness()
    assert ready and body["source_connected"] is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"port": 70000}, "twin.health.port = 70000: allowed null or an integer in [0, 65535]"),
        ({"port": True}, "twin.health.port = True: allowed null or an integer"),
        ({"port": 9108}, "twin.health.port = 9108: allowed a port other than twin.metrics_port"),
        ({"deadline": 0}, "twin.health.deadline = 0.0: allowed > 0"),
        ({"startup_deadline": -1}, "twin.health.startup_deadline = -1.0: allowed > 0"),
        ({"address": ""}, "twin.health.address = '': allowed a non-empty string"),
    ],
)
def test_bad_health_settings_are_one_line_errors(section, message):
    data = {
        "mode": "replay",
        "recording": "data/twin/cylinder_recording.csv",
        "sensors": [{"id": "inflow", "kind": "inflow_velocity", "units": "m/s"}],
        "metrics_port": 9108,
        "health": section,
    }
    with pytest.raises(ConfigError) as err:
        parse_twin(data)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_health_defaults_to_off_and_to_this_machine():
    data = {"mode": "replay", "recording": "r.csv",
            "sensors": [{"id": "inflow", "kind": "inflow_velocity", "units": "m/s"}]}  # fmt: skip
    health = parse_twin(data).health
    assert health.port is None and health.address == "127.0.0.1"
    for name in ("mqtt", "replay"):  # the shipped configs agree
        shipped = yaml.safe_load((ROOT / "configs" / "twin" / f"{name}.yaml").read_text())
        assert shipped["health"]["port"] is None
        assert shipped["health"]["address"] == shipped["metrics_address"] == "127.0.0.1"


def _service(broker: Mosquitto, health_port: int, metrics_port: int, tmp_path,
             *extra: str, pace: str = "null") -> subprocess.Popen:  # fmt: skip
    """The twin service as in tests/test_twin_service.py (a coarse cylinder: quick to compile),
    with credentials from files as the Kubernetes Secret mounts them."""
    (tmp_path / "username").write_text("twin\n")
    (tmp_path / "password").write_text(PASSWORD + "\n")
    command = [sys.executable, "-m", "solver", "case=cylinder", "case.resolution=10",
               "fluid.collision=bgk", "twin=mqtt", "twin.mqtt.host=127.0.0.1",
               f"twin.mqtt.port={broker.port}", "twin.mqtt.reconnect_min_s=0.1",
               "twin.mqtt.reconnect_max_s=0.5", f"twin.mqtt.username_file={tmp_path}/username",
               f"twin.mqtt.password_file={tmp_path}/password", f"twin.health.port={health_port}",
               f"twin.metrics_port={metrics_port}", "output.every=600", "chunk=50",
               "twin.time_origin=0.0", f"twin.pace={pace}", f"hydra.run.dir={tmp_path}/run",
               *extra]  # fmt: skip
    log = (tmp_path / "service.log").open("w")
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _no_password(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text


@pytest.mark.timeout(600)
def test_service_probes_follow_the_broker_and_sigterm_stops_within_the_grace_period(tmp_path):
    grace = _grace_period_s()
    broker = Mosquitto(tmp_path / "broker", users={"twin": PASSWORD})  # its port, not started
    health_port, metrics_port = free_port(), free_port()
    service = _service(broker, health_port, metrics_port, tmp_path)
    log = tmp_path / "service.log"
    bodies = []
    try:
        # the model steps without a broker: live, but not ready
        assert _wait_for(lambda: _probe(health_port, "/readyz")[1].get("chunks", 0) > 0, 300), (
            log.read_text()[-2000:]
        )
        code, body = _probe(health_port, "/readyz")
        bodies.append(body)
        assert code == 503 and body["source_connected"] is False, body
        assert "broker is not connected" in body["reason"]
        assert _probe(health_port, "/livez")[0] == 200
        broker.start()  # the client reconnects by itself: ready
        assert _wait_for(lambda: _probe(health_port, "/readyz")[0] == 200, 60), log.read_text()
        code, body = _probe(health_port, "/readyz")
        bodies.append(body)
        assert body["source_connected"] is True and body["status"] == "ok", body
        code, body = _probe(health_port, "/livez")
        bodies.append(body)
        assert code == 200 and body["seconds_since_chunk"] < 30.0
        broker.stop()  # an outage: unready, still live (a restart would not help)
        assert _wait_for(lambda: _probe(health_port, "/readyz")[0] == 503, 30)
        assert _probe(health_port, "/livez")[0] == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
            metrics = r.read().decode()
        before = _metric(metrics_port, "solver_twin_simulation_time_seconds")
        assert before is not None and before > 0

        start = time.monotonic()
        service.send_signal(signal.SIGTERM)
        code = service.wait(timeout=grace)  # TimeoutExpired past the grace period: kubelet kills
        stopped_s = time.monotonic() - start
    finally:
        with contextlib.suppress(Exception):
            service.kill()
        broker.stop()
    text = log.read_text()
    assert code == 0, text[-3000:]
    print(f"SIGTERM to exit: {stopped_s:.2f} s (grace period {grace:g} s)")
    assert stopped_s < grace
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "stopped" and run["steps"] > 0
    assert max(save["step"] for save in run["checkpoint"]["saves"]) == run["steps"]
    assert _probe(health_port, "/livez") == (None, {})  # the server stopped with the run
    _no_password(text, json.dumps(run), json.dumps(bodies), metrics)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_service_is_not_live_while_its_loop_does_not_advance(tmp_path):
    """End to end: a twin whose loop advances less often than the deadline (held back by its
    pace: one chunk per 2 s of wall time against a deadline of 0.5 s) answers 503 from /livez
    between chunks and 200 right after each (the cheaper in-process test above covers the same
    logic)."""
    broker = Mosquitto(tmp_path / "broker", users={"twin": PASSWORD})
    broker.start()
    health_port, metrics_port = free_port(), free_port()
    # case.resolution=10: dt = u_lattice dx / u_max = 0.1 * 0.01 m / 1.5 m/s = 6.67e-4 s, so a
    # chunk of 50 steps is 0.0333 simulated s: at pace 0.0167 it takes 2 s of wall time
    service = _service(broker, health_port, metrics_port, tmp_path, "twin.health.deadline=0.5",
                       "twin.realtime.startup_check=0", pace="0.0167")  # fmt: skip
    log = tmp_path / "service.log"
    seen: dict[int, dict] = {}
    try:
        assert _wait_for(lambda: _probe(health_port, "/readyz")[0] == 200, 300), log.read_text()[
            -2000:
        ]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(seen) < 2:
            code, body = _probe(health_port, "/livez")
            if code in (200, 503) and body.get("chunks", 0) > 0:
                seen.setdefault(code, body)
            time.sleep(0.05)
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=_grace_period_s()) == 0, log.read_text()[-2000:]
    finally:
        with contextlib.suppress(Exception):
            service.kill()
        broker.stop()
    dt = json.loads((tmp_path / "run" / "run.json").read_text())["units"]["dt"]
    assert 50 * dt / 0.0167 > 1.5, dt  # the pace holds each chunk end back long enough
    assert set(seen) == {200, 503}, seen
    assert seen[503]["status"] == "stalled" and seen[503]["seconds_since_chunk"] > 0.5
