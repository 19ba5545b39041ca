"""``bodies.mesh`` through the app: box_fill split over 8 fake CPU devices against one device."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from tests.solver_cli import run_solver

# relative to the largest value; the decomposition differs from one device in the rounding of
# some pair forces (docs/body_decomposition.md: ~1e-15 after 100 steps, x10 per 100 steps of
# collisions); 400 steps of a pouring bed stay far below this, a missed contact would not
EQUALITY_BOUND = 1e-8


def _final(tmp_path, name: str, extra: list[str], env: dict) -> tuple[dict, np.ndarray]:
    out = tmp_path / name
    result = run_solver(["case=box_fill", "case.count=64", "case.box=[0.06,0.06,0.12]",
                         "steps=400", "chunk=200", f"hydra.run.dir={out}", *extra],
                        env_extra=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    with h5py.File(out / "bodies.h5") as f:
        last = sorted(k for k in f if k.startswith("step_"))[-1]
        fields = {k: f[last][k][()] for k in ("position", "velocity", "contact_count")}
    summary = json.loads((out / "run.json").read_text())
    return fields, summary


@pytest.mark.long  # the decomposed step equals one device in test_body_decomposition.py
def test_box_fill_on_a_mesh_equals_one_device(tmp_path):
    one, _ = _final(tmp_path, "one", [], {"XLA_FLAGS": ""})
    split, summary = _final(tmp_path, "split", ["bodies.mesh=[2,2,2]"],
                            {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})  # fmt: skip
    assert summary["decomposition"]["mesh"] == [2, 2, 2]
    assert summary["decomposition"]["ghosts_max"] > 0
    assert summary["decomposition"]["migrated"] > 0  # bodies crossed subdomain faces
    # the subdomains keep their pair tables: rebuilt at each chunk's start and as bodies pour
    table = summary["pair_table"]
    assert 2 <= table["rebuilds"] < table["body_steps"] == 400, table
    for key in ("position", "velocity"):
        scale = np.max(np.abs(one[key]))
        assert np.max(np.abs(split[key] - one[key])) <= EQUALITY_BOUND * scale, key
    np.testing.assert_array_equal(split["contact_count"], one["contact_count"])


def test_mesh_for_too_few_devices_is_a_config_error(tmp_path):
    result = run_solver(["case=box_fill", "case.count=8", "bodies.mesh=[2,2,2]", "steps=10",
                         f"hydra.run.dir={tmp_path}"], env_extra={"XLA_FLAGS": ""})  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "bodies.mesh" in result.stderr.strip().splitlines()[-1]
