"""The run loop: one loop advances every model (fluid, rigid bodies, ensembles, coupled) in chunks.

A *model* (``Model``) builds its initial state from the validated config, compiles its chunk and
knows what to write at an output step, how to check its health and what run.json says about it.
The loop does everything between chunks, once, for every model:

- the output schedule (chunks end at output steps, checkpoint intervals and hook times);
- progress (a live bar, or log records when not on a terminal);
- health: a model's check after every chunk (divergence -> exit 3, buffer overflow -> exit 4)
  writes run.json with that status and raises the model's error; output so far stays intact;
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
from solver.errors import PreemptedError
from solver.model import UNBOUNDED_STEPS, ChunkHook
from solver.output.progress import Progress
from solver.output.summary import write_run_json
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

    timed_steps = 0
    telemetry.begin()
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
            t0 = time.perf_counter()
            state, report = model.advance(state, n)
            problem = model.check(state, done + n)  # waits for the chunk
            seconds = time.perf_counter() - t0
            compiling = n not in compiled
            if not compiling:
                timed_steps += n
                timing["run"] += seconds
            else:  # the first chunk of each length compiles: timed apart
                compiled.add(n)
                timing["compile"] += seconds
            timing["rate"] = model.work * (
                timed_steps / timing["run"] if timing["run"] > 0 else n / seconds
            )
            model.record(done, n, state, report)
            done += n
            if problem is not None:
                checkpoints.close()
                summary = finish(problem.status, done, problem.details)
                raise problem.error(problem.message, summary, output_dir)
            if hook is not None:
                state = hook.after_chunk(done, model, state)
            if done in schedule:
                model.write(done, state)
            bar.update(done, timing["rate"] / 1e6)
            telemetry.after_chunk(done, n, seconds, compiling, timing["rate"], state)

            def extras(step=done, state=state):
                return model.checkpoint_host(step, state)

            if checkpoints.after_chunk(done, total, state, extras, stops.requested):
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
