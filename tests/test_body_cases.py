"""The rigid-body cases through the app: `python -m solver case=projectile|bounce`."""

import csv
import json
import xml.etree.ElementTree as ET

import h5py
import numpy as np
import pytest
from solver_cli import run_solver

# Velocity Verlet integrates a constant force exactly: only round-off of ~1e3 float64 steps over
# positions of a few metres is left (measured 1.7e-13 m).
PROJECTILE_POSITION = 1e-9  # m
# Rebound height / drop height against e^2: gravity acts during the finite Hertz contact and the
# dashpot sees half-step velocities, so the ratio falls short by O(g t_c / v) + O(dt / t_c);
# measured -3.8e-3 for the 5 cm drop below, the same bound as tests/test_body_step.py's BOUNCE.
BOUNCE_RATIO = 0.03
UNITS = {
    "position": "m",
    "velocity": "m/s",
    "angular_velocity": "rad/s",
    "contact_count": "1",
}


def _run(tmp_path, *overrides):
    result = run_solver([*overrides, f"hydra.run.dir={tmp_path}"])
    return result, tmp_path


def test_projectile_matches_parabola_and_writes_outputs(tmp_path):
    result, out = _run(tmp_path, "case=projectile", "steps=300", "case.output_every=50")
    assert result.returncode == 0, result.stderr
    assert "position_error_max_m" in result.stdout
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 300 and summary["bodies"] == 1
    error = summary["diagnostics"]["position_error_max_m"]
    assert error < PROJECTILE_POSITION, f"position error {error:.3g} m"
    assert abs(summary["energy"]["relative_drift"]) < 1e-12
    assert summary["momentum"]["last_kg_m_s"][1] == 0.0
    # one sphere: every pair (none) in a table built once, never rebuilt
    assert summary["pair_table"]["neighbor_list"] == "all"
    assert summary["pair_table"]["rebuilds"] == 0

    with h5py.File(out / "bodies.h5") as f:
        assert f["radius"].shape == (1,) and f["radius"].attrs["units"] == "m"
        assert f["mass"].attrs["units"] == "kg"
        steps = sorted(name for name in f if name.startswith("step_"))
        assert steps == [f"step_{s:08d}" for s in range(0, 301, 50)]
        for name in steps:
            group = f[name]
            assert group["orientation"].shape == (1, 4)
            for key, unit in UNITS.items():
                assert group[key].attrs["units"] == unit, f"{name}/{key}"
                assert group[key].shape[0] == 1
            assert group["position"].shape == (1, 3)
        assert f["step_00000300"].attrs["time_s"] == pytest.approx(300 * f.attrs["dt_s"])

        root = ET.parse(out / "bodies.xdmf").getroot()
        grids = root.findall("./Domain/Grid/Grid")
        assert len(grids) == len(steps)
        for grid in grids:
            assert grid.find("Topology").get("TopologyType") == "Polyvertex"
            for item in grid.iter("DataItem"):
                file, path = item.text.strip().split(":")
                assert file == "bodies.h5" and path.lstrip("/") in f, path
                dims = tuple(int(d) for d in item.get("Dimensions").split())
                assert f[path].shape == dims, path
        names = {a.get("Name") for a in grids[0].findall("Attribute")}
        assert {"radius", "velocity"} <= names

    with (out / "energies.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 301 and rows[-1]["step"] == "300"
    total = np.array([float(r["total_J"]) for r in rows])
    assert np.ptp(total) < 1e-9 * abs(total[0])


@pytest.mark.long
def test_bounce_rebound_ratio_near_restitution_squared(tmp_path):
    result, out = _run(
        tmp_path, "case=bounce", "case.drop_height=0.05", "case.duration=0.25", "chunk=500"
    )
    assert result.returncode == 0, result.stderr
    diag = json.loads((out / "run.json").read_text())["diagnostics"]
    assert diag["rebound_apex_reached"]
    error = diag["rebound_ratio"] - diag["restitution_squared"]
    assert abs(error) < BOUNCE_RATIO, (
        f"rebound ratio {diag['rebound_ratio']:.4f}, error {error:.3g}"
    )


def test_bounce_in_float32_keeps_the_rebound_ratio(tmp_path):
    """bodies.precision=float32: the state and the contact arithmetic in single precision give
    the float64 rebound ratio to 1.1e-4 (measured 0.636314 against 0.636203); run.json says
    which precision ran."""
    result, out = _run(
        tmp_path, "case=bounce", "case.drop_height=0.05", "case.duration=0.25", "chunk=500",
        "bodies.precision=float32",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "run.json").read_text())
    assert summary["precision"] == "float32"
    diag = summary["diagnostics"]
    assert diag["rebound_apex_reached"]
    assert abs(diag["rebound_ratio"] - diag["restitution_squared"]) < BOUNCE_RATIO


