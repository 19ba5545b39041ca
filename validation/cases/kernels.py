"""The fluid validation cases rerun with each implementation of the step, side by side.

Issue 16 asks that every validation case pass with every kernel that supports it. This case
reruns the fluid cases of ``validation.cases.operators`` that the native in-place kernel covers
(periodic boxes, walls and moving walls, body forces: the Taylor-Green vortices, the Womersley
channel, the duct and the two cavities) with ``fluid.kernel=xla``, ``native`` and ``cuda`` (its
CPU emulation: the same per-cell code, stored bits equal to native's), each check with its own
case's tolerance, on a CPU; on a GPU with ``xla``, ``pallas`` and ``cuda`` (pallas has the same
coverage, but interpreted on a CPU it would take hours at these sizes). The cylinder (open faces,
an obstacle force) is not among them: the one-buffer kernels refuse open boundaries
(docs/performance.md, "One population buffer").
"""

from __future__ import annotations

import dataclasses

import jax

from validation.cases import side_by_side
from validation.cases.operators import RERUN
from validation.context import Context
from validation.report import CaseResult

# what the native kernel runs (not the cylinder: open faces and an obstacle force)
NATIVE_CASES = tuple((name, case) for name, case in RERUN if name != "schaefer_turek_2d1")
NAMES = tuple(name for name, _ in NATIVE_CASES)


def _with_kernel(ctx: Context, kernel: str) -> Context:
    return dataclasses.replace(ctx, kernel=kernel)


def kernels_here() -> tuple[str, ...]:
    """The XLA step and this back end's one-buffer kernels (native and the CUDA kernel's
    emulation on a CPU; pallas and cuda on a GPU)."""
    return ("xla", "pallas" if jax.default_backend() == "gpu" else "native", "cuda")


def kernels(ctx: Context) -> CaseResult:
    """The convergence, channel and cavity cases with the XLA step and the one-buffer kernel."""
    names = kernels_here()
    result, by_kernel = side_by_side.compare(ctx, "kernels", names, _with_kernel, NATIVE_CASES)
    shown = ", ".join(f"`{n}`" for n in names[1:])
    result.notes += [
        f"The fluid cases the one-buffer kernels cover, rerun with `fluid.kernel={names[0]}`, "
        f"{shown}, each check with its own case's tolerance (the cylinder needs open faces, "
        "which the one-buffer kernels do not have). Errors:",
        *side_by_side.table(names, names, by_kernel, NAMES),
    ]
    title = "Validation cases by kernel"
    result.plots.append(side_by_side.plot(ctx, names, by_kernel, NAMES, title, "kernels"))
    return result
