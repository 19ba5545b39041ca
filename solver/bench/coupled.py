"""Cost of bodies in the fluid: the coupled step against the fluid-only step on one grid.

    python -m solver.bench coupled [--edge 128] [--counts 0,100,1000,10000] [--radius 2]
                                   [--steps 100] [--repeats 3] [--bodies replicated|owned]
                                   [--kernels xla,native] [--json PATH]

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
the slots, ghost buffers and per-step cell lists of the owned path, no messages), against the
same fluid-only chunk. ``--kernels`` times every count on each fluid kernel (``fluid.kernel``:
the XLA step, or the native in-place kernel with the PSM collision on the covered cells,
solver/coupling/native.py), each against its own fluid-only chunk, all in the same rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np

from kernels.lattices import D3Q19
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bench.fluid import initial_fields, measure_copy
from solver.bodies import step as body_step
from solver.coupling.native import make_native_coupled_chunk
from solver.coupling.step import PsmCoupling
from solver.distributed.bodies import in_fluid
from solver.distributed.distribution import distribute
from solver.distributed.runtime import start as start_runtime
from solver.fluid import step as fluid_step
from solver.fluid.inplace_step import make_inplace_chunk
from solver.fluid.setup import FluidSetup

TAU = 0.6


@dataclass(frozen=True)
class CoupledBenchRow:
    kernel: str  # fluid.kernel: "xla" or "native"
    spheres: int
    bodies: str  # "replicated" or "owned" (coupling.bodies)
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


def build(edge: int, count: int, radius: float, owned: bool = False, kernel: str = "xla"):
    """(setup, coupling or None, state, geometry, coupled bodies or None); ``owned``: the
    coupling with a one-shard layout of ``coupling.bodies=owned``; ``kernel``: fluid.kernel."""
    setup = FluidSetup(
        lattice=D3Q19, shape=(edge,) * 3, omega=1.0 / TAU, collision="trt", kernel=kernel
    )
    density, velocity = initial_fields(setup)
    state = fluid_step.initial_state(setup, density, velocity)
    geometry = fluid_step.make_geometry(setup)
    if count == 0:
        return setup, None, state, geometry, None
    ones = np.ones(count)
    reach = 2.0 * radius + 1.0
    grid = CellGrid.covering((-reach,) * 3, (edge + reach,) * 3, reach, 8, 8)
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
        position=jnp.asarray(sphere_sites(count, edge, radius) + 0.5, jnp.float32),
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
        return setup, coupling, state, geometry, coupling.initial(body_state)
    reach = in_fluid.reach_of(bodies_setup, 1.0, radius + 1.0, 1.0)
    layout = in_fluid.plan_fluid_layout(bodies_setup, (1, 1, 1), (0.0,) * 3, (edge,) * 3, reach)
    coupling = dataclasses.replace(coupling, owned=layout)
    return setup, coupling, state, geometry, coupling.owned_initial(body_state, 1)


class Timed:
    """One count's jitted chunk and its carry, compiled and warmed up: ``once()`` times one
    chunk of ``steps`` steps (seconds)."""

    def __init__(
        self, edge: int, count: int, radius: float, steps: int, owned: bool = False,
        kernel: str = "xla",
    ):  # fmt: skip
        setup, coupling, state, geometry, extra = build(edge, count, radius, owned, kernel)
        self.setup, self.coupling, self.count, self.steps = setup, coupling, count, steps
        self.kernel = kernel
        self.solid = count * 4.0 / 3.0 * math.pi * radius**3 / setup.cells
        start = time.perf_counter()
        if coupling is None:
            make = make_inplace_chunk(setup) if kernel == "native" else fluid_step.make_chunk(setup)
            chunk = jax.jit(make, static_argnums=2, donate_argnums=0)

            def advance(carry):
                return (chunk(carry[0], geometry, steps)[0], None)
        else:
            if owned:
                dist = distribute(start_runtime("xla"), "single", setup.shape)
                chunk = in_fluid.owned_chunk(dist, setup, coupling, coupling.owned)
            elif kernel == "native":
                make = make_native_coupled_chunk(setup, coupling)
                chunk = jax.jit(make, static_argnums=2, donate_argnums=(0, 3))
            else:
                make = fluid_step.make_coupled_chunk(setup, fluid_step.SINGLE, coupling)
                chunk = jax.jit(make, static_argnums=2, donate_argnums=(0, 3))

            def advance(carry):
                new_state, _, new_extra, _ = chunk(carry[0], geometry, steps, carry[1])
                return (new_state, new_extra)

        self.advance = advance
        self.carry = advance((state, extra))
        jax.block_until_ready(self.carry)
        self.compile_s = time.perf_counter() - start
        self.seconds: list[float] = []

    def once(self) -> float:
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
        return rebuilds, (len(self.seconds) + 1) * self.steps


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
        help="how the bodies are held (coupling.bodies); owned: on this one device",
    )
    parser.add_argument(
        "--kernels",
        default="xla",
        help="fluid kernels (fluid.kernel), comma-separated: xla, native",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    if 0 not in counts:
        counts = [0, *counts]
    kernels = args.kernels.split(",")
    if any(k not in ("xla", "native") for k in kernels):
        parser.error(f"--kernels {args.kernels!r}: each of xla, native")
    owned = args.bodies == "owned"
    copy_run = measure_copy("float32")
    print(f"coupled step, D3Q19 TRT float32, {args.edge}^3 periodic, sphere radius "
          f"{args.radius:g} cells, bodies {args.bodies}; {os.cpu_count()} cores, JAX "
          f"{jax.__version__} on {jax.devices()[0].device_kind}")  # fmt: skip
    counts = sorted(counts)
    timed = [
        Timed(args.edge, count, args.radius, args.steps, owned, kernel)
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
    rows: list[CoupledBenchRow] = []
    for t in timed:
        if t.count == 0:
            fluid = t  # this kernel's fluid-only chunk (counts are sorted per kernel)
        rebuilds, body_steps = t.finish()
        solid = t.solid
        cells = t.setup.cells
        mlups = cells * args.steps / statistics.median(t.seconds) / 1e6
        # per repeat against the fluid-only chunk of the same round
        fractions = [f / c for f, c in zip(fluid.seconds, t.seconds, strict=True)]
        body_seconds = statistics.median(t.seconds) - statistics.median(fluid.seconds)
        body_seconds /= args.steps
        row = CoupledBenchRow(
            kernel=t.kernel,
            spheres=t.count,
            bodies=args.bodies,
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
            body_microseconds_per_sphere_step=1e6 * body_seconds / t.count if t.count else 0.0,
            bandwidth_gbs=bandwidth / 1e9,
            roofline_mlups=bandwidth / (2 * D3Q19.q * 4) / 1e6,
            compile_s=t.compile_s,
            pair_rebuilds=rebuilds,
            body_steps=body_steps,
        )
        rows.append(row)
        low, high = row.fraction_range
        print(f"{t.kernel:>6} {t.count:>6} spheres  solid {100 * solid:5.2f} %  {mlups:7.2f} MLUPS "
              f"({row.mlups_range[0]:.1f}-{row.mlups_range[1]:.1f})  "
              f"{100 * row.fraction_of_fluid:5.1f} % of fluid-only ({100 * low:.1f}-"
              f"{100 * high:.1f})  bodies {1e3 * body_seconds:7.2f} ms/step "
              f"({row.body_microseconds_per_sphere_step:.2f} us per sphere)  pair table "
              f"rebuilt {rebuilds}/{body_steps} steps  roofline {row.roofline_mlups:.1f} MLUPS"
              f"  compile {t.compile_s:.1f} s", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host": platform.node(), "rows": [asdict(r) for r in rows]}, f, indent=1)
    return 0
