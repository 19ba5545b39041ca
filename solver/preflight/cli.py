"""``python -m solver.preflight [OPTIONS] [OVERRIDE ...]``: run on every process of a job.

Overrides are those of ``python -m solver`` (``domain.mesh=[2,2]``, ``domain.halo=mpi``,
``checkpoint.dir=...``, ``fluid=d3q19``); the preflight uses the domain, the lattice and the
checkpoint directory of the config they compose. Order of the work:

1. start the runtime of ``domain.halo`` (as the solver does) and gather every process's
   versions and devices on process 0; a mismatch across processes stops everything here (the
   collectives that follow could hang on it);
2. all-reduce, ppermute ring and one exchange per pair of face neighbours of the mesh;
3. the numerical canary on the requested decomposition;
4. the write/read speed of the checkpoint directory;
5. process 0 prints the table and writes preflight.json and preflight.txt into --out; every
   process exits with the same code (solver/preflight/__init__.py lists them).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from solver.preflight import EXIT_CONFIG, EXIT_OK

DEFAULT_OUT = Path("outputs/preflight")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m solver.preflight",
        description="Check versions, collectives, links, numerics and checkpoint storage of "
        "this job before the solver runs (run it with the same launcher and overrides).",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDE",
        help="Hydra overrides as for python -m solver (domain.mesh=[2,2] ...)",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"report directory (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--allow-untested",
        action="store_true",
        help="a combination missing from data/compatibility.json only warns",
    )
    parser.add_argument(
        "--storage-mib",
        type=int,
        default=256,
        help="MiB each process writes and reads in the checkpoint directory "
        "(0: no storage test; default 256)",
    )
    parser.add_argument(
        "--message-mib",
        type=float,
        default=4.0,
        help="bandwidth message per link and ring step, MiB (default 4)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed exchanges per link and message size (median; default 5)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="speed limits (default data/preflight/baseline.json)",
    )
    parser.add_argument(
        "--record-canary",
        action="store_true",
        help="one process: store this platform's 1-device canary checksum in "
        "data/preflight/canary.json and exit",
    )
    args = parser.parse_args(argv)
    if args.storage_mib < 0 or args.message_mib <= 0 or args.repeats < 1:
        parser.error("--storage-mib must be >= 0, --message-mib > 0 and --repeats >= 1")
    return args


def fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return code


def _compose(overrides: list[str]):
    """(config, run dir or None): hydra.* overrides are taken out (the run dir is noted).

    Composes with Hydra's compose API and validates with ``solver.config.load``, as
    ``solver.api.compose_config`` does, without importing the run loop (Orbax and friends).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from solver.app import CONFIG_DIR
    from solver.config import load

    run_dir = None
    plain = []
    for item in overrides:
        if item.startswith("hydra.run.dir="):
            run_dir = Path(item.split("=", 1)[1])
        elif not item.startswith("hydra."):
            plain.append(item)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=plain)
    finally:
        GlobalHydra.instance().clear()
    return load(cfg), run_dir


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    logging.getLogger("absl").setLevel(logging.WARNING)
    from solver.app import one_line
    from solver.errors import ConfigError
    from solver.preflight import inject

    try:
        faults = inject.parse()
        config, run_dir = _compose(args.overrides)
    except ConfigError as err:
        return fail(f"bad configuration: {err}", EXIT_CONFIG)
    except Exception as err:  # a Hydra composition error: one line, as python -m solver
        return fail(f"bad configuration: {one_line(err)}", EXIT_CONFIG)
    if args.record_canary:
        from solver.preflight.numerical import record

        key, values = record(config.fluid.lattice)
        print(f"recorded {key}: sha256 {values['sha256']}")
        return EXIT_OK
    from solver.distributed.runtime import start

    try:
        runtime = start(config.domain.halo)
    except ConfigError as err:
        return fail(f"bad configuration: {err}", EXIT_CONFIG)
    from solver.preflight.stages import run_stages

    checkpoint_dir = config.checkpoint.dir
    if checkpoint_dir is None:
        checkpoint_dir = (run_dir or args.out) / "checkpoints"
    try:
        report = run_stages(runtime, config, args, faults, Path(checkpoint_dir), started)
    except ConfigError as err:
        return fail(f"bad configuration: {err}", EXIT_CONFIG)
    code = int(runtime.broadcast_text(str(report["exit_code"] if report else 0)))
    if report is not None:
        from solver.preflight.report import format_table, write

        json_path, _ = write(report, args.out)
        print(format_table(report), flush=True)
        print(f"report: {json_path}", flush=True)
        for problem in report["problems"]:
            print(f"preflight: {problem}", file=sys.stderr, flush=True)
    runtime.shutdown()
    return code
