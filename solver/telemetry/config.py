"""Validates the ``telemetry`` section (per-rank timings, memory, stragglers, Prometheus)."""

from __future__ import annotations

from dataclasses import dataclass

from solver.errors import ConfigError
from solver.sections import Section

MAX_PORT = 65535


@dataclass(frozen=True)
class TelemetryConfig:
    """The typed ``telemetry`` section.

    Attributes:
        enabled: record telemetry.csv and run.json's ``telemetry`` section.
        port: serve the Prometheus metrics on this TCP port from process 0 (0: any free port);
            None: no endpoint.
        address: the interface the endpoint binds to (127.0.0.1: this host only).
        straggler_factor: a rank is slow in a chunk when its busy time per step exceeds this
            factor times the median of the other ranks' (> 1).
        straggler_chunks: a rank slow in this many consecutive timed chunks is named a straggler.
        straggler_min_s: a rank is slow in a chunk only when its busy time also exceeds that
            median by more than this many seconds over the chunk (>= 0; ignores the
            millisecond jitter of short chunks).
        halo_every: time one halo exchange alone every this many chunks (0: never; runs on one
            shard never probe).
    """

    enabled: bool = True
    port: int | None = None
    address: str = "127.0.0.1"
    straggler_factor: float = 1.5
    straggler_chunks: int = 3
    straggler_min_s: float = 0.1
    halo_every: int = 10


def parse_telemetry(s: Section) -> TelemetryConfig:
    """The typed ``telemetry`` section (one-line ConfigError naming key, value and range)."""
    port = s.raw("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                             or not 0 <= port <= MAX_PORT):  # fmt: skip
        raise ConfigError(s.key("port"), port, f"null or an integer in [0, {MAX_PORT}]")
    address = s.raw("address")
    if not isinstance(address, str) or not address.strip() or any(c.isspace() for c in address):
        raise ConfigError(
            s.key("address"), address, "a host name or IP address (127.0.0.1: this host only)"
        )
    return TelemetryConfig(
        enabled=s.boolean("enabled"),
        port=port,
        address=address,
        straggler_factor=s.number("straggler_factor", low=1.0),
        straggler_chunks=s.integer("straggler_chunks", low=1),
        straggler_min_s=s.number("straggler_min_s", low=0.0, low_open=False),
        halo_every=s.integer("halo_every", low=0),
    )
