"""Stop requests by signal: SIGTERM (Slurm's scancel, a preemption), SIGUSR1 (Slurm's
``--signal=USR1@N`` warning before the time limit) and SIGUSR2 (submitit's timeout signal).

The handler only records the request; the run loop sees it after the current chunk, writes a
checkpoint and exits with ``EXIT_PREEMPTED``. A second SIGTERM while that happens is not
caught again: the default action ends the process at once (a user who insists).

A Python handler that was installed before (submitit's, which requeues the job under the
Hydra Slurm launcher) is not lost: ``hand_over`` calls it once the checkpoint is written. One
that took a stop signal already (a caller running several runs in turn, e.g. the validation
suite, whose handler has a ``stop_requested`` attribute naming the signal) stops the run at its
first chunk end, as if the signal had come during the run.
"""

from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger("solver")

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped on request with a checkpoint; resume to continue
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


class StopRequests:
    """Context manager that turns SIGTERM/SIGUSR1 into a flag (main thread only; elsewhere,
    e.g. a test calling the run loop from a thread, no handler is installed)."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, object] = {}
        self._inherited = False

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.signal_name is None:
            self.signal_name = name
            self._signum, self._frame = signum, frame
            log.warning("%s received: stopping after this chunk with a checkpoint", name)
        if signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def hand_over(self) -> None:
        """Call the handler the received signal had before (if it was a Python function),
        e.g. submitit's requeue; it may exit the process."""
        if self.signal_name is None or self._inherited:
            return
        previous = self._previous.get(self._signum)
        if callable(previous):
            log.info("passing %s on to the handler installed before the run", self.signal_name)
            previous(self._signum, self._frame)

    def reinstall(self) -> None:
        """Take the stop signals back after a library installed handlers of its own: JAX's
        distributed runtime catches SIGTERM for its preemption notifier (C++), which would
        swallow a Slurm or mpirun stop request."""
        if not self._previous:
            return  # not installed (not the main thread)
        for sig in STOP_SIGNALS:
            if sig == signal.SIGTERM and self.signal_name is not None:
                continue  # a second SIGTERM keeps its default action
            signal.signal(sig, self._handle)

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            pending = next(
                (p.stop_requested for p in self._previous.values() if _stop_requested(p)), None
            )
            if pending is not None:
                self.signal_name, self._inherited = pending, True
                log.warning("%s received before the run: stopping after its first chunk", pending)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def _stop_requested(handler: object) -> bool:
    """Whether ``handler`` (installed before a run) took a stop signal already."""
    return isinstance(getattr(handler, "stop_requested", None), str)
