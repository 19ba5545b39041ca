"""The numerical canary: a short fixed fluid run on the job's decomposition, checked bit for bit.

A periodic box with a small random flow (TRT collision, omega 1.6, float32) runs ``STEPS[d]``
steps on the requested mesh and back end. Decomposed runs of this project equal the 1-device run
bitwise (tests/test_distributed_equality.py), so every shard's block of the final populations
must have the sha256 of the same block of the 1-device run, which process 0 computes on its own
device. That reference is compared with the checksum stored for this platform in
data/preflight/canary.json (bitwise; if only the bits differ but the sums agree to
``STORED_RTOL``, a warning: another compiler or CPU instruction set rounds differently). With no
stored value for the platform (e.g. a GPU kind not recorded yet) the report says so;
``python -m solver.preflight --record-canary`` on one process records it.

The grid is fixed (``SHAPES``) so the stored checksum applies; a mesh that does not divide it
gets the next larger grid that it divides, which has no stored value.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import jax
import numpy as np

from kernels.lattices import lattice_by_name
from solver.distributed.decomposition import MIN_LOCAL_CELLS, choose_mesh
from solver.distributed.distribution import Distribution, distribute
from solver.distributed.host_collectives import allgather_json
from solver.distributed.runtime import Runtime
from solver.errors import ConfigError
from solver.fluid.setup import FluidSetup
from solver.fluid.step import initial_state, make_chunk, make_geometry

STORED = Path(__file__).resolve().parents[2] / "data" / "preflight" / "canary.json"
SHAPES = {2: (48, 48), 3: (24, 24, 24)}  # cells; divisible by 1, 2, 3, 4, 6, 8, 12 (24 in 2D)
STEPS = {2: 40, 3: 12}
OMEGA = 1.6
SEED = 20240917
DTYPE = "float32"
# the stored sums may differ by rounding (another compiler or instruction set); a device that
# computes wrong changes them by far more
STORED_RTOL = 1e-6


def canary_key(platform: str, device_kind: str, lattice: str, shape, steps: int) -> str:
    return f"{platform}/{device_kind}/{lattice}/{'x'.join(map(str, shape))}/{steps}"


def canary_grid(mesh_spec, d: int, devices: int) -> tuple[int, ...]:
    """The fixed grid, or the next larger one the requested mesh divides."""
    shape = SHAPES[d]
    try:
        choose_mesh(mesh_spec, shape, devices)
        return shape
    except ConfigError:
        if isinstance(mesh_spec, str):  # a preset on a count that does not divide 48 (5, 7, ...)
            parts = [devices] + [1] * (d - 1)
        else:
            parts = list(mesh_spec) + [1] * (d - len(mesh_spec))
        return tuple(
            max(math.ceil(n / m) * m, MIN_LOCAL_CELLS * m) if m > 1 else n
            for n, m in zip(shape, parts[:d], strict=True)
        )


def initial_fields(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(density (*shape), velocity (d, *shape)) in lattice units, the same on every process."""
    rng = np.random.default_rng(SEED)
    density = 1.0 + 0.01 * rng.standard_normal(shape)
    velocity = 0.02 * rng.standard_normal((len(shape), *shape))
    return density.astype(DTYPE), velocity.astype(DTYPE)


def checksum(block: np.ndarray) -> dict:
    """sha256 of the float32 bytes (C order), the sum and the sum of squares (float64)."""
    data = np.ascontiguousarray(block, dtype=np.float32)
    wide = data.astype(np.float64)
    return {
        "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
        "sum": float(wide.sum()),
        "sum_squares": float((wide * wide).sum()),
        "nonfinite": int(data.size - np.isfinite(data).sum()),
    }


def _local_blocks(dist: Distribution, populations) -> list[tuple[int, str, np.ndarray]]:
    """(shard, device, block (q, *local_shape)) of every shard this process holds."""
    if dist.backend == "single":
        return [(0, str(jax.devices()[0]), np.asarray(populations))]
    if dist.backend == "mpi":
        rank = dist.runtime.process_index
        return [(rank, str(jax.local_devices()[0]), np.asarray(populations))]
    decomposition = dist.decomposition
    blocks = {
        tuple((s.start, s.stop) for s in decomposition.block(r)): r
        for r in range(decomposition.shards)
    }
    out = []
    for shard in populations.addressable_shards:
        index = tuple(
            (s.start or 0, n if s.stop is None else s.stop)
            for s, n in zip(shard.index[1:], decomposition.shape, strict=True)
        )
        out.append((blocks[index], str(shard.device), np.asarray(shard.data)))
    return sorted(out, key=lambda item: item[0])


