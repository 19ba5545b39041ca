"""Telemetry of every run: the straggler logic, the config section, the CSV, the Prometheus
endpoint, the Grafana dashboard's metric names, and a real in-process run with a scraping hook.

No GPU here: device memory statistics are checked to be "not known" (NaN / empty cells) on the
CPU back end; the GPU path (``bytes_in_use``) cannot run on this machine.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
import urllib.request
from pathlib import Path

import jax
import numpy as np
import pytest

from solver.api import compose_config
from solver.errors import ConfigError
from solver.run import simulate
from solver.sections import Section
from solver.telemetry.config import TelemetryConfig, parse_telemetry
from solver.telemetry.exporter import RunMetrics
from solver.telemetry.probes import device_memory, host_memory
from solver.telemetry.records import COLUMNS, VALUES, TelemetryCsv
from solver.telemetry.session import INJECT_DELAY_ENV, injected_delay
from solver.telemetry.stragglers import StragglerDetector
from solver.twin.metrics import TwinMetrics

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "solver.json"
METRIC = re.compile(r"\bsolver_(?:run|twin)_[a-z_]+")


# ------------------------------------------------------------------ stragglers (synthetic)


def test_straggler_named_after_consecutive_slow_chunks():
    detector = StragglerDetector(factor=1.5, chunks=3, hosts=["a", "b", "c", "d"])
    slow = [1.0, 1.0, 2.0, 1.1]  # rank 2 is 2x the median of the others (1.0)
    assert detector.update(10, slow) == []
    assert detector.update(20, slow) == []
    (named,) = detector.update(30, slow)
    assert (named.rank, named.host, named.first_step, named.last_step) == (2, "c", 10, 30)
    assert named.chunks == 3 and named.worst_ratio == pytest.approx(2.0)
    assert detector.current == {2}
    assert detector.update(40, slow) == [], "one episode is named once"
    assert detector.episodes[0].last_step == 40 and detector.episodes[0].chunks == 4


def test_straggler_streak_resets_and_new_episode():
    detector = StragglerDetector(factor=1.5, chunks=2, hosts=["a", "b", "c"])
    detector.update(1, [1.0, 1.0, 3.0])
    detector.update(2, [1.0, 1.0, 1.2])  # recovered before the second slow chunk
    assert detector.update(3, [1.0, 1.0, 3.0]) == []
    assert detector.update(4, [1.0, 1.0, 3.0])[0].first_step == 3
    detector.update(5, [1.0, 1.0, 1.0])
    assert detector.current == set()
    detector.update(6, [1.0, 4.0, 1.0])
    (second,) = detector.update(7, [1.0, 4.0, 1.0])
    assert second.rank == 1 and len(detector.episodes) == 2


def test_no_straggler_at_the_factor_or_with_one_rank():
    detector = StragglerDetector(factor=1.5, chunks=1, hosts=["a", "b", "c"])
    assert detector.update(1, [1.0, 1.0, 1.5]) == [], "exactly factor x median is not slow"
    pair = StragglerDetector(factor=1.5, chunks=1, hosts=["a", "b"])
    assert pair.update(1, [1.0, 1.6])[0].rank == 1, "two ranks: compared with the other one"
    assert StragglerDetector(1.5, 1, ["a"]).update(1, [100.0]) == []
    with pytest.raises(ValueError, match="2 times for 3 ranks"):
        detector.update(2, [1.0, 1.0])


def test_straggler_needs_the_excess_over_the_chunk_above_the_floor():
    # 12-step chunks: rank 0 is 2.6x the other's time, but 13 ms over the chunk is jitter
    detector = StragglerDetector(1.5, 1, ["a", "b"], min_excess_s=0.1)
    assert detector.update(12, [0.0018, 0.0007], steps=12) == []
    assert detector.streak == [0, 0]
    # the same ratio over 200-step chunks: 0.22 s per chunk above the other rank is slow
    (named,) = detector.update(212, [0.0018, 0.0007], steps=200)
    assert named.rank == 0 and named.worst_ratio == pytest.approx(0.0018 / 0.0007)
    # a large excess below the factor is not slow either
    assert StragglerDetector(1.5, 1, ["a", "b"], 0.1).update(1, [1.4, 1.0], steps=10) == []


# ------------------------------------------------------------------ config


DEFAULTS = {"enabled": True, "port": None, "address": "127.0.0.1", "straggler_factor": 1.5,
            "straggler_chunks": 3, "straggler_min_s": 0.1, "halo_every": 10}  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("port", 70000, "null or an integer in [0, 65535]"),
        ("port", True, "null or an integer in [0, 65535]"),
        ("address", "", "a host name or IP address"),
        ("straggler_factor", 1.0, "> 1"),
        ("straggler_chunks", 0, "an integer >= 1"),
        ("straggler_min_s", -0.01, ">= 0"),
        ("halo_every", -1, "an integer >= 0"),
        ("enabled", "yes", "true | false"),
    ],
)
def test_bad_telemetry_values_name_key_and_range(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        parse_telemetry(Section("telemetry", {**DEFAULTS, key: value}))
    assert str(err.value).startswith(f"telemetry.{key} = ") and allowed in str(err.value)
    assert "\n" not in str(err.value)


def test_composed_defaults_keep_the_endpoint_off_and_local():
    config = compose_config(["case=cavity"])
    assert config.telemetry == TelemetryConfig()
    assert config.telemetry.port is None and config.telemetry.address == "127.0.0.1"
    assert compose_config(["case=cavity", "telemetry=none"]).telemetry.enabled is False


def test_injected_delay_is_for_its_rank_only():
    assert injected_delay(1, {INJECT_DELAY_ENV: "1:0.25"}) == 0.25
    assert injected_delay(0, {INJECT_DELAY_ENV: "1:0.25"}) == 0.0
    assert injected_delay(0, {}) == 0.0
    with pytest.raises(ConfigError, match=INJECT_DELAY_ENV):
        injected_delay(0, {INJECT_DELAY_ENV: "0.25"})


# ------------------------------------------------------------------ probes, CSV, endpoint


def test_probes_host_rss_and_no_device_statistics_on_cpu():
    rss, peak = host_memory()
    assert 10e6 < rss <= peak, "a Python process with JAX holds more than 10 MB"
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
    assert host_memory()[1] >= rss + 50 * 2**20 - 8 * 2**20, "the peak follows a new block"
    del block
    in_use, peak_device = device_memory(jax.local_devices())
    assert math.isnan(in_use) and math.isnan(peak_device), "CPU back end has no memory_stats"


def test_csv_rows_per_rank_and_append_on_resume(tmp_path):
    path = tmp_path / "telemetry.csv"
    # VALUES: wall, chunk, host, sync wait, exchange, device in use/peak, host RSS/peak
    table = np.array([[1.0, 0.4, 0.1, 0.0, math.nan, math.nan, math.nan, 5e8, 6e8],
                      [1.1, 0.8, 0.1, 0.3, 2e-3, 2**33, 2**34, 4e8, 4e8]])  # fmt: skip
    writer = TelemetryCsv(path)
    writer.append(0, 20, 20, False, ["n1", "n2"], table)
    writer.close()
    TelemetryCsv(path, append=True).append(0, 40, 20, True, ["n1", "n2"], table)
    rows = list(csv.DictReader(path.open()))
    assert tuple(rows[0]) == COLUMNS and len(rows) == 4
    assert rows[1]["host"] == "n2" and float(rows[1]["step_s"]) == pytest.approx(0.04)
    assert rows[0]["device_bytes_in_use"] == "" and rows[1]["device_peak_bytes_in_use"] == str(
        2**34
    )
    assert rows[0]["exchange_s"] == "" and float(rows[1]["exchange_s"]) == 2e-3
    assert rows[3]["step"] == "40" and rows[3]["compile"] == "1"
    TelemetryCsv(path).close()
    assert path.read_text().count("\n") == 1, "a fresh run starts a new file"


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def test_endpoint_serves_every_rank_on_localhost():
    metrics = RunMetrics(port=0)
    try:
        assert metrics.server.server_address[0] == "127.0.0.1"
        table = np.array([[1.0, 0.5, 0.1, 0.0, math.nan, math.nan, math.nan, 5e8, 6e8],
                          [1.0, 1.5, 0.1, 0.2, 3e-3, math.nan, math.nan, 4e8, 4e8]])  # fmt: skip
        metrics.update(["n1", "n2"], table, steps=10, step=30, time_s=0.3, rate=1e6,
                       stragglers={1}, named=1)  # fmt: skip
        text = _scrape(metrics.port)
    finally:
        metrics.close()
    assert 'solver_run_step_seconds{host="n2",rank="1"} 0.15' in text
    assert 'solver_run_straggler{host="n2",rank="1"} 1.0' in text
    assert 'solver_run_straggler{host="n1",rank="0"} 0.0' in text
    assert "solver_run_steps 30.0" in text and "solver_run_stragglers_total 1.0" in text
    assert "solver_run_device_memory_bytes{" not in text, "unknown memory is not exported"
    assert 'solver_run_exchange_seconds{host="n2",rank="1"} 0.003' in text
    assert 'solver_run_exchange_seconds{host="n1"' not in text, "no probe, no value"


def _registered_names() -> set[str]:
    names = set()
    for registry in (RunMetrics().registry, TwinMetrics().registry):
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":
                names.add(family.name + "_total")
    return names


def test_grafana_dashboard_queries_only_real_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    queried = set()
    for panel in dashboard["panels"]:
        assert {"id", "type", "title", "gridPos"} <= set(panel)
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["type"] == "prometheus" and panel["targets"]
        for target in panel["targets"]:
            found = METRIC.findall(target["expr"])
            assert found, f"panel {panel['title']!r}: no solver metric in {target['expr']!r}"
            queried.update(found)
    names = _registered_names()
    assert queried <= names, f"not exported by the code: {sorted(queried - names)}"
    families = {n for n in names if not n.endswith("_total")} | {
        n[: -len("_total")] for n in names if n.endswith("_total")
    }
    covered = {n.removesuffix("_total") for n in queried}
    assert families <= covered, f"metrics without a panel: {sorted(families - covered)}"


# ------------------------------------------------------------------ a real run


class ScrapeEachChunk:
    """A chunk hook that scrapes the run's own endpoint after each chunk (the port from the
    run's log line)."""

    name, unbounded = "scrape", False

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog, self.pages, self.port = caplog, [], None

    def start(self, model, output_dir, first_step) -> None:
        match = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.caplog.text)
        self.port = int(match.group(1))

    def steps_until(self, step: int) -> int | None:
        return None

    def after_chunk(self, step: int, model, state):
        self.pages.append(_scrape(self.port))
        return state

    def summary(self) -> dict:
        return {"pages": len(self.pages)}

    def close(self) -> None:
        pass


