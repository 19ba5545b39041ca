"""`python -m solver.bench bodies` runs the real body step and reports consistent figures (no
timing thresholds: what is checked is the scene, the plumbing and the arithmetic of the table)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from solver.bench import bodies as bb

ROOT = Path(__file__).resolve().parent.parent
SIZE = 64  # one packing: each size costs a compilation (the ratio is tested on its own)
MEMBERS, MEMBER_BODIES = 4, 8


def test_packing_scene_is_dense_inside_its_walls_and_stable() -> None:
    setup, position = bb.build_scene(500, bb._lattice_counts(500), seed=3)
    r = bb.RADIUS
    assert position.shape == (500, 3) and setup.n_planes == 6
    # every sphere inside the box: no wall penetrated by more than the lattice jitter
    for k in range(6):
        gap = (position - setup.plane_point[k]) @ setup.plane_normal[k] - r
        assert gap.min() >= -bb.JITTER * r * 1.0001, f"wall {k} penetrated by {-gap.min():.3g} m"
    # lattice neighbours overlap by at most twice the jitter per axis
    distance = np.linalg.norm(position[:, None] - position[None], axis=-1)
    np.fill_diagonal(distance, np.inf)
    assert distance.min() >= 2 * r * (1 - 2 * math.sqrt(3) * bb.JITTER)
    fraction = 500 * 4 / 3 * math.pi * r**3 / np.prod(setup.plane_point[3:].diagonal())
    assert fraction > 0.3, f"packing fraction {fraction:.3f} is not dense"
    assert setup.dt > 0 and setup.grid.cell_size >= 2 * r + setup.skin


def test_bytes_per_body_step_counts_state_table_springs_and_gathers() -> None:
    k, p = 8, 6
    expected = 2 * 19 * 8 + 2 * k * 4 + 2 * 3 * (k + p) * 8 + 10 * k * 8
    assert bb.bytes_per_body_step(k, p) == expected
    assert bb.bytes_per_body_step(k, p, itemsize=4) < expected


def _row(bodies: int, seconds_per_step: float) -> bb.BodiesBenchRow:
    return bb.BodiesBenchRow("packing", bodies, 1, 1, 1.0, 1.0, seconds_per_step, 1.0, 1, 1.0,
                             1.0, 0.0, 0.0)  # fmt: skip


def test_growth_per_decade_is_the_time_ratio_per_tenfold_bodies() -> None:
    assert bb.growth_per_decade([_row(10, 1.0), _row(100, 10.0)]) == pytest.approx(10.0)
    # 100x bodies, 1000x time: 10^(3/2) per decade
    assert bb.growth_per_decade([_row(10, 1.0), _row(1000, 1000.0)]) == pytest.approx(10**1.5)
    assert bb.growth_per_decade([_row(10, 1.0)]) is None


# float64 differs only in the item size of the byte count (checked below): make test-long
@pytest.mark.parametrize("precision", [pytest.param("float64", marks=pytest.mark.long), "float32"])
def test_cli_reports_packings_ensemble_and_ceiling(tmp_path: Path, precision: str) -> None:
    out = tmp_path / "bodies.json"
    cmd = [sys.executable, "-m", "solver.bench", "bodies", "--sizes", str(SIZE)]
    cmd += ["--ensemble", str(MEMBERS), "--ensemble-bodies", str(MEMBER_BODIES)]
    cmd += ["--steps", "2", "--repeats", "1", "--json", str(out), "--precision", precision]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ceiling" in done.stdout and "B per body-step" in done.stdout
    payload = json.loads(out.read_text())
    rows = payload["rows"]
    assert [(r["kind"], r["bodies"], r["members"]) for r in rows] == [
        ("packing", SIZE, 1), ("ensemble", MEMBER_BODIES, MEMBERS)
    ]  # fmt: skip
    assert payload["growth_per_decade"] is None  # one packing size
    assert payload["precision"] == precision
    for r in rows:
        work = r["bodies"] * r["members"]
        assert r["body_steps_per_s"] > 0 and r["bandwidth_gbs"] > 0
        assert r["body_steps_per_s"] == pytest.approx(work / r["seconds_per_step"], rel=1e-9)
        assert r["body_steps_per_s_best"] >= r["body_steps_per_s"] * (1 - 1e-9)
        itemsize = 4 if precision == "float32" else 8
        assert r["bytes_per_body_step"] == bb.bytes_per_body_step(bb.MAX_NEIGHBORS, 6, itemsize)
        ceiling = r["bandwidth_gbs"] * 1e9 / r["bytes_per_body_step"]
        assert r["ceiling_body_steps_per_s"] == pytest.approx(ceiling, rel=1e-9)
        assert r["fraction"] == pytest.approx(r["body_steps_per_s"] / ceiling, rel=1e-9)
    # the packings start with lattice neighbours overlapping: contacts carry the load
    assert all(r["contacts_per_body"] > 1 for r in rows if r["kind"] == "packing")
