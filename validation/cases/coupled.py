"""Bodies moving in the fluid against experiments.

settling_sphere: ten Cate, Nieuwstad, Derksen & Van den Akker 2002 (Phys. Fluids 14, 4012): a
nylon sphere (d = 15 mm, 1120 kg/m^3) released from rest in a 100 x 100 x 160 mm box of
silicone oil, four oils E1-E4. The check is the maximum settling velocity against the one they
measured (their Table 2, as waLBerla's SettlingSphereInBox benchmark quotes it); the plot shows
the whole velocity history. PSM coupling (kernels/coupling.py), D3Q19 TRT, float32.

sphere_array: Zick & Homsy 1982, the drag of a periodic array of fixed spheres in Stokes flow.

dkt: Glowinski et al. 2001, drafting, kissing and tumbling of two spheres: the three stages
appear, and the kiss time converges between two resolutions.

dkt_2d: the same for two disks in their 2D channel (D2Q9, the disks held in the plane).

wet_bounce: Gondret, Lance & Petit 2002, a steel sphere bouncing off a wall in a viscous fluid:
the effective restitution over the dry one against the Stokes number of the impact, with and
without the lubrication correction, against Legendre et al.'s fit exp(-35 / St) to their data.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from validation import plots
from validation.context import Context
from validation.report import CaseResult, Check

# ten Cate et al. 2002: (fluid density kg/m^3, dynamic viscosity Pa s, max settling velocity m/s,
# Re of the terminal velocity, duration of the run s: until the sphere has reached the floor)
TEN_CATE = {
    "E1": (970.0, 0.373, 0.035986, 1.5, 4.5),
    "E2": (965.0, 0.212, 0.05718, 4.1, 3.0),
    "E3": (962.0, 0.113, 0.087269, 11.6, 2.0),
    "E4": (960.0, 0.058, 0.12224, 31.9, 1.5),
}
# The goal: within 5 % of the experiment in all four (waLBerla's benchmark accepts 10 %).
MAX_VELOCITY_TOL = 0.05
# Cells per diameter, per fluid: the coarsest that reaches the goal (a multiple of 3, so that the
# box is whole cells). PSM needs about 24 for < 5 % at Re 185-365 (Rettinger & Rude 2017); at the
# ten Cate Reynolds numbers the wake is short. Measured at 6: E1 +2.8 %, E2 +6.1 %, E3 +3.7 %,
# E4 -1.5 %; E2 at 9: +3.1 % (the partly covered cells let the viscous flow through: too fast).
RESOLUTION = {
    "full": {"E1": 6, "E2": 9, "E3": 6, "E4": 6},
    "fast": {"E4": 6},
}
FAST_FLUIDS = ("E4",)
FAST_DURATION = 1.0  # s: the E4 maximum falls at 0.9-1.1 s
# the fast run (make test) on the native kernel: the same maximum as the XLA step's to the
# digits printed (0.120353 m/s for the full E4, docs/coupling.md) in a third of the time
FAST_KERNEL = ["fluid.kernel=native"]
# PSM's drag depends on tau (the partly covered cells are more permeable at larger tau; the
# sphere array at 16 cells: K error -13 % at tau 0.7, -17 % at 1.0, -22 % at 1.5), so each fluid
# runs at the lattice velocity that puts tau near TARGET_TAU (the viscous oils E1-E3 would
# otherwise run at tau 0.9-1.8 with u_lattice 0.1), never above MAX_U_LATTICE.
TARGET_TAU = 0.6
MAX_U_LATTICE = 0.1
BOX_DIAMETERS = 15e-3


def u_lattice_for(viscosity: float, density: float, velocity: float, resolution: int) -> float:
    """The fluid.u_lattice that gives tau = TARGET_TAU: nu_lattice = nu u / (U dx)."""
    dx = BOX_DIAMETERS / resolution
    nu = viscosity / density
    u = (TARGET_TAU - 0.5) / 3.0 * velocity * dx / nu
    return float(min(MAX_U_LATTICE, round(u, 5)))


def settling_sphere(ctx: Context) -> CaseResult:
    name = "settling_sphere"
    mode = "fast" if ctx.fast else "full"
    resolutions = RESOLUTION[mode]
    fluids = FAST_FLUIDS if ctx.fast else tuple(TEN_CATE)
    result = CaseResult(name)
    cells = ", ".join(f"{k}: {v}" for k, v in resolutions.items())
    result.notes.append(
        "Sphere settling in a closed box, ten Cate et al. 2002 (Phys. Fluids 14, 4012): "
        "d = 15 mm, 1120 kg/m^3, box 100 x 100 x 160 mm, released from rest with its lowest "
        "point 123.75 mm above the floor (120 mm + d/4, as waLBerla's benchmark, to match the "
        "plotted experiment). PSM coupling, D3Q19 TRT, float32, cells per diameter D "
        f"{cells}, the lattice velocity of the measured maximum chosen for tau ~ {TARGET_TAU} "
        f"(at most {MAX_U_LATTICE}). Reference: the maximum settling velocity of their Table 2."
    )
    histories = {}
    for fluid in fluids:
        rho, mu, u_max, re, duration = TEN_CATE[fluid]
        if ctx.fast:
            duration = FAST_DURATION
        resolution = resolutions[fluid]
        u_lattice = u_lattice_for(mu, rho, u_max, resolution)
        run = ctx.simulate(
            name,
            f"{fluid} D={resolution}",
            [
                "case=settling_sphere",
                "fluid=d3q19",
                "coupling=psm",
                f"case.fluid_density={rho}",
                f"case.viscosity={mu}",
                f"case.velocity_scale={u_max}",
                f"case.resolution={resolution}",
                f"case.duration={duration}",
                f"fluid.u_lattice={u_lattice}",
                *(FAST_KERNEL if ctx.fast else []),
            ],
        )
        diag = run.summary["diagnostics"]
        measured = float(diag["max_settling_velocity_m_s"])
        result.checks.append(
            Check(
                name,
                f"{fluid} (Re {re}) max settling velocity m/s",
                measured,
                u_max,
                abs(measured / u_max - 1.0),
                MAX_VELOCITY_TOL,
            )
        )
        result.notes.append(run.note())
        histories[fluid] = (resolution, *_track(Path(run.summary["outputs"]["run_json"]).parent))
    fig, (ax,) = plots.figure(1, width=6.0, height=4.0)
    for fluid, (resolution, t, w) in histories.items():
        line = ax.plot(t, w, lw=1.2, label=f"{fluid} PSM D={resolution}")[0]
        ax.axhline(TEN_CATE[fluid][2], color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("t (s)")
    ax.set_ylabel("settling velocity (m/s)")
    ax.set_title("ten Cate et al. 2002: dotted = measured maximum", fontsize=9)
    ax.legend(fontsize=8)
    return _with_plot(ctx, name, fig, result)


def _with_plot(ctx: Context, name: str, fig, result: CaseResult) -> CaseResult:
    """``result`` with the figure saved as the case's plot."""
    path, rel = ctx.plot_path(name)
    plots.save(fig, path)
    result.plots.append(rel)
    return result


