"""Speed limits of links and storage, from data/preflight/baseline.json (or --baseline FILE).

A link is slow when its latency is above ``latency_us_max`` or its bandwidth below
``bandwidth_mbps_min`` of the platform's entry in ``links``; storage is slow when any
process writes or reads below ``storage``'s ``write_mbps_min`` / ``read_mbps_min``. A platform
without an entry is measured and reported, not judged (a warning says so).
"""

from __future__ import annotations

import json
from pathlib import Path

BASELINE = Path(__file__).resolve().parents[2] / "data" / "preflight" / "baseline.json"


def load_baseline(path: Path = BASELINE) -> dict:
    return json.loads(path.read_text())


def slow_links(links: list[dict], platform: str, baseline: dict) -> tuple[list[str], list[str]]:
    """(problems, warnings): one problem per slow link, naming both ends and the numbers."""
    limits = baseline.get("links", {}).get(platform)
    if limits is None:
        return [], [f"no link baseline for platform {platform}: links measured, not judged"]
    problems = []
    for link in links:
        reasons = []
        if link["latency_us"] > limits["latency_us_max"]:
            reasons.append(f"latency {link['latency_us']:.0f} us > {limits['latency_us_max']:g} us")
        if link["bandwidth_mbps"] < limits["bandwidth_mbps_min"]:
            reasons.append(
                f"bandwidth {link['bandwidth_mbps']:.1f} MB/s < "
                f"{limits['bandwidth_mbps_min']:g} MB/s"
            )
        if reasons:
            problems.append(
                f"slow link {link['a']}<->{link['b']} (along {link['axis']}, "
                f"{link['hosts']}): " + ", ".join(reasons)
            )
    return problems, []


def slow_storage(records: list[dict], baseline: dict) -> list[str]:
    """One problem per process whose write or read speed is below the baseline."""
    limits = baseline.get("storage", {})
    problems = []
    for r in records:
        for what in ("write", "read"):
            minimum = limits.get(f"{what}_mbps_min")
            if minimum is not None and r[f"{what}_mbps"] < minimum:
                problems.append(
                    f"slow storage on rank {r['rank']} ({r['host']}): {what} "
                    f"{r[f'{what}_mbps']:.0f} MB/s < {minimum:g} MB/s in {r['path']}"
                )
    return problems
