"""Contact force laws for spheres: material mixing, normal, tangential and rolling models.

All functions act on P candidate pairs at once; arrays are (P,) scalars or (P, 3) vectors, SI units,
and the float dtype follows the inputs. A pair is `active` when it is a real (valid) pair and
overlaps; every function returns exactly zero for inactive pairs, so padded entries of a
fixed-capacity pair buffer contribute nothing whatever garbage they hold.

Sign convention (see `kernels.contact`): the unit normal n points from body j to body i, the normal
speed v_n = (v_i - v_j) . n is negative while the bodies approach, and the scalar normal force
F_n >= 0 pushes i along +n.

References:
    Johnson, K. L. (1985) Contact Mechanics, Cambridge University Press, ch. 4 and 7.
    Tsuji, Tanaka & Ishida (1992) Powder Technol. 71, 239: Hertz force with delta^(1/4) damping.
    Antypov & Elliott (2011) EPL 94, 50004: beta and the sqrt(5/6) factor of the Hertz damping.
    Schwager & Pöschel (2007) Granular Matter 9, 465: restitution of the repulsive-only dashpot.
    Di Renzo & Di Maio (2004) Chem. Eng. Sci. 59, 525: Mindlin tangential stiffness 8 G* sqrt(R* d).
    Silbert et al. (2001) Phys. Rev. E 64, 051302: linear k_t = (2/7) k_n.
    Luding (2008) Granular Matter 10, 235: tangential history spring, projection, slip reset.
    Ai, Chen, Rotter & Ooi (2011) Powder Technol. 206, 269: rolling resistance model A.
    Project Chrono, ChContactMaterialCompositionStrategy: pair friction and restitution = minimum.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import Array

from kernels.contact import dot, norm, safe_normalize

LINEAR_TANGENTIAL_RATIO = 2.0 / 7.0
"""Default k_t / k_n of the linear model (Silbert et al. 2001): for a solid sphere it makes the
tangential and normal oscillation periods of a contact equal (Schäfer, Dippel & Wolf 1996)."""


# --- materials and mixing -------------------------------------------------------------------------


def effective_modulus(E_i: Array, nu_i: Array, E_j: Array, nu_j: Array) -> Array:
    """E* = 1 / ((1 - nu_i^2)/E_i + (1 - nu_j^2)/E_j) in Pa (Johnson 1985, eq. 4.22).

    A rigid partner (a wall) is given E_j = inf.
    """
    return 1.0 / ((1.0 - nu_i**2) / E_i + (1.0 - nu_j**2) / E_j)


def effective_shear_modulus(E_i: Array, nu_i: Array, E_j: Array, nu_j: Array) -> Array:
    """G* = 1 / (2(2 - nu_i)(1 + nu_i)/E_i + 2(2 - nu_j)(1 + nu_j)/E_j) in Pa.

    Equals 1/((2 - nu_i)/G_i + (2 - nu_j)/G_j) with G = E/(2(1 + nu)) (Mindlin 1949;
    Di Renzo & Di Maio 2004, eq. 14).
    """
    return 1.0 / (2.0 * (2.0 - nu_i) * (1.0 + nu_i) / E_i + 2.0 * (2.0 - nu_j) * (1.0 + nu_j) / E_j)


def effective_radius(radius_i: Array, radius_j: Array) -> Array:
    """R* = R_i R_j / (R_i + R_j) in m, as 1/(1/R_i + 1/R_j); a plane is R_j = inf, giving R_i."""
    return 1.0 / (1.0 / radius_i + 1.0 / radius_j)


def effective_mass(mass_i: Array, mass_j: Array) -> Array:
    """m* = m_i m_j / (m_i + m_j) in kg; a fixed or kinematic partner is m_j = inf, giving m_i."""
    return 1.0 / (1.0 / mass_i + 1.0 / mass_j)


def mixed_coefficient(value_i: Array, value_j: Array) -> Array:
    """Pair restitution e, friction mu or rolling friction mu_r: the smaller of the two values.

    The rule of Project Chrono's default ChContactMaterialCompositionStrategy (and Yade's friction
    angle): a pair is never more elastic or more frictional than its weaker partner, and a
    frictionless wall stays frictionless.
    """
    return jnp.minimum(value_i, value_j)


# --- normal models --------------------------------------------------------------------------------


MIN_RESTITUTION = math.exp(-2.0)
"""The smallest restitution a repulsive-only dashpot contact reaches, at critical damping."""
NEWTON_STEPS = 4
"""Newton steps of `restitution_beta` from its series start: within 2e-15 of the converged beta
for every e in (exp(-2), 1) in float64 (tests/test_kernels_contact.py)."""
SERIES_BELOW = 0.05
"""Below this t (e within ~1e-3 of exp(-2)), 2 t cot t and its slope come from their series: the
closed forms cancel there (their terms are 1/t^2 apart)."""


def _two_t_cot_t(t: Array) -> tuple[Array, Array]:
    """phi(t) = 2 t cot t and phi'(t) on (0, pi/2], stable at small t (series below
    SERIES_BELOW, each branch fed only the t it is valid for, so gradients stay finite)."""
    small = t < SERIES_BELOW
    ts = jnp.where(small, t, 0.0)
    t2 = ts * ts
    phi_small = 2.0 - t2 * (2.0 / 3.0 + t2 * (2.0 / 45.0 + t2 * (4.0 / 945.0 + t2 * 2.0 / 4725.0)))
    slope_small = -ts * (4.0 / 3.0 + t2 * (8.0 / 45.0 + t2 * (24.0 / 945.0 + t2 * 16.0 / 4725.0)))
    tl = jnp.where(small, 1.0, t)
    sin, cos = jnp.sin(tl), jnp.cos(tl)
    phi_large = 2.0 * tl * cos / sin
    slope_large = 2.0 * (cos / sin - tl / (sin * sin))
    return jnp.where(small, phi_small, phi_large), jnp.where(small, slope_small, slope_large)


def restitution_beta(restitution: Array) -> Array:
    """beta = -zeta in [-1, 0]: the damping that gives restitution e with the clip F_n >= 0.

    For the free linear dashpot (force allowed to turn attractive until delta = 0) the classical
    closed form beta = ln e / sqrt(ln^2 e + pi^2) is exact. With the repulsive-only clip the contact
    ends earlier, when k delta equals the dashpot force, and that closed form gives a larger
    restitution (0.397 for e = 0.3, 0.550 for 0.5, 0.902 for 0.9). The clipped linear contact with
    r = zeta / sqrt(1 - zeta^2) has e = exp(-r (pi - 2 arctan r)) (Schwager & Pöschel 2007,
    Granular Matter 9, 465). With r = cot t that is 2 t cot t = -ln e, t in (0, pi/2], a smooth,
    decreasing, concave function of t (no asymptote, unlike r at critical damping), and beta =
    -cos t. Newton's method on t starts from the root of its series to t^4 and takes
    NEWTON_STEPS steps, unrolled: one fused elementwise pass per pair, cheap enough for every
    contact at every step (it was 40 dependent loop iterations, most of a contact's cost). The
    same beta in the Hertz damping reproduces e to a few 1e-4 (measured; Antypov & Elliott 2011
    show the sqrt(5/6) factor maps Hertz to linear).

    Args:
        restitution: e (P,) or scalar in [0, 1]; e <= MIN_RESTITUTION = exp(-2) gives critical
            damping, beta = -1, whose restitution is exp(-2); e >= 1 gives beta = 0.
    """
    e = jnp.asarray(restitution)
    reachable = (e > MIN_RESTITUTION) & (e < 1.0)
    log_e = jnp.log(jnp.where(reachable, e, 0.5))
    # 2 - 2 t^2/3 - 2 t^4/45 = -ln e, solved for t^2 (the smaller-magnitude form of the root)
    d = jnp.maximum(2.0 + log_e, 0.0)
    t = jnp.sqrt(3.0 * d / (1.0 + jnp.sqrt(1.0 + 0.4 * d)))
    t = jnp.minimum(t, 0.5 * jnp.pi)
    for _ in range(NEWTON_STEPS):
        phi, slope = _two_t_cot_t(t)
        step = (phi + log_e) / jnp.where(slope < 0.0, slope, -1.0)
        t = jnp.clip(t - step, 0.0, 0.5 * jnp.pi)
    beta = -jnp.cos(t)
    return jnp.where(reachable, beta, jnp.where(e >= 1.0, 0.0, -1.0))


def linear_damping(restitution: Array, effective_mass: Array, stiffness: Array) -> Array:
    """eta = -2 beta sqrt(m* k), in N s/m: the linear dashpot of restitution e (`restitution_beta`).

    With the free-dashpot beta this is the classical eta = -2 ln(e) sqrt(m* k)/sqrt(pi^2 + ln^2 e)
    (Tsuji et al. 1992); here beta accounts for the repulsive-only clip, so the restitution of
    `normal_force_linear` is exactly e.
    """
    return linear_dashpot(restitution_beta(restitution), effective_mass, stiffness)


def linear_dashpot(beta: Array, effective_mass: Array, stiffness: Array) -> Array:
    """`linear_damping` from beta = `restitution_beta`(e) computed beforehand, in N s/m."""
    return -2.0 * beta * jnp.sqrt(effective_mass * stiffness)


def hertz_damping(restitution: Array, effective_mass: Array, stiffness: Array) -> Array:
    """eta = -2 sqrt(5/6) beta sqrt(S m*), in N s/m (Tsuji et al. 1992; Antypov & Elliott 2011).

    `stiffness` is S_n = 2 E* sqrt(R* delta) for the normal dashpot and S_t = 8 G* sqrt(R* delta)
    for the tangential one.
    """
    return hertz_dashpot(restitution_beta(restitution), effective_mass, stiffness)


def hertz_dashpot(beta: Array, effective_mass: Array, stiffness: Array) -> Array:
    """`hertz_damping` from beta = `restitution_beta`(e) computed beforehand, in N s/m.

    beta increases with e, so the beta of a pair's mixed restitution min(e_i, e_j)
    (`mixed_coefficient`) is min(beta_i, beta_j), exactly: a step computes beta per sphere and
    plane once instead of solving for it in every contact.
    """
    return -2.0 * jnp.sqrt(5.0 / 6.0) * beta * jnp.sqrt(stiffness * effective_mass)


def hertz_normal_stiffness(E_star: Array, R_star: Array, overlap: Array) -> Array:
    """S_n = 2 E* sqrt(R* delta) = dF_el/d delta of the Hertz law, in N/m."""
    return 2.0 * E_star * jnp.sqrt(R_star * overlap)


def mindlin_tangential_stiffness(G_star: Array, R_star: Array, overlap: Array) -> Array:
    """k_t = 8 G* sqrt(R* delta) in N/m (Mindlin 1949; Di Renzo & Di Maio 2004, no-slip limit)."""
    return 8.0 * G_star * jnp.sqrt(R_star * overlap)


def linear_tangential_stiffness(
    normal_stiffness: Array, ratio: float | Array = LINEAR_TANGENTIAL_RATIO
) -> Array:
    """k_t = ratio k_n in N/m for the linear model; default ratio 2/7 (Silbert et al. 2001)."""
    return ratio * normal_stiffness


def normal_force_linear(
    overlap: Array, normal_speed: Array, stiffness: Array, damping: Array, active: Array
) -> Array:
    """F_n = max(0, k_n delta - eta_n v_n), (P,) in N (Cundall & Strack 1979).

    Args:
        overlap: delta (P,) in m; normal_speed: v_n (P,) in m/s, negative on approach;
        stiffness: k_n (P,) in N/m; damping: eta_n (P,) in N s/m (`linear_damping`);
        active: (P,) bool.
    """
    force = stiffness * overlap - damping * normal_speed
    return jnp.where(active, jnp.maximum(force, 0.0), 0.0)


def normal_force_hertz(
    overlap: Array,
    normal_speed: Array,
    E_star: Array,
    R_star: Array,
    effective_mass: Array,
    restitution: Array,
    active: Array,
) -> Array:
    """F_n = max(0, (4/3) E* sqrt(R*) delta^(3/2) - eta_n v_n), (P,) in N.

    Elastic part: Hertz (Johnson 1985, eq. 4.23). Damping: eta_n = -2 sqrt(5/6) beta sqrt(S_n m*),
    S_n = 2 E* sqrt(R* delta) (Tsuji et al. 1992; Antypov & Elliott 2011).
    """
    beta = restitution_beta(restitution)
    return normal_force_hertz_beta(
        overlap, normal_speed, E_star, R_star, effective_mass, beta, active
    )


def normal_force_hertz_beta(
    overlap: Array,
    normal_speed: Array,
    E_star: Array,
    R_star: Array,
    effective_mass: Array,
    beta: Array,
    active: Array,
) -> Array:
    """`normal_force_hertz` with beta = `restitution_beta`(e) computed beforehand, (P,) in N."""
    delta = jnp.where(active, overlap, 0.0)
    # delta sqrt(delta), not delta**1.5: XLA:CPU's pow is exp(1.5 log delta), several times slower
    elastic = (4.0 / 3.0) * E_star * jnp.sqrt(R_star) * (delta * jnp.sqrt(delta))
    damping = hertz_dashpot(beta, effective_mass, hertz_normal_stiffness(E_star, R_star, delta))
    return jnp.where(active, jnp.maximum(elastic - damping * normal_speed, 0.0), 0.0)


# --- tangential and rolling -----------------------------------------------------------------------


def tangential_force(
    history: Array,
    normal: Array,
    tangential_velocity: Array,
    normal_force: Array,
    stiffness: Array,
    damping: Array,
    friction: Array,
    dt: float | Array,
    active: Array,
) -> tuple[Array, Array]:
    """Coulomb friction with an elastic tangential spring xi kept per pair (Luding 2008).

    1. xi from the last step is projected onto the current tangent plane and rescaled to its
       old length (the contact frame rotated): xi' = |xi| (xi - (xi.n) n) / |xi - (xi.n) n|.
    2. xi'' = xi' + v_t dt;  trial force F_t = -k_t xi'' - eta_t v_t.
    3. Slip when |F_t| > mu F_n: F_t <- mu F_n F_t/|F_t| and xi'' <- -(F_t + eta_t v_t)/k_t, so that
       -k_t xi'' is the elastic part of the limited force and unloading retraces the elastic line.

    Args:
        history: xi (P, 3) in m from the previous step (zero for a new contact).
        normal: n (P, 3); tangential_velocity: v_t (P, 3) in m/s, relative velocity of i w.r.t. j
        at the contact point; normal_force: F_n (P,) in N; stiffness: k_t (P,) in N/m;
        damping: eta_t (P,) in N s/m; friction: mu (P,); dt: time step in s; active: (P,) bool.

    Returns:
        force on i (P, 3) in N and the new history (P, 3) in m, both zero for inactive pairs.
    """
    mask = active[:, None]
    old = jnp.where(mask, history, 0.0)
    length = norm(old)[:, None]
    in_plane = old - dot(old, normal)[:, None] * normal
    xi = length * safe_normalize(in_plane) + tangential_velocity * dt
    trial = -stiffness[:, None] * xi - damping[:, None] * tangential_velocity
    limit = friction * normal_force
    magnitude = norm(trial)
    slip = magnitude > limit
    limited = limit[:, None] * safe_normalize(trial)
    force = jnp.where(slip[:, None], limited, trial)
    safe_k = jnp.where(stiffness > 0, stiffness, 1.0)[:, None]
    slipped_xi = -(limited + damping[:, None] * tangential_velocity) / safe_k
    xi = jnp.where(slip[:, None], slipped_xi, xi)
    return jnp.where(mask, force, 0.0), jnp.where(mask, xi, 0.0)


def rolling_resistance_torque(
    relative_angular_velocity: Array,
    normal: Array,
    rolling_friction: Array,
    R_star: Array,
    normal_force: Array,
    active: Array,
) -> Array:
    """Constant directional torque on i opposing rolling (Ai et al. 2011, model A), (P, 3) in N m.

    M_r = -mu_r R* F_n w_r/|w_r|, with w_r the part of w_i - w_j in the tangent plane (the twist
    about n is not rolling). Body j receives -M_r. Zero where mu_r = 0 or w_r = 0.
    """
    twist = dot(relative_angular_velocity, normal)[:, None] * normal
    direction = safe_normalize(relative_angular_velocity - twist)
    torque = -(rolling_friction * R_star * normal_force)[:, None] * direction
    return jnp.where(active[:, None], torque, 0.0)


# --- stability ------------------------------------------------------------------------------------


def critical_time_step_linear(effective_mass: Array, stiffness: Array) -> Array:
    """dt_crit = t_c / 10 with t_c = pi sqrt(m*/k_n), the undamped linear contact duration, in s.

    A resolution rule of thumb: at least ten steps per contact. It is 0.157 of the
    central-difference stability bound 2 sqrt(m*/k_n) of an undamped contact (Cundall & Strack
    1979; O'Sullivan & Bray 2004, Eng. Comput. 21, 278), so a step below it is also stable.
    """
    return jnp.pi * jnp.sqrt(effective_mass / stiffness) / 10.0


def critical_time_step_hertz(
    radius: Array, density: Array, shear_modulus: Array, poisson_ratio: Array
) -> Array:
    """Rayleigh-wave time step T_R = pi R sqrt(rho/G) / (0.1631 nu + 0.8766) per body, in s.

    The time a Rayleigh wave needs to cross a sphere (Li, Xu & Thornton 2005, Powder Technol. 160,
    219; Thornton & Randall 1988); G = E/(2(1 + nu)) is the particle's own shear modulus.
    Common practice runs at 0.2-0.3 T_R of the smallest body.
    """
    return jnp.pi * radius * jnp.sqrt(density / shear_modulus) / (0.1631 * poisson_ratio + 0.8766)
