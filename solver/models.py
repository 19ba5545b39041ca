"""Which model runs a validated config (the run loop's registry of physics)."""

from __future__ import annotations

from pathlib import Path

from solver.distributed.runtime import Runtime
from solver.errors import ConfigError
from solver.model import Model


def build_model(config, runtime: Runtime, output_dir: Path, unbounded: bool = False) -> Model:
    """The model of a validated config: a fluid case, a rigid-body scene (one device or split
    over ``bodies.mesh``), a rigid-body ensemble, or bodies moving in the fluid (coupled)."""
    from solver.coupling.config import has_bodies_in_fluid

    kind = getattr(config.case, "kind", "fluid")
    if has_bodies_in_fluid(config):
        from solver.coupling.model import CoupledModel

        return CoupledModel(config, runtime, output_dir, unbounded=unbounded)
    if kind == "bodies":
        if config.bodies.ensemble.enabled:
            from solver.bodies.ensemble import EnsembleModel

            if unbounded:  # its outputs are preallocated for a known number of steps
                raise ConfigError("bodies.ensemble.enabled", True, "false for a service run")

            return EnsembleModel(config, runtime, output_dir)
        from solver.bodies.model import BodyModel

        return BodyModel(config, runtime, output_dir, unbounded=unbounded)
    from solver.fluid.model import FluidModel

    return FluidModel(config, runtime, output_dir, unbounded=unbounded)
