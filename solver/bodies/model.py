"""A rigid-body scene as a model of the run loop (``solver.run``): one device or ``bodies.mesh``.

State: ``BodyState`` on one device, or the subdomains' ``SubdomainState`` split over the device
mesh (``solver.bodies.steppers``). Bodies run in float64 (the app switches JAX's x64 mode on).
Between chunks the model appends the per-step energies to energies.csv, writes bodies.h5 at
output steps and checks the neighbour-search buffers: an overflow stops the run with run.json
status "overflow" and ``BodyOverflowError`` (the app's exit code 4). Bodies found outside the
cell grid are logged once and listed in run.json's "left_grid" (the neighbour search clamps them
into its edge cells).

Checkpoints hold the state on the host in body order (``HostLayout``: any device count), the
energy rows and the output frames the case diagnostics need, so a resumed run continues the
files and its run.json equals the uninterrupted run's.

Files: bodies.h5, bodies.xdmf, energies.csv (``solver.output.bodies``), run.json.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import jax
import numpy as np

from kernels import rigid_body
from solver.bodies.cases import build_body_case
from solver.bodies.scene_case import bodies_outside
from solver.bodies.steppers import SingleStepper, SpatialStepper
from solver.checkpoint.flat import flatten_leaves, unflatten_leaves
from solver.distributed.distribution import HostLayout
from solver.distributed.runtime import Runtime
from solver.errors import BodyOverflowError
from solver.model import OutputSchedule, Problem
from solver.output.bodies import BodyWriter, EnergyLog, energy_rows

log = logging.getLogger("solver")

OUTPUTS_PER_RUN = 50  # bodies.h5 outputs when the case's output_every is null
FRAMES = ("position", "orientation", "velocity")  # kept per output step for the diagnostics


class BodyModel:
    """A rigid-body case (see the module docstring).

    Args:
        config: the validated run config (a body case).
        runtime: the started runtime.
        output_dir: where the files go.
    """

    def __init__(self, config, runtime: Runtime, output_dir: Path, unbounded: bool = False) -> None:
        self.config = config
        self.output_dir = Path(output_dir)
        self.runtime = runtime
        self.case = case = build_body_case(config)
        self.setup = setup = case.setup
        self.name = self.label = case.name
        self.dt = setup.dt
        self.total = config.steps if config.steps is not None else case.default_steps
        self.work = setup.n_bodies
        self.schedule = OutputSchedule.of(
            self.total, case.output_every, unbounded, OUTPUTS_PER_RUN, config.chunk
        )
        mesh = config.bodies.mesh
        log.info(
            "%s: %d body(ies) of %d sphere(s), %d plane(s), %s contact, dt = %.4g s%s, %d steps",
            case.name,
            setup.n_bodies,
            setup.n_spheres,
            setup.n_planes,
            setup.contact_model,
            self.dt,
            "" if case.stable_dt is None else f" (stable step {case.stable_dt:.4g} s)",
            self.total,
        )
        if mesh is not None:
            self.stepper = SpatialStepper(setup, case.bodies, mesh,
                                          dict(config.bodies.capacities))  # fmt: skip
            log.info("%s: split over a %s mesh of subdomains", case.name,
                     "x".join(map(str, mesh)))  # fmt: skip
        else:
            kernel = config.bodies.kernel
            if kernel == "native":  # before anything is traced: exit 2 with the reason
                from solver.bodies.native_step import require_native

                require_native(setup)
            # the state's type sets the step's (bodies.precision)
            bodies = case.bodies.astype(config.bodies.precision)
            self.stepper = SingleStepper(setup, bodies, self.diagnostics_every(config), kernel)
        self.layout = HostLayout(runtime, {"mesh": list(mesh) if mesh else None})
        self.identity = {
            "case": case.name,
            "bodies": setup.n_bodies,
            "spheres": setup.n_spheres,
            "planes": setup.n_planes,
            "precision": config.bodies.precision,
        }
        self._omega = jax.jit(rigid_body.angular_velocity)
        self.rows: list[np.ndarray] = [energy_rows(0, self.dt, self.stepper.initial)]
        self.frames: dict[str, list[np.ndarray]] = {k: [] for k in FRAMES}
        self.times: list[float] = []
        self.frame_steps: list[int] = []
        self.left_grid: dict = {}
        self.writer: BodyWriter | None = None
        self.energy_log: EnergyLog | None = None
        self.final_fields: dict | None = None
        self._last: dict | None = None
        self._template = None

    # ------------------------------------------------------------------ state

    def initial_state(self):
        return self.stepper.initial_state()

    def checkpoint_view(self, state):
        view = self.stepper.view(state)
        if self._template is None:  # the first view is of the initial state (resume's template)
            self._template = view
        return flatten_leaves(view)

    def checkpoint_host(self, step: int, state) -> tuple[dict, dict]:
        host = {
            "step": np.asarray([step], np.int64),
            "energies": np.concatenate(self.rows),
            "frame_steps": np.asarray(self.frame_steps, np.int64),
            "frame_times": np.asarray(self.times, np.float64),
            **{f"frame.{k}": np.asarray(v) for k, v in self.frames.items()},
            **self.stepper.extras(state),
        }
        return host, {"time_s": step * self.dt}

    def restored(self, view, host: dict, step: int):
        self.rows = [np.asarray(host["energies"])]
        self.frame_steps = [int(s) for s in host["frame_steps"]]
        self.times = [float(t) for t in host["frame_times"]]
        self.frames = {k: list(np.asarray(host[f"frame.{k}"])) for k in FRAMES}
        return self.stepper.from_view(unflatten_leaves(view, self._template), host)

    def pose_frames(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kinematic (n,), the scene's orientations (n, 4), the state's (n, 4)): the body
        twin's frames (solver.twin.bodies)."""
        given, _ = self.case.scene.arrays()
        bodies = self.case.bodies
        return np.asarray(bodies.kinematic), given.orientation, np.asarray(bodies.orientation)

    def bodies(self, state):
        """The bodies on the host, in body order (the twin reads and moves them)."""
        return self.stepper.snapshot(state)[0]

    def with_bodies(self, state, bodies):
        return self.stepper.with_bodies(state, bodies)

    # ------------------------------------------------------------------ outputs

    def open_outputs(self, step: int, resumed: bool, state) -> dict[str, str]:
        outputs: dict[str, str] = {}
        if self.runtime.is_root:
            setup = self.setup
            self.writer = BodyWriter(
                self.output_dir,
                setup.bounding_radius,
                self.case.mass,
                {"case": self.name, "dt_s": self.dt, "contact_model": setup.contact_model},
                resume_step=step if resumed else None,
            )
            self.energy_log = EnergyLog(self.output_dir / "energies.csv", np.concatenate(self.rows))
            outputs = {
                "bodies_h5": str(self.writer.h5_path),
                "bodies_xdmf": str(self.writer.xdmf_path),
                "energies_csv": str(self.energy_log.path),
            }
        if not resumed or step in self.schedule:
            self.write(step, state)
        return outputs

    def write(self, step: int, state) -> None:
        bodies, contact_count = self.stepper.snapshot(state)  # every process (all-gather)
        fields = {
            "position": np.asarray(bodies.position),
            "orientation": np.asarray(bodies.orientation),
            "velocity": np.asarray(bodies.velocity),
            "angular_velocity": np.asarray(self._omega(bodies)),
            "contact_count": np.asarray(contact_count),
        }
        if self.writer is not None:
            self.writer.write(step, step * self.dt, fields)
        if self.frame_steps and self.frame_steps[-1] == step:  # written again on resume
            return
        self.frame_steps.append(step)
        self.times.append(step * self.dt)
        for key in FRAMES:
            self.frames[key].append(fields[key])
        self._last = fields

    def diagnostics_every(self, config) -> int:
        """Steps between the energy and momentum totals (energies.csv, run.json): the
        ``bodies.diagnostics_every`` given; by default every step for the cases whose checks read
        the per-step series, else the output interval (rows also at every chunk's end)."""
        every = config.bodies.diagnostics_every
        if every is not None:
            return every
        if self.case.series_every_step:
            return 1
        return self.schedule.every or max(1, self.total)

    # ------------------------------------------------------------------ stepping

    def advance(self, state, n: int):
        return self.stepper.advance(state, n)

    def check(self, state, done: int) -> Problem | None:
        message = self.stepper.overflow(state)
        if message is None:
            return None
        return Problem(
            "overflow",
            f"neighbour-search overflow by step {done}: {message}",
            BodyOverflowError,
        )

    def record(self, first: int, n: int, state, report) -> None:
        block = energy_rows(first + 1, self.dt, report)
        sampled = getattr(report, "sampled", None)
        if sampled is not None:  # bodies.diagnostics_every: only the steps that were sampled
            block = block[np.broadcast_to(np.asarray(sampled, bool), block.shape[:1])]
        self.rows.append(block)
        if self.energy_log is not None:
            self.energy_log.append(block)
        self._check_grid(first + n, state)

    def _check_grid(self, step: int, state) -> None:
        """Bodies outside the cell grid are clamped into its edge cells, not lost: say so once."""
        if self.left_grid:
            return
        position = np.asarray(self.stepper.snapshot(state)[0].position)
        outside = bodies_outside(self.setup.grid, position)
        if outside.size:
            self.left_grid.update(step=step, bodies=outside[:10].tolist(), count=int(outside.size))
            log.warning(
                "%d body(ies) left the cell grid by step %d (first %s); they are clamped into its "
                "edge cells",
                outside.size,
                step,
                outside[:10].tolist(),
            )

    # ------------------------------------------------------------------ the end

    def conclude(self, status: str, done: int, state, timing: dict) -> dict:
        if status == "overflow" and (not self.frame_steps or self.frame_steps[-1] != done):
            self.write(done, state)
        setup, case = self.setup, self.case
        table = np.concatenate(self.rows)
        first, last = table[0], table[-1]
        total_first = first[4]
        drift = (last[4] - total_first) / abs(total_first) if total_first != 0 else math.nan
        series = {
            "time": table[:, 1],
            "kinetic": table[:, 2],
            "potential": table[:, 3],
            "momentum": table[:, 5:8],
            "angular_momentum": table[:, 8:11],
            "contacts": table[:, 11],
            "elastic": table[:, 12],
            "orientation": np.array(self.frames["orientation"]),
            "velocity": np.array(self.frames["velocity"]),
        }
        diag = case.diagnose(np.array(self.times), np.array(self.frames["position"]), series)
        if self._last is not None:
            self.final_fields = {
                k: self._last[k]
                for k in ("position", "orientation", "velocity", "angular_velocity")
            }
        mesh = self.config.bodies.mesh
        return {
            "kind": "bodies",
            "dt_s": self.dt,
            "stable_dt_s": case.stable_dt,
            "body_steps_per_s": timing["rate"] if timing["run"] > 0 else None,
            "bodies": setup.n_bodies,
            "planes": setup.n_planes,
            "contact_model": setup.contact_model,
            "precision": self.config.bodies.precision,
            "kernel": self.config.bodies.kernel,
            "energy": {
                "kinetic_first_J": first[2],
                "potential_first_J": first[3],
                "total_first_J": total_first,
                "kinetic_last_J": last[2],
                "potential_last_J": last[3],
                "total_last_J": last[4],
                "relative_drift": drift,
            },
            "momentum": {"first_kg_m_s": first[5:8], "last_kg_m_s": last[5:8]},
            "angular_momentum": {"first_kg_m2_s": first[8:11], "last_kg_m2_s": last[8:11]},
            "diagnostics": diag,
            "info": case.info,
            "left_grid": self.left_grid or None,
            "pair_table": pair_table_summary(
                setup, self.stepper.rebuilds if self.stepper.spatial else int(state.rebuilds), done
            ),
            "decomposition": (
                {"mesh": list(mesh), **self.stepper.traffic} if mesh is not None else None
            ),
        }

    def summary_lines(self, summary: dict) -> list[str]:
        return summary_lines(summary)


