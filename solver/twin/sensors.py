"""Sensors of a digital twin, declared in the config (``twin.sensors``).

A sensor has an id, a kind, where it is (probes: a point in physical units, m; a pose sensor: the
body it tracks), the unit its readings come in when a message names none, a valid range (in that
unit, per component), and a noise standard deviation (same unit). Everything is converted to SI
here, once; messages are checked against the SI values (``solver.twin.validate``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from solver.errors import ConfigError
from solver.twin.units import UNITS, dimension_of, to_si, units_of

SENSOR_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True)
class SensorKind:
    dimension: str  # of its readings (solver.twin.units)
    components: int | None  # values per reading; None: the dimension of its position (2 or 3)
    needs_position: bool
    needs_body: bool


KINDS: dict[str, SensorKind] = {
    "velocity_probe": SensorKind("velocity", None, True, False),
    "pressure_probe": SensorKind("pressure", 1, True, False),
    "inflow_velocity": SensorKind("velocity", 1, False, False),
    "body_pose": SensorKind("pose", 7, False, True),  # x, y, z (m), then quaternion w, x, y, z
}


@dataclass(frozen=True)
class Sensor:
    """One declared sensor; SI units throughout.

    Attributes:
        id: unique name, [A-Za-z0-9_.:-], at most 64 characters.
        kind: a key of KINDS.
        components: values per reading.
        units: the unit of readings that name none.
        position: (d,) m, probes only (else None).
        body: index of the tracked body, pose sensors only (else None).
        low, high: (components,) SI bounds of a valid reading (inclusive; -inf/inf: unbounded).
        noise_std: SI standard deviation of one component's noise, >= 0.
        held_out: not assimilated; kept to measure the error of the twin (verification probes).
    """

    id: str
    kind: str
    components: int
    units: str
    position: tuple[float, ...] | None
    body: int | None
    low: np.ndarray
    high: np.ndarray
    noise_std: float
    held_out: bool = False


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(key, value, "a finite number")
    return float(value)


def parse_sensor(prefix: str, data: Any) -> Sensor:
    """One sensor from its config mapping; ``prefix`` (e.g. ``twin.sensors[2]``) names errors."""
    if not isinstance(data, dict):
        raise ConfigError(prefix, data, "a mapping with id, kind, units, range, noise_std")
    allowed = {"id", "kind", "position", "body", "units", "range", "noise_std", "held_out"}
    for name in data:
        if name not in allowed:
            raise ConfigError(f"{prefix}.{name}", data[name], f"one of the keys {sorted(allowed)}")
    sensor_id = data.get("id")
    if not isinstance(sensor_id, str) or not SENSOR_ID.match(sensor_id):
        raise ConfigError(f"{prefix}.id", sensor_id, "1-64 characters of [A-Za-z0-9_.:-]")
    kind_name = data.get("kind")
    if kind_name not in KINDS:
        raise ConfigError(f"{prefix}.kind", kind_name, " | ".join(KINDS))
    kind = KINDS[kind_name]

    position = None
    if kind.needs_position:
        raw = data.get("position")
        if not isinstance(raw, (list, tuple)) or len(raw) not in (2, 3):
            raise ConfigError(f"{prefix}.position", raw, "a point [x, y] or [x, y, z] in m")
        position = tuple(_number(f"{prefix}.position[{i}]", v) for i, v in enumerate(raw))
    components = kind.components if kind.components is not None else len(position)

    body = None
    if kind.needs_body:
        raw = data.get("body")
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise ConfigError(f"{prefix}.body", raw, "the index of a body, >= 0")
        body = raw

    units = data.get("units")
    if dimension_of(units) != kind.dimension:
        choices = ", ".join(units_of(kind.dimension))
        raise ConfigError(f"{prefix}.units", units, f"a {kind.dimension} unit: {choices}")
    low, high = -math.inf, math.inf
    raw_range = data.get("range")
    if raw_range is not None:
        if not isinstance(raw_range, (list, tuple)) or len(raw_range) != 2:
            raise ConfigError(f"{prefix}.range", raw_range, f"[low, high] in {units}, or null")
        low = -math.inf if raw_range[0] is None else _number(f"{prefix}.range[0]", raw_range[0])
        high = math.inf if raw_range[1] is None else _number(f"{prefix}.range[1]", raw_range[1])
        if not low < high:
            raise ConfigError(f"{prefix}.range", raw_range, "low < high")
    noise = _number(f"{prefix}.noise_std", data.get("noise_std", 0.0))
    if noise < 0:
        raise ConfigError(f"{prefix}.noise_std", noise, f">= 0 (in {units})")
    held_out = data.get("held_out", False)
    if not isinstance(held_out, bool):
        raise ConfigError(f"{prefix}.held_out", held_out, "true | false")
    scale = UNITS[units].factor
    return Sensor(
        id=sensor_id,
        kind=kind_name,
        components=components,
        units=units,
        position=position,
        body=body,
        low=np.full(components, float(to_si(low, units)) if math.isfinite(low) else low),
        high=np.full(components, float(to_si(high, units)) if math.isfinite(high) else high),
        noise_std=noise * scale,
        held_out=held_out,
    )


def parse_sensors(prefix: str, data: Any) -> dict[str, Sensor]:
    """The sensor list of the config -> {id: Sensor}; ids must be unique."""
    if data is None:
        return {}
    if not isinstance(data, (list, tuple)):
        raise ConfigError(prefix, data, "a list of sensors")
    sensors: dict[str, Sensor] = {}
    for i, item in enumerate(data):
        sensor = parse_sensor(f"{prefix}[{i}]", item)
        if sensor.id in sensors:
            raise ConfigError(f"{prefix}[{i}].id", sensor.id, "a unique id (it is used twice)")
        sensors[sensor.id] = sensor
    return sensors
