"""run.json and the force history (forces.csv)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np


def _plain(value):
    """Make a value JSON-safe: NumPy scalars and arrays to Python, NaN/inf to None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def write_run_json(path: Path, summary: dict) -> dict:
    """Write the summary atomically (temp file + rename), so readers never see half a file.

    Returns:
        the JSON-safe summary as written.
    """
    path = Path(path)
    plain = _plain(summary)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(plain, indent=2) + "\n")
    os.replace(tmp, path)
    return plain


class ForceLog:
    """Appends the obstacle force history to forces.csv, one row per step, flushed per chunk.

    Columns: step, time_s, fx_lattice, fy_lattice[, fz_lattice], cd, cl.
    """

    def __init__(
        self,
        path: Path,
        dimension: int,
        dt: float,
        coefficient_scale: float,
        history: np.ndarray | None = None,
    ) -> None:
        """``history``: (n, d) forces after steps 1..n of a resumed run, written first (from
        the checkpoint, so rows the interrupted run wrote after it are replaced)."""
        self.path = Path(path)
        self.dt = dt
        self.scale = coefficient_scale
        axes = "xyz"[:dimension]
        header = ["step", "time_s"] + [f"f{a}_lattice" for a in axes] + ["cd", "cl"]
        self.path.write_text(",".join(header) + "\n")
        if history is not None and len(history):
            self.append(1, history)

    def append(self, first_step: int, forces: np.ndarray) -> None:
        """forces: (n, d) lattice force after steps first_step, first_step + 1, ..."""
        steps = first_step + np.arange(len(forces))
        coeff = forces[:, :2] * self.scale
        with self.path.open("a") as f:
            for s, row, c in zip(steps, forces, coeff, strict=True):
                values = ",".join(f"{v:.9g}" for v in row)
                f.write(f"{s},{s * self.dt:.9g},{values},{c[0]:.9g},{c[1]:.9g}\n")
