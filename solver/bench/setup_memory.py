"""`python -m solver.bench setup_memory`: peak host memory per process of a fluid run's set-up.

For each grid size, ``mpirun -n P`` starts P processes (``domain.halo=mpi``, one block each);
every process builds the case and its model (geometry placed), places the initial state and
runs one step, and reports its peak resident set (``VmHWM`` of /proc/self/status) after each of
these phases: the runtime started ("start"), the case built and its geometry placed, the
initial density and velocity placed ("rho, u placed": the host computes them and copies them to
the device), the initial populations made from them (``initial_state``, op by op on the
device), one step (compiled). On the CPU the devices' arrays are host memory too, so the last
two columns include the state, the equilibrium's temporaries and the step's buffers: per block
by construction. The set-up's host share is "rho, u placed" minus "start".

    python -m solver.bench setup_memory --sizes 64 128 192 --processes 2
    python -m solver.bench setup_memory --case geometry --sizes 10 20 30

Options: ``--case`` (a fluid case, default taylor_green), ``--lattice`` (default D3Q19),
``--processes``, ``--sizes`` (case.resolution values; default 64 128 192, for ``--case
geometry`` 10 20 30 cells per reference length: tunnels of 100x60x60 to 300x180x180 around the
sample STL sphere, voxelised in the "case + geometry" phase) and extra Hydra overrides after
``--``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PHASES = ("start", "model", "fields", "state", "step")
GRID_FIELDS = ("solid", "wall_velocity", "wall_distance", "obstacle", "sponge")
SIZES = [64, 128, 192]
# case.resolution is cells per reference length there, not across the grid
CASE_SIZES = {"geometry": [10, 20, 30]}
HEADERS = {
    "start": "start",
    "model": "case + geometry",
    "fields": "rho, u placed",
    "state": "state placed",
    "step": "after 1 step",
}


def peak_rss_mib() -> float:
    """This process's peak resident set so far, MiB (VmHWM; ru_maxrss where /proc lacks it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _lazy_fields(case) -> dict:
    """The case's grid fields that are built on demand (``GridField``), by name."""
    from solver.fluid.grid_field import GridField

    fields = {
        "density": case.density,
        "velocity": case.velocity,
        "velocity_gradient": case.velocity_gradient,
        **{name: getattr(case.setup, name) for name in GRID_FIELDS},
    }
    return {k: v for k, v in fields.items() if isinstance(v, GridField)}


def whole_fields(case) -> list[str]:
    """Names of the case's lazy grid fields that this process evaluated on the whole grid."""
    return [k for k, v in _lazy_fields(case).items() if v.built]


def worker(overrides: list[str], whole: bool = False) -> int:
    """One process of the job: build, place, step; print this process's record."""
    import jax

    from solver.api import compose_config
    from solver.app import enable_precision, run_precision
    from solver.distributed.runtime import start
    from solver.fluid.cases import build_case
    from solver.fluid.model import FluidModel

    config = compose_config(["checkpoint=none", *overrides])
    enable_precision(run_precision(config))
    runtime = start(config.domain.halo)
    record = {"rank": runtime.process_index, "processes": runtime.process_count}
    record["start"] = peak_rss_mib()
    with tempfile.TemporaryDirectory() as out:
        case = build_case(config)
        if whole:  # every field on the whole grid first, as before the per-block builders
            for field in _lazy_fields(case).values():
                field.whole()
        model = FluidModel(config, runtime, Path(out), case=case)
        record["model"] = peak_rss_mib()
        case, setup, dist = model.case, model.setup, model.dist
        fields = [dist.put(case.density, 0, setup.dtype), dist.put(case.velocity, 1, setup.dtype)]
        if case.velocity_gradient is not None:
            fields.append(dist.put(case.velocity_gradient, 2, setup.dtype))
        jax.block_until_ready(fields)
        record["fields"] = peak_rss_mib()
        del fields
        state = model.initial_state()
        jax.block_until_ready(state)
        record["state"] = peak_rss_mib()
        state, _ = model.advance(state, 1)
        jax.block_until_ready(state)
        record["step"] = peak_rss_mib()
    record["whole_fields"] = whole_fields(model.case)
    record["shape"] = list(model.setup.shape)
    record["local_shape"] = list(model.dist.decomposition.local_shape)
    print("RESULT " + json.dumps(record), flush=True)
    return 0


def _mpirun(processes: int, args: list[str], whole: bool) -> subprocess.CompletedProcess:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("mpirun not found (make install puts Open MPI on the PATH)")
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # one device per process
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    command = [mpirun, "-n", str(processes), "--bind-to", "none", sys.executable, "-m",
               "solver.bench.setup_memory", "--worker", *(["--whole"] if whole else []),
               "--", *args]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True)


def result_records(stdout: str) -> list[dict]:
    """Every ``RESULT {json}`` record in the ranks' merged output. mpirun forwards each rank's
    output on its own, so a record may follow another rank's unterminated message or another
    record on the same line: every occurrence is decoded, not only the first of a line."""
    decoder = json.JSONDecoder()
    records = []
    for match in re.finditer("RESULT ", stdout):
        try:
            records.append(decoder.raw_decode(stdout, match.end())[0])
        except json.JSONDecodeError:
            continue  # a marker inside a message, not a record
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solver.bench setup_memory")
    parser.add_argument("--case", default="taylor_green")
    parser.add_argument("--lattice", default="d3q19", help="the fluid config group")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="case.resolution")
    parser.add_argument(
        "--whole",
        action="store_true",
        help="evaluate every grid field on the whole grid before placing it (the set-up as it "
        "was before the per-block builders, for comparison)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (after --)")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.overrides, args.whole)
    sizes = args.sizes or CASE_SIZES.get(args.case, SIZES)
    print(
        f"peak host RSS per process (VmHWM, MiB), {args.case} {args.lattice.upper()}, "
        f"{args.processes} MPI processes, domain.halo=mpi"
        + (", every field built on the whole grid first (--whole)" if args.whole else "")
    )
    columns = " ".join(f"{HEADERS[p]:>16}" for p in PHASES)
    print(f"{'grid':>14} {'block':>14} {'rank':>4} {columns}")
    status = 0
    for size in sizes:
        overrides = [f"case={args.case}", f"fluid={args.lattice}", f"case.resolution={size}",
                     "domain.halo=mpi", "output.fields=false", "output.png=false",
                     *args.overrides]  # fmt: skip
        result = _mpirun(args.processes, overrides, args.whole)
        records = sorted(result_records(result.stdout), key=lambda r: r["rank"])
        if result.returncode != 0 or len(records) != args.processes:
            print(f"size {size}: failed (exit {result.returncode})\n{result.stderr[-2000:]}")
            status = 1
            continue
        for r in records:
            grid = "x".join(str(n) for n in r["shape"])
            block = "x".join(str(n) for n in r["local_shape"])
            values = " ".join(f"{r[p]:>16.0f}" for p in PHASES)
            print(f"{grid:>14} {block:>14} {r['rank']:>4} {values}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
