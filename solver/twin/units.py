"""Units of sensor readings and their conversion to SI.

Each unit maps to (dimension, factor, offset): SI value = factor * value + offset. Readings may
arrive in any unit of the sensor's dimension; other units are rejected (reason ``units``).
Factors are exact definitions (NIST SP 811, appendix B).
"""

from __future__ import annotations

from typing import NamedTuple


class Unit(NamedTuple):
    dimension: str
    factor: float
    offset: float = 0.0


UNITS: dict[str, Unit] = {
    # velocity
    "m/s": Unit("velocity", 1.0),
    "cm/s": Unit("velocity", 1e-2),
    "mm/s": Unit("velocity", 1e-3),
    "km/h": Unit("velocity", 1000.0 / 3600.0),
    "ft/s": Unit("velocity", 0.3048),
    "kn": Unit("velocity", 1852.0 / 3600.0),
    # pressure
    "Pa": Unit("pressure", 1.0),
    "hPa": Unit("pressure", 100.0),
    "kPa": Unit("pressure", 1000.0),
    "MPa": Unit("pressure", 1e6),
    "bar": Unit("pressure", 1e5),
    "mbar": Unit("pressure", 100.0),
    "psi": Unit("pressure", 6894.757293168361),  # lbf/in^2
    # length
    "m": Unit("length", 1.0),
    "cm": Unit("length", 1e-2),
    "mm": Unit("length", 1e-3),
    # angle
    "rad": Unit("angle", 1.0),
    "deg": Unit("angle", 3.141592653589793 / 180.0),
    # pose: position (m) and unit quaternion (1), one vector
    "m,1": Unit("pose", 1.0),
    # temperature
    "K": Unit("temperature", 1.0),
    "degC": Unit("temperature", 1.0, 273.15),
    # dimensionless
    "1": Unit("dimensionless", 1.0),
}


def dimension_of(unit: str) -> str | None:
    """The dimension of a known unit, else None."""
    known = UNITS.get(unit)
    return None if known is None else known.dimension


def to_si(values, unit: str):
    """values (scalar or array) in ``unit`` -> SI. The unit must be known (KeyError otherwise)."""
    u = UNITS[unit]
    return values * u.factor + u.offset if u.offset else values * u.factor


def units_of(dimension: str) -> list[str]:
    """Every known unit of a dimension (for error messages)."""
    return [name for name, u in UNITS.items() if u.dimension == dimension]
