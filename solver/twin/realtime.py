"""Keeping a twin in step with real time: the schedule, the real-time factor, the warning.

A twin that must keep up with the wall clock has a *schedule*: simulation time t belongs to the
wall-clock time ``start + t / rate`` (``rate`` = ``twin.pace``; a live twin, ``twin=mqtt`` with
``time_origin`` null, follows the wall clock at rate 1 even with pace null). The run is
``behind`` by ``wall - (start + t / rate)`` wall seconds when that is positive. A paced twin that
is ahead waits (it never runs into the future of its readings).

At every chunk end the ``RealTimeMonitor`` records (wall time, simulation time, lag) and keeps
a sliding window of ``twin.realtime.window`` wall seconds:

- the real-time factor: simulated seconds per wall second over the window (waits for the pace
  included: a twin that keeps pace shows the pace);
- the lag's trend: wall seconds of lag gained per wall second over the window;
- a log line with the factor (and the lag) once per window;
- a warning when the twin cannot keep pace (factor below the rate over at least half a window
  while more than ``BEHIND_TOLERANCE_S`` behind), with the figures and what would restore it,
  repeated at most every ``warn_every`` s while it lasts; a note when it is back in step;
- the skip-ahead decision (``behind: skip_ahead``): more than ``max_lag`` behind.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field

from solver.twin.config import RealtimeConfig

log = logging.getLogger("solver.twin")

BEHIND_TOLERANCE_S = 1.0  # wall s behind the schedule before "cannot keep pace" is said
KEEP_PACE_MARGIN = 0.98  # a factor below this fraction of the rate over a window is too slow


@dataclass
class Schedule:
    """Simulation time t belongs to wall time ``start + (t - t0) / rate`` (s since the epoch)."""

    rate: float
    start: float
    t0: float = 0.0

    def target(self, t: float) -> float:
        return self.start + (t - self.t0) / self.rate

    def behind(self, t: float, wall: float) -> float:
        """Wall seconds the simulation at time ``t`` is behind the schedule (>= 0)."""
        return max(0.0, wall - self.target(t))

    def shift(self, seconds: float) -> None:
        """The schedule starts ``seconds`` (wall) later: a skip ahead to the present."""
        self.start += seconds


@dataclass(frozen=True)
class SpeedAdvice:
    """What would make a twin's step cheaper, from its run config.

    Attributes:
        dimension: 2 or 3 (a fluid step's cost grows as resolution^(d+1) at a fixed
            ``u_lattice``: cells^d, and steps per simulated second ~ resolution).
        resolution: ``case.resolution`` (cells across the case's length), None if the case has
            none.
        u_lattice: ``fluid.u_lattice``; u_lattice_max: the largest within the lattice Mach
            limit of the case's peak velocity (steps per simulated second ~ 1 / u_lattice).
        members: ensemble members (EnKF), None without an ensemble.
        devices: devices of ``domain.mesh``.
    """

    dimension: int
    resolution: int | None
    u_lattice: float
    u_lattice_max: float
    members: int | None = None
    devices: int = 1

    def text(self, speedup: float) -> str:
        """The changes that would make the step ``speedup`` times faster, or as near as they
        can, separated by semicolons."""
        parts = []
        if self.resolution:
            power = self.dimension + 1
            coarser = max(2, math.floor(self.resolution / speedup ** (1.0 / power)))
            if coarser < self.resolution:
                parts.append(f"case.resolution={coarser} (now {self.resolution}; the cost "
                             f"grows as resolution^{power})")  # fmt: skip
        if self.u_lattice_max > self.u_lattice * 1.01:
            larger = min(self.u_lattice * speedup, self.u_lattice_max)
            parts.append(f"fluid.u_lattice={larger:.3g} (now {self.u_lattice:.3g}, at most "
                         f"{self.u_lattice_max:.3g} within the Mach limit: fewer steps per "
                         "simulated second)")  # fmt: skip
        if self.members:
            fewer = max(2, math.floor(self.members / speedup))
            parts.append(f"twin.enkf.members={fewer} (now {self.members})")
        parts.append(f"more devices (domain.mesh, now {self.devices})")
        return "; ".join(parts)


@dataclass
class RealTimeMonitor:
    """Attributes:
    config: ``twin.realtime``.
    rate: simulated s per wall s the twin must keep (None: no schedule, nothing to keep).
    advice: what to suggest in the warning (None: only the figures).
    factor: the real-time factor over the window (None until two chunk ends were seen).
    trend: wall s of lag gained per wall s over the window (None as ``factor``).
    behind: wall s behind the schedule at the last chunk end.
    warnings: how many times "cannot keep pace" was logged.
    skips: one dict per skip ahead (step, time_s, skipped_s, stale).
    """

    config: RealtimeConfig
    rate: float | None
    advice: SpeedAdvice | None = None
    factor: float | None = None
    trend: float | None = None
    behind: float = 0.0
    max_behind: float = 0.0
    factor_min: float | None = None
    warnings: int = 0
    skips: list[dict] = field(default_factory=list)
    startup: dict | None = None
    _points: deque = field(default_factory=deque)  # (wall, simulation time, behind)
    _last_warning: float | None = None
    _last_report: float | None = None
    _slow: bool = False

    def observe(self, wall: float, t: float, behind: float) -> None:
        """A chunk end at wall time ``wall`` (s), simulation time ``t`` (s), ``behind`` (s)."""
        self.behind = behind
        self.max_behind = max(self.max_behind, behind)
        points = self._points
        points.append((wall, t, behind))
        # keep one point at or before the window's start, so the span covers the window
        while len(points) > 2 and points[1][0] <= wall - self.config.window:
            points.popleft()
        first = points[0]
        span = wall - first[0]
        if span <= 0:
            return
        self.factor = (t - first[1]) / span
        self.trend = (behind - first[2]) / span
        full = span >= 0.5 * self.config.window
        if full:
            self.factor_min = (
                self.factor if self.factor_min is None else min(self.factor_min, self.factor)
            )
        if self._last_report is None:
            self._last_report = first[0]
        if wall - self._last_report >= self.config.window:  # the factor in the log, per window
            self._last_report = wall
            pace = "" if self.rate is None else f" against pace {self.rate:g}"
            log.info("twin: %.3g simulated s per wall s over the last %g s%s, %.3g s behind",
                     self.factor, self.config.window, pace, behind)  # fmt: skip
        if self.rate is None:
            return
        slow = full and behind > BEHIND_TOLERANCE_S and self.factor < KEEP_PACE_MARGIN * self.rate
        if slow:
            due = self._last_warning is None or wall - self._last_warning >= self.config.warn_every
            if due:
                self._last_warning = wall
                self.warnings += 1
                log.warning("%s", self.warning_text())
        elif self._slow and behind <= BEHIND_TOLERANCE_S:
            log.info("twin: back in step with real time (%.2g s behind, %.3g simulated s per "
                     "wall s)", behind, self.factor)  # fmt: skip
        if slow or behind <= BEHIND_TOLERANCE_S:
            self._slow = slow

    def warning_text(self) -> str:
        factor, rate = self.factor or 0.0, self.rate or 1.0
        text = (
            f"twin: cannot keep pace: {factor:.3g} simulated s per wall s over the last "
            f"{self.config.window:g} s against twin.pace {rate:g}; {self.behind:.3g} s behind "
            f"real time and falling further behind by {max(self.trend or 0.0, 0.0):.3g} s "
            "every s"
        )
        # what the step can do: the window's factor, or the start-up check's when that is
        # higher (a window that held a stall says little about the step's speed)
        basis = max(factor, (self.startup or {}).get("factor", 0.0))
        if basis > 0 and self.advice is not None:
            speedup = rate / basis
            text += (f". To keep pace the step must be {speedup:.2g}x faster (it computes "
                     f"{basis:.3g} simulated s per wall s): ")  # fmt: skip
            text += self.advice.text(speedup * 1.1)  # a 10 % margin
        if self.config.behind == "keep":
            text += (". Readings are assimilated late (twin.realtime.behind=keep); "
                     "twin.realtime.behind=skip_ahead re-synchronises instead")  # fmt: skip
        return text

    def should_skip(self, behind: float) -> bool:
        return self.config.behind == "skip_ahead" and behind > self.config.max_lag

    def skipped(self, step: int, t: float, seconds: float, wall: float | None = None) -> dict:
        """Record a skip ahead of ``seconds`` (wall) at ``step`` / simulation time ``t``; the lag
        history restarts (the clock moved, the run did not)."""
        record = {"step": step, "time_s": t, "skipped_s": seconds, "stale": 0}
        self.skips.append(record)
        self.max_behind = max(self.max_behind, seconds / (self.rate or 1.0))
        self._points.clear()
        self._points.append((time.time() if wall is None else wall, t, 0.0))
        self.behind = 0.0
        return record

    def summary(self) -> dict:
        """run.json ``twin.realtime``."""
        return {
            "factor": self.factor,
            "factor_min": self.factor_min,
            "window_s": self.config.window,
            "pace": self.rate,
            "behind_s": self.behind,
            "max_behind_s": self.max_behind,
            "trend_s_per_s": self.trend,
            "keeping_pace": None if self.rate is None else not self._slow,
            "warnings": self.warnings,
            "policy": self.config.behind,
            "max_lag_s": self.config.max_lag,
            "skips": list(self.skips),
            "startup_check": self.startup,
        }
