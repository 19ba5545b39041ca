"""Live ingestion from a real Mosquitto broker (tests/broker.py), restarted mid-stream.

A publisher sends a stream of valid readings with malformed messages interleaved (QoS 1, its
own persistent session, so paho queues what it publishes while the broker is down). The twin's
MqttSource (QoS 1, persistent session, manual acknowledgement) feeds the Ingestor. Asserted:
every valid reading accepted exactly once, the rejections per reason exact, the quarantine
holding every rejected message as sent.
"""

from __future__ import annotations

import json
import time

import pytest

from solver.twin.ingest import Ingestor
from solver.twin.mqtt import MqttSettings, MqttSource
from solver.twin.quarantine import Quarantine, read_quarantine
from solver.twin.sensors import parse_sensors
from solver.twin.validate import Validator
from tests.broker import Mosquitto

mqtt = pytest.importorskip("paho.mqtt.client")

SENSORS = [
    {"id": "u1", "kind": "velocity_probe", "position": [0.1, 0.2], "units": "m/s",
     "range": [-2.0, 2.0]},
    {"id": "inflow", "kind": "inflow_velocity", "units": "m/s", "range": [0.0, 3.0]},
]  # fmt: skip
TOPIC = "plant/line1/sensors"


def _stream(
    count: int,
) -> tuple[list[bytes], set[tuple[str, float]], dict[str, int], list[bytes]]:
    """Messages, the (sensor, time) of every valid reading, the rejections per reason and the
    rejected messages."""
    messages: list[bytes] = []
    bad_messages: list[bytes] = []
    valid: set[tuple[str, float]] = set()
    rejected: dict[str, int] = {}

    def bad(reason: str, raw: bytes) -> None:
        messages.append(raw)
        bad_messages.append(raw)
        rejected[reason] = rejected.get(reason, 0) + 1

    for k in range(count):
        t = 0.01 * (k + 1)
        if k % 2:
            item = {"sensor": "u1", "time": t, "value": [0.5, -0.1], "units": "m/s"}
        else:
            item = {"sensor": "inflow", "time": t, "value": 1.0 + 0.001 * k}
        messages.append(json.dumps(item).encode())
        valid.add((item["sensor"], t))
        if k % 7 == 3:
            bad("json", b'{"sensor": "u1", "time": %.2f, ' % t)
        if k % 11 == 5:
            bad("unknown_sensor", json.dumps({"sensor": "ghost", "time": t, "value": 1}).encode())
        if k % 13 == 6:
            bad("non_finite", b'{"sensor": "inflow", "time": %.2f, "value": NaN}' % t)
        if k % 17 == 8:
            bad("out_of_range", json.dumps({"sensor": "inflow", "time": t + 1e-4,
                                            "value": 9.0}).encode())  # fmt: skip
        if k % 19 == 9:
            bad("encoding", b"\xff\xfe\x00 not text %d" % k)
    return messages, valid, rejected, bad_messages


def _publisher(port: int) -> mqtt.Client:
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id="test-publisher", clean_session=False,
        protocol=mqtt.MQTTv311,
    )  # fmt: skip
    client.reconnect_delay_set(0.1, 0.5)
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client


