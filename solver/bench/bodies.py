"""Throughput of the rigid-body step: dense sphere packings and an ensemble of small scenes.

    python -m solver.bench bodies [--sizes 10000,100000] [--ensemble 1024]
                                  [--ensemble-bodies 16] [--steps 20] [--repeats 3] [--json PATH]
                                  [--peer lammps] [--peer-steps 200] [--peer-ranks N]
                                  [--peer-dir DIR] [--diagnostics-every K]
                                  [--precision float64|float32] [--kernels xla,native]

Packings: n equal spheres (r = 1 mm, glass-like, Hertz-Mindlin with friction) on a simple cubic
lattice of spacing 2 r inside a box of six rigid walls, each centre jittered by up to
``JITTER`` r, so that about half the lattice neighbours start slightly overlapped, under
gravity (the packing settles and its contacts carry load). Float64 (``--precision float32``:
the body state in single precision, as ``bodies.precision``), dt half the stable step.
The real solver chunk (``solver.bodies.step.make_body_chunk``, the Verlet table rebuilt when a
sphere moved half the skin, the energy and momentum totals once per chunk as a scene run takes
them at its output steps, or every ``--diagnostics-every`` steps) is jitted with the step count
static and the state donated, as the run loop does; after one warm-up call ``repeats`` chunks of
``steps`` steps are timed, each right after one run of the memory-copy probe of ``solver.bench``
(float64), so that load from other processes affects both alike. Reported per size: body-steps/s
(median) and the time per step; for two or more sizes the ratio t(n_big)/t(n_small) per tenfold
increase of n (linear cost: 10).

Kernels: ``--kernels xla,native`` times each row with each body step (``bodies.kernel``: the XLA
chunk, or the C++ chunk of solver/bodies/native_step.py), the same scene and state, in one run.

Ensemble: ``ensemble`` independent scenes of ``ensemble_bodies`` spheres (a jittered column
dropping onto the floor of a small box), members differing in their jitter and restitution,
advanced by one vmapped chunk over the states and ``ContactParams``. Reported: member
body-steps/s.

Ceiling: a lower bound on the bytes a body-step must move (``bytes_per_body_step``: the state
read and written once, the pair table and its tangential springs read and written once, the
partner's kinematics gathered once per table slot) against the measured copy bandwidth gives the
body-steps/s that memory traffic alone would allow; the fraction of it reached is printed. The
count ignores the cell list and all intermediate arrays, so the true ceiling is lower and the
fraction an overestimate of how close the step is to the memory bound.

Peer: ``--peer lammps`` runs LAMMPS (Debian's ``lammps``) on each packing, with its neighbour
list rebuilt lazily (the solver's rule) and every step, on as many MPI ranks as cores, and prints
both rates side by side, one row per kernel (solver/bench/lammps_peer.py; the deck of 10^4
spheres is docs/lammps/in.bodies).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

RADIUS = 1e-3  # m
DENSITY = 2500.0  # kg/m^3 (glass)
YOUNG = 1e8  # Pa (soft enough for a step of ~1e-6 s at r = 1 mm)
POISSON = 0.25
FRICTION = 0.5
JITTER = 0.01  # of the radius: lattice neighbours overlap by up to 2 % of r
SKIN = 0.05  # of the radius: the search reach beyond contact
# spheres per cell: cells of 2.05 r are wider than the lattice spacing 2 r, so every ~40 sites two
# lattice planes share a cell along each axis (up to 2^3 spheres in one cell)
CAPACITY = 8
MAX_NEIGHBORS = 8  # partners j > i per sphere (3 on the lattice)
STATE_FLOATS = 19  # position 3, orientation 4, velocity 3, angular momentum 3, force 3, torque 3
PARTNER_FLOATS = 10  # gathered per table slot: position 3, velocity 3, angular velocity 3, radius
KERNELS = ("xla", "native")  # bodies.kernel


@dataclass(frozen=True)
class BodiesBenchRow:
    """One timed configuration. Rates are medians over the repeats; *_best the fastest."""

    kind: str  # "packing" or "ensemble"
    bodies: int  # per scene
    members: int  # scenes advanced together (1 for a packing)
    steps: int
    body_steps_per_s: float
    body_steps_per_s_best: float
    seconds_per_step: float
    bandwidth_gbs: float
    bytes_per_body_step: int
    ceiling_body_steps_per_s: float
    fraction: float
    contacts_per_body: float
    compile_s: float
    kernel: str = "xla"  # bodies.kernel of the chunk timed
    state_bytes_per_body: float = 0.0  # the chunk's state (bodies, pair table, springs) / bodies


def bytes_per_body_step(max_neighbors: int, planes: int, itemsize: int = 8) -> int:
    """Lower bound on the bytes one body-step moves (see the module docstring).

    State (STATE_FLOATS) read + written; pair table (int32) and tangential springs (3 floats per
    slot and per plane) read + written; PARTNER_FLOATS gathered per table slot.
    """
    state = 2 * STATE_FLOATS * itemsize
    table = 2 * max_neighbors * 4
    springs = 2 * 3 * (max_neighbors + planes) * itemsize
    gather = PARTNER_FLOATS * max_neighbors * itemsize
    return state + table + springs + gather


def _lattice_counts(n: int) -> tuple[int, int, int]:
    """Lattice sites per axis: a square base of about n^(1/3) and enough layers for n."""
    side = max(1, round(n ** (1 / 3)))
    return side, side, math.ceil(n / side**2)


def _box_walls(upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points and inward normals (6, 3) of the walls of the box [0, upper]."""
    eye = np.eye(3)
    points = np.concatenate([np.zeros((3, 3)), np.diag(upper)])
    return points, np.concatenate([eye, -eye])


