"""The run loop: build the case, advance in compiled chunks, write output between chunks.

Between chunks, and only there, the host writes field output, appends the force history,
reports progress and checks for divergence (a non-finite or non-positive density on a fluid
node). On divergence the loop stops at that chunk boundary, writes run.json with status
"diverged" and raises ``DivergenceError``; everything written before stays intact.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from solver.cases import Case, RunData, build_case
from solver.config import RunConfig
from solver.fluid_step import initial_state, macroscopic, make_chunk, make_geometry
from solver.output.fields import FieldWriter
from solver.output.plots import save_field_png
from solver.output.summary import ForceLog, write_run_json
from solver.progress import Progress

log = logging.getLogger("solver")

OUTPUTS_PER_RUN = 10  # field outputs when output.every is null


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
        density: (*shape) final density in kg/m^3; velocity: (d, *shape) in m/s.
    """

    case: Case
    summary: dict
    output_dir: Path
    density: np.ndarray = field(repr=False)
    velocity: np.ndarray = field(repr=False)


def _health(setup):
    """jit-able check: (any bad fluid node, flat index of the first bad one)."""
    fluid = None if setup.solid is None else jnp.asarray(~setup.solid)

    def check(populations):
        rho = jnp.sum(populations, axis=0)
        bad = ~jnp.isfinite(rho) | (rho <= 0)
        if fluid is not None:
            bad = bad & fluid
        return jnp.any(bad), jnp.argmax(bad.ravel())

    return check


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


def output_steps(total: int, every: int | None) -> list[int]:
    """Steps at which fields are written: 0, every, 2 every, ... and the last step."""
    if every is None:
        every = max(1, math.ceil(total / OUTPUTS_PER_RUN))
    steps = list(range(0, total, every))
    if steps[-1] != total:
        steps.append(total)
    return steps


def simulate(
    config: RunConfig,
    output_dir: Path,
    interactive: bool | None = None,
    case: Case | None = None,
) -> Outcome:
    """Run a validated config; write fields.h5/xdmf, PNG, forces.csv, run.json into output_dir.

    Raises:
        ConfigError: from building the case (before anything is traced).
        DivergenceError: after writing run.json with status "diverged".
    """
    t_start = time.perf_counter()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    case = build_case(config) if case is None else case
    setup, units = case.setup, case.units
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
        total,
    )

    outputs: dict[str, str] = {}
    writer = None
    if config.output.fields:
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
        )
        outputs["fields_h5"] = str(writer.h5_path)
        outputs["fields_xdmf"] = str(writer.xdmf_path)
    force_log = None
    if case.measures_forces:
        scale = 2.0 / (case.info["u_mean_lattice"] ** 2 * case.info["d_cells"])
        force_log = ForceLog(output_dir / "forces.csv", d, units.dt, scale)
        outputs["forces_csv"] = str(force_log.path)

    state = initial_state(setup, case.density, case.velocity)
    geometry = make_geometry(setup)
    chunk_fn = jax.jit(make_chunk(setup), static_argnums=2, donate_argnums=0)
    macro_fn = jax.jit(lambda s: macroscopic(setup, s, geometry))
    health_fn = jax.jit(_health(setup))

    def fields_si(state):
        rho, u = macro_fn(state)
        return units.to_physical_density(np.asarray(rho)), units.to_physical_velocity(np.asarray(u))

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
            "devices": [str(dev) for dev in jax.devices()],
            "config": config.resolved,
            "units": {**units.as_dict(), "origin": list(case.origin)},
            "case_info": {k: v for k, v in case.info.items() if _json_scalar(v)},
            "outputs": outputs,
        }

    timing = {"mlups": 0.0, "compile": 0.0}
    schedule = output_steps(total, config.output.every)
    if writer is not None:
        rho, u = fields_si(state)
        writer.write(0, 0.0, rho, u)
    forces: list[np.ndarray] = []
    compiled: set[int] = set()
    timed_steps, timed_seconds = 0, 0.0
    done = 0
    label = f"{case.name} {setup.lattice.name}"
    with Progress(
        total, units.dt, setup.cells, interactive, config.output.log_interval, label
    ) as bar:
        while done < total:
            next_output = next((s for s in schedule if s > done), total)
            n = min(chunk, total - done, next_output - done)
            t0 = time.perf_counter()
            state, chunk_forces = chunk_fn(state, geometry, n)
            bad, where = health_fn(state.populations)
            bad = bool(bad)  # waits for the chunk
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
            if force_log is not None:
                host_forces = np.asarray(chunk_forces, dtype=np.float64)
                force_log.append(done + 1, host_forces)
                forces.append(host_forces)
            done += n
            if bad:
                index = np.unravel_index(int(where), setup.shape)
                position = [case.origin[a] + (int(i) + 0.5) * units.dx for a, i in enumerate(index)]
                rho_bad = float(np.asarray(jnp.sum(state.populations, axis=0))[index])
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
                summary = write_run_json(output_dir / "run.json", summary)
                raise DivergenceError(message, summary, output_dir)
            if writer is not None and done in schedule:
                rho, u = fields_si(state)
                writer.write(done, units.to_physical_time(done), rho, u)
            bar.update(done, timing["mlups"])

    rho_lat, u_lat = (np.asarray(a, dtype=np.float64) for a in macro_fn(state))
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


def _json_scalar(value) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None
