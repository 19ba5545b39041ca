"""The interface between the run loop (``solver.run``) and the models it advances.

A model is one kind of physics (the fluid, a rigid-body scene, an ensemble, a coupled
fluid-body system) in the style of MJX/Brax ``step(model, data) -> data``: the model object is
static (set-up, compiled chunk, output writers), the state is a pytree of arrays that the loop
carries from chunk to chunk and checkpoints. A new kind of physics is a new model (registered in
``solver.models``), never a new loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from solver.errors import RunStoppedError

UNBOUNDED_STEPS = 2**62  # a service run (hook.unbounded) ends only by a signal


@dataclass(frozen=True)
class OutputSchedule:
    """The output steps without listing them (a service run has no last step): 0, every,
    2 every, ... and ``total``; ``every`` None writes step 0 and ``total`` only."""

    total: int
    every: int | None

    @classmethod
    def of(
        cls, total: int, every: int | None, unbounded: bool, outputs: int, chunk: int | None = None
    ) -> OutputSchedule:
        """``every`` None: about ``outputs`` outputs in the run; with ``chunk``, an interval
        longer than one chunk is rounded up to whole chunks (the chunks keep one length and
        compile once)."""
        if unbounded:  # no last step: ``total`` must never end a chunk early
            total = UNBOUNDED_STEPS
        if every is None and not unbounded:
            every = max(1, math.ceil(total / outputs))
            if chunk is not None and every > chunk:
                every = math.ceil(every / chunk) * chunk
        return cls(total, every)

    def __contains__(self, step: int) -> bool:
        return step in (0, self.total) or (self.every is not None and step % self.every == 0)

    def next_after(self, step: int) -> int:
        if self.every is None:
            return self.total
        return min(self.total, (step // self.every + 1) * self.every)


@dataclass
class Problem:
    """What a model's health check found: the run stops with ``status`` in run.json and raises
    ``error`` (its message ``message``); ``details``: more keys of run.json (e.g. where the
    state went bad)."""

    status: str
    message: str
    error: type[RunStoppedError]
    details: dict | None = None


class Model(Protocol):
    """One kind of physics for the run loop (``step(model, data) -> data`` style: the model is
    static, the state a pytree of arrays).

    Attributes:
        name: the case name (logs, run.json).
        label: the progress bar's label.
        total: steps to run (the loop passes UNBOUNDED_STEPS for a service run).
        dt: seconds per step.
        work: updates per step for the rate (lattice cells, bodies, member-bodies).
        schedule: the output steps.
        layout: where the state lives, for checkpoints (``solver.distributed``'s
            ``Distribution`` or ``HostLayout``).
        identity: what a checkpoint and the run resuming from it must share.
        case: the built case (validation and api use it).
    """

    name: str
    label: str
    total: int
    dt: float
    work: int
    schedule: OutputSchedule
    layout: Any
    identity: dict
    case: Any

    def initial_state(self) -> Any:
        """The state at step 0 on the devices (also the template a checkpoint restores into)."""

    def checkpoint_view(self, state: Any) -> Any:
        """The state as checkpoints store it (for the layout's checks and Orbax)."""

    def restored(self, view: Any, host: dict, step: int) -> Any:
        """The state to continue from, given a restored checkpoint view and host arrays."""

    def open_outputs(self, step: int, resumed: bool, state: Any) -> dict[str, str]:
        """Create the output files (truncated at ``step`` on resume); returns their paths."""

    def advance(self, state: Any, n: int) -> tuple[Any, Any]:
        """n steps of the compiled chunk: (state, what the chunk reports per step)."""

    def check(self, state: Any, done: int) -> Problem | None:
        """The health check after a chunk (waits for the chunk to finish).

        Optionally split in two for the loop's pipeline (``solver.run.HealthCheck``):
        ``check_start(state, done) -> pending`` dispatches the device work without waiting and
        keeps no reference into ``state`` (the next chunk donates it), ``check_finish(pending)
        -> Problem | None`` reads the result; ``check`` is then their composition. After a
        problem found that way, ``conclude`` gets the state of the chunk after the failing one
        (a model whose ``conclude`` reads the state then sets ``check_start = None``)."""

    def record(self, first: int, n: int, state: Any, report: Any) -> None:
        """Host bookkeeping of a chunk that ran steps first+1 .. first+n (histories, logs)."""

    def write(self, step: int, state: Any) -> None:
        """Write the outputs of an output step (every process calls it)."""

    def checkpoint_host(self, step: int, state: Any) -> tuple[dict, dict]:
        """(host arrays, JSON metadata) saved with a checkpoint of ``state`` at ``step``."""

    def conclude(self, status: str, done: int, state: Any, timing: dict) -> dict:
        """The model's part of run.json (final files, diagnostics); ``status`` "completed"
        computes the case diagnostics, other statuses write what a stopped run keeps.
        ``timing``: rate (updates/s after compilation), compile and run seconds."""

    def summary_lines(self, summary: dict) -> list[str]:
        """The short end-of-run summary for the console."""


class ChunkHook(Protocol):
    """Host work between chunks that may change the state (the digital twin's seam).

    ``start`` is called once the model exists, ``ready`` (optional) once its first state exists;
    ``steps_until`` may shorten the next chunk (so that it ends at an assimilation time);
    ``after_chunk`` returns the state to continue with (e.g. nudged populations) and runs
    before outputs and checkpoints of that step; it may change the model's dynamic inputs
    (e.g. a fluid model's inflow geometry); ``summary`` goes into run.json under the hook's
    ``name``.
    """

    name: str
    unbounded: bool  # run until a signal (service mode) instead of ``total`` steps

    def start(self, model: Model, output_dir: Path, first_step: int) -> None: ...

    def ready(self, model: Model, state: Any, first_step: int, chunk: int) -> float:
        """Before the first chunk (of ``chunk`` steps from ``first_step``): e.g. a timed trial
        on a copy of ``state``. Returns the seconds it spent compiling that chunk (0: none)."""
        ...

    def steps_until(self, step: int) -> int | None: ...

    def after_chunk(self, step: int, model: Model, state: Any) -> Any: ...

    def summary(self) -> dict: ...

    def close(self) -> None: ...