def _spheres(position: np.ndarray) -> object:
    """Bodies (float64) of solid spheres of RADIUS at rest, identity orientation."""
    from kernels.rigid_body import Bodies

    n = position.shape[0]
    mass = DENSITY * 4.0 / 3.0 * math.pi * RADIUS**3
    inertia = 0.4 * mass * RADIUS**2
    orientation = np.zeros((n, 4))
    orientation[:, 0] = 1.0
    zeros = np.zeros((n, 3))
    return Bodies(
        position=jnp.asarray(position, jnp.float64),
        orientation=jnp.asarray(orientation, jnp.float64),
        velocity=jnp.asarray(zeros, jnp.float64),
        angular_momentum=jnp.asarray(zeros, jnp.float64),
        prescribed_angular_velocity=jnp.asarray(zeros, jnp.float64),
        inverse_mass=jnp.full((n,), 1.0 / mass, jnp.float64),
        inverse_inertia=jnp.full((n, 3), 1.0 / inertia, jnp.float64),
        kinematic=jnp.zeros((n,), bool),
    )


def build_scene(n: int, counts: tuple[int, int, int], seed: int) -> tuple[object, np.ndarray]:
    """(BodySetup, positions (n, 3) m): n jittered lattice spheres in a walled box, gravity on.

    ``counts`` sites per axis (their product >= n; the lowest layers are filled first).
    """
    from kernels.neighbor_search import CellGrid
    from solver.bodies.step import BodySetup, stable_time_step

    rng = np.random.default_rng(seed)
    spacing = 2.0 * RADIUS
    sites = np.stack(np.meshgrid(*(np.arange(c) for c in counts), indexing="ij"), -1)
    sites = sites.reshape(-1, 3)
    sites = sites[np.lexsort((sites[:, 0], sites[:, 1], sites[:, 2]))][:n]  # bottom layers first
    position = RADIUS * (1.0 + JITTER) + spacing * sites
    position = position + rng.uniform(-JITTER, JITTER, (n, 3)) * RADIUS
    upper = spacing * np.asarray(counts, float) + 2.0 * JITTER * RADIUS
    upper[2] += 4.0 * RADIUS  # head room above the top layer
    points, normals = _box_walls(upper)
    cell = 2.0 * RADIUS + SKIN * RADIUS
    grid = CellGrid.covering(np.zeros(3), upper, cell, CAPACITY, MAX_NEIGHBORS)

    def setup(dt: float) -> BodySetup:
        return BodySetup(
            radius=np.full(n, RADIUS),
            young=np.full(n, YOUNG),
            poisson=np.full(n, POISSON),
            restitution=np.full(n, 0.5),
            friction=np.full(n, FRICTION),
            rolling_friction=np.zeros(n),
            grid=grid,
            dt=dt,
            skin=SKIN * RADIUS,
            gravity=(0.0, 0.0, -9.81),
            plane_point=points,
            plane_normal=normals,
        )

    mass = np.full(n, DENSITY * 4.0 / 3.0 * math.pi * RADIUS**3)
    return setup(0.5 * stable_time_step(setup(1.0), mass)), position


