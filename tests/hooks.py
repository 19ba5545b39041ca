"""Chunk hooks the run-loop tests share."""

from __future__ import annotations

import os
import signal


class SignalAt:
    """A chunk hook that sends this process ``signum`` once the run has reached ``step``
    (as Slurm's scancel would): the loop stops at that chunk end with a checkpoint."""

    name, unbounded = "signal_at", False

    def __init__(self, step: int, signum: int = signal.SIGTERM) -> None:
        self.step, self.signum = step, signum

    def start(self, model, output_dir, first_step) -> None:
        pass

    def steps_until(self, step: int) -> int | None:
        return None

    def after_chunk(self, step: int, model, state):
        if step == self.step:
            os.kill(os.getpid(), self.signum)
        return state

    def summary(self) -> dict:
        return {}

    def close(self) -> None:
        pass
