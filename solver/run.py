"""The run loop: one loop advances every model (fluid, rigid bodies, ensembles, coupled) in chunks.

A *model* (``Model``) builds its initial state from the validated config, compiles its chunk and
knows what to write at an output step, how to check its health and what run.json says about it.
The loop does everything between chunks, once, for every model:

- the output schedule (chunks end at output steps, checkpoint intervals and hook times);
- progress (a live bar, or log records when not on a terminal);
- health: a model's check after every chunk (divergence -> exit 3, buffer overflow -> exit 4)
  writes run.json with that status (the step: the end of the chunk where it happened) and
  raises the model's error; output so far stays intact. A model that splits its check
  (``check_start``/``check_finish``, ``HealthCheck``) is checked in a pipeline: the next chunk
  is dispatched before the flags are read, so the device does not idle at the chunk end; at an
  output, checkpoint, hook, stop, telemetry probe or the last step the check completes first,
  so nothing unhealthy is written; a problem found late discards the chunk dispatched after it
  (not under halo=mpi with several processes, see ``HealthCheck``);
- checkpoints (``solver.checkpoint.session.RunCheckpoints``): periodic (steps or minutes, async),
  at the end, and on a stop signal; a run with a checkpoint in its checkpoint directory resumes
  from it (``checkpoint.resume=auto|never|PATH``);
- stop signals: SIGTERM/SIGUSR1/SIGUSR2 (from the start on, also during compilation) stop the
  run at the next chunk end with a checkpoint, run.json status "preempted" and
  ``PreemptedError`` (exit 75; 76 without checkpoints; 0 for a service's SIGTERM);
- chunk hooks (``ChunkHook``: the digital twin) between chunks;
- telemetry (``solver.telemetry``): per rank and chunk the chunk, host and synchronisation
  times and memory to telemetry.csv, straggler detection, Prometheus gauges (``telemetry.port``);
- run.json: the loop's fields (status, steps, times, outputs, checkpoint, config) plus the
  model's own section.

In a multi-process run every process runs the loop; process 0 writes the files.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solver.checkpoint.preemption import StopRequests
from solver.checkpoint.session import RunCheckpoints
from solver.distributed.runtime import Runtime, start
from solver.errors import ConfigError, PreemptedError
from solver.model import UNBOUNDED_STEPS, ChunkHook, Problem
from solver.output.progress import Progress
from solver.output.summary import write_run_json
from solver.run_lock import hold_run_dir
from solver.telemetry.session import Telemetry

log = logging.getLogger("solver")


@dataclass
class Outcome:
    """What a finished run hands back.

    Attributes:
        model: the model that ran (``model.case`` is the built case).
        summary: the contents of run.json.
        output_dir: where the files are.
        is_root: this process wrote the files (process 0, or the only one).
        fields: the model's final fields on the host in SI units (fluid: density (*shape)
            kg/m^3 and velocity (d, *shape) m/s), None on processes other than 0.
    """

    model: Any
    summary: dict
    output_dir: Path
    is_root: bool = True
    fields: dict | None = field(default=None, repr=False)

    @property
    def case(self):
        return self.model.case

    @property
    def density(self):
        return None if self.fields is None else self.fields.get("density")

    @property
    def velocity(self):
        return None if self.fields is None else self.fields.get("velocity")


@dataclass
class Chunk:
    """One dispatched chunk: steps ``end - steps + 1 .. end``, dispatched at ``started``
    (perf_counter s); ``check``: its health check in flight (``HealthCheck.start``); after
    ``read``: its ``seconds`` (wall time it took: the throughput's clock) and ``device_s``
    (the part of it the host spent waiting for the chunk, not doing other work)."""

    end: int
    steps: int
    started: float
    compiling: bool
    check: Any
    seconds: float = 0.0
    device_s: float = 0.0
    problem: Problem | None = None
    read: bool = False


class HealthCheck:
    """A model's health check, pipelined where the model splits it in two.

    ``check_start(state, done) -> pending`` dispatches the device work (it must not keep
    references into ``state``, which the next chunk donates) and ``check_finish(pending)``
    reads the flags on the host. Such a model's chunk end can be read after the next chunk is
    dispatched, so the device does not idle while the host waits for the flags; its
    ``conclude`` after a problem then gets the state of the discarded chunk after it (the
    fluid's reads none). A model with only ``check`` (or ``check_start = None``) is checked
    before anything else happens at its chunk end.

    Not under ``domain.halo=mpi`` with several processes: the host collectives between chunks
    (the check's all-gather, the checkpoint agreement, telemetry) use the communicator that
    mpi4jax's halo exchange and force sums use inside the chunk; issued while the next chunk
    runs, two threads would call collectives on one communicator, whose order MPI leaves
    undefined. (Under the xla halo the host collectives are device programs, queued in order.)
    """

    def __init__(self, model, runtime: Runtime) -> None:
        self.model = model
        self._start = getattr(model, "check_start", None)
        self._finish = getattr(model, "check_finish", None)
        mpi_between_chunks = runtime.comm is not None and runtime.process_count > 1
        self.pipelined = (
            self._start is not None and self._finish is not None and not mpi_between_chunks
        )

    def start(self, state, done: int) -> Any:
        if self.pipelined:
            return self._start(state, done)
        return self.model.check(state, done)  # waits for the chunk

    def finish(self, pending) -> Problem | None:
        return self._finish(pending) if self.pipelined else pending


def process_logging(output_dir: Path, runtime: Runtime) -> None:
    """In a multi-process run every process logs to logs/process_<i>.log in the output folder;
    only process 0 keeps the console."""
    if runtime.process_count == 1:
        return
    logs = output_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(logs / f"process_{runtime.process_index}.log")
    handler.setFormatter(
        logging.Formatter(
            f"[%(asctime)s][process {runtime.process_index}][%(name)s][%(levelname)s] %(message)s"
        )
    )
    root = logging.getLogger()
    if not runtime.is_root:
        # the console and Hydra's <run dir>/solver.log belong to process 0
        for h in list(root.handlers):
            root.removeHandler(h)
    root.addHandler(handler)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)


def simulate(
    config,
    output_dir: Path,
    interactive: bool | None = None,
    hook: ChunkHook | None = None,
    model_factory=None,
) -> Outcome:
    """Run a validated config with the model it describes; write its files into output_dir.

    ``hook`` (ChunkHook): host work between chunks that may change the state (digital twin).
    ``model_factory(config, runtime, output_dir, unbounded)``: another model (default
    ``build_model``).

    In a multi-process run every process calls this; process 0 writes the files (into its
    ``output_dir``, which all processes adopt) and returns the fields, the others return
    ``fields`` None. SIGTERM/SIGUSR1/SIGUSR2 from the start on (also during start-up and
    compilation) stop the run at the next chunk end.

    Raises:
        ConfigError: from building the model, checking the decomposition or the checkpoint to
            resume (before anything is traced or written).
        DivergenceError, BodyOverflowError: a model's health check failed, after run.json.
        PreemptedError: stopped by a signal, after a checkpoint (if enabled) and run.json.
    """
    with StopRequests() as stops, ExitStack() as cleanup:
        try:
            return _run(config, Path(output_dir), interactive, stops, hook, model_factory, cleanup)
        finally:
            if hook is not None:
                hook.close()


def _run(config, output_dir, interactive, stops, hook, model_factory, cleanup) -> Outcome:
    t_start = time.perf_counter()
    runtime = start(config.domain.halo)
    stops.reinstall()  # jax.distributed may have taken SIGTERM over
    output_dir = Path(runtime.broadcast_text(str(output_dir)))
    output_dir.mkdir(parents=True, exist_ok=True)
    # process 0 holds the directory; every process learns whether it got it
    holder = hold_run_dir(output_dir, cleanup) if runtime.is_root else None
    holder = runtime.broadcast_text(holder or "")
    if holder:
        raise ConfigError(
            "hydra.run.dir",
            str(output_dir),
            "a directory no other run is writing to",
            f"another run ({holder}) is: give this run its own, or continue that one after it ends",
        )
    process_logging(output_dir, runtime)
    unbounded = hook is not None and getattr(hook, "unbounded", False)
    if model_factory is None:
        from solver.models import build_model as model_factory
    model = model_factory(config, runtime, output_dir, unbounded)
    total = UNBOUNDED_STEPS if unbounded else model.total
    root = runtime.is_root
    checkpoints = RunCheckpoints(
        config.checkpoint,
        output_dir,
        model.layout,
        model.identity,
        config.resolved,
        view=model.checkpoint_view,
    )
    state = model.initial_state()
    resumed = checkpoints.resume(model.checkpoint_view(state), total)
    done = 0
    if resumed is not None:
        state = model.restored(resumed.state, resumed.host, resumed.step)
        done = resumed.step
    outputs = model.open_outputs(done, resumed is not None, state)
    telemetry = Telemetry(
        config.telemetry, runtime, output_dir, model.dt, resumed=resumed is not None,
        exchange=getattr(model, "exchange_seconds", None),
    )  # fmt: skip
    cleanup.callback(telemetry.close)  # the CSV file and the metrics endpoint, on every exit
    timing = {"rate": 0.0, "compile": 0.0, "run": 0.0}
    compiled: set[int] = set()
    schedule = model.schedule

    def next_length(done: int) -> int:
        """Steps of the chunk that starts at ``done``: it ends at the next output, checkpoint
        or hook time."""
        n = min(
            config.chunk,
            total - done,
            schedule.next_after(done) - done,
            (checkpoints.boundary(done) or total) - done,
        )
        if hook is not None:
            n = min(n, hook.steps_until(done) or n)
        return n

    if hook is not None:
        hook.start(model, output_dir, done)
        ready = getattr(hook, "ready", None)  # optional: e.g. the twin's start-up check
        if ready is not None and done < total:
            first = next_length(done)
            warm = ready(model, state, done, first)  # it may compile the first chunk
            if warm > 0:
                compiled.add(first)
                timing["compile"] += warm

    def finish(status: str, steps: int, extra: dict | None = None) -> dict:
        summary = {
            "status": status,
            "case": model.name,
            "steps": steps,
            "time_s": steps * model.dt,
            "compile_time_s": timing["compile"],
            **model.conclude(status, steps, state, timing),
        }
        summary.update(extra or {})
        summary["wall_time_s"] = time.perf_counter() - t_start
        summary["outputs"] = {**outputs, **summary.get("outputs", {})}
        summary["outputs"]["run_json"] = str(output_dir / "run.json")
        summary["checkpoint"] = checkpoints.summary()
        summary["config"] = config.resolved
        if hook is not None:
            summary[hook.name] = hook.summary()
        telemetry_summary = telemetry.summary()
        if telemetry_summary is not None:
            summary["telemetry"] = telemetry_summary
            summary["outputs"]["telemetry"] = telemetry_summary["csv"]
        return write_run_json(output_dir / "run.json", summary) if root else summary

    health = HealthCheck(model, runtime)
    # steps timed apart from compiling; the last flag read; the end of the last host work
    clock = {"timed_steps": 0, "read": 0.0, "host": 0.0}

    def read(chunk: Chunk) -> None:
        """Wait for the chunk's health flags and time the chunk: from its dispatch, or from the
        previous chunk's end if it was queued behind that one; its device wait from the end of
        the host work done while it ran, if that was later (a pipelined chunk runs while the
        host publishes the previous one: that work is the host's, telemetry's ``host_s``)."""
        chunk.problem = health.finish(chunk.check)
        chunk.read = True
        now = time.perf_counter()
        chunk.seconds = now - max(chunk.started, clock["read"])
        chunk.device_s = now - max(chunk.started, clock["read"], clock["host"])
        clock["read"] = now
        if chunk.compiling:  # the first chunk of each length compiles: timed apart
            timing["compile"] += chunk.seconds
        else:
            clock["timed_steps"] += chunk.steps
            timing["run"] += chunk.seconds
        timing["rate"] = model.work * (
            clock["timed_steps"] / timing["run"]
            if timing["run"] > 0
            else chunk.steps / chunk.seconds
        )

    def stop_if_unhealthy(chunk: Chunk) -> None:
        if chunk.problem is not None:
            problem = chunk.problem
            checkpoints.close()
            summary = finish(problem.status, chunk.end, problem.details)
            raise problem.error(problem.message, summary, output_dir)

    def publish(chunk: Chunk, state) -> None:
        """Progress and telemetry of a healthy chunk (``state``: its state, None once the
        next chunk has taken it over)."""
        bar.update(chunk.end, timing["rate"] / 1e6)
        telemetry.after_chunk(
            chunk.end, chunk.steps, chunk.device_s, chunk.compiling, timing["rate"], state
        )
        clock["host"] = time.perf_counter()

    def settle(chunk: Chunk) -> None:
        """A deferred check: read, stop on a problem (the newer chunk is discarded), publish."""
        read(chunk)
        stop_if_unhealthy(chunk)
        publish(chunk, None)

    telemetry.begin()
    pending: Chunk | None = None  # a healthy-looking chunk whose flags are not read yet
    with Progress(
        None if unbounded else total,
        model.dt,
        model.work,
        interactive if root else False,
        config.output.log_interval,
        model.label,
        first_step=done,
    ) as bar:
        while done < total:
            n = next_length(done)
            if n < 1:  # a schedule, checkpoint or hook boundary behind the present: a bug
                raise RuntimeError(f"run loop: chunk of {n} steps at step {done} of {total}")
            compiling = n not in compiled
            compiled.add(n)
            if compiling and pending is not None:  # compilation is timed apart from running
                settle(pending)
                pending = None
            started = time.perf_counter()
            state, report = model.advance(state, n)
            chunk = Chunk(done + n, n, started, compiling, health.start(state, done + n))
            if not health.pipelined:  # its check waited for the chunk: timed as it ends
                read(chunk)
            if pending is not None:  # the previous chunk's flags, read while this chunk runs
                settle(pending)
                pending = None
            # what needs a healthy state at this chunk end (outputs, hooks, the end, telemetry's
            # look at the state, a checkpoint, a stop) waits for the check; elsewhere the next
            # chunk is dispatched before this one's flags are read
            synchronous = (
                not health.pipelined
                or hook is not None
                or chunk.end in schedule
                or chunk.end >= total
                or telemetry.probes_state(compiling)
            )
            decided = not synchronous
            if decided:  # every process decides at every chunk end (a collective)
                save, stop = checkpoints.decide(chunk.end, total, stops.requested)
                synchronous = save or stop
            if synchronous and not chunk.read:
                read(chunk)
            model.record(done, n, state, report)
            done += n
            if not synchronous:
                pending = chunk
                continue
            stop_if_unhealthy(chunk)
            if hook is not None:
                state = hook.after_chunk(done, model, state)
            if done in schedule:
                model.write(done, state)
            publish(chunk, state)
            if not decided:
                save, stop = checkpoints.decide(done, total, stops.requested)
            if save:

                def extras(step=done, state=state):
                    return model.checkpoint_host(step, state)

                checkpoints.save(done, state, extras, wait=stop)
            if stop:
                saved = checkpoints.store is not None
                shutdown = unbounded and stops.signal_name == "SIGTERM"
                status = "stopped" if shutdown or not saved else "preempted"
                summary = finish(status, done)
                stops.hand_over()
                where = (
                    f"checkpoint at step {done} in {checkpoints.directory}"
                    if saved
                    else "no checkpoint (checkpoint.enabled=false): a rerun starts at step 0"
                )
                raise PreemptedError(
                    f"stopped by {stops.signal_name or 'a signal on another process'} "
                    f"at step {done}{'' if unbounded else f' of {total}'}: {where}",
                    summary,
                    output_dir,
                    resumable=saved,
                    shutdown=shutdown,
                )
    checkpoints.finish(done, state, lambda: model.checkpoint_host(done, state))
    if checkpoints.store is not None and checkpoints.last_saved_step is not None:
        outputs["checkpoints"] = str(checkpoints.directory)
    summary = finish("completed", done)
    return Outcome(model, summary, output_dir, root, getattr(model, "final_fields", None))
