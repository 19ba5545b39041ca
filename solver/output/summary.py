"""run.json and the force history (forces.csv)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
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

    Columns: step, time_s, fx_lattice, fy_lattice[, fz_lattice], the moment's columns when
    measured (mz_lattice in 2D; mx_lattice, my_lattice, mz_lattice in 3D), then one column per
    coefficient (a cylinder: cd, cl).
    """

    def __init__(
        self,
        path: Path,
        dimension: int,
        dt: float,
        coefficients: Sequence[tuple[str, int, float]],
        history: np.ndarray | None = None,
        moments: int = 0,
    ) -> None:
        """``coefficients``: (column name, index into a row of the force report, factor);
        ``moments``: moment values after the d force values in each row (0, 1 or 3);
        ``history``: (n, d + moments) rows after steps 1..n of a resumed run, written first
        (from the checkpoint, so rows the interrupted run wrote after it are replaced)."""
        self.path = Path(path)
        self.dt = dt
        self.coefficients = [(name, int(k), float(f)) for name, k, f in coefficients]
        axes = "xyz"[:dimension]
        moment_axes = {0: "", 1: "z", 3: "xyz"}[moments]
        header = (
            ["step", "time_s"]
            + [f"f{a}_lattice" for a in axes]
            + [f"m{a}_lattice" for a in moment_axes]
            + [name for name, _, _ in self.coefficients]
        )
        self.path.write_text(",".join(header) + "\n")
        if history is not None and len(history):
            self.append(1, history)

    def append(self, first_step: int, forces: np.ndarray) -> None:
        """forces: (n, d + moments) lattice force (and moment) after steps first_step,
        first_step + 1, ..."""
        steps = first_step + np.arange(len(forces))
        coeff = np.stack([forces[:, k] * f for _, k, f in self.coefficients], axis=1)
        with self.path.open("a") as fh:
            for s, row, c in zip(steps, forces, coeff, strict=True):
                values = ",".join(f"{v:.9g}" for v in (*row, *c))
                fh.write(f"{s},{s * self.dt:.9g},{values}\n")
