"""`python -m solver.bench twin_stall`: how a live twin keeps up with real time, and how it
recovers from a stall, with each policy for falling behind.

For each policy (``twin.realtime.behind=keep`` and ``skip_ahead``) this starts a local Mosquitto
broker and the twin service (``python -m solver case=cylinder twin=mqtt ...``, extra Hydra
overrides after ``--``), publishes an inflow reading stamped with the wall clock every 0.1 s,
pauses the solver process for ``--stall`` s (SIGSTOP ... SIGCONT: a stalled node, a long
garbage collection, a debugger) once it has run ``--stall-at`` s, and scrapes its Prometheus
metrics every 0.5 s: the simulation time, how far behind real time it is, its real-time
factor. It prints the lag over time, the twin's warnings, and writes the samples (CSV) and a
plot of the lag against wall time for both policies.

    python -m solver.bench twin_stall --stall 20 --seconds 60 --plot docs/twin_lag.png
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRICS = {
    "time_s": "solver_twin_simulation_time_seconds",
    "behind_s": "solver_twin_behind_seconds",
    "factor": "solver_twin_realtime_factor",
    "skips": "solver_twin_skips_total",
    "ready": "solver_twin_ready",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    values: dict[str, float] = {}
    url = f"http://127.0.0.1:{port}/metrics"
    with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=1) as r:
        for line in r.read().decode().splitlines():
            for key, name in METRICS.items():
                if line.startswith(name + " "):
                    values[key] = float(line.split()[1])
    return values


def run_policy(policy: str, args: argparse.Namespace, folder: Path) -> dict:
    """One service run with ``policy``; its samples, warnings and run.json ``twin``."""
    import paho.mqtt.client as mqtt

    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    port, metrics_port = _free_port(), _free_port()
    conf = folder / f"{policy}-mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
    broker = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    run_dir = folder / policy
    log_path = folder / f"{policy}.log"
    command = [sys.executable, "-m", "solver", "case=cylinder", "twin=mqtt",
               "twin.mqtt.host=127.0.0.1", f"twin.mqtt.port={port}",
               f"twin.metrics_port={metrics_port}", f"twin.realtime.behind={policy}",
               f"twin.realtime.max_lag={args.max_lag}", f"twin.realtime.window={args.window}",
               "twin.realtime.warn_every=20", "checkpoint=none", "output=none",
               f"hydra.run.dir={run_dir}", *args.overrides]  # fmt: skip
    service = subprocess.Popen(command, cwd=ROOT, stdout=log_path.open("w"),
                               stderr=subprocess.STDOUT)  # fmt: skip
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"plant-{policy}")
    stop = threading.Event()
    samples: list[dict] = []
    try:
        deadline = time.monotonic() + 300
        while _scrape(metrics_port).get("ready") != 1.0:  # after the start-up check
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the twin did not start:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        publisher.connect("127.0.0.1", port)
        publisher.loop_start()

        def publish() -> None:
            while not stop.is_set():
                item = {"sensor": "inflow", "time": time.time(), "value": 1.5}
                publisher.publish("sensors/inflow", json.dumps(item), qos=1)
                time.sleep(0.1)

        threading.Thread(target=publish, daemon=True).start()
        start = time.time()
        stalled = False
        while (wall := time.time() - start) < args.seconds:
            if not stalled and wall >= args.stall_at:
                service.send_signal(signal.SIGSTOP)
                time.sleep(args.stall)
                service.send_signal(signal.SIGCONT)
                stalled = True
                continue
            samples.append({"wall_s": wall, **_scrape(metrics_port)})
            time.sleep(0.5)
        stop.set()
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=120)
    finally:
        stop.set()
        publisher.loop_stop()
        with contextlib.suppress(Exception):
            service.kill()
        broker.terminate()
        broker.wait(timeout=10)
    summary = json.loads((run_dir / "run.json").read_text())
    warnings = [line for line in log_path.read_text().splitlines()
                if "keep pace" in line or "skipped ahead" in line]  # fmt: skip
    return {"samples": samples, "warnings": warnings, "twin": summary.get("twin", {}),
            "stall_at": args.stall_at, "stall": args.stall, "max_lag": args.max_lag}  # fmt: skip


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    for policy, result in results.items():
        rows = [s for s in result["samples"] if "behind_s" in s]
        wall = [s["wall_s"] for s in rows]
        behind = [s["behind_s"] for s in rows]
        gap = next((k for k, w in enumerate(wall) if w > result["stall_at"]), len(wall))
        wall.insert(gap, float("nan"))  # no samples while the process is stopped
        behind.insert(gap, float("nan"))
        (line,) = ax.plot(wall, behind, ".-", ms=3, label=f"twin.realtime.behind={policy}")
        for skip in result["twin"].get("realtime", {}).get("skips", []):
            if skip["skipped_s"] > 2 * result["max_lag"]:  # the stall's skip: its lag
                ax.annotate(f"skipped {skip['skipped_s']:.1f} s", (result["stall_at"]
                            + result["stall"], skip["skipped_s"]), color=line.get_color(),
                            fontsize=8)  # fmt: skip
                ax.plot([result["stall_at"] + result["stall"]], [skip["skipped_s"]], "o",
                        color=line.get_color())  # fmt: skip
    first = next(iter(results.values()))
    ax.axvspan(first["stall_at"], first["stall_at"] + first["stall"], color="0.9",
               label="process stopped (SIGSTOP)")  # fmt: skip
    ax.set_xlabel("wall time since the first reading (s)")
    ax.set_ylabel("behind real time (s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m solver.bench twin_stall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--policies", nargs="+", default=["keep", "skip_ahead"])
    parser.add_argument("--stall", type=float, default=20.0, help="s the process is stopped")
    parser.add_argument("--stall-at", type=float, default=15.0, help="s after the start")
    parser.add_argument("--seconds", type=float, default=60.0, help="wall s per run")
    parser.add_argument("--max-lag", type=float, default=5.0, help="twin.realtime.max_lag")
    parser.add_argument("--window", type=float, default=10.0, help="twin.realtime.window")
    parser.add_argument("--csv", type=Path, default=None, help="write the samples here")
    parser.add_argument("--plot", type=Path, default=None, help="write the lag plot here")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the twin")
    args = parser.parse_args(argv)
    if not (shutil.which("mosquitto") or Path("/usr/sbin/mosquitto").exists()):
        print("mosquitto not found (make test installs it as root)")
        return 2
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies:
            results[policy] = result = run_policy(policy, args, Path(tmp))
            rt = result["twin"].get("realtime", {})
            start = rt.get("startup_check") or {}
            print(f"\n== twin.realtime.behind={policy}: stopped {args.stall:g} s at "
                  f"{args.stall_at:g} s of {args.seconds:g} s")  # fmt: skip
            if start:
                print(f"start-up check: {start['factor']:.3g} simulated s per wall s "
                      f"({start['steps_per_s']:.0f} steps/s), pace {start['pace']:g}")  # fmt: skip
            print(f"{'wall s':>7} {'sim s':>8} {'behind s':>9} {'factor':>7} {'skips':>5}")
            nan = float("nan")
            for s in result["samples"][::4]:
                print(f"{s['wall_s']:7.1f} {s.get('time_s', nan):8.2f} "
                      f"{s.get('behind_s', nan):9.2f} {s.get('factor', nan):7.3f} "
                      f"{int(s.get('skips', 0)):5d}")  # fmt: skip
            twin = result["twin"]
            print(f"readings accepted {twin.get('accepted')}, rejected "
                  f"{twin.get('rejected_by_reason')}; max behind "
                  f"{rt.get('max_behind_s', 0):.3g} s, "
                  f"skips {len(rt.get('skips', []))}")  # fmt: skip
            for line in result["warnings"][:4]:
                print("  log:", line[:400])
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["policy", "wall_s", *METRICS])
            for policy, result in results.items():
                for s in result["samples"]:
                    writer.writerow([policy, f"{s['wall_s']:.3f}",
                                     *(s.get(k, "") for k in METRICS)])  # fmt: skip
    if args.plot is not None:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
