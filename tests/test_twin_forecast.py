"""What-if forecasts: the "as now" scenario reproduces the run itself, the others bracket it,
and forecast.h5 holds every forecast."""

from __future__ import annotations

import json

import h5py
import numpy as np

from solver.twin.forecast import forecast_message
from tests.solver_cli import PRODUCTION, run_solver

# The forecast advances K vmapped copies with the same chunk as the run (float32); the sampled
# probes agree to round-off of the vmapped program: measured max difference ~1e-6 m/s
FORECAST_TOLERANCE = 1e-4  # m/s


def test_as_now_scenario_reproduces_the_run(tmp_path):
    out = tmp_path / "run"
    # no assimilation (no inflow forcing, no nudging): after the forecast time the run goes on
    # exactly as the factor-1.0 scenario; the held-out probes record the run's own values
    result = run_solver(["case=cylinder", "twin=replay", "twin.compare_free_run=false",
                         "twin.inflow=false", "twin.nudging.enabled=false",
                         "twin.forecast.enabled=true", "twin.forecast.every=0.1",
                         "twin.forecast.horizon=0.1", "twin.forecast.output_every=0.02",
                         "twin.forecast.scenarios=[0.9,1.0,1.1]", "case.duration=0.2",
                         "checkpoint=none", "output=none", f"hydra.run.dir={out}"],
                        PRODUCTION)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "run.json").read_text())["twin"]
    assert summary["forecasts"] == 2
    with h5py.File(out / "forecast.h5") as f:
        group = f["issued_0000000300"]  # t = 0.1 s at dt = 1/3000 s
        probes = [p.decode() for p in group["probes"][()]]
        velocity = group["velocity"][()]  # (K, T, P, d)
        times = group["time_s"][()]
        assert velocity.shape == (3, 5, len(probes), 2)
        np.testing.assert_allclose(times, 0.1 + 0.02 * np.arange(1, 6), rtol=1e-9)
        np.testing.assert_allclose(group["mean"][()], velocity.mean(0), rtol=1e-12)
    # the run's own model values at t = 0.2 s (probes.csv: the model at every update)
    rows = [line.split(",") for line in (out / "probes.csv").read_text().splitlines()[1:]]
    at_end = {sid: [float(v) for v in value.split(";")] for t, sid, value in rows
              if abs(float(t) - 0.2) < 1e-9}  # fmt: skip
    assert set(at_end) == set(probes)
    as_now = velocity[1, -1]  # scenario 1.0 at its last sample, t = 0.2 s
    run = np.array([at_end[pid] for pid in probes])
    np.testing.assert_allclose(as_now, run, atol=FORECAST_TOLERANCE)
    # compare through the inflow scan: stronger inflow, faster wake at the downstream probes
    k = probes.index("u_68_20")
    assert velocity[0, -1, k, 0] < velocity[1, -1, k, 0] < velocity[2, -1, k, 0]
    message = json.loads(forecast_message({
        "issued_s": 0.1, "horizon_s": 0.1, "time_s": times, "scenarios": np.array([0.9, 1.0, 1.1]),
        "probes": probes, "velocity": velocity, "mean": velocity.mean(0),
        "spread": velocity.std(0, ddof=1),
    }))  # fmt: skip
    assert set(message["probes"]) == set(probes) and len(message["time_s"]) == 5
