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

from validation.cases import cavity, channels, cylinder, side_by_side, taylor_green
from validation.context import Context
from validation.report import CaseResult

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
NAMES = tuple(name for name, _ in RERUN)


def _with_operator(ctx: Context, collision: str) -> Context:
    return dataclasses.replace(ctx, collision=collision)


def _table(by_operator: side_by_side.Results) -> list[str]:
    """Markdown rows: case | quantity | one error column per operator | tolerance."""
    headers = [op.upper() if op != "regularized" else "regularized" for op in OPERATORS]
    return side_by_side.table(OPERATORS, headers, by_operator, NAMES)


def operators(ctx: Context) -> CaseResult:
    """The convergence, channel, cavity and cylinder cases with TRT, regularized and KBC."""
    result, by_operator = side_by_side.compare(ctx, "operators", OPERATORS, _with_operator, RERUN)
    result.notes += [
        "The fluid cases rerun with each collision operator (`fluid.collision`; KBC on D3Q27 "
        "where the case uses D3Q19), each check with its own case's tolerance. Errors:",
        *_table(by_operator),
    ]
    title = "Validation cases by collision operator"
    result.plots.append(side_by_side.plot(ctx, OPERATORS, by_operator, NAMES, title, "operators"))
    return result
