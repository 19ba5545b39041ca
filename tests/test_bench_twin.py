"""The ingestion benchmark runs end to end on a tiny load (correctness only, no timing)."""

from __future__ import annotations

import re

from solver.bench.twin import core_rate, live_rate, main


def test_core_and_live_ingestion_count_every_reading(tmp_path, capsys):
    rate, floor = core_rate(400, 20, tmp_path)  # asserts every reading was accepted
    assert rate > 0 and floor > 0
    live = live_rate(rate=500, seconds=1.0, batch=10, folder=tmp_path)
    if live is not None:  # mosquitto installed
        assert live["ingested"] == live["readings"] == 500
    assert main(["--count", "200", "--batch", "10", "--rate", "200", "--seconds", "0.5"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"batches of 10: +[\d,]+ readings/s +ceiling json.loads alone", out)
