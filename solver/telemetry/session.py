"""Telemetry of one run, driven by the run loop (``solver.run``) at every chunk end.

At the end of each chunk every process:

1. takes its times: ``chunk_s`` (the loop's dispatch-to-health-check time), ``host_s`` (its
   host work since the previous chunk end);
2. waits at a barrier for the other processes; the time spent there is ``sync_wait_s``, what
   a straggler costs the others at this synchronisation point;
3. reads its memory (device allocator statistics, host RSS) and all-gathers its numbers
   (``solver.distributed.host_collectives``); every process gets the same table.

Process 0 then appends the rows to telemetry.csv, sets the Prometheus gauges (with
``telemetry.port``) and every process updates the straggler detector with the same numbers
(process 0 logs the warning). Chunks that compiled their program are recorded but not judged.

Test-only: ``SOLVER_TELEMETRY_INJECT_DELAY=RANK:SECONDS`` makes process RANK sleep SECONDS of
host time at every chunk end (before the barrier), to exercise straggler detection with real
processes. It is read once at start-up; unset, nothing is injected.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from solver.distributed.host_collectives import barrier, gather_texts, gather_values
from solver.distributed.runtime import Runtime
from solver.errors import ConfigError
from solver.telemetry.config import TelemetryConfig
from solver.telemetry.exporter import RunMetrics
from solver.telemetry.probes import device_memory, host_memory
from solver.telemetry.records import VALUES, TelemetryCsv
from solver.telemetry.stragglers import StragglerDetector

log = logging.getLogger("solver")
INJECT_DELAY_ENV = "SOLVER_TELEMETRY_INJECT_DELAY"
CSV_NAME = "telemetry.csv"


def injected_delay(rank: int, env: dict | None = None) -> float:
    """Seconds of host delay the test-only variable asks of process ``rank`` (0 if none)."""
    text = (os.environ if env is None else env).get(INJECT_DELAY_ENV, "").strip()
    if not text:
        return 0.0
    try:
        target, seconds = text.split(":")
        target_rank, delay = int(target), float(seconds)
    except ValueError:
        raise ConfigError(INJECT_DELAY_ENV, text, "RANK:SECONDS, e.g. 1:0.5") from None
    if not (math.isfinite(delay) and delay >= 0):
        raise ConfigError(INJECT_DELAY_ENV, text, "a delay >= 0 s")
    return delay if target_rank == rank else 0.0


class Telemetry:
    """Per-rank chunk telemetry of one run (every process makes one; all call ``after_chunk``
    at the same chunk ends).

    Args:
        config: the ``telemetry`` section.
        runtime: the started runtime (process index and count, the MPI communicator).
        output_dir: the run directory (process 0 writes telemetry.csv there).
        dt: simulated s per step (for the simulated-time gauge).
        resumed: the run continues from a checkpoint (append to an existing telemetry.csv).
        exchange: exchange(state) -> wall s of one halo exchange alone, or None (the model's
            ``exchange_seconds``; a collective: every process calls it at the same chunk end).
    """

    def __init__(
        self, config: TelemetryConfig, runtime: Runtime, output_dir: Path, dt: float,
        resumed: bool = False, exchange: Callable[[Any], float | None] | None = None,
    ) -> None:  # fmt: skip
        self.config = config
        self.runtime = runtime
        self.dt = dt
        self.exchange = exchange if config.halo_every > 0 else None
        self.enabled = config.enabled
        self.root = runtime.is_root
        self.csv = self.metrics = self.detector = None
        self.chunk = 0
        self.own_s = 0.0  # telemetry's own host work (probes, gather, file, gauges)
        self.own_timed_s = 0.0  # the same in chunks that did not compile
        self.busy_timed_s = 0.0  # this process's chunk + host s in chunks that did not compile
        self.timed_busy: list[list[float]] = []  # per timed chunk: every rank's s per step
        self.peaks = None  # per rank: max device peak, max host peak RSS
        self.waits = None  # per rank: total sync wait s
        self.path = Path(output_dir) / CSV_NAME
        if not self.enabled:
            return
        self.delay = injected_delay(runtime.process_index)
        self.hosts = gather_texts(runtime, socket.gethostname())
        self.detector = StragglerDetector(
            config.straggler_factor, config.straggler_chunks, self.hosts, config.straggler_min_s
        )
        self.devices = jax.local_devices()
        if self.root:
            self.csv = TelemetryCsv(self.path, append=resumed)
            if config.port is not None:
                self.metrics = RunMetrics(config.port, config.address)
                log.info(
                    "telemetry: Prometheus metrics on http://%s:%d/metrics",
                    config.address, self.metrics.port,
                )  # fmt: skip
        self._start = self._mark = time.perf_counter()

    def begin(self) -> None:
        """The run loop is about to start its first chunk."""
        self._start = self._mark = time.perf_counter()

    def probes_state(self, compiling: bool) -> bool:
        """Whether the next ``after_chunk`` times a halo exchange of the chunk's state: the
        first timed chunk, then every ``halo_every`` chunks (all ranks count chunks alike). The
        run loop keeps such a chunk end synchronous (the state must still be there)."""
        return (
            self.enabled
            and self.exchange is not None
            and not compiling
            and (self.chunk - 1) % self.config.halo_every == 0
        )

    def after_chunk(
        self, step: int, steps: int, chunk_s: float, compiling: bool, rate: float,
        state: Any = None,
    ) -> None:  # fmt: skip
        """A chunk of ``steps`` steps ending at ``step`` took ``chunk_s`` s on this process
        (``compiling``: it compiled its program); ``rate``: updates/s so far; ``state``: the
        model's state (for the exchange probe). Every process must call this at every chunk
        end (it synchronises them)."""
        if not self.enabled:
            return
        if self.delay > 0:
            time.sleep(self.delay)  # test-only (SOLVER_TELEMETRY_INJECT_DELAY): slow host work
        arrived = time.perf_counter()
        host_s = max(0.0, arrived - self._mark - chunk_s)
        barrier(self.runtime)
        released = time.perf_counter()
        wait_s = released - arrived
        exchange_s = math.nan
        if state is not None and self.probes_state(compiling):
            seconds = self.exchange(state)
            exchange_s = math.nan if seconds is None else seconds
        in_use, peak = device_memory(self.devices)
        rss, rss_peak = host_memory()
        mine = dict(wall_s=released - self._start, chunk_s=chunk_s, host_s=host_s,
                    sync_wait_s=wait_s, exchange_s=exchange_s, device_bytes_in_use=in_use,
                    device_peak_bytes_in_use=peak, host_rss_bytes=rss,
                    host_peak_rss_bytes=rss_peak)  # fmt: skip
        table = gather_values(self.runtime, [mine[name] for name in VALUES])
        self._account(table)
        named, busy = [], (table[:, 1] + table[:, 2]) / steps
        if not compiling:
            self.busy_timed_s += chunk_s + host_s
            self.timed_busy.append([float(b) for b in busy])
            named = self.detector.update(step, busy, steps)
        if self.root:
            for s in named:
                log.warning(
                    "telemetry: straggler: rank %d on host %s is %.2fx slower than the median of "
                    "the other ranks (busy s per step) for %d chunks (steps %d-%d)",
                    s.rank, s.host, s.worst_ratio, s.chunks, s.first_step, s.last_step,
                )  # fmt: skip
            self.csv.append(self.chunk, step, steps, compiling, self.hosts, table)
            if self.metrics is not None:
                self.metrics.update(self.hosts, table, steps, step, step * self.dt, rate,
                                    self.detector.current, len(named))  # fmt: skip
        self.chunk += 1
        self._mark = time.perf_counter()
        self.own_s += self._mark - released
        if not compiling:
            self.own_timed_s += self._mark - released

    def _account(self, table: np.ndarray) -> None:
        column = {name: i for i, name in enumerate(VALUES)}
        waits = table[:, column["sync_wait_s"]]
        device = table[:, column["device_peak_bytes_in_use"]]
        rss = table[:, column["host_peak_rss_bytes"]]
        self.waits = waits.copy() if self.waits is None else self.waits + waits
        if self.peaks is None:
            self.peaks = np.stack([device, rss], axis=1)
        else:
            self.peaks = np.fmax(self.peaks, np.stack([device, rss], axis=1))

    def summary(self) -> dict | None:
        """run.json's ``telemetry`` section (None when disabled)."""
        if not self.enabled:
            return None
        ranks = []
        timed = np.asarray(self.timed_busy) if self.timed_busy else None
        for rank, host in enumerate(self.hosts):
            entry = {"rank": rank, "host": host}
            if timed is not None:
                entry["busy_s_per_step_median"] = float(np.median(timed[:, rank]))
            if self.waits is not None:
                entry["sync_wait_s_total"] = float(self.waits[rank])
                entry["device_peak_bytes"] = _int_or_none(self.peaks[rank, 0])
                entry["host_peak_rss_bytes"] = _int_or_none(self.peaks[rank, 1])
            ranks.append(entry)
        return {
            "csv": str(self.path),
            "chunks": self.chunk,
            "ranks": ranks,
            "straggler_factor": self.config.straggler_factor,
            "straggler_chunks": self.config.straggler_chunks,
            "straggler_min_s": self.config.straggler_min_s,
            "stragglers": [s.as_dict() for s in self.detector.episodes],
            "metrics_port": None if self.metrics is None else self.metrics.port,
            "overhead_s": self.own_s,
            "overhead_fraction": (
                self.own_timed_s / self.busy_timed_s if self.busy_timed_s > 0 else None
            ),
        }

    def close(self) -> None:
        if self.csv is not None:
            self.csv.close()
            self.csv = None
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None


def _int_or_none(value: float) -> int | None:
    return int(value) if math.isfinite(value) else None