def _collect(source: MqttSource, ingestor: Ingestor, until, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    now = 0.0
    while time.monotonic() < deadline and not until():
        deliveries = source.drain()
        for d in deliveries:
            ingestor.ingest(d.payload, d.topic, now)
        source.acknowledge(deliveries)
        time.sleep(0.05)


def test_stream_survives_broker_restart_exactly_once(tmp_path):
    broker = Mosquitto(tmp_path / "broker")
    broker.start()
    sensors = parse_sensors("twin.sensors", SENSORS)
    ingestor = Ingestor(Validator(sensors), Quarantine(tmp_path / "quarantine.jsonl"))
    source = MqttSource(
        MqttSettings(host="127.0.0.1", port=broker.port, topics=(f"{TOPIC}/#",),
                     client_id="twin-under-test", reconnect_min_s=0.1, reconnect_max_s=0.5)
    )  # fmt: skip
    messages, valid, rejected, bad_messages = _stream(240)
    publisher = None
    try:
        source.start()
        assert source.connected.wait(10), "the twin did not connect"
        publisher = _publisher(broker.port)
        half = len(messages) // 2
        for m in messages[:half]:
            publisher.publish(f"{TOPIC}/a", m, qos=1)
        _collect(source, ingestor, lambda: ingestor.counts["messages"] >= half // 2, 20)
        broker.restart(down_for=1.0)  # some delivered, some queued, some in flight
        for m in messages[half:]:  # paho queues QoS 1 messages while it reconnects
            publisher.publish(f"{TOPIC}/b", m, qos=1)

        def all_in() -> bool:
            return ingestor.counts["accepted"] >= len(valid) and sum(
                ingestor.rejected_by_reason.values()
            ) >= sum(rejected.values())

        _collect(source, ingestor, all_in, 60)
        _collect(source, ingestor, lambda: False, 1.0)  # anything redelivered late
    finally:
        if publisher is not None:
            publisher.disconnect()
            publisher.loop_stop()
        source.stop()
        broker.stop()
    ingestor.quarantine.close()

    assert source.disconnects >= 1 and source.connects >= 2
    accepted = set(ingestor.validator.last_time) and {
        (sensor, t) for sensor, recent in ingestor.validator.recent.items() for t in recent
    }
    missing = sorted(valid - accepted)
    assert not missing, f"{len(missing)} valid readings never arrived: {missing[:10]}"
    assert ingestor.counts["accepted"] == len(valid)  # exactly once (redeliveries dropped)
    assert ingestor.rejected_by_reason == rejected
    kept = [r["raw"] for r in read_quarantine(tmp_path / "quarantine.jsonl")]
    assert sorted(kept) == sorted(bad_messages)  # every rejected message, byte for byte


def test_tls_client_certificate_and_password(tmp_path, monkeypatch, caplog):
    broker = Mosquitto(tmp_path / "broker", tls=True, users={"twin": "s3cret-pw"},
                       require_certificate=True)  # fmt: skip
    broker.start()
    certs = broker.certs
    monkeypatch.setenv("TWIN_MQTT_USER", "twin")
    password_file = tmp_path / "password"
    password_file.write_text("s3cret-pw\n")

    def settings(client_id: str, password_file_: str) -> MqttSettings:
        return MqttSettings(
            host="127.0.0.1", port=broker.port, topics=(TOPIC,), client_id=client_id,
            reconnect_min_s=0.1, reconnect_max_s=0.5, tls=True, ca_file=str(certs["ca.crt"]),
            cert_file=str(certs["client.crt"]), key_file=str(certs["client.key"]),
            username_env="TWIN_MQTT_USER", password_file=password_file_,
        )  # fmt: skip

    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    refused = MqttSource(settings("twin-wrong", str(wrong)))
    source = MqttSource(settings("twin-tls", str(password_file)))
    ingestor = Ingestor(
        Validator(parse_sensors("twin.sensors", SENSORS)), Quarantine(tmp_path / "q.jsonl")
    )
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="tls-publisher")
    publisher.tls_set(ca_certs=str(certs["ca.crt"]), certfile=str(certs["client.crt"]),
                      keyfile=str(certs["client.key"]))  # fmt: skip
    publisher.username_pw_set("twin", "s3cret-pw")
    try:
        with caplog.at_level("INFO", logger="solver.twin"):
            refused.start()
            source.start()
            assert source.connected.wait(15), "TLS + password connection failed"
            publisher.connect("127.0.0.1", broker.port)
            publisher.loop_start()
            for k in range(20):
                item = {"sensor": "inflow", "time": 0.1 * (k + 1), "value": 1.0}
                publisher.publish(TOPIC, json.dumps(item), qos=1)
            _collect(source, ingestor, lambda: ingestor.counts["accepted"] >= 20, 20)
            assert not refused.connected.is_set()  # a wrong password is refused
    finally:
        publisher.disconnect()
        publisher.loop_stop()
        for client in (source, refused):
            client.stop()
        broker.stop()
    assert ingestor.counts["accepted"] == 20
    assert "s3cret-pw" not in caplog.text and "not-the-password" not in caplog.text
    assert "refused" in caplog.text


def test_missing_credential_variable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TWIN_NO_SUCH_VARIABLE", raising=False)
    with pytest.raises(ValueError, match="TWIN_NO_SUCH_VARIABLE"):
        MqttSource(MqttSettings(host="127.0.0.1", port=1, topics=("t",), client_id="x",
                                password_env="TWIN_NO_SUCH_VARIABLE"))  # fmt: skip