def _time_chunks(advance, state, repeats: int, copy_run) -> tuple:
    """Warm up once, then time ``repeats`` chunks: (state, seconds, copy bandwidths B/s)."""
    state = advance(state)
    jax.block_until_ready(state)
    seconds, bandwidths = [], []
    for _ in range(repeats):
        bandwidths.append(copy_run())
        t0 = time.perf_counter()
        state = advance(state)
        jax.block_until_ready(state)
        seconds.append(time.perf_counter() - t0)
    return state, seconds, bandwidths


def _check(setup, state, label: str) -> float:
    """Raise on a non-finite state or a buffer overflow; return contacts per body."""
    from solver.bodies.step import overflow_message

    if not bool(jnp.all(jnp.isfinite(state.bodies.position))):
        raise FloatingPointError(f"{label}: non-finite positions")
    message = overflow_message(setup, state)
    if message is not None:
        raise RuntimeError(f"{label}: neighbour-search overflow: {message}")
    return float(jnp.mean(state.contact_count))


def state_bytes(state) -> int:
    """Bytes of every array of a chunk's state (bodies, pair table, springs, counters)."""
    return sum(int(leaf.nbytes) for leaf in jax.tree.leaves(state))


def _row(kind, bodies, members, steps, seconds, bandwidths, contacts, compile_s, planes,
         itemsize=8, kernel="xla", memory=0):  # fmt: skip
    per_step = statistics.median(seconds) / steps
    work = bodies * members
    bandwidth = statistics.median(bandwidths)
    moved = bytes_per_body_step(MAX_NEIGHBORS, planes, itemsize)
    rate = work / per_step
    ceiling = bandwidth / moved
    return BodiesBenchRow(
        kind=kind,
        bodies=bodies,
        members=members,
        steps=steps,
        body_steps_per_s=rate,
        body_steps_per_s_best=work * steps / min(seconds),
        seconds_per_step=per_step,
        bandwidth_gbs=bandwidth / 1e9,
        bytes_per_body_step=moved,
        ceiling_body_steps_per_s=ceiling,
        fraction=rate / ceiling,
        contacts_per_body=contacts,
        compile_s=compile_s,
        kernel=kernel,
        state_bytes_per_body=memory / work,
    )


def _chunk_maker(kernel: str):
    """make_body_chunk or the native kernel's make_native_chunk (``bodies.kernel``)."""
    if kernel == "native":
        from solver.bodies.native_step import make_native_chunk

        return make_native_chunk
    from solver.bodies.step import make_body_chunk

    return make_body_chunk


def bench_packing(
    n: int,
    steps: int,
    repeats: int,
    copy_run,
    seed: int = 0,
    every: int | None = None,
    dtype: str = "float64",
    kernel: str = "xla",
) -> BodiesBenchRow:
    """Time the solver chunk on a settling packing of n spheres; ``every``: steps between the
    energy and momentum totals (None: once per chunk, at its end, as a scene run totals at its
    output steps); ``dtype``: the body state's type (bodies.precision); ``kernel``:
    bodies.kernel."""
    from solver.bodies.step import initial_state, run_once

    setup, position = build_scene(n, _lattice_counts(n), seed)
    start = time.perf_counter()
    # compiled: op by op, the first neighbour search of 1e5 spheres would take minutes
    state = run_once(lambda b: initial_state(setup, b), _spheres(position).astype(dtype))
    make_chunk = _chunk_maker(kernel)
    compiled = (
        jax.jit(make_chunk(setup, every or steps), static_argnums=1, donate_argnums=0)
        .lower(state, steps)
        .compile()
    )

    def advance(s):
        return compiled(s)[0]

    compile_s = time.perf_counter() - start
    state, seconds, bandwidths = _time_chunks(advance, state, repeats, copy_run)
    contacts = _check(setup, state, f"packing of {n}")
    return _row("packing", n, 1, steps, seconds, bandwidths, contacts, compile_s, setup.n_planes,
                jnp.dtype(dtype).itemsize, kernel, state_bytes(state))  # fmt: skip


