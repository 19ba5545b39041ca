"""`python -m solver.bench checkpoint` times every mode and reports consistent figures (no timing
thresholds: what is checked is the plumbing, the counts and the clean-up)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHUNKS, EVERY = 6, 2
SAVES = math.ceil(CHUNKS / EVERY)  # the first save comes before the first timed chunk
SHAPE = (16, 16, 16)
Q_D3Q19 = 19


def test_checkpoint_bench_reports_every_mode_and_cleans_up(tmp_path):
    cmd = [sys.executable, "-m", "solver.bench", "checkpoint", "--shape", *map(str, SHAPE)]
    cmd += ["--chunk", "5", "--chunks", str(CHUNKS), "--every", str(EVERY)]
    cmd += ["--repeat", "1", "--json"]
    # the default checkpoint folder goes to the temp dir, here tmp_path
    env = dict(os.environ, JAX_PLATFORMS="cpu", TMPDIR=str(tmp_path))
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(done.stdout)

    assert set(payload["modes"]) == {"none", "async", "blocking"}
    assert payload["shape"] == list(SHAPE) and payload["lattice"] == "D3Q19"
    assert payload["state_bytes"] == Q_D3Q19 * math.prod(SHAPE) * 4
    for name, mode in payload["modes"].items():
        assert len(mode["mlups_runs"]) == 1, name
        assert math.isfinite(mode["mlups"]) and mode["mlups"] > 0, name
        assert math.isfinite(mode["drop_pct_paired"]) and mode["cpu_share"] > 0, name
    none = payload["modes"]["none"]
    assert none["saves"] == 0 and none["bytes_per_checkpoint"] == 0
    assert none["restore_gbs"] is None and none["drop_pct"] == none["drop_pct_paired"] == 0.0
    for name in ("async", "blocking"):
        mode = payload["modes"][name]
        assert mode["saves"] == SAVES, f"{name}: {mode['saves']} saves, expected {SAVES}"
        assert mode["bytes_per_checkpoint"] > 0, name
        assert mode["blocking_s_mean"] > 0 and mode["restore_gbs"] > 0, name
        assert mode["restore_of_ceiling"] > 0, name
    blocking = payload["modes"]["blocking"]
    assert blocking["write_gbs"] > 0 and blocking["write_of_ceiling"] > 0
    assert payload["modes"]["async"]["write_gbs"] is None  # not a throughput (polled)

    ceilings = payload["ceilings"]
    assert ceilings["bytes"] == payload["checkpoint_bytes"] > 0
    assert ceilings["write_gbs"] > 0 and ceilings["read_gbs"] > 0
    verdict = payload["verdict"]
    assert verdict["save_every_steps"] == EVERY * 5 and verdict["seconds_between_saves"] > 0
    assert verdict["met"] == (verdict["async_drop_pct"] <= verdict["target_drop_pct"])

    assert payload["dir_removed"] and not Path(payload["dir"]).exists()
    assert Path(payload["dir"]).parent == tmp_path
    assert not list(tmp_path.glob("lb-bench-checkpoint-*"))
