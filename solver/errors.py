"""The error types every layer may raise; this module imports nothing of the solver.

``ConfigError`` is a bad configuration value (exit code 2 from the app); the run loop's stops
(divergence, buffer overflow, a stop signal) carry what run.json holds so the app can report them
in one line with their own exit codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration value outside its allowed range.

    The message is a single line: ``<key> = <value>: allowed <allowed>[; hint]``.
    """

    def __init__(self, key: str, value: Any, allowed: str, hint: str = "") -> None:
        self.key, self.value, self.allowed, self.hint = key, value, allowed, hint
        message = f"{key} = {value!r}: allowed {allowed}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)


class RunStoppedError(RuntimeError):
    """A run that ended early at a chunk boundary; ``summary`` is what run.json holds."""

    def __init__(self, message: str, summary: dict, output_dir: Path) -> None:
        super().__init__(message)
        self.summary = summary
        self.output_dir = output_dir


class DivergenceError(RunStoppedError):
    """The run produced a non-finite or unphysical state (exit code 3)."""


class BodyOverflowError(RunStoppedError):
    """A neighbour-search or decomposition buffer overflowed (exit code 4)."""


class PreemptedError(RunStoppedError):
    """Stopped by a signal; ``resumable`` if a checkpoint was saved first (exit code 75, else 76);
    ``shutdown``: a service run (unbounded) stopped by SIGTERM, its normal end (exit code 0)."""

    def __init__(
        self, message: str, summary: dict, output_dir: Path, resumable: bool,
        shutdown: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(message, summary, output_dir)
        self.resumable = resumable
        self.shutdown = shutdown
