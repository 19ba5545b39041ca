"""A sphere from an STL mesh against the exact sphere and the literature, at Re = 100.

sphere_re100: steady flow past a sphere, Re = U D / nu = 100, case=geometry. The same tunnel is
run twice: with the sample mesh data/meshes/sphere.stl (20480 triangles, chordal error 1e-4 D)
and with the built-in exact sphere (its link fractions from the ray-sphere intersection). The
two must agree within 1 % (the voxeliser loses nothing); both are compared with the unbounded
sphere's drag, C_D = 1.09 at Re = 100 (Johnson & Patel 1999, J. Fluid Mech. 378, 19; the
correlation of Clift, Grace & Weber 1978, "Bubbles, Drops and Particles", Table 5.2, gives
24/Re (1 + 0.1935 Re^0.6305) = 1.088), with the issue's 3 % goal (LITERATURE_GOAL: why the
sphere sits 8 D behind the inlet).

Set-up: a quarter model (``case.walls=symmetry``: the sphere centred on the symmetry planes
y = 0 and z = 0, a quarter of the cells; its solid nodes and link fractions are exactly the
quarter of the whole tunnel's, tests/test_symmetry_planes.py), D3Q19 BGK (TRT with an inlet and
an outlet was seen to go unstable below tau = 0.535), float32, the non-reflecting characteristic
outlet. The whole tunnel the quarter stands for has free-slip sides ``width`` D apart. The
inflow is ramped from rest over about two acoustic periods of the tunnel (the quarter-wave mode
between the velocity inlet and a reflecting outlet, period 4 L / c_s); C_D settles to 0.05 % by
20 D/U and is the mean over the last fifth of the run (the case's ``cd_mean``).
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
# The goal for both against the literature is 3 % (LITERATURE_GOAL). Measured on the
# quarter model (exact sphere, 10 D x 10 D whole cross-section, u_lattice 0.05; docs/validation.md
# has the table): with the sphere 3 D behind the velocity inlet, 1.153 at 16 cells per diameter
# (also at u_lattice 0.025), 1.142 at 20 and 1.131 at 32: second-order convergence to 1.123,
# 3 % high at any resolution. The inlet that close was the bias, not the grid or the tunnel's
# width (20 D wide: 1.153 again): 8, 10 and 15 D upstream give 1.1245, 1.1240 and 1.1237 at 16
# cells (once settled, after 30 D/U); the 3 D value is 2.6 % higher. The full size therefore
# puts the sphere 8 D behind the inlet and takes 20 cells per diameter: 1.113, whose step from
# 16 cells extrapolates at second order to 1.093.
LITERATURE_GOAL = 0.03
DIAMETER = 0.1  # m
VELOCITY = 1.0  # m/s
STL = "data/meshes/sphere.stl"
# cells per diameter; the whole tunnel's length and width = height, and the sphere's distance
# from the inlet, in diameters (the quarter is width / 2 wide and high); simulated time in D/U
SIZES = {
    "full": {"resolution": 20, "length": 15.0, "width": 10.0, "upstream": 8.0, "duration": 35.0},
    "fast": {"resolution": 6, "length": 8.0, "width": 4.0, "upstream": 3.0, "duration": 16.0},
}
U_LATTICE = 0.05
ACOUSTIC_PERIODS = 2.0  # of the ramp
# of the run: the last 7 D/U, after the wake has settled (to 0.05 % by 30 D/U at 16 cells)
STATS_FRACTION = 0.2


def overrides(size: dict, mesh: str) -> list[str]:
    """The run's Hydra overrides for ``mesh`` ("sphere" or the STL path): the quarter model."""
    d = DIAMETER
    length, quarter = size["length"] * d, 0.5 * size["width"] * d
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
        f"case.width={quarter}",
        f"case.height={quarter}",
        "case.walls=symmetry",
        f"case.translation=[{size['upstream'] * d},0.0,0.0]",
        f"case.velocity={VELOCITY}",
        f"case.viscosity={VELOCITY * d / 100.0}",
        f"case.reference_length={d}",
        # the quarter's force over the quarter's frontal area: the whole sphere's C_D
        f"case.reference_area={math.pi * d * d / 16.0}",
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
        "Sphere at Re = 100 in a wind tunnel (case=geometry), D3Q19 BGK, float32, u_lattice "
        f"{U_LATTICE}, {size['resolution']} cells per diameter, a quarter model "
        "(case.walls=symmetry, the sphere centred on the y = 0 and z = 0 symmetry planes) of "
        f"a tunnel {size['length']:g} D x {size['width']:g} D x {size['width']:g} D with "
        f"free-slip sides (blockage {math.pi / 4 / size['width'] ** 2:.1%}), sphere "
        f"{size['upstream']:g} D from the inlet, inflow ramped from rest over about "
        f"{ACOUSTIC_PERIODS:g} acoustic periods, the characteristic outlet, {size['duration']:g} "
        f"D/U, C_D averaged over the last {STATS_FRACTION:.0%}. The STL "
        f"sphere ({STL}, 20480 triangles) against the exact sphere; reference C_D = 1.09 "
        "(Johnson & Patel 1999; Clift, Grace & Weber 1978: 1.088), the issue's goal against "
        f"it {LITERATURE_GOAL:.0%}. With the sphere 3 D behind the inlet C_D was 2.6 % higher "
        "at 16 cells (validation/cases/geometry.py, docs/geometry.md)."
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
