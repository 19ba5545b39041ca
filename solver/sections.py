"""Typed accessors for one plain-data config section; every error names the full dotted key.

Each package's config module (``solver/<package>/config.py``) validates its own section with a
``Section``; a bad value raises ``ConfigError`` whose one-line message names the key, the value and
the allowed range. This module imports nothing of the solver but ``solver.errors``.
"""

from __future__ import annotations

import math
from typing import Any

from solver.errors import ConfigError

__all__ = ["Section"]


class Section:
    """Typed accessors for one config section; every error names the full dotted key."""

    def __init__(self, prefix: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ConfigError(prefix, data, "a mapping of keys")
        self.prefix, self.data = prefix, data

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def raw(self, name: str) -> Any:
        if name not in self.data:
            raise ConfigError(self.key(name), None, "a value (the key is missing)")
        return self.data[name]

    def sub(self, name: str) -> Section:
        """The nested section under ``name`` (the key must be present)."""
        return Section(self.key(name), self.raw(name))

    def number(
        self,
        name: str,
        low: float | None = None,
        high: float | None = None,
        low_open: bool = True,
        allow_none: bool = False,
    ) -> float | None:
        value = self.raw(name)
        if value is None and allow_none:
            return None
        allowed = _range_text(low, high, low_open)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(self.key(name), value, f"a number {allowed}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(self.key(name), value, f"a finite number {allowed}")
        if low is not None and (value <= low if low_open else value < low):
            raise ConfigError(self.key(name), value, allowed)
        if high is not None and value > high:
            raise ConfigError(self.key(name), value, allowed)
        return value

    def positive(self, name: str) -> float:
        return self.number(name, low=0.0)

    def integer(self, name: str, low: int = 1, allow_none: bool = False) -> int | None:
        value = self.raw(name)
        if value is None and allow_none:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ConfigError(self.key(name), value, f"an integer >= {low}")
        if value < low:
            raise ConfigError(self.key(name), value, f"an integer >= {low}")
        return value

    def choice(self, name: str, options: tuple[str, ...], case_sensitive: bool = True) -> str:
        value = self.raw(name)
        text = value if case_sensitive or not isinstance(value, str) else value.lower()
        canon = options if case_sensitive else tuple(o.lower() for o in options)
        if not isinstance(value, str) or text not in canon:
            raise ConfigError(self.key(name), value, "one of " + " | ".join(options))
        return options[canon.index(text)]

    def boolean(self, name: str) -> bool:
        value = self.raw(name)
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), value, "true | false")
        return value

    def point(self, name: str, dimension: int) -> tuple[float, ...]:
        value = self.raw(name)
        if (
            not isinstance(value, (list, tuple))
            or len(value) != dimension
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        ):
            raise ConfigError(self.key(name), value, f"a list of {dimension} numbers (m)")
        return tuple(float(v) for v in value)


def _range_text(low: float | None, high: float | None, low_open: bool) -> str:
    """The allowed range as text: ``> 0``, ``>= 0 and <= 1``, ``(any finite number)``."""
    if low is None and high is None:
        return "(any finite number)"
    parts = []
    if low is not None:
        parts.append(f"> {low:g}" if low_open else f">= {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    return " and ".join(parts)
