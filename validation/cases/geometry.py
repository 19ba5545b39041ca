"""A sphere from an STL mesh against the exact sphere and the literature, at Re = 100.

sphere_re100: steady flow past a sphere, Re = U D / nu = 100, case=geometry. The same tunnel is
run twice: with the sample mesh data/meshes/sphere.stl (20480 triangles, chordal error 1e-4 D)
and with the built-in exact sphere (its link fractions from the ray-sphere intersection). The
two must agree within 1 % (the voxeliser loses nothing); both are compared with the unbounded
sphere's drag, C_D = 1.09 at Re = 100 (Johnson & Patel 1999, J. Fluid Mech. 378, 19; the
correlation of Clift, Grace & Weber 1978, "Bubbles, Drops and Particles", Table 5.2, gives
24/Re (1 + 0.1935 Re^0.6305) = 1.088), whose 3 % goal needs a finer grid than the full size
here (see LITERATURE_GOAL).

Set-up: D3Q19 BGK (TRT with an inlet and an outlet was seen to go unstable below tau = 0.535),
float32, u_lattice 0.1, periodic sides (a free-slip tunnel for this symmetric flow), the
non-reflecting characteristic outlet. The inflow is ramped from rest over about two acoustic
periods of the tunnel (the quarter-wave mode between the velocity inlet and a reflecting
outlet, period 4 L / c_s). With the pressure outlet that mode still rang by +-14 % after 40
D/U (C_D then taken as the mean over whole periods of the ringing); the characteristic outlet
lets it out, and C_D settles to +-0.02 % by 35 D/U: it is the mean over the last quarter of
the run (the case's ``cd_mean``, still over whole periods if any ringing is left).
The fast variant (make test) is coarse and short and checks only the STL-against-exact agreement.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from validation import plots
from validation.context import Context
from validation.report import CaseResult, Check

REFERENCE_CD = 1.09
# The goal: the mesh reproduces the exact sphere's drag within 1 % (met: 1e-3 and less).
AGREEMENT_TOL = 0.01
# The goal for both against the literature is 3 % (LITERATURE_GOAL): NOT reached at the
# sizes this CPU affords. At Re = 100 the boundary layer is about D / sqrt(Re) = D / 10 thick,
# one cell at 10 cells per diameter, and the drag comes out high: measured (exact sphere,
# periodic sides) 1.353 and 1.280 at 8 cells in tunnels 4 D and 8 D wide (linear in the
# blockage ratio: 1.255 unbounded, +15 %), 1.217 at 10 cells in a 6 D x 12 D tunnel and 1.231
# (STL sphere) in the 6 D x 10 D tunnel of the full size here (+13 %; about 4 % of it the 2.2 %
# blockage). The goal needs about 30 cells per diameter in a tunnel 8 D wide (~1e10 cell
# updates: hours on this 2-core CPU, a minute on a GPU). The check keeps the goal as its
# tolerance, so the report shows the row failing until a finer full size is affordable.
LITERATURE_GOAL = 0.03
DIAMETER = 0.1  # m
VELOCITY = 1.0  # m/s
STL = "data/meshes/sphere.stl"
# cells per diameter; tunnel (length, width = height) and the sphere's distance from the inlet,
# in diameters; simulated time in D/U
SIZES = {
    "full": {"resolution": 10, "length": 10.0, "width": 6.0, "upstream": 3.0, "duration": 40.0},
    "fast": {"resolution": 6, "length": 8.0, "width": 4.0, "upstream": 3.0, "duration": 16.0},
}
U_LATTICE = 0.1
ACOUSTIC_PERIODS = 2.0  # of the ramp
STATS_FRACTION = 0.25  # of the run: 10 D/U, after the wake has settled (to 0.2 %)


def overrides(size: dict, mesh: str) -> list[str]:
    """The run's Hydra overrides for ``mesh`` ("sphere" or the STL path)."""
    d = DIAMETER
    length, width = size["length"] * d, size["width"] * d
    cells = size["resolution"] * size["length"]
    # quarter-wave period of the tunnel, 4 L / c_s in steps, times dt = u_lattice dx / U
    period = 4.0 * cells / math.sqrt(1.0 / 3.0) * U_LATTICE * (d / size["resolution"]) / VELOCITY
    ramp = min(ACOUSTIC_PERIODS * period, 0.5 * size["duration"] * d / VELOCITY)
    return [
        "case=geometry",
        "fluid=d3q19",
        "fluid.collision=bgk",
        f"fluid.u_lattice={U_LATTICE}",
        f"case.mesh={mesh}",
        "case.units=mm",
        "case.scale=1.0",
        f"case.sphere_diameter={d}",
        f"case.resolution={size['resolution']}",
        f"case.length={length}",
        f"case.width={width}",
        f"case.height={width}",
        f"case.translation=[{size['upstream'] * d},{0.5 * width},{0.5 * width}]",
        f"case.velocity={VELOCITY}",
        f"case.viscosity={VELOCITY * d / 100.0}",
        f"case.reference_length={d}",
        f"case.reference_area={math.pi * d * d / 4.0}",
        f"case.ramp_time={ramp}",
        f"case.duration={size['duration'] * d / VELOCITY}",
        f"case.stats_fraction={STATS_FRACTION}",
        "case.outlet=characteristic",
    ]


