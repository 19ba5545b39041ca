"""Public run API for scripts, tests and the validation suite.

    from solver.api import run
    result = run(["case=poiseuille", "case.resolution=16"], output_dir="/tmp/x")

Overrides are Hydra override strings exactly as on the command line. The call composes the
config with Hydra's compose API (so it can be made many times in one process), validates it and
runs it in this process through the same run loop; it writes the same files as
``python -m solver`` into ``output_dir``. Fluid cases, rigid-body cases (one scene, an ensemble,
a scene split over ``bodies.mesh``) and twins all run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from solver.app import CONFIG_DIR, enable_precision, run_precision
from solver.config import RunConfig, load
from solver.errors import BodyOverflowError, DivergenceError, PreemptedError
from solver.run import simulate

__all__ = [
    "BodyOverflowError",
    "DivergenceError",
    "PreemptedError",
    "RunResult",
    "compose_config",
    "run",
]


@dataclass
class RunResult:
    """The result of one run.

    Attributes:
        summary: the contents of run.json.
        output_dir: where the output files are.
        grid: fluid: dx (m), dt (s), shape, origin (m); node i sits at origin + (i + 0.5) dx.
            Rigid bodies: dt (s) only.
        case: the built case (fluid: lattice-unit setup, unit converter, analytic solution if
            any; bodies: the scene, set-up and diagnostics).
        config: the validated typed config.
    """

    summary: dict
    output_dir: Path
    grid: dict
    case: Any
    config: RunConfig
    _fields: dict = field(repr=False)

    def fields(self) -> dict[str, np.ndarray]:
        """Final state in SI units. Fluid: density (*shape) kg/m^3, velocity (d, *shape) m/s,
        solid (*shape) bool; axis order (x, y[, z]). Rigid bodies: position (n, 3) m,
        orientation (n, 4) unit quaternions (w, x, y, z), velocity (n, 3) m/s,
        angular_velocity (n, 3) rad/s (an ensemble: a leading member axis)."""
        if getattr(self.config.case, "kind", "fluid") == "bodies":
            return dict(self._fields)
        setup = self.case.setup
        solid = np.zeros(setup.shape, dtype=bool) if setup.solid is None else setup.solid.copy()
        return {**self._fields, "solid": solid}


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Compose and validate the config for ``overrides`` (raises ConfigError or Hydra errors)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()
    return load(cfg)


def run(
    overrides: list[str] | tuple[str, ...] = (),
    output_dir: str | Path = "solver_output",
    interactive: bool = False,
) -> RunResult:
    """Run the solver with Hydra overrides and return the result.

    Unlike the command line, a call writes no checkpoints and resumes nothing unless an
    override asks for it (``checkpoint=default``, ``checkpoint.enabled=true``, ...): a script
    that runs the same case twice into one folder wants two fresh runs.

    Raises:
        solver.errors.ConfigError: a bad value (before anything is traced).
        hydra.errors.HydraException (or omegaconf errors): an override that does not compose.
        DivergenceError: the run diverged; run.json (status "diverged") and the output
            written so far are in output_dir.
        BodyOverflowError: a rigid-body buffer overflowed (run.json status "overflow").
        PreemptedError: stopped by a signal (run.json status "preempted" or "stopped").
    """
    if not any(o.lstrip("+~").startswith("checkpoint") for o in overrides):
        overrides = ["checkpoint=none", *overrides]
    config = compose_config(overrides)
    enable_precision(run_precision(config))
    if config.twin is not None:
        from solver.twin.run import run_twin

        outcome = run_twin(config, Path(output_dir), interactive=interactive)
    else:
        outcome = simulate(config, Path(output_dir), interactive=interactive)
    case = outcome.case
    if getattr(config.case, "kind", "fluid") == "bodies":
        grid = {"dt": outcome.summary["dt_s"]}
    else:
        grid = {
            "dx": case.units.dx,
            "dt": case.units.dt,
            "shape": tuple(case.setup.shape),
            "origin": tuple(case.origin),
        }
    return RunResult(
        summary=outcome.summary,
        output_dir=outcome.output_dir,
        grid=grid,
        case=case,
        config=config,
        _fields=outcome.fields or {},
    )
