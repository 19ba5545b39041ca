"""Recorded sensor streams, played at simulation time (optionally paced to the wall clock).

Formats:
    CSV: a header ``time,sensor,value[,units]``; one reading per row; ``value`` is a number or
        several separated by ``;`` (a vector). Rows are turned into the JSON messages a live
        source would send, so replayed and live data pass the same checks; a row that is not
        even a reading (wrong column count, a time that is not a number) is quarantined as it is.
    HDF5: one group per sensor id holding ``time`` (T,) and ``value`` (T,) or (T, k), with an
        optional ``units`` attribute on the group.

``due(now)`` hands over, in recording order, every message whose simulation time
(time - time_origin) is at most ``now`` (plus a round-off allowance). With ``pace`` p the call
first waits until the wall clock has run now / p seconds since the first call, so the twin
runs no faster than the recording was made (x p); ``lag_s`` says how far the simulation is
behind that schedule.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from solver.twin.messages import Rejection
from solver.twin.realtime import Schedule

TIME_SLACK = 1e-9  # s: a reading at the chunk end counts as due despite round-off


@dataclass(frozen=True)
class Recorded:
    time: float  # source time, s (-inf for a row that could not be read: delivered first)
    raw: bytes  # the message as a live source would send it (or the bad row)
    label: str  # where it came from: "file:line"
    problem: str | None = None  # why the row is not a message


def _csv_messages(path: Path) -> list[Recorded]:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    lines = text.splitlines()
    if not lines:
        return []
    header = [h.strip() for h in next(csv.reader([lines[0]]))]
    if header[:3] != ["time", "sensor", "value"] or len(header) > 4:
        raise ValueError(f"{path}: the header must be time,sensor,value[,units], got {lines[0]!r}")
    out = []
    for number, line in enumerate(lines[1:], start=2):
        label = f"{path.name}:{number}"
        if not line.strip():
            continue
        raw_line = line.encode("utf-8", errors="surrogateescape")
        fields = next(csv.reader(io.StringIO(line)), [])
        if len(fields) not in (3, len(header)):
            out.append(Recorded(-math.inf, raw_line, label, f"{len(fields)} columns"))
            continue
        try:
            t = float(fields[0])
        except ValueError:
            out.append(Recorded(-math.inf, raw_line, label, f"time {fields[0][:30]!r}"))
            continue
        message: dict = {"sensor": fields[1], "time": t}
        try:
            values = [float(v) for v in fields[2].split(";")]
            message["value"] = values[0] if len(values) == 1 else values
        except ValueError:
            message["value"] = fields[2]  # the parser rejects it as a schema error
        if len(fields) == 4 and fields[3]:
            message["units"] = fields[3]
        raw = json.dumps(message, allow_nan=True).encode()
        out.append(Recorded(t if math.isfinite(t) else -math.inf, raw, label))
    return out


def _h5_messages(path: Path) -> list[Recorded]:
    import h5py
    import numpy as np

    out = []
    with h5py.File(path, "r") as f:
        for sensor, group in f.items():
            if not isinstance(group, h5py.Group) or "time" not in group or "value" not in group:
                raise ValueError(f"{path}: /{sensor} must be a group with time and value")
            times = np.asarray(group["time"], dtype=np.float64)
            values = np.asarray(group["value"], dtype=np.float64)
            if values.shape[0] != times.shape[0]:
                raise ValueError(f"{path}: /{sensor}/value has {values.shape[0]} rows, time "
                                 f"{times.shape[0]}")  # fmt: skip
            units = group.attrs.get("units")
            units = units.decode() if isinstance(units, bytes) else units
            for k, t in enumerate(times):
                v = values[k]
                message: dict = {"sensor": sensor, "time": float(t),
                                 "value": v.tolist() if v.ndim else float(v)}  # fmt: skip
                if units:
                    message["units"] = str(units)
                out.append(Recorded(float(t) if math.isfinite(t) else -math.inf,
                                    json.dumps(message, allow_nan=True).encode(),
                                    f"{path.name}:/{sensor}[{k}]"))  # fmt: skip
    return out


def load_recording(path: str | Path) -> list[Recorded]:
    """Every message of a recording, sorted by time (stable: recording order among equals)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"recording {path} not found")
    records = _csv_messages(path) if path.suffix == ".csv" else _h5_messages(path)
    return sorted(records, key=lambda r: r.time)


class ReplaySource:
    """Hands a recording to the twin at simulation time."""

    def __init__(self, path: str | Path, time_origin: float = 0.0, pace: float | None = None):
        self.records = load_recording(path)
        self.time_origin = time_origin
        self.pace = pace
        self.position = 0
        self._schedule: Schedule | None = None
        self.lag_s = 0.0

    @property
    def exhausted(self) -> bool:
        return self.position >= len(self.records)

    def last_time(self) -> float | None:
        """Simulation time of the last reading (None for an empty recording)."""
        finite = [r.time for r in self.records if math.isfinite(r.time)]
        return max(finite) - self.time_origin if finite else None

    def due(self, now: float) -> list[Recorded]:
        """The messages up to simulation time ``now`` (s) not handed over yet."""
        if self.pace is not None:
            wall = time.monotonic()
            if self._schedule is None:  # paced from the first call
                self._schedule = Schedule(self.pace, wall, now)
            target = self._schedule.target(now)
            if target > wall:
                time.sleep(target - wall)
                wall = target
            self.lag_s = self._schedule.behind(now, wall)
        out = []
        while self.position < len(self.records):
            record = self.records[self.position]
            if record.time - self.time_origin > now + TIME_SLACK:
                break
            out.append(record)
            self.position += 1
        return out


def row_rejection(record: Recorded) -> Rejection:
    """The quarantine entry of a row that is not a reading."""
    return Rejection("schema", f"recording row is not a reading ({record.problem})", record.raw)
