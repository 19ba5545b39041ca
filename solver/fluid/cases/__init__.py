"""Cases: each turns a typed physical config into a lattice-unit problem (``Case``)."""

from __future__ import annotations

from collections.abc import Callable

from solver.config import RunConfig
from solver.fluid.cases import cavity, channel, cylinder, duct, taylor_green
from solver.fluid.cases.base import Case, RunData

BUILDERS: dict[str, Callable[[RunConfig], Case]] = {
    "cylinder": cylinder.build,
    "taylor_green": taylor_green.build,
    "poiseuille": channel.build_poiseuille,
    "couette": channel.build_couette,
    "cavity": cavity.build,
    "duct": duct.build,
}


def build_case(config: RunConfig) -> Case:
    """Build the configured case; raises ConfigError for values the physics rejects."""
    return BUILDERS[config.case.name](config)


__all__ = ["BUILDERS", "Case", "RunData", "build_case"]