def sphere_re100(ctx: Context) -> CaseResult:
    name = "sphere_re100"
    size = SIZES["fast" if ctx.fast else "full"]
    result = CaseResult(name)
    result.notes.append(
        "Sphere at Re = 100 in a wind tunnel (case=geometry), D3Q19 BGK, float32, "
        f"{size['resolution']} cells per diameter, tunnel {size['length']:g} D x "
        f"{size['width']:g} D x {size['width']:g} D with periodic sides (free-slip for this "
        f"symmetric flow; blockage {math.pi / 4 / size['width'] ** 2:.1%}), sphere "
        f"{size['upstream']:g} D from the inlet, inflow ramped from rest over about "
        f"{ACOUSTIC_PERIODS:g} acoustic periods, the characteristic outlet, {size['duration']:g} "
        f"D/U, C_D averaged over the last {STATS_FRACTION:.0%}. The STL "
        f"sphere ({STL}, 20480 triangles) against the exact sphere; reference C_D = 1.09 "
        "(Johnson & Patel 1999; Clift, Grace & Weber 1978: 1.088). The issue's goal against "
        f"it, {LITERATURE_GOAL:.0%}, needs about 30 cells per diameter (the boundary layer, "
        "D / sqrt(Re), is one cell thick here); at this size the drag is about 13 % high: "
        "the goal is not reached (validation/cases/geometry.py)."
    )
    runs = {}
    for label, mesh in (("STL sphere", STL), ("exact sphere", "sphere")):
        run = ctx.simulate(name, label, overrides(size, mesh))
        runs[label] = run
        result.notes.append(run.note())
    cd = {label: float(run.summary["diagnostics"]["cd_mean"]) for label, run in runs.items()}
    result.checks.append(
        Check(
            name,
            "C_D STL / exact sphere - 1",
            cd["STL sphere"],
            cd["exact sphere"],
            abs(cd["STL sphere"] / cd["exact sphere"] - 1.0),
            AGREEMENT_TOL,
        )
    )
    if not ctx.fast:
        for label in runs:
            result.checks.append(
                Check(
                    name,
                    f"C_D {label} vs literature (goal {LITERATURE_GOAL:.0%})",
                    cd[label],
                    REFERENCE_CD,
                    abs(cd[label] / REFERENCE_CD - 1.0),
                    LITERATURE_GOAL,
                )
            )
    fig, (ax,) = plots.figure(1, width=6.0, height=3.5)
    for label, run in runs.items():
        forces = np.genfromtxt(
            Path(run.summary["outputs"]["forces_csv"]), delimiter=",", names=True
        )
        t = forces["time_s"] * VELOCITY / DIAMETER
        ax.plot(t, forces["cd"], lw=1.0, label=f"{label}: mean {cd[label]:.4f}")
    ax.axhline(REFERENCE_CD, color="k", ls=":", lw=1, label=f"literature {REFERENCE_CD}")
    ax.axvspan((1.0 - STATS_FRACTION) * size["duration"], size["duration"], color="0.9")
    ax.set_ylim(0.5 * REFERENCE_CD, 2.0 * REFERENCE_CD)
    ax.set_xlabel("t U / D")
    ax.set_ylabel("C_D")
    ax.set_title("sphere, Re = 100 (shaded: averaging window)", fontsize=9)
    ax.legend(fontsize=8)
    path, rel = ctx.plot_path(name)
    plots.save(fig, path)
    result.plots.append(rel)
    return result
