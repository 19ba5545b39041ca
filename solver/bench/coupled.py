"""Cost of bodies in the fluid: the coupled step against the fluid-only step on one grid.

    python -m solver.bench coupled [--edge 128] [--counts 0,100,1000,10000] [--radius 2]
                                   [--steps 100] [--repeats 3] [--bodies replicated|owned]
                                   [--capacities scene|sized] [--kernels xla,native]
                                   [--processes 1] [--json PATH]

A periodic box of edge^3 cells, D3Q19 TRT, float32, with n spheres of ``radius`` cells at rest
on a jittered simple-cubic lattice (no contacts, no gravity, one body step per fluid step; the
fluid carries a small shear wave so that every sphere feels a force). Count 0 is the plain fluid
chunk (``solver.fluid.step.make_chunk``); the others the coupled chunk
(``make_coupled_chunk`` with ``PsmCoupling``), each jitted with the state donated as the run
loop does, and one warm-up call. Then ``repeats`` rounds: one run of the memory-copy probe of
``solver.bench`` and one timed chunk of ``steps`` steps of every count in turn, so that a load
on the machine that comes and goes falls on all counts alike. A chunk has fixed costs at its
start and end (the first collision reads the stacked state, the last pull writes it back): at
64^3 about 15 ms for the fluid-only chunk and more for the coupled one, so chunks of 10 steps
measured them as much as the step. The default of 100 steps (a typical output interval of a
run) measures the step. Reported per count: MLUPS (median, and the slowest and fastest
round), the fraction of the fluid-only MLUPS (the median over the rounds of the fluid-only
chunk's time over this count's in the same round, and its range), the solid fraction, and
the time the bodies add per step and per body (how the cost grows with n). The issue's goal:
>= 70 % of the fluid-only MLUPS at 1,000 spheres. The spheres barely move in the timed steps,
so the Verlet pair table (skin 1 cell) is not rebuilt after the first step: the rows show the
rebuilds; a rebuild costs about a body step more (the cell list and the 27-cell search).
``--bodies owned`` times the bodies as ``coupling.bodies=owned`` holds them (on this one device:
the slots, ghost buffers and pair tables of the owned path, no messages), against the
same fluid-only chunk, with the config's default buffers (the whole scene per shard) or with
``--capacities sized`` buffers sized for the bodies per process (``sized_capacities``; every
owned and ghost slot is covered and summed each step, used or not). ``--kernels`` times
every count on each fluid kernel (``fluid.kernel``: the XLA step, or the native in-place
kernel with the PSM collision on the covered cells, solver/coupling/native.py), each against
its own fluid-only chunk, all in the same rounds.
``--processes P`` (P > 1) runs the same rounds on P MPI processes (``mpirun -n P --bind-to
core``, the mpi halo, one slab along x per process; the parent starts them and relays rank
0's table): weak scaling, each process holding an edge^3 block and ``count`` spheres of its
own (P edge x edge x edge cells and P count spheres in all), every chunk timed on every
process after a barrier, the slowest process's time per round counted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

from kernels.lattices import D3Q19
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bench.fluid import initial_fields, measure_copy
from solver.bench.scaling import child_env, mpi_binding
from solver.bench.scaling_worker import barrier, with_placed_time
from solver.bodies import step as body_step
from solver.coupling.step import PsmCoupling
from solver.distributed.bodies import in_fluid
from solver.distributed.distribution import Distribution, distribute
from solver.distributed.runtime import start as start_runtime
from solver.fluid import step as fluid_step
from solver.fluid.setup import FluidSetup

TAU = 0.6


@dataclass(frozen=True)
class CoupledBenchRow:
    kernel: str  # fluid.kernel: "xla" or "native"
    processes: int  # MPI processes (weak scaling: an edge^3 block and `spheres` each)
    spheres: int
    bodies: str  # "replicated" or "owned" (coupling.bodies)
    capacities: str  # owned bodies' buffers: "scene" (the config's defaults) or "sized"
    radius_cells: float
    solid_fraction: float
    cells: int
    steps: int
    mlups: float  # median over the repeats
    mlups_range: tuple[float, float]  # slowest and fastest repeat
    fraction_of_fluid: float  # median over the repeats of t_fluid / t_coupled, same round
    fraction_range: tuple[float, float]
    body_seconds_per_step: float
    body_microseconds_per_sphere_step: float
    bandwidth_gbs: float
    roofline_mlups: float
    compile_s: float
    pair_rebuilds: int  # Verlet pair-table rebuilds over all the chunks of the row
    body_steps: int


def sphere_sites(count: int, edge: int, radius: float, seed: int = 0) -> np.ndarray:
    """(count, 3) centres in cell-index coordinates: a simple-cubic lattice of count sites or
    more, jittered by a quarter of the free space, a random subset of count sites."""
    per_axis = math.ceil(count ** (1.0 / 3.0))
    spacing = edge / per_axis
    if spacing < 2.0 * radius + 1.0:
        raise SystemExit(f"{count} spheres of radius {radius} do not fit in {edge}^3 cells")
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.arange(per_axis)] * 3, indexing="ij"), -1).reshape(-1, 3)
    sites = (grid + 0.5) * spacing
    sites = sites[rng.permutation(len(sites))[:count]]
    free = 0.25 * (spacing - 2.0 * radius - 1.0)
    return sites + rng.uniform(-free, free, sites.shape)


def sized_capacities(per_block: int) -> dict[str, int]:
    """Owned-body buffers for ``per_block`` bodies per shard that stay roughly where they are
    (``--capacities sized``): 1.5 times as many owned slots, ghost copies for half of them and
    hand-over messages for an eighth, each plus 16 (a bench slab's bodies within reach of its
    faces are about a tenth)."""
    return dict(
        capacity=per_block * 3 // 2 + 16,
        ghost_capacity=per_block // 2 + 16,
        migration_capacity=per_block // 8 + 16,
    )


def build(
    edge: int, count: int, radius: float, owned: bool = False, kernel: str = "xla",
    blocks: int = 1, sized: bool = False,
):  # fmt: skip
    """(setup, coupling or None, coupled bodies or None); ``owned``: the
    coupling with a layout of ``coupling.bodies=owned`` over ``blocks`` slabs along x
    (buffers: the config's defaults, the whole scene, or with ``sized`` ``sized_capacities``);
    ``kernel``: fluid.kernel; ``blocks``: edge^3 blocks along x, each with ``count`` spheres."""
    setup = FluidSetup(
        lattice=D3Q19, shape=(blocks * edge, edge, edge), omega=1.0 / TAU, collision="trt",
        kernel=kernel,
    )  # fmt: skip
    if count == 0:
        return setup, None, None
    sites = np.concatenate(
        [sphere_sites(count, edge, radius, seed=b) + [b * edge, 0, 0] for b in range(blocks)]
    )
    count = len(sites)
    ones = np.ones(count)
    reach = 2.0 * radius + 1.0
    upper = np.asarray(setup.shape, float) + reach
    grid = CellGrid.covering((-reach,) * 3, tuple(upper), reach, 8, 8)
    bodies_setup = body_step.BodySetup(
        radius=radius * ones, young=1e3 * ones, poisson=0.3 * ones, restitution=0.5 * ones,
        friction=0.3 * ones, rolling_friction=0.0 * ones, grid=grid, dt=1.0, skin=1.0,
        gravity=(0.0, 0.0, 0.0),
    )  # fmt: skip
    # lattice units throughout: dx = dt = 1, fluid density 1; node i at i + 1/2 (origin 0)
    coupling = PsmCoupling(
        bodies=bodies_setup, substeps=1, dx=1.0, dt=1.0, origin=(0.0, 0.0, 0.0),
        fluid_density=1.0, average_force=True, tracked=1,
    )  # fmt: skip
    mass = 2.0 * 4.0 / 3.0 * math.pi * radius**3
    bodies = Bodies(
        position=jnp.asarray(sites + 0.5, jnp.float32),
        orientation=jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0], jnp.float32), (count, 1)),
        velocity=jnp.zeros((count, 3), jnp.float32),
        angular_momentum=jnp.zeros((count, 3), jnp.float32),
        prescribed_angular_velocity=jnp.zeros((count, 3), jnp.float32),
        inverse_mass=jnp.full((count,), 1.0 / mass, jnp.float32),
        inverse_inertia=jnp.full((count, 3), 1.0 / (0.4 * mass * radius**2), jnp.float32),
        kinematic=jnp.zeros((count,), bool),
    )
    body_state = body_step.initial_state(bodies_setup, bodies)
    if not owned:
        return setup, coupling, coupling.initial(body_state)
    reach = in_fluid.reach_of(bodies_setup, 1.0, radius + 1.0, 1.0)
    capacities = {}
    if sized:
        capacities = {k: min(v, count) for k, v in sized_capacities(count // blocks).items()}
    layout = in_fluid.plan_fluid_layout(
        bodies_setup, (blocks, 1, 1), (0.0,) * 3, tuple(float(n) for n in setup.shape), reach,
        **capacities,
    )  # fmt: skip
    coupling = dataclasses.replace(coupling, owned=layout)
    return setup, coupling, coupling.owned_initial(body_state, blocks)


class Timed:
    """One count's jitted chunk and its carry on the distribution ``dist`` (one device, or
    this process's slab of an MPI run), compiled and warmed up: ``once()`` times one chunk of
    ``steps`` steps (seconds)."""

    def __init__(
        self, edge: int, count: int, radius: float, steps: int, owned: bool, kernel: str,
        dist: Distribution, sized: bool = False,
    ):  # fmt: skip
        blocks = dist.decomposition.shards
        setup, coupling, extra = build(edge, count, radius, owned, kernel, blocks, sized)
        self.setup, self.coupling, self.count, self.steps = setup, coupling, count, steps
        self.kernel, self.runtime = kernel, dist.runtime
        self.solid = count * 4.0 / 3.0 * math.pi * radius**3 / edge**3
        start = time.perf_counter()
        # the state placed as the run loop places it (this process's block under MPI)
        density, velocity = initial_fields(setup)
        state = with_placed_time(
            fluid_step.initial_state(
                setup, dist.put(density, 0, setup.dtype), dist.put(velocity, 1, setup.dtype)
            )
        )
        geometry = dist.geometry(setup)
        if coupling is None:
            chunk = dist.chunk(setup)

            def advance(carry):
                return (chunk(carry[0], geometry, steps)[0], None)
        else:
            extra = jax.tree.map(dist.replicate, extra)
            if owned:
                chunk = in_fluid.owned_chunk(dist, setup, coupling, coupling.owned)
            else:
                chunk = dist.coupled_chunk(setup, coupling)

            def advance(carry):
                new_state, _, new_extra, _ = chunk(carry[0], geometry, steps, carry[1])
                return (new_state, new_extra)

        self.advance = advance
        # twice: a chunk's outputs may be placed otherwise than its first inputs (the MPI
        # runs' replicated bodies), which compiles it once more
        self.carry = advance(advance((state, extra)))
        jax.block_until_ready(self.carry)
        self.compile_s = time.perf_counter() - start
        self.seconds: list[float] = []

    def once(self) -> float:
        barrier(self.runtime)  # every process starts the chunk together
        t0 = time.perf_counter()
        self.carry = self.advance(self.carry)
        jax.block_until_ready(self.carry)
        self.seconds.append(time.perf_counter() - t0)
        return self.seconds[-1]

    def finish(self) -> tuple[int, int]:
        """(pair-table rebuilds, body steps); raises on a non-finite state."""
        if not bool(jnp.all(jnp.isfinite(self.carry[0].populations))):
            raise FloatingPointError(f"{self.count} spheres: non-finite populations")
        rebuilds = 0 if self.coupling is None else int(self.carry[1].state.rebuilds)
        self.carry = None  # frees the grid
        return rebuilds, (len(self.seconds) + 2) * self.steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solver.bench coupled", description=__doc__)
    parser.add_argument("--edge", type=int, default=128)
    parser.add_argument("--counts", default="0,100,1000,10000")
    parser.add_argument("--radius", type=float, default=2.0, help="sphere radius in cells")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--bodies",
        choices=("replicated", "owned"),
        default="replicated",
        help="how the bodies are held (coupling.bodies)",
    )
    parser.add_argument(
        "--capacities",
        choices=("scene", "sized"),
        default="scene",
        help="owned bodies' buffers: the config's defaults (the whole scene) or sized for "
        "the bodies per process (sized_capacities)",
    )
    parser.add_argument(
        "--kernels",
        default="xla",
        help="fluid kernels (fluid.kernel), comma-separated: xla, native",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="MPI processes (weak scaling: an edge^3 block and the counts' spheres each)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    if 0 not in counts:
        counts = [0, *counts]
    kernels = args.kernels.split(",")
    if any(k not in ("xla", "native") for k in kernels):
        parser.error(f"--kernels {args.kernels!r}: each of xla, native")
    if args.processes < 1:
        parser.error(f"--processes {args.processes}: at least 1")
    if args.processes > 1 and not args.worker:
        return launch_processes(args, argv if argv is not None else sys.argv[1:])
    owned = args.bodies == "owned"
    runtime = start_runtime("mpi" if args.worker else "xla")
    processes = runtime.process_count
    shape = (processes * args.edge, args.edge, args.edge)
    dist = distribute(runtime, [processes, 1, 1] if processes > 1 else "single", shape)
    lead = runtime.process_index == 0
    copy_run = measure_copy("float32")
    if lead:
        print(f"coupled step, D3Q19 TRT float32, {args.edge}^3 periodic per process, sphere "
              f"radius {args.radius:g} cells, bodies {args.bodies}"
              f"{f' (buffers {args.capacities})' if owned else ''}, {processes} process(es); "
              f"{os.cpu_count()} cores, JAX {jax.__version__} on "
              f"{jax.devices()[0].device_kind}")  # fmt: skip
    counts = sorted(counts)
    sized = args.capacities == "sized"
    timed = [
        Timed(args.edge, count, args.radius, args.steps, owned, kernel, dist, sized)
        for kernel in kernels
        for count in counts
    ]
    # round robin: every repeat times each count once, right after one run of the copy probe,
    # so that a load on the machine that comes and goes falls on all counts alike
    bandwidths = []
    for _ in range(args.repeats):
        bandwidths.append(copy_run())
        for t in timed:
            t.once()
    bandwidth = statistics.median(bandwidths)
    if runtime.comm is not None:  # the slowest process's time of each round
        for t in timed:
            every = runtime.comm.allgather(t.seconds)
            t.seconds = [max(column) for column in zip(*every, strict=True)]
    rows: list[CoupledBenchRow] = []
    for t in timed:
        if t.count == 0:
            fluid = t  # this kernel's fluid-only chunk (counts are sorted per kernel)
        rebuilds, body_steps = t.finish()
        if not lead:
            continue
        solid = t.solid
        cells = t.setup.cells
        mlups = cells * args.steps / statistics.median(t.seconds) / 1e6
        # per repeat against the fluid-only chunk of the same round
        fractions = [f / c for f, c in zip(fluid.seconds, t.seconds, strict=True)]
        body_seconds = statistics.median(t.seconds) - statistics.median(fluid.seconds)
        body_seconds /= args.steps
        row = CoupledBenchRow(
            kernel=t.kernel,
            processes=processes,
            spheres=t.count * processes,
            bodies=args.bodies,
            capacities=args.capacities,
            radius_cells=args.radius,
            solid_fraction=solid,
            cells=cells,
            steps=args.steps,
            mlups=mlups,
            mlups_range=(
                cells * args.steps / max(t.seconds) / 1e6,
                cells * args.steps / min(t.seconds) / 1e6,
            ),
            fraction_of_fluid=statistics.median(fractions),
            fraction_range=(min(fractions), max(fractions)),
            body_seconds_per_step=body_seconds,
            body_microseconds_per_sphere_step=(
                1e6 * body_seconds / (t.count * processes) if t.count else 0.0
            ),
            bandwidth_gbs=bandwidth / 1e9,
            roofline_mlups=bandwidth / (2 * D3Q19.q * 4) / 1e6,
            compile_s=t.compile_s,
            pair_rebuilds=rebuilds,
            body_steps=body_steps,
        )
        rows.append(row)
        low, high = row.fraction_range
        print(f"{t.kernel:>6} {row.spheres:>6} spheres  solid {100 * solid:5.2f} %  "
              f"{mlups:7.2f} MLUPS "
              f"({row.mlups_range[0]:.1f}-{row.mlups_range[1]:.1f})  "
              f"{100 * row.fraction_of_fluid:5.1f} % of fluid-only ({100 * low:.1f}-"
              f"{100 * high:.1f})  bodies {1e3 * body_seconds:7.2f} ms/step "
              f"({row.body_microseconds_per_sphere_step:.2f} us per sphere)  pair table "
              f"rebuilt {rebuilds}/{body_steps} steps  roofline {row.roofline_mlups:.1f} MLUPS"
              f"  compile {t.compile_s:.1f} s", flush=True)  # fmt: skip
    if args.json and lead:
        with open(args.json, "w") as f:
            json.dump({"host": platform.node(), "rows": [asdict(r) for r in rows]}, f, indent=1)
    return 0


def launch_processes(args: argparse.Namespace, argv: list[str]) -> int:
    """Run this benchmark on ``args.processes`` MPI processes (one core each where the machine
    has them; the native kernel's OpenMP on that one core), relaying their output."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("error: --processes needs mpirun (install Open MPI)", file=sys.stderr)
        return 2
    binding, _ = mpi_binding(args.processes, os.cpu_count() or 1, False)
    command = [mpirun, "-n", str(args.processes), *binding, sys.executable, "-m",
               "solver.bench.coupled", "--worker", *argv]  # fmt: skip
    env = child_env(None)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
