"""Sensor messages: parsing, validation against the sensors, quarantine (no network here).

Every designed rejection is produced by a crafted message and counted exactly; hypothesis throws
arbitrary bytes and arbitrary JSON at the parser and the whole ingestion path: only designed
rejections, never an exception, never the ``internal`` reason.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.errors import ConfigError
from solver.twin.ingest import Ingestor
from solver.twin.messages import REASONS, Reading, Rejection, parse_message
from solver.twin.quarantine import Quarantine, read_quarantine
from solver.twin.sensors import parse_sensors
from solver.twin.validate import Validator

SENSORS = [
    {"id": "u1", "kind": "velocity_probe", "position": [0.1, 0.2], "units": "m/s",
     "range": [-2.0, 2.0], "noise_std": 0.01},
    {"id": "p1", "kind": "pressure_probe", "position": [0.3, 0.2], "units": "kPa",
     "range": [90.0, 110.0], "noise_std": 0.05},
    {"id": "inflow", "kind": "inflow_velocity", "units": "m/s", "range": [0.0, 3.0]},
    {"id": "pose0", "kind": "body_pose", "body": 0, "units": "m,1"},
]  # fmt: skip


def _ingestor(tmp_path, **clock) -> Ingestor:
    validator = Validator(parse_sensors("twin.sensors", SENSORS), **clock)
    return Ingestor(validator, Quarantine(tmp_path / "quarantine.jsonl"))


def _msg(**fields) -> bytes:
    return json.dumps(fields).encode()


def test_valid_readings_in_si(tmp_path):
    ing = _ingestor(tmp_path)
    # 36 km/h = 10 m/s is outside the +-2 m/s range: the range applies after the conversion
    assert ing.ingest(_msg(sensor="u1", time=1.0, value=[36.0, 0.0], units="km/h"), "t", 0.0) == []
    assert ing.rejected_by_reason == {"out_of_range": 1}
    kmh = ing.ingest(_msg(sensor="u1", time=1.5, value=[3.6, 0.0], units="km/h"), "t", 0.0)
    np.testing.assert_allclose(kmh[0].value, [1.0, 0.0], rtol=1e-15)
    ing2 = _ingestor(tmp_path / "b")
    ok = ing2.ingest(_msg(sensor="u1", time=1.0, value=[180.0, -36.0], units="cm/s"), "t", 0.0)
    np.testing.assert_allclose(ok[0].value, [1.8, -0.36], rtol=1e-15)
    p = ing2.ingest(_msg(sensor="p1", time=1.0, value=1.01325, units="bar"), "t", 0.0)
    np.testing.assert_allclose(p[0].value, [101325.0], rtol=1e-15)
    default_units = ing2.ingest(_msg(sensor="p1", time=2.0, value=100.0), "t", 0.0)
    np.testing.assert_allclose(default_units[0].value, [1e5], rtol=1e-15)
    iso = ing2.ingest(_msg(sensor="inflow", time="1970-01-01T00:00:05+00:00", value=1.0), "t", 0)
    assert iso[0].time == 5.0


def test_every_reason_is_counted_exactly_and_quarantined(tmp_path):
    ing = _ingestor(tmp_path, max_age=10.0, max_future=5.0)
    good = _msg(sensor="u1", time=1.0, value=[0.5, 0.1])
    cases = {
        "too_large": b"{" + b" " * 70000 + b"}",
        "encoding": b'{"sensor": "u1", "time": 1, "value": "\xff\xfe"}',
        "json": b'{"sensor": "u1", "time": ',
        "schema": _msg(sensor="u1", time=2.0),
        "unknown_sensor": _msg(sensor="nope", time=2.0, value=1.0),
        "units": _msg(sensor="u1", time=2.0, value=[0.1, 0.1], units="Pa"),
        "shape": _msg(sensor="u1", time=2.0, value=[0.1, 0.1, 0.1]),
        "non_finite": b'{"sensor": "u1", "time": 2.0, "value": [NaN, 0.0]}',
        "out_of_range": _msg(sensor="u1", time=2.0, value=[2.5, 0.0]),
        "out_of_order": _msg(sensor="u1", time=0.5, value=[0.1, 0.1]),
        "too_old": _msg(sensor="p1", time=1.0, value=100.0),
        "future": _msg(sensor="p1", time=40.0, value=100.0),
        # after a skip ahead by 19.5 s at t = 20 s with max_lag 1.9 s: t = 37.5 - 19.5 < 18.1
        "stale": _msg(sensor="inflow", time=37.5, value=1.0),
    }
    assert ing.ingest(good, "t", 1.0)
    for reason, raw in cases.items():
        now = 20.0 if reason in ("too_old", "future", "stale") else 1.0
        if reason == "stale":
            ing.validator.shift(19.5, stale_before=18.1)
        assert ing.ingest(raw, "src", now) == [], reason
    assert ing.ingest(good, "src", 1.0) == []  # a redelivery: dropped, counted, not quarantined
    assert ing.ingest(cases["json"], "src", 1.0) == []  # the same bad bytes again
    same_reading = _msg(sensor="u1", value=[0.5, 0.1], time=1.0)  # other bytes, same reading
    assert ing.ingest(same_reading, "src", 1.0) == []
    assert ing.counts["duplicate_messages"] == 2 and ing.counts["duplicates"] == 1
    assert ing.rejected_by_reason == {reason: 1 for reason in cases}
    assert set(cases) | {"internal"} == set(REASONS)
    ing.quarantine.close()
    records = read_quarantine(tmp_path / "quarantine.jsonl")
    assert [r["reason"] for r in records] == list(cases)
    assert [r["raw"] for r in records] == list(cases.values())  # bytes as received
    assert all(r["source"] == "src" for r in records)


def test_batch_keeps_its_good_readings(tmp_path):
    ing = _ingestor(tmp_path)
    batch = {
        "readings": [
            {"sensor": "u1", "time": 1.0, "value": [0.1, 0.2]},
            {"sensor": "u1", "time": 2.0, "value": [float("inf"), 0.2]},
            {"sensor": "p1", "time": 1.0, "value": 100.0, "bogus": 1},
            {"sensor": "p1", "time": 1.5, "value": 200.0},
            {"sensor": "inflow", "time": 1.0, "value": 1.5},
        ]
    }
    raw = json.dumps(batch).encode()  # json writes Infinity: a non-finite literal
    got = ing.ingest(raw, "t", 0.0)
    assert ing.rejected_by_reason == {"non_finite": 1}  # the whole message: Infinity literal
    assert got == []
    batch["readings"][1]["value"] = [1e999, 0.2]  # a finite literal that overflows to inf
    raw = json.dumps(batch).replace("Infinity", "1e999").encode()
    got = ing.ingest(raw, "t", 0.0)
    assert [o.sensor for o in got] == ["u1", "inflow"]
    assert ing.rejected_by_reason == {"non_finite": 2, "schema": 1, "out_of_range": 1}
    ing.quarantine.close()
    items = read_quarantine(tmp_path / "quarantine.jsonl")[1:]
    assert [r["index"] for r in items] == [1, 2, 3]
    assert json.loads(items[1]["raw"]) == batch["readings"][2]  # exactly the bad item


def test_pose_quaternion_must_be_unit(tmp_path):
    ing = _ingestor(tmp_path)
    assert ing.ingest(_msg(sensor="pose0", time=1.0, value=[0, 0, 1, 1, 0, 0, 0]), "t", 0.0)
    assert not ing.ingest(_msg(sensor="pose0", time=2.0, value=[0, 0, 1, 2, 0, 0, 0]), "t", 0.0)
    assert ing.rejected_by_reason == {"out_of_range": 1}


@pytest.mark.parametrize(
    "change, key",
    [
        ({"kind": "thermometer"}, "twin.sensors[0].kind"),
        ({"units": "Pa"}, "twin.sensors[0].units"),
        ({"range": [2.0, 1.0]}, "twin.sensors[0].range"),
        ({"noise_std": -1.0}, "twin.sensors[0].noise_std"),
        ({"position": [0.1]}, "twin.sensors[0].position"),
        ({"id": "bad id!"}, "twin.sensors[0].id"),
        ({"colour": "red"}, "twin.sensors[0].colour"),
    ],
)
def test_bad_sensor_config_names_the_key(change, key):
    with pytest.raises(ConfigError) as err:
        parse_sensors("twin.sensors", [SENSORS[0] | change])
    assert err.value.key == key and "\n" not in str(err.value)


def test_duplicate_sensor_id_is_an_error():
    with pytest.raises(ConfigError, match=r"twin.sensors\[1\].id"):
        parse_sensors("twin.sensors", [SENSORS[0], SENSORS[0]])


# --- fuzzing ---------------------------------------------------------------------------------

DESIGNED = set(REASONS) - {"internal"}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
reading_like = st.fixed_dictionaries(
    {
        "sensor": st.sampled_from(["u1", "p1", "inflow", "pose0", "x", ""]) | st.text(max_size=5),
        "time": st.floats(allow_nan=True, allow_infinity=True)
        | st.integers()
        | st.text(max_size=30),
        "value": json_values,
    },
    optional={"units": st.sampled_from(["m/s", "km/h", "Pa", "bar", "??"]) | json_values},
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_bytes_only_designed_rejections(raw):
    for item in parse_message(raw):
        assert isinstance(item, (Reading, Rejection))
        if isinstance(item, Rejection):
            assert item.reason in DESIGNED


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(reading_like | json_values, min_size=1, max_size=4), st.booleans(),
       st.floats(-1e3, 1e3))  # fmt: skip
def test_fuzz_ingestion_never_raises(tmp_path_factory, items, as_batch, now):
    ing = _ingestor(tmp_path_factory.mktemp("q"), max_age=100.0, max_future=100.0)
    for item in items:
        raw = json.dumps({"readings": [item]} if as_batch else item).encode()
        got = ing.ingest(raw, "fuzz", now)
        for obs in got:
            assert np.all(np.isfinite(obs.value)) and math.isfinite(obs.time)
    assert "internal" not in ing.rejected_by_reason
    assert set(ing.rejected_by_reason) <= DESIGNED
    counted = ing.counts["accepted"] + ing.counts["rejected"] + ing.counts["duplicates"]
    assert counted == ing.counts["readings"]
