"""Collective canaries for the preflight: do the devices and links of this job work, and how fast.

Every function is called by every process of the job (they are collectives); results are plain
data for ``solver.preflight``. All work on the real back end of the run:

- ``allreduce_canary``: a sum over every device (``psum`` in ``shard_map`` over a 1-D mesh of
  all devices for ``xla``; ``mpi4jax.allreduce`` on the run's communicator for ``mpi``). Device
  i contributes i + 1, so every device must hold n (n + 1) / 2.
- ``ring_canary``: a ring of ``lax.ppermute`` over all devices (i -> i + 1 mod n); device i must
  receive the block of device i - 1. Needs the XLA collectives, which ``jax.distributed`` sets up
  for both back ends (gloo on CPUs, NCCL on GPUs).
- ``link_canary``: one exchange at a time between the two shards of each pair of face
  neighbours of the decomposition (``mpi4jax.sendrecv`` for ``mpi``, a ``ppermute`` that swaps
  just that pair for ``xla``), timed with a small message (latency) and a large one
  (bandwidth). One pair at a time, so a slow link shows as itself and not as the slowest link of
  a collective.

Also ``allgather_json`` / ``barrier`` for the preflight's own bookkeeping across processes.

A test-only delay (``delay_rank``/``delay_s``) makes the process that owns that device sleep
before each of its timed transfers: its partner waits in the exchange, as behind a slow link.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from solver.distributed.decomposition import AXIS_NAMES, Decomposition
from solver.distributed.host_collectives import allgather_json, barrier
from solver.distributed.runtime import Runtime

RING_AXIS = "ring"
SMALL_BYTES = 64  # latency probe: 16 float32
WARMUP = 2  # untimed calls (compilation, first connection) before the timed ones


# ---------------------------------------------------------------------- results


@dataclass(frozen=True)
class CollectiveResult:
    """One collective canary.

    Attributes:
        name: "all-reduce" or "ppermute ring".
        ok: every device held the expected values.
        devices: devices taking part.
        time_us: median wall time of one call (microseconds), slowest process.
        bandwidth_mbps: for the ring, bytes sent per device / time (MB/s = 1e6 B/s); else None.
        detail: what was wrong (devices and values), empty when ok.
    """

    name: str
    ok: bool
    devices: int
    time_us: float
    bandwidth_mbps: float | None
    detail: str


@dataclass(frozen=True)
class LinkResult:
    """One pair of face-neighbour shards.

    Attributes:
        a, b: the two shards (= MPI ranks / device indices in the mesh), a < b.
        axis: the mesh axis they neighbour along ("x", "y", "z").
        latency_us: median time of one exchange of SMALL_BYTES (microseconds).
        bandwidth_mbps: message bytes / median time of one exchange of the large message (MB/s).
        ok: the data that arrived is the data sent, both ways.
    """

    a: int
    b: int
    axis: str
    latency_us: float
    bandwidth_mbps: float
    ok: bool

    def as_dict(self) -> dict:
        return asdict(self)


def _median_us(times: list[float]) -> float:
    return statistics.median(times) * 1e6


def _timed(call: Callable[[], object], repeats: int, before: Callable[[], None]) -> list[float]:
    out = []
    for _ in range(WARMUP):
        jax.block_until_ready(call())
    for _ in range(repeats):
        start = time.perf_counter()
        before()  # inside the window: the delayed process's own time includes it too
        jax.block_until_ready(call())
        out.append(time.perf_counter() - start)
    return out


def _all_devices_mesh() -> Mesh:
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return Mesh(np.array(devices), (RING_AXIS,))


def _ring_array(mesh: Mesh, width: int, value: Callable[[int], float]) -> jax.Array:
    """(n, width) float32 sharded over the ring: row i on device i, filled with value(i)."""
    n = mesh.devices.size
    sharding = NamedSharding(mesh, P(RING_AXIS))

    def block(index):
        rows = range(n)[index[0]]
        return np.stack([np.full(width, value(i), np.float32) for i in rows])

    return jax.make_array_from_callback((n, width), sharding, block)


def _local_rows(array: jax.Array, mesh: Mesh) -> dict[int, np.ndarray]:
    """Ring position -> this process's row of ``array``."""
    out = {}
    for shard in array.addressable_shards:
        start = shard.index[0].start or 0
        for k, row in enumerate(np.asarray(shard.data)):
            out[start + k] = row
    return out


