"""Host-side collectives between chunks: a barrier and all-gathers of a few numbers, texts or
JSON values (the telemetry at every chunk end, the preflight's reports).

Every process must call each function at the same point. On one process they return at once.
Under ``domain.halo=mpi`` they use the run's MPI communicator; otherwise JAX's multi-process
runtime (``multihost_utils.process_allgather``; the values travel as raw bytes, so float64
survives a run without x64).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from solver.distributed.runtime import Runtime

TEXT_BYTES = 256  # longest text gather_texts carries (host names are at most 255 bytes)


def _allgather_bytes(runtime: Runtime, data: np.ndarray) -> np.ndarray:
    """(processes, nbytes) uint8: every process's ``data`` (uint8, the same length everywhere)."""
    if runtime.comm is not None:
        out = np.empty((runtime.process_count, data.size), dtype=np.uint8)
        runtime.comm.Allgather(np.ascontiguousarray(data), out)
        return out
    from jax.experimental import multihost_utils

    every = np.asarray(multihost_utils.process_allgather(data))
    return every.reshape(runtime.process_count, data.size)


def barrier(runtime: Runtime) -> None:
    """Return once every process has called it (its duration on a process is that process's
    wait for the last one to arrive, plus the latency of one tiny collective)."""
    if runtime.process_count == 1:
        return
    if runtime.comm is not None:
        runtime.comm.Barrier()
        return
    _allgather_bytes(runtime, np.zeros(1, dtype=np.uint8))


def gather_values(runtime: Runtime, values: Sequence[float]) -> np.ndarray:
    """(processes, k) float64 on every process: row r is process r's ``values`` (k floats, the
    same k on every process; NaN allowed)."""
    mine = np.asarray(values, dtype=np.float64).reshape(-1)
    if runtime.process_count == 1:
        return mine[None, :]
    raw = _allgather_bytes(runtime, mine.view(np.uint8))
    return np.ascontiguousarray(raw).view(np.float64).reshape(runtime.process_count, mine.size)


def gather_texts(runtime: Runtime, text: str) -> list[str]:
    """Every process's ``text`` (UTF-8, cut at TEXT_BYTES bytes), in process order."""
    data = text.encode()[:TEXT_BYTES]
    if runtime.process_count == 1:
        return [data.decode(errors="replace")]
    buffer = np.frombuffer(data.ljust(TEXT_BYTES, b"\0"), dtype=np.uint8)
    rows = _allgather_bytes(runtime, buffer)
    return [bytes(row).rstrip(b"\0").decode(errors="replace") for row in rows]


def allgather_json(runtime: Runtime, value) -> list:
    """``value`` (JSON-serialisable) of every process, in process order, on every process."""
    if runtime.process_count == 1:
        return [value]
    data = np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)
    lengths = gather_values(runtime, [data.size])[:, 0].astype(int)
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[: data.size] = data
    rows = _allgather_bytes(runtime, padded)
    return [json.loads(bytes(row[:n]).decode()) for row, n in zip(rows, lengths, strict=True)]