def pair_table_summary(setup, rebuilds: int | None, steps: int) -> dict:
    """run.json's account of the Verlet pair table: its skin, the distance a sphere may move
    before a rebuild, and the rebuilds over the run (a decomposed scene: the steps at which some
    subdomain rebuilt its own table, each chunk's first step included; None: not counted) and
    which table: "all" pairs of a small scene, built once, or the Verlet list from the "cells"."""
    return {
        "neighbor_list": "all" if setup.all_pairs and rebuilds is not None else "cells",
        "skin_m": setup.skin,
        "rebuild_distance_m": setup.rebuild_distance,
        "rebuilds": rebuilds,
        "body_steps": steps,
    }


def summary_lines(summary: dict) -> list[str]:
    """The short end-of-run summary of a body case."""
    energy = summary["energy"]
    lines = [
        f"case {summary['case']}: {summary['bodies']} sphere(s), {summary['planes']} plane(s), "
        f"{summary['contact_model']} contact, dt = {summary['dt_s']:.4g} s",
        f"steps = {summary['steps']}   simulated time = {summary['time_s']:.4g} s   "
        f"wall time = {summary['wall_time_s']:.1f} s",
        f"energy: total {energy['total_first_J']:.6g} J -> {energy['total_last_J']:.6g} J "
        f"(relative drift {energy['relative_drift']:.3g})"
        if energy["relative_drift"] is not None
        else f"energy: total {energy['total_first_J']:.6g} J -> {energy['total_last_J']:.6g} J",
    ]
    diag = summary.get("diagnostics") or {}
    parts = [
        f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
        for k, v in diag.items()
        if isinstance(v, (int, float, bool)) and v is not None
    ]
    if parts:
        lines.append("   ".join(parts))
    for name, path in summary.get("outputs", {}).items():
        lines.append(f"{name:>12}: {path}")
    return lines
