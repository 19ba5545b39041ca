"""Keeping every rejected message: a JSON-lines quarantine file and rate-limited log lines.

One line per rejection: wall time (UTC ISO 8601), source (file or topic), reason, detail, batch
index, and the message as received (``raw_text`` when it is UTF-8, else ``raw_base64``). Each line
is flushed when written, so a crash loses nothing that was counted; ``sync()`` (between chunks)
also fsyncs. Counts per reason are kept for run.json and the metrics.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from solver.twin.messages import Rejection

log = logging.getLogger("solver.twin")


class RateLimitedLog:
    """At most ``burst`` log lines per reason every ``interval`` seconds; the rest are counted and
    summarised when the window ends."""

    def __init__(self, burst: int = 5, interval: float = 10.0, clock=time.monotonic) -> None:
        self.burst, self.interval, self.clock = burst, interval, clock
        self.window_start: dict[str, float] = {}
        self.logged: Counter = Counter()
        self.suppressed: Counter = Counter()

    def warn(self, reason: str, message: str) -> bool:
        """Log ``message`` unless the reason's budget is spent; True when logged."""
        now = self.clock()
        start = self.window_start.get(reason)
        if start is None or now - start >= self.interval:
            if self.suppressed[reason]:
                log.warning("%d more %s rejection(s) not logged", self.suppressed[reason], reason)
            self.window_start[reason] = now
            self.logged[reason] = 0
            self.suppressed[reason] = 0
        if self.logged[reason] < self.burst:
            self.logged[reason] += 1
            log.warning("rejected (%s): %s", reason, message)
            return True
        self.suppressed[reason] += 1
        return False


class Quarantine:
    """The quarantine file of a run (appended to; a resumed run keeps what is there)."""

    def __init__(self, path: str | Path, rate_limit: RateLimitedLog | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self.counts: Counter = Counter()
        self.limiter = rate_limit or RateLimitedLog()

    def add(self, rejection: Rejection, source: str) -> None:
        record = {
            "received": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            "source": source,
            "reason": rejection.reason,
            "detail": rejection.detail,
            "index": rejection.index,
            "sensor": rejection.sensor,
        }
        try:
            record["raw_text"] = rejection.raw.decode("utf-8")
        except UnicodeDecodeError:
            record["raw_base64"] = base64.b64encode(rejection.raw).decode("ascii")
        self._file.write(json.dumps(record, ensure_ascii=True) + "\n")
        self._file.flush()
        self.counts[rejection.reason] += 1
        where = "" if rejection.index is None else f" (item {rejection.index})"
        self.limiter.warn(rejection.reason, f"{rejection.detail} from {source}{where}")

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()


def read_quarantine(path: str | Path) -> list[dict]:
    """Every record of a quarantine file, with ``raw`` (bytes) restored."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if "raw_text" in record:
            record["raw"] = record["raw_text"].encode("utf-8")
        else:
            record["raw"] = base64.b64decode(record["raw_base64"])
        records.append(record)
    return records
