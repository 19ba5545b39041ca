"""`python -m solver.bench` runs the real step and reports consistent figures (no timing)."""

import json
import subprocess
import sys

import pytest

from kernels.lattices import lattice_by_name


def test_bench_reports_every_row_with_a_consistent_roofline(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "solver.bench", "--lattices", "D2Q9,D3Q27"]
    cmd += ["--precisions", "float32", "--sizes", "8", "--steps", "2", "--repeats", "1"]
    cmd += ["--case", "both", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "roof" in done.stdout and "D3Q27" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {(r["lattice"], r["case"]) for r in rows} == {
        (lat, case) for lat in ("D2Q9", "D3Q27") for case in ("periodic", "walls")
    }
    for row in rows:
        q = lattice_by_name(row["lattice"]).q
        assert row["mlups"] > 0 and row["bandwidth_gbs"] > 0
        # roofline: every cell reads and writes its q float32 populations once
        expected = row["bandwidth_gbs"] * 1e9 / (2 * q * 4) / 1e6
        assert row["roofline_mlups"] == pytest.approx(expected, rel=1e-6)
        assert row["fraction"] == pytest.approx(row["mlups"] / row["roofline_mlups"], rel=1e-6)
        assert row["peak_bytes_per_cell"] >= 2 * q * 4