def bench_ensemble(
    members: int,
    bodies: int,
    steps: int,
    repeats: int,
    copy_run,
    seed: int = 1,
    dtype: str = "float64",
    kernel: str = "xla",
) -> BodiesBenchRow:
    """Time one vmapped chunk over ``members`` scenes of ``bodies`` spheres (a dropping column
    in a box of 2 x 2 sites), restitution drawn per member from [0.3, 0.9]; ``kernel``:
    bodies.kernel (native: the whole batch in one call)."""
    from solver.bodies.step import initial_state, run_once

    counts = (2, 2, math.ceil(bodies / 4) + 2)
    setup, _ = build_scene(bodies, counts, seed)
    rng = np.random.default_rng(seed)
    positions = []
    for _ in range(members):
        _, position = build_scene(bodies, counts, int(rng.integers(1 << 31)))
        positions.append(position + np.array([0.0, 0.0, 2.0 * RADIUS]))  # released above
    batch = jax.tree.map(lambda *a: jnp.stack(a), *[_spheres(p) for p in positions])
    batch = batch.astype(dtype)
    base = setup.params(jnp.dtype(dtype))
    restitution = jnp.asarray(rng.uniform(0.3, 0.9, (members, 1)) * np.ones((1, bodies)), dtype)
    params = jax.tree.map(lambda a: jnp.broadcast_to(a, (members, *a.shape)), base)
    params = params.replace(restitution=restitution)
    start = time.perf_counter()
    state = run_once(jax.vmap(lambda b, p: initial_state(setup, b, p)), batch, params)
    chunk = _chunk_maker(kernel)(setup, batched=True)
    compiled = (
        jax.jit(jax.vmap(lambda s, p: chunk(s, steps, p)), donate_argnums=0)
        .lower(state, params)
        .compile()
    )

    def advance(s):
        return compiled(s, params)[0]

    compile_s = time.perf_counter() - start
    state, seconds, bandwidths = _time_chunks(advance, state, repeats, copy_run)
    contacts = _check(setup, state, f"ensemble of {members} x {bodies}")
    return _row("ensemble", bodies, members, steps, seconds, bandwidths, contacts, compile_s,
                setup.n_planes, jnp.dtype(dtype).itemsize, kernel, state_bytes(state))  # fmt: skip


def growth_per_decade(rows: list[BodiesBenchRow]) -> float | None:
    """Growth of the time per step per tenfold number of bodies, between the smallest and the
    largest packing: 10 ** (log10(t1/t0) / log10(n1/n0)); 10 is linear (exactly t1/t0 when
    n1 = 10 n0). None with fewer than two packing sizes.
    """
    packs = sorted((r for r in rows if r.kind == "packing"), key=lambda r: r.bodies)
    if len(packs) < 2 or packs[-1].bodies == packs[0].bodies:
        return None
    small, big = packs[0], packs[-1]
    exponent = math.log10(big.seconds_per_step / small.seconds_per_step) / math.log10(
        big.bodies / small.bodies
    )
    return 10.0**exponent


def format_table(rows: list[BodiesBenchRow]) -> str:
    """Fixed-width text table of the results."""
    head = (
        f"{'kind':8} {'kernel':6} {'bodies':>7} {'members':>7} {'body-steps/s':>12} {'best':>10} "
        f"{'s/step':>9} {'contacts':>8} {'copy GB/s':>9} {'B/body-step':>11} {'ceiling':>10} "
        f"{'of ceil':>7} {'B/body':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.kind:8} {r.kernel:6} {r.bodies:7d} {r.members:7d} {r.body_steps_per_s:12.4g} "
            f"{r.body_steps_per_s_best:10.4g} {r.seconds_per_step:9.3g} "
            f"{r.contacts_per_body:8.2f} {r.bandwidth_gbs:9.1f} {r.bytes_per_body_step:11d} "
            f"{r.ceiling_body_steps_per_s:10.4g} {100 * r.fraction:6.2f}% "
            f"{r.state_bytes_per_body:7.0f}"
        )
    return "\n".join(lines)