# the chunk of tests/test_cases_run.py's tiny cavity (a persistent-cache hit when it ran first)
CAVITY = ["case=cavity", "case.resolution=8", "steps=18", "chunk=3", "output=none"]


def test_run_writes_csv_run_json_and_serves_gauges(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="solver")
    config = compose_config(["checkpoint=none", *CAVITY, "telemetry.port=0"])
    hook = ScrapeEachChunk(caplog)
    outcome = simulate(config, tmp_path, interactive=False, hook=hook)
    telemetry = outcome.summary["telemetry"]
    rows = list(csv.DictReader((tmp_path / "telemetry.csv").open()))
    assert [int(r["step"]) for r in rows] == [3, 6, 9, 12, 15, 18]
    assert rows[0]["compile"] == "1" and {r["compile"] for r in rows[1:]} == {"0"}
    assert all(float(r["chunk_s"]) > 0 and int(r["host_rss_bytes"]) > 0 for r in rows)
    assert telemetry["chunks"] == 6 and telemetry["stragglers"] == []
    assert telemetry["metrics_port"] == hook.port and outcome.summary["outputs"]["telemetry"]
    assert json.loads((tmp_path / "run.json").read_text())["telemetry"]["chunks"] == 6
    # the hook runs before the chunk's telemetry: the page after chunk k shows chunk k-1
    assert len(hook.pages) == 6 and "solver_run_steps 15.0" in hook.pages[-1]
    assert 'solver_run_step_seconds{host="' in hook.pages[-1] and 'rank="0"' in hook.pages[-1]
    with pytest.raises(OSError):
        _scrape(hook.port)  # the endpoint closes with the run
    assert set(VALUES) <= set(COLUMNS)


def test_disabled_telemetry_writes_nothing(tmp_path):
    config = compose_config(["checkpoint=none", *CAVITY, "telemetry=none"])
    outcome = simulate(config, tmp_path, interactive=False)
    assert "telemetry" not in outcome.summary and not (tmp_path / "telemetry.csv").exists()
