"""Result rows of the validation cases: the printed table and the Markdown report."""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path

HEADER = ("case", "quantity", "measured", "reference", "error", "tolerance", "result")


@dataclass(frozen=True)
class Check:
    """One compared quantity.

    Attributes:
        case: case name as given on the command line.
        quantity: what was measured, with its metric (e.g. "u L2 rel. error").
        measured: the simulated value.
        reference: the analytic or published value (nan where the measured value is itself an
            error norm against a reference field).
        error: the number compared with the tolerance.
        tolerance: the largest accepted error.
    """

    case: str
    quantity: str
    measured: float
    reference: float
    error: float
    tolerance: float

    @property
    def passed(self) -> bool:
        # NaN (a diverged run) must fail, so compare in the direction that NaN makes False
        return bool(self.error <= self.tolerance)

    def cells(self) -> tuple[str, ...]:
        return (
            self.case,
            self.quantity,
            _number(self.measured),
            _number(self.reference),
            _number(self.error),
            _number(self.tolerance),
            "pass" if self.passed else "FAIL",
        )


@dataclass
class CaseResult:
    """What one validation case hands back.

    Attributes:
        name: case name.
        checks: the compared quantities.
        plots: PNG files written, relative to the output directory.
        notes: Markdown lines describing the set-up (resolutions, steps, tau, timing).
        wall_time_s: seconds the case took, simulations included.
        interrupted: what stopped the case before it finished (e.g. "stopped by SIGTERM"), or
            None; an interrupted case has no checks and counts as neither passed nor failed.
    """

    name: str
    checks: list[Check] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_time_s: float = 0.0
    interrupted: str | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


def _number(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e4:
        return f"{value:.4g}"
    return f"{value:.3e}"


def format_table(checks: list[Check]) -> str:
    """Plain-text table with aligned columns, one row per check."""
    rows = [HEADER] + [c.cells() for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = []
    for k, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(checks: list[Check]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for c in checks:
        cells = [cell.replace("|", "\\|") for cell in c.cells()]  # a bare | would end the cell
        if not c.passed:
            cells[-1] = "**FAIL**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def append_report(
    path: Path,
    results: list[CaseResult],
    fast: bool,
    wall_time_s: float,
    environment: str,
    not_run: list[str] | None = None,
) -> None:
    """Append one run's section (summary table, then each case's notes and plots) to ``path``.

    A suite stopped early says so at the top: which case was interrupted and which ``not_run``.
    """
    checks = [c for r in results for c in r.checks]
    passed = sum(c.passed for c in checks)
    stamp = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    stopped = [r for r in results if r.interrupted]
    out = [
        f"## Validation run {stamp} ({'fast' if fast else 'full'} sizes"
        f"{', stopped early' if stopped else ''})",
        "",
        f"{passed} of {len(checks)} checks passed; total wall time {wall_time_s:.0f} s. "
        f"{environment}",
        "",
    ]
    for r in stopped:
        out += [
            f"**Stopped early**: {r.name} was interrupted ({r.interrupted}) and has no results"
            + (f"; not run: {', '.join(not_run)}." if not_run else "."),
            "",
        ]
    out += [markdown_table(checks), ""]
    for r in results:
        took = (
            f"interrupted after {r.wall_time_s:.0f} s"
            if r.interrupted
            else f"{r.wall_time_s:.0f} s"
        )
        out += [f"### {r.name} ({took})", ""]
        for k, note in enumerate(r.notes):
            out.append(note)
            # a paragraph ends with a blank line; list items and the rows of a table do not
            # (a blank line inside a table would end it)
            if not note.startswith(("- ", "|")) and k + 1 < len(r.notes):
                out.append("")
        out += [""]
        out += [f"![{r.name}: {Path(p).stem}]({p})" for p in r.plots]
        out += [""]
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")
