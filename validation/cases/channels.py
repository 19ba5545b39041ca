"""Wall-bounded laminar flows with closed-form solutions: Poiseuille, Womersley, Couette, duct.

Walls are half-way bounce-back, so each wall lies half a cell outside the last fluid node; the
wall positions are read from the solid mask (``Simulation.fluid_span``), not assumed.
"""

from __future__ import annotations

import numpy as np

from solver.fluid import analytic
from validation import plots
from validation.context import Context
from validation.report import CaseResult, Check
from validation.runner import Simulation, convergence_order, relative_l2

# --- Poiseuille ---------------------------------------------------------------------------------
# With half-way bounce-back and Guo forcing the steady lattice solution of the body-force channel
# is the exact parabola shifted by a uniform slip (Ginzburg & d'Humieres 2003, Phys. Rev. E 68,
# 066614; He et al. 1997, J. Stat. Phys. 87, 115 for BGK):
#     u_lattice - u_exact = (16 Lambda - 3) / (3 N^2) * u_max,   N = H / dx,
# where Lambda = (tau - 1/2)^2 for BGK and the TRT magic parameter for TRT (zero for 3/16).
# The check compares the measured max |u - u_exact| / u_max with this prediction.
# Runs are float64 and last three viscous times H^2/nu, so the transient has decayed to
# exp(-3 pi^2) ~ 1e-13; what is left is round-off.
SLIP_PREDICTION_TOL = 1e-9
STEADY_DURATION = 30.0  # s, 3 H^2 / nu for the configs' H = 1 m, nu = 0.1 m^2/s
CHANNEL_U_LATTICE = 0.05  # tau = 0.98 at N = 32, 0.74 at N = 16: a BGK slip well above round-off

# --- Womersley (time-periodic force) ------------------------------------------------------------
# Womersley number alpha = (H/2) sqrt(omega / nu) = 3 with the configs' H and nu.
WOMERSLEY_OMEGA = 3.6  # rad/s, period 1.75 s
WOMERSLEY_AMPLITUDE = 1.8  # m/s^2: the periodic response peaks near amplitude / omega = 0.5 m/s
WOMERSLEY_U_MAX = 0.5  # m/s, steady part
# 1.5 viscous times H^2/nu: the start-up transient decays to exp(-1.5 pi^2) ~ 4e-7 of u_max,
# far below the discretisation error, and the periodic state is what is compared.
WOMERSLEY_DURATION = 15.0  # s
# Diffusive scaling at tau = 0.74: for an unsteady flow the TRT error depends on tau, so tau is
# held fixed while N doubles (at fixed u_lattice the error at N = 32, tau = 1.46, is 3x that at
# N = 16, tau = 0.98).
WOMERSLEY_U_LATTICE_AT_16 = 0.05
# The profile is not a parabola, so the error is second order: measured 2.00 over N = 16-64
# (full) and N = 8-32 (fast).
WOMERSLEY_ORDER_TOL = 0.15
# Max |u - u_exact| / (u_max + amplitude/omega) on the finest grid at the final time (measured
# 2.5e-5 at N = 64, 1.0e-4 at N = 32), with headroom. The error varies over the period, so these
# hold for the phase that WOMERSLEY_DURATION ends on.
WOMERSLEY_TOL = {"full": 4e-5, "fast": 1.5e-4}

# --- Couette ------------------------------------------------------------------------------------
# A linear profile is reproduced exactly by half-way bounce-back with Ladd's moving-wall rule for
# any tau (no curvature, so no slip term); float64, three viscous times: round-off only.
COUETTE_TOL = 1e-9

# --- square duct --------------------------------------------------------------------------------
EXPECTED_ORDER = 2.0
# TRT with Lambda = 3/16 is second order here (the profile is not a parabola); measured 2.05
# (full, N = 16-64) and 2.08 (fast, N = 12-48). The fast set starts at 12 cells because an
# 8-cell duct is still superconvergent (order 2.16 over N = 8-32).
DUCT_ORDER_TOL = 0.15
# Relative L2 error of the cross-section profile on the finest grid: measured 5.2e-5 (full,
# N = 64) and 9.3e-5 (fast, N = 48), with headroom for round-off only.
DUCT_FINEST_TOL = {"full": 8e-5, "fast": 1.5e-4}
# Mean velocity (flow rate), node average against White's series: measured 2.4e-4 (full) and
# 4.2e-4 (fast); both are O(dx^2), the midpoint rule over the cells included.
DUCT_MEAN_TOL = {"full": 3.5e-4, "fast": 6e-4}
DUCT_U_LATTICE_COARSEST = 0.1  # lattice u_max on the coarsest grid, halved per doubling (tau fixed)


