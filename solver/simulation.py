"""The run loop: build the case, advance in compiled chunks, write output between chunks.

Between chunks, and only there, the host writes field output, appends the force history,
saves checkpoints, reports progress and checks for divergence (a non-finite or non-positive
density on a fluid node). On divergence the loop stops at that chunk boundary, writes run.json
with status "diverged" and raises ``DivergenceError``; everything written before stays intact.
On SIGTERM or SIGUSR1 it stops at the next chunk boundary, saves a checkpoint, writes run.json
with status "preempted" and raises ``PreemptedError``. A run with a checkpoint in its checkpoint
directory continues from it (``checkpoint.resume=auto``).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from solver.checkpoint.preemption import StopRequests
from solver.checkpoint.session import RunCheckpoints
from solver.config import RunConfig
from solver.distributed.distribution import distribute
from solver.distributed.runtime import Runtime, start
from solver.fluid.cases import Case, RunData, build_case
from solver.fluid.step import initial_state, macroscopic
from solver.output.fields import FieldWriter
from solver.output.plots import save_field_png
from solver.output.progress import Progress
from solver.output.summary import ForceLog, write_run_json

log = logging.getLogger("solver")

OUTPUTS_PER_RUN = 10  # field outputs when output.every is null
UNBOUNDED_STEPS = 2**62  # a service run (hook.unbounded) ends only by a signal


class ChunkHook(Protocol):
    """Host work between chunks that changes the state (the digital twin's seam).

    ``start`` is called once the case and distribution exist; ``steps_until`` may shorten the
    next chunk (so that it ends at an assimilation time); ``after_chunk`` returns the state and
    geometry to continue with (e.g. nudged populations, a new inflow) and runs before outputs
    and checkpoints of that step; ``summary`` goes into run.json under its ``name``.
    """

    name: str
    unbounded: bool  # run until a signal (service mode) instead of ``steps``

    def start(self, case: Case, dist: Any, output_dir: Path, first_step: int) -> None: ...

    def steps_until(self, step: int) -> int | None: ...

    def after_chunk(self, step: int, state: Any, geometry: Any) -> tuple[Any, Any]: ...

    def summary(self) -> dict: ...

    def close(self) -> None: ...


class PreemptedError(RuntimeError):
    """Stopped by a signal; ``resumable`` if a checkpoint was saved first; ``summary`` is what
    run.json holds (status "preempted", or "stopped" without a checkpoint). ``shutdown``: a
    service run (unbounded) stopped by SIGTERM, its normal end (exit code 0)."""

    def __init__(
        self, message: str, summary: dict, output_dir: Path, resumable: bool,
        shutdown: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.summary = summary
        self.output_dir = output_dir
        self.resumable = resumable
        self.shutdown = shutdown


class DivergenceError(RuntimeError):
    """The run produced NaN or non-positive density; ``summary`` is what run.json holds."""

    def __init__(self, message: str, summary: dict, output_dir: Path) -> None:
        super().__init__(message)
        self.summary = summary
        self.output_dir = output_dir


@dataclass
class Outcome:
    """What a finished run hands back.

    Attributes:
        case: the built case.
        summary: the contents of run.json.
        output_dir: where the files are.
        density: (*shape) final density in kg/m^3; velocity: (d, *shape) in m/s; both None on
            processes other than 0 of a multi-process run.
    """

    case: Case
    summary: dict
    output_dir: Path
    density: np.ndarray | None = field(repr=False)
    velocity: np.ndarray | None = field(repr=False)


def _health(populations, solid):
    """jit-able check: (any bad fluid node, flat index of the first bad one, its density)."""
    rho = jnp.sum(populations, axis=0)
    bad = ~jnp.isfinite(rho) | (rho <= 0)
    if solid is not None:
        bad = bad & ~solid
    where = jnp.argmax(bad.ravel())
    return jnp.any(bad), where, rho.ravel()[where]


def _process_logging(output_dir: Path, runtime: Runtime) -> None:
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


def likely_cause(case: Case) -> str:
    """The numbers that usually explain a divergence, with what to change."""
    nu = case.setup.viscosity
    u = case.mach * math.sqrt(1.0 / 3.0)
    grid_re = u / nu if nu > 0 else float("inf")
    causes = []
    if case.tau < 0.55:
        causes.append(
            f"tau = {case.tau:.5f} is close to 0.5 (raise the viscosity (lower Re), "
            "case.resolution or fluid.u_lattice"
            + (", or use fluid.collision=trt)" if case.setup.collision == "bgk" else ")")
        )
    if case.setup.collision == "trt" and case.setup.open_boundaries and case.tau < 0.535:
        causes.append(
            "TRT with an inlet/outlet below tau = 0.535 was seen to go unstable at the inlet "
            "(try fluid.collision=bgk)"
        )
    if case.mach > 0.2:
        causes.append(f"lattice Mach = {case.mach:.3f} is high (lower fluid.u_lattice)")
    if grid_re > 10:
        causes.append(
            f"grid Reynolds number u/nu = {grid_re:.3g} is high for the grid "
            "(raise case.resolution)"
        )
    if not causes:
        causes.append(
            f"tau = {case.tau:.4f}, Mach = {case.mach:.3f}, grid Reynolds = {grid_re:.3g} "
            "look safe; check the boundary set-up"
        )
    return "; ".join(causes)


def _identity(case: Case) -> dict:
    """What a checkpoint and the run resuming from it must share."""
    setup = case.setup
    return {
        "case": case.name,
        "lattice": setup.lattice.name,
        "shape": list(setup.shape),
        "precision": setup.dtype,
    }


@dataclass(frozen=True)
class OutputSchedule:
    """The output steps without listing them (a service run has no last step): 0, every,
    2 every, ... and ``total``; ``every`` None writes step 0 and ``total`` only."""

    total: int
    every: int | None

    @classmethod
    def of(cls, total: int, every: int | None, unbounded: bool) -> OutputSchedule:
        if every is None and not unbounded:
            every = max(1, math.ceil(total / OUTPUTS_PER_RUN))
        return cls(total, every)

    def __contains__(self, step: int) -> bool:
        return step in (0, self.total) or (self.every is not None and step % self.every == 0)

    def next_after(self, step: int) -> int:
        if self.every is None:
            return self.total
        return min(self.total, (step // self.every + 1) * self.every)


def simulate(
    config: RunConfig,
    output_dir: Path,
    interactive: bool | None = None,
    case: Case | None = None,
    hook: ChunkHook | None = None,
) -> Outcome:
    """Run a validated config; write fields.h5/xdmf, PNG, forces.csv, run.json into output_dir.

    ``hook`` (ChunkHook): host work between chunks that may change the state (digital twin).

    In a multi-process run every process calls this; process 0 writes the files (into its
    ``output_dir``, which all processes adopt) and returns the fields, the others return
    ``density``/``velocity`` None. SIGTERM/SIGUSR1/SIGUSR2 from the start on (also during
    start-up and compilation) stop the run at the next chunk end.

    Raises:
        ConfigError: from building the case, checking the decomposition or the checkpoint to
            resume (before anything is traced or written).
        DivergenceError: after writing run.json with status "diverged".
        PreemptedError: stopped by a signal, after a checkpoint (if enabled) and run.json.
    """
    with StopRequests() as stops:
        try:
            return _simulate(config, output_dir, interactive, case, stops, hook)
        finally:
            if hook is not None:
                hook.close()


def _simulate(
    config: RunConfig,
    output_dir: Path,
    interactive: bool | None,
    case: Case | None,
    stops: StopRequests,
    hook: ChunkHook | None = None,
) -> Outcome:
    t_start = time.perf_counter()
    runtime = start(config.domain.halo)
    output_dir = Path(runtime.broadcast_text(str(output_dir)))
    output_dir.mkdir(parents=True, exist_ok=True)
    _process_logging(output_dir, runtime)
    case = build_case(config) if case is None else case
    setup, units = case.setup, case.units
    dist = distribute(runtime, config.domain.mesh, setup.shape)
    root = dist.is_root
    unbounded = hook is not None and getattr(hook, "unbounded", False)
    if unbounded:
        total = UNBOUNDED_STEPS
    else:
        total = config.steps if config.steps is not None else case.default_steps
    chunk = min(config.chunk, total)
    d = setup.lattice.d
    log.info(
        "%s: %s %s on %s, shape %s, tau = %.4f, Mach = %.3f, Re = %.4g, %d steps",
        case.name,
        setup.lattice.name,
        setup.collision.upper(),
        setup.dtype,
        setup.shape,
        case.tau,
        case.mach,
        case.reynolds,
        "until stopped (service)" if unbounded else total,
    )
    log.info(
        "domain: mesh %s (%s halo), blocks of %s cells, %d process(es)",
        "x".join(str(m) for m in dist.decomposition.mesh),
        dist.backend,
        "x".join(str(n) for n in dist.decomposition.local_shape),
        runtime.process_count,
    )

    checkpoints = RunCheckpoints(
        config.checkpoint, output_dir, dist, _identity(case), config.resolved
    )
    state = initial_state(
        setup, dist.put(case.density, 0, setup.dtype), dist.put(case.velocity, 1, setup.dtype)
    )
    state = state.replace(time=dist.replicate(state.time))
    resumed = checkpoints.resume(state, total)
    done = 0
    forces: list[np.ndarray] = []
    if resumed is not None:
        state, done = resumed.state, resumed.step
        if "forces" in resumed.host:
            forces.append(resumed.host["forces"])

    outputs: dict[str, str] = {}
    writer = None
    if config.output.fields and root:
        writer = FieldWriter(
            output_dir,
            setup.shape,
            units.dx,
            case.origin,
            setup.solid,
            attrs={
                "case": case.name,
                "lattice": setup.lattice.name,
                "dt": units.dt,
                "rho0": units.rho0,
                "dimension": d,
            },
            resume_step=done if resumed is not None else None,
        )
        outputs["fields_h5"] = str(writer.h5_path)
        outputs["fields_xdmf"] = str(writer.xdmf_path)
    force_log = None
    if case.measures_forces and root:
        scale = 2.0 / (case.info["u_mean_lattice"] ** 2 * case.info["d_cells"])
        history = np.concatenate(forces) if forces else None
        force_log = ForceLog(output_dir / "forces.csv", d, units.dt, scale, history)
        outputs["forces_csv"] = str(force_log.path)

    geometry = dist.geometry(setup)
    if hook is not None:
        hook.start(case, dist, output_dir, done)
    chunk_fn = dist.chunk(setup)
    macro_fn = jax.jit(lambda s, g: macroscopic(setup, s, g))
    health_fn = jax.jit(_health)

    def lattice_fields(state) -> tuple[np.ndarray | None, np.ndarray | None]:
        rho, u = macro_fn(state, geometry)
        return dist.gather(rho), dist.gather(u, 1)

    def fields_si(state):
        rho, u = lattice_fields(state)
        if rho is None:
            return None, None
        return units.to_physical_density(rho), units.to_physical_velocity(u)

    def base_summary(status: str, steps: int) -> dict:
        return {
            "status": status,
            "case": case.name,
            "steps": steps,
            "time_s": units.to_physical_time(steps),
            "wall_time_s": time.perf_counter() - t_start,
            "mlups": timing["mlups"],
            "compile_time_s": timing["compile"],
            "tau": case.tau,
            "mach": case.mach,
            "reynolds": case.reynolds,
            "lattice": setup.lattice.name,
            "collision": setup.collision,
            "precision": setup.dtype,
            "shape": list(setup.shape),
            "cells": setup.cells,
            "devices": dist.devices,
            "domain": {
                "mesh": list(dist.decomposition.mesh),
                "halo": dist.backend,
                "processes": runtime.process_count,
                "local_shape": list(dist.decomposition.local_shape),
            },
            "config": config.resolved,
            "units": {**units.as_dict(), "origin": list(case.origin)},
            "case_info": {k: v for k, v in case.info.items() if _json_scalar(v)},
            "outputs": outputs,
            "checkpoint": checkpoints.summary(),
        } | ({hook.name: hook.summary()} if hook is not None else {})

    timing = {"mlups": 0.0, "compile": 0.0}
    schedule = OutputSchedule.of(total, config.output.every, unbounded)
    # every process takes part in the gather; process 0 alone holds a writer
    # a resumed run writes its first step again: the run dir may be new (resume=PATH)
    if config.output.fields and (resumed is None or done in schedule):
        rho, u = fields_si(state)
        if writer is not None:
            writer.write(done, units.to_physical_time(done), rho, u)
    compiled: set[int] = set()
    timed_steps, timed_seconds = 0, 0.0
    label = f"{case.name} {setup.lattice.name}"

    def checkpoint_extras(step: int):
        host = {"step": np.asarray([step], dtype=np.int64)}
        if forces:
            host["forces"] = np.concatenate(forces)
        return host, {"time_s": units.to_physical_time(step)}

    with (
        Progress(
            None if unbounded else total,
            units.dt,
            setup.cells,
            interactive if root else False,
            config.output.log_interval,
            label,
            first_step=done,
        ) as bar,
    ):
        while done < total:
            next_output = schedule.next_after(done)
            next_save = checkpoints.boundary(done) or total
            n = min(chunk, total - done, next_output - done, next_save - done)
            if hook is not None:
                n = min(n, hook.steps_until(done) or n)
            t0 = time.perf_counter()
            state, chunk_forces = chunk_fn(state, geometry, n)
            bad = dist.first_bad(*health_fn(state.populations, geometry.solid))  # waits
            seconds = time.perf_counter() - t0
            if n in compiled:
                timed_steps += n
                timed_seconds += seconds
            else:
                compiled.add(n)
                timing["compile"] += seconds
            timing["mlups"] = (
                setup.cells * timed_steps / timed_seconds / 1e6
                if timed_seconds > 0
                else setup.cells * n / seconds / 1e6
            )
            if case.measures_forces:
                host_forces = np.asarray(_replicated(chunk_forces), dtype=np.float64)
                if force_log is not None:
                    force_log.append(done + 1, host_forces)
                forces.append(host_forces)
            done += n
            if bad is not None:
                index, rho_bad = bad
                position = [case.origin[a] + (int(i) + 0.5) * units.dx for a, i in enumerate(index)]
                cause = likely_cause(case)
                message = (
                    f"diverged at step {done} (t = {units.to_physical_time(done):.4g} s): "
                    f"density {rho_bad:.4g} at cell {tuple(int(i) for i in index)}, "
                    f"x = ({', '.join(f'{p:.4g}' for p in position)}) m; likely cause: {cause}"
                )
                summary = base_summary("diverged", done)
                summary["divergence"] = {
                    "step": done,
                    "cell": [int(i) for i in index],
                    "position_m": position,
                    "density_lattice": rho_bad,
                    "likely_cause": cause,
                }
                summary["diagnostics"] = {}
                summary["outputs"]["run_json"] = str(output_dir / "run.json")
                checkpoints.close()
                if root:
                    summary = write_run_json(output_dir / "run.json", summary)
                raise DivergenceError(message, summary, output_dir)
            if hook is not None:
                state, geometry = hook.after_chunk(done, state, geometry)
            if config.output.fields and done in schedule:
                rho, u = fields_si(state)
                if writer is not None:
                    writer.write(done, units.to_physical_time(done), rho, u)
            bar.update(done, timing["mlups"])
            extras = functools.partial(checkpoint_extras, done)
            if checkpoints.after_chunk(done, total, state, extras, stops.requested):
                saved = checkpoints.store is not None
                shutdown = unbounded and stops.signal_name == "SIGTERM"
                status = "stopped" if shutdown or not saved else "preempted"
                summary = base_summary(status, done)
                summary["diagnostics"] = {}
                summary["outputs"]["run_json"] = str(output_dir / "run.json")
                if root:
                    summary = write_run_json(output_dir / "run.json", summary)
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
    checkpoints.finish(done, state, functools.partial(checkpoint_extras, done))
    if checkpoints.store is not None and checkpoints.last_saved_step is not None:
        outputs["checkpoints"] = str(checkpoints.directory)

    rho_lat, u_lat = lattice_fields(state)
    if not root:
        summary = base_summary("completed", done)
        summary["diagnostics"] = {}
        return Outcome(case, summary, output_dir, density=None, velocity=None)
    rho_lat, u_lat = rho_lat.astype(np.float64), u_lat.astype(np.float64)
    data = RunData(
        steps=done,
        density=rho_lat,
        velocity=u_lat,
        forces=np.concatenate(forces) if forces else None,
    )
    diagnostics = case.diagnostics(data)
    density = units.to_physical_density(rho_lat)
    velocity = units.to_physical_velocity(u_lat)
    if config.output.png:
        field_name = (
            case.png_field if config.output.png_field == "auto" else config.output.png_field
        )
        png = save_field_png(
            output_dir / f"{field_name}.png",
            velocity,
            setup.solid,
            units.dx,
            case.origin,
            field_name,
            f"{case.name}: {field_name} at t = {units.to_physical_time(done):.4g} s "
            f"(step {done}, Re = {case.reynolds:.4g})",
        )
        outputs["png"] = str(png)
    outputs["run_json"] = str(output_dir / "run.json")
    summary = base_summary("completed", done)
    summary["diagnostics"] = diagnostics
    summary["wall_time_s"] = time.perf_counter() - t_start
    summary = write_run_json(output_dir / "run.json", summary)
    return Outcome(
        case=case, summary=summary, output_dir=output_dir, density=density, velocity=velocity
    )


def _replicated(array) -> np.ndarray:
    """A replicated device array on the host (also when other processes hold copies)."""
    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    return np.asarray(array.addressable_data(0))


def _json_scalar(value) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None
