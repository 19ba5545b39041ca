"""``python -m validation [--fast] [--out DIR] [--work DIR] [--list] [CASE ...]``.

Runs the named cases (all by default) through the solver's public API, prints one row per
checked quantity (case, quantity, measured, reference, error, tolerance, pass/fail), writes the
plots and appends a section to ``report.md`` in the output directory. Exit status: 0 when every
check passes, 1 when any fails (a case that raises counts as failed), 2 for an unknown case, 75
when stopped by SIGTERM, SIGUSR1 or SIGUSR2 (the case in progress is marked interrupted, the
remaining ones do not run, and the report holds the cases finished so far).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from pathlib import Path

from solver.errors import PreemptedError
from validation.cases import CASES
from validation.context import Context
from validation.report import CaseResult, Check, append_report, format_table
from validation.stops import EXIT_STOPPED, SuiteStopped, SuiteStops


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m validation", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"any of: {', '.join(CASES)}")
    parser.add_argument("--fast", action="store_true", help="small grids and short runs")
    parser.add_argument("--out", type=Path, default=Path("validation_out"),
                        help="report and plots directory (default: validation_out)")  # fmt: skip
    parser.add_argument("--work", type=Path, default=None,
                        help="solver run directories (default: OUT/runs)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--body-precision", choices=("float64", "float32"), default="float64",
                        help="bodies.precision of the rigid-body cases")  # fmt: skip
    return parser.parse_args(argv)


def _environment() -> str:
    import jax

    devices = ", ".join(sorted({d.device_kind for d in jax.devices()}))
    return (
        f"JAX {jax.__version__} on {devices} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}."
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    names = args.cases or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; allowed: {', '.join(CASES)}",
              file=sys.stderr)  # fmt: skip
        return 2
    stops = SuiteStops()
    ctx = Context(fast=args.fast, out=args.out, work=args.work or args.out / "runs", stops=stops,
                  body_precision=args.body_precision)  # fmt: skip
    ctx.out.mkdir(parents=True, exist_ok=True)
    results: list[CaseResult] = []
    start = time.perf_counter()
    with stops:
        for name in names:
            print(f"== {name} ({'fast' if args.fast else 'full'})", flush=True)
            result = _run_case(name, ctx, stops)
            results.append(result)
            if result.interrupted or stops.requested:
                break
            print(format_table(result.checks), flush=True)
        not_run = names[len(results) :]
        total = time.perf_counter() - start
        checks = [c for r in results for c in r.checks]
        print(f"\n== summary ({total:.0f} s)")
        print(format_table(checks))
        report = ctx.out / "report.md"
        append_report(report, results, args.fast, total, _environment(), not_run)
        failed = [c for c in checks if not c.passed]
        print(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed; "
              f"report: {report}")  # fmt: skip
    interrupted = [r.name for r in results if r.interrupted]
    if interrupted or not_run:
        print(f"stopped by {stops.stop_requested or 'a signal'}: "
              f"{len(results) - len(interrupted)} case(s) finished, interrupted: "
              f"{', '.join(interrupted) or 'none'}, not run: {', '.join(not_run) or 'none'}; "
              f"report: {report}", file=sys.stderr)  # fmt: skip
        return EXIT_STOPPED
    return 1 if failed else 0


def _run_case(name: str, ctx: Context, stops: SuiteStops) -> CaseResult:
    """One case; a crash is a failed case, a stop request an interrupted one."""
    case_start = time.perf_counter()
    try:
        result = CASES[name](ctx)
    except (SuiteStopped, PreemptedError) as stop:  # a stop request, not a failure
        return _interrupted(name, stops, stop, time.perf_counter() - case_start)
    except Exception as exc:  # a crashing case is a failed case; the others still run
        traceback.print_exc()
        nan = float("nan")
        result = CaseResult(name, checks=[Check(name, "run", nan, nan, nan, nan)],
                            notes=[f"Raised {type(exc).__name__}: {exc}"])  # fmt: skip
    result.wall_time_s = time.perf_counter() - case_start
    return result


def _interrupted(name: str, stops: SuiteStops, stop: BaseException, seconds: float) -> CaseResult:
    reason = f"stopped by {stops.stop_requested}" if stops.requested else str(stop)
    return CaseResult(name, notes=[f"Interrupted: {stop}; no results."], wall_time_s=seconds,
                      interrupted=reason)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
