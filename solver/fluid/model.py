"""The lattice-Boltzmann fluid as a model of the run loop (``solver.run``).

State: ``FluidState`` (populations (q, *shape) split over ``domain.mesh``, step counter);
static: the case's ``FluidSetup`` and its geometry arrays on the devices (a twin may replace the
geometry between chunks: a new inflow is a new array, not a new program). After every chunk the
health check looks for a non-finite or non-positive density on a fluid node (divergence: exit 3,
with the cell, its position and the likely cause). Outputs: fields.h5/xdmf at output steps,
forces.csv every step of a case that measures forces, a PNG of the final flow, and run.json's
fluid section (tau, Mach, Re, MLUPS, domain, units, case diagnostics).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from solver.distributed.config import overlap_halos
from solver.distributed.distribution import distribute
from solver.distributed.host_collectives import barrier
from solver.distributed.runtime import Runtime
from solver.errors import DivergenceError
from solver.fluid.boundary_rules import require_wall_rule
from solver.fluid.cases import Case, RunData, build_case
from solver.fluid.cases.base import FieldsNotGatheredError, NotGathered
from solver.fluid.inplace_step import require_kernel
from solver.fluid.step import decode_populations, initial_state, macroscopic
from solver.model import OutputSchedule, Problem
from solver.output.field_parts import PartWriter, VirtualFieldWriter
from solver.output.fields import FieldWriter
from solver.output.plots import save_field_png
from solver.output.summary import ForceLog

log = logging.getLogger("solver")

OUTPUTS_PER_RUN = 10  # field outputs when output.every is null


def _health(populations, solid):
    """jit-able check: (any bad fluid node, flat index of the first bad one, its density);
    ``populations`` (q, *shape) decoded (``decode_populations``)."""
    rho = jnp.sum(populations, axis=0)
    bad = ~jnp.isfinite(rho) | (rho <= 0)
    if solid is not None:
        bad = bad & ~solid
    where = jnp.argmax(bad.ravel())
    return jnp.any(bad), where, rho.ravel()[where]


def _robust(case: Case) -> list[str]:
    """The collision and subgrid options that a run near tau = 1/2 could switch to."""
    setup = case.setup
    options = ["use fluid.collision=trt"] if setup.collision == "bgk" else []
    # KBC needs a tensor-product lattice (D2Q9, D3Q27); the regularized operator runs on all
    robust = ["kbc"] if setup.lattice.q == 3**setup.lattice.d else []
    robust = [c for c in robust + ["regularized"] if c != setup.collision]
    if robust:
        options.append(f"fluid.collision={' or '.join(robust)}")
    if setup.les == "none" and setup.collision != "kbc":
        options.append("fluid.les=smagorinsky for an under-resolved flow")
    return options


def likely_cause(case: Case) -> str:
    """The numbers that usually explain a divergence, with what to change."""
    nu = case.setup.viscosity
    u = case.mach * math.sqrt(1.0 / 3.0)
    grid_re = u / nu if nu > 0 else float("inf")
    causes = []
    if case.tau < 0.55:
        causes.append(
            f"tau = {case.tau:.5f} is close to 0.5 (raise the viscosity (lower Re), "
            "case.resolution or fluid.u_lattice" + "".join(", or " + o for o in _robust(case)) + ")"
        )
    if case.setup.collision == "trt" and case.setup.open_boundaries and case.tau < 0.535:
        causes.append(
            "TRT with an inlet/outlet below tau = 0.535 was seen to go unstable at the inlet "
            "next to a wall, where BGK, regularized and KBC held (the stability map in "
            "docs/validation.md)"
        )
    if case.mach > 0.2:
        causes.append(f"lattice Mach = {case.mach:.3f} is high (lower fluid.u_lattice)")
    if case.setup.storage_dtype == "float16":
        causes.append(
            "fluid.storage=float16 overflows where |f_i - w_i| >= 2 (docs/storage.md; "
            "try fluid.storage=bfloat16 or float32)"
        )
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


def _mean_kinetic_energy(setup, state, geometry):
    """Mean <rho |u|^2 / 2> over the grid, lattice units (a replicated scalar)."""
    rho, u = macroscopic(setup, state, geometry)
    return 0.5 * jnp.mean(rho * jnp.sum(u * u, axis=0))


def _replicated(array) -> np.ndarray:
    """A replicated device array on the host (also when other processes hold copies)."""
    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    return np.asarray(array.addressable_data(0))


def _json_scalar(value) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None


class FluidModel:
    """A fluid case on the device mesh of ``domain.mesh`` (see the module docstring).

    Args:
        config: the validated run config.
        runtime: the started runtime (processes, devices).
        output_dir: where the files go.
        unbounded: a service run (no last step; outputs only every ``output.every``).
        case: a case built already (tests, validation); None: built from the config.
    """

    def __init__(
        self,
        config,
        runtime: Runtime,
        output_dir: Path,
        unbounded: bool = False,
        case: Case | None = None,
    ) -> None:
        self.config = config
        self.output_dir = Path(output_dir)
        self.case = case = build_case(config, runtime) if case is None else case
        self.setup, self.units = setup, units = case.setup, case.units
        self.dist = dist = distribute(
            runtime,
            config.domain.mesh,
            setup.shape,
            overlap_halos(config.domain.overlap),
            unsplit=setup.mirror_axes,
        )
        self.layout = dist
        self.runtime = runtime
        self.name = case.name
        self.label = f"{case.name} {setup.lattice.name}"
        self.total = config.steps if config.steps is not None else case.default_steps
        self.dt = units.dt
        self.work = setup.cells
        # whole chunks between outputs (one chunk length, one compilation); without field
        # outputs no step but the last is an output step
        self.schedule = OutputSchedule.of(
            self.total,
            config.output.every,
            unbounded,
            OUTPUTS_PER_RUN if config.output.fields else 1,
            config.chunk,
        )
        self.identity = {
            "case": case.name,
            "lattice": setup.lattice.name,
            "shape": list(setup.shape),
            "precision": setup.dtype,
        }
        if setup.storage_dtype != setup.dtype:  # older checkpoints have no storage key
            self.identity["storage"] = setup.storage_dtype
        log.info(
            "%s: %s %s on %s, shape %s, tau = %.4f, Mach = %.3f, Re = %.4g, %s steps",
            case.name,
            setup.lattice.name,
            setup.collision.upper(),
            setup.dtype
            if setup.storage_dtype == setup.dtype
            else f"{setup.dtype} (stored as {setup.storage_dtype})",
            setup.shape,
            case.tau,
            case.mach,
            case.reynolds,
            "until stopped (service)" if unbounded else self.total,
        )
        log.info(
            "domain: mesh %s (%s halo), blocks of %s cells, %d process(es)",
            "x".join(str(m) for m in dist.decomposition.mesh),
            dist.backend,
            "x".join(str(n) for n in dist.decomposition.local_shape),
            runtime.process_count,
        )
        if setup.kernel != "xla":  # before anything is traced: exit 2 with the reason
            decomposition = dist.decomposition
            require_kernel(setup, shards=decomposition.shards, mesh=decomposition.mesh)
        require_wall_rule(setup, dist.decomposition.shards)
        self.geometry = dist.geometry(setup)
        self._chunk = dist.chunk(setup)
        self._exchange = None  # the telemetry's halo probe, built at its first use
        self._macro = jax.jit(lambda s, g: macroscopic(setup, s, g))
        self._health = jax.jit(lambda p, solid: _health(decode_populations(setup, p), solid))
        self._energy = jax.jit(lambda s, g: _mean_kinetic_energy(setup, s, g))
        self.forces: list[np.ndarray] = []
        self.energy: list[tuple[int, float]] = []
        self.writer: FieldWriter | None = None
        self.force_log: ForceLog | None = None
        self.final_fields: dict | None = None

    # ------------------------------------------------------------------ state

    def initial_state(self):
        """The initial populations from the case's density and velocity (and gradient); each
        process computes only its blocks of them (``Distribution.put`` on ``GridField``s)."""
        setup, dist, case = self.setup, self.dist, self.case
        gradient = case.velocity_gradient
        state = initial_state(
            setup,
            dist.put(case.density, 0, setup.dtype),
            dist.put(case.velocity, 1, setup.dtype),
            None if gradient is None else dist.put(gradient, 2, setup.dtype),
        )
        return state.replace(
            populations=dist.place(state.populations, 1), time=dist.replicate(state.time)
        )

    def checkpoint_view(self, state):
        return state

    def restored(self, view, host: dict, step: int):
        if "forces" in host:
            self.forces.append(host["forces"])
        if "energy" in host:
            self.energy = [(int(k), float(e)) for k, e in host["energy"]]
        return view

    def checkpoint_host(self, step: int, state) -> tuple[dict, dict]:
        host = {"step": np.asarray([step], dtype=np.int64)}
        if self.forces:
            host["forces"] = np.concatenate(self.forces)
        if self.energy:
            host["energy"] = np.asarray(self.energy, dtype=np.float64)
        return host, {"time_s": self.units.to_physical_time(step)}

    # ------------------------------------------------------------------ outputs

    def open_outputs(self, step: int, resumed: bool, state) -> dict[str, str]:
        config, setup, units, case = self.config, self.setup, self.units, self.case
        outputs: dict[str, str] = {}
        root = self.dist.is_root
        resume_step = step if resumed else None
        # several processes: each writes its own blocks, process 0 an index over them
        self.parts = None
        if config.output.fields and self.runtime.process_count > 1:
            h5_path = self.output_dir / "fields.h5"
            self.parts = PartWriter(h5_path, self.runtime.process_index, resume_step)
        if config.output.fields and root:
            arguments = (
                self.output_dir,
                setup.shape,
                units.dx,
                case.origin,
                setup.solid,
                {
                    "case": case.name,
                    "lattice": setup.lattice.name,
                    "dt": units.dt,
                    "rho0": units.rho0,
                    "dimension": setup.lattice.d,
                },
            )
            if self.parts is None:
                self.writer = FieldWriter(*arguments, resume_step=resume_step)
            else:
                processes = self.runtime.process_count
                self.writer = VirtualFieldWriter(*arguments, processes, resume_step=resume_step)
            outputs["fields_h5"] = str(self.writer.h5_path)
            outputs["fields_xdmf"] = str(self.writer.xdmf_path)
        if case.measures_forces and root:
            history = np.concatenate(self.forces) if self.forces else None
            self.force_log = ForceLog(
                self.output_dir / "forces.csv",
                setup.lattice.d,
                units.dt,
                case.force_coefficients(),
                history,
                moments=setup.force_width - setup.lattice.d,
            )
            outputs["forces_csv"] = str(self.force_log.path)
        if case.tracks_energy and not resumed:
            self._record_energy(step, state)
        # a resumed run writes its first step again: the run dir may be new (resume=PATH)
        if not resumed or step in self.schedule:
            self.write(step, state)
        return outputs

    def _lattice_fields(self, state):
        """(rho, u) of the whole grid on process 0, lattice units; None on the others."""
        rho, u = self._macro(state, self.geometry)
        return self.dist.gather(rho), self.dist.gather(u, 1)

    def write(self, step: int, state) -> None:
        if not self.config.output.fields:
            return
        started = time.perf_counter()
        units = self.units
        time_s = units.to_physical_time(step)
        if self.parts is None:
            # one process: the whole field into fields.h5
            rho, u = self._lattice_fields(state)
            written = rho.nbytes + u.nbytes
            self.writer.write(
                step, time_s, units.to_physical_density(rho), units.to_physical_velocity(u)
            )
        else:
            written = self._write_blocks(step, time_s, state)
        seconds = time.perf_counter() - started
        log.debug(
            "fields at step %d: %.1f MB from this process in %.3f s (%.2f GB/s)",
            step,
            written / 1e6,
            seconds,
            written / seconds / 1e9,
        )

    def _write_blocks(self, step: int, time_s: float, state) -> int:
        """Several processes: this one's blocks into its part file (none gathers the field),
        then process 0's index over all of them; the bytes this process wrote."""
        units = self.units
        rho, u = self._macro(state, self.geometry)
        blocks = []
        for (block, r), (block_u, v) in zip(
            self.dist.local_blocks(rho), self.dist.local_blocks(u, 1), strict=True
        ):
            if block != block_u:
                raise RuntimeError(f"density block {block} != velocity block {block_u}")
            blocks.append((block, units.to_physical_density(r), units.to_physical_velocity(v)))
        self.parts.write(step, time_s, blocks)
        # fields.h5 names a step only once every process's blocks of it are on disk
        barrier(self.runtime)
        if self.writer is not None:
            dtype = units.to_physical_density(np.zeros(0, rho.dtype)).dtype
            layout = self.dist.block_owners(rho)
            self.writer.write_virtual(step, time_s, layout, dtype, u.shape[0])
        return sum(r.nbytes + v.nbytes for _, r, v in blocks)

    # ------------------------------------------------------------------ stepping

    def exchange_seconds(self, state) -> float | None:
        """Wall s of one halo exchange of the state's populations alone (the telemetry's probe,
        ``Distribution.exchange_probe``), None with one shard. Every process must call it at
        the same point (it is a collective); the first call compiles the probe (not timed)."""
        if self._exchange is None:
            self._exchange = self.dist.exchange_probe(self.setup) or False
            if self._exchange:
                jax.block_until_ready(self._exchange(self._fluid_state(state).populations))
        if not self._exchange:
            return None
        populations = self._fluid_state(state).populations
        start = time.perf_counter()
        jax.block_until_ready(self._exchange(populations))
        return time.perf_counter() - start

    @staticmethod
    def _fluid_state(state):
        """The fluid part of the model's state (a coupled state holds it as ``fluid``)."""
        return getattr(state, "fluid", state)

    def advance(self, state, n: int):
        return self._chunk(state, self.geometry, n)

    def check_start(self, state, done: int):
        """Dispatch the health check of ``state`` at step ``done`` without waiting for it.

        The flags are new arrays, so the next chunk may take the state over (JAX's donation
        waits for reads dispatched before it); ``check_finish`` reads them on the host."""
        return done, self._health(self._fluid_state(state).populations, self.geometry.solid)

    def check_finish(self, pending) -> Problem | None:
        """The divergence found by a ``check_start``, or None (waits for its chunk; under
        halo=mpi an all-gather over the processes)."""
        done, flags = pending
        bad = self.dist.first_bad(*flags)
        if bad is None:
            return None
        index, rho_bad = bad
        units, case = self.units, self.case
        position = [case.origin[a] + (int(i) + 0.5) * units.dx for a, i in enumerate(index)]
        cause = likely_cause(case)
        message = (
            f"diverged at step {done} (t = {units.to_physical_time(done):.4g} s): "
            f"density {rho_bad:.4g} at cell {tuple(int(i) for i in index)}, "
            f"x = ({', '.join(f'{p:.4g}' for p in position)}) m; likely cause: {cause}"
        )
        details = {
            "divergence": {
                "step": done,
                "cell": [int(i) for i in index],
                "position_m": position,
                "density_lattice": rho_bad,
                "likely_cause": cause,
            }
        }
        return Problem("diverged", message, DivergenceError, details)

    def check(self, state, done: int) -> Problem | None:
        return self.check_finish(self.check_start(state, done))

    def _record_energy(self, step: int, state) -> None:
        energy = float(_replicated(self._energy(state, self.geometry)))
        self.energy.append((step, energy))

    def record(self, first: int, n: int, state, report) -> None:
        if self.case.tracks_energy:
            self._record_energy(first + n, state)
        if not self.case.measures_forces:
            return
        forces = np.asarray(_replicated(report), dtype=np.float64)
        if self.force_log is not None:
            self.force_log.append(first + 1, forces)
        self.forces.append(forces)

    # ------------------------------------------------------------------ the end

    def conclude(self, status: str, done: int, state, timing: dict) -> dict:
        setup, units, case, dist = self.setup, self.units, self.case, self.dist
        summary = {
            "mlups": timing["rate"] / 1e6,
            "tau": case.tau,
            "mach": case.mach,
            "reynolds": case.reynolds,
            "lattice": setup.lattice.name,
            "collision": setup.collision,
            "les": {"model": setup.les, "smagorinsky_constant": setup.les_cs}
            if setup.les != "none"
            else None,
            "curved_walls": setup.curved_walls if setup.wall_distance is not None else None,
            "precision": setup.dtype,
            "storage": setup.storage_dtype,
            "shape": list(setup.shape),
            "cells": setup.cells,
            "devices": dist.devices,
            "domain": {
                "mesh": list(dist.decomposition.mesh),
                "halo": dist.backend,
                "processes": self.runtime.process_count,
                "local_shape": list(dist.decomposition.local_shape),
            },
            "units": {**units.as_dict(), "origin": list(case.origin)},
            "case_info": {k: v for k, v in case.info.items() if _json_scalar(v)},
            "diagnostics": {},
        }
        if status != "completed":
            return summary
        output = self.config.output
        gathered = setup.cells <= output.gather_cells
        if gathered:
            rho_lat, u_lat = self._lattice_fields(state)
            png_velocity = None
        else:
            rho_lat, u_lat = NotGathered("density"), NotGathered("velocity")
            png_velocity = self._png_plane(state) if output.png else None
        if not dist.is_root:
            return summary
        if gathered:
            rho_lat, u_lat = rho_lat.astype(np.float64), u_lat.astype(np.float64)
        data = RunData(
            steps=done,
            density=rho_lat,
            velocity=u_lat,
            forces=np.concatenate(self.forces) if self.forces else None,
            energy=np.asarray(self.energy, dtype=np.float64) if self.energy else None,
        )
        try:
            summary["diagnostics"] = case.diagnostics(data)
        except FieldsNotGatheredError:
            summary["diagnostics_skipped"] = (
                f"the case's diagnostics need the final fields, not gathered for "
                f"{setup.cells} cells (output.gather_cells={output.gather_cells})"
            )
            log.warning("diagnostics skipped: %s", summary["diagnostics_skipped"])
        if gathered:
            density = units.to_physical_density(rho_lat)
            velocity = units.to_physical_velocity(u_lat)
            self.final_fields = {"density": density, "velocity": velocity}
            png_velocity, png_solid, z_index = velocity, setup.solid, None
        elif png_velocity is not None:
            png_velocity, png_solid = png_velocity
            z_index = setup.shape[2] // 2
        if output.png and png_velocity is not None:
            field_name = case.png_field if output.png_field == "auto" else output.png_field
            png = save_field_png(
                self.output_dir / f"{field_name}.png",
                png_velocity,
                png_solid,
                units.dx,
                case.origin,
                field_name,
                f"{case.name}: {field_name} at t = {units.to_physical_time(done):.4g} s "
                f"(step {done}, Re = {case.reynolds:.4g})",
                z_index=z_index,
            )
            summary["outputs"] = {"png": str(png)}
        return summary

    def _png_plane(self, state) -> tuple[np.ndarray, np.ndarray | None] | None:
        """A grid too large to gather: the PNG's plane only (3D: z = nz / 2, as
        ``save_field_png`` draws it), as (velocity (3, nx, ny, 1) m/s, solid (nx, ny, 1))
        on process 0; None on the others and for 2D grids (the plane is the whole grid)."""
        setup = self.setup
        if setup.lattice.d != 3:
            log.warning("no PNG: a 2D grid of %d cells is above output.gather_cells", setup.cells)
            return None
        k = setup.shape[2] // 2
        _, u = self._macro(state, self.geometry)
        plane = self.dist.gather_plane(u, 2, k, lead=1)
        if plane is None:
            return None
        solid = None if setup.solid is None else np.asarray(setup.solid[:, :, k : k + 1])
        velocity = self.units.to_physical_velocity(plane.astype(np.float64))[..., None]
        return velocity, solid

    def summary_lines(self, summary: dict) -> list[str]:
        return summary_lines(summary)


