"""Telemetry of every run: per-rank chunk times, memory, stragglers, Prometheus (docs/telemetry.md).

- ``config``: the ``telemetry`` section;
- ``session``: ``Telemetry``, driven by the run loop at every chunk end;
- ``records``: telemetry.csv; ``stragglers``: the detection logic; ``exporter``: the
  Prometheus gauges of a batch run; ``probes``: device memory and host RSS.
"""
