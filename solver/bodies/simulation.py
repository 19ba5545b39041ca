"""The run loop of the rigid-body cases: compiled chunks, output and checks between chunks.

The state advances in chunks of at most ``chunk`` steps (``solver.bodies.step.make_body_chunk``,
jitted with the step count static), cut so that every output step is a chunk end. Between chunks
the host appends the per-step energies to energies.csv, writes bodies.h5 at output steps, reports
progress and checks the neighbour-search buffers: an overflow stops the run with run.json status
"overflow" and ``BodyOverflowError`` (the app's exit code 4). Bodies run in float64 (the app
switches JAX's x64 mode on); checkpoints are not written for body cases yet. Bodies found outside
the cell grid between chunks are logged once and listed in run.json's "left_grid" (the neighbour
search clamps them into its edge cells). With ``bodies.ensemble.size > 1`` (or a sweep) the run is
an ensemble instead (solver.bodies.ensemble, docs/ensembles.md).

Files (see docs/output.md):
    bodies.h5      radius and mass at the root; one group ``step_<8 digits>`` per output step with
                   position (n, 3), orientation (n, 4), velocity (n, 3), angular_velocity (n, 3),
                   contact_count (n,); SI units in each dataset's ``units`` attribute.
    bodies.xdmf    a temporal collection of Polyvertex grids over bodies.h5 (ParaView: points with
                   radius, velocity, angular velocity and contact count).
    energies.csv   one row per step: step, time_s, kinetic_J, potential_J, total_J,
                   momentum_{x,y,z}, angular_momentum_{x,y,z} (about the origin), contacts.
    run.json       status, steps, time, wall time, energies first/last and relative drift, momentum,
                   angular momentum, the case diagnostics, outputs.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from kernels import rigid_body
from solver.bodies.cases import BodyCase, build_body_case
from solver.bodies.scene_case import bodies_outside
from solver.bodies.step import (
    BodyDiagnostics,
)
from solver.bodies.steppers import SingleStepper, SpatialStepper
from solver.config import RunConfig
from solver.errors import ConfigError
from solver.output.progress import Progress
from solver.output.summary import write_run_json

log = logging.getLogger("solver")

OUTPUTS_PER_RUN = 50  # bodies.h5 outputs when the case's output_every is null
ENERGY_COLUMNS = (
    "step",
    "time_s",
    "kinetic_J",
    "potential_J",
    "total_J",
    "momentum_x",
    "momentum_y",
    "momentum_z",
    "angular_momentum_x",
    "angular_momentum_y",
    "angular_momentum_z",
    "contacts",
    "elastic_J",
)


class BodyOverflowError(RuntimeError):
    """A neighbour-search buffer overflowed; ``summary`` is what run.json holds."""

    def __init__(self, message: str, summary: dict, output_dir: Path) -> None:
        super().__init__(message)
        self.summary = summary
        self.output_dir = output_dir


@dataclass
class BodyOutcome:
    """What a finished body run hands back: the case, run.json's contents, the output folder."""

    case: BodyCase
    summary: dict
    output_dir: Path


def output_steps(total: int, every: int | None, chunk: int) -> list[int]:
    """Steps at which bodies.h5 is written: 0, every, 2 every, ... and the last step.

    every = None: about OUTPUTS_PER_RUN outputs, rounded up to whole chunks when longer than one
    (so the chunks keep one length and compile once).
    """
    if every is None:
        every = max(1, math.ceil(total / OUTPUTS_PER_RUN))
        if every > chunk:
            every = math.ceil(every / chunk) * chunk
    steps = list(range(0, total, every))
    if steps[-1] != total:
        steps.append(total)
    return steps


