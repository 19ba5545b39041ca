"""Prometheus metrics of a twin run (prometheus-client), served over HTTP while it runs.

Exported (prefix ``solver_twin_``): ``messages_total``, ``readings_accepted_total``,
``readings_rejected_total{reason}``, ``duplicates_total``, ``ingest_lag_seconds`` (with a pace:
how far the run is behind it; live without one: wall time since the oldest waiting message
arrived when the chunk ended), ``steps_per_second``, ``simulation_time_seconds``,
``innovation_rms`` (m/s, the last update's), ``sensor_staleness_seconds{sensor}`` (s since the
sensor's newest reading on the twin's clock, never negative), ``realtime_factor`` (simulated s
per wall s over ``twin.realtime.window``), ``behind_seconds`` (wall s behind the pace or real
time), ``skips_total`` (skips ahead to the present), ``ready`` (1 once the start-up check is
done). Each run has its own registry, so several runs in one process (tests, the free and the
assimilated run) do not collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

PREFIX = "solver_twin"


class TwinMetrics:
    """Counters follow the ingestor's totals (``update`` adds the increase since the last call)."""

    def __init__(self, port: int | None = None, address: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages = Counter(f"{PREFIX}_messages", "messages received", registry=r)
        self.accepted = Counter(f"{PREFIX}_readings_accepted", "readings accepted", registry=r)
        self.rejected = Counter(f"{PREFIX}_readings_rejected", "readings rejected by reason",
                                ["reason"], registry=r)  # fmt: skip
        self.duplicates = Counter(f"{PREFIX}_duplicates", "repeated messages or readings dropped",
                                  registry=r)  # fmt: skip
        self.lag = Gauge(f"{PREFIX}_ingest_lag_seconds", "ingestion lag", registry=r)
        self.rate = Gauge(f"{PREFIX}_steps_per_second", "time steps per wall second", registry=r)
        self.sim_time = Gauge(f"{PREFIX}_simulation_time_seconds", "simulated time", registry=r)
        self.innovation = Gauge(f"{PREFIX}_innovation_rms", "RMS innovation, m/s", registry=r)
        self.staleness = Gauge(f"{PREFIX}_sensor_staleness_seconds",
                               "s since a sensor's newest reading, on the twin's clock",
                               ["sensor"], registry=r)  # fmt: skip
        self.factor = Gauge(f"{PREFIX}_realtime_factor",
                            "simulated s per wall s over the window", registry=r)  # fmt: skip
        self.behind = Gauge(f"{PREFIX}_behind_seconds", "wall s behind the pace", registry=r)
        self.skips = Counter(f"{PREFIX}_skips", "skips ahead to the present", registry=r)
        self.ready = Gauge(f"{PREFIX}_ready", "1 once the start-up check is done", registry=r)
        self._seen: dict[str, float] = {}
        self.server = None
        self.port = None
        if port is not None:
            self.server, _ = start_http_server(port, addr=address, registry=r)
            self.port = self.server.server_port

    def _add(self, key: str, total: float, counter) -> None:
        increase = total - self._seen.get(key, 0.0)
        if increase > 0:
            counter.inc(increase)
        self._seen[key] = total

    def update(
        self,
        counts: dict[str, int],
        rejected_by_reason: dict[str, int],
        lag_s: float,
        steps_per_s: float,
        time_s: float,
        innovation_rms: float | None,
        staleness_s: dict[str, float],
        realtime_factor: float | None = None,
        behind_s: float | None = None,
        skips: int = 0,
    ) -> None:
        self._add("messages", counts.get("messages", 0), self.messages)
        self._add("accepted", counts.get("accepted", 0), self.accepted)
        duplicates = counts.get("duplicates", 0) + counts.get("duplicate_messages", 0)
        self._add("duplicates", duplicates, self.duplicates)
        for reason, total in rejected_by_reason.items():
            self._add(f"rejected:{reason}", total, self.rejected.labels(reason=reason))
        self.lag.set(lag_s)
        self.rate.set(steps_per_s)
        self.sim_time.set(time_s)
        if innovation_rms is not None:
            self.innovation.set(innovation_rms)
        for sensor, age in staleness_s.items():
            self.staleness.labels(sensor=sensor).set(age)
        if realtime_factor is not None:
            self.factor.set(realtime_factor)
        if behind_s is not None:
            self.behind.set(behind_s)
        self._add("skips", skips, self.skips)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
