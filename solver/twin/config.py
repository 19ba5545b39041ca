"""The ``twin`` section of the run config: which source, which sensors, how to assimilate.

Plain data in, frozen dataclasses out (the solver's config layer calls ``parse_twin`` with the
resolved section); every bad value is a one-line ``ConfigError`` naming its ``twin.*`` key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from solver.errors import ConfigError
from solver.twin.health import HealthConfig
from solver.twin.messages import MAX_MESSAGE_BYTES
from solver.twin.mqtt import MqttSettings
from solver.twin.sensors import Sensor, parse_sensors

MODES = ("none", "replay", "mqtt")
BEHIND_POLICIES = ("keep", "skip_ahead")


@dataclass(frozen=True)
class RealtimeConfig:
    """Keeping pace with real time (``solver/twin/realtime.py``).

    Attributes:
        window: wall s over which the real-time factor and the lag's trend are measured.
        behind: ``keep`` (assimilate every reading, late) or ``skip_ahead`` (re-synchronise to
            the present when more than ``max_lag`` behind; the readings older than ``max_lag``
            before the present are quarantined as ``stale``).
        max_lag: wall s; skip_ahead's trigger and the age bound of the readings it keeps.
        warn_every: wall s between repeated warnings while the twin cannot keep pace.
        startup_check: wall s of the timed run before the service reports ready (0: none).
    """

    window: float = 30.0
    behind: str = "keep"
    max_lag: float = 10.0
    warn_every: float = 60.0
    startup_check: float = 3.0


@dataclass(frozen=True)
class NudgingConfig:
    enabled: bool
    gain: float  # fraction of the innovation applied per assimilation, (0, 1]
    radius: float  # m, support of the spreading weight around each probe


@dataclass(frozen=True)
class EnkfConfig:
    enabled: bool
    members: int  # E >= 2
    inflation: float  # multiplicative, >= 1
    localisation: float  # m, Gaspari-Cohn half-width (support 2x)
    inflow_spread: float  # relative std of the members' initial inflow scale, >= 0
    inflow_walk: float = 0.01  # relative std of the inflow scale's random walk per update


@dataclass(frozen=True)
class ForecastConfig:
    enabled: bool
    every: float  # s of simulated time between forecasts
    horizon: float  # s ahead
    output_every: float  # s between forecast samples
    scenarios: tuple[float, ...]  # inflow factors of the what-if scenarios (1.0: as now)
    topic: str | None  # MQTT topic the forecasts are published to (mqtt mode); None: not


@dataclass(frozen=True)
class TwinConfig:
    """Attributes:
    mode: none | replay | mqtt.
    sensors: {id: Sensor}.
    recording: replay only: a CSV or HDF5 recording (path as given; relative to the launch dir).
    pace: replay only: None plays as fast as the simulation runs; p > 0 plays p simulated
        seconds per wall-clock second (1.0 = real time) and reports the lag.
    time_origin: s, the source time of simulation time 0 (mqtt: None = the wall clock's UNIX
        time when the run starts).
    max_age, max_future: s, readings older / further ahead than this (relative to the
        simulation time when they are ingested) are rejected; inf = never.
    max_message_bytes: size limit of one message.
    quarantine: file name of rejected messages in the run directory.
    every: s between assimilation updates (chunk ends); None: every chunk.
    inflow: the inflow boundary follows the inflow_velocity sensor.
    nudging: velocity near each (not held-out) probe relaxes toward its observation.
    compare_free_run: replay: also run without assimilation and report both errors at the
        held-out probes (twin.free_rms, twin.assimilated_rms).
    mqtt: mqtt only: the broker settings.
    metrics_port: serve Prometheus metrics on this port while running (0: any free port,
        logged); None: no metrics server.
    metrics_address: the address the metrics server binds (127.0.0.1: this machine only).
    health: the HTTP liveness and readiness endpoints (``solver/twin/health.py``; off by
        default).
    service: run until SIGTERM (then checkpoint and exit 0) instead of ``steps``.
    realtime: the real-time factor, the warning and the policy for falling behind.
    """

    mode: str
    sensors: dict[str, Sensor]
    recording: str | None
    pace: float | None
    time_origin: float | None
    max_age: float
    max_future: float
    max_message_bytes: int
    quarantine: str
    every: float | None
    inflow: bool
    nudging: NudgingConfig
    compare_free_run: bool
    mqtt: MqttSettings | None
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    service: bool = False
    enkf: EnkfConfig = EnkfConfig(False, 16, 1.05, 0.02, 0.1)
    forecast: ForecastConfig = ForecastConfig(False, 1.0, 0.5, 0.05, (1.0,), None)
    realtime: RealtimeConfig = RealtimeConfig()
    health: HealthConfig = HealthConfig()

    @property
    def enabled(self) -> bool:
        return self.mode != "none"


class _Keys:
    def __init__(self, prefix: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ConfigError(prefix, data, "a mapping")
        self.prefix, self.data = prefix, data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)

    def number(
        self,
        name: str,
        default: Any,
        low: float | None = None,
        *,
        open_low: bool = False,
        allow_none: bool = False,
        none_means: float | None = None,
    ) -> float | None:
        value = self.data.get(name, default)
        if value is None:
            if allow_none:
                return none_means
            raise ConfigError(self.key(name), value, "a number")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ConfigError(self.key(name), value, "a number")
        value = float(value)
        if low is not None and (value <= low if open_low else value < low):
            raise ConfigError(self.key(name), value, f"{'>' if open_low else '>='} {low:g}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        value = self.data.get(name, default)
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), value, "true | false")
        return value

    def text(self, name: str, default: Any = None, allow_none: bool = False) -> str | None:
        value = self.data.get(name, default)
        if value is None and allow_none:
            return None
        if not isinstance(value, str) or not value:
            raise ConfigError(self.key(name), value, "a non-empty string")
        return value


def parse_twin(data: Any) -> TwinConfig:
    """The typed twin config of the resolved ``twin`` section (None or missing: mode none)."""
    s = _Keys("twin", data if data is not None else {"mode": "none"})
    mode = s.get("mode", "none")
    if mode not in MODES:
        raise ConfigError("twin.mode", mode, " | ".join(MODES))
    sensors = parse_sensors("twin.sensors", s.get("sensors"))
    if mode != "none" and not sensors:
        raise ConfigError("twin.sensors", s.get("sensors"), "at least one sensor")
    recording = None
    if mode == "replay":
        recording = s.text("recording")
        if not recording.endswith((".csv", ".h5", ".hdf5")):
            raise ConfigError("twin.recording", recording, "a .csv or .h5 recording")
    nudge = _Keys("twin.nudging", s.get("nudging", {"enabled": False}))
    nudging = NudgingConfig(
        enabled=nudge.flag("enabled", False),
        gain=nudge.number("gain", 0.5, 0.0, open_low=True),
        radius=nudge.number("radius", 0.02, 0.0, open_low=True),
    )
    if nudging.gain > 1.0:
        raise ConfigError("twin.nudging.gain", nudging.gain, "(0, 1]")
    max_bytes = s.get("max_message_bytes", MAX_MESSAGE_BYTES)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 64:
        raise ConfigError("twin.max_message_bytes", max_bytes, "an integer >= 64")
    mqtt = None
    if mode == "mqtt":
        m = _Keys("twin.mqtt", s.get("mqtt"))
        port = m.get("port", 1883)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigError("twin.mqtt.port", port, "an integer in [1, 65535]")
        topics = m.get("topics")
        if (not isinstance(topics, (list, tuple)) or not topics
                or not all(isinstance(t, str) and t for t in topics)):  # fmt: skip
            raise ConfigError("twin.mqtt.topics", topics, "a non-empty list of topic filters")
        mqtt = MqttSettings(
            host=m.text("host", "localhost"),
            port=port,
            topics=tuple(topics),
            client_id=m.text("client_id"),
            keepalive_s=int(m.number("keepalive_s", 30, 5.0)),
            reconnect_min_s=m.number("reconnect_min_s", 0.5, 0.0, open_low=True),
            reconnect_max_s=m.number("reconnect_max_s", 30.0, 0.0, open_low=True),
            tls=m.flag("tls", False),
            ca_file=m.text("ca_file", allow_none=True),
            cert_file=m.text("cert_file", allow_none=True),
            key_file=m.text("key_file", allow_none=True),
            username_env=m.text("username_env", allow_none=True),
            password_env=m.text("password_env", allow_none=True),
            username_file=m.text("username_file", allow_none=True),
            password_file=m.text("password_file", allow_none=True),
        )
    e = _Keys("twin.enkf", s.get("enkf", {"enabled": False}))
    members = e.get("members", 16)
    if isinstance(members, bool) or not isinstance(members, int) or members < 2:
        raise ConfigError("twin.enkf.members", members, "an integer >= 2")
    enkf = EnkfConfig(
        enabled=e.flag("enabled", False),
        members=members,
        inflation=e.number("inflation", 1.05, 1.0),
        localisation=e.number("localisation", 0.02, 0.0, open_low=True),
        inflow_spread=e.number("inflow_spread", 0.1, 0.0),
        inflow_walk=e.number("inflow_walk", 0.01, 0.0),
    )
    if enkf.enabled and mode != "replay":
        raise ConfigError("twin.enkf.enabled", True, "false with twin=mqtt (EnKF: replay only)")
    f = _Keys("twin.forecast", s.get("forecast", {"enabled": False}))
    scenarios = f.get("scenarios", [1.0])
    if (not isinstance(scenarios, (list, tuple)) or not scenarios
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 10
                       for v in scenarios)):  # fmt: skip
        raise ConfigError("twin.forecast.scenarios", scenarios,
                          "a non-empty list of inflow factors in (0, 10]")  # fmt: skip
    forecast = ForecastConfig(
        enabled=f.flag("enabled", False),
        every=f.number("every", 1.0, 0.0, open_low=True),
        horizon=f.number("horizon", 0.5, 0.0, open_low=True),
        output_every=f.number("output_every", 0.05, 0.0, open_low=True),
        scenarios=tuple(float(v) for v in scenarios),
        topic=f.text("topic", None, allow_none=True),
    )
    if forecast.enabled and enkf.enabled:
        raise ConfigError("twin.forecast.enabled", True, "false with twin.enkf (not yet both)")
    r = _Keys("twin.realtime", s.get("realtime", {}))
    behind = r.get("behind", "keep")
    if behind not in BEHIND_POLICIES:
        raise ConfigError("twin.realtime.behind", behind, " | ".join(BEHIND_POLICIES))
    realtime = RealtimeConfig(
        window=r.number("window", 30.0, 0.0, open_low=True),
        behind=behind,
        max_lag=r.number("max_lag", 10.0, 0.0, open_low=True),
        warn_every=r.number("warn_every", 60.0, 0.0),
        startup_check=r.number("startup_check", 3.0, 0.0),
    )
    metrics_port = s.get("metrics_port")
    if metrics_port is not None and (
        isinstance(metrics_port, bool) or not isinstance(metrics_port, int)
        or not 0 <= metrics_port < 65536
    ):  # fmt: skip
        raise ConfigError("twin.metrics_port", metrics_port, "null or an integer in [0, 65535]")
    health = _health(s.get("health", {}), mode, metrics_port, enkf.enabled)
    return TwinConfig(
        mode=mode,
        sensors=sensors,
        recording=recording,
        pace=s.number("pace", None, 0.0, open_low=True, allow_none=True),
        time_origin=s.number("time_origin", 0.0, allow_none=mode == "mqtt", none_means=None),
        max_age=s.number(
            "max_age", None, 0.0, open_low=True, allow_none=True, none_means=math.inf
        ),  # fmt: skip
        max_future=s.number("max_future", None, 0.0, allow_none=True, none_means=math.inf),
        max_message_bytes=max_bytes,
        quarantine=s.text("quarantine", "quarantine.jsonl"),
        every=s.number("every", None, 0.0, open_low=True, allow_none=True),
        inflow=s.flag("inflow", False),
        nudging=nudging,
        compare_free_run=s.flag("compare_free_run", mode == "replay"),
        mqtt=mqtt,
        metrics_port=metrics_port,
        metrics_address=s.text("metrics_address", "127.0.0.1"),
        service=s.flag("service", False),
        enkf=enkf,
        forecast=forecast,
        realtime=realtime,
        health=health,
    )


def _health(data: Any, mode: str, metrics_port: int | None, enkf: bool) -> HealthConfig:
    """The ``twin.health`` section: the liveness and readiness endpoints."""
    h = _Keys("twin.health", data if data is not None else {})
    port = h.get("port")
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536
    ):  # fmt: skip
        raise ConfigError("twin.health.port", port, "null or an integer in [0, 65535]")
    if port is not None and port != 0 and port == metrics_port:
        raise ConfigError("twin.health.port", port, "a port other than twin.metrics_port")
    if port is not None and (mode == "none" or enkf):
        raise ConfigError("twin.health.port", port,
                          "null without a twin or with twin.enkf (not yet)")  # fmt: skip
    return HealthConfig(
        port=port,
        address=h.text("address", "127.0.0.1"),
        deadline=h.number("deadline", 30.0, 0.0, open_low=True),
        startup_deadline=h.number("startup_deadline", 600.0, 0.0, open_low=True),
    )