# ---------------------------------------------------------------------- all-reduce and ring


def allreduce_canary(runtime: Runtime, repeats: int = 10) -> CollectiveResult:
    """Sum over all devices; see the module docstring."""
    n = runtime.device_count()
    expected = n * (n + 1) / 2
    if runtime.comm is not None and runtime.process_count > 1:
        import mpi4jax
        from mpi4py import MPI

        mine = jnp.full((4,), runtime.process_index + 1.0, jnp.float32)
        reduce = jax.jit(lambda x: mpi4jax.allreduce(x, op=MPI.SUM, comm=runtime.comm))
        times = _timed(lambda: reduce(mine), repeats, lambda: None)
        got = {runtime.process_index: float(np.asarray(reduce(mine))[0])}
    else:
        mesh = _all_devices_mesh()
        x = _ring_array(mesh, 4, lambda i: i + 1.0)
        reduce = jax.jit(
            jax.shard_map(
                lambda b: lax.psum(b, RING_AXIS), mesh=mesh, in_specs=P(RING_AXIS),
                out_specs=P(RING_AXIS),
            )
        )  # fmt: skip
        times = _timed(lambda: reduce(x), repeats, lambda: None)
        got = {i: float(row[0]) for i, row in _local_rows(reduce(x), mesh).items()}
    wrong = {i: v for i, v in got.items() if v != expected}
    return _gathered(runtime, "all-reduce", n, times, None, wrong, expected)


