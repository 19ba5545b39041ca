"""The end of a run on a grid too large to gather (``output.gather_cells``).

Above the limit no process gathers the final density and velocity: diagnostics that need them
are skipped (run.json names why), the others (forces, energy) are still reported, and the PNG
shows its plane, gathered alone (one process, 2 MPI processes, and 2 processes joined by
jax.distributed). The limit is set tiny here to put a small grid above it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mpi import mpirun
from PIL import Image
from solver_cli import FAST_COMPILE, run_solver

# a 3D case whose diagnostics read the final velocity (its error against the exact solution)
TAYLOR_GREEN = ["case=taylor_green", "fluid=d3q19", "case.resolution=12", "steps=20",
                "output.fields=false"]  # fmt: skip
# what is gathered and reported is checked, not the arithmetic: every run compiles without LLVM
# optimisation (the same flags in every run, so the PNGs compared pixel for pixel come alike)
FAST = {"XLA_FLAGS": FAST_COMPILE}


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def gathered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gathered")
    result = run_solver([*TAYLOR_GREEN, f"hydra.run.dir={out}"], FAST)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def test_above_the_limit_skips_field_diagnostics_and_draws_the_plane(gathered, tmp_path):
    out = tmp_path / "run"
    result = run_solver([*TAYLOR_GREEN, "output.gather_cells=1000", f"hydra.run.dir={out}"], FAST)
    assert result.returncode == 0, result.stderr[-2000:]
    ours, reference = summary(out), summary(gathered)
    assert reference["diagnostics"], "the gathered run reports its diagnostics"
    assert ours["diagnostics"] == {}
    assert "output.gather_cells=1000" in ours["diagnostics_skipped"]
    assert "1728 cells" in ours["diagnostics_skipped"]
    # the same picture from the plane alone as from the whole field
    png = Path(ours["outputs"]["png"])
    a = np.asarray(Image.open(png))
    b = np.asarray(Image.open(Path(reference["outputs"]["png"])))
    assert a.shape == b.shape and np.array_equal(a, b)


def test_force_diagnostics_survive_the_limit(tmp_path):
    """The cylinder's diagnostics come from the force history: reported above the limit; no
    PNG for a 2D grid (its plane is the whole grid)."""
    out = tmp_path / "run"
    args = ["case=cylinder", "case.resolution=6", "steps=40", "output.fields=false",
            "output.gather_cells=100", f"hydra.run.dir={out}"]  # fmt: skip
    result = run_solver(args, FAST)
    assert result.returncode == 0, result.stderr[-2000:]
    ours = summary(out)
    assert "cd_mean" in ours["diagnostics"]
    assert "diagnostics_skipped" not in ours
    assert "png" not in ours.get("outputs", {})
    assert "no PNG" in result.stderr + result.stdout


@pytest.mark.parametrize("halo", ["mpi", "xla"])
def test_processes_gather_the_plane_only(gathered, tmp_path, halo):
    """Split along z so the PNG's plane lies in one process's block; xla's gather runs in
    slabs of a few planes (SOLVER_GATHER_SLAB_BYTES)."""
    out = tmp_path / "run"
    args = ["-m", "solver", *TAYLOR_GREEN, "domain.mesh=[1,1,2]", f"domain.halo={halo}",
            "output.gather_cells=1000", f"hydra.run.dir={out}"]  # fmt: skip
    result = mpirun(2, args, extra_env={"SOLVER_GATHER_SLAB_BYTES": "600", **FAST})
    assert result.returncode == 0, result.stderr[-3000:]
    ours = summary(out)
    assert ours["diagnostics"] == {} and "diagnostics_skipped" in ours
    a = np.asarray(Image.open(Path(ours["outputs"]["png"])))
    b = np.asarray(Image.open(Path(summary(gathered)["outputs"]["png"])))
    assert np.array_equal(a, b)


def test_xla_processes_gather_in_slabs(gathered, tmp_path):
    """Below the limit, 2 processes joined by jax.distributed gather the final fields slab by
    slab (here 600-byte slabs: several per field): the same diagnostics as one process."""
    out = tmp_path / "run"
    args = ["-m", "solver", *TAYLOR_GREEN, "domain.mesh=[2,1,1]", "domain.halo=xla",
            f"hydra.run.dir={out}"]  # fmt: skip
    result = mpirun(2, args, extra_env={"SOLVER_GATHER_SLAB_BYTES": "600", **FAST})
    assert result.returncode == 0, result.stderr[-3000:]
    assert summary(out)["diagnostics"] == summary(gathered)["diagnostics"]
