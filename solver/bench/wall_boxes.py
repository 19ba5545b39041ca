"""The step with its wall rules and force on boxes around the solids against the whole block.

    python -m solver.bench wall_boxes [--cases sphere,cylinder] [--steps 100] [--repeats 3]
                                      [--rounds 2] [--json PATH]

Cases, built as ``python -m solver`` builds them:

- sphere: ``case=geometry case.mesh=sphere fluid=d3q19 fluid.collision=bgk`` (100 x 60 x 60,
  Bouzidi walls, inlet, characteristic outlet, force and moment);
- cylinder: the Schaefer-Turek 2D-2 set-up of docs/validation.md at 40 cells per diameter
  (880 x 166, D2Q9 BGK: two wall strips and the cylinder).

Each round compiles the chunk twice, with the plan's boxes and with the whole block
(``boundary_rules.DENSE_FRACTION = 0``), and times ``--repeats`` chunks of ``--steps`` steps
each right after a run of the fluid benchmark's memory-copy kernel. Printed per row: MLUPS
(median), the copy roofline of the same run (bandwidth / (2 q sizeof(float32))), the fraction of
it, XLA's peak bytes per cell and the number of boxes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import numpy as np

from solver.api import compose_config
from solver.bench.fluid import measure_copy, peak_bytes
from solver.fluid import boundary_rules, step
from solver.fluid.cases import build_case

CASES = {
    "sphere": ["case=geometry", "case.mesh=sphere", "fluid=d3q19", "fluid.collision=bgk"],
    "cylinder": [
        "case=cylinder",
        "fluid=d2q9",
        "fluid.collision=bgk",
        "case.resolution=40",
        "case.inlet=bounce_back",
        "case.outlet=characteristic",
        "case.sponge_length=0",
        "case.ramp_time=1.0",
        "fluid.u_lattice=0.025",
    ],
}


def bench_case(name: str, steps: int, repeats: int, boxed: bool, copy_run) -> dict:
    """One row: the case's chunk compiled with boxes (``boxed``) or on the whole block."""
    setup = build_case(compose_config(CASES[name])).setup
    saved = boundary_rules.DENSE_FRACTION
    boundary_rules.DENSE_FRACTION = saved if boxed else 0.0
    try:
        plan = boundary_rules.plan_boundaries(setup, step.SINGLE)
        chunk = jax.jit(step.make_chunk(setup), static_argnums=2, donate_argnums=0)
        geometry = step.make_geometry(setup)
        state = step.initial_state(
            setup, np.ones(setup.shape), np.zeros((setup.lattice.d, *setup.shape))
        )
        compiled = chunk.lower(state, geometry, steps).compile()
    finally:
        boundary_rules.DENSE_FRACTION = saved
    state, _ = compiled(state, geometry)
    jax.block_until_ready(state)
    seconds, bandwidths = [], []
    for _ in range(repeats):
        bandwidths.append(copy_run())
        start = time.perf_counter()
        state, _ = compiled(state, geometry)
        jax.block_until_ready(state)
        seconds.append(time.perf_counter() - start)
    if not bool(np.isfinite(np.asarray(state.populations)).all()):
        raise FloatingPointError(f"{name}: non-finite state")
    mlups = setup.cells * steps / statistics.median(seconds) / 1e6
    roofline = statistics.median(bandwidths) / (2 * setup.lattice.q * 4) / 1e6
    return {
        "case": name,
        "rules": "boxes" if boxed else "whole block",
        "boxes": 0 if plan.regions is None else len(plan.regions),
        "shape": list(setup.shape),
        "mlups": mlups,
        "roofline_mlups": roofline,
        "fraction": mlups / roofline,
        "peak_bytes_per_cell": peak_bytes(compiled) / setup.cells,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m solver.bench wall_boxes",
        description="MLUPS of the step with wall rules on boxes against the whole block.",
    )
    parser.add_argument("--cases", default="sphere,cylinder")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two rows")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"--cases: unknown {unknown}, allowed {sorted(CASES)}")
    copy_run = measure_copy("float32")
    rows = []
    print(
        f"{'case':9} {'rules':12} {'boxes':>5} {'MLUPS':>8} {'roofline':>9} {'%':>6} {'B/cell':>7}"
    )
    for name in names:
        for _ in range(args.rounds):
            for boxed in (False, True):
                r = bench_case(name, args.steps, args.repeats, boxed, copy_run)
                rows.append(r)
                print(
                    f"{r['case']:9} {r['rules']:12} {r['boxes']:5d} {r['mlups']:8.1f} "
                    f"{r['roofline_mlups']:9.0f} {100 * r['fraction']:6.1f} "
                    f"{r['peak_bytes_per_cell']:7.0f}",
                    flush=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0
