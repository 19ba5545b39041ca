"""What every validation case receives: the size mode and where to write."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from validation.runner import Simulation, simulate
from validation.stops import SuiteStops

T = TypeVar("T")
# fast runs are a few thousand steps: in one chunk they compile once, where chunks of the
# default length compile twice (the last, shorter chunk is another program)
FAST_CHUNK = 100_000


@dataclass(frozen=True)
class Context:
    """Attributes:
    fast: small grids and short runs (the test-suite variant).
    out: report directory; plots are written here.
    work: directory for the solver's own output, one sub-directory per run.
    stops: the suite's stop requests (None: not watched); no run starts after one.
    body_precision: ``bodies.precision`` of the rigid-body cases (float64 or float32).
    collision: run every fluid case with this ``fluid.collision`` in place of the one it
        names (None: as written); KBC, which has no D3Q19 set, moves D3Q19 runs to D3Q27.
        Runs and plots are then named with the operator (``validation.cases.operators``).
    storage: run every fluid case with this ``fluid.storage`` (None: as written); a case that
        asks for ``fluid.precision=float64`` then computes in float32 (16-bit storage needs
        float32 compute; float32 storage is float32 compute). Runs and plots are named with
        the storage (``validation.cases.storage``).
    kernel: run every fluid case with this ``fluid.kernel`` (None: as written); runs and plots
        are named with it (``validation.cases.kernels``).
    """

    fast: bool
    out: Path
    work: Path
    stops: SuiteStops | None = None
    body_precision: str = "float64"
    collision: str | None = None
    storage: str | None = None
    kernel: str | None = None

    def pick(self, full: T, fast: T) -> T:
        """The full-size or the fast value."""
        return fast if self.fast else full

    def simulate(self, case: str, label: str, overrides: list[str]) -> Simulation:
        """Run the solver for one configuration of ``case``; ``label`` names the run.

        Raises:
            SuiteStopped: a stop was requested (no run starts then).
        """
        if self.stops is not None:
            self.stops.check()
        if self.collision is not None:
            overrides = self._with_collision(overrides)
            label = f"{self.collision} {label}"
        if self.storage is not None:
            overrides = self._with_storage(overrides)
            label = f"{self.storage} {label}"
        if self.kernel is not None and any(i.startswith(("fluid=", "fluid.")) for i in overrides):
            overrides = [*(i for i in overrides if not i.startswith("fluid.kernel=")),
                         f"fluid.kernel={self.kernel}"]  # fmt: skip
            label = f"{self.kernel} {label}"
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")
        if self.fast:  # short runs: one chunk (one compilation), no progress lines needed
            overrides = [f"chunk={FAST_CHUNK}", *overrides]
        return simulate(overrides, self.work / case / slug, label)

    def _with_collision(self, overrides: list[str]) -> list[str]:
        out = []
        for item in overrides:
            if item.startswith("fluid.collision="):
                item = f"fluid.collision={self.collision}"
            elif item == "fluid=d3q19" and self.collision == "kbc":
                item = "fluid=d3q27"
            out.append(item)
        if not any(item.startswith("fluid.collision=") for item in out):
            out.append(f"fluid.collision={self.collision}")
        return out

    def _with_storage(self, overrides: list[str]) -> list[str]:
        """Fluid runs (those that name a ``fluid`` group or key) get ``fluid.storage`` and the
        compute precision it goes with: float64 for float64 storage, else float32."""
        if not any(item.startswith(("fluid=", "fluid.")) for item in overrides):
            return overrides
        precision = "float64" if self.storage == "float64" else "float32"
        out = [i for i in overrides if not i.startswith(("fluid.storage=", "fluid.precision="))]
        return [*out, f"fluid.precision={precision}", f"fluid.storage={self.storage}"]

    def plot_path(self, name: str) -> tuple[Path, str]:
        """Absolute path for a PNG and its path relative to the report directory."""
        self.out.mkdir(parents=True, exist_ok=True)
        if self.collision is not None:
            name = f"{name}_{self.collision}"
        if self.storage is not None:
            name = f"{name}_{self.storage}"
        if self.kernel is not None:
            name = f"{name}_{self.kernel}"
        return self.out / f"{name}.png", f"{name}.png"