def _precision_text(summary: dict) -> str:
    """ "float32", or "float32, stored as float16" with another storage."""
    storage = summary.get("storage", summary["precision"])
    same = storage == summary["precision"]
    return summary["precision"] if same else f"{summary['precision']}, stored as {storage}"


def summary_lines(summary: dict) -> list[str]:
    """The short end-of-run summary of a fluid run."""
    lines = [
        f"case {summary['case']} on {summary['lattice']} {summary['collision'].upper()} "
        f"({_precision_text(summary)}), grid {' x '.join(str(n) for n in summary['shape'])}",
        f"tau = {summary['tau']:.4f}   Mach = {summary['mach']:.3f}   "
        f"Re = {summary['reynolds']:.4g}",
        f"steps = {summary['steps']}   simulated time = {summary['time_s']:.4g} s   "
        f"wall time = {summary['wall_time_s']:.1f} s   {summary['mlups']:.1f} MLUPS",
    ]
    diag = summary.get("diagnostics") or {}
    keys = (
        "cd_mean",
        "cl_amplitude",
        "strouhal",
        "velocity_l2_error",
        "velocity_l2_error_transient",
        "ux_min_over_u",
        "uy_max_over_u",
    )
    parts = [
        f"{k} = {diag[k]:.4g}" if isinstance(diag.get(k), float) else f"{k} = {diag[k]}"
        for k in keys
        if k in diag
    ]
    if parts:
        lines.append("   ".join(parts))
    for name, path in summary.get("outputs", {}).items():
        lines.append(f"{name:>12}: {path}")
    return lines
