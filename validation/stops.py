"""Stopping the suite on request: SIGTERM (``timeout``, Slurm's time limit, scancel), SIGUSR1 and
SIGUSR2 (Slurm's and submitit's warnings before the limit), as the solver stops a run.

The handler here only records the request (an exception raised from a signal handler can land
anywhere, e.g. in a garbage-collector callback that swallows it). The case in progress then
stops at its next solver run: ``Context.simulate`` refuses to start one (``SuiteStopped``), and a
run already under way, or started just before, stops at its next chunk end with
``PreemptedError`` (``solver.checkpoint.preemption.StopRequests`` takes over a request this
handler recorded, through ``stop_requested``). The suite marks that case interrupted, runs no
other, writes the report of the finished ones and exits with ``EXIT_STOPPED``.
"""

from __future__ import annotations

import signal
import threading

EXIT_STOPPED = 75  # EX_TEMPFAIL, the solver's code for a run stopped by a signal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class SuiteStopped(Exception):  # noqa: N818 - not an error: the suite was asked to stop
    """A stop request seen between solver runs."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"stopped by {signal_name}")
        self.signal_name = signal_name


class SuiteStops:
    """Context manager and signal handler: the stop signals ask the suite to stop (installed
    from the main thread only)."""

    def __init__(self) -> None:
        self.stop_requested: str | None = None  # the signal's name; read by StopRequests
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.stop_requested is not None

    def check(self) -> None:
        """Raise ``SuiteStopped`` if a stop was requested (before starting a solver run)."""
        if self.stop_requested is not None:
            raise SuiteStopped(self.stop_requested)

    def __call__(self, signum, frame) -> None:
        if self.stop_requested is None:  # nothing else here: no I/O inside a signal handler
            self.stop_requested = signal.Signals(signum).name

    def __enter__(self) -> SuiteStops:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
