"""Worker of tests/test_pallas_split.py, run with 8 fake CPU devices: the Pallas kernel's chunk
split along x (interpret mode; one shard with the periodic halo, and 2 shards with the xla halo
inside ``shard_map``) against the one-device Pallas chunk; one ``RESULT {json}`` line per
comparison."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from native_split_worker import random_state  # noqa: E402
from test_native_kernel import _setup  # noqa: E402

from solver.distributed.decomposition import Decomposition  # noqa: E402
from solver.distributed.halo import XlaHalo  # noqa: E402
from solver.fluid.padded import SINGLE  # noqa: E402
from solver.fluid.pallas_split import make_pallas_split_chunk  # noqa: E402
from solver.fluid.pallas_step import make_pallas_chunk  # noqa: E402
from solver.fluid.step import FluidState, make_geometry  # noqa: E402

BLOCK = 16  # cells per program: small grids, several programs
# (lattice, shape, dtype, storage, collision, walls (2: moving), force, les, shards, steps)
CASES = [
    ("D2Q9", (8, 6), "float64", None, "trt", 2, True, False, (1, 2), (3, 2)),
    ("D2Q9", (8, 6), "float32", "float16", "bgk", 1, False, False, (2,), (3,)),
]
# with --long (make test-long): a 3D lattice with the Smagorinsky model
LONG_CASES = [("D3Q19", (4, 4, 6), "float64", None, "trt", 2, True, True, (2,), (3,))]


def split_run(setup, shards: int, n: int):
    """The split chunk on ``shards`` slabs: a function of (state, geometry)."""
    shape = setup.shape
    if shards == 1:
        local = make_pallas_split_chunk(setup, shape, SINGLE, BLOCK)
        return jax.jit(lambda s, g: local(s, g, n))
    mesh_shape = (shards,) + (1,) * (len(shape) - 1)
    dec = Decomposition(shape, mesh_shape)
    mesh = Mesh(np.array(jax.devices()[:shards]).reshape(mesh_shape), dec.axis_names)
    local = make_pallas_split_chunk(setup, dec.local_shape, XlaHalo(dec), BLOCK)
    names = dec.axis_names
    spec = FluidState(populations=P(None, *names), time=P())

    def place(arr, dtype, lead, face):
        return P(*[None] * lead, *[name for a, name in enumerate(names) if a != face])

    return jax.jit(
        jax.shard_map(
            lambda s, g: local(s, g, n),
            mesh=mesh,
            in_specs=(spec, make_geometry(setup, place)),
            out_specs=(spec, P()),
            check_vma=False,
        )
    )


def main() -> None:
    cases = CASES + (LONG_CASES if "--long" in sys.argv else [])
    for lat, shape, dtype, storage, collision, walls, force, les, shard_list, steps in cases:
        setup = _setup(lat, shape, dtype, collision, walls, force)
        if storage:
            setup = replace(setup, storage=storage)
        if les:
            setup = replace(setup, les="smagorinsky", les_cs=0.17)
        state, geometry = random_state(setup), make_geometry(setup)
        whole = jax.jit(make_pallas_chunk(setup, block=BLOCK), static_argnums=2)
        for n in steps:
            a = np.asarray(whole(state, geometry, n)[0].populations)
            for shards in shard_list:
                b = np.asarray(split_run(setup, shards, n)(state, geometry)[0].populations)
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
                result = {
                    "case": f"{lat} {collision} {storage or dtype} walls={walls} les={les}",
                    "shards": shards,
                    "steps": n,
                    "bitwise": bool(np.array_equal(a.view(np.uint8), b.view(np.uint8))),
                    "max_abs_diff": float(diff.max()),
                    "finite": bool(np.all(np.isfinite(a.astype(np.float64)))),
                }
                print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