def _steady_overrides(case: str, collision: str, n: int) -> list[str]:
    """A 2D channel case run to steady state in float64 with ``n`` cells across."""
    return [
        f"case={case}",
        "fluid=d2q9",
        f"fluid.collision={collision}",
        "fluid.precision=float64",
        f"case.resolution={n}",
        f"case.duration={STEADY_DURATION}",
        f"fluid.u_lattice={CHANNEL_U_LATTICE}",
    ]


def _channel_profile(sim: Simulation) -> tuple[np.ndarray, np.ndarray, float]:
    """(y from the lower wall (m), x-averaged u_x (m/s), height H (m))."""
    fluid, low, high = sim.fluid_span(1)
    y = sim.coordinates(1)[fluid] - low
    u = sim.velocity[0][:, fluid].mean(axis=0)
    return y, u, high - low


def _lambda(sim: Simulation) -> float:
    fluid = sim.summary["config"]["fluid"]
    if str(fluid["collision"]).lower() == "trt":
        return float(fluid["trt_magic"])
    return (sim.tau - 0.5) ** 2


def poiseuille(ctx: Context) -> CaseResult:
    """Body-force channel, BGK and TRT, against the parabola and the predicted wall slip."""
    n = ctx.pick(32, 16)
    result = CaseResult("poiseuille")
    result.notes.append(
        "Plane channel driven by a constant body force g = 8 nu u_max / H^2, half-way "
        "bounce-back walls, float64, run for 3 H^2/nu. Reference: the exact parabola plus the "
        "closed-form bounce-back slip (16 Lambda - 3)/(3 N^2) u_max (Ginzburg & d'Humieres "
        "2003), which is zero for TRT with Lambda = 3/16."
    )
    fig, (ax0, ax1) = plots.figure(2)
    for collision in ("bgk", "trt"):
        sim = ctx.simulate(
            "poiseuille",
            f"{collision.upper()} N={n}",
            _steady_overrides("poiseuille", collision, n),
        )
        c = sim.case_config
        y, u, height = _channel_profile(sim)
        g = 8.0 * c["viscosity"] * c["u_max"] / c["height"] ** 2
        rho = c["density"]
        exact = analytic.poiseuille_profile(y, height, rho * g, rho, c["viscosity"])
        cells = height / sim.dx
        predicted = abs(16.0 * _lambda(sim) - 3.0) / (3.0 * cells**2)
        measured = float(np.max(np.abs(u - exact)) / c["u_max"])
        result.checks.append(
            Check("poiseuille", f"{collision.upper()} max|u-u_exact|/u_max vs slip theory",
                  measured, predicted, abs(measured - predicted), SLIP_PREDICTION_TOL)
        )  # fmt: skip
        result.notes.append(sim.note() + f", Lambda = {_lambda(sim):.4g}")
        ax0.plot(u, y, "o", ms=3, label=f"LBM {collision.upper()}")
        ax1.semilogx(np.abs(u - exact) / c["u_max"] + 1e-17, y, "o-", ms=3,
                     label=collision.upper())  # fmt: skip
    fine = np.linspace(0.0, height, 201)
    ax0.plot(analytic.poiseuille_profile(fine, height, rho * g, rho, c["viscosity"]), fine, "k-",
             lw=1, label="exact")  # fmt: skip
    ax0.set_xlabel("u_x (m/s)")
    ax0.set_ylabel("y (m)")
    ax0.legend(fontsize=8)
    ax1.set_xlabel("|u - u_exact| / u_max")
    ax1.legend(fontsize=8)
    path, rel = ctx.plot_path("poiseuille")
    plots.save(fig, path)
    result.plots.append(rel)
    return result


def _womersley_exact(c: dict, y: np.ndarray, t: float, height: float) -> np.ndarray:
    """The periodic-force channel solution for case config ``c`` (walls at 0 and height)."""
    rho, nu = c["density"], c["viscosity"]
    g = 8.0 * nu * c["u_max"] / c["height"] ** 2
    return analytic.womersley_profile(
        y, t, height, rho * c["amplitude"], c["angular_frequency"], rho, nu, c["phase"],
        constant=rho * g,
    )  # fmt: skip


