"""Prometheus metrics of a batch run, served by process 0 for all ranks (prometheus-client).

Exported (prefix ``solver_run_``), per rank with labels ``rank`` and ``host``:
``step_seconds`` (s per step waited for the latest chunk, chunk_s), ``chunk_seconds``,
``host_seconds`` (host work between chunks), ``sync_wait_seconds`` (wait at the end-of-chunk
barrier),
``exchange_seconds`` (one halo exchange alone, the latest probe),
``device_memory_bytes``, ``device_memory_peak_bytes`` (GPUs only), ``host_rss_bytes``,
``host_rss_peak_bytes``, ``straggler`` (1 while the rank is a named straggler); for the run:
``steps`` (steps done), ``simulation_time_seconds``, ``updates_per_second`` (lattice-cell or
body updates per wall s after compilation), ``chunks_total``, ``stragglers_total`` (episodes
named). Labels hold only rank numbers and host names. Each run has its own registry, like the
twin's (``solver.twin.metrics``), so several runs in one process never collide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from solver.telemetry.records import VALUES

PREFIX = "solver_run"
# per-rank gauge name -> (help text, the gathered value it shows)
RANK_GAUGES = {
    "step_seconds": ("s per step the rank waited for the latest chunk (chunk_s)", "chunk_s"),
    "chunk_seconds": ("s the rank waited for the latest chunk (chunk_s)", "chunk_s"),
    "host_seconds": ("host work s between the latest chunks", "host_s"),
    "sync_wait_seconds": (
        "s waited at the end-of-chunk barrier for the last rank",
        "sync_wait_s",
    ),  # fmt: skip
    "exchange_seconds": ("wall s of one halo exchange alone (the latest probe)", "exchange_s"),
    "device_memory_bytes": ("device memory in use (JAX allocator)", "device_bytes_in_use"),
    "device_memory_peak_bytes": ("peak device memory in use", "device_peak_bytes_in_use"),
    "host_rss_bytes": ("resident set size of the process", "host_rss_bytes"),
    "host_rss_peak_bytes": ("peak resident set size", "host_peak_rss_bytes"),
}


class RunMetrics:
    """The run's gauges; ``port`` None builds them without serving (tests, the dashboard check).

    Args:
        port: TCP port of the HTTP endpoint (0: any free port); None: no endpoint.
        address: interface to bind (127.0.0.1: this host only).
    """

    def __init__(self, port: int | None = None, address: str = "127.0.0.1") -> None:
        self.registry = r = CollectorRegistry()
        labels = ["rank", "host"]
        self.rank_gauges = {
            name: Gauge(f"{PREFIX}_{name}", text, labels, registry=r)
            for name, (text, _) in RANK_GAUGES.items()
        }
        self.straggler = Gauge(f"{PREFIX}_straggler", "1 while the rank is a named straggler",
                               labels, registry=r)  # fmt: skip
        self.steps = Gauge(f"{PREFIX}_steps", "steps done", registry=r)
        self.sim_time = Gauge(f"{PREFIX}_simulation_time_seconds", "simulated s", registry=r)
        self.rate = Gauge(f"{PREFIX}_updates_per_second",
                          "cell or body updates per wall s after compilation",
                          registry=r)  # fmt: skip
        self.chunks = Counter(f"{PREFIX}_chunks", "chunks run", registry=r)
        self.named = Counter(f"{PREFIX}_stragglers", "straggler episodes named", registry=r)
        self.server = None
        self.port = None
        if port is not None:
            self.server, _ = start_http_server(port, addr=address, registry=r)
            self.port = self.server.server_port

    def update(
        self, hosts: Sequence[str], table: np.ndarray, steps: int, step: int, time_s: float,
        rate: float, stragglers: set[int], named: int,
    ) -> None:  # fmt: skip
        """One chunk's values: ``table`` (ranks, len(VALUES)) as gathered, ``steps`` in the
        chunk, ``step`` done so far, ``time_s`` simulated, ``rate`` updates/s, the ranks now
        named stragglers and how many episodes were named by this chunk."""
        column = {name: i for i, name in enumerate(VALUES)}
        for rank, row in enumerate(table):
            labels = {"rank": str(rank), "host": hosts[rank]}
            for name, (_, source) in RANK_GAUGES.items():
                value = float(row[column[source]])
                if name == "step_seconds":
                    value /= steps
                if math.isfinite(value):
                    self.rank_gauges[name].labels(**labels).set(value)
            self.straggler.labels(**labels).set(1.0 if rank in stragglers else 0.0)
        self.steps.set(step)
        self.sim_time.set(time_s)
        self.rate.set(rate)
        self.chunks.inc()
        if named:
            self.named.inc(named)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
