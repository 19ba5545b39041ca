"""The fluid validation cases rerun with each implementation of the step, side by side.

Issue 16 asks that every validation case pass with every kernel that supports it. This case
reruns the fluid cases of ``validation.cases.operators`` that the native in-place kernel covers
(periodic boxes, walls and moving walls, body forces: the Taylor-Green vortices, the Womersley
channel, the duct and the two cavities) with ``fluid.kernel=xla`` and ``native``, each check
with its own case's tolerance. The cylinder (open faces, an obstacle force) is not among them:
``fluid.kernel=native`` refuses open boundaries (docs/performance.md, "One population buffer").
"""

from __future__ import annotations

import dataclasses

from validation.cases import side_by_side
from validation.cases.operators import RERUN
from validation.context import Context
from validation.report import CaseResult

KERNELS = ("xla", "native")
# what the native kernel runs (not the cylinder: open faces and an obstacle force)
NATIVE_CASES = tuple((name, case) for name, case in RERUN if name != "schaefer_turek_2d1")
NAMES = tuple(name for name, _ in NATIVE_CASES)


def _with_kernel(ctx: Context, kernel: str) -> Context:
    return dataclasses.replace(ctx, kernel=kernel)


def kernels(ctx: Context) -> CaseResult:
    """The convergence, channel and cavity cases with the XLA step and the native kernel."""
    result, by_kernel = side_by_side.compare(ctx, "kernels", KERNELS, _with_kernel, NATIVE_CASES)
    result.notes += [
        "The fluid cases the native in-place kernel covers, rerun with `fluid.kernel=xla` and "
        "`native`, each check with its own case's tolerance (the cylinder needs open faces, "
        "which the native kernel does not have). Errors:",
        *side_by_side.table(KERNELS, KERNELS, by_kernel, NAMES),
    ]
    title = "Validation cases by kernel"
    result.plots.append(side_by_side.plot(ctx, KERNELS, by_kernel, NAMES, title, "kernels"))
    return result
