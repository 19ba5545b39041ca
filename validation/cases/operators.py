"""The fluid validation cases rerun with each collision operator, side by side.

Issue 14 asks that the new operators keep the errors and orders of the existing cases. This case
reruns them with ``Context.collision`` set, which swaps the ``fluid.collision`` the case names
(TRT in all of them) for the operator and, for KBC, moves D3Q19 runs to D3Q27 (KBC has no D3Q19
set). Every check keeps the tolerance of its own case: a new operator passes where it is as good
as TRT was asked to be. The report gets one table with a column per operator and a bar chart of
the errors.

Not rerun: Poiseuille and Couette check the closed-form slip of BGK and TRT (no such formula for
the regularized or KBC operators), and the coupled and body cases do not depend on the operator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from validation import plots
from validation.cases import cavity, channels, cylinder, taylor_green
from validation.context import Context
from validation.report import CaseResult, Check

OPERATORS = ("trt", "regularized", "kbc")

# (name, case function); each gets a context whose runs use the operator
RERUN: tuple[tuple[str, Callable[[Context], CaseResult]], ...] = (
    ("taylor_green", taylor_green.taylor_green),
    ("taylor_green_3d", taylor_green.taylor_green_3d),
    ("womersley", channels.womersley),
    ("duct", channels.duct),
    ("cavity_re100", cavity.cavity_re100),
    ("cavity_re1000", cavity.cavity_re1000),
    ("schaefer_turek_2d1", cylinder.schaefer_turek_2d1),
)


def _rerun(ctx: Context, collision: str, name: str, case: Callable) -> CaseResult:
    """One case with one operator; a run that fails or diverges is a failed row, not a crash."""
    try:
        return case(dataclasses.replace(ctx, collision=collision))
    except Exception as exc:  # noqa: BLE001 - a diverged run is a result of this comparison
        nan = float("nan")
        return CaseResult(name, checks=[Check(name, "run", nan, nan, nan, nan)],
                          notes=[f"{collision}: raised {type(exc).__name__}: {exc}"])  # fmt: skip


def _same(a: str, b: str) -> bool:
    """Whether two checks measure the same quantity (the cavity's names also give the point
    of the largest deviation, which differs between runs)."""
    return a.split(" (at ")[0] == b.split(" (at ")[0]


def _table(by_operator: dict[str, dict[str, CaseResult]]) -> list[str]:
    """Markdown rows: case | quantity | one error column per operator."""
    header = " | ".join(op.upper() if op != "regularized" else "regularized" for op in OPERATORS)
    rows = ["", f"| case | quantity | {header} | tolerance |", "|---" * (3 + len(OPERATORS)) + "|"]
    for name, _ in RERUN:
        base = by_operator[OPERATORS[0]][name].checks
        for k, check in enumerate(base):
            cells = []
            for op in OPERATORS:
                checks = by_operator[op][name].checks
                if k < len(checks) and _same(checks[k].quantity, check.quantity):
                    c = checks[k]
                    cells.append(f"{c.error:.3g}{'' if c.passed else ' (FAIL)'}")
                else:
                    cells.append("-")
            quantity = check.quantity.split(" (at ")[0].replace("|", "\\|")
            rows.append(f"| {name} | {quantity} | {' | '.join(cells)} | "
                        f"{check.tolerance:.3g} |")  # fmt: skip
    return rows


def _plot(ctx: Context, by_operator: dict[str, dict[str, CaseResult]]) -> str:
    """Bar chart: each check's error over its tolerance, one bar per operator."""
    labels, ratios = [], {op: [] for op in OPERATORS}
    for name, _ in RERUN:
        for k, check in enumerate(by_operator[OPERATORS[0]][name].checks):
            labels.append(f"{name}\n{check.quantity[:28]}")
            for op in OPERATORS:
                checks = by_operator[op][name].checks
                ok = k < len(checks) and _same(checks[k].quantity, check.quantity)
                value = checks[k].error / checks[k].tolerance if ok else float("nan")
                ratios[op].append(value if np.isfinite(value) else float("nan"))
    fig, (ax,) = plots.figure(1, width=max(6.0, 0.55 * len(labels)))
    x = np.arange(len(labels))
    width = 0.8 / len(OPERATORS)
    for j, op in enumerate(OPERATORS):
        ax.bar(x + (j - (len(OPERATORS) - 1) / 2) * width, ratios[op], width, label=op)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel("error / tolerance (pass below 1)")
    ax.legend(fontsize=8)
    fig.suptitle("Validation cases by collision operator", fontsize=10)
    path, rel = ctx.plot_path("operators")
    plots.save(fig, path)
    return rel


def operators(ctx: Context) -> CaseResult:
    """The convergence, channel, cavity and cylinder cases with TRT, regularized and KBC."""
    result = CaseResult("operators")
    by_operator: dict[str, dict[str, CaseResult]] = {}
    for op in OPERATORS:
        by_operator[op] = {name: _rerun(ctx, op, name, case) for name, case in RERUN}
        for name, _ in RERUN:
            for check in by_operator[op][name].checks:
                quantity = f"{op} {name}: {check.quantity}"
                row = dataclasses.replace(check, case="operators", quantity=quantity)
                result.checks.append(row)
    result.notes += [
        "The fluid cases rerun with each collision operator (`fluid.collision`; KBC on D3Q27 "
        "where the case uses D3Q19), each check with its own case's tolerance. Errors:",
        *_table(by_operator),
    ]
    result.plots.append(_plot(ctx, by_operator))
    return result