def run_peer(n: int, rows: list[BodiesBenchRow], steps: int, ranks: int | None,
             directory: str | None) -> list[dict]:  # fmt: skip
    """LAMMPS on the packing of n spheres (the bench's seed), for both rebuild policies, beside
    the solver's ``rows`` of that packing (one per kernel); [] with a message when ``lmp`` is
    not installed. One result per policy and kernel: the two rates and their ratio."""
    import tempfile
    from pathlib import Path

    from solver.bench import lammps_peer

    if lammps_peer.executable() is None:
        print("peer lammps: skipped (lmp not found; Debian's package `lammps` provides it)")
        return []
    setup, position = build_scene(n, _lattice_counts(n), 0)
    base = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="lammps_peer_"))
    results = []
    for policy in lammps_peer.POLICIES:
        deck = lammps_peer.write_deck(base / f"n{n}_{policy}", setup, position, DENSITY, steps,
                                      policy)  # fmt: skip
        peer = lammps_peer.run(deck, policy, ranks)
        print(f"peer lammps {n} spheres, rebuild {policy}: {peer.body_steps_per_s:.4g} "
              f"body-steps/s on {peer.ranks} ranks ({peer.steps} steps, {peer.loop_s:.3g} s)",
              flush=True)  # fmt: skip
        for row in rows:
            results.append({
                "bodies": n, "policy": policy, "kernel": row.kernel, "ranks": peer.ranks,
                "steps": peer.steps, "lammps_body_steps_per_s": peer.body_steps_per_s,
                "solver_body_steps_per_s": row.body_steps_per_s,
                "solver_fraction": row.body_steps_per_s / peer.body_steps_per_s,
                "deck": str(deck),
            })  # fmt: skip
            print(f"  the solver ({row.kernel}) reaches "
                  f"{100 * results[-1]['solver_fraction']:.1f} % of it", flush=True)  # fmt: skip
    return results


