"""telemetry.csv: one row per rank and chunk, appended by process 0 after every chunk.

Columns (times in s of wall time, memory in bytes; an empty cell: not known on this back end):

- ``chunk``: the chunk's index in this run (0 = the first chunk of this process's run);
- ``step``: the step count at the end of the chunk; ``steps``: steps in the chunk;
- ``compile``: 1 when the chunk compiled its program (its time is mostly compilation);
- ``rank``, ``host``: the process and its host name;
- ``wall_s``: s since the run loop began on that rank, at the end of the chunk;
- ``chunk_s``: from dispatching the chunk to its health check returning (the device work,
  including the waits inside the chunk's halo exchanges);
- ``step_s``: ``chunk_s`` / ``steps``;
- ``host_s``: the rank's host work since the previous chunk end (output, checkpoints, hooks
  such as the twin, progress);
- ``sync_wait_s``: the rank's wait at the end-of-chunk barrier for the last rank to arrive
  (plus one tiny collective's latency; 0 on one process);
- ``exchange_s``: every ``telemetry.halo_every`` chunks, the wall time of one halo exchange of
  the state alone (the step's messages, routes and collectives with nothing computed, started
  right after the barrier so that no rank waits for another; ``FluidModel.exchange_seconds``);
  empty in other chunks, on one shard and for models without a halo;
- ``device_bytes_in_use``, ``device_peak_bytes_in_use``: JAX allocator statistics summed over
  the rank's devices (GPUs; empty on CPUs);
- ``host_rss_bytes``, ``host_peak_rss_bytes``: resident set size of the process and its peak.

A resumed run appends to the file of the interrupted one, so the rows of both attempts stay
(steps after the checkpoint appear twice, each with the times it really took).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# the per-rank numbers every rank contributes, in the order of the gathered rows
VALUES = (
    "wall_s",
    "chunk_s",
    "host_s",
    "sync_wait_s",
    "exchange_s",
    "device_bytes_in_use",
    "device_peak_bytes_in_use",
    "host_rss_bytes",
    "host_peak_rss_bytes",
)
COLUMNS = ("chunk", "step", "steps", "compile", "rank", "host", "wall_s", "chunk_s", "step_s",
           "host_s", "sync_wait_s", "exchange_s", "device_bytes_in_use", "device_peak_bytes_in_use",
           "host_rss_bytes", "host_peak_rss_bytes")  # fmt: skip
_BYTES = {"device_bytes_in_use", "device_peak_bytes_in_use", "host_rss_bytes",
          "host_peak_rss_bytes"}  # fmt: skip


def _cell(name: str, value: float) -> str:
    if not math.isfinite(value):
        return ""
    return str(int(value)) if name in _BYTES else f"{value:.6g}"


class TelemetryCsv:
    """Appends the rows of each chunk to ``path`` and flushes them (a crash loses no chunk).

    Args:
        path: telemetry.csv in the run directory.
        append: keep an existing file's rows (a resumed run); otherwise start a new file.
    """

    def __init__(self, path: Path, append: bool = False) -> None:
        self.path = Path(path)
        fresh = not (append and self.path.exists() and self.path.stat().st_size > 0)
        self._file = self.path.open("w" if fresh else "a")
        if fresh:
            self._file.write(",".join(COLUMNS) + "\n")
            self._file.flush()

    def append(
        self, chunk: int, step: int, steps: int, compiling: bool, hosts: Sequence[str],
        table: np.ndarray,
    ) -> None:  # fmt: skip
        """Rows of one chunk; ``table``: (ranks, len(VALUES)) gathered numbers."""
        lines = []
        for rank, row in enumerate(table):
            values = dict(zip(VALUES, (float(v) for v in row), strict=True))
            values["step_s"] = values["chunk_s"] / steps
            cells = [str(chunk), str(step), str(steps), str(int(compiling)), str(rank),
                     hosts[rank]]  # fmt: skip
            cells += [_cell(name, values[name]) for name in COLUMNS[6:]]
            lines.append(",".join(cells) + "\n")
        self._file.write("".join(lines))
        self._file.flush()

    def close(self) -> None:
        self._file.close()
