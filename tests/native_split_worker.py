"""Worker of tests/test_native_split.py, run with 8 fake CPU devices: the native kernel's chunk
split along x over 2 and 4 shards (xla halo inside ``shard_map``) against the one-device
chunk; one ``RESULT {json}`` line per comparison."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_native_kernel import _setup  # noqa: E402

from solver.distributed.decomposition import Decomposition  # noqa: E402
from solver.distributed.halo import XlaHalo  # noqa: E402
from solver.fluid.inplace_split import make_split_chunk  # noqa: E402
from solver.fluid.inplace_step import kernel_rates, make_inplace_chunk, plane_shift  # noqa: E402
from solver.fluid.step import FluidState, initial_state, make_geometry  # noqa: E402

# (lattice, shape, dtype, storage, collision, walls (2: moving), force, les, shards, steps)
CASES = [
    ("D2Q9", (12, 10), "float64", None, "trt", 2, True, False, 4, (7, 4)),
    ("D3Q19", (8, 6, 10), "float64", None, "trt", 2, True, True, 2, (5, 4)),
    ("D3Q19", (8, 6, 10), "float32", "float16", "bgk", 1, False, False, 4, (5,)),
    # blocks whose planes are a multiple of 1 KiB: chunks of 8 steps or more run on rotated
    # planes (inplace_step.plane_shift), 7 on the natural layout
    ("D2Q9", (64, 16), "float64", None, "trt", 2, True, False, 2, (9, 8)),
    ("D3Q19", (16, 8, 16), "float32", None, "trt", 2, True, False, 2, (9,)),
]


def random_state(setup) -> FluidState:
    """A random flow at equilibrium, solid nodes at rest (no XLA chunk to compile)."""
    rng = np.random.default_rng(0)
    rho = 1 + 0.01 * rng.standard_normal(setup.shape)
    u = 0.02 * rng.standard_normal((setup.lattice.d, *setup.shape))
    if setup.solid is not None:
        rho[setup.solid], u[:, setup.solid] = 1.0, 0.0
    return initial_state(setup, rho, u)


def main() -> None:
    for lat, shape, dtype, storage, collision, walls, force, les, shards, steps in CASES:
        setup = _setup(lat, shape, dtype, collision, walls, force)
        changes = {"storage": storage} if storage else {}
        if les:
            changes.update(les="smagorinsky", les_cs=0.17)
        setup = type(setup)(**{**setup.__dict__, **changes})
        state = random_state(setup)
        geometry = make_geometry(setup)
        whole = jax.jit(make_inplace_chunk(setup), static_argnums=2)
        mesh_shape = (shards,) + (1,) * (len(shape) - 1)
        dec = Decomposition(shape, mesh_shape)
        mesh = Mesh(np.array(jax.devices()[:shards]).reshape(mesh_shape), dec.axis_names)
        rates = kernel_rates(setup)
        local = make_split_chunk(
            setup, dec.local_shape, XlaHalo(dec), lambda: jax.lax.axis_index("x"), shards, *rates
        )
        spec = FluidState(populations=P(None, *dec.axis_names), time=P())
        names = dec.axis_names
        geo_spec = make_geometry(
            setup,
            lambda arr, dt, lead, face, names=names: P(
                *[None] * lead, *[n for a, n in enumerate(names) if a != face]
            ),
        )
        for n in steps:
            split = jax.jit(
                jax.shard_map(
                    lambda s, g, n=n, local=local: local(s, g, n),
                    mesh=mesh,
                    in_specs=(spec, geo_spec),
                    out_specs=(spec, P()),
                )
            )
            a = np.asarray(whole(state, geometry, n)[0].populations)
            b = np.asarray(split(state, geometry)[0].populations)
            result = {
                "case": f"{lat} {collision} {storage or dtype} walls={walls} les={les}",
                "shards": shards,
                "steps": n,
                "shift": plane_shift(setup, n, dec.local_shape),
                "bitwise": bool(np.array_equal(a.view(np.uint8), b.view(np.uint8))),
                "finite": bool(np.all(np.isfinite(a.astype(np.float64)))),
            }
            print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