def _track(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(time s, settling velocity m/s, down positive) of body 0 from bodies_track.csv."""
    data = np.genfromtxt(run_dir / "bodies_track.csv", delimiter=",", names=True)
    body0 = data[data["body"] == 0]
    return body0["time_s"], -body0["vz"]


# --- sphere_array: Zick & Homsy 1982 ----------------------------------------------------------

# Zick & Homsy 1982 (J. Fluid Mech. 115, 13), simple cubic array: solid fraction c -> drag factor
# K = F / (6 pi mu a U), U the superficial velocity.
ZICK_HOMSY = {0.027: 2.008, 0.064: 2.810, 0.125: 4.292, 0.216: 7.442}
# The goal at the finest grid: within 3 % (the fast run checks a looser, measured bound)
DRAG_FACTOR_TOL = 0.03
ARRAY_RESOLUTIONS = {"full": (24, 48), "fast": (16,)}
ARRAY_FAST = (0.064,)
# fast: c = 0.064 at 16 cells per side (radius 4 cells, tau 1) measured -11.2 % (PSM's drag
# error falls with the radius and grows with tau: docs/coupling.md); 0.15 still fails a
# coupling that lost or doubled the force, which is what the fast run is for
ARRAY_FAST_TOL = 0.15


def sphere_array(ctx: Context) -> CaseResult:
    name = "sphere_array"
    mode = "fast" if ctx.fast else "full"
    resolutions = ARRAY_RESOLUTIONS[mode]
    concentrations = ARRAY_FAST if ctx.fast else tuple(ZICK_HOMSY)
    tolerance = ARRAY_FAST_TOL if ctx.fast else DRAG_FACTOR_TOL
    result = CaseResult(name)
    result.notes.append(
        "Stokes flow (Re 0.05) through a periodic simple-cubic array of fixed spheres, driven "
        "by a body force; PSM coupling, D3Q19 TRT, float32, tau 1, 0.5 viscous times L^2/nu. "
        "Drag factor K = F / (6 pi mu a U) with U the superficial velocity and F the force "
        "that balances the mean pressure gradient over the unit cell (the drag plus the "
        "gradient's push rho g V on the sphere), against Zick & Homsy 1982 (J. Fluid Mech. "
        "115, 13). Checked at the finest grid; the coarser grid shows the convergence."
    )
    errors: dict[float, list[float]] = {}
    for c in concentrations:
        reference = ZICK_HOMSY[c]
        for n in resolutions:
            run = ctx.simulate(
                name,
                f"c={c} N={n}",
                ["case=sphere_array", "fluid=d3q19", "coupling=psm",
                 f"case.concentration={c}", f"case.resolution={n}"],
            )  # fmt: skip
            diag = run.summary["diagnostics"]
            k = float(diag["drag_factor_k"])
            errors.setdefault(c, []).append(k / reference - 1.0)
            radius = float(run.summary["coupling"]["radius_cells"])
            result.notes.append(f"{run.note()}, sphere radius {radius:.2f} cells, K = {k:.4f}")
            if n == resolutions[-1]:
                result.checks.append(
                    Check(name, f"K at c={c} (N={n})", k, reference, abs(k / reference - 1.0),
                          tolerance)
                )  # fmt: skip
    fig, (ax,) = plots.figure(1, width=5.0, height=3.6)
    for c, errs in errors.items():
        ax.plot(resolutions, [100 * e for e in errs], "o-", label=f"c = {c}")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("cells per unit-cell side")
    ax.set_ylabel("K error vs Zick & Homsy (%)")
    ax.legend(fontsize=8)
    return _with_plot(ctx, name, fig, result)


# --- dkt: Glowinski et al. 2001 ---------------------------------------------------------------

# Cells per sphere diameter: the coarser run and the finer one whose kiss times must agree
DKT_RESOLUTIONS = {"full": (6, 9), "fast": (4, 6)}
DKT_DURATION = {"full": 1.0, "fast": 1.0}
# The goal: the kiss time converged within 5 % between the two resolutions (measured
# 0.3389 s at 6 and 0.3475 s at 9 cells per diameter: 2.5 %). The fast pair is coarser: 0.2932 s
# at 4 cells, 13.5 % from 6; its bound still fails a run without drafting or kissing.
KISS_TIME_TOL = {"full": 0.05, "fast": 0.2}


def dkt(ctx: Context) -> CaseResult:
    name = "dkt"
    mode = "fast" if ctx.fast else "full"
    resolutions = DKT_RESOLUTIONS[mode]
    result = CaseResult(name)
    result.notes.append(
        "Drafting, kissing and tumbling of two spheres settling in a closed 1 x 1 x 4 cm box, "
        "the 3D case of Glowinski, Pan, Hesla, Joseph & Periaux 2001 (J. Comput. Phys. 169, "
        "363): d = 1/6 cm, 1140 kg/m^3 in 1000 kg/m^3, nu = 1e-6 m^2/s, centres at rest "
        "(0.51, 0.5, 3.16) and (0.5, 0.5, 3.5) cm (the leading sphere 0.1 mm off the axis "
        "seeds the tumbling instability). PSM coupling with the lubrication correction, D3Q19 "
        "TRT, float32. Checked: the three stages appear at every resolution (drafting: the "
        f"trailing sphere settles faster; kissing: the gap falls below 5 % of d; tumbling: "
        f"the trailing sphere a quarter diameter below the leading one, both clear of the "
        f"floor), and the kiss time agrees within "
        f"{KISS_TIME_TOL[mode]:.0%} between {resolutions[0]} and {resolutions[1]} cells per "
        "diameter."
    )
    return _dkt_pair(
        ctx, result, ["case=dkt", "fluid=d3q19"], resolutions, DKT_DURATION[mode],
        KISS_TIME_TOL[mode], "z",
    )  # fmt: skip


def _pair_track(
    run_dir: Path, diameter: float, up: str = "z"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time s, heights (2, k) m along ``up``, gap / d (k,)) of bodies 0 and 1 from
    bodies_track.csv."""
    data = np.genfromtxt(run_dir / "bodies_track.csv", delimiter=",", names=True)
    a, b = data[data["body"] == 0], data[data["body"] == 1]
    offset = np.stack([b[c] - a[c] for c in ("x", "y", "z")])
    gap = (np.linalg.norm(offset, axis=0) - diameter) / diameter
    return a["time_s"], np.stack([a[up], b[up]]), gap


# --- dkt_2d: Glowinski et al. 2001, their 2D case -----------------------------------------------

# Cells per disk diameter: the coarser run and the finer one whose kiss times must agree (2D is
# cheap: the finer run is 160 x 640 cells, 16,000 steps)
DKT_2D_RESOLUTIONS = {"full": (10, 16), "fast": (6, 8)}
DKT_2D_DURATION = {"full": 4.0, "fast": 3.0}  # s: the tumble comes at about 2.6 s
# The goal: the kiss time converged within 5 % between the two resolutions. The fast
# pair is coarser (3 to 4 cells per radius); its bound still fails a run without the stages.
DKT_2D_KISS_TOL = {"full": 0.05, "fast": 0.2}


def dkt_2d(ctx: Context) -> CaseResult:
    name = "dkt_2d"
    mode = "fast" if ctx.fast else "full"
    resolutions = DKT_2D_RESOLUTIONS[mode]
    tol = DKT_2D_KISS_TOL[mode]
    result = CaseResult(name)
    result.notes.append(
        "Drafting, kissing and tumbling of two disks settling in a closed 2 x 8 cm channel, the "
        "2D case of Glowinski, Pan, Hesla, Joseph & Periaux 2001 (J. Comput. Phys. 169, 363) as "
        "LBM and IB papers reproduce it: d = 0.2 cm, 1010 kg/m^3 in 1000 kg/m^3, nu = 1e-6 "
        "m^2/s, centres at rest (1.0, 6.8) and (0.999, 7.2) cm. PSM coupling on D2Q9 TRT, "
        "float32; the disks are spheres of the body model held in the plane (cylinders of 1 m "
        "depth), with the 2D lubrication law (h^-3/2) and the sphere contact law in the plane. "
        "Checked: the three stages appear at every resolution (drafting: the trailing disk "
        "settles faster; kissing: the gap falls below 5 % of d; tumbling: the trailing disk a "
        "quarter diameter below the leading one, both clear of the floor), and the kiss time "
        f"agrees within {tol:.0%} between {resolutions[0]} and {resolutions[1]} cells per "
        "diameter."
    )
    return _dkt_pair(
        ctx, result, ["case=dkt_2d", "fluid=d2q9"], resolutions, DKT_2D_DURATION[mode], tol, "y"
    )


def _dkt_pair(
    ctx: Context,
    result: CaseResult,
    case: list[str],
    resolutions: tuple[int, int],
    duration: float,
    tol: float,
    up: str,
) -> CaseResult:
    """The two runs of a drafting-kissing-tumbling case (``case``: its case and lattice
    overrides) at the coarser and the finer resolution: the three stages checked in each, the
    kiss times against each other (``tol``), and the heights (along ``up``) and gap plotted."""
    name = result.name
    runs = {}
    for n in resolutions:
        run = ctx.simulate(
            name,
            f"D={n}",
            [*case, "coupling=psm", f"case.resolution={n}", f"case.duration={duration}"],
        )
        diag = run.summary["diagnostics"]
        for stage in ("drafting", "kissed", "tumbled"):
            seen = float(bool(diag.get(stage)))
            result.checks.append(Check(name, f"{stage} (D={n})", seen, 1.0, 1.0 - seen, 0.5))
        note = f"{run.note()}, min gap {diag['min_gap_over_d']:.4f} d"
        for key in ("kiss_time_s", "tumble_time_s"):
            if key in diag:
                note += f", {key.split('_')[0]} at {diag[key]:.4f} s"
        result.notes.append(note)
        diameter = float(run.summary["coupling"]["diameter_m"])
        runs[n] = (Path(run.summary["outputs"]["run_json"]).parent, diag, diameter)
    coarse, fine = (runs[n][1].get("kiss_time_s") for n in resolutions)
    if coarse is not None and fine is not None:
        result.checks.append(
            Check(name, f"kiss time s, D={resolutions[0]} vs D={resolutions[1]}", coarse, fine,
                  abs(coarse / fine - 1.0), tol)
        )  # fmt: skip
    else:
        result.checks.append(
            Check(name, "kiss time s at both resolutions", float("nan"), 0.0, float("nan"), tol)
        )  # fmt: skip
    fig, (ax_h, ax_gap) = plots.figure(2, width=9.0, height=3.6)
    for n, (run_dir, diag, diameter) in runs.items():
        t, h, gap = _pair_track(run_dir, diameter, up)
        lead = ax_h.plot(t, 100 * h[0], lw=1.2, label=f"leading D={n}")[0]
        ax_h.plot(t, 100 * h[1], lw=1.2, ls="--", color=lead.get_color(), label=f"trailing D={n}")
        ax_gap.plot(t, gap, lw=1.2, color=lead.get_color(), label=f"D={n}")
        if "kiss_time_s" in diag:
            ax_gap.axvline(diag["kiss_time_s"], color=lead.get_color(), ls=":", lw=1)
    ax_h.set_xlabel("t (s)")
    ax_h.set_ylabel("height of the centre (cm)")
    ax_h.legend(fontsize=7)
    ax_gap.set_xlabel("t (s)")
    ax_gap.set_ylabel("gap / d")
    ax_gap.set_ylim(bottom=0.0)
    ax_gap.set_title("dotted: the kiss (gap < 0.05 d)", fontsize=9)
    ax_gap.legend(fontsize=7)
    return _with_plot(ctx, name, fig, result)


# --- wet_bounce: Gondret et al. 2002 ----------------------------------------------------------

# Fluids (density kg/m^3, dynamic viscosity Pa s) for a 6 mm steel sphere released 5 d above the
# floor: Gondret's silicone oil of their St 27 case and a thinner one (St ~ 50 at the impact),
# the two the roughness gap was fitted to (coupling.lubrication_min_gap, docs/validation.md);
# then three silicone oils it was not fitted to, St ~ 9 (no rebound to speak of), ~ 100, ~ 220
BOUNCE_FLUIDS = {
    "oil 0.1 Pa s": (965.0, 0.1),
    "oil 0.05 Pa s": (950.0, 0.05),
    "oil 0.2 Pa s": (970.0, 0.2),
    "oil 0.025 Pa s": (940.0, 0.025),
    "oil 0.0125 Pa s": (935.0, 0.0125),
}
FITTED = ("oil 0.1 Pa s", "oil 0.05 Pa s")
BOUNCE_FAST = ("oil 0.1 Pa s",)
# e / e_dry within 0.1 of the fit: Gondret's measurements scatter about +-0.1 around it at a
# given St (their Fig. 7), and the resolved simulations of the same experiments land within
# about that of the data (Kempe & Frohlich 2012; Rettinger & Rude 2022 with lubrication)
RESTITUTION_TOL = 0.1


def wet_bounce(ctx: Context) -> CaseResult:
    name = "wet_bounce"
    fluids = BOUNCE_FAST if ctx.fast else tuple(BOUNCE_FLUIDS)
    result = CaseResult(name)
    result.notes.append(
        "A steel sphere (d = 6 mm, 7800 kg/m^3, dry restitution 0.97) released from rest 5 d "
        "above the floor of a 48 mm box of silicone oil falls onto it and bounces, Gondret, "
        "Lance & Petit 2002 (Phys. Fluids 14, 643). Effective restitution e = U_out / U_in "
        "(fastest ascent after the first contact over the fastest descent before it), Stokes "
        "number St = rho_s U_in d / (9 mu); reference: e / e_dry = exp(-35 / St), the fit of "
        "Legendre, Zenit, Daniel & Guiraud 2006 (Chem. Eng. Sci. 61, 3543) to Gondret's data. "
        "PSM coupling, D3Q19 TRT, float32, 6 cells per diameter: the film below one cell is "
        "not resolved, which is what the lubrication correction (Brenner 1961 as a correction "
        "below 2/3 cell, Simeonov & Calantoni 2012) is for; both are shown, the check is on "
        "the run with it. Its roughness gap (coupling.lubrication_min_gap) was fitted to the "
        "two oils marked 'fitted'; the other three test whether it transfers."
    )
    points = []
    for fluid in fluids:
        rho, mu = BOUNCE_FLUIDS[fluid]
        for lubrication in (True, False):
            label = f"{fluid}, lubrication {'on' if lubrication else 'off'}"
            run = ctx.simulate(
                name,
                label,
                ["case=wet_bounce", "fluid=d3q19", "coupling=psm",
                 f"case.fluid_density={rho}", f"case.viscosity={mu}",
                 f"coupling.lubrication={str(lubrication).lower()}"],
            )  # fmt: skip
            diag = run.summary["diagnostics"]
            if not diag.get("impacted"):
                result.checks.append(
                    Check(name, f"impact ({label})", 0.0, 1.0, 1.0, 0.5)
                )  # fmt: skip
                continue
            ratio, fit = diag["restitution_ratio"], diag["reference_restitution_ratio"]
            stokes = diag["stokes"]
            result.notes.append(
                f"{run.note()}: U_in {diag['impact_velocity_m_s']:.4f} m/s (St {stokes:.1f}), "
                f"U_out {diag['rebound_velocity_m_s']:.4f} m/s, e/e_dry {ratio:.3f} "
                f"(fit {fit:.3f}), rebound {diag['rebound_height_over_d']:.3f} d"
            )
            if lubrication:
                role = "fitted" if fluid in FITTED else "not fitted"
                result.checks.append(
                    Check(name, f"e/e_dry at St {stokes:.1f} ({fluid}, {role})", ratio, fit,
                          abs(ratio - fit), RESTITUTION_TOL)
                )  # fmt: skip
            run_dir = Path(run.summary["outputs"]["run_json"]).parent
            points.append((fluid, lubrication, stokes, ratio, *_height(run_dir)))
    fig, (ax_e, ax_z) = plots.figure(2, width=9.0, height=3.6)
    st = np.logspace(0.5, 3.0, 200)
    ax_e.semilogx(st, np.exp(-35.0 / st), "k-", lw=1, label="exp(-35/St) (Legendre et al. 2006)")
    labelled = set()
    for fluid, lubrication, stokes, ratio, t, z in points:
        # filled: with the lubrication correction (blue: the two oils its roughness gap was
        # fitted to, orange: the others); open squares: without it
        kind = ("fitted" if fluid in FITTED else "not fitted") if lubrication else "off"
        style = {"fitted": ("o", "C0", "C0"), "not fitted": ("o", "C1", "C1"),
                 "off": ("s", "none", "0.4")}[kind]  # fmt: skip
        label = {"fitted": "lubrication on, roughness fitted here",
                 "not fitted": "lubrication on, not fitted here",
                 "off": "lubrication off"}[kind]  # fmt: skip
        ax_e.semilogx([stokes], [ratio], style[0], mfc=style[1], mec=style[2],
                      label=None if kind in labelled else label)  # fmt: skip
        labelled.add(kind)
        if lubrication:
            ax_z.plot(t, 1e3 * z, lw=1.2, label=f"St {stokes:.0f} ({fluid})")
    ax_e.set_xlabel("St")
    ax_e.set_ylabel("e / e_dry")
    ax_e.set_ylim(0.0, 1.0)
    ax_e.legend(fontsize=7)
    ax_z.set_xlabel("t (s)")
    ax_z.set_ylabel("gap to the floor (mm), lubrication on")
    ax_z.set_ylim(bottom=-0.1)
    ax_z.legend(fontsize=7)
    return _with_plot(ctx, name, fig, result)


def _height(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(time s, gap between the sphere's lowest point and the floor m) of body 0."""
    summary = json.loads((run_dir / "run.json").read_text())
    radius = 0.5 * float(summary["coupling"]["diameter_m"])
    data = np.genfromtxt(run_dir / "bodies_track.csv", delimiter=",", names=True)
    body0 = data[data["body"] == 0]
    return body0["time_s"], body0["z"] - radius