def format_peers(peers: list[dict]) -> str:
    """Side-by-side table of the solver and LAMMPS on the same packings."""
    head = (f"{'bodies':>7} {'LAMMPS rebuild':>14} {'ranks':>5} {'LAMMPS':>10} {'kernel':>6} "
            f"{'solver':>10} {'solver/LAMMPS':>13}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for p in peers:
        lines.append(
            f"{p['bodies']:7d} {p['policy']:>14} {p['ranks']:5d} "
            f"{p['lammps_body_steps_per_s']:10.4g} {p['kernel']:>6} "
            f"{p['solver_body_steps_per_s']:10.4g} {100 * p['solver_fraction']:12.1f}%"
        )
    lines.append("rebuild lazy: when an atom moved more than half the skin (the solver's rule); "
                 "every: each step")  # fmt: skip
    return "\n".join(lines)


def _kernels(text: str) -> list[str]:
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not names or any(k not in KERNELS for k in names):
        raise argparse.ArgumentTypeError(
            f"expected kernels among {','.join(KERNELS)}, got {text!r}"
        )
    return list(dict.fromkeys(names))


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m solver.bench bodies",
        description="Body-steps per second of the rigid-body step against a memory-traffic "
        "ceiling.",
    )
    parser.add_argument(
        "--sizes",
        type=_positive_ints,
        default=[10_000, 100_000],
        help="spheres per packing, comma-separated (default 10000,100000)",
    )
    parser.add_argument(
        "--ensemble",
        type=int,
        default=1024,
        help="scenes in the vmapped ensemble (default 1024; 0: skip)",
    )
    parser.add_argument(
        "--ensemble-bodies", type=int, default=16, help="spheres per ensemble scene (default 16)"
    )
    parser.add_argument("--steps", type=int, default=20, help="steps per timed chunk")
    parser.add_argument("--repeats", type=int, default=3, help="timed chunks per row (median)")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write results here")
    parser.add_argument(
        "--precision",
        choices=["float64", "float32"],
        default="float64",
        help="the body state's type, as bodies.precision (default float64)",
    )
    parser.add_argument(
        "--kernels",
        type=_kernels,
        default=["xla"],
        help="body steps to time, comma-separated: xla, native (bodies.kernel; default xla)",
    )
    parser.add_argument(
        "--diagnostics-every",
        type=int,
        default=None,
        help="packings: steps between energy totals (default: once per chunk)",
    )
    parser.add_argument(
        "--peer",
        choices=["lammps"],
        default=None,
        help="also run LAMMPS on each packing (solver/bench/lammps_peer.py)",
    )
    parser.add_argument(
        "--peer-steps", type=int, default=200, help="LAMMPS steps per run (default 200)"
    )
    parser.add_argument(
        "--peer-ranks", type=int, default=None, help="LAMMPS MPI ranks (default: the cores)"
    )
    parser.add_argument(
        "--peer-dir",
        default=None,
        help="write the LAMMPS decks here (default: a temporary directory)",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.peer_steps < 1 or (args.peer_ranks is not None and args.peer_ranks < 1):
        parser.error(f"--peer-steps ({args.peer_steps}) and --peer-ranks ({args.peer_ranks}) "
                     "must be >= 1")  # fmt: skip
    if args.diagnostics_every is not None and args.diagnostics_every < 1:
        parser.error(f"--diagnostics-every ({args.diagnostics_every}) must be >= 1")
    if args.steps < 1 or args.repeats < 1:
        parser.error(f"--steps ({args.steps}) and --repeats ({args.repeats}) must be >= 1")
    if args.ensemble < 0 or args.ensemble_bodies < 1:
        parser.error(f"--ensemble ({args.ensemble}) must be >= 0 and --ensemble-bodies "
                     f"({args.ensemble_bodies}) >= 1")  # fmt: skip
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    jax.config.update("jax_enable_x64", True)  # bodies run in float64 unless --precision
    from solver.bench.fluid import COPY_BYTES, COPY_ITERATIONS, measure_copy

    devices = jax.devices()
    print(
        f"device: {devices[0].platform} x{len(devices)} ({platform.processor() or 'cpu'}), "
        f"{os.cpu_count()} cores, jax {jax.__version__}; {args.precision}; copy kernel: "
        f"{COPY_BYTES // 2**20} MiB x {COPY_ITERATIONS}; {args.steps} steps per chunk, "
        f"median of {args.repeats}",
        flush=True,
    )
    copy_run = measure_copy(args.precision)
    rows: list[BodiesBenchRow] = []

    def show(row: BodiesBenchRow) -> None:
        rows.append(row)
        lines = format_table([row]).splitlines()
        print("\n".join(lines if len(rows) == 1 else lines[-1:]), flush=True)

    peers: list[dict] = []
    for n in args.sizes:
        for kernel in args.kernels:
            show(bench_packing(n, args.steps, args.repeats, copy_run,
                               every=args.diagnostics_every, dtype=args.precision,
                               kernel=kernel))  # fmt: skip
        if args.peer == "lammps":
            peers += run_peer(n, rows[-len(args.kernels):], args.peer_steps, args.peer_ranks,
                              args.peer_dir)  # fmt: skip
    if args.ensemble:
        for kernel in args.kernels:
            show(bench_ensemble(args.ensemble, args.ensemble_bodies, args.steps, args.repeats,
                                copy_run, dtype=args.precision, kernel=kernel))  # fmt: skip
    print()
    print(format_table(rows))
    ratios = {k: growth_per_decade([r for r in rows if r.kernel == k]) for k in args.kernels}
    moved = bytes_per_body_step(MAX_NEIGHBORS, 6, jnp.dtype(args.precision).itemsize)
    print(
        f"ceiling: measured copy bandwidth / {moved} B per body-step (state, pair table and "
        f"springs read and written once, partners gathered once; a lower bound on the traffic)"
    )
    sizes = sorted({r.bodies for r in rows if r.kind == "packing"})
    for kernel, ratio in ratios.items():
        if ratio is not None:
            print(f"{kernel}: time per step grows x{ratio:.2f} per 10x bodies ({sizes[0]} -> "
                  f"{sizes[-1]}; linear: 10)")  # fmt: skip
    if peers:
        print()
        print(format_peers(peers))
    if args.json:
        payload = {
            "peers": peers,
            "device": str(devices[0]),
            "devices": len(devices),
            "cpu_count": os.cpu_count(),
            "jax": jax.__version__,
            "growth_per_decade": ratios[args.kernels[0]],
            "growth_per_decade_by_kernel": ratios,
            "precision": args.precision,
            "kernels": args.kernels,
            "rows": [asdict(r) for r in rows],
        }
        with open(args.json, "w") as fh:
            json.dump(payload, fh, indent=2)
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