def ring_canary(runtime: Runtime, message_bytes: int, repeats: int = 5) -> CollectiveResult:
    """``ppermute`` i -> i + 1 over all devices with ``message_bytes`` per device."""
    mesh = _all_devices_mesh()
    n = mesh.devices.size
    width = max(1, message_bytes // 4)
    x = _ring_array(mesh, width, lambda i: i + 1.0)
    perm = [(i, (i + 1) % n) for i in range(n)]
    ring = jax.jit(
        jax.shard_map(
            lambda b: lax.ppermute(b, RING_AXIS, perm), mesh=mesh, in_specs=P(RING_AXIS),
            out_specs=P(RING_AXIS),
        )
    )  # fmt: skip
    times = _timed(lambda: ring(x), repeats, lambda: None)
    rows = _local_rows(ring(x), mesh)
    wrong = {
        i: float(row[0])
        for i, row in rows.items()
        if not np.all(row == np.float32((i - 1) % n + 1.0))
    }
    return _gathered(runtime, "ppermute ring", n, times, width * 4, wrong, None)


def _gathered(
    runtime: Runtime,
    name: str,
    n: int,
    times: list[float],
    message_bytes: int | None,
    wrong: dict[int, float],
    expected: float | None,
) -> CollectiveResult:
    every = allgather_json(runtime, {"us": _median_us(times), "wrong": list(wrong.items())})
    time_us = max(e["us"] for e in every)
    bad = sorted((int(i), v) for e in every for i, v in e["wrong"])
    detail = ""
    if bad:
        what = f"expected {expected:g}" if expected is not None else "expected its predecessor's"
        detail = "; ".join(f"device {i} got {v:g}" for i, v in bad) + f" ({what})"
    bandwidth = message_bytes / (time_us * 1e-6) / 1e6 if message_bytes else None
    return CollectiveResult(name, not bad, n, time_us, bandwidth, detail)


# ---------------------------------------------------------------------- links


def neighbour_pairs(decomposition: Decomposition) -> list[tuple[int, int, str]]:
    """Distinct pairs (a, b, axis), a < b, of shards that share a face (periodic over the mesh),
    in axis order, then by a."""
    pairs: dict[tuple[int, int], str] = {}
    for axis, m in enumerate(decomposition.mesh):
        if m == 1:
            continue
        for r in range(decomposition.shards):
            coords = list(decomposition.coords(r))
            coords[axis] += 1
            other = decomposition.rank(coords)
            key = (min(r, other), max(r, other))
            pairs.setdefault(key, AXIS_NAMES[axis])
    return [(a, b, axis) for (a, b), axis in pairs.items()]


def link_canary(
    runtime: Runtime,
    decomposition: Decomposition,
    message_bytes: int,
    repeats: int = 5,
    delay_rank: int | None = None,
    delay_s: float = 0.0,
) -> list[LinkResult]:
    """Latency and bandwidth of every face-neighbour pair, one pair at a time (every process
    calls this; every process gets the whole list).

    Args:
        message_bytes: size of the bandwidth message (bytes).
        repeats: timed exchanges per message size (the median counts).
        delay_rank, delay_s: test-only: the owner of shard ``delay_rank`` sleeps ``delay_s``
            seconds before each timed exchange of its links.
    """
    pairs = neighbour_pairs(decomposition)
    if not pairs:
        return []
    if runtime.comm is not None and runtime.process_count > 1:
        measure = _mpi_pair
    else:
        measure = functools.partial(_xla_pair, _all_devices_mesh())
    mine = []
    for a, b, axis in pairs:
        barrier(runtime)
        record = measure(runtime, a, b, message_bytes, repeats, delay_rank, delay_s)
        if record is not None:
            mine.append([a, b, axis, *record])
    results: dict[tuple[int, int], LinkResult] = {}
    for rows in allgather_json(runtime, mine):
        for a, b, axis, small_us, large_us, size, ok in rows:
            old = results.get((a, b))
            small = max(small_us, old.latency_us) if old else small_us
            bw = size / (large_us * 1e-6) / 1e6
            bw = min(bw, old.bandwidth_mbps) if old else bw
            results[(a, b)] = LinkResult(a, b, axis, small, bw, ok and (old.ok if old else True))
    return [results[(a, b)] for a, b, _ in pairs if (a, b) in results]


def _sleeper(owner: bool, delay_s: float) -> Callable[[], None]:
    if owner and delay_s > 0:
        return lambda: time.sleep(delay_s)
    return lambda: None


def _mpi_pair(runtime, a, b, message_bytes, repeats, delay_rank, delay_s):
    """mpi4jax.sendrecv between ranks a and b; (small_us, large_us, bytes, ok) on a and b."""
    import mpi4jax

    rank = runtime.process_index
    if rank not in (a, b):
        return None
    partner = b if rank == a else a
    exchange = jax.jit(
        lambda x: mpi4jax.sendrecv(
            x, jnp.empty_like(x), partner, partner, sendtag=7, recvtag=7, comm=runtime.comm
        )
    )
    before = _sleeper(rank == delay_rank, delay_s)
    out = []
    ok = True
    for size in (SMALL_BYTES, message_bytes):
        x = jnp.full((max(1, size // 4),), rank + 1.0, jnp.float32)
        out.append(_median_us(_timed(lambda x=x: exchange(x), repeats, before)))
        ok = ok and bool(np.all(np.asarray(exchange(x)) == partner + 1.0))
    return out[0], out[1], max(1, message_bytes // 4) * 4, ok


def _xla_pair(mesh, runtime, a, b, message_bytes, repeats, delay_rank, delay_s):
    """A ppermute that swaps devices a and b only; every process runs it, the processes that
    own a or b report (small_us, large_us, bytes, ok)."""
    devices = list(mesh.devices.ravel())
    owners = {devices[a].process_index, devices[b].process_index}
    me = jax.process_index()
    swap = jax.jit(
        jax.shard_map(
            lambda x: lax.ppermute(x, RING_AXIS, [(a, b), (b, a)]), mesh=mesh,
            in_specs=P(RING_AXIS), out_specs=P(RING_AXIS),
        )
    )  # fmt: skip
    delayed = delay_rank in (a, b) and devices[delay_rank].process_index == me
    before = _sleeper(delayed, delay_s)
    out = []
    ok = True
    for size in (SMALL_BYTES, message_bytes):
        x = _ring_array(mesh, max(1, size // 4), lambda i: i + 1.0)
        out.append(_median_us(_timed(lambda x=x: swap(x), repeats, before)))
        rows = _local_rows(swap(x), mesh)
        for i, partner in ((a, b), (b, a)):
            if i in rows:
                ok = ok and bool(np.all(rows[i] == partner + 1.0))
    if me not in owners:
        return None
    return out[0], out[1], max(1, message_bytes // 4) * 4, ok
