"""Progress reporting between chunks: a live rich bar on a terminal, log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("solver")


def _eta_text(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """Reports step, simulated time, MLUPS and ETA.

    Args:
        total: steps to run (None: until stopped, no percentage or ETA); dt: s per step;
            cells: lattice nodes per step.
        interactive: live bar (rich) when True, log records when False; None: stdout is a tty.
        log_interval: seconds of wall time between log records (non-interactive).
    """

    def __init__(
        self,
        total: int | None,
        dt: float,
        cells: int,
        interactive: bool | None = None,
        log_interval: float = 5.0,
        label: str = "",
        first_step: int = 0,
    ) -> None:
        self.total, self.dt, self.cells = total, dt, cells
        self.first_step = first_step  # a resumed run starts there
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self.log_interval = log_interval
        self.label = label
        self._bar = None
        self._task = None
        self._last_log = 0.0

    def __enter__(self) -> Progress:
        self.start = time.perf_counter()
        if self.interactive:
            from rich.progress import (
                BarColumn,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn(
                    "step {task.completed:.0f}"
                    + ("" if self.total is None else "/{task.total:.0f}")
                ),
                TextColumn("t = {task.fields[sim_time]:.4g} s"),
                TextColumn("{task.fields[mlups]:.1f} MLUPS"),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._bar.start()
            self._task = self._bar.add_task(
                self.label,
                total=self.total,
                completed=self.first_step,
                sim_time=self.first_step * self.dt,
                mlups=0.0,
            )
        return self

    def update(self, step: int, mlups: float) -> None:
        """Called after each chunk with the steps done and the current MLUPS figure."""
        if self._bar is not None:
            self._bar.update(self._task, completed=step, sim_time=step * self.dt, mlups=mlups)
            return
        now = time.perf_counter()
        last = self.total is not None and step >= self.total
        if not last and now - self._last_log < self.log_interval:
            return
        self._last_log = now
        elapsed = now - self.start
        rate = (step - self.first_step) / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            log.info("step %d  t = %.4g s  %.1f MLUPS  %.1f steps/s", step, step * self.dt,
                     mlups, rate)  # fmt: skip
            return
        eta = (self.total - step) / rate if rate > 0 else float("inf")
        log.info(
            "step %d/%d (%.0f%%)  t = %.4g s  %.1f MLUPS  ETA %s",
            step,
            self.total,
            100.0 * step / self.total,
            step * self.dt,
            mlups,
            _eta_text(eta),
        )

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
