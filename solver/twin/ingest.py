"""One entry point for every message: parse, validate, quarantine, count. Never raises.

Used by every source (replay files, MQTT) between chunks: ``Ingestor.ingest(raw, source, now)``
returns the accepted observations; each rejection is in the quarantine file and in the counts.

At-least-once delivery (MQTT QoS 1) repeats messages: after a reconnection the broker resends
what it had not seen acknowledged, and a publisher resends what the broker had not acknowledged
when it went down. A message whose bytes equal one of the last ``DEDUPE_WINDOW`` messages is
therefore dropped and counted as a duplicate (its content is already accepted or quarantined),
so counts stay exact across broker restarts.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, OrderedDict

from solver.twin.messages import MAX_MESSAGE_BYTES, Reading, Rejection, parse_message
from solver.twin.quarantine import Quarantine
from solver.twin.validate import Duplicate, Observation, Validator

log = logging.getLogger("solver.twin")

DEDUPE_WINDOW = 65536  # messages remembered (by a 16-byte digest) to drop redeliveries


class Ingestor:
    """Attributes:
    validator: the sensors and the clock checks.
    quarantine: where rejections go.
    counts: "messages", "duplicate_messages" (bytes seen before: dropped unparsed), "readings"
        (parsed or not, of the other messages) = "accepted" + "rejected" + "duplicates"
        (readings equal to accepted ones: dropped, not quarantined).
    """

    def __init__(
        self, validator: Validator, quarantine: Quarantine, max_bytes: int = MAX_MESSAGE_BYTES
    ) -> None:
        self.validator, self.quarantine, self.max_bytes = validator, quarantine, max_bytes
        self.counts: Counter = Counter()
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    @property
    def rejected_by_reason(self) -> dict[str, int]:
        return dict(self.quarantine.counts)

    def ingest(self, raw: bytes, source: str, now: float) -> list[Observation]:
        """The accepted observations of one message at simulation time ``now`` (s)."""
        self.counts["messages"] += 1
        accepted: list[Observation] = []
        try:
            digest = hashlib.blake2b(bytes(raw), digest_size=16).digest()
            if digest in self._seen:
                self.counts["duplicate_messages"] += 1
                return accepted
            self._seen[digest] = None
            if len(self._seen) > DEDUPE_WINDOW:
                self._seen.popitem(last=False)
            items = parse_message(raw, self.max_bytes)
            for item in items:
                self.counts["readings"] += 1
                if isinstance(item, Reading):
                    reading = item
                    item = self.validator.check(reading, now)
                    if isinstance(item, Rejection):  # the bytes only for what is kept
                        item = item._replace(raw=_item_raw(raw, reading))
                if isinstance(item, Duplicate):
                    self.counts["duplicates"] += 1
                elif isinstance(item, Rejection):
                    self.counts["rejected"] += 1
                    self.quarantine.add(item, source)
                else:
                    self.counts["accepted"] += 1
                    accepted.append(item)
        except Exception as err:  # a bug must not stop the twin: keep the message, say so loudly
            log.exception("ingestion failed on a message from %s", source)
            self.counts["rejected"] += 1
            self.quarantine.add(
                Rejection("internal", f"{type(err).__name__}: {err}"[:200], bytes(raw)), source
            )
        return accepted


def _item_raw(raw: bytes, reading: Reading) -> bytes:
    """The bytes to quarantine for a reading that fails validation: the whole message when it is
    a single reading, else just that batch item (re-encoded)."""
    if reading.index is None:
        return bytes(raw)
    item = {"sensor": reading.sensor, "time": reading.time, "value": list(reading.value)}
    if reading.units is not None:
        item["units"] = reading.units
    return json.dumps(item).encode()
