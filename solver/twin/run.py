"""A digital-twin run: the fluid run loop with the twin between chunks.

Replay with ``compare_free_run``: first a free run (same case, no assimilation, into
``<run dir>/free_run``, no checkpoints) measures the error at the held-out probes, then the
assimilated run (the run directory itself) does the same with assimilation on. Its run.json
``twin`` section holds both (``free_rms``, ``assimilated_rms``, ``error_reduction``), and
``twin_probes.png`` plots the held-out readings against both runs.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from solver.checkpoint.config import CheckpointConfig
from solver.errors import ConfigError
from solver.run import Outcome, simulate
from solver.twin.session import TwinHook

if TYPE_CHECKING:
    from solver.config import RunConfig

log = logging.getLogger("solver.twin")


def run_twin(config: RunConfig, output_dir: Path, interactive: bool | None = None) -> Outcome:
    """Run a case with ``config.twin``; returns the assimilated run's outcome.

    A rigid-body case, and bodies in the fluid, run with the body twin as their chunk hook
    (kinematic bodies follow their ``body_pose`` sensors); a fluid case assimilates (nudging,
    inflow, EnKF) as below.
    """
    twin = config.twin
    output_dir = Path(output_dir)
    from solver.coupling.config import has_bodies_in_fluid

    if has_bodies_in_fluid(config):  # kinematic bodies in the fluid follow their pose sensors
        from solver.twin.bodies import BodyTwinHook

        return simulate(config, output_dir, interactive, hook=BodyTwinHook(twin))
    if getattr(config.case, "kind", "fluid") == "bodies":
        from solver.twin.bodies import BodyTwinHook

        if config.bodies.mesh is not None:
            raise ConfigError("twin.mode", twin.mode, "none with bodies.mesh (not yet)")
        if config.bodies.precision != "float64":
            raise ConfigError("bodies.precision", config.bodies.precision,
                              "float64 with a twin (not yet)")  # fmt: skip
        return simulate(config, output_dir, interactive, hook=BodyTwinHook(twin))
    extra: dict = {}
    free_hook = None
    if twin.mode == "replay" and twin.compare_free_run:
        log.info(
            "twin: free run (no assimilation) for comparison, into %s", output_dir / "free_run"
        )
        free_hook = TwinHook(twin, assimilate=False)
        free_config = dataclasses.replace(config, checkpoint=CheckpointConfig.disabled())
        simulate(free_config, output_dir / "free_run", interactive, hook=free_hook)
        extra = {"free_rms": free_hook.held_out_rms(), "free_run": str(output_dir / "free_run")}
    if twin.enkf.enabled:
        from solver.twin.ensemble import run_ensemble

        return run_ensemble(config, output_dir, extra)
    tunables = {
        "resolution": getattr(config.case, "resolution", None),
        "u_lattice": config.fluid.u_lattice,
    }
    hook = TwinHook(twin, assimilate=True, extra_summary=extra, tunables=tunables)
    outcome = simulate(config, output_dir, interactive, hook=hook)
    if hook.held_out and outcome.density is not None:
        path = plot_held_out(output_dir / "twin_probes.png", hook, free_hook)
        outcome.summary.setdefault("outputs", {})["twin_png"] = str(path)
        from solver.output.summary import write_run_json

        outcome.summary = write_run_json(output_dir / "run.json", outcome.summary)
    return outcome


def plot_held_out(path: Path, hook: TwinHook, free: TwinHook | None) -> Path:
    """Streamwise velocity at each held-out probe: readings, free run, assimilated run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sensors = sorted({sid for sid, *_ in hook.held_out})
    fig, axes = plt.subplots(len(sensors), 1, figsize=(8, 2.2 * len(sensors)), sharex=True,
                             squeeze=False)  # fmt: skip
    for ax, sid in zip(axes[:, 0], sensors, strict=True):
        rows = [(t, obs[0], model[0]) for s, t, obs, model in hook.held_out if s == sid]
        t, obs, model = (np.array(c) for c in zip(*rows, strict=True))
        ax.plot(t, obs, ".", ms=2, color="0.4", label="reading (truth + noise)")
        if free is not None:
            free_rows = [(ft, fm[0]) for s, ft, _, fm in free.held_out if s == sid]
            if free_rows:
                ft, fm = (np.array(c) for c in zip(*free_rows, strict=True))
                ax.plot(ft, fm, "-", lw=1, color="tab:red", label="free run")
        ax.plot(t, model, "-", lw=1, color="tab:blue", label="assimilated")
        ax.set_ylabel(f"{sid}\nu_x (m/s)")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("t (s)")
    fig.suptitle("held-out probes (never assimilated)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary_lines(summary: dict) -> list[str]:
    """The twin's lines of the end-of-run summary."""
    twin = summary.get("twin") or {}
    if not twin:
        return []
    lines = [
        f"twin ({twin['mode']}): {twin['messages']} messages, {twin['accepted']} readings "
        f"accepted, {twin['rejected']} rejected"
        + (f" {twin['rejected_by_reason']}" if twin["rejected"] else "")
        + f", {twin['duplicates']} duplicate(s); quarantine: {twin['quarantine']}"
    ]
    free, assimilated = twin.get("free_rms"), twin.get("assimilated_rms")
    if assimilated is not None:
        text = f"held-out probe RMS error: assimilated {assimilated:.4g} m/s"
        if free is not None:
            text += f", free run {free:.4g} m/s ({free / assimilated:.2f}x lower)"
        lines.append(text)
    return lines
