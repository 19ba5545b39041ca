"""Ensembles of body cases (solver.bodies.ensemble): members against single runs, sharding, sweeps,
perturbations and bad ensemble configs through the app."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from solver_cli import FAST_COMPILE, run_solver

from solver.bodies.cases import build_body_case
from solver.bodies.ensemble import build_members, perturbed_bodies
from solver.config import load
from solver.errors import ConfigError
from solver.run import simulate as simulate_bodies

# A short bounce: a 1 cm drop touches the plane at 45 ms and reaches its rebound apex within 0.1 s.
BOUNCE = ("case=bounce", "case.drop_height=0.01", "case.duration=0.1", "case.output_every=100")
RESTITUTIONS = [0.5, 0.7, 0.9]
SWEEP = f"bodies.ensemble.sweep.restitution=[{','.join(map(str, RESTITUTIONS))}]"
# A member and the single run do the same float64 arithmetic; vmap may only reorder reductions
# (sums over bodies and contacts), so they agree to round-off. Measured: 1.0e-17 m (positions),
# 5.6e-17 m/s (velocities) at the output steps of member 2.
MEMBER_VS_SINGLE = 1e-12  # m, positions at the output steps
# Sharding the member axis over 8 fake CPU devices runs the same per-member program; measured
# bitwise equal to one device (0 J, 0 m).
SHARDED_VS_SINGLE = 1e-12  # m and J
# Rebound ratio h1/h0 against e^2 (tests/test_body_cases.py's bound, same reasons).
BOUNCE_RATIO = 0.03


def compose(*overrides: str):
    """The typed RunConfig of `python -m solver OVERRIDES` (Hydra's compose API, in-process)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from solver.app import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return load(hydra_compose(config_name="config", overrides=["checkpoint=none", *overrides]))


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    """The restitution sweep on the short bounce, 3 members, one device (in-process)."""
    out = tmp_path_factory.mktemp("sweep")
    config = compose(*BOUNCE, "bodies.ensemble.size=3", SWEEP)
    outcome = simulate_bodies(config, out, interactive=False)
    return outcome.summary, out


def test_restitution_sweep_orders_rebounds_like_e_squared(sweep_run):
    summary, out = sweep_run
    assert summary["status"] == "completed"
    ensemble = summary["ensemble"]
    assert ensemble["size"] == 3 and len(ensemble["members"]) == 3
    ratios = [m["diagnostics"]["rebound_ratio"] for m in ensemble["members"]]
    assert ratios == sorted(ratios) and ratios[0] < ratios[1] < ratios[2]
    for member, e in zip(ensemble["members"], RESTITUTIONS, strict=True):
        assert member["swept"] == {"restitution": e}
        assert abs(member["diagnostics"]["rebound_ratio"] - e**2) < BOUNCE_RATIO, member
        assert member["diagnostics"]["restitution_squared"] == pytest.approx(e**2)
    stats = ensemble["aggregate"]["rebound_ratio"]
    assert stats["min"] == pytest.approx(ratios[0]) and stats["max"] == pytest.approx(ratios[2])
    assert stats["mean"] == pytest.approx(np.mean(ratios))
    assert stats["std"] == pytest.approx(np.std(ratios))
    assert ensemble["aggregate"]["energy_relative_drift"]["count"] == 3
    with h5py.File(out / "ensemble.h5") as f:
        steps = summary["steps"] + 1
        assert f["energy/kinetic"].shape == (3, steps)
        assert f["states/position"].shape[:2] == (3, f["states/time_s"].shape[0])
        assert np.allclose(f["swept/restitution"][()], RESTITUTIONS)


def test_member_equals_single_run_with_its_parameters(sweep_run, tmp_path):
    summary, out = sweep_run
    member = 2
    config = compose(*BOUNCE, f"case.material.restitution={RESTITUTIONS[member]}")
    single = simulate_bodies(config, tmp_path, interactive=False).summary
    assert "ensemble" not in single and single["steps"] == summary["steps"]
    with h5py.File(out / "ensemble.h5") as f, h5py.File(tmp_path / "bodies.h5") as g:
        groups = sorted(k for k in g if k.startswith("step_"))
        times = f["states/time_s"][()]
        assert len(groups) == times.size
        for t, name in enumerate(groups):
            error = np.abs(f["states/position"][member, t] - g[name]["position"][()]).max()
            assert error <= MEMBER_VS_SINGLE, (name, error)
    ours = summary["ensemble"]["members"][member]["diagnostics"]
    for key, value in single["diagnostics"].items():
        if isinstance(value, float):
            assert ours[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key


def test_sharded_over_8_devices_equals_one_device(sweep_run, tmp_path):
    summary, out = sweep_run
    result = run_solver(
        [*BOUNCE, "bodies.ensemble.size=3", SWEEP, f"hydra.run.dir={tmp_path}"],
        env_extra={"XLA_FLAGS": f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}"},
    )
    assert result.returncode == 0, result.stderr
    sharded = json.loads((tmp_path / "run.json").read_text())["ensemble"]
    assert sharded["devices"] == 8 and sharded["padded_size"] == 8  # 3 members padded to 8
    assert len(sharded["members"]) == 3
    with h5py.File(out / "ensemble.h5") as f, h5py.File(tmp_path / "ensemble.h5") as g:
        for key in ("energy/kinetic", "energy/potential", "states/position", "states/velocity"):
            error = np.abs(f[key][()] - g[key][()]).max()
            assert error <= SHARDED_VS_SINGLE, (key, error)


def test_perturbation_is_reproducible_and_differs_between_members():
    config = compose(
        "case=cradle",
        "bodies.ensemble.size=4",
        "bodies.ensemble.perturb.velocity=0.01",
        "bodies.ensemble.perturb.position=1e-6",
    )
    case = build_body_case(config)
    ensemble = config.bodies.ensemble
    first = perturbed_bodies(case.bodies, ensemble, seed=7)
    again = perturbed_bodies(case.bodies, ensemble, seed=7)
    other = perturbed_bodies(case.bodies, ensemble, seed=8)
    nominal = np.asarray(case.bodies.velocity)
    assert np.array_equal(first.velocity, again.velocity)
    assert np.array_equal(first.position, again.position)
    assert np.array_equal(first.velocity[0], nominal)  # member 0 is the nominal run
    for m in range(1, 4):
        assert not np.array_equal(first.velocity[m], nominal)
        assert not np.array_equal(first.velocity[m], other.velocity[m])
        for k in range(m):
            assert not np.array_equal(first.velocity[m], first.velocity[k])
    spread = (first.velocity[1:] - nominal).std()
    assert 0.002 < spread < 0.03  # std 0.01 m/s from 3 x 5 x 3 = 45 samples
    # a member's draw does not depend on the ensemble size
    bigger = perturbed_bodies(
        case.bodies, ensemble.__class__(**{**ensemble.__dict__, "size": 6}), 7
    )
    assert np.array_equal(bigger.velocity[:4], first.velocity)


def test_stiffer_members_lower_dt_or_fail():
    # young 100x larger: the stable Hertz step shrinks by 100^(1/2)
    sweep = "bodies.ensemble.sweep.young=[1.0e+7,1.0e+9]"
    config = compose(*BOUNCE, "bodies.ensemble.size=2", sweep)
    case = build_body_case(config)
    members = build_members(case, config)
    assert members.stable_dt[1] < members.stable_dt[0]
    assert members.setup.dt == pytest.approx(0.5 * members.stable_dt[1])
    assert np.allclose(members.params.young[:, 0], [1.0e7, 1.0e9])
    explicit = compose(*BOUNCE, "bodies.ensemble.size=2", sweep, f"case.dt={case.setup.dt}")
    with pytest.raises(ConfigError, match="case.dt .*member 1"):
        build_members(build_body_case(explicit), explicit)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            ["bodies.ensemble.size=2", "bodies.ensemble.sweep.restitution=[0.5]"],
            "sweep.restitution",
        ),
        (["bodies.ensemble.size=0"], "bodies.ensemble.size"),
    ],
)
def test_bad_ensemble_config_exits_2_with_one_line(tmp_path, overrides, needle):
    result = run_solver(["case=bounce", *overrides, f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["+bodies.ensemble.sweep.colour=[1]"], "sweep.colour = [1]: allowed a parameter among"),
        (["bodies.ensemble.size=2", "bodies.ensemble.perturb.velocity=-1"], "perturb.velocity"),
        (["bodies.ensemble.size=2", "bodies.ensemble.sweep.friction=[0.1,-1]"], "sweep.friction"),
        (["bodies.ensemble.size=2", "bodies.ensemble.sweep.gravity=[9.81,[0,1]]"], "sweep.gravity"),
    ],
)
def test_bad_ensemble_values_name_the_key(overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        compose("case=bounce", *overrides)


def test_stiffness_sweep_needs_the_linear_model():
    config = compose(
        "case=bounce", "bodies.ensemble.size=2", "bodies.ensemble.sweep.stiffness=[1,2]"
    )
    with pytest.raises(ConfigError, match="sweep.stiffness .*hertz"):
        build_members(build_body_case(config), config)


def test_unknown_sweep_material_names_the_key():
    config = compose(
        *BOUNCE,
        "bodies.ensemble.size=2",
        "bodies.ensemble.sweep.friction=[0.1,0.2]",
        "bodies.ensemble.sweep_material=rubber",
    )
    with pytest.raises(ConfigError, match="sweep_material = 'rubber'.*ball"):
        build_members(build_body_case(config), config)


def test_overflow_report_names_the_member():
    from solver.bodies.ensemble import member_overflow
    from solver.bodies.step import Overflow

    setup = build_body_case(compose("case=cradle")).setup
    capacity = setup.grid.capacity
    overflow = Overflow(
        overflowed=np.array([False, True, True, True]),  # member 3 is padding: not reported
        worst_cell=np.array([0, 5, 6, 7], np.int32),
        worst_cell_count=np.array([1, capacity + 2, capacity + 1, 99], np.int32),
        worst_body=np.zeros(4, np.int32),
        worst_body_count=np.zeros(4, np.int32),
    )
    members, message = member_overflow(setup, overflow, size=3)
    assert members == [1, 2]
    assert message.startswith("member 1: cell 5 ") and f"holds {capacity + 2} bodies" in message
    ok = overflow._replace(overflowed=np.array([False, False, False, True]))
    assert member_overflow(setup, ok, size=3) is None