def womersley(ctx: Context) -> CaseResult:
    """Channel driven by a steady plus sinusoidal body force, against the Womersley solution."""
    mode = "fast" if ctx.fast else "full"
    resolutions = ctx.pick((16, 32, 64), (8, 16, 32))
    result = CaseResult("womersley")
    errors = []
    for n in resolutions:
        sim = ctx.simulate(
            "womersley",
            f"TRT N={n}",
            [
                "case=poiseuille",
                "fluid=d2q9",
                "fluid.collision=trt",
                "fluid.precision=float64",
                f"case.resolution={n}",
                f"case.duration={WOMERSLEY_DURATION}",
                f"case.u_max={WOMERSLEY_U_MAX}",
                f"case.amplitude={WOMERSLEY_AMPLITUDE}",
                f"case.angular_frequency={WOMERSLEY_OMEGA}",
                f"fluid.u_lattice={WOMERSLEY_U_LATTICE_AT_16 * 16 / n!r}",
            ],
        )
        c = sim.case_config
        y, u, height = _channel_profile(sim)
        scale = c["u_max"] + c["amplitude"] / c["angular_frequency"]
        exact = _womersley_exact(c, y, sim.time, height)
        errors.append(float(np.max(np.abs(u - exact)) / scale))
        result.notes.append(sim.note() + f", max error {errors[-1]:.3e}")
    order = convergence_order(list(resolutions), errors)
    grids = ",".join(str(n) for n in resolutions)
    result.checks += [
        Check("womersley", f"velocity order (N={grids})", order, EXPECTED_ORDER,
              abs(order - EXPECTED_ORDER), WOMERSLEY_ORDER_TOL),
        Check("womersley", f"max|u-u_exact|/u_scale (N={resolutions[-1]})", errors[-1],
              float("nan"), errors[-1], WOMERSLEY_TOL[mode]),
    ]  # fmt: skip
    alpha = 0.5 * height * np.sqrt(c["angular_frequency"] / c["viscosity"])
    result.notes.insert(
        0,
        f"Channel force g(t) = 8 nu u_max/H^2 + A sin(omega t), u_max = {c['u_max']} m/s, "
        f"A = {c['amplitude']} m/s^2, omega = {c['angular_frequency']} rad/s (Womersley number "
        f"{alpha:.2f}), TRT, float64, diffusive scaling, compared at the final time after "
        f"{sim.time / (2 * np.pi / c['angular_frequency']):.1f} periods. Error: max deviation "
        "over u_scale = u_max + A/omega. Reference: `solver.fluid.analytic.womersley_profile`.",
    )
    fig, (ax0, ax1) = plots.figure(2)
    plots.convergence(ax0, resolutions, errors, order, "LBM")
    ax0.set_ylabel("max error / u_scale")
    period = 2 * np.pi / c["angular_frequency"]
    fine = np.linspace(0.0, height, 201)
    for k, frac in enumerate((0.0, 0.25, 0.5, 0.75)):
        t = sim.time - frac * period
        ax1.plot(_womersley_exact(c, fine, t, height), fine, "-", lw=0.8, color=f"C{k}",
                 alpha=0.6 if frac else 1.0, label=f"exact t_end - {frac:g} T")  # fmt: skip
    ax1.plot(u, y, "ko", ms=2.5, label=f"LBM {sim.label} at t_end")
    ax1.set_xlabel("u_x (m/s)")
    ax1.set_ylabel("y (m)")
    ax1.legend(fontsize=7)
    path, rel = ctx.plot_path("womersley")
    plots.save(fig, path)
    result.plots.append(rel)
    return result


def couette(ctx: Context) -> CaseResult:
    """Sheared channel (moving upper wall), BGK and TRT, against the linear profile."""
    n = ctx.pick(32, 16)
    result = CaseResult("couette")
    result.notes.append(
        "Plane Couette flow, upper wall moving (Ladd's bounce-back), float64, run for 3 H^2/nu."
        " A linear profile is exact for half-way bounce-back at any tau, so only round-off "
        "and the decayed start-up transient remain."
    )
    fig, (ax,) = plots.figure(1)
    for collision in ("bgk", "trt"):
        sim = ctx.simulate(
            "couette",
            f"{collision.upper()} N={n}",
            _steady_overrides("couette", collision, n),
        )
        c = sim.case_config
        y, u, height = _channel_profile(sim)
        exact = analytic.couette_profile(y, height, c["wall_velocity"])
        error = float(np.max(np.abs(u - exact)) / c["wall_velocity"])
        result.checks.append(
            Check("couette", f"{collision.upper()} max|u-u_exact|/U_wall", float(u.max()),
                  float(exact.max()), error, COUETTE_TOL)
        )  # fmt: skip
        result.notes.append(sim.note())
        ax.plot(u, y, "o", ms=3, label=f"LBM {collision.upper()}")
    ax.plot(exact, y, "k-", lw=1, label="exact")
    ax.set_xlabel("u_x (m/s)")
    ax.set_ylabel("y (m)")
    ax.legend(fontsize=8)
    path, rel = ctx.plot_path("couette")
    plots.save(fig, path)
    result.plots.append(rel)
    return result


