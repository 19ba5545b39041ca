"""``python -m solver.bench twin``: sustained ingestion rate of sensor readings.

Two measurements:

1. core: the ingestion path alone (parse, validate, count; ``solver.twin.ingest.Ingestor``) over
   messages made beforehand, as single readings and as batches of ``--batch`` readings. The
   ceiling printed next to it is ``json.loads`` of the same bytes on the same core: the floor
   cost of looking at a message at all, so the fraction says what the checks add.
2. live: a publisher sends ``--rate`` readings per second (batches of ``--batch``) for
   ``--seconds`` through a Mosquitto broker on loopback (started here; skipped when
   ``mosquitto`` is missing) to an ``MqttSource``; the consumer drains and ingests every 10 ms,
   as the run loop does between chunks. Reported: readings/s ingested, the lag (arrival to
   ingestion) in the first and the last second, and whether the backlog grew.

Everything runs on this machine's CPU (the twin's host work is single-threaded Python).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from solver.twin.ingest import Ingestor
from solver.twin.quarantine import Quarantine
from solver.twin.sensors import parse_sensors
from solver.twin.validate import Validator

SENSORS = 100


def _sensors():
    return parse_sensors("bench", [
        {"id": f"u{k}", "kind": "velocity_probe", "position": [0.1, 0.2], "units": "m/s",
         "range": [-10.0, 10.0]} for k in range(SENSORS)
    ])  # fmt: skip


def _ingestor(folder: Path) -> Ingestor:
    return Ingestor(Validator(_sensors()), Quarantine(folder / "quarantine.jsonl"))


def _messages(count: int, batch: int, start: int = 0) -> list[bytes]:
    """``count`` readings as messages of ``batch`` readings (1: single readings)."""
    out = []
    for m in range(count // batch):
        items = [{"sensor": f"u{k % SENSORS}", "time": 1e-3 * (start + m * batch + k),
                  "value": [0.5, -0.1], "units": "m/s"} for k in range(batch)]  # fmt: skip
        out.append(json.dumps(items[0] if batch == 1 else {"readings": items}).encode())
    return out


def core_rate(count: int, batch: int, folder: Path) -> tuple[float, float]:
    """(readings/s through Ingestor, readings/s of json.loads alone) on one core."""
    messages = _messages(count, batch)
    t0 = time.perf_counter()
    for raw in messages:
        json.loads(raw)
    floor = count / (time.perf_counter() - t0)
    ingestor = _ingestor(folder)
    t0 = time.perf_counter()
    for raw in messages:
        ingestor.ingest(raw, "bench", 1e9)
    rate = count / (time.perf_counter() - t0)
    assert ingestor.counts["accepted"] == count, ingestor.counts
    return rate, floor


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def live_rate(rate: int, seconds: float, batch: int, folder: Path) -> dict | None:
    """Publish ``rate`` readings/s through a local Mosquitto and ingest them as the twin does."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(binary).exists():
        return None
    import paho.mqtt.client as mqtt

    from solver.twin.mqtt import MqttSettings, MqttSource

    port = _free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                    "max_queued_messages 1000000\nmax_inflight_messages 1000\n")  # fmt: skip
    broker = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    source = None
    publisher = None
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        source = MqttSource(MqttSettings("127.0.0.1", port, ("bench/#",), "bench-twin"))
        source.start()
        if not source.connected.wait(10):
            raise RuntimeError("could not connect to the benchmark broker")
        publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-pub")
        publisher.max_inflight_messages_set(1000)
        publisher.connect("127.0.0.1", port)
        publisher.loop_start()
        total = int(rate * seconds)
        messages = _messages(total, batch)
        interval = batch / rate

        def publish() -> None:
            start = time.perf_counter()
            for k, raw in enumerate(messages):
                delay = start + k * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                publisher.publish("bench/a", raw, qos=1)

        sender = threading.Thread(target=publish, daemon=True)
        ingestor = _ingestor(folder)
        lags: list[tuple[float, float]] = []
        t0 = time.perf_counter()
        sender.start()
        deadline = t0 + seconds + 30.0
        while ingestor.counts["accepted"] < total and time.perf_counter() < deadline:
            deliveries = source.drain()
            wall = time.time()
            for d in deliveries:
                ingestor.ingest(d.payload, d.topic, 1e9)
            source.acknowledge(deliveries)
            if deliveries:
                lags.append((time.perf_counter() - t0, max(wall - d.received for d in deliveries)))
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
        first = [lag for t, lag in lags if t < 1.0] or [0.0]
        last = [lag for t, lag in lags if t > elapsed - 1.0] or [0.0]
        return {
            "target_readings_per_s": rate,
            "readings": total,
            "ingested": ingestor.counts["accepted"],
            "elapsed_s": elapsed,
            "readings_per_s": ingestor.counts["accepted"] / elapsed,
            "lag_first_s": max(first),
            "lag_last_s": max(last),
            "kept_up": ingestor.counts["accepted"] == total and elapsed < seconds + 1.0,
        }
    finally:
        if publisher is not None:
            publisher.disconnect()
            publisher.loop_stop()
        if source is not None:
            source.stop()
        broker.terminate()
        broker.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solver.bench twin", description=__doc__)
    parser.add_argument("--count", type=int, default=50_000, help="readings of the core test")
    parser.add_argument("--batch", type=int, default=50, help="readings per batch message")
    parser.add_argument("--rate", type=int, default=20_000, help="live: readings/s published")
    parser.add_argument("--seconds", type=float, default=10.0, help="live: how long")
    parser.add_argument("--no-live", action="store_true", help="skip the broker measurement")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("core ingestion (parse + validate + count), one core:")
        for batch in (1, args.batch):
            count = args.count - args.count % batch
            rate, floor = core_rate(count, batch, folder)
            print(f"  {'single readings' if batch == 1 else f'batches of {batch}':>16}: "
                  f"{rate:10,.0f} readings/s   ceiling json.loads alone {floor:10,.0f}/s "
                  f"({100 * rate / floor:.0f}%)")  # fmt: skip
        if not args.no_live:
            live = live_rate(args.rate, args.seconds, args.batch, folder)
            if live is None:
                print("live: mosquitto not found, skipped")
            else:
                print(
                    f"live through Mosquitto (QoS 1, batches of {args.batch}): target "
                    f"{live['target_readings_per_s']:,}/s for {args.seconds:g} s -> "
                    f"{live['readings_per_s']:,.0f} readings/s ingested "
                    f"({live['ingested']}/{live['readings']}), lag first second "
                    f"{live['lag_first_s'] * 1e3:.0f} ms, last second "
                    f"{live['lag_last_s'] * 1e3:.0f} ms: "
                    f"{'kept up' if live['kept_up'] else 'FELL BEHIND'}"
                )
    return 0
