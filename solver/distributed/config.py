"""Validates the ``domain`` section (device mesh and halo exchange of the decomposition)."""

from __future__ import annotations

from dataclasses import dataclass

from solver.distributed.decomposition import PRESETS
from solver.distributed.runtime import HALOS
from solver.errors import ConfigError
from solver.sections import Section


@dataclass(frozen=True)
class DomainConfig:
    mesh: str | tuple[int, ...]  # a preset name or shards per axis
    halo: str  # "xla" | "mpi"


def parse_domain(s: Section) -> DomainConfig:
    """The typed ``domain`` section."""
    mesh = s.raw("mesh")
    if isinstance(mesh, str):
        mesh = s.choice("mesh", PRESETS)
    elif isinstance(mesh, (list, tuple)) and 1 <= len(mesh) <= 3:
        if not all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in mesh):
            raise ConfigError(s.key("mesh"), list(mesh), "positive integers, one per axis")
        mesh = tuple(mesh)
    else:
        raise ConfigError(
            s.key("mesh"), mesh, f"one of {', '.join(PRESETS)} or a list of shards per axis"
        )
    return DomainConfig(mesh=mesh, halo=s.choice("halo", HALOS))
