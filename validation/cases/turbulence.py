"""The 3D Taylor-Green vortex at Re = 1600 (Brachet et al. 1983): transition to turbulence.

The classic benchmark of under-resolved and high-order solvers (the first and second High-Order
CFD Workshops): u = U0 sin x cos y cos z, v = -U0 cos x sin y cos z in the box [0, 2 pi L0)^3,
Re = U0 L0 / nu = 1600. Reference: the dissipation rate eps* = -dE*/dt* of the pseudo-spectral
DNS at 512^3 (van Rees, Leonard, Pullin & Koumoutsakos 2011, J. Comput. Phys. 230, 2794), whose
peak is 0.0127-0.0128 at t* = U0 t / L0 ~ 9.0. The solver records the kinetic energy after
every chunk (``case.variant=brachet``) and reports eps* by central differences.

Runs on D3Q27 with KBC: at 64^3 the lattice viscosity puts tau within 1e-3 of 1/2, where TRT
diverges; the entropic stabiliser is what keeps an under-resolved turbulent flow finite.
"""

from __future__ import annotations

import numpy as np

from validation import plots
from validation.context import Context
from validation.report import CaseResult, Check

REYNOLDS = 1600.0
# spectral DNS (van Rees et al. 2011): peak dissipation and its time, convective units
DNS_PEAK, DNS_PEAK_TIME = 0.0128, 9.0
# cells per side of the 2 pi box, convective time units run, lattice velocity of U0
# Full: u_lattice 0.05 (Mach 0.087). The peak dissipation is set by the Mach number, not the
# grid: u_lattice 0.1 (Mach 0.17) gave 0.01202 at 64^3 (6.1 % low) and 0.01161 at 128^3 (9.3 %
# low); u_lattice 0.05 gives 0.01284 at t* = 8.25 at 64^3 (0.3 %; 149 s here).
SETTINGS = {"full": (64, 20.0, 0.05), "fast": (24, 1.0, 0.1)}
# peak eps* within 5 % (the goal); fast (24^3, a smoke test of the pipeline, far too
# coarse for the physics): the initial energy U0^2/8, and the energy never rising (an unstable
# run gains energy before it diverges)
TOLERANCE = {"full": {"peak": 0.05}, "fast": {"energy": 1e-3, "rise": 0.0}}
CHUNK = 20  # steps between energy samples (t* = 0.03 at 64^3 with u_lattice 0.05)


def taylor_green_re1600(ctx: Context) -> CaseResult:
    mode = "fast" if ctx.fast else "full"
    n, t_end, u_lat = SETTINGS[mode]
    length = 2.0 * np.pi  # L0 = 1 m, U0 = 1 m/s
    viscosity = 1.0 / REYNOLDS
    sim = ctx.simulate(
        "taylor_green_re1600",
        f"N={n}",
        [
            "case=taylor_green",
            "case.variant=brachet",
            "fluid=d3q27",
            "fluid.collision=kbc",
            f"fluid.u_lattice={u_lat}",
            f"case.length={length}",
            "case.u0=1.0",
            f"case.viscosity={viscosity}",
            f"case.resolution={n}",
            f"case.duration={t_end}",
            f"chunk={CHUNK}",
        ],
    )
    diag = sim.summary["diagnostics"]
    result = CaseResult("taylor_green_re1600")
    tol = TOLERANCE[mode]
    if ctx.fast:
        energy = np.asarray(diag["series"]["energy"])
        rise = max(0.0, float(np.max(np.diff(energy)))) / energy[0]
        result.checks += [
            Check("taylor_green_re1600", "E*(0) = <|u|^2>/2 / U0^2", diag["energy_initial"],
                  0.125, abs(diag["energy_initial"] - 0.125) / 0.125, tol["energy"]),
            Check("taylor_green_re1600", "largest rise of E* between samples / E*(0)",
                  float(rise), 0.0, float(rise), tol["rise"]),
        ]  # fmt: skip
    else:
        result.checks.append(
            Check("taylor_green_re1600", f"peak eps* (at t* = {diag['dissipation_peak_time']:.2f})",
                  diag["dissipation_peak"], DNS_PEAK,
                  abs(diag["dissipation_peak"] - DNS_PEAK) / DNS_PEAK, tol["peak"])
        )  # fmt: skip
    series = diag["series"]
    t, energy, eps = (np.asarray(series[k]) for k in ("time", "energy", "dissipation"))
    result.notes += [
        f"3D Taylor-Green vortex, Re = {REYNOLDS:g}, D3Q27 KBC, float32, {n}^3, t* = 0-{t_end:g}; "
        "reference: spectral DNS, van Rees et al. (2011), peak eps* 0.0128 near t* = 9.",
        sim.note(),
        f"- peak eps* = {diag['dissipation_peak']:.5f} at "
        f"t* = {diag['dissipation_peak_time']:.2f}; "
        f"E*(0) = {diag['energy_initial']:.5f}; eps*(0) = {diag['dissipation_initial']:.3g} "
        f"(laminar 3/(4 Re) = {diag['dissipation_initial_exact']:.3g}).",
    ]
    fig, (ax0, ax1) = plots.figure(2, width=4.6)
    ax0.plot(t, energy, lw=1.0, label=f"LBM KBC {n}^3")
    ax0.set_xlabel("t*")
    ax0.set_ylabel("E*")
    ax0.legend(fontsize=8)
    ax1.plot(t, eps, lw=1.0, label=f"LBM KBC {n}^3")
    ax1.plot([DNS_PEAK_TIME], [DNS_PEAK], "ks", mfc="none", label="DNS peak (van Rees 2011)")
    ax1.set_xlabel("t*")
    ax1.set_ylabel("eps* = -dE*/dt*")
    ax1.legend(fontsize=8)
    fig.suptitle(f"Taylor-Green vortex, Re = {REYNOLDS:g}", fontsize=10)
    path, rel = ctx.plot_path("taylor_green_re1600")
    plots.save(fig, path)
    result.plots.append(rel)
    return result