@pytest.mark.parametrize(
    ("override", "allowed"),
    [
        ("bodies.precision=float16", "float64 or float32"),
        ("bodies.ensemble.size=2", "float64 with bodies.mesh or an ensemble"),
    ],
)
def test_bounce_bad_precision_exits_2(tmp_path, override, allowed):
    precision = [] if "precision" in override else ["bodies.precision=float32"]
    result, _ = _run(tmp_path, "case=bounce", override, *precision)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bodies.precision" in lines[0] and allowed in lines[0], lines


def test_bounce_dt_above_stable_step_exits_2(tmp_path):
    result, _ = _run(tmp_path, "case=bounce", "case.dt=0.01")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "case.dt = 0.01" in lines[0] and "use case.dt=" in lines[0]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("case.material.restitution=1.5", "case.material.restitution"),
        ("case.material.young=-1", "case.material.young"),
    ],
)
def test_bounce_bad_material_exits_2(tmp_path, override, key):
    result, _ = _run(tmp_path, "case=bounce", override)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], result.stderr


# Torque-free body, 1e4 steps of omega dt = 6e-3 (DLM splitting): the kinetic energy oscillates at
# O((omega dt)^2) (measured max 2.5e-7 here, 2.8e-8 for the default 1e5 steps of omega dt = 2e-3);
# the world angular momentum is untouched by the drift, so |L| is exact to round-off (measured 0).
TUMBLING_ENERGY = 1e-5
TUMBLING_MOMENTUM = 1e-12
# Acceleration along the slope fitted over the second half, against the rigid-body value: the
# soft Hertz contact and the tangential spring leave -3.9e-4 (rolling, 20 deg, mu 0.5, measured);
# sliding (30 deg, mu 0.1) is a constant Coulomb force, measured -6e-14.
INCLINE_ACCELERATION = 0.02
# Newton's cradle: momentum is exchanged in equal and opposite pairs, so the total is conserved to
# round-off (measured 8e-16). With Hertz contacts the pulse disperses along the row and the last
# sphere does not carry all of it (measured 0.976 v0 for 5 steel spheres, e = 0.99).
CRADLE_MOMENTUM = 1e-12
CRADLE_LAST_VELOCITY = 0.9


# The physics of tumbling, incline, cradle and the float64 bounce is checked in make test by the
# fast validation cases (tests/test_validation_bodies.py: the same solver path, in process, about
# 10 s each); these CLI runs of the full default cases (a fresh process each, ~1 min) run in
# make test-long. The app path of body cases stays in make test through the projectile (outputs)
# and the float32 bounce.
@pytest.mark.long
def test_tumbling_conserves_energy_and_momentum_and_flips(tmp_path):
    result, out = _run(tmp_path, "case=tumbling", "case.duration=30", "case.dt=0.003")
    assert result.returncode == 0, result.stderr
    diag = json.loads((out / "run.json").read_text())["diagnostics"]
    assert diag["steps_run"] == 10000
    assert diag["kinetic_energy_drift_max"] < TUMBLING_ENERGY, diag
    assert diag["angular_momentum_drift_max"] < TUMBLING_MOMENTUM, diag
    assert diag["intermediate_axis_flipped"] and 0 < diag["first_flip_time_s"] < 30, diag


@pytest.mark.long
@pytest.mark.parametrize(
    ("angle", "friction", "regime"), [("20", "0.5", "rolling"), ("30", "0.1", "sliding")]
)
def test_incline_acceleration_matches_regime(tmp_path, angle, friction, regime):
    result, out = _run(
        tmp_path,
        "case=incline",
        f"case.angle={angle}",
        f"case.material.friction={friction}",
        "case.duration=0.1",
    )
    assert result.returncode == 0, result.stderr
    diag = json.loads((out / "run.json").read_text())["diagnostics"]
    assert diag["regime"] == regime
    error = diag["acceleration_relative_error"]
    assert abs(error) < INCLINE_ACCELERATION, diag


@pytest.mark.long
def test_cradle_conserves_momentum_and_transfers_it(tmp_path):
    result, out = _run(tmp_path, "case=cradle")
    assert result.returncode == 0, result.stderr
    diag = json.loads((out / "run.json").read_text())["diagnostics"]
    assert diag["collisions_over"]
    assert diag["momentum_error_relative_max"] < CRADLE_MOMENTUM, diag
    assert diag["last_velocity_ratio"] > CRADLE_LAST_VELOCITY, diag
