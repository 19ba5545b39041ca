"""Memory probes of this process: device memory (JAX's allocator statistics) and host RSS.

Device memory comes from ``jax.Device.memory_stats()``: on GPUs (and TPUs) a dict with
``bytes_in_use`` and ``peak_bytes_in_use``; on CPUs it returns None (jax 0.10), and some back
ends raise instead, so both mean "not known" (NaN in telemetry.csv). Host RSS is read from
``/proc/self/statm`` (Linux), its peak from ``resource.getrusage`` (ru_maxrss); where there is no
/proc the peak stands for both.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable
from pathlib import Path

PROC_STATM = Path("/proc/self/statm")  # Linux: sizes in pages; the second is the resident set
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def device_memory(devices: Iterable) -> tuple[float, float]:
    """(bytes in use, peak bytes in use) summed over ``devices`` (this process's devices);
    NaN for what the back end does not report (CPUs)."""
    in_use = peak = 0.0
    known = False
    for device in devices:
        try:
            stats = device.memory_stats()
        except Exception:  # noqa: BLE001 - a back end without statistics may raise anything
            stats = None
        if not stats:
            continue
        known = True
        in_use += float(stats.get("bytes_in_use", math.nan))
        peak += float(stats.get("peak_bytes_in_use", math.nan))
    return (in_use, peak) if known else (math.nan, math.nan)


def host_memory() -> tuple[float, float]:
    """(resident set size, its peak) of this process in bytes."""
    import resource

    peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    peak *= 1 if sys.platform == "darwin" else 1024  # bytes on macOS, kB elsewhere
    try:
        with PROC_STATM.open("rb") as fh:
            resident_pages = int(fh.read().split()[1])
        rss = float(resident_pages * PAGE_BYTES)
        return rss, max(rss, peak)  # ru_maxrss may lag the present RSS by a page or two
    except (OSError, IndexError, ValueError):
        return peak, peak
