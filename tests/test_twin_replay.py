"""The twin on recorded streams: recording formats, pacing, the twin experiment end to end
(truth run with a varying inflow -> noisy recording -> free and assimilated runs), and bad
twin configuration through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from solver.twin.ingest import Ingestor
from solver.twin.quarantine import Quarantine, read_quarantine
from solver.twin.replay import ReplaySource, load_recording
from solver.twin.sensors import parse_sensors
from solver.twin.validate import Validator
from tests.solver_cli import PRODUCTION, ROOT, run_solver

SENSORS = parse_sensors(
    "twin.sensors",
    [
        {"id": "u1", "kind": "velocity_probe", "position": [0.3, 0.2], "units": "m/s"},
        {"id": "inflow", "kind": "inflow_velocity", "units": "m/s"},
    ],
)
ERROR_REDUCTION = 3.0  # the bar: assimilated error at least 3x below the free run's
# m/s: the estimate follows a random walk of 1% per update behind a reading of 0.01 m/s noise;
# measured 0.004 m/s at the end of a 1 s run (1.829 vs 1.825)
INFLOW_TOLERANCE = 0.05


def _ingest_all(records, tmp_path: Path, name: str):
    ingestor = Ingestor(Validator(SENSORS), Quarantine(tmp_path / f"{name}.jsonl"))
    accepted = []
    for r in records:
        if r.problem is None:
            accepted += ingestor.ingest(r.raw, r.label, 1e9)
    return ingestor, accepted


def test_csv_and_hdf5_recordings_give_the_same_readings(tmp_path):
    csv_path = tmp_path / "rec.csv"
    csv_path.write_text(
        "time,sensor,value,units\n"
        "0.2,u1,1.5;-0.25,m/s\n"
        "0.1,inflow,1.4,m/s\n"
        "0.2,inflow,150,cm/s\n"
        "oops,inflow,1.0,m/s\n"
        "0.3,u1\n"
        "0.3,u1,abc,m/s\n"
    )
    records = load_recording(csv_path)
    assert [r.problem is not None for r in records][:2] == [True, True]  # unreadable rows first
    _, from_csv = _ingest_all(records, tmp_path, "csv")
    assert [(o.sensor, o.time) for o in from_csv] == [("inflow", 0.1), ("u1", 0.2),
                                                       ("inflow", 0.2)]  # fmt: skip
    h5_path = tmp_path / "rec.h5"
    with h5py.File(h5_path, "w") as f:
        f.create_group("u1").attrs["units"] = "m/s"
        f["u1/time"] = [0.2]
        f["u1/value"] = [[1.5, -0.25]]
        f.create_group("inflow").attrs["units"] = "m/s"
        f["inflow/time"] = [0.1, 0.2]
        f["inflow/value"] = [1.4, 1.5]
    _, from_h5 = _ingest_all(load_recording(h5_path), tmp_path, "h5")
    assert sorted((o.sensor, o.time) for o in from_h5) == sorted((o.sensor, o.time)
                                                                 for o in from_csv)  # fmt: skip
    for a in from_csv:
        b = next(o for o in from_h5 if (o.sensor, o.time) == (a.sensor, a.time))
        np.testing.assert_allclose(a.value, b.value, rtol=1e-15)


def test_replay_hands_over_by_simulation_time_and_paces(tmp_path):
    path = tmp_path / "rec.csv"
    rows = "".join(f"{0.1 * k:.1f},inflow,1.0\n" for k in range(1, 11))
    path.write_text("time,sensor,value\n" + rows)
    source = ReplaySource(path, time_origin=0.0)
    assert [json.loads(r.raw)["time"] for r in source.due(0.3)] == [0.1, 0.2, 0.3]
    assert source.due(0.3) == [] and len(source.due(10.0)) == 7 and source.exhausted
    paced = ReplaySource(path, pace=2.0)  # 2 simulated seconds per wall-clock second
    start = time.monotonic()
    paced.due(0.0)
    paced.due(0.5)
    assert time.monotonic() - start >= 0.25 - 0.01  # never ahead of the paced schedule


@pytest.mark.timeout(900)
def test_twin_experiment_assimilation_beats_the_free_run(tmp_path):
    recording = tmp_path / "recording.csv"
    truth = subprocess.run(
        [sys.executable, str(ROOT / "data/twin/make_cylinder_recording.py"), "--out",
         str(recording), "--work", str(tmp_path / "truth"), "--amplitude", "0.5", "--period",
         "0.5", "case.duration=0.4"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert truth.returncode == 0, truth.stderr[-2000:]
    readings = sum(1 for _ in recording.open()) - 1 - 3  # header, 3 malformed rows
    out = tmp_path / "twin"
    result = run_solver(["case=cylinder", "twin=replay", f"twin.recording={recording}",
                         "case.duration=0.4", f"hydra.run.dir={out}",
                         "checkpoint=none"], PRODUCTION)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    twin = json.loads((out / "run.json").read_text())["twin"]
    assert twin["accepted"] == readings
    assert twin["rejected_by_reason"] == {"non_finite": 1, "unknown_sensor": 1, "schema": 1}
    assert len(read_quarantine(out / "quarantine.jsonl")) == 3
    assert twin["held_out_samples"] > 0 and twin["inflow_updates"] > 0 and twin["nudges"] > 0
    assert twin["assimilated_rms"] * ERROR_REDUCTION < twin["free_rms"], twin
    assert (out / "twin_probes.png").stat().st_size > 0
    assert "x lower" in result.stdout

    # the ensemble Kalman filter on the same recording (4 members, no free run again)
    enkf_out = tmp_path / "enkf"
    result = run_solver(["case=cylinder", "twin=replay", f"twin.recording={recording}",
                         "case.duration=0.4", f"hydra.run.dir={enkf_out}", "checkpoint=none",
                         "twin.compare_free_run=false", "twin.enkf.enabled=true",
                         "twin.enkf.members=4"], PRODUCTION)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    enkf = json.loads((enkf_out / "run.json").read_text())["twin"]
    assert enkf["assimilation"] == "enkf" and enkf["analyses"] > 0
    assert enkf["assimilated_rms"] * ERROR_REDUCTION < twin["free_rms"], enkf
    truth_inflow = [float(line.split(",")[2]) for line in recording.read_text().splitlines()
                    if ",inflow," in line and line[0].isdigit()]  # fmt: skip
    assert abs(enkf["inflow_estimate_m_s"] - truth_inflow[-1]) < INFLOW_TOLERANCE


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["twin.nudging.gain=2.0"], "twin.nudging.gain"),
        (["twin.sensors=[{id: a, kind: velocity_probe, position: [9.0, 0.2], units: m/s}]"],
         "twin.sensors.a.position"),
        (["twin.recording=/nonexistent/recording.csv"], "twin.recording"),
        (["twin.mode=sideways"], "twin.mode"),
        (["case=bounce"], "twin.sensors"),  # a body case takes body_pose sensors only
    ],
)  # fmt: skip
def test_bad_twin_config_is_a_one_line_error(tmp_path, overrides, key):
    result = run_solver(["case=cylinder", "twin=replay", "case.duration=0.01",
                         f"hydra.run.dir={tmp_path}", *overrides])  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: bad configuration:") and key in lines[-1], lines[-3:]
    assert "Traceback" not in result.stderr
