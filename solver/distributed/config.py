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
    overlap: bool | str = "auto"  # True | False | "auto" (on where collectives are async: GPUs)


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
    overlap = s.data.get("overlap", "auto")
    if not (isinstance(overlap, bool) or overlap == "auto"):
        raise ConfigError(s.key("overlap"), overlap, "true, false or auto")
    return DomainConfig(mesh=mesh, halo=s.choice("halo", HALOS), overlap=overlap)


def overlap_halos(setting: bool | str) -> bool:
    """``domain.overlap`` resolved: ``auto`` is on where XLA runs collectives asynchronously
    beside compute (GPUs), off on CPUs, where it would only collide the boundary planes twice
    (docs/performance.md, "Halo overlap")."""
    if setting == "auto":
        import jax

        return jax.default_backend() == "gpu"
    return bool(setting)
