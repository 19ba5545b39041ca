"""Contact kernels against analytic contact mechanics (float64; x64 is enabled in conftest).

Collisions are integrated here with a small velocity-Verlet loop so that the kernels are checked
on their own, without the rigid-body integrator.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import contact_models as cm
from kernels.contact import accumulate, sphere_plane, sphere_sphere

# Exact algebra in float64: only round-off of a few operations separates the two sides.
ROUND_OFF = 1e-12
# Collisions are resolved with ~2000 steps per contact; velocity Verlet with the dashpot evaluated
# at the half-step velocity is first order in the damping, so the measured restitution and contact
# time carry an O(dt/t_c) error of a few 1e-4.
STEPS_PER_CONTACT = 2000
INTEGRATION = 2e-3
# The Hertz damping uses the beta calibrated on the linear dashpot; Antypov & Elliott's sqrt(5/6)
# makes it match to a few 1e-4 (measured), which this bound covers together with INTEGRATION.
HERTZ_RESTITUTION = 1e-3

RADIUS, DENSITY, YOUNG, POISSON = 0.01, 2500.0, 1.0e7, 0.3
MASS = 4.0 / 3.0 * math.pi * RADIUS**3 * DENSITY
LINEAR_STIFFNESS = 1.0e4


def f64(x):
    return jnp.asarray(x, dtype=jnp.float64)


def pair_materials():
    """E*, G*, R*, m* of two identical spheres."""
    E_star = cm.effective_modulus(f64(YOUNG), POISSON, f64(YOUNG), POISSON)
    G_star = cm.effective_shear_modulus(f64(YOUNG), POISSON, f64(YOUNG), POISSON)
    return E_star, G_star, cm.effective_radius(f64(RADIUS), RADIUS), cm.effective_mass(MASS, MASS)


def normal_force(model, geometry, restitution):
    E_star, _, R_star, m_star = pair_materials()
    if model == "linear":
        eta = cm.linear_damping(restitution, m_star, LINEAR_STIFFNESS)
        return cm.normal_force_linear(
            geometry.overlap, geometry.normal_speed, LINEAR_STIFFNESS, eta, geometry.active
        )
    return cm.normal_force_hertz(
        geometry.overlap,
        geometry.normal_speed,
        E_star,
        R_star,
        m_star,
        restitution,
        geometry.active,
    )


def hertz_contact_time(speed):
    """2 delta_max/v int_0^1 (1 - x^(5/2))^(-1/2) dx = 2.868 (m*^2/(R* E*^2 v))^(1/5).

    The Hertz impact time (Johnson 1985, sec. 11.4); the integral is sqrt(pi) G(7/5)/G(9/10).
    """
    E_star, _, R_star, m_star = pair_materials()
    integral = math.sqrt(math.pi) * math.gamma(7 / 5) / math.gamma(9 / 10)
    delta_max = (15.0 * m_star * speed**2 / (16.0 * E_star * jnp.sqrt(R_star))) ** 0.4
    return float(2.0 * integral * delta_max / speed)


def collide(model, restitution, speed=1.0):
    """Head-on collision of two equal spheres; returns (measured e, contact time in s)."""
    if model == "linear":
        t_contact = math.pi * math.sqrt(float(pair_materials()[3]) / LINEAR_STIFFNESS)
    else:
        t_contact = hertz_contact_time(speed)
    dt = t_contact / STEPS_PER_CONTACT
    steps = int(1.5 * STEPS_PER_CONTACT)
    gap = 10.0 * speed * dt  # the spheres touch after ~10 steps
    x0 = f64([[-RADIUS - gap / 2, 0.0, 0.0], [RADIUS + gap / 2, 0.0, 0.0]])
    v0 = f64([[speed / 2, 0.0, 0.0], [-speed / 2, 0.0, 0.0]])
    i, j, valid = jnp.array([0]), jnp.array([1]), jnp.array([True])
    radius, zero = f64([RADIUS]), jnp.zeros((1, 3))

    def forces(x, v):
        g = sphere_sphere(x[i], radius, v[i], zero, x[j], radius, v[j], zero, valid)
        f = normal_force(model, g, restitution)[:, None] * g.normal
        force, _ = accumulate(2, i, j, f, g.contact_point, x, zero, zero, valid)
        return force, g.active[0]

    def step(carry, _):
        x, v, a = carry
        v_half = v + 0.5 * dt * a
        x = x + dt * v_half
        force, touching = forces(x, v_half)
        a = force / MASS
        return (x, v_half + 0.5 * dt * a, a), touching

    (_, v, _), touching = jax.lax.scan(step, (x0, v0, jnp.zeros_like(x0)), None, length=steps)
    assert not bool(touching[-1]), "the spheres are still in contact at the end of the run"
    e = float((v[1, 0] - v[0, 0]) / speed)
    return e, float(jnp.sum(touching)) * dt


def clipped_linear_restitution(restitution):
    """Restitution of the linear dashpot with F_n >= 0 (Schwager & Pöschel 2007, Granular Matter 9,
    465): the contact ends when k delta = eta |v_n|, at omega t = pi - arctan(2 b w/(w^2 - b^2))."""
    m_star = float(pair_materials()[3])
    b = float(cm.linear_damping(restitution, m_star, LINEAR_STIFFNESS)) / (2.0 * m_star)
    w = math.sqrt(LINEAR_STIFFNESS / m_star - b**2)
    return math.exp(-b / w * (math.pi - math.atan(2.0 * b * w / (w**2 - b**2))))


@pytest.mark.parametrize("restitution", [0.3, 0.5, 0.7, 0.9])
def test_linear_collision_restitution(restitution):
    e, _ = collide("linear", restitution)
    assert abs(e - restitution) < INTEGRATION * restitution, (e, restitution)
    # Independent of the integration: the closed form of the clipped contact returns e.
    assert abs(clipped_linear_restitution(restitution) - restitution) < ROUND_OFF


@pytest.mark.parametrize("restitution", [0.3, 0.5, 0.7, 0.9])
def test_hertz_collision_restitution(restitution):
    e, _ = collide("hertz", restitution)
    assert abs(e - restitution) < HERTZ_RESTITUTION * restitution, (e, restitution)


@pytest.mark.parametrize("speed", [0.3, 3.0])
def test_hertz_elastic_collision_time_and_restitution(speed):
    e, duration = collide("hertz", 1.0, speed)
    expected = hertz_contact_time(speed)
    assert abs(duration - expected) < INTEGRATION * expected, (duration, expected)
    assert abs(e - 1.0) < INTEGRATION, e


def test_restitution_beta_limits_and_the_free_dashpot_form_it_replaces():
    e = f64([0.0, 0.1, 0.3, 0.6, 0.9, 1.0])
    beta = np.asarray(cm.restitution_beta(e))
    assert beta[0] == -1.0 and beta[1] == -1.0 and beta[-1] == 0.0  # e <= exp(-2): critical
    assert np.all(np.diff(beta[1:]) > 0)
    # The clip makes the contact more elastic, so it needs more damping than the free form.
    free = np.log(e[2:5]) / np.sqrt(np.log(e[2:5]) ** 2 + math.pi**2)
    assert np.all(beta[2:5] < free)


def test_restitution_beta_solves_the_clipped_contact_everywhere():
    """beta = -cos t with 2 t cot t = -ln e, from four Newton steps: the clipped linear contact's
    restitution e = exp(-r (pi - 2 arctan r)), r = -beta / sqrt(1 - beta^2), gives e back to
    round-off from moderate damping to the elastic end, stays within [-1, 0] and monotone right up
    to critical damping (where the restitution is flat in r), and its gradient is finite."""
    e = np.concatenate(
        [np.linspace(0.14, 1.0 - 1e-9, 20001), math.exp(-2.0) + np.logspace(-15, -3)]
    )
    beta = np.asarray(cm.restitution_beta(f64(e)))
    assert np.all((beta >= -1.0) & (beta <= 0.0)) and np.all(np.diff(beta[:20001]) > 0)
    moderate = e[:20001]
    r = -beta[:20001] / np.sqrt(1.0 - beta[:20001] ** 2)
    back = np.exp(-r * (math.pi - 2.0 * np.arctan(r)))
    assert np.abs(back - moderate).max() < 1e-13
    near_critical = beta[20001:]
    assert np.all(near_critical < -0.99) and np.all(np.diff(near_critical) >= 0)
    gradient = jax.vmap(jax.grad(cm.restitution_beta))(f64(e))
    assert np.all(np.isfinite(np.asarray(gradient)))
    # float32 (the coupled runs' bodies): within a few ulp of float64
    single = np.asarray(cm.restitution_beta(jnp.asarray(e, jnp.float32)))
    assert single.dtype == np.float32 and np.abs(single - beta).max() < 1e-6


def test_hertz_static_force_is_the_hertz_law():
    E_star, _, R_star, m_star = pair_materials()
    overlap = f64([1e-6, 1e-5, 1e-4])
    active = jnp.ones(3, bool)
    force = cm.normal_force_hertz(overlap, jnp.zeros(3), E_star, R_star, m_star, 0.5, active)
    expected = 4.0 / 3.0 * float(E_star) * math.sqrt(float(R_star)) * np.asarray(overlap) ** 1.5
    np.testing.assert_allclose(force, expected, rtol=ROUND_OFF)


def test_normal_force_is_never_attractive():
    E_star, _, R_star, m_star = pair_materials()
    separating = f64([5.0, 5.0])
    overlap, active = f64([1e-6, 1e-6]), jnp.ones(2, bool)
    hertz = cm.normal_force_hertz(overlap, separating, E_star, R_star, m_star, 0.1, active)
    eta = cm.linear_damping(0.1, m_star, LINEAR_STIFFNESS)
    linear = cm.normal_force_linear(overlap, separating, LINEAR_STIFFNESS, eta, active)
    assert np.all(np.asarray(hertz) == 0.0) and np.all(np.asarray(linear) == 0.0)


def plane_contact(center_x, velocity_x, overlap):
    """A sphere pressed into the floor z = 0 by `overlap`, at x = center_x moving at velocity_x."""
    center = f64([[center_x, 0.0, RADIUS - overlap]])
    velocity = f64([[velocity_x, 0.0, 0.0]])
    zero = jnp.zeros((1, 3))
    up = f64([[0.0, 0.0, 1.0]])
    return sphere_plane(center, f64([RADIUS]), velocity, zero, zero, up, zero, jnp.array([True]))


def test_tangential_stick_slip_and_consistent_unloading():
    """Damping eta_t = 0 so that the force is the spring alone and comparisons are exact."""
    overlap, mu, dt, speed = 1e-5, 0.5, 1e-6, 1e-2
    E_star = cm.effective_modulus(f64(YOUNG), POISSON, jnp.inf, 0.0)
    G_star = cm.effective_shear_modulus(f64(YOUNG), POISSON, jnp.inf, 0.0)
    R_star = cm.effective_radius(f64(RADIUS), jnp.inf)
    k_t = cm.mindlin_tangential_stiffness(G_star, R_star, f64([overlap]))
    g = plane_contact(0.0, speed, overlap)
    f_n = cm.normal_force_hertz(g.overlap, g.normal_speed, E_star, R_star, MASS, 1.0, g.active)
    limit = float(mu * f_n[0])
    slip_steps = limit / (float(k_t[0]) * speed * dt)
    assert 300 < slip_steps < 500, slip_steps  # the schedule below straddles the slip point

    def push(history, velocity_x, steps):
        g = plane_contact(0.0, velocity_x, overlap)
        out = []
        for _ in range(steps):
            force, history = cm.tangential_force(
                history, g.normal, g.tangential_velocity, f_n, k_t, f64([0.0]), f64([mu]), dt,
                g.active,
            )  # fmt: skip
            out.append(float(force[0, 0]))
        return np.array(out), history

    stick, history = push(jnp.zeros((1, 3)), speed, 300)
    displacement = speed * dt * np.arange(1, 301)
    np.testing.assert_allclose(stick, -float(k_t[0]) * displacement, rtol=ROUND_OFF)
    assert np.all(np.abs(stick) < limit)

    slide, history = push(history, speed, 300)
    assert np.any(np.abs(slide) < limit * (1 - 1e-3)), "the spring never loaded through the limit"
    np.testing.assert_allclose(slide[-150:], -limit, rtol=ROUND_OFF)

    back, history = push(history, -speed, 300)
    expected = -limit + float(k_t[0]) * speed * dt * np.arange(1, 301)
    elastic = expected < limit
    np.testing.assert_allclose(back[elastic], expected[elastic], rtol=ROUND_OFF, atol=ROUND_OFF)
    assert np.all(np.abs(back) <= limit * (1 + ROUND_OFF))
    np.testing.assert_allclose(back[~elastic], limit, rtol=ROUND_OFF)  # slid the other way


def test_history_is_rotated_into_the_tangent_plane_keeping_its_length():
    old = f64([[1e-6, 0.0, 0.0]])
    tilted = f64([[math.sin(0.3), 0.0, math.cos(0.3)]])
    force, new = cm.tangential_force(
        old, tilted, jnp.zeros((1, 3)), f64([1.0]), f64([1.0]), f64([0.0]), f64([1.0]), 1e-3,
        jnp.array([True]),
    )  # fmt: skip
    assert abs(float(jnp.sum(new * tilted))) < ROUND_OFF * 1e-6
    assert abs(float(jnp.linalg.norm(new)) - 1e-6) < ROUND_OFF * 1e-6
    assert float(jnp.sum(new * old)) > 0


def random_cluster(seed=0, n=6):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 2.5 * RADIUS, (n, 3))
    i, j = np.triu_indices(n, 1)
    radius = rng.uniform(0.8, 1.2, n) * RADIUS
    return rng, f64(x), f64(radius), jnp.asarray(i), jnp.asarray(j)


def pair_forces(x, v, w, radius, i, j, valid, history, mu_r=0.3):
    """Hertz-Mindlin forces with friction and rolling resistance for the given pairs."""
    g = sphere_sphere(x[i], radius[i], v[i], w[i], x[j], radius[j], v[j], w[j], valid)
    E_star, G_star, _, _ = pair_materials()
    R_star = cm.effective_radius(radius[i], radius[j])
    m_star = cm.effective_mass(MASS, MASS)
    f_n = cm.normal_force_hertz(g.overlap, g.normal_speed, E_star, R_star, m_star, 0.5, g.active)
    k_t = cm.mindlin_tangential_stiffness(G_star, R_star, g.overlap)
    eta_t = cm.hertz_damping(0.5, m_star, k_t)
    mu = jnp.full(i.shape, 0.4)
    f_t, history = cm.tangential_force(
        history, g.normal, g.tangential_velocity, f_n, k_t, eta_t, mu, 1e-5, g.active
    )
    roll = cm.rolling_resistance_torque(
        g.relative_angular_velocity, g.normal, mu_r, R_star, f_n, g.active
    )
    force_on_i = f_n[:, None] * g.normal + f_t
    return g, force_on_i, roll, history


def test_newton_third_law_for_sphere_pairs():
    rng, x, radius, i, j = random_cluster()
    v, w = f64(rng.normal(size=(6, 3))), f64(rng.normal(size=(6, 3)) * 100)
    valid = jnp.ones(i.shape, bool)
    history = f64(rng.normal(size=(i.size, 3)) * 1e-6)
    g, f, roll, _ = pair_forces(x, v, w, radius, i, j, valid, history)
    assert int(jnp.sum(g.active)) >= 4, "the cluster should have several contacts"
    force, torque = accumulate(6, i, j, f, g.contact_point, x, roll, -roll, valid)
    scale = float(jnp.max(jnp.abs(f)))
    np.testing.assert_allclose(jnp.sum(force, axis=0), 0.0, atol=ROUND_OFF * scale)
    about_origin = jnp.sum(jnp.cross(x, force) + torque, axis=0)
    np.testing.assert_allclose(about_origin, 0.0, atol=ROUND_OFF * scale * RADIUS)
    assert float(jnp.max(jnp.abs(torque))) > 1e-3 * scale * RADIUS, "no torque was exercised"


def test_padded_pairs_give_exactly_zero():
    rng, x, radius, i, j = random_cluster(seed=1)
    v, w = f64(rng.normal(size=(6, 3))), f64(rng.normal(size=(6, 3)))
    real = jnp.ones(i.shape, bool)
    history = f64(rng.normal(size=(i.size, 3)) * 1e-6)
    g, f, roll, new_history = pair_forces(x, v, w, radius, i, j, real, history)
    assert int(jnp.sum(g.active)) >= 3, "the cluster should have several contacts"
    force, torque = accumulate(6, i, j, f, g.contact_point, x, roll, -roll, real)
    # Append padding: the same overlapping pairs marked invalid with NaN histories, and pairs
    # with a seventh body whose data are all NaN (an unused slot of a fixed-capacity buffer).
    x7, v7, w7 = (jnp.concatenate([a, jnp.full((1, 3), jnp.nan)]) for a in (x, v, w))
    radius7 = jnp.concatenate([radius, f64([jnp.nan])])
    i2 = jnp.concatenate([i, i, jnp.zeros_like(i)])
    j2 = jnp.concatenate([j, j, jnp.full_like(j, 6)])
    valid = jnp.concatenate([real, ~real, ~real])
    history2 = jnp.concatenate([history, jnp.full_like(history, jnp.nan), history])
    g2, f2, roll2, new_history2 = pair_forces(x7, v7, w7, radius7, i2, j2, valid, history2)
    padded = slice(i.size, None)
    for name, value in dict(force=f2, rolling=roll2, history=new_history2).items():
        assert np.all(np.asarray(value[padded]) == 0.0), name
    force2, torque2 = accumulate(7, i2, j2, f2, g2.contact_point, x7, roll2, -roll2, valid)
    np.testing.assert_array_equal(force2[:6], force)
    np.testing.assert_array_equal(torque2[:6], torque)
    assert np.all(np.asarray(force2[6]) == 0.0) and np.all(np.asarray(torque2[6]) == 0.0)
    np.testing.assert_array_equal(new_history2[: i.size], new_history)


def test_sphere_plane_force_goes_to_the_sphere_only():
    g = plane_contact(0.0, 0.1, 1e-5)
    f = f64([[1.0, 2.0, 3.0]])
    positions = f64([[0.0, 0.0, RADIUS - 1e-5], [5.0, 5.0, 5.0]])
    zero = jnp.zeros((1, 3))
    force, torque = accumulate(2, jnp.array([0]), jnp.array([-1]), f, g.contact_point, positions,
                               zero, zero, jnp.array([True]))  # fmt: skip
    np.testing.assert_array_equal(force, f64([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    lever = np.asarray(g.contact_point[0]) - np.asarray(positions[0])
    np.testing.assert_allclose(torque[0], np.cross(lever, [1.0, 2.0, 3.0]), rtol=ROUND_OFF)
    np.testing.assert_array_equal(torque[1], 0.0)
    assert abs(float(g.contact_point[0, 2]) + 0.5e-5) < ROUND_OFF  # middle of the overlap


def test_moving_plane_enters_the_relative_velocity():
    center, zero = f64([[0.0, 0.0, RADIUS / 2]]), jnp.zeros((1, 3))
    up, belt = f64([[0.0, 0.0, 1.0]]), f64([[2.0, 0.0, -1.0]])
    g = sphere_plane(center, f64([RADIUS]), zero, zero, zero, up, belt, jnp.array([True]))
    np.testing.assert_allclose(g.normal_speed, [1.0], rtol=ROUND_OFF)  # the floor moves away
    np.testing.assert_allclose(g.tangential_velocity, [[-2.0, 0.0, 0.0]], rtol=ROUND_OFF)


def test_sphere_sphere_geometry_and_surface_velocity():
    x_i, x_j = f64([[0.0, 0.0, 0.0]]), f64([[0.0, 0.0, 1.5 * RADIUS]])
    spin = f64([[1.0, 0.0, 0.0]])  # i spins about x; its top surface moves along -y
    zero, radius = jnp.zeros((1, 3)), f64([RADIUS])
    g = sphere_sphere(x_i, radius, zero, spin, x_j, radius, zero, zero, jnp.array([True]))
    np.testing.assert_allclose(g.overlap, [0.5 * RADIUS], rtol=ROUND_OFF)
    np.testing.assert_allclose(g.normal, [[0.0, 0.0, -1.0]], rtol=ROUND_OFF)  # from j to i
    np.testing.assert_allclose(g.contact_point, [[0.0, 0.0, 0.75 * RADIUS]], rtol=ROUND_OFF)
    np.testing.assert_allclose(g.tangential_velocity, [[0.0, -0.75 * RADIUS, 0.0]], rtol=ROUND_OFF)
    far = sphere_sphere(x_i, radius, zero, spin, 3 * x_j, radius, zero, zero, jnp.array([True]))
    assert not bool(far.active[0]) and float(far.overlap[0]) == 0.0


def test_mixing_rules_are_symmetric_and_reduce_to_known_limits():
    rng = np.random.default_rng(2)
    E1, E2 = f64(rng.uniform(1e6, 1e11, 5)), f64(rng.uniform(1e6, 1e11, 5))
    n1, n2 = f64(rng.uniform(0.0, 0.5, 5)), f64(rng.uniform(0.0, 0.5, 5))
    a, b = f64(rng.uniform(0.1, 1.0, 5)), f64(rng.uniform(0.1, 1.0, 5))
    pairs = [
        (cm.effective_modulus(E1, n1, E2, n2), cm.effective_modulus(E2, n2, E1, n1)),
        (cm.effective_shear_modulus(E1, n1, E2, n2), cm.effective_shear_modulus(E2, n2, E1, n1)),
        (cm.effective_radius(a, b), cm.effective_radius(b, a)),
        (cm.effective_mass(a, b), cm.effective_mass(b, a)),
        (cm.mixed_coefficient(a, b), cm.mixed_coefficient(b, a)),
    ]
    for ij, ji in pairs:
        np.testing.assert_array_equal(ij, ji)
    E, nu = 2e9, 0.25
    np.testing.assert_allclose(cm.effective_modulus(E, nu, E, nu), E / (2 * (1 - nu**2)))
    np.testing.assert_allclose(
        cm.effective_shear_modulus(E, nu, E, nu), E / (4 * (2 - nu) * (1 + nu)), rtol=ROUND_OFF
    )
    np.testing.assert_allclose(cm.effective_modulus(E, nu, jnp.inf, 0.3), E / (1 - nu**2))
    assert float(cm.effective_radius(2.0, 2.0)) == 1.0 and float(cm.effective_radius(2.0, jnp.inf))
    assert float(cm.effective_radius(2.0, jnp.inf)) == 2.0
    assert float(cm.effective_mass(3.0, jnp.inf)) == 3.0
    np.testing.assert_array_equal(cm.mixed_coefficient(a, b), np.minimum(a, b))
    assert float(cm.linear_tangential_stiffness(f64(7.0))) == 2.0
    assert float(cm.linear_tangential_stiffness(f64(7.0), 0.5)) == 3.5


def test_rolling_resistance_opposes_rolling_and_vanishes_without_friction():
    normal = f64([[0.0, 0.0, 1.0]] * 3)
    omega = f64([[0.0, 4.0, 0.0], [1.0, 1.0, 7.0], [0.0, 0.0, 5.0]])  # last: pure twist
    f_n, R_star, active = f64([2.0, 2.0, 2.0]), f64([0.01] * 3), jnp.ones(3, bool)
    torque = cm.rolling_resistance_torque(omega, normal, 0.1, R_star, f_n, active)
    rolling = np.asarray(omega[:2]) * [1, 1, 0]
    assert np.all(np.sum(np.asarray(torque[:2]) * rolling, axis=-1) < 0)
    np.testing.assert_allclose(np.linalg.norm(torque[:2], axis=-1), 0.1 * 0.01 * 2.0, ROUND_OFF)
    np.testing.assert_allclose(torque[1] / np.linalg.norm(torque[1]), [-(0.5**0.5), -(0.5**0.5), 0])
    assert np.all(np.asarray(torque[2]) == 0.0)
    none = cm.rolling_resistance_torque(omega, normal, 0.0, R_star, f_n, active)
    assert np.all(np.asarray(none) == 0.0)


def test_critical_time_steps():
    # t_c = pi sqrt(m/k) = 0.1 s for m = 1 kg, k = 100 pi^2 N/m; a tenth of it.
    np.testing.assert_allclose(cm.critical_time_step_linear(1.0, 100 * math.pi**2), 0.01)
    assert float(cm.critical_time_step_linear(1.0, 100.0)) < 2 * math.sqrt(1.0 / 100.0)
    # Glass bead, R = 1 mm, G = 7e10/2.5 Pa, nu = 0.25: by hand sqrt(2500/2.8e10) = 2.98807e-4,
    # times pi 1e-3 = 9.38730e-7, over 0.1631 * 0.25 + 0.8766 = 0.917375: 1.02328e-6 s.
    glass = cm.critical_time_step_hertz(1e-3, 2500.0, 7e10 / 2.5, 0.25)
    np.testing.assert_allclose(glass, 1.02328e-6, rtol=1e-5)  # 6 hand digits
    twice = cm.critical_time_step_hertz(f64([1e-3, 2e-3]), 2500.0, 2.8e10, 0.25)
    np.testing.assert_allclose(twice[1] / twice[0], 2.0, rtol=ROUND_OFF)


def test_float32_inputs_stay_float32():
    x = jnp.asarray([[0.0, 0.0, 0.0], [0.0, 0.0, 1.9 * RADIUS]], jnp.float32)
    v = jnp.zeros((2, 3), jnp.float32)
    radius = jnp.full(2, RADIUS, jnp.float32)
    i, j, valid = jnp.array([0]), jnp.array([1]), jnp.array([True])
    E = jnp.float32(YOUNG)
    g = sphere_sphere(x[i], radius[i], v[i], v[i], x[j], radius[j], v[j], v[j], valid)
    E_star = cm.effective_modulus(E, 0.3, E, 0.3)
    R_star = cm.effective_radius(radius[i], radius[j])
    m_star = cm.effective_mass(jnp.float32(MASS), jnp.float32(MASS))
    f_n = cm.normal_force_hertz(g.overlap, g.normal_speed, E_star, R_star, m_star, 0.5, g.active)
    k_t = cm.mindlin_tangential_stiffness(E_star, R_star, g.overlap)
    f_t, xi = cm.tangential_force(
        jnp.zeros((1, 3), jnp.float32), g.normal, g.tangential_velocity, f_n, k_t,
        cm.hertz_damping(0.5, m_star, k_t), jnp.float32([0.5]), 1e-5, g.active,
    )  # fmt: skip
    force, torque = accumulate(2, i, j, f_n[:, None] * g.normal + f_t, g.contact_point, x,
                               jnp.zeros_like(f_t), jnp.zeros_like(f_t), valid)  # fmt: skip
    for name, value in dict(overlap=g.overlap, f_n=f_n, xi=xi, force=force, torque=torque).items():
        assert value.dtype == jnp.float32, name
    assert float(f_n[0]) > 0
