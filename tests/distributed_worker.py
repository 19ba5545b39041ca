"""Run the scenarios on one device and decomposed; print one JSON line per comparison.

    python tests/distributed_worker.py --meshes 2,1 1,2 ...        (fake CPU devices, xla halo)
    mpirun -n 4 python tests/distributed_worker.py --halo mpi --meshes 2,2 4,1 ...

Every process computes the 1-device reference itself, on its own device, and process 0 compares
the gathered decomposed populations with it. Meshes that need another number of processes than
are running, or more devices than exist, are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from distributed_scenarios import BOXED, SCENARIOS, scenario  # noqa: E402

from solver.distributed.decomposition import Decomposition  # noqa: E402
from solver.distributed.distribution import Distribution  # noqa: E402
from solver.distributed.runtime import start  # noqa: E402
from solver.fluid import boundary_rules  # noqa: E402
from solver.fluid.step import initial_state, make_chunk, make_geometry  # noqa: E402

DENSE_FRACTION = boundary_rules.DENSE_FRACTION


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--halo", default="xla")
    parser.add_argument("--lattices", nargs="+", default=["D2Q9", "D3Q19", "D3Q27"])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--meshes", nargs="+", required=True, help="e.g. 2,1 or 2,2,1")
    # 2D: 5 steps, the scan of the chunk included. (With 2 steps, one traced step and no scan,
    # the periodic D2Q9 case with a body force is not bitwise on 1 x 2 blocks: XLA:CPU contracts
    # the force terms into FMAs differently for the two block shapes; measured 3.7e-9.)
    parser.add_argument("--steps", type=int, default=5, help="steps in 2D")
    # 3D: 2 steps hold every code path once (entry collision, one full step with halos, the
    # final pull) and halve the 3D compile time, which dominates these checks
    parser.add_argument("--steps-3d", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument(
        "--overlap", action="store_true", help="the halo messages from planes collided apart"
    )
    args = parser.parse_args()
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    runtime = start(args.halo)
    for lattice in args.lattices:
        for name in args.scenarios:
            setup, density, velocity = scenario(name, lattice, args.dtype)
            boundary_rules.DENSE_FRACTION = 1.0 if name in BOXED else DENSE_FRACTION
            steps = args.steps if setup.lattice.d == 2 else args.steps_3d
            if runtime.is_root:  # only process 0 compares
                state = initial_state(setup, density, velocity)
                reference, ref_forces = jax.jit(make_chunk(setup), static_argnums=2)(
                    state, make_geometry(setup), steps
                )
                reference = np.asarray(reference.populations)
                ref_forces = np.asarray(ref_forces)
            for text in args.meshes:
                mesh = tuple(int(m) for m in text.split(","))
                if len(mesh) != setup.lattice.d:
                    continue
                shards = math.prod(mesh)
                if runtime.process_count > 1 and shards != runtime.process_count:
                    continue
                if shards > runtime.device_count():
                    continue
                dist = Distribution(runtime, Decomposition(setup.shape, mesh), args.overlap)
                state = initial_state(
                    setup, dist.put(density, 0, setup.dtype), dist.put(velocity, 1, setup.dtype)
                )
                out, forces = dist.chunk(setup)(state, dist.geometry(setup), steps)
                populations = dist.gather(out.populations, 1)
                forces = np.asarray(
                    forces if forces.is_fully_addressable else forces.addressable_data(0)
                )
                if not dist.is_root:
                    continue
                diff = float(np.max(np.abs(populations - reference)))
                scale = float(np.max(np.abs(ref_forces))) or 1.0
                record = {
                    "lattice": lattice,
                    "scenario": name,
                    "mesh": list(mesh),
                    "backend": dist.backend,
                    "processes": runtime.process_count,
                    "steps": steps,
                    "bitwise": bool(np.array_equal(populations, reference)),
                    "max_abs_diff": diff,
                    "force_rel_diff": float(np.max(np.abs(forces - ref_forces))) / scale,
                    "finite": bool(np.isfinite(reference).all()),
                }
                print("RESULT " + json.dumps(record), flush=True)
    if os.environ.get("OMPI_COMM_WORLD_SIZE") is None and runtime.process_count > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
