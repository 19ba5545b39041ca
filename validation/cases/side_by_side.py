"""Rerun a set of validation cases in several variants and report them side by side.

A variant is a change to the ``Context`` every run of a case goes through (a collision operator,
a storage precision). ``compare`` reruns each case per variant, keeps every check with its own
case's tolerance, and returns one ``CaseResult`` whose notes hold a table with a column per
variant and whose plot is a bar chart of error / tolerance (``validation.cases.operators``,
``validation.cases.storage``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import numpy as np

from validation import plots
from validation.context import Context
from validation.report import CaseResult, Check

CaseFunction = Callable[[Context], CaseResult]
# variant -> case name -> result
Results = dict[str, dict[str, CaseResult]]


def rerun(ctx: Context, variant: str, name: str, case: CaseFunction) -> CaseResult:
    """One case in one variant (``ctx`` already set up for it); a run that fails or diverges is
    a failed row, not a crash."""
    try:
        return case(ctx)
    except Exception as exc:  # noqa: BLE001 - a diverged run is a result of this comparison
        nan = float("nan")
        return CaseResult(name, checks=[Check(name, "run", nan, nan, nan, nan)],
                          notes=[f"{variant}: raised {type(exc).__name__}: {exc}"])  # fmt: skip


def row_key(quantity: str) -> str:
    """A check's quantity without a trailing location "(at ...)", which can differ between
    variants (where the largest error sits) while the row is the same."""
    return re.sub(r"\s*\(at [^)]*\)$", "", quantity)


def _matching(checks: Sequence[Check], k: int, key: str) -> Check | None:
    """The check of another variant for row ``key``: at the same position, else by key."""
    if k < len(checks) and row_key(checks[k].quantity) == key:
        return checks[k]
    return next((c for c in checks if row_key(c.quantity) == key), None)


def table(variants: Sequence[str], headers: Sequence[str], results: Results,
          names: Sequence[str]) -> list[str]:  # fmt: skip
    """Markdown rows: case | quantity | one error column per variant | tolerance. The first
    variant's checks name the rows; a check another variant lacks is "-"."""
    rows = ["", f"| case | quantity | {' | '.join(headers)} | tolerance |",
            "|---" * (3 + len(variants)) + "|"]  # fmt: skip
    for name in names:
        for k, check in enumerate(results[variants[0]][name].checks):
            key = row_key(check.quantity)
            cells = []
            for variant in variants:
                c = _matching(results[variant][name].checks, k, key)
                cells.append("-" if c is None else f"{c.error:.3g}{'' if c.passed else ' (FAIL)'}")
            quantity = key.replace("|", "\\|")  # a bare | would end the cell
            rows.append(f"| {name} | {quantity} | {' | '.join(cells)} | "
                        f"{check.tolerance:.3g} |")  # fmt: skip
    return rows


def plot(ctx: Context, variants: Sequence[str], results: Results, names: Sequence[str],
         title: str, file_name: str) -> str:  # fmt: skip
    """Bar chart: each check's error over its tolerance, one bar per variant; returns the
    PNG's path relative to the report."""
    labels, ratios = [], {v: [] for v in variants}
    for name in names:
        for k, check in enumerate(results[variants[0]][name].checks):
            key = row_key(check.quantity)
            labels.append(f"{name}\n{key[:28]}")
            for variant in variants:
                c = _matching(results[variant][name].checks, k, key)
                value = float("nan") if c is None else c.error / c.tolerance
                ratios[variant].append(value if np.isfinite(value) else float("nan"))
    fig, (ax,) = plots.figure(1, width=max(6.0, 0.55 * len(labels)))
    x = np.arange(len(labels))
    width = 0.8 / len(variants)
    for j, variant in enumerate(variants):
        ax.bar(x + (j - (len(variants) - 1) / 2) * width, ratios[variant], width, label=variant)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel("error / tolerance (pass below 1)")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    path, rel = ctx.plot_path(file_name)
    plots.save(fig, path)
    return rel


def compare(
    ctx: Context,
    name: str,
    variants: Sequence[str],
    with_variant: Callable[[Context, str], Context],
    cases: Sequence[tuple[str, CaseFunction]],
) -> tuple[CaseResult, Results]:
    """Run every case in every variant; the result (named ``name``) holds every check as
    "<variant> <case>: <quantity>". Its notes and plots are left to the caller."""
    result = CaseResult(name)
    results: Results = {}
    for variant in variants:
        run_ctx = with_variant(ctx, variant)
        results[variant] = {n: rerun(run_ctx, variant, n, case) for n, case in cases}
        for case_name, _ in cases:
            for check in results[variant][case_name].checks:
                quantity = f"{variant} {case_name}: {check.quantity}"
                result.checks.append(dataclasses.replace(check, case=name, quantity=quantity))
    return result, results
