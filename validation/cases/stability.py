"""Robustness at high Reynolds numbers: runs that must reach their end without diverging.

Checks of robustness, not accuracy (issue 14): the cylinder of the Schaefer-Turek channel at
Re = 1,000 and 10,000 on 20 cells per diameter (tau 0.504 and 0.5004) with KBC, and Brachet's
Taylor-Green vortex at Re = 16,000 on 64^3 (D3Q27 KBC). TRT diverges in the first 400 steps of
both cylinder runs (docs/validation.md, "Stability map"). Reported: the Strouhal number (None
where the shedding is irregular) and the peak dissipation rate.
"""

from __future__ import annotations

import math

import numpy as np

from validation.context import Context
from validation.report import CaseResult, Check

CYLINDER_RE = (1_000, 10_000)
CYLINDER_RESOLUTION = 20
TGV_RE = 16_000.0
TGV_SETTINGS = {"full": (64, 20.0), "fast": (24, 1.0)}


def _finite(summary: dict) -> float:
    """0 for a run that completed with finite diagnostics, else 1 (compared with tolerance 0)."""
    if summary.get("status") != "completed":
        return 1.0
    values = [v for v in summary.get("diagnostics", {}).values() if isinstance(v, float)]
    return 0.0 if all(math.isfinite(v) for v in values) else 1.0


def stability(ctx: Context) -> CaseResult:
    result = CaseResult("stability")
    result.notes.append(
        "Runs that must end without diverging (KBC; TRT diverges at these tau). Error 0 = "
        "completed with finite diagnostics."
    )
    duration = ctx.pick(8.0, 1.0)
    for re in CYLINDER_RE:
        viscosity = 0.1 * 1.0 / re  # U_mean = 1 m/s, D = 0.1 m
        sim = ctx.simulate(
            "stability",
            f"cylinder Re={re}",
            [
                "case=cylinder",
                "fluid=d2q9",
                "fluid.collision=kbc",
                f"case.viscosity={viscosity}",
                f"case.resolution={CYLINDER_RESOLUTION}",
                f"case.duration={duration}",
            ],
        )
        diag = sim.summary["diagnostics"]
        result.checks.append(
            Check("stability", f"cylinder Re = {re:,} runs {duration:g} s", _finite(sim.summary),
                  0.0, _finite(sim.summary), 0.0)
        )  # fmt: skip
        st = diag.get("strouhal")
        result.notes.append(
            sim.note() + f", St = {'irregular' if st is None else f'{st:.3f}'}, "
            f"mean Cd = {diag.get('cd_mean', float('nan')):.3f}"
        )
    n, t_end = TGV_SETTINGS["fast" if ctx.fast else "full"]
    sim = ctx.simulate(
        "stability",
        f"Taylor-Green Re={TGV_RE:g}",
        [
            "case=taylor_green",
            "case.variant=brachet",
            "fluid=d3q27",
            "fluid.collision=kbc",
            f"case.length={2.0 * np.pi}",
            "case.u0=1.0",
            f"case.viscosity={1.0 / TGV_RE}",
            f"case.resolution={n}",
            f"case.duration={t_end}",
            "chunk=20",
        ],
    )
    diag = sim.summary["diagnostics"]
    result.checks.append(
        Check("stability", f"Taylor-Green Re = {TGV_RE:,.0f} runs to t* = {t_end:g}",
              _finite(sim.summary), 0.0, _finite(sim.summary), 0.0)
    )  # fmt: skip
    result.notes.append(
        sim.note() + f", peak eps* = {diag.get('dissipation_peak', float('nan')):.5f} at "
        f"t* = {diag.get('dissipation_peak_time', float('nan')):.2f}"
    )
    return result