def duct(ctx: Context) -> CaseResult:
    """Square-duct Poiseuille flow on D3Q19 against White's series, three resolutions."""
    mode = "fast" if ctx.fast else "full"
    resolutions = ctx.pick((16, 32, 64), (12, 24, 48))
    result = CaseResult("duct")
    errors, mean_errors, sims, profiles = [], [], [], []
    for n in resolutions:
        u_lattice = DUCT_U_LATTICE_COARSEST * resolutions[0] / n
        sim = ctx.simulate(
            "duct",
            f"N={n}",
            [
                "case=duct",
                "fluid=d3q19",
                "fluid.collision=trt",
                "fluid.precision=float64",
                f"case.resolution={n}",
                f"fluid.u_lattice={u_lattice!r}",
                # the flow is uniform along x: two cells of periodic length are enough
                f"case.length={2.0 / n!r}",
            ],
        )
        c = sim.case_config
        fy, y0, y1 = sim.fluid_span(1)
        fz, z0, z1 = sim.fluid_span(2)
        y = sim.coordinates(1)[fy] - y0
        z = sim.coordinates(2)[fz] - z0
        u = sim.velocity[0].mean(axis=0)[fy, fz]
        rho, nu, side = c["density"], c["viscosity"], c["side"]
        # the case sets the force so that the analytic centre-line velocity is u_max
        unit = analytic.duct_profile(side / 2, side / 2, side, side, 1.0, 1.0, 1.0)
        force = rho * c["u_max"] * nu / float(unit)
        exact = analytic.duct_profile(y[:, None], z[None, :], y1 - y0, z1 - z0, force, rho, nu)
        errors.append(relative_l2(u, exact))
        mean_exact = analytic.duct_mean_velocity(y1 - y0, z1 - z0, force, rho, nu)
        mean_errors.append(abs(float(u.mean()) - mean_exact) / mean_exact)
        sims.append(sim)
        # the mid-plane z = side/2 lies between the two middle columns for even N
        lo, hi = (u.shape[1] - 1) // 2, u.shape[1] // 2
        profiles.append((y, 0.5 * (u[:, lo] + u[:, hi])))
        result.notes.append(
            sim.note() + f", L2 error {errors[-1]:.3e}, mean-velocity error {mean_errors[-1]:.3e}"
        )
    order = convergence_order(list(resolutions), errors)
    grids = ",".join(str(n) for n in resolutions)
    result.checks += [
        Check("duct", f"velocity order (N={grids})", order, EXPECTED_ORDER,
              abs(order - EXPECTED_ORDER), DUCT_ORDER_TOL),
        Check("duct", f"u(y,z) L2 rel. error (N={resolutions[-1]})", errors[-1], float("nan"),
              errors[-1], DUCT_FINEST_TOL[mode]),
        Check("duct", f"mean velocity rel. error (N={resolutions[-1]})", float(u.mean()),
              mean_exact, mean_errors[-1], DUCT_MEAN_TOL[mode]),
    ]  # fmt: skip
    result.notes.insert(
        0,
        "Square duct, D3Q19 TRT (Lambda = 3/16), float64, body force set so that the analytic "
        "centre-line velocity is u_max, diffusive scaling (tau fixed). Reference: the series "
        "solution of White, Viscous Fluid Flow (2006) Eq. 3-48, 50 terms.",
    )
    fig, (ax0, ax1) = plots.figure(2)
    plots.convergence(ax0, resolutions, errors, order, "LBM")
    c = sims[-1].case_config
    fine = np.linspace(0.0, c["side"], 201)
    mid = 0.5 * c["side"]
    ax1.plot(fine, analytic.duct_profile(fine, mid, c["side"], c["side"], force, rho, nu),
             "k-", lw=1, label="White series")  # fmt: skip
    for (yy, ll), sim in zip(profiles, sims, strict=True):
        ax1.plot(yy, ll, "o", ms=2.5, label=f"LBM {sim.label}")
    ax1.set_xlabel("y (m), at the mid-plane z = side/2")
    ax1.set_ylabel("u_x (m/s)")
    ax1.legend(fontsize=7)
    path, rel = ctx.plot_path("duct")
    plots.save(fig, path)
    result.plots.append(rel)
    return result
