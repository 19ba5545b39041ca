"""Bodies moving in the fluid as a model of the run loop (``solver.run``).

State: ``CoupledState`` (the fluid's populations split over ``domain.mesh``, and the bodies
with their last hydrodynamic force, replicated on every shard). The chunk is the fluid chunk
with the coupled collision (``solver.coupling.step``); with ``coupling.bodies=owned`` each
shard owns the bodies whose centre its block holds inside the chunk (held whole again at its
end: ``solver.distributed.bodies.in_fluid.owned_chunk``). It reports the tracked bodies' position,
velocity and hydrodynamic force after every fluid step. Outputs in one run directory, timed
alike so that ParaView shows them together: fields.h5/xdmf and bodies.h5/xdmf at the output
steps, bodies_track.csv every step, a PNG of a slice through the first body with the bodies
drawn, a PNG of the tracked bodies' velocity against time, and run.json's ``coupling`` section.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
from jax import Array

from kernels.rigid_body import angular_velocity
from solver.bodies.model import pair_table_summary
from solver.bodies.step import initial_state as initial_body_state
from solver.bodies.step import run_once
from solver.coupling.case import CoupledCase
from solver.coupling.cases import build_coupled_case
from solver.coupling.output import TrackLog, plot_track, save_slice_png
from solver.coupling.step import TRACK_FIELDS, CoupledBodies
from solver.distributed.bodies import in_fluid
from solver.distributed.bodies.in_fluid import owned_chunk
from solver.distributed.runtime import Runtime
from solver.errors import BodyOverflowError, ConfigError
from solver.fluid.config import MAX_MACH
from solver.fluid.inplace_step import require_kernel
from solver.fluid.model import OUTPUTS_PER_RUN, FluidModel, _replicated
from solver.fluid.step import FluidState
from solver.fluid.units import mach
from solver.model import OutputSchedule, Problem
from solver.output.bodies import BodyWriter

log = logging.getLogger("solver")


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class CoupledState:
    """The fluid and the bodies at one time (a pytree)."""

    fluid: FluidState
    bodies: CoupledBodies

    def replace(self, **changes) -> CoupledState:
        return dataclasses.replace(self, **changes)


class CoupledModel(FluidModel):
    """A coupled case on the fluid's device mesh (see the module docstring)."""

    def __init__(
        self,
        config,
        runtime: Runtime,
        output_dir: Path,
        unbounded: bool = False,
        coupled: CoupledCase | None = None,
    ) -> None:
        if config.bodies.kernel != "xla":  # before anything is built: exit 2 with the reason
            raise ConfigError(
                "bodies.kernel",
                config.bodies.kernel,
                "xla for bodies in the fluid (the coupled step moves its bodies with the XLA "
                "body step)",
            )
        self.coupled = coupled = build_coupled_case(config) if coupled is None else coupled
        super().__init__(config, runtime, output_dir, unbounded, case=coupled.fluid)
        bodies = coupled.bodies
        self.n_bodies = bodies.n_bodies
        every = coupled.output_every if coupled.output_every is not None else config.output.every
        self.schedule = OutputSchedule.of(
            self.total, every, unbounded, OUTPUTS_PER_RUN, config.chunk
        )
        self.label = f"{coupled.name} {self.setup.lattice.name} + {self.n_bodies} body(ies)"
        self.identity["bodies"] = self.n_bodies
        self.identity["coupling"] = config.coupling.method
        log.info(
            "coupling %s: %d body(ies), %d body step(s) of %.4g s per fluid step, "
            "sphere radius %.3g cells",
            config.coupling.method,
            self.n_bodies,
            coupled.coupling.substeps,
            bodies.dt,
            float(coupled.coupling.radius_cells.min()),
        )
        if self.setup.kernel == "native":
            decomposition = self.dist.decomposition
            require_kernel(
                self.setup, "native", decomposition.shards, coupled=True,
                mesh=tuple(decomposition.mesh),
            )  # fmt: skip
        self.body_layout = None
        if config.coupling.bodies == "owned":
            self.body_layout = self._owned_layout(config.coupling)
            coupled = self.coupled = dataclasses.replace(
                coupled, coupling=dataclasses.replace(coupled.coupling, owned=self.body_layout)
            )
            self._chunk = owned_chunk(self.dist, self.setup, coupled.coupling, self.body_layout)
        else:
            self._chunk = self.dist.coupled_chunk(self.setup, coupled.coupling)
        self.tracked = min(coupled.coupling.tracked, self.n_bodies)
        self.track: list[np.ndarray] = []  # (k, tracked, 9) per chunk, SI
        self.body_writer: BodyWriter | None = None
        self.track_log: TrackLog | None = None

    def _owned_layout(self, coupling_config):
        """The split of the bodies over the fluid's mesh (``coupling.bodies=owned``): exit 2
        with a one-line error where it does not fit (a block narrower than a body's reach)."""
        coupling = self.coupled.coupling
        mesh = tuple(self.dist.decomposition.mesh)
        shape = tuple(self.setup.shape)
        if len(mesh) != 3:
            raise ConfigError("coupling.bodies", "owned", "replicated on a 2D grid")
        lower = tuple(float(o) for o in coupling.origin)
        upper = tuple(lo + n * coupling.dx for lo, n in zip(lower, shape, strict=True))
        # the stencil reaches r + 1/2 cells from a centre: one cell more for its rounding, and
        # a cell of motion per fluid step (a body is migrated once per fluid step)
        stencil = float(coupling.radius_cells.max()) + 1.0
        if not coupling.bodies.spheres_only:  # a clump's members reach its bounding radius
            stencil = float(coupling.bodies.bounding_radius.max()) / coupling.dx + 1.0
        reach = in_fluid.reach_of(coupling.bodies, coupling.dx, stencil, coupling.dx)
        return in_fluid.plan_fluid_layout(
            coupling.bodies, mesh, lower, upper, reach, **_capacity_args(coupling_config)
        )

    # ------------------------------------------------------------------ state

    def initial_state(self) -> CoupledState:
        fluid = super().initial_state()
        dtype = jax.numpy.dtype(self.setup.dtype)
        start = jax.tree.map(lambda a: a.astype(dtype) if a.dtype.kind == "f" else a,
                             self.coupled.initial)  # fmt: skip
        state = run_once(functools.partial(initial_body_state, self.coupled.bodies), start)
        if self.body_layout is not None:
            bodies = self.coupled.coupling.owned_initial(state, self.body_layout.shards)
        else:
            bodies = self.coupled.coupling.initial(state)
        return CoupledState(fluid=fluid, bodies=jax.tree.map(self.dist.replicate, bodies))

    def restored(self, view, host: dict, step: int):
        if "track" in host:
            self.track.append(host["track"].reshape(-1, self.tracked, TRACK_FIELDS))
        return view

    def checkpoint_host(self, step: int, state) -> tuple[dict, dict]:
        host, meta = super().checkpoint_host(step, state)
        if self.track:
            host["track"] = np.concatenate(self.track).reshape(-1, self.tracked * TRACK_FIELDS)
        return host, meta

    # ------------------------------------------------------------------ the body twin

    @property
    def planar(self) -> bool:
        """Disks held in the plane of a 2D grid (the body twin's pose check)."""
        return self.coupled.coupling.dimension == 2

    def pose_frames(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kinematic (n,), the scene's orientations (n, 4), the state's (n, 4)): the body
        twin's frames (solver.twin.bodies)."""
        initial = self.coupled.initial
        state = np.asarray(initial.orientation)
        given = self.coupled.given_orientation
        return np.asarray(initial.kinematic), state if given is None else given, state

    def bodies(self, state: CoupledState):
        """The bodies on the host, in body order (the twin reads and moves them)."""
        return jax.tree.map(lambda a: np.asarray(_replicated(a)), state.bodies.state.bodies)

    def with_bodies(self, state: CoupledState, bodies) -> CoupledState:
        """Continue from ``bodies`` (the twin moves kinematic bodies between chunks)."""
        body_state = state.bodies.state.replace(bodies=jax.tree.map(self.dist.replicate, bodies))
        return state.replace(bodies=state.bodies.replace(state=body_state))

    # ------------------------------------------------------------------ outputs

    def open_outputs(self, step: int, resumed: bool, state) -> dict[str, str]:
        outputs: dict[str, str] = {}
        if self.dist.is_root:
            bodies = self.coupled.bodies
            inverse = np.asarray(self.coupled.initial.inverse_mass)
            mass = np.divide(1.0, inverse, out=np.full(inverse.shape, np.inf), where=inverse > 0)
            self.body_writer = BodyWriter(
                self.output_dir,
                bodies.bounding_radius,
                mass,
                {"case": self.name, "dt_s": self.dt, "coupling": self.config.coupling.method},
                resume_step=step if resumed else None,
            )
            history = np.concatenate(self.track) if self.track else None
            self.track_log = TrackLog(
                self.output_dir / "bodies_track.csv", self.tracked, self.dt, history
            )
            outputs = {
                "bodies_h5": str(self.body_writer.h5_path),
                "bodies_xdmf": str(self.body_writer.xdmf_path),
                "bodies_track_csv": str(self.track_log.path),
            }
        return {**outputs, **super().open_outputs(step, resumed, state)}

    def write(self, step: int, state) -> None:
        super().write(step, state.fluid)
        if self.body_writer is None:
            return
        body_state = state.bodies.state
        bodies = body_state.bodies
        fields = {
            "position": _replicated(bodies.position),
            "orientation": _replicated(bodies.orientation),
            "velocity": _replicated(bodies.velocity),
            "angular_velocity": _replicated(angular_velocity(bodies)),
            "contact_count": _replicated(body_state.contact_count),
        }
        self.body_writer.write(step, self.units.to_physical_time(step), fields)

    # ------------------------------------------------------------------ stepping

    def advance(self, state: CoupledState, n: int):
        fluid, _, bodies, reports = self._chunk(state.fluid, self.geometry, n, state.bodies)
        return CoupledState(fluid=fluid, bodies=bodies), reports

    # not pipelined by the run loop: after a divergence run.json's pair table reads the bodies
    # of the failing chunk, which a deferred check would have handed over to the next chunk
    # (and the chunk's track report waits for the chunk anyway)
    check_start = None

    def check(self, state: CoupledState, done: int) -> Problem | None:
        problem = self.check_finish(FluidModel.check_start(self, state.fluid, done))
        if problem is not None:
            return self._with_body_speed(problem, state)
        if self.body_layout is None:
            return None
        table = np.asarray(_replicated(state.bodies.overflow))
        message = in_fluid.overflow_message(self.body_layout, table)
        if message is None:
            return None
        return Problem(
            "overflow",
            f"body buffers too small by step {done} (coupling.bodies=owned): {message}",
            BodyOverflowError,
            {"overflow": message},
        )

    def _with_body_speed(self, problem: Problem, state: CoupledState) -> Problem:
        """A divergence whose likely cause is a body faster than the lattice carries (its
        lattice Mach number above MAX_MACH, the limit the configuration holds the fluid's own
        velocity scale to): said first, with the remedy."""
        speed = np.linalg.norm(np.asarray(self.bodies(state).velocity, dtype=float), axis=1)
        if speed.size == 0 or not np.isfinite(speed).any():
            return problem
        fastest = float(np.nanmax(speed))
        body_mach = mach(fastest * self.units.dt / self.units.dx)
        if body_mach <= MAX_MACH:
            return problem
        cause = (
            f"a body moves at {fastest:.3g} m/s, lattice Mach {body_mach:.2f} (the grid's Mach "
            f"{self.case.mach:.3f} is for the case's own velocity scale): lower fluid.u_lattice "
            "(a shorter time step) or slow the bodies (density, gravity)"
        )
        details = dict(problem.details or {})
        found = details.get("divergence", {})
        fluid_cause = found.get("likely_cause", "")
        # the fluid's own numbers "look safe" when the bodies are the trouble: then say only this
        both = cause if "look safe" in fluid_cause else f"{cause}; {fluid_cause}"
        message = problem.message.replace(f"likely cause: {fluid_cause}", f"likely cause: {both}")
        if found:
            details["divergence"] = {**found, "body_mach": body_mach, "likely_cause": both}
        return dataclasses.replace(problem, message=message, details=details)

    def record(self, first: int, n: int, state, report: Array) -> None:
        track = np.asarray(_replicated(report), dtype=np.float64).reshape(
            n, self.tracked, TRACK_FIELDS
        )
        if self.track_log is not None:
            self.track_log.append(first + 1, track)
        self.track.append(track)

    # ------------------------------------------------------------------ the end

    def conclude(self, status: str, done: int, state, timing: dict) -> dict:
        summary = super().conclude(status, done, state.fluid, timing)
        coupled = self.coupled
        summary["coupling"] = {
            "method": self.config.coupling.method,
            "bodies": self.n_bodies,
            "substeps": coupled.coupling.substeps,
            "body_dt_s": coupled.bodies.dt,
            "average_force": coupled.coupling.average_force,
            "radius_cells": float(coupled.coupling.radius_cells.min()),
            "pair_table": pair_table_summary(
                coupled.bodies,
                int(np.max(_replicated(state.bodies.state.rebuilds))),
                done * coupled.coupling.substeps,
            ),
            **{k: v for k, v in coupled.info.items() if v is not None},
        }
        if self.body_layout is not None:
            summary["coupling"]["buffers"] = in_fluid.buffer_use(
                self.body_layout, np.asarray(_replicated(state.bodies.overflow))
            )
        if status != "completed" or not self.dist.is_root:
            return summary
        track = np.concatenate(self.track) if self.track else np.zeros((0, self.tracked, 9))
        times = self.units.to_physical_time(np.arange(1, len(track) + 1))
        fluid = summary["diagnostics"]
        final = state.bodies.state.bodies
        summary["diagnostics"] = {
            **fluid,
            **coupled.diagnostics(times, track, fluid),
            **coupled.final(
                np.asarray(_replicated(final.position), dtype=np.float64),
                np.asarray(_replicated(final.velocity), dtype=np.float64),
                np.asarray(_replicated(final.orientation), dtype=np.float64),
            ),
        }
        if self.config.output.png and len(track):
            outputs = summary.setdefault("outputs", {})
            outputs["track_png"] = str(
                plot_track(self.output_dir / "bodies_track.png", times, track, coupled)
            )
            if self.final_fields is not None:
                body = state.bodies.state.bodies
                position = coupled.sphere_centres(
                    np.asarray(_replicated(body.position), dtype=np.float64),
                    np.asarray(_replicated(body.orientation), dtype=np.float64),
                )  # every sphere, clump members included
                outputs["slice_png"] = str(
                    save_slice_png(
                        self.output_dir / "slice.png",
                        self.final_fields["velocity"],
                        self.setup.solid,
                        self.units.dx,
                        self.case.origin,
                        position,
                        coupled.bodies.radius,
                        f"{coupled.name}: speed at t = {self.units.to_physical_time(done):.4g} s",
                    )
                )
        return summary

    def summary_lines(self, summary: dict) -> list[str]:
        lines = super().summary_lines(summary)
        info = summary.get("coupling") or {}
        diag = summary.get("diagnostics") or {}
        text = (
            f"coupling {info.get('method')}: {info.get('bodies')} body(ies), "
            f"{info.get('substeps')} body step(s) per fluid step"
        )
        if "max_settling_velocity_m_s" in diag:
            text += f"; max settling velocity {diag['max_settling_velocity_m_s']:.4g} m/s"
            if "reference_max_velocity_m_s" in diag:
                text += (
                    f" (experiment {diag['reference_max_velocity_m_s']:.4g} m/s, "
                    f"{100 * diag['max_velocity_error']:+.1f}%)"
                )
        return [*lines[:3], text, *lines[3:]]


def _capacity_args(config) -> dict:
    """plan_fluid_layout's keyword arguments from ``coupling.<capacity keys>`` (same names)."""
    return {k: v for k, v in config.capacities.items() if v is not None}
