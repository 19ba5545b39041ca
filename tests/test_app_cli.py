"""`python -m solver` as a user runs it: exit codes, one-line errors, summary, divergence."""

from __future__ import annotations

import json
import subprocess

import h5py
import pytest
from solver_cli import run_solver

from solver.output.fields import check_xdmf


def _solver(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return run_solver(list(args), timeout=timeout)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("case=nope", "case/nope"),  # Hydra composition error
        ("fluid.u_lattice=0.5", "fluid.u_lattice"),  # Mach > 0.3
        ("case.resolution=2", "case.resolution"),  # cannot resolve the cylinder
    ],
)
def test_bad_config_exits_2_with_one_line(tmp_path, override, needle):
    result = _solver(override, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0] and "Traceback" not in result.stderr


def test_small_run_prints_summary_and_writes_outputs(tmp_path):
    result = _solver(
        "case=poiseuille", "case.resolution=8", "steps=30", f"hydra.run.dir={tmp_path}"
    )
    assert result.returncode == 0, result.stderr
    assert "tau =" in result.stdout and "MLUPS" in result.stdout
    assert str(tmp_path / "run.json") in result.stdout
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 30


def test_divergence_exits_3_and_keeps_output(tmp_path):
    # BGK at tau = 0.50001 with Mach 0.29: passes validation (tau > 0.5) but blows up quickly
    result = _solver(
        "case=cavity",
        "case.re=1e6",
        "case.resolution=16",
        "fluid.collision=bgk",
        "fluid.u_lattice=0.17",
        "steps=3000",
        "chunk=50",
        "output.every=50",
        f"hydra.run.dir={tmp_path}",
    )
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "diverged at step" in lines[0] and "likely cause" in lines[0]
    assert "tau" in lines[0] and "Traceback" not in result.stderr
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "diverged"
    assert summary["divergence"]["step"] < 3000
    assert len(summary["divergence"]["cell"]) == 2
    with h5py.File(tmp_path / "fields.h5", "r") as f:
        groups = [k for k in f if k.startswith("step_")]
        assert groups and "solid" in f
        for g in groups:
            assert f[g]["density"][...].size > 0
    assert check_xdmf(tmp_path / "fields.xdmf") == []
