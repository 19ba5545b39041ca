"""Run the body scene on one device and decomposed; print one JSON line per comparison.

    python tests/body_decomposition_worker.py --meshes 2,2,2 8,1,1     (8 fake CPU devices)
    mpirun -n 2 python tests/body_decomposition_worker.py --meshes 2,1,1   (jax.distributed)
    python tests/body_decomposition_worker.py --overflow 2,2,2          (a too small buffer)
    python tests/body_decomposition_worker.py --save-reference ref.npz  (then --reference ref.npz)

Every process runs the single-device reference (solver.bodies.step) itself; process 0 compares.
Meshes needing more devices than exist, or (with several processes) another shard count than
the process count, are skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from kernels.neighbor_search import CellGrid  # noqa: E402
from kernels.rigid_body import Bodies  # noqa: E402
from solver.bodies import step as bs  # noqa: E402
from solver.distributed.bodies import BodyOverflowError, simulate_spatial  # noqa: E402
from solver.distributed.runtime import start  # noqa: E402

BOX = 0.2  # m, cube edge
RADII = (0.0095, 0.0115)  # m; reach 0.024 m fits the 0.025 m blocks of an [8, 1, 1] mesh
DENSITY, YOUNG, POISSON = 7800.0, 1.0e7, 0.3
SPEED = 3.0  # m/s, random initial velocities: bodies cross blocks and collide within 100 steps
DT = 1.0e-4  # s, a third of the Hertz bound (0.2 Rayleigh times ~ 3e-4 s)
SKIN = 1.0e-3  # m
# buffers for 216 bodies: twice the mean number per subdomain plus 20 (the random velocities
# thin and crowd blocks), all bodies within reach of the faces, generous messages
CAPACITIES = dict(ghost_capacity=150, migration_capacity=24, cell_capacity=12, max_partners=24)


def capacities(n: int, shards: int) -> dict:
    return {**CAPACITIES, "capacity": min(n, 2 * n // shards + 20)}


def scene(per_axis: int = 6, seed: int = 3) -> tuple[bs.BodySetup, Bodies]:
    """per_axis^3 spheres on a jittered lattice in a walled box, random velocities and spins,
    gravity, friction and rolling friction (every force path of the single-device step), one
    kinematic and one fixed body."""
    rng = np.random.default_rng(seed)
    spacing = BOX / per_axis
    axis = (np.arange(per_axis) + 0.5) * spacing
    centres = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    centres += rng.uniform(-0.1, 0.1, centres.shape) * (spacing - 2 * RADII[1])
    n = centres.shape[0]
    radius = rng.uniform(*RADII, n)
    mass = DENSITY * 4.0 / 3.0 * math.pi * radius**3
    inertia = 0.4 * mass * radius**2
    ones = np.ones(n)
    normals = np.concatenate([np.eye(3), -np.eye(3)])
    points = np.concatenate([np.zeros((3, 3)), np.full((3, 3), BOX)])
    grid = CellGrid.covering((0.0, 0.0, 0.0), (BOX,) * 3, BOX / 8, 12, 12)
    setup = bs.BodySetup(
        radius=radius,
        young=YOUNG * ones,
        poisson=POISSON * ones,
        restitution=rng.uniform(0.6, 0.9, n),
        friction=rng.uniform(0.3, 0.6, n),
        rolling_friction=0.01 * ones,
        grid=grid,
        dt=DT,
        skin=SKIN,
        gravity=(0.0, 0.0, -9.81),
        plane_point=points,
        plane_normal=normals,
        plane_friction=np.full(6, 0.4),
        plane_restitution=np.full(6, 0.8),
        plane_young=np.full(6, 1e8),
        plane_poisson=np.full(6, 0.3),
        plane_rolling_friction=np.full(6, 0.01),
    )
    velocity = rng.uniform(-SPEED, SPEED, (n, 3))
    angular_momentum = inertia[:, None] * rng.uniform(-50, 50, (n, 3))
    inverse_mass = 1.0 / mass
    inverse_inertia = np.repeat(1.0 / inertia[:, None], 3, axis=1)
    spin = np.zeros((n, 3))
    kinematic = np.zeros(n, bool)
    if per_axis >= 4:
        # lattice site (2, 2, 2): a kinematic body driven along +x across block faces;
        # site (3, 3, 3), next to the centre of the box: a fixed body (infinitely heavy)
        driven, fixed = (2 * per_axis + 2) * per_axis + 2, (3 * per_axis + 3) * per_axis + 3
        kinematic[driven] = True
        velocity[driven] = (SPEED, 0.0, 0.0)
        spin[driven] = (0.0, 0.0, 20.0)
        velocity[fixed] = angular_momentum[fixed] = inverse_inertia[fixed] = 0.0
        inverse_mass[fixed] = 0.0
    bodies = Bodies(
        position=jnp.asarray(centres),
        orientation=jnp.asarray(_unit(rng.standard_normal((n, 4)))),
        velocity=jnp.asarray(velocity),
        angular_momentum=jnp.asarray(angular_momentum),
        prescribed_angular_velocity=jnp.asarray(spin),
        inverse_mass=jnp.asarray(inverse_mass),
        inverse_inertia=jnp.asarray(inverse_inertia),
        kinematic=jnp.asarray(kinematic),
    )
    return setup, bodies


def _unit(q: np.ndarray) -> np.ndarray:
    return q / np.linalg.norm(q, axis=1, keepdims=True)


FIELDS = ("position", "velocity", "orientation", "angular_momentum")


def reference(setup: bs.BodySetup, bodies: Bodies, steps: int) -> dict:
    """The single-device run (solver.bodies.step): final fields by body id, kinetic energy."""
    chunk = jax.jit(bs.make_body_chunk(setup), static_argnums=1)
    state, diagnostics = chunk(bs.initial_state(setup, bodies), steps)
    message = bs.overflow_message(setup, state)
    if message:
        raise RuntimeError(f"reference overflowed: {message}")
    out = {name: np.asarray(getattr(state.bodies, name)) for name in FIELDS}
    out.update(
        force=np.asarray(state.force),
        torque=np.asarray(state.torque),
        contact_count=np.asarray(state.contact_count),
        kinetic_energy=np.asarray(diagnostics.kinetic_energy),
    )
    return out


def compare(ref: dict, result) -> dict:
    """Max |a - b| per field, also relative to the field's largest magnitude."""
    out = {}
    for name in (*FIELDS, "force", "torque"):
        a = ref[name]
        b = np.asarray(getattr(result.bodies, name) if name in FIELDS else getattr(result, name))
        diff = float(np.max(np.abs(a - b)))
        out[name] = {
            "max_abs_diff": diff,
            "rel_diff": diff / float(np.max(np.abs(a))),
            "bitwise": bool(np.array_equal(a, b)),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--meshes", nargs="*", default=[])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=None)
    parser.add_argument("--overflow", default=None, help="mesh to run with ghost_capacity 4")
    parser.add_argument("--reference", default=None, help=".npz of `reference` (else computed)")
    parser.add_argument("--save-reference", default=None, help="write the .npz and stop")
    args = parser.parse_args()
    if args.save_reference:
        setup, bodies = scene()
        np.savez(args.save_reference, steps=args.steps, **reference(setup, bodies, args.steps))
        return
    runtime = start("xla")  # before any JAX array exists (jax.distributed needs that)
    setup, bodies = scene()
    if args.reference:
        ref = dict(np.load(args.reference))
        assert int(ref["steps"]) == args.steps, "the reference ran another number of steps"
    elif args.meshes:
        ref = reference(setup, bodies, args.steps)
    for text in args.meshes:
        mesh = tuple(int(m) for m in text.split(","))
        shards = math.prod(mesh)
        if shards > jax.device_count():
            continue
        if runtime.process_count > 1 and shards != runtime.process_count:
            continue
        result = simulate_spatial(
            setup, bodies, args.steps, mesh, chunk=args.chunk, **capacities(setup.n_bodies, shards)
        )
        if not runtime.is_root:
            continue
        d = result.diagnostics
        record = {
            "mesh": list(mesh),
            "processes": runtime.process_count,
            "steps": args.steps,
            "fields": compare(ref, result),
            "contacts_equal": bool(np.array_equal(ref["contact_count"], result.contact_count)),
            "energy_rel_diff": float(
                np.max(np.abs(d.kinetic_energy - ref["kinetic_energy"]))
                / np.max(np.abs(ref["kinetic_energy"]))
            ),
            "migrated": int(np.sum(d.migrated)),
            "ghosts_max": int(np.max(d.ghosts)),
            "ghost_contacts": int(np.sum(d.ghost_contacts)),
            "contacts_max": int(np.max(d.contacts)),
            "overflow_max": np.asarray(result.overflow).max(axis=0).tolist(),
            "capacities": list(result.layout.capacities().values()),
        }
        print("RESULT " + json.dumps(record), flush=True)
    if args.overflow is not None:
        mesh = tuple(int(m) for m in args.overflow.split(","))
        caps = {**capacities(setup.n_bodies, math.prod(mesh)), "ghost_capacity": 4}
        try:  # 0 steps: the forces at time 0 (ghosts included) in the cheapest program
            simulate_spatial(setup, bodies, 0, mesh, **caps)
        except BodyOverflowError as err:
            print("OVERFLOW " + json.dumps({"message": str(err)}), flush=True)
    _shutdown(runtime)


def _shutdown(runtime) -> None:
    if os.environ.get("OMPI_COMM_WORLD_SIZE") is None and runtime.process_count > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
