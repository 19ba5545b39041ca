"""``python -m validation [--fast] [--out DIR] [--work DIR] [--list] [CASE ...]``.

Runs the named cases (all by default) through the solver's public API, prints one row per
checked quantity (case, quantity, measured, reference, error, tolerance, pass/fail), writes the
plots and appends a section to ``report.md`` in the output directory. Exit status: 0 when every
check passes, 1 when any fails (a case that raises counts as failed), 2 for an unknown case.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from pathlib import Path

from validation.cases import CASES
from validation.context import Context
from validation.report import CaseResult, Check, append_report, format_table


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
    ctx = Context(fast=args.fast, out=args.out, work=args.work or args.out / "runs")
    ctx.out.mkdir(parents=True, exist_ok=True)
    results: list[CaseResult] = []
    start = time.perf_counter()
    for name in names:
        print(f"== {name} ({'fast' if args.fast else 'full'})", flush=True)
        case_start = time.perf_counter()
        try:
            result = CASES[name](ctx)
        except Exception as exc:  # a crashing case is a failed case; the others still run
            traceback.print_exc()
            nan = float("nan")
            result = CaseResult(name, checks=[Check(name, "run", nan, nan, nan, nan)],
                                notes=[f"Raised {type(exc).__name__}: {exc}"])  # fmt: skip
        result.wall_time_s = time.perf_counter() - case_start
        results.append(result)
        print(format_table(result.checks), flush=True)
    total = time.perf_counter() - start
    checks = [c for r in results for c in r.checks]
    print(f"\n== summary ({total:.0f} s)")
    print(format_table(checks))
    append_report(ctx.out / "report.md", results, args.fast, total, _environment())
    failed = [c for c in checks if not c.passed]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks passed; "
          f"report: {ctx.out / 'report.md'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