def run_canary(
    runtime: Runtime, mesh_spec, lattice_name: str, corrupt: int | None = None
) -> dict | None:
    """Run the canary on every process; process 0 gets the result, the others None.

    Result keys: lattice, shape, steps, mesh, backend, shards (one record per shard: shard,
    rank, device, sha256, sum, sum_squares, nonfinite, ok), reference (sha256, sum, stored:
    "match" | "close" | "differs" | "none", key), problems (lines naming the ranks), warnings.

    Args:
        corrupt: test-only: the shard whose block gets one bit flipped before its checksum.

    Raises:
        ConfigError: a mesh that cannot run here (as the solver would refuse it).
    """
    lattice = lattice_by_name(lattice_name)
    shape = canary_grid(mesh_spec, lattice.d, runtime.device_count())
    steps = STEPS[lattice.d]
    setup = FluidSetup(lattice=lattice, shape=shape, omega=OMEGA, dtype=DTYPE, collision="trt")
    density, velocity = initial_fields(shape)
    dist = distribute(runtime, mesh_spec, shape)
    state = initial_state(setup, dist.put(density, 0, DTYPE), dist.put(velocity, 1, DTYPE))
    out, _ = dist.chunk(setup)(state, dist.geometry(setup), steps)
    mine = []
    for shard, device, block in _local_blocks(dist, out.populations):
        if shard == corrupt:
            block = block.copy()
            block.reshape(-1).view(np.uint32)[block.size // 2] ^= 1
        mine.append({"shard": shard, "rank": runtime.process_index, "device": device,
                     **checksum(block)})  # fmt: skip
    every = [record for records in allgather_json(runtime, mine) for record in records]
    if not runtime.is_root:
        return None
    if dist.backend == "single":
        reference = np.asarray(out.populations)
        if corrupt == 0:  # the corrupted block is not the reference
            reference = _reference(setup, density, velocity, steps)
    else:
        reference = _reference(setup, density, velocity, steps)
    device = jax.local_devices()[0]
    key = canary_key(device.platform, device.device_kind, lattice.name, shape, steps)
    result = {
        "lattice": lattice.name,
        "shape": list(shape),
        "steps": steps,
        "mesh": list(dist.decomposition.mesh),
        "backend": dist.backend,
        "shards": sorted(every, key=lambda r: r["shard"]),
        "problems": [],
        "warnings": [],
    }
    _compare_shards(result, reference, dist)
    _compare_stored(result, checksum(reference), key)
    return result


def _reference(setup: FluidSetup, density, velocity, steps: int) -> np.ndarray:
    """The 1-device run on this process's first device."""
    state = initial_state(setup, density, velocity)
    out, _ = jax.jit(make_chunk(setup), static_argnums=2)(state, make_geometry(setup), steps)
    return np.asarray(out.populations)


def _compare_shards(result: dict, reference: np.ndarray, dist: Distribution) -> None:
    bad = []
    for record in result["shards"]:
        block = reference[(slice(None), *dist.decomposition.block(record["shard"]))]
        expected = checksum(block)
        record["ok"] = record["sha256"] == expected["sha256"]
        if not record["ok"]:
            bad.append(record)
            record["sum_difference"] = record["sum"] - expected["sum"]
    for record in bad:
        where = dist.decomposition.block(record["shard"])
        expected = checksum(reference[(slice(None), *where)])["sha256"]
        cells = " x ".join(f"[{s.start}:{s.stop})" for s in where)
        result["problems"].append(
            f"rank {record['rank']} ({record['device']}) computed shard {record['shard']} "
            f"(cells {cells}) differently from the 1-device reference on rank 0: sha256 "
            f"{record['sha256'][:12]} != {expected[:12]}"
            f", sum differs by {record['sum_difference']:.3g}, {record['nonfinite']} non-finite"
        )
    if bad and len(bad) == len(result["shards"]) > 1:
        result["problems"].append(
            "every shard differs from the reference: suspect rank 0's device, which computed it"
        )


def _compare_stored(result: dict, reference: dict, key: str) -> None:
    stored = load_stored().get(key)
    result["reference"] = {**reference, "key": key, "computed_on": "rank 0"}
    if stored is None:
        result["reference"]["stored"] = "none"
        result["warnings"].append(
            f"no stored checksum for {key}: the 1-device reference was computed on rank 0 only "
            "(record one with --record-canary)"
        )
        return
    if stored["sha256"] == reference["sha256"]:
        result["reference"]["stored"] = "match"
        return
    close = all(
        math.isclose(stored[k], reference[k], rel_tol=STORED_RTOL) for k in ("sum", "sum_squares")
    )
    result["reference"]["stored"] = "close" if close else "differs"
    text = (
        f"the 1-device reference on rank 0 differs from the stored checksum for {key}: sum "
        f"{reference['sum']:.9g} vs {stored['sum']:.9g}, sum of squares "
        f"{reference['sum_squares']:.9g} vs {stored['sum_squares']:.9g}"
    )
    if close:
        result["warnings"].append(f"{text} (within {STORED_RTOL:g}: rounding, not a fault)")
    else:
        result["problems"].append(f"{text}: rank 0's device computes wrong")


def load_stored(path: Path = STORED) -> dict:
    """key -> stored checksum record."""
    if not path.exists():
        return {}
    return json.loads(path.read_text())["checksums"]


def record(lattice_name: str, path: Path = STORED) -> tuple[str, dict]:
    """Compute the 1-device reference here and store its checksum (one process)."""
    lattice = lattice_by_name(lattice_name)
    shape, steps = SHAPES[lattice.d], STEPS[lattice.d]
    setup = FluidSetup(lattice=lattice, shape=shape, omega=OMEGA, dtype=DTYPE, collision="trt")
    density, velocity = initial_fields(shape)
    values = checksum(_reference(setup, density, velocity, steps))
    values.pop("nonfinite")
    device = jax.local_devices()[0]
    key = canary_key(device.platform, device.device_kind, lattice.name, shape, steps)
    data = json.loads(path.read_text()) if path.exists() else {"checksums": {}}
    data["checksums"][key] = {**values, "jax": jax.__version__}
    data["checksums"] = dict(sorted(data["checksums"].items()))
    path.write_text(json.dumps(data, indent=2) + "\n")
    return key, values