class BodyWriter:
    """Writes bodies.h5 (one group per output step) and keeps bodies.xdmf in step with it."""

    def __init__(self, output_dir: Path, radius: np.ndarray, mass: np.ndarray, attrs: dict):
        import h5py

        self.h5_path = Path(output_dir) / "bodies.h5"
        self.xdmf_path = Path(output_dir) / "bodies.xdmf"
        self.n = int(radius.size)
        self.frames: list[tuple[str, float]] = []
        with h5py.File(self.h5_path, "w") as f:
            f.attrs.update(attrs)
            f.attrs["length_unit"] = "m"
            f.attrs["time_unit"] = "s"
            f.create_dataset("radius", data=radius).attrs["units"] = "m"
            f.create_dataset("mass", data=mass).attrs["units"] = "kg"

    def write(self, step: int, time_s: float, fields: dict[str, np.ndarray]) -> None:
        """Append one output step; fields: position, orientation, velocity, angular_velocity,
        contact_count (host arrays)."""
        import h5py

        units = {
            "position": "m",
            "orientation": "1 (unit quaternion w, x, y, z)",
            "velocity": "m/s",
            "angular_velocity": "rad/s",
            "contact_count": "1",
        }
        name = f"step_{step:08d}"
        with h5py.File(self.h5_path, "a") as f:
            group = f.create_group(name)
            group.attrs["step"] = step
            group.attrs["time_s"] = time_s
            for key, unit in units.items():
                group.create_dataset(key, data=fields[key]).attrs["units"] = unit
        self.frames.append((name, time_s))
        self._write_xdmf()

    def _write_xdmf(self) -> None:
        h5, n = self.h5_path.name, self.n

        def item(path: str, dims: str, number: str = "Float", precision: int = 8) -> str:
            return (
                f'<DataItem Dimensions="{dims}" NumberType="{number}" Precision="{precision}" '
                f'Format="HDF">{h5}:{path}</DataItem>'
            )

        grids = []
        for name, t in self.frames:
            grids.append(
                f'   <Grid Name="{name}" GridType="Uniform">\n'
                f'    <Time Value="{t:.12g}"/>\n'
                f'    <Topology TopologyType="Polyvertex" NumberOfElements="{n}" '
                f'NodesPerElement="1"/>\n'
                f'    <Geometry GeometryType="XYZ">{item(f"/{name}/position", f"{n} 3")}'
                f"</Geometry>\n"
                f'    <Attribute Name="radius" AttributeType="Scalar" Center="Node">'
                f"{item('/radius', str(n))}</Attribute>\n"
                f'    <Attribute Name="velocity" AttributeType="Vector" Center="Node">'
                f"{item(f'/{name}/velocity', f'{n} 3')}</Attribute>\n"
                f'    <Attribute Name="angular_velocity" AttributeType="Vector" Center="Node">'
                f"{item(f'/{name}/angular_velocity', f'{n} 3')}</Attribute>\n"
                f'    <Attribute Name="contact_count" AttributeType="Scalar" Center="Node">'
                f"{item(f'/{name}/contact_count', str(n), 'Int', 4)}</Attribute>\n"
                f"   </Grid>"
            )
        text = (
            '<?xml version="1.0" ?>\n<Xdmf Version="3.0">\n <Domain>\n'
            '  <Grid Name="bodies" GridType="Collection" CollectionType="Temporal">\n'
            + "\n".join(grids)
            + "\n  </Grid>\n </Domain>\n</Xdmf>\n"
        )
        tmp = self.xdmf_path.with_suffix(".xdmf.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.xdmf_path)


def _energy_rows(first_step: int, dt: float, diag: BodyDiagnostics) -> np.ndarray:
    """(S, 13) rows of energies.csv for S consecutive steps starting at first_step."""
    kinetic = np.atleast_1d(np.asarray(diag.kinetic_energy, dtype=np.float64))
    potential = np.atleast_1d(np.asarray(diag.potential_energy, dtype=np.float64))
    steps = first_step + np.arange(kinetic.size)
    return np.column_stack(
        [
            steps,
            steps * dt,
            kinetic,
            potential,
            kinetic + potential,
            np.asarray(diag.momentum, dtype=np.float64).reshape(-1, 3),
            np.asarray(diag.angular_momentum, dtype=np.float64).reshape(-1, 3),
            np.atleast_1d(np.asarray(diag.contacts, dtype=np.float64)),
            # the decomposed step does not sum the spring energy (0 there)
            np.broadcast_to(
                np.asarray(getattr(diag, "elastic_energy", 0.0), dtype=np.float64), kinetic.shape
            ),
        ]
    )


def simulate_bodies(
    config: RunConfig, output_dir: Path, interactive: bool | None = None
) -> BodyOutcome:
    """Run a validated rigid-body config; write bodies.h5/xdmf, energies.csv and run.json.

    Raises:
        ConfigError: from building the case (before anything is traced or written).
        BodyOverflowError: a neighbour-search buffer overflowed, after writing run.json.
    """
    if config.bodies.ensemble.enabled:
        from solver.bodies.ensemble import simulate_ensemble

        return simulate_ensemble(config, output_dir, interactive)
    t_start = time.perf_counter()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    case = build_body_case(config)
    setup = case.setup
    dt = setup.dt
    total = config.steps if config.steps is not None else case.default_steps
    outputs_at = output_steps(total, case.output_every, config.chunk)
    log.info(
        "%s: %d body(ies) of %d sphere(s), %d plane(s), %s contact, dt = %.4g s%s, %d steps",
        case.name,
        setup.n_bodies,
        setup.n_spheres,
        setup.n_planes,
        setup.contact_model,
        dt,
        "" if case.stable_dt is None else f" (stable step {case.stable_dt:.4g} s)",
        total,
    )

    if config.bodies.mesh is not None:
        stepper = SpatialStepper(setup, case.bodies, config.bodies.mesh,
                                 dict(config.bodies.capacities))  # fmt: skip
        log.info("%s: split over a %s mesh of subdomains", case.name,
                 "x".join(map(str, config.bodies.mesh)))  # fmt: skip
    else:
        stepper = SingleStepper(setup, case.bodies)
    omega_fn = jax.jit(rigid_body.angular_velocity)
    twin = None
    if config.twin is not None:
        from solver.twin.bodies import BodyTwin

        if config.bodies.mesh is not None:
            raise ConfigError("twin.mode", config.twin.mode, "none with bodies.mesh (not yet)")
        given, _ = case.scene.arrays()
        twin = BodyTwin(config.twin, np.asarray(case.bodies.kinematic), given.orientation,
                        np.asarray(case.bodies.orientation), dt, output_dir)  # fmt: skip

    writer = BodyWriter(
        output_dir,
        setup.bounding_radius,
        case.mass,
        {"case": case.name, "dt_s": dt, "contact_model": setup.contact_model},
    )
    energies_path = output_dir / "energies.csv"
    energies_path.write_text(",".join(ENERGY_COLUMNS) + "\n")
    rows = [_energy_rows(0, dt, stepper.initial)]
    times, positions, orientations, velocities = [], [], [], []

    def append_energies(block: np.ndarray) -> None:
        with energies_path.open("a") as f:
            for row in block:
                f.write(f"{int(row[0])},{row[1]:.12g},")
                f.write(",".join(f"{v:.12g}" for v in row[2:11]))
                f.write(f",{int(row[11])},{row[12]:.12g}\n")

    def write_output(step: int) -> None:
        bodies, contact_count = stepper.snapshot()
        fields = {
            "position": np.asarray(bodies.position),
            "orientation": np.asarray(bodies.orientation),
            "velocity": np.asarray(bodies.velocity),
            "angular_velocity": np.asarray(omega_fn(bodies)),
            "contact_count": np.asarray(contact_count),
        }
        writer.write(step, step * dt, fields)
        times.append(step * dt)
        positions.append(fields["position"])
        orientations.append(fields["orientation"])
        velocities.append(fields["velocity"])

    append_energies(rows[0])
    write_output(0)
    outputs = {
        "bodies_h5": str(writer.h5_path),
        "bodies_xdmf": str(writer.xdmf_path),
        "energies_csv": str(energies_path),
        "run_json": str(output_dir / "run.json"),
    }
    timing = {"compile_s": 0.0, "run_s": 0.0}
    left_grid: dict = {}

    def check_grid(step: int) -> None:
        """Bodies outside the cell grid are clamped into its edge cells, not lost: say so once."""
        if left_grid:
            return
        outside = bodies_outside(setup.grid, np.asarray(stepper.snapshot()[0].position))
        if outside.size:
            left_grid.update(step=step, bodies=outside[:10].tolist(), count=int(outside.size))
            log.warning(
                "%d body(ies) left the cell grid by step %d (first %s); they are clamped into its "
                "edge cells",
                outside.size,
                step,
                outside[:10].tolist(),
            )

    def summary(status: str, done: int) -> dict:
        table = np.concatenate(rows)
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
            "orientation": np.array(orientations),
            "velocity": np.array(velocities),
        }
        diag = case.diagnose(np.array(times), np.array(positions), series)
        run_s = timing["run_s"]
        return {
            "status": status,
            "case": case.name,
            "kind": "bodies",
            "steps": done,
            "time_s": done * dt,
            "dt_s": dt,
            "stable_dt_s": case.stable_dt,
            "wall_time_s": time.perf_counter() - t_start,
            "compile_time_s": timing["compile_s"],
            "body_steps_per_s": setup.n_bodies * done / run_s if run_s > 0 else None,
            "bodies": setup.n_bodies,
            "planes": setup.n_planes,
            "contact_model": setup.contact_model,
            "precision": "float64",
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
            "left_grid": left_grid or None,
            "decomposition": (
                {"mesh": list(config.bodies.mesh), **stepper.traffic}
                if config.bodies.mesh is not None
                else None
            ),
            "outputs": outputs,
            "config": config.resolved,
        } | ({"twin": twin.summary()} if twin is not None else {})

    done = 0
    pending = [s for s in outputs_at if s > 0]
    with Progress(
        total, dt, setup.n_bodies, interactive, config.output.log_interval, label=case.name
    ) as progress:
        while done < total:
            n = min(config.chunk, pending[0] - done)
            if twin is not None:
                n = min(n, twin.steps_until(done) or n)
            t0 = time.perf_counter()
            diag = stepper.advance(n)
            if twin is not None:
                moved = twin.after_chunk(done + n, stepper.snapshot()[0])
                if moved is not None:
                    stepper.set_bodies(moved)
            elapsed = time.perf_counter() - t0
            # the first call of each chunk length compiles; count it apart from the run time
            timing["run_s" if done else "compile_s"] += elapsed
            done += n
            block = _energy_rows(done - n + 1, dt, diag)
            rows.append(block)
            append_energies(block)
            check_grid(done)
            message = stepper.overflow()
            if message is not None:
                write_output(done)
                result = write_run_json(output_dir / "run.json", summary("overflow", done))
                raise BodyOverflowError(
                    f"neighbour-search overflow by step {done}: {message}", result, output_dir
                )
            if done == pending[0]:
                write_output(done)
                pending.pop(0)
            rate = setup.n_bodies * (done - n) / timing["run_s"] if timing["run_s"] else 0.0
            progress.update(done, rate / 1e6)
    if twin is not None:
        twin.close()
    result = write_run_json(output_dir / "run.json", summary("completed", done))
    return BodyOutcome(case=case, summary=result, output_dir=output_dir)


def summary_lines(summary: dict) -> list[str]:
    """The short end-of-run summary of a body case (or of an ensemble)."""
    if "ensemble" in summary:
        from solver.bodies.ensemble import summary_lines as ensemble_lines

        return ensemble_lines(summary)
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
