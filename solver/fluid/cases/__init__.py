"""Cases: each turns a typed physical config into a lattice-unit problem (``Case``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from solver.fluid.cases import cavity, channel, cylinder, duct, geometry, taylor_green
from solver.fluid.cases.base import Case, RunData
from solver.fluid.memory import check_fits

if TYPE_CHECKING:
    from solver.config import RunConfig
    from solver.distributed.runtime import Runtime

BUILDERS: dict[str, Callable[[RunConfig], Case]] = {
    "cylinder": cylinder.build,
    "taylor_green": taylor_green.build,
    "poiseuille": channel.build_poiseuille,
    "couette": channel.build_couette,
    "cavity": cavity.build,
    "duct": duct.build,
    "geometry": geometry.build,
}

# The grid each builder makes, from the config alone (no arrays): for the memory check.
GRID_SHAPES: dict[str, Callable[[RunConfig], tuple[int, ...]]] = {
    "cylinder": cylinder.grid_shape,
    "taylor_green": taylor_green.grid_shape,
    "poiseuille": channel.grid_shape,
    "couette": channel.grid_shape,
    "cavity": cavity.grid_shape,
    "duct": duct.grid_shape,
    "geometry": geometry.grid_shape,
}


def build_case(config: RunConfig, runtime: Runtime | None = None) -> Case:
    """Build the configured case; raises ConfigError for values the physics rejects and for a
    grid whose arrays cannot fit in the memory available (checked before any is allocated,
    for one of the ``runtime``'s processes: with several, each builds only its blocks)."""
    if runtime is None:
        check_fits(config, GRID_SHAPES[config.case.name])
    else:
        processes, devices = runtime.process_count, runtime.device_count()
        check_fits(config, GRID_SHAPES[config.case.name], processes=processes, devices=devices)
    return BUILDERS[config.case.name](config)


__all__ = ["BUILDERS", "GRID_SHAPES", "Case", "RunData", "build_case"]
