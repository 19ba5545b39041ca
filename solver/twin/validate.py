"""Checking parsed readings against the declared sensors and the twin's clock.

A ``Validator`` keeps the last accepted time of every sensor, so it sees readings out of order
and redeliveries (MQTT QoS 1 delivers at least once). Times are mapped to simulation time by
``time_origin`` (the source time of simulation time 0); a twin that skips ahead to the present
moves that origin (``shift``) and calls readings from before the skip ``stale``. The per-sensor
memory is kept in source time, so it is unchanged by a shift. Nothing here raises.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from solver.twin.messages import Reading, Rejection
from solver.twin.sensors import Sensor
from solver.twin.units import UNITS, units_of

QUATERNION_TOLERANCE = 1e-3  # |q| of a pose reading may differ from 1 by this much
RECENT = 4096  # accepted (time, value) remembered per sensor to recognise redeliveries


class Observation(NamedTuple):
    """An accepted reading: sensor, simulation time (s) and SI value (k,)."""

    sensor: str
    time: float
    value: np.ndarray


class Duplicate(NamedTuple):
    """A reading identical to one already accepted (an at-least-once redelivery): dropped and
    counted, not quarantined, since nothing is lost."""

    sensor: str
    time: float


@dataclass
class Validator:
    """Attributes:
    sensors: {id: Sensor}.
    time_origin: s, the source time that is simulation time 0.
    max_age: s, readings older than now - max_age are rejected (inf: never).
    max_future: s, readings later than now + max_future are rejected (inf: never).
    stale_before: s (simulation time), readings before this are rejected as ``stale``: set by
        a skip ahead to the present, so the backlog it jumped over is quarantined, not lost.
    planar: the bodies are disks of a 2D grid: a ``body_pose`` must lie in the plane (z = 0,
        a turn about z only), else it is rejected as ``out_of_range`` (the step would hold the
        disk in the plane and quietly drop the rest).
    last_time, recent: per sensor, the last accepted source time and the recent accepted
        (source time: value) pairs.
    """

    sensors: dict[str, Sensor]
    time_origin: float = 0.0
    max_age: float = math.inf
    max_future: float = math.inf
    stale_before: float = -math.inf
    planar: bool = False
    last_time: dict[str, float] = field(default_factory=dict)
    recent: dict[str, OrderedDict] = field(default_factory=dict)
    _limits: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)

    def _bounds(self, sensor: Sensor) -> tuple[list[float], list[float]]:
        limits = self._limits.get(sensor.id)
        if limits is None:
            limits = self._limits[sensor.id] = (sensor.low.tolist(), sensor.high.tolist())
        return limits

    def check(
        self, reading: Reading, now: float, raw: bytes = b""
    ) -> Observation | Duplicate | Rejection:
        """Accept ``reading`` at simulation time ``now`` (s) or say why not (``raw``: the bytes
        a rejection carries; the caller may fill them in later)."""

        def reject(reason: str, detail: str) -> Rejection:
            return Rejection(reason, detail, raw, reading.index, reading.sensor)

        sensor = self.sensors.get(reading.sensor)
        if sensor is None:
            return reject("unknown_sensor", f"sensor {reading.sensor[:64]!r} is not declared")
        units = reading.units if reading.units is not None else sensor.units
        unit = UNITS.get(units)
        dimension = UNITS[sensor.units].dimension
        if unit is None or unit.dimension != dimension:
            return reject(
                "units",
                f"{sensor.id}: units {units[:32]!r} are not {dimension} "
                f"({', '.join(units_of(dimension))})",
            )
        if len(reading.value) != sensor.components:
            return reject(
                "shape",
                f"{sensor.id}: {len(reading.value)} value(s), the sensor has {sensor.components}",
            )
        # plain floats: a reading has a handful of components, where NumPy's per-call cost
        # would dominate the ingestion rate
        factor, offset = unit.factor, unit.offset
        value = [v * factor + offset for v in reading.value]
        low, high = self._bounds(sensor)
        for k, v in enumerate(value):
            if not math.isfinite(v):
                return reject("non_finite", f"{sensor.id}: value not finite after unit conversion")
            if v < low[k] or v > high[k]:
                return reject(
                    "out_of_range",
                    f"{sensor.id}: component {k} = {v:.6g} (SI) outside [{low[k]:.6g}, "
                    f"{high[k]:.6g}]",
                )
        if sensor.kind == "body_pose":
            norm = math.sqrt(sum(q * q for q in value[3:]))
            if abs(norm - 1.0) > QUATERNION_TOLERANCE:
                return reject("out_of_range", f"{sensor.id}: |quaternion| = {norm:.6g}, not 1")
            if self.planar and (value[2] != 0.0 or max(abs(value[4]), abs(value[5])) > 0.0):
                return reject(
                    "out_of_range",
                    f"{sensor.id}: z = {value[2]:.6g} m, quaternion x, y = {value[4]:.6g}, "
                    f"{value[5]:.6g}: a disk of a 2D grid has z = 0 and turns about z only",
                )
        source_time = reading.time
        time = source_time - self.time_origin
        if not math.isfinite(time):
            return reject("non_finite", f"{sensor.id}: time not finite after the origin shift")
        recent = self.recent.setdefault(sensor.id, OrderedDict())
        if source_time in recent:
            if recent[source_time] == value:
                return Duplicate(sensor.id, time)
            return reject(
                "out_of_order", f"{sensor.id}: another value at t = {time:.6f} s was accepted"
            )
        last = self.last_time.get(sensor.id)
        if last is not None and source_time < last:
            return reject(
                "out_of_order",
                f"{sensor.id}: t = {time:.6f} s before the last {last - self.time_origin:.6f} s",
            )
        if time < self.stale_before:
            return reject(
                "stale",
                f"{sensor.id}: t = {time:.6f} s is before {self.stale_before:.6f} s, where the "
                "twin skipped ahead to the present",
            )
        if time < now - self.max_age:
            return reject(
                "too_old",
                f"{sensor.id}: t = {time:.6f} s is over {self.max_age:g} s before {now:.6f} s",
            )
        if time > now + self.max_future:
            return reject(
                "future",
                f"{sensor.id}: t = {time:.6f} s is over {self.max_future:g} s after {now:.6f} s",
            )
        self.last_time[sensor.id] = source_time
        recent[source_time] = value
        if len(recent) > RECENT:
            recent.popitem(last=False)
        return Observation(sensor.id, time, np.array(value))

    def shift(self, seconds: float, stale_before: float) -> None:
        """Simulation time now starts ``seconds`` later on the source's clock (a skip ahead);
        readings before simulation time ``stale_before`` (new clock) are stale from now on."""
        self.time_origin += seconds
        self.stale_before = max(self.stale_before - seconds, stale_before)
