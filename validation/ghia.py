"""Centre-line tables of Ghia, Ghia & Shin (1982) for the lid-driven cavity.

U. Ghia, K. N. Ghia, C. T. Shin (1982), J. Comput. Phys. 48, 387-411, Tables I and II, stored
in ``data/ghia1982_re{re}.csv`` (see ``data/README.md``). Coordinates and velocities are
dimensionless: lengths over the cavity side, velocities over the lid speed, lid at y = 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
AVAILABLE_RE = (100, 1000)


@dataclass(frozen=True)
class GhiaTable:
    """One Reynolds number's centre lines, each sorted by increasing coordinate.

    Attributes:
        re: Reynolds number U L / nu.
        y: (17,) heights on the vertical centre line x = 0.5.
        u: (17,) u / U at (0.5, y).
        x: (17,) abscissae on the horizontal centre line y = 0.5.
        v: (17,) v / U at (x, 0.5).
    """

    re: int
    y: np.ndarray
    u: np.ndarray
    x: np.ndarray
    v: np.ndarray


def load_ghia(re: int) -> GhiaTable:
    """Load the Ghia et al. (1982) centre lines for Reynolds number ``re`` (100 or 1000)."""
    if re not in AVAILABLE_RE:
        raise ValueError(f"no Ghia table for Re={re}; available: {AVAILABLE_RE}")
    table = np.loadtxt(DATA_DIR / f"ghia1982_re{re}.csv", delimiter=",", skiprows=1)
    if table.shape != (17, 4):
        raise ValueError(f"ghia1982_re{re}.csv has shape {table.shape}, expected (17, 4)")
    iy, ix = np.argsort(table[:, 0]), np.argsort(table[:, 2])
    return GhiaTable(re=re, y=table[iy, 0], u=table[iy, 1], x=table[ix, 2], v=table[ix, 3])
