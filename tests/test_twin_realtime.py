"""Keeping pace with real time, without a solver: the schedule, the real-time factor and the
lag's trend over the window, the warning (figures, advice, rate limit), the skip decision, the
advice's arithmetic and the config's errors. The twin service with a real broker and a real
stall is in tests/test_twin_service.py."""

from __future__ import annotations

import logging

import pytest

from solver.errors import ConfigError
from solver.twin.config import RealtimeConfig, parse_twin
from solver.twin.realtime import RealTimeMonitor, Schedule, SpeedAdvice

ADVICE = SpeedAdvice(dimension=2, resolution=40, u_lattice=0.05, u_lattice_max=0.1, devices=1)


def _feed(monitor: RealTimeMonitor, factor: float, seconds: float, start=(0.0, 0.0), dt=0.5):
    """Chunk ends every ``dt`` wall s of a run at ``factor`` simulated s per wall s on a
    schedule of rate 1 that started at wall 0; returns the last (wall, simulation time)."""
    wall, t = start
    schedule = Schedule(rate=monitor.rate or 1.0, start=0.0)
    for _ in range(round(seconds / dt)):
        wall += dt
        t += factor * dt
        monitor.observe(wall, t, schedule.behind(t, wall))
    return wall, t


def test_schedule_counts_lag_in_wall_seconds_and_shifts():
    schedule = Schedule(rate=2.0, start=100.0, t0=4.0)
    assert schedule.target(10.0) == 103.0  # 6 simulated s at 2x take 3 wall s
    assert schedule.behind(10.0, 105.5) == 2.5
    assert schedule.behind(10.0, 102.0) == 0.0  # ahead: not behind
    schedule.shift(2.5)
    assert schedule.behind(10.0, 105.5) == 0.0


def test_factor_and_trend_over_the_window_and_one_rate_limited_warning(caplog):
    monitor = RealTimeMonitor(RealtimeConfig(window=4.0, warn_every=10.0), rate=1.0,
                              advice=ADVICE)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="solver.twin"):
        _feed(monitor, 0.6, 12.0)
    assert monitor.factor == pytest.approx(0.6)
    assert monitor.trend == pytest.approx(0.4)  # the lag grows by 1 - 0.6 s per s
    assert monitor.behind == pytest.approx(0.4 * 12.0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # first said once the window was half full and the run more than 1 s behind (t = 3 s),
    # then at most every 10 s: again at 13 s, not within these 12 s
    assert len(warnings) == 1 == monitor.warnings
    text = warnings[0]
    assert "cannot keep pace: 0.6 simulated s per wall s" in text
    assert "falling further behind by 0.4 s every s" in text
    assert "1.7x faster" in text  # 1 / 0.6
    assert "case.resolution=32 (now 40" in text  # 40 / (1.1 / 0.6)^(1/3)
    assert "fluid.u_lattice=0.0917 (now 0.05, at most 0.1" in text  # 0.05 * 1.1 / 0.6
    assert "twin.realtime.behind=skip_ahead" in text  # the policy that would re-synchronise
    assert monitor.summary()["keeping_pace"] is False


def test_a_twin_that_keeps_pace_is_not_warned_and_recovery_is_logged(caplog):
    monitor = RealTimeMonitor(RealtimeConfig(window=4.0, warn_every=1.0), rate=1.0)
    with caplog.at_level(logging.INFO, logger="solver.twin"):
        wall, t = _feed(monitor, 1.0, 10.0)  # in step: behind 0
        assert monitor.warnings == 0 and monitor.summary()["keeping_pace"] is True
        wall, t = _feed(monitor, 0.5, 6.0, (wall, t))  # falls 3 s behind
        assert monitor.warnings >= 1
        _feed(monitor, 1.5, 8.0, (wall, t))  # catches up (a paced twin waits at the schedule)
    assert any("back in step" in r.getMessage() for r in caplog.records)
    reports = [r for r in caplog.records if r.levelno == logging.INFO
               and "over the last 4 s" in r.getMessage()]  # fmt: skip
    assert len(reports) == 5  # once per window: from the first chunk end (0.5 s), 4.5 .. 20.5 s
    assert monitor.summary()["keeping_pace"] is True
    assert monitor.max_behind == pytest.approx(3.0)


def test_skip_decision_and_record():
    keep = RealTimeMonitor(RealtimeConfig(behind="keep", max_lag=5.0), rate=1.0)
    skip = RealTimeMonitor(RealtimeConfig(behind="skip_ahead", max_lag=5.0), rate=1.0)
    assert not keep.should_skip(50.0)
    assert not skip.should_skip(5.0) and skip.should_skip(5.01)
    record = skip.skipped(step=300, t=1.5, seconds=7.0, wall=10.0)
    assert record == {"step": 300, "time_s": 1.5, "skipped_s": 7.0, "stale": 0}
    assert skip.behind == 0.0 and skip.summary()["skips"] == [record]


def test_advice_scales_with_dimension_and_stops_at_the_mach_limit():
    three_d = SpeedAdvice(dimension=3, resolution=64, u_lattice=0.1, u_lattice_max=0.15,
                          members=16, devices=2)  # fmt: skip
    text = three_d.text(16.0)
    assert "case.resolution=32 (now 64; the cost grows as resolution^4)" in text
    assert "fluid.u_lattice=0.15 (now 0.1, at most 0.15" in text  # capped
    assert "twin.enkf.members=2 (now 16)" in text and "now 2)" in text
    at_limit = SpeedAdvice(dimension=2, resolution=None, u_lattice=0.17, u_lattice_max=0.17)
    assert at_limit.text(2.0) == "more devices (domain.mesh, now 1)"


@pytest.mark.parametrize(
    ("realtime", "key"),
    [
        ({"behind": "drop"}, "twin.realtime.behind"),
        ({"max_lag": 0}, "twin.realtime.max_lag"),
        ({"window": -1.0}, "twin.realtime.window"),
        ({"startup_check": "yes"}, "twin.realtime.startup_check"),
    ],
)
def test_bad_realtime_config_names_the_key(realtime, key):
    data = {"mode": "mqtt", "sensors": [{"id": "inflow", "kind": "inflow_velocity",
            "units": "m/s"}], "mqtt": {"topics": ["s/#"], "client_id": "c"},
            "realtime": realtime}  # fmt: skip
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_twin(data)
