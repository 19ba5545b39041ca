"""Taking what a source has at a chunk end: the one place replay and live data meet the checks."""

from __future__ import annotations

from typing import Any

from solver.twin.ingest import Ingestor
from solver.twin.replay import ReplaySource, row_rejection
from solver.twin.validate import Observation


def take_due(
    source: Any, ingestor: Ingestor, now: float, clock: float | None = None
) -> list[Observation]:
    """The observations accepted from ``source`` at simulation time ``now`` (s).

    A ``ReplaySource`` hands over its records up to ``now`` (a row that is not a reading is
    quarantined as it is); a live source (``MqttSource``) hands over what arrived, which is
    acknowledged once ingested (accepted or quarantined, the quarantine synced first). ``clock``
    (s, simulation time scale) is what readings' age is judged against; default ``now``.
    """
    accepted: list[Observation] = []
    if isinstance(source, ReplaySource):
        for record in source.due(now):
            if record.problem is not None:
                ingestor.counts["messages"] += 1
                ingestor.counts["readings"] += 1
                ingestor.counts["rejected"] += 1
                ingestor.quarantine.add(row_rejection(record), record.label)
            else:
                accepted += ingestor.ingest(record.raw, record.label, now)
        return accepted
    deliveries = source.drain()
    for delivery in deliveries:
        accepted += ingestor.ingest(delivery.payload, delivery.topic,
                                    now if clock is None else clock)  # fmt: skip
    ingestor.quarantine.sync()
    source.acknowledge(deliveries)
    return accepted
