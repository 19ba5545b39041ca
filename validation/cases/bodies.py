"""Rigid-body cases against exact solutions: projectile, bounce, incline, cradle, tumbling.

Each case runs the solver's rigid-body path (``solver.run.simulate`` on a
config composed from Hydra overrides, float64) and compares the run's own diagnostics (run.json)
and its output files (bodies.h5, energies.csv) with a reference:

- projectile: the exact parabola x0 + v0 t + g t^2 / 2 (velocity Verlet is exact for a constant
  force, so only round-off remains);
- bounce: the first rebound height over the drop height against the same 1D contact law with
  gravity solved by SciPy, and against e^2 (a point mass whose speed is reversed and scaled by
  e), Hertz and linear contacts, several restitutions;
- incline: rolling (5/7) g sin(a) below the friction threshold tan(a) <= (7/2) mu and sliding
  g (sin(a) - mu cos(a)) above it, plus the spin acceleration that tells the two regimes apart;
- cradle: the last sphere's velocity against an accurate ODE solution of the same damped 1D
  Hertz chain (SciPy), and momentum conservation;
- tumbling: kinetic energy and |L| drift of a torque-free asymmetric body, and the first flip of
  the intermediate axis against a SciPy solution of Euler's equations.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from validation import plots
from validation.context import Context
from validation.report import CaseResult, Check

NAN = float("nan")

# --- tolerances (each measured value quoted; all runs are deterministic float64) ----------------

# Velocity Verlet integrates a constant force exactly; measured 1.6e-14 of the flight extent after
# 1500 steps. 1e-10 leaves room for round-off growing with the step count.
PROJECTILE_POSITION_TOL = 1e-10
# Bounce: the runs use dt = BOUNCE_DT_FRACTION of the stable step (the default is 1/2, about 25
# steps per contact). Velocity Verlet evaluates the dashpot with the half-kicked velocity and a
# contact starts between steps, so the rebound carries an O(dt / t_contact) error. Measured
# h1/h0 at dt = 1/2, 1/4, 1/8 of the stable step: Hertz e = 0.8 0.6346, 0.6378, 0.6393 (ODE
# 0.6389); linear e = 0.5 0.2380, 0.2471, 0.2448 (ODE 0.2488: not monotone, the onset phase).
BOUNCE_DT_FRACTION = 0.25
# Against the same contact law integrated by SciPy (`rebound_ratio`, gravity included): the
# integration error above at dt = 1/4 of the stable step, largest for strong damping. Measured
# (relative) Hertz e = 0.5/0.8/0.95: 1.2e-2/1.8e-3/5.0e-4; linear 7.1e-3/2.7e-4/9.1e-5.
BOUNCE_ODE_TOL = 2e-2
# Against e^2 (an instantaneous impact): the ODE itself lies 0.03-0.8 % below e^2 because gravity
# acts during the ~1 ms contact, plus the integration error. Measured: Hertz 2.0e-2/3.5e-3/
# 8.4e-4, linear 1.2e-2/1.3e-3/1.1e-4.
BOUNCE_RATIO_TOL = 3e-2
# Rolling: measured -3.9e-4 relative (20 deg; full and fast). The Mindlin tangential spring is
# compliant, so the contact point creeps slightly while the spring loads; 1e-3 is 2.5x that.
ROLLING_ACCELERATION_TOL = 1e-3
# Spin acceleration r' d(omega x n)/dt against (5/7) g sin(a): the same creep, measured -3.9e-4
# (full), -2.9e-4 (fast).
ROLLING_SPIN_TOL = 1e-3
# Sliding at the Coulomb limit: the friction force is exactly mu F_n with F_n = m g cos(a) in
# equilibrium; measured -6e-14 relative. 1e-9 is round-off with margin.
SLIDING_ACCELERATION_TOL = 1e-9
# Spin acceleration while sliding against (5/2) mu g cos(a) (r'/r)^2, r' = r - delta/2 the lever
# arm to the contact point: a constant friction torque once the tangential spring has reached the
# Coulomb limit (the fit skips the first half of the run). Measured 5.7e-14; without the r'/r
# factor the error would be delta/r = 6.5e-4.
SLIDING_SPIN_TOL = 1e-9
# Cradle. An ideal cradle hands the whole momentum to the last sphere, but a finite-duration Hertz
# chain of touching spheres cannot (the pulse disperses; Hinch & Saint-Jean 1999, Proc. R. Soc.
# A 455, 3201) and e = 0.99 loses energy in every contact: the solver gives 0.976 v0 and the ODE
# of the same chain (damping included) 0.9755. So the check is against that ODE, to the
# integration error: measured 3.1e-5 (5 spheres), 1.6e-5 (fast, 3 spheres) at dt = T_R/10;
# 3e-4 is 10x that. The gap to 1 is reported too, with a loose tolerance that only catches a
# broken transfer (measured 0.024; 0.014 for 3 spheres).
CRADLE_ODE_TOL = 3e-4
CRADLE_IDEAL_TOL = 0.05
# Contact forces are pairwise equal and opposite: momentum is conserved to round-off (8e-16).
MOMENTUM_TOL = 1e-12
# Tumbling, 1e5 steps of dt = 1 ms: the DLM rotor conserves |L| exactly (L is the state; the
# rotation only turns it) and energy to O(dt^2) without secular growth: measured max energy drift
# 2.8e-8 over 1e5 steps, the same as over the fast 2e4 (the error oscillates and does not grow),
# |L| drift 0. 1e-6 would still catch an O(dt) integrator.
TUMBLING_ENERGY_TOL = 1e-6
TUMBLING_MOMENTUM_TOL = 1e-12
# First sign change of the intermediate body-frame L, interpolated between outputs, against the
# SciPy solution of Euler's equations: the phase error of the integrator and the linear
# interpolation between outputs 0.5 s (full) / 0.2 s (fast) apart. Measured 5.0e-4 (full),
# 4.4e-5 (fast).
TUMBLING_FLIP_TIME_TOL = 5e-3


# --- running a body case --------------------------------------------------------------------------


@dataclass
class BodyRun:
    """A finished rigid-body run.

    Attributes:
        label: short name of the run inside its case.
        summary: the run.json contents (``diagnostics`` holds the case's numbers).
        energies: energies.csv columns, one value per step ((S,) arrays; momentum_x, ...).
        times: (T,) s of the bodies.h5 outputs.
        position, velocity, angular_velocity: (T, n, 3) m, m/s, rad/s (world frame).
        orientation: (T, n, 4) unit quaternions (w, x, y, z), principal frame to world.
        wall_time_s: seconds the whole run took (compilation and output included).
    """

    label: str
    summary: dict
    energies: dict[str, np.ndarray]
    times: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    angular_velocity: np.ndarray
    orientation: np.ndarray
    wall_time_s: float

    @property
    def diagnostics(self) -> dict:
        return self.summary["diagnostics"]

    @property
    def case_config(self) -> dict:
        return self.summary["config"]["case"]

    def note(self) -> str:
        s = self.summary
        stable = s.get("stable_dt_s")
        limit = f" ({s['dt_s'] / stable:.2f} of the stable step)" if stable else ""
        return (
            f"- {self.label}: {s['bodies']} body(ies), {s['planes']} plane(s), "
            f"{s['contact_model']} contact, dt = {s['dt_s']:.4g} s{limit}, {s['steps']} steps, "
            f"{self.wall_time_s:.1f} s"
        )


def _read_outputs(output_dir: Path) -> tuple[dict, np.ndarray, dict[str, np.ndarray]]:
    import h5py

    table = np.genfromtxt(output_dir / "energies.csv", delimiter=",", names=True)
    energies = {name: np.asarray(table[name]) for name in table.dtype.names}
    fields: dict[str, list] = {}
    times = []
    with h5py.File(output_dir / "bodies.h5", "r") as f:
        for name in sorted(k for k in f if k.startswith("step_")):
            times.append(float(f[name].attrs["time_s"]))
            for key in ("position", "velocity", "angular_velocity", "orientation"):
                fields.setdefault(key, []).append(np.asarray(f[name][key]))
    return energies, np.asarray(times), {k: np.asarray(v) for k, v in fields.items()}


def run_body_case(ctx: Context, case: str, label: str, overrides: list[str]) -> BodyRun:
    """Run the rigid-body case with Hydra ``overrides``; output under ctx.work/case/label.

    Without a ``steps`` override the run is rounded up to whole chunks of the config's ``chunk``
    steps (see the comment below); the cases read the simulated time from run.json.
    """
    import re

    from solver.api import compose_config
    from solver.app import enable_precision

    enable_precision("float64")  # x64 on, as `python -m solver` runs bodies (float32 by config)
    from solver.bodies.cases import build_body_case
    from solver.run import simulate

    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")
    workdir = ctx.work / case / slug
    start = time.perf_counter()
    # like solver.api.run: a fresh run, no checkpoints (a rerun into the same work dir must
    # not resume the finished one)
    overrides = ["checkpoint=none", *overrides]
    if ctx.body_precision != "float64":
        overrides.append(f"bodies.precision={ctx.body_precision}")
    config = compose_config(overrides)
    if config.steps is None:
        # whole chunks: every chunk then has one length and compiles once (a shorter last chunk
        # would compile again, as long as the rest of a fast case); the run ends < 1 chunk later
        steps = math.ceil(build_body_case(config).default_steps / config.chunk) * config.chunk
        config = compose_config([*overrides, f"steps={steps}"])
    outcome = simulate(config, workdir, interactive=False)
    elapsed = time.perf_counter() - start
    energies, times, fields = _read_outputs(outcome.output_dir)
    return BodyRun(
        label=label,
        summary=outcome.summary,
        energies=energies,
        times=times,
        position=fields["position"],
        velocity=fields["velocity"],
        angular_velocity=fields["angular_velocity"],
        orientation=fields["orientation"],
        wall_time_s=elapsed,
    )


def _relative(measured: float, reference: float) -> float:
    return abs(measured - reference) / abs(reference)


def _save(ctx: Context, result: CaseResult, fig, name: str) -> None:
    path, rel = ctx.plot_path(name)
    plots.save(fig, path)
    result.plots.append(rel)


# --- projectile -----------------------------------------------------------------------------------


def projectile(ctx: Context) -> CaseResult:
    """A sphere launched at 45 deg under gravity against the exact parabola."""
    result = CaseResult("projectile")
    steps = ctx.pick(1500, 300)
    run = run_body_case(ctx, "projectile", f"{steps} steps",
                        ["case=projectile", f"case.dt={1.5 / steps!r}"])  # fmt: skip
    d = run.diagnostics
    err = float(d["position_error_max_relative"])
    result.checks.append(
        Check("projectile", "max |x - x_exact| / flight extent", err, 0.0, err,
              PROJECTILE_POSITION_TOL)
    )  # fmt: skip
    result.notes += [
        "One sphere launched at 10 m/s, 45 deg, g = 9.81 m/s^2, no contacts; the centre at "
        "every output against x0 + v0 t + g t^2 / 2.",
        run.note() + f", max error {d['position_error_max_m']:.3g} m",
    ]
    return result


# --- bounce ---------------------------------------------------------------------------------------


def rebound_ratio(
    model: str,
    radius: float,
    young: float,
    poisson: float,
    density: float,
    restitution: float,
    stiffness: float,
    drop_height: float,
    gravity: float,
) -> float:
    """First rebound height over drop height of a sphere dropped on a plane of its own material,
    from the 1D equation of motion with the solver's contact law, gravity acting throughout.

    Hertz: F = max(0, (4/3) E* sqrt(r) d^(3/2) - eta v), eta = -2 sqrt(5/6) beta
    sqrt(2 E* sqrt(r d) m), E* = E / (2 (1 - nu^2)) (Tsuji et al. 1992; Antypov & Elliott 2011).
    Linear: F = max(0, k d - eta v), k = stiffness / 2 (sphere and plane springs in series),
    eta = -2 beta sqrt(m k). beta from the restitution (kernels.contact_models.restitution_beta).
    SciPy DOP853, rtol 1e-11, steps at most 1/50 of the contact time; stops at the apex.
    """
    from scipy.integrate import solve_ivp

    from kernels.contact_models import restitution_beta

    mass = density * 4.0 / 3.0 * math.pi * radius**3
    e_star = young / (2.0 * (1.0 - poisson**2))
    beta = float(restitution_beta(np.float64(restitution)))
    v_in = math.sqrt(2.0 * gravity * drop_height)
    if model == "hertz":
        t_contact = 2.87 * (mass**2 / (radius * e_star**2 * v_in)) ** 0.2  # Johnson 1985, 11.24
    else:
        t_contact = math.pi * math.sqrt(mass / (0.5 * stiffness))

    def force(overlap: float, speed: float) -> float:
        if overlap <= 0.0:
            return 0.0
        if model == "hertz":
            elastic = 4.0 / 3.0 * e_star * math.sqrt(radius) * overlap**1.5
            eta = (
                -2.0
                * math.sqrt(5.0 / 6.0)
                * beta
                * math.sqrt(2.0 * e_star * math.sqrt(radius * overlap) * mass)
            )
        else:
            elastic = 0.5 * stiffness * overlap
            eta = -2.0 * beta * math.sqrt(mass * 0.5 * stiffness)
        return max(elastic - eta * speed, 0.0)

    def rhs(_, y):
        return [y[1], force(radius - y[0], y[1]) / mass - gravity]

    def apex(_, y):
        return y[1]

    apex.terminal = True
    apex.direction = -1  # rising to falling: the top of the first rebound
    # start at the first touch (free fall is exact): the apex event then fires only on the way up
    fall = math.sqrt(2.0 * drop_height / gravity)
    sol = solve_ivp(rhs, (0.0, 2.0 * fall + 10.0 * t_contact), [radius, -v_in],
                    method="DOP853", rtol=1e-11, atol=1e-14, max_step=t_contact / 50,
                    events=apex)  # fmt: skip
    return float((sol.y_events[0][0][0] - radius) / drop_height)


def bounce(ctx: Context) -> CaseResult:
    """First rebound height over drop height against the contact ODE and e^2."""
    result = CaseResult("bounce")
    runs = ctx.pick(
        [(model, e) for model in ("hertz", "linear") for e in (0.5, 0.8, 0.95)],
        [("hertz", 0.8), ("linear", 0.5)],
    )
    from solver.api import compose_config
    from solver.bodies.cases import build_body_case

    traces = []
    for model, e in runs:
        overrides = ["case=bounce", f"case.contact_model={model}",
                     f"case.material.restitution={e}", "case.duration=0.45"]  # fmt: skip
        stable = build_body_case(compose_config(overrides)).stable_dt  # nothing traced yet
        dt = BOUNCE_DT_FRACTION * stable
        run = run_body_case(ctx, "bounce", f"{model} e={e}", [*overrides, f"case.dt={dt!r}"])
        d, c = run.diagnostics, run.case_config
        m = c["material"]
        ratio, e2 = d["rebound_ratio"], d["restitution_squared"]
        ratio = NAN if ratio is None or not d.get("rebound_apex_reached") else float(ratio)
        ode = rebound_ratio(
            model,
            float(c["radius"]),
            float(m["young"]),
            float(m["poisson"]),
            float(m["density"]),
            e,
            float(c["stiffness"]),
            float(c["drop_height"]),
            float(c["gravity"]),
        )
        result.checks += [
            Check(
                "bounce",
                f"h1/h0 {model} e={e} vs contact ODE",
                ratio,
                ode,
                _relative(ratio, ode),
                BOUNCE_ODE_TOL,
            ),
            Check(
                "bounce",
                f"h1/h0 {model} e={e} vs e^2",
                ratio,
                e2,
                _relative(ratio, e2),
                BOUNCE_RATIO_TOL,
            ),
        ]
        result.notes.append(
            run.note() + f", contact {1e3 * d['contact_duration_s']:.3g} ms, "
            f"h1/h0 = {ratio:.5f} (ODE {ode:.5f}, e^2 = {e2:.4f})"
        )
        traces.append((run, model, e))
    result.notes.insert(
        0,
        "A sphere (r = 1 cm, rubber-like, E = 10 MPa) dropped from 0.2 m onto the plane z = 0, "
        f"dt = {BOUNCE_DT_FRACTION} of the stable step, 0.45 s (past the first apex); "
        "the first rebound apex (from the per-step potential energy) over the drop height "
        "against the same contact law integrated by SciPy (`rebound_ratio`, gravity acting "
        "during the contact) and against e^2 (an instantaneous impact). Error: relative.",
    )
    fig, (ax,) = plots.figure(1, width=5.0)
    for run, model, e in traces:
        c = run.case_config
        r, g = float(c["radius"]), float(c["gravity"])
        mass = float(c["material"]["density"]) * 4.0 / 3.0 * math.pi * r**3
        gap = run.energies["potential_J"] / (mass * g) - r  # every step, unlike bodies.h5
        style = "-" if model == "hertz" else "--"  # the two models nearly coincide
        ax.plot(run.energies["time_s"], gap, style, lw=1, label=f"{model}, e = {e}")
        h0 = float(run.case_config["drop_height"])
        ax.axhline(e * e * h0, lw=0.5, ls=":", color="k")
    ax.set_xlabel("t (s)")
    ax.set_ylabel("gap below the sphere (m)")
    ax.set_title("bounce: dotted lines e^2 h0", fontsize=9)
    ax.legend(fontsize=7)
    _save(ctx, result, fig, "bounce")
    return result


# --- incline --------------------------------------------------------------------------------------


def _slope_axes(angle_deg: float) -> tuple[np.ndarray, np.ndarray]:
    a = math.radians(angle_deg)
    return np.array([math.sin(a), 0.0, math.cos(a)]), np.array([math.cos(a), 0.0, -math.sin(a)])


def _spin_acceleration(run: BodyRun) -> float:
    """d/dt of r' (omega x n) . downhill, fitted over the second half of the run, m/s^2.

    r' = r - delta/2 is the distance from the centre to the contact point; r' (omega x n) is the
    centre velocity that rolling without slipping would have for the spin omega (the contact
    point moves at v - r' omega x n), so this equals the centre's acceleration while rolling
    and (5/2) mu g cos(a) (r'/r)^2 while sliding (friction torque mu m g cos(a) r' over
    (2/5) m r^2).
    """
    c = run.case_config
    normal, downhill = _slope_axes(float(c["angle"]))
    # the contact point is the middle of the overlap (kernels.contact): the lever arm of the
    # friction force and the rolling radius are r - delta/2, delta the equilibrium overlap
    arm = float(c["radius"]) - 0.5 * float(run.diagnostics["initial_overlap_m"])
    spin = arm * np.cross(run.angular_velocity[:, 0], normal) @ downhill
    late = run.times >= 0.5 * run.times[-1]
    return float(np.polyfit(run.times[late], spin[late], 1)[0])


def incline(ctx: Context) -> CaseResult:
    """A sphere on an incline: rolling below the friction threshold, sliding above it; in full
    mode also a two-sphere clump rolling."""
    from solver.bodies.cases import incline_acceleration

    result = CaseResult("incline")
    variants = [
        ("sphere", "rolling", ["case.angle=20", "case.material.friction=0.5"]),
        ("sphere", "sliding", ["case.angle=30", "case.material.friction=0.1"]),
    ]
    if not ctx.fast:  # two overlapping spheres side by side along the rolling axis
        variants.append(("clump", "rolling", ["case.shape=clump", "case.angle=20",
                                              "case.material.friction=0.5"]))  # fmt: skip
    duration = ctx.pick(0.2, 0.1)
    fig, (ax,) = plots.figure(1, width=5.0)
    for shape, regime, extra in variants:
        run = run_body_case(ctx, "incline", f"{shape} {regime}",
                            ["case=incline", f"case.duration={duration}", *extra])  # fmt: skip
        d, c = run.diagnostics, run.case_config
        angle, mu, g = float(c["angle"]), float(c["material"]["friction"]), float(c["gravity"])
        # k = I / (m r^2) about the rolling axis: 2/5 for a sphere; a clump's from its mass
        # properties (kernels.clump, the union's volume counted once)
        k = float(d.get("inertia_ratio", 0.4))
        expected, analytic_regime = incline_acceleration(angle, mu, g, k)
        if analytic_regime != regime:  # the variants above are chosen to straddle the threshold
            raise ValueError(f"incline {extra} is in the {analytic_regime} regime, not {regime}")
        measured = d["measured_acceleration_m_s2"]
        measured = NAN if measured is None else float(measured)
        tol = ROLLING_ACCELERATION_TOL if regime == "rolling" else SLIDING_ACCELERATION_TOL
        label = f"{shape} {regime} ({angle:g} deg, mu={mu:g})"
        result.checks.append(
            Check("incline", f"{label} acceleration m/s^2", measured, expected,
                  _relative(measured, expected), tol)
        )  # fmt: skip
        spin = _spin_acceleration(run)
        a = math.radians(angle)
        shrink = 1.0 - 0.5 * float(d["initial_overlap_m"]) / float(c["radius"])  # r'/r
        # sliding: friction torque mu m g cos(a) r' over I = k m r^2
        spin_expected = expected if regime == "rolling" else mu * g * math.cos(a) * shrink**2 / k
        spin_tol = ROLLING_SPIN_TOL if regime == "rolling" else SLIDING_SPIN_TOL
        result.checks.append(
            Check("incline", f"{label} spin acc. r' d(omega x n)/dt m/s^2", spin,
                  spin_expected, _relative(spin, spin_expected), spin_tol)
        )  # fmt: skip
        result.notes.append(
            run.note() + f", {label}: k = I/(m r^2) = {k:.4f}, a = {measured:.6g} m/s^2 "
            f"(analytic {expected:.6g}), spin {spin:.6g} m/s^2 (analytic {spin_expected:.6g})"
        )
        _, downhill = _slope_axes(angle)
        x0 = run.position[0, 0]
        along = (run.position[:, 0] - x0) @ downhill
        line = ax.plot(run.times, along, "o", ms=2.5, label=label)
        t = np.linspace(0.0, run.times[-1], 200)
        ax.plot(t, 0.5 * expected * t**2, "-", lw=0.8, color=line[0].get_color())
    result.notes.insert(
        0,
        "A sphere released at rest on an inclined plane (r = 1 cm, E = 10 MPa, Hertz-Mindlin "
        "with tangential spring), starting at its equilibrium overlap. Acceleration fitted "
        "(quadratic) to the distance along the slope over the second half of the run. The spin "
        "acceleration r' d(omega x n)/dt (fitted likewise; r' = r - delta/2 reaches the contact "
        "point) tells the regimes apart: it equals the centre's acceleration while rolling and "
        "mu g cos(a) (r'/r)^2 / k while sliding, k = I / (m r^2) (2/5 for a sphere). The clump "
        "(full mode) is two spheres of radius r whose centres are r apart along the rolling "
        "axis; it rolls with g sin(a) / (1 + k).",
    )
    ax.set_xlabel("t (s)")
    ax.set_ylabel("distance down the slope (m)")
    ax.set_title("incline: points solver, lines analytic", fontsize=9)
    ax.legend(fontsize=7)
    _save(ctx, result, fig, "incline")
    return result


# --- cradle ---------------------------------------------------------------------------------------


def hertz_chain_velocities(
    count: int,
    radius: float,
    young: float,
    poisson: float,
    density: float,
    restitution: float,
    speed: float,
    gap: float,
    duration: float,
) -> np.ndarray:
    """Final velocities (count,) m/s of a 1D row of equal spheres with damped Hertz contacts.

    The same law as the solver's (Tsuji et al. 1992 damping with the restitution's beta):
    F = max(0, (4/3) E* sqrt(R*) d^(3/2) - eta v_n), eta = -2 sqrt(5/6) beta sqrt(2 E* sqrt(R* d)
    m*), with E* = E / (2 (1 - nu^2)), R* = r/2, m* = m/2; solved by SciPy's DOP853 at rtol 1e-11
    with steps limited to 1/50 of the Hertz contact time.
    """
    from scipy.integrate import solve_ivp

    from kernels.contact_models import restitution_beta

    mass = density * 4.0 / 3.0 * math.pi * radius**3
    e_star = young / (2.0 * (1.0 - poisson**2))
    r_star, m_star = radius / 2.0, mass / 2.0
    beta = float(restitution_beta(np.float64(restitution)))
    k = 4.0 / 3.0 * e_star * math.sqrt(r_star)
    x0 = np.array([0.0] + [2.0 * radius + gap + 2.0 * radius * i for i in range(count - 1)])
    v0 = np.zeros(count)
    v0[0] = speed
    # Hertz contact time 2.87 (m*^2 / (R* E*^2 v))^(1/5) (Johnson 1985, eq. 11.24)
    t_contact = 2.87 * (m_star**2 / (r_star * e_star**2 * speed)) ** 0.2

    def rhs(_, y):
        x, v = y[:count], y[count:]
        overlap = np.maximum(2.0 * radius - np.diff(x), 0.0)
        closing = np.diff(v)  # v_n of pair (k, k+1) with n along +x, negative on approach
        eta = (
            -2.0
            * math.sqrt(5.0 / 6.0)
            * beta
            * np.sqrt(2.0 * e_star * np.sqrt(r_star * overlap) * m_star)
        )
        force = np.where(overlap > 0, np.maximum(k * overlap**1.5 - eta * closing, 0.0), 0.0)
        a = np.zeros(count)
        a[1:] += force / mass
        a[:-1] -= force / mass
        return np.concatenate([v, a])

    sol = solve_ivp(rhs, (0.0, duration), np.concatenate([x0, v0]), method="DOP853",
                    rtol=1e-11, atol=1e-14, max_step=t_contact / 50)  # fmt: skip
    return sol.y[count:, -1]


def cradle(ctx: Context) -> CaseResult:
    """Newton's cradle: momentum conservation and the last sphere's velocity."""
    result = CaseResult("cradle")
    count = ctx.pick(5, 3)
    run = run_body_case(ctx, "cradle", f"{count} spheres",
                        ["case=cradle", f"case.count={count}"])  # fmt: skip
    d, c = run.diagnostics, run.case_config
    m = c["material"]
    reference = hertz_chain_velocities(
        count, float(c["radius"]), float(m["young"]), float(m["poisson"]), float(m["density"]),
        float(m["restitution"]), float(c["speed"]), float(c["gap"]), run.summary["time_s"],
    ) / float(c["speed"])  # fmt: skip
    last = float(d["last_velocity_ratio"])
    momentum = float(d["momentum_error_relative_max"])
    result.checks += [
        Check("cradle", "last sphere v / v0 vs Hertz chain ODE", last, float(reference[-1]),
              abs(last - reference[-1]), CRADLE_ODE_TOL),
        Check("cradle", "last sphere v / v0 vs ideal cradle", last, 1.0, abs(last - 1.0),
              CRADLE_IDEAL_TOL),
        Check("cradle", "max |p - p0| / (m v0)", momentum, 0.0, momentum, MOMENTUM_TOL),
    ]  # fmt: skip
    ratios = ", ".join(f"{v:.4f}" for v in d["final_velocity_ratios"])
    ode = ", ".join(f"{v:.4f}" for v in reference)
    result.notes += [
        f"{count} steel spheres (r = 1 cm, e = {m['restitution']}) in a row, the first moving "
        f"at {c['speed']} m/s; final velocities over v0 against the SciPy solution of the same "
        "damped Hertz chain (`hertz_chain_velocities`).",
        run.note() + f", final v/v0: solver [{ratios}], ODE [{ode}], "
        f"kinetic energy kept {d['kinetic_energy_ratio']:.4f}",
    ]
    return result


# --- tumbling -------------------------------------------------------------------------------------


def euler_first_flip(moments: np.ndarray, omega0: np.ndarray, t_end: float) -> float:
    """First time (s) the intermediate body-frame angular momentum changes sign (Euler's
    equations I w' = (I w) x w in the principal frame, SciPy DOP853 at rtol 1e-12); nan if none.

    moments: (3,) ascending kg m^2; omega0: (3,) rad/s in the principal frame.
    """
    from scipy.integrate import solve_ivp

    def rhs(_, w):
        return np.cross(moments * w, w) / moments

    def crossing(_, w):
        return w[1]

    crossing.terminal = True
    sol = solve_ivp(rhs, (0.0, t_end), omega0, method="DOP853", rtol=1e-12, atol=1e-14,
                    events=crossing)  # fmt: skip
    hits = sol.t_events[0]
    return float(hits[0]) if hits.size else NAN


def _body_frame_momentum(run: BodyRun) -> np.ndarray:
    """(T, 3) R^T L at the outputs, L the world angular momentum from energies.csv."""
    from solver.bodies.scene import rotation_matrices

    e = run.energies
    steps = np.clip(np.rint(run.times / run.summary["dt_s"]).astype(int), 0, e["step"].size - 1)
    world = np.column_stack(
        [e["angular_momentum_x"], e["angular_momentum_y"], e["angular_momentum_z"]]
    )[steps]
    rotation = rotation_matrices(run.orientation[:, 0])
    return np.einsum("tji,tj->ti", rotation, world)


def tumbling(ctx: Context) -> CaseResult:
    """Torque-free asymmetric body: energy and |L| drift, and the intermediate-axis flip."""
    result = CaseResult("tumbling")
    steps = ctx.pick(100_000, 20_000)
    dt = 1e-3
    every = ctx.pick(500, 200)
    run = run_body_case(
        ctx, "tumbling", f"{steps} steps",
        ["case=tumbling", f"case.duration={steps * dt!r}", f"case.dt={dt}",
         f"case.output_every={every}"],
    )  # fmt: skip
    d, c = run.diagnostics, run.case_config
    moments = np.sort(np.asarray(c["moments"], dtype=float))
    p, spin = float(c["perturbation"]), float(c["spin"])
    reference = euler_first_flip(moments, spin * np.array([p, 1.0, p]), steps * dt)
    flip = d["first_flip_time_s"]
    flip = NAN if flip is None else float(flip)
    energy, momentum = float(d["kinetic_energy_drift_max"]), float(d["angular_momentum_drift_max"])
    flipped = 1.0 if d["intermediate_axis_flipped"] else 0.0
    result.checks += [
        Check("tumbling", f"max |K - K0| / K0 ({steps} steps)", energy, 0.0, energy,
              TUMBLING_ENERGY_TOL),
        Check("tumbling", f"max ||L| - |L0|| / |L0| ({steps} steps)", momentum, 0.0, momentum,
              TUMBLING_MOMENTUM_TOL),
        Check("tumbling", "intermediate axis flipped (1 = yes)", flipped, 1.0, 1.0 - flipped, 0.0),
        Check("tumbling", "first flip time s vs Euler ODE", flip, reference,
              _relative(flip, reference), TUMBLING_FLIP_TIME_TOL),
    ]  # fmt: skip
    result.notes += [
        f"A torque-free body with principal moments {moments.tolist()} kg m^2 (given as a full "
        f"tensor in a rotated frame), spun at {spin} rad/s about the intermediate axis with a "
        f"relative perturbation {p:g}; dt = {dt} s. Linear growth rate of the perturbation "
        f"{d['instability_rate_1_s']:.4g} 1/s; flips in the run: {d['flips']}. The first flip "
        "(sign change of the intermediate body-frame L) against Euler's equations solved by "
        "SciPy.",
        run.note() + f", first flip at {flip:.4f} s (ODE {reference:.4f} s)",
    ]
    body = _body_frame_momentum(run)
    fig, (ax,) = plots.figure(1, width=5.5)
    for axis, name in enumerate(("L1 (smallest I)", "L2 (intermediate)", "L3 (largest I)")):
        ax.plot(run.times, body[:, axis], lw=1, label=name)
    ax.axvline(reference, color="k", lw=0.5, ls="--", label="first flip (Euler ODE)")
    ax.set_xlabel("t (s)")
    ax.set_ylabel("body-frame angular momentum (kg m^2/s)")
    ax.set_title("tumbling: intermediate-axis instability", fontsize=9)
    ax.legend(fontsize=7)
    _save(ctx, result, fig, "tumbling")
    return result
