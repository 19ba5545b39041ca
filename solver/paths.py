"""Paths given in a config, resolved where the user meant them."""

from __future__ import annotations

from pathlib import Path


def original_path(path: str) -> Path:
    """An absolute path; a relative one is taken from the directory the app was started in
    (Hydra's original working directory, which differs from the cwd with hydra.job.chdir=true)."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    base = Path.cwd()
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.utils import get_original_cwd

        if HydraConfig.initialized():
            base = Path(get_original_cwd())
    except ImportError:  # plain-data use without Hydra installed
        pass
    return base / p
