"""Parsing sensor messages: bytes from a file or the network -> readings, or designed rejections.

Format (JSON, UTF-8), one reading::

    {"sensor": "probe_3", "time": 12.25, "value": [0.12, -0.01], "units": "m/s"}

or a batch ``{"readings": [<reading>, ...]}``. ``time`` is seconds (a number) on the source's
clock, or an ISO 8601 string with a UTC offset; ``value`` a number or a list of numbers;
``units`` is optional (the sensor's configured unit otherwise).

Only ``json.loads`` touches the bytes (nothing is ever deserialised as code); ``NaN``/``Infinity``
literals, duplicate keys, over-deep nesting and oversized messages are rejections, as is every
schema violation. A batch is checked reading by reading: its good readings pass, each bad one is a
rejection of its own (with its index), so one bad value does not discard its neighbours.
Nothing here raises: every outcome is a ``Reading`` or a ``Rejection``.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, NamedTuple

MAX_MESSAGE_BYTES = 65536
MAX_BATCH = 4096  # readings per batch message
MAX_COMPONENTS = 16  # values per reading
READING_KEYS = frozenset({"sensor", "time", "value", "units"})

REASONS = (
    "too_large",  # message above the size limit
    "encoding",  # not UTF-8
    "json",  # not JSON (also duplicate keys, too deep)
    "schema",  # JSON, but not a reading or a batch of readings
    "unknown_sensor",
    "units",  # unknown unit, or not one of the sensor's dimension
    "shape",  # wrong number of components for the sensor
    "non_finite",  # NaN or infinite value or time
    "out_of_range",  # outside the sensor's valid range
    "out_of_order",  # older than the sensor's last accepted reading
    "too_old",  # older than the accepted age
    "future",  # ahead of the twin's clock by more than allowed
    "stale",  # from before the point where a twin that fell behind skipped ahead to the present
    "internal",  # a bug in the ingestion code (logged with its traceback); never by design
)


class Reading(NamedTuple):
    """A syntactically valid reading (not yet checked against the sensors)."""

    sensor: str
    time: float  # s, source clock
    value: tuple[float, ...]  # k values in ``units`` (or the sensor's unit when None)
    units: str | None
    index: int | None  # position in its batch, None for a single reading


class Rejection(NamedTuple):
    """A rejected message or batch item: why, in words, and the bytes as received."""

    reason: str  # one of REASONS
    detail: str
    raw: bytes
    index: int | None = None  # batch position, None for the whole message
    sensor: str | None = None


class _Bad(Exception):  # noqa: N818 (a rejection, not an error)
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _no_constants(name: str) -> Any:
    raise _Bad("non_finite", f"JSON literal {name} is not a number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Bad("json", f"duplicate key {key!r}")
        out[key] = value
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _time(value: Any) -> float:
    if isinstance(value, bool):
        raise _Bad("schema", f"field 'time' must be a number or ISO 8601 text, got {value}")
    if isinstance(value, (int, float)):
        try:
            t = float(value)
        except OverflowError:
            raise _Bad("non_finite", "field 'time' overflows a float") from None
        if not math.isfinite(t):
            raise _Bad("non_finite", f"field 'time' is {t}")
        return t
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            raise _Bad("schema", f"field 'time' is not ISO 8601: {_short(value)}") from None
        if stamp.tzinfo is None:
            raise _Bad("schema", f"field 'time' has no UTC offset: {_short(value)}")
        return stamp.timestamp()
    raise _Bad("schema", f"field 'time' must be a number or ISO 8601 text, got {_short(value)}")


def _values(value: Any) -> tuple[float, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > MAX_COMPONENTS:
        raise _Bad("schema", f"field 'value' must have 1 to {MAX_COMPONENTS} numbers")
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise _Bad("schema", f"field 'value' holds a non-number: {_short(item)}")
        try:
            number = float(item)
        except OverflowError:
            raise _Bad("non_finite", "field 'value' overflows a float") from None
        if not math.isfinite(number):
            raise _Bad("non_finite", f"field 'value' is not finite: {_short(items)}")
        out.append(number)
    return tuple(out)


def _reading(item: Any, index: int | None) -> Reading:
    if not isinstance(item, dict):
        raise _Bad("schema", f"a reading must be an object, got {type(item).__name__}")
    missing = sorted({"sensor", "time", "value"} - item.keys())
    if missing:
        raise _Bad("schema", f"missing field(s) {', '.join(missing)}")
    extra = sorted(item.keys() - READING_KEYS)
    if extra:
        raise _Bad("schema", f"unknown field(s) {', '.join(map(_short, extra))}")
    sensor = item["sensor"]
    if not isinstance(sensor, str) or not sensor or len(sensor) > 64:
        raise _Bad("schema", f"field 'sensor' must be 1-64 characters, got {_short(sensor)}")
    units = item.get("units")
    if units is not None and (not isinstance(units, str) or len(units) > 32):
        raise _Bad("schema", f"field 'units' must be text, got {_short(units)}")
    return Reading(sensor, _time(item["time"]), _values(item["value"]), units, index)


def parse_message(raw: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> list[Reading | Rejection]:
    """Every reading of one message, or the rejections; never raises."""
    if not isinstance(raw, (bytes, bytearray)):
        raw = str(raw).encode("utf-8", "replace")
    raw = bytes(raw)
    try:
        if len(raw) > max_bytes:
            raise _Bad("too_large", f"{len(raw)} bytes, limit {max_bytes}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _Bad("encoding", f"not UTF-8 at byte {err.start}") from None
        try:
            data = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
        except _Bad:
            raise
        except RecursionError:
            raise _Bad("json", "nested too deeply") from None
        except ValueError as err:  # JSONDecodeError, and int() of a too-long digit string
            raise _Bad("json", str(err).splitlines()[0][:120]) from None
    except _Bad as bad:
        return [Rejection(bad.reason, bad.detail, raw)]
    if isinstance(data, dict) and "readings" in data:
        if set(data) != {"readings"} or not isinstance(data["readings"], list):
            return [Rejection("schema", 'a batch is {"readings": [...]} and nothing else', raw)]
        items = data["readings"]
        if not items or len(items) > MAX_BATCH:
            return [Rejection("schema", f"a batch holds 1 to {MAX_BATCH} readings", raw)]
        return [_one(item, k) for k, item in enumerate(items)]
    return [_one(data, None, raw)]


def _one(item: Any, index: int | None, raw: bytes | None = None) -> Reading | Rejection:
    try:
        return _reading(item, index)
    except _Bad as bad:
        if raw is None:  # a batch item: keep exactly that item
            raw = json.dumps(item, allow_nan=True).encode()
        sensor = item.get("sensor") if isinstance(item, dict) else None
        return Rejection(bad.reason, bad.detail, raw, index, sensor if isinstance(sensor, str)
                         else None)  # fmt: skip
