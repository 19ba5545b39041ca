"""The fluid validation cases rerun with each storage precision of the populations, side by side.

Issue 16 asks for the errors and orders of every case per ``fluid.storage``. This case reruns
the seven fluid cases of ``validation.cases.operators`` with ``Context.storage`` set, which adds
``fluid.storage`` to every fluid run and sets its compute precision to float32 (16-bit storage
needs float32 compute, and the float32 column is then the baseline at equal compute: the cases
that ask for float64 (Taylor-Green, Womersley, duct) run in float32 in every column here, so
their float32 column can differ from their own report rows). Every check keeps its own case's
tolerance. The report gets one table with a column per storage and a bar chart of the errors;
docs/storage.md discusses where 16-bit storage is not good enough.
"""

from __future__ import annotations

import dataclasses

from validation.cases import side_by_side
from validation.cases.operators import NAMES, RERUN
from validation.context import Context
from validation.report import CaseResult

STORAGES = ("float32", "float16", "bfloat16")


def _with_storage(ctx: Context, storage: str) -> Context:
    return dataclasses.replace(ctx, storage=storage)


def _table(by_storage: side_by_side.Results) -> list[str]:
    """Markdown rows: case | quantity | one error column per storage | tolerance."""
    return side_by_side.table(STORAGES, STORAGES, by_storage, NAMES)


def storage(ctx: Context) -> CaseResult:
    """The convergence, channel, cavity and cylinder cases with float32, float16 and bfloat16
    storage of the populations (float32 compute)."""
    result, by_storage = side_by_side.compare(ctx, "storage", STORAGES, _with_storage, RERUN)
    result.notes += [
        "The fluid cases rerun with each storage of the populations (`fluid.storage`, float32 "
        "compute in every column: cases that ask for float64 run in float32 here), each check "
        "with its own case's tolerance. 16-bit storage keeps (f - w) * s (docs/storage.md). "
        "Errors:",
        *_table(by_storage),
    ]
    title = "Validation cases by storage precision (float32 compute)"
    result.plots.append(side_by_side.plot(ctx, STORAGES, by_storage, NAMES, title, "storage"))
    return result
