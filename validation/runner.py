"""One solver run through the public API, and the geometry helpers the cases share.

Everything here works on what ``solver.api.run`` returns (SI fields, the grid, the resolved
config), never on solver internals, so the validation checks the whole chain from config to
output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Simulation:
    """A finished run.

    Attributes:
        label: short name of this run inside its case (e.g. "N=64").
        summary: the run.json contents.
        velocity: (d, *shape) final velocity in m/s.
        density: (*shape) final density in kg/m^3.
        solid: (*shape) bool.
        dx, dt: cell size (m) and time step (s).
        origin: (d,) m; node i along axis a sits at origin[a] + (i + 0.5) dx.
        wall_time_s: seconds the whole call took (compilation and output included).
        workdir: the run's directory (run.json, forces.csv).
    """

    label: str
    summary: dict
    velocity: np.ndarray
    density: np.ndarray
    solid: np.ndarray
    dx: float
    dt: float
    origin: tuple[float, ...]
    wall_time_s: float
    workdir: Path | None = None

    @property
    def case_config(self) -> dict:
        return self.summary["config"]["case"]

    @property
    def steps(self) -> int:
        return int(self.summary["steps"])

    @property
    def time(self) -> float:
        """Simulated time at the final state, s."""
        return self.steps * self.dt

    @property
    def tau(self) -> float:
        return float(self.summary["tau"])

    def coordinates(self, axis: int) -> np.ndarray:
        """Node coordinates along ``axis`` in m."""
        n = self.velocity.shape[1 + axis]
        return self.origin[axis] + (np.arange(n) + 0.5) * self.dx

    def fluid_span(self, axis: int) -> tuple[slice, float, float]:
        """Fluid nodes along ``axis`` on a line through the middle of the box, and the walls.

        Half-way bounce-back puts each wall on the face between the last fluid node and the
        first solid one, so the walls follow from the solid mask alone.

        Returns:
            (index slice of the fluid nodes, lower wall position m, upper wall position m).
        """
        middle = [s // 2 for s in self.solid.shape]
        middle[axis] = slice(None)
        line = self.solid[tuple(middle)]
        fluid = np.flatnonzero(~line)
        lo, hi = int(fluid[0]), int(fluid[-1])
        if not np.all(~line[lo : hi + 1]):
            raise ValueError(f"fluid along axis {axis} is not one contiguous span")
        x0 = self.origin[axis]
        return slice(lo, hi + 1), x0 + lo * self.dx, x0 + (hi + 1) * self.dx

    def forces(self) -> dict[str, np.ndarray]:
        """The run's forces.csv as columns (step, time_s, cd, cl, ...), for cases with an
        obstacle."""
        table = np.genfromtxt(self.workdir / "forces.csv", delimiter=",", names=True)
        return {name: np.asarray(table[name]) for name in table.dtype.names}

    def note(self) -> str:
        """One Markdown list line describing the run."""
        s = self.summary
        shape = "x".join(str(n) for n in self.velocity.shape[1:])
        return (
            f"- {self.label}: grid {shape}, {s.get('lattice', '?')} {_collision(s)}, "
            f"{s.get('precision', '?')}, tau = {self.tau:.4f}, Mach = {float(s['mach']):.3f}, "
            f"{self.steps} steps, {self.wall_time_s:.1f} s, "
            f"{float(s.get('mlups', float('nan'))):.1f} MLUPS"
        )


def _collision(summary: dict) -> str:
    fluid = summary.get("config", {}).get("fluid", {})
    name = str(fluid.get("collision", "?")).upper()
    if name == "TRT":
        return f"TRT (Lambda = {float(fluid.get('trt_magic', 0.1875)):.4g})"
    return name


def simulate(overrides: list[str], workdir: Path, label: str) -> Simulation:
    """Run the solver with Hydra ``overrides``, writing its output under ``workdir``.

    No field files or PNG are written (``output=none``): the final fields come back in memory
    and only they are compared; run.json is still written.
    """
    from solver.api import run  # imported late: ``python -m validation --list`` needs no JAX

    workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = run([*overrides, "output=none"], output_dir=workdir)
    fields = result.fields()
    elapsed = time.perf_counter() - start
    grid = result.grid
    return Simulation(
        label=label,
        summary=result.summary,
        velocity=np.asarray(fields["velocity"], dtype=float),
        density=np.asarray(fields["density"], dtype=float),
        solid=np.asarray(fields["solid"], dtype=bool),
        dx=float(grid["dx"]),
        dt=float(grid["dt"]),
        origin=tuple(float(o) for o in grid["origin"]),
        wall_time_s=elapsed,
        workdir=workdir,
    )


def convergence_order(resolutions: list[int], errors: list[float]) -> float:
    """Least-squares slope p of log(error) = log(C) - p log(N)."""
    slope = np.polyfit(np.log(resolutions), np.log(errors), 1)[0]
    return float(-slope)


def relative_l2(measured: np.ndarray, reference: np.ndarray) -> float:
    """sqrt(sum |measured - reference|^2 / sum |reference|^2) over all entries."""
    return float(np.sqrt(np.sum((measured - reference) ** 2) / np.sum(reference**2)))
