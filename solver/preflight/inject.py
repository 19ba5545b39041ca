"""Test-only fault injection, so that the tests can show each failure is caught and named.

``SOLVER_PREFLIGHT_INJECT`` holds comma-separated faults, each ``KIND@RANK[=VALUE]``:

- ``version@R``: process R reports ``jax`` as ``<its version>+injected`` (a version mismatch).
- ``corrupt@R``: shard R of the numerical canary flips the lowest bit of one population before
  its checksum (a device that computes wrong). R is a shard: the MPI rank with one device per
  process, a device index with several devices in one process.
- ``delay@R[=SECONDS]``: the process owning shard R sleeps SECONDS (default 0.2) before each
  timed exchange of its links (a slow link).

Never set it in production: the checks it trips are the point.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "SOLVER_PREFLIGHT_INJECT"
KINDS = ("version", "corrupt", "delay")
DEFAULT_DELAY_S = 0.2


@dataclass(frozen=True)
class Faults:
    """The injected faults: the shard or rank of each kind (None: none) and the delay (s)."""

    version: int | None = None
    corrupt: int | None = None
    delay: int | None = None
    delay_s: float = 0.0


def parse(text: str | None = None) -> Faults:
    """The faults in ``text`` (default: the environment variable).

    Raises:
        ValueError: an unknown kind or a malformed entry (naming it and the accepted forms).
    """
    text = os.environ.get(ENV, "") if text is None else text
    found: dict = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, rest = item.partition("@")
        target, _, value = rest.partition("=")
        if kind not in KINDS or not target.isdigit() or (value and kind != "delay"):
            raise ValueError(
                f"{ENV}: {item!r} is not one of version@RANK, corrupt@SHARD, delay@SHARD[=SECONDS]"
            )
        found[kind] = int(target)
        if kind == "delay":
            found["delay_s"] = float(value) if value else DEFAULT_DELAY_S
    return Faults(**found)
