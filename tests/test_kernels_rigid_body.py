"""Quaternions and rigid-body integration against exact identities and analytic motions.

float64 throughout (tests/conftest.py enables x64). Measured figures quoted in the comments were
taken on CPU with jax 0.10.2.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from kernels import quaternion as quat
from kernels import rigid_body as rb

# Pure float64 algebra on O(1) numbers: a few ulps (2.2e-16) per operation.
ROUNDOFF = 1e-13
# Projectile: leapfrog is exact for a constant force; 2000 steps of x ~ 10 m accumulate round-off
# (measured 4.9e-13 m in position, 4.4e-13 m/s in velocity).
PROJECTILE_ROUNDOFF = 5e-12
# Free rotor, dt = 0.01, 1e4 steps: world L is untouched by the drift (bit-identical); |R^T L|
# drifts only by round-off in the quaternion (measured 1.2e-15 relative).
SPIN_NORM_RELATIVE = 1e-13
# Free rotor energy error max |E - E0| / E0 over 1e4 steps: measured 1.5e-7 at dt = 0.01 (and
# 6.1e-7 at dt = 0.02: O(dt^2), bounded, no secular growth); 3x the measured figure.
ENERGY_RELATIVE = 5e-7
# Second-order convergence: error ratio for halved dt, measured 4.0007 (spring) and 3.99-4.01
# (free-rotor orientation); +-5% admits higher-order remainders, and excludes 2 (first order).
RATIO_BOUNDS = (3.8, 4.2)
# Stable rotation about the major/minor axis with a 1e-3 perturbation: the axis component of
# Pi/|Pi| stays within 1 - 2.5e-6 (measured); the intermediate axis flips (changes by ~2).
STABLE_AXIS_DEVIATION = 1e-4

# Symmetric top, dt = 0.01, t = 10 s: the splitting's O(dt^2) orientation error against the
# analytic precession, measured 1.8e-6 (4.6e-7 at dt = 0.005: second order); about 3x that.
TOP_ORIENTATION = 5e-6

MOMENTS = np.array([1.0, 2.0, 3.0])  # kg m^2, an asymmetric body


def make_bodies(
    position,
    velocity=None,
    orientation=None,
    angular_momentum=None,
    inverse_mass=1.0,
    inverse_inertia=(1.0, 1.0, 1.0),
    kinematic=False,
    prescribed_angular_velocity=None,
) -> rb.Bodies:
    position = jnp.atleast_2d(jnp.asarray(position, float))
    n = position.shape[0]

    def vectors(value, default):
        return jnp.broadcast_to(jnp.asarray(default if value is None else value, float), (n, 3))

    identity = jnp.array([1.0, 0.0, 0.0, 0.0])
    q = identity if orientation is None else jnp.asarray(orientation, float)
    return rb.Bodies(
        position=position,
        orientation=jnp.broadcast_to(q, (n, 4)),
        velocity=vectors(velocity, 0.0),
        angular_momentum=vectors(angular_momentum, 0.0),
        prescribed_angular_velocity=vectors(prescribed_angular_velocity, 0.0),
        inverse_mass=jnp.broadcast_to(jnp.asarray(inverse_mass, float), (n,)),
        inverse_inertia=vectors(inverse_inertia, 0.0),
        kinematic=jnp.broadcast_to(jnp.asarray(kinematic), (n,)),
    )


def no_forces(bodies):
    return jnp.zeros_like(bodies.position), jnp.zeros_like(bodies.position)


def run(bodies, forces_fn, dt, steps, observe=lambda b: 0.0):
    """steps of rb.step in one compiled scan; returns the final bodies and observe() per step."""

    def body(carry, _):
        carry = rb.step(*carry, forces_fn, dt)
        return carry, observe(carry[0])

    @jax.jit
    def scan(carry):
        return lax.scan(body, carry, None, length=steps)

    (final, _, _), observed = scan((bodies, *forces_fn(bodies)))
    return final, jax.tree_util.tree_map(np.asarray, observed)


def random_quaternions(n, seed=0):
    rng = np.random.default_rng(seed)
    random = rng.normal(size=(n, 4))
    # Half turns (w = 0) and near half turns pick the x, y and z pivots of Shepperd's method.
    special = np.array(
        [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1e-9, 0.3, -0.4, 0.5]], float
    )
    return quat.normalize(np.concatenate([random, special]))


def body_momentum(bodies):
    return quat.rotate_inverse(bodies.orientation, bodies.angular_momentum)


# --- quaternions ---------------------------------------------------------------------------------


def test_rotate_matches_matrix_and_inverse_undoes_it():
    q = random_quaternions(20)
    v = np.random.default_rng(1).normal(size=(q.shape[0], 3))
    R = quat.to_matrix(q)
    np.testing.assert_allclose(quat.rotate(q, v), np.einsum("nij,nj->ni", R, v), atol=ROUNDOFF)
    np.testing.assert_allclose(quat.rotate_inverse(q, quat.rotate(q, v)), v, atol=ROUNDOFF)
    np.testing.assert_allclose(
        R @ np.swapaxes(R, -1, -2), np.broadcast_to(np.eye(3), R.shape), atol=ROUNDOFF
    )
    np.testing.assert_allclose(np.linalg.det(R), 1.0, atol=ROUNDOFF)


def test_multiply_composes_rotations_and_conjugate_inverts():
    p, q = random_quaternions(10, seed=2), random_quaternions(10, seed=3)
    v = np.random.default_rng(4).normal(size=(p.shape[0], 3))
    composed = quat.rotate(quat.multiply(p, q), v)
    np.testing.assert_allclose(composed, quat.rotate(p, quat.rotate(q, v)), atol=ROUNDOFF)
    np.testing.assert_allclose(
        quat.to_matrix(quat.multiply(p, q)), quat.to_matrix(p) @ quat.to_matrix(q), atol=ROUNDOFF
    )
    identity = np.broadcast_to([1.0, 0.0, 0.0, 0.0], p.shape)
    np.testing.assert_allclose(quat.multiply(p, quat.conjugate(p)), identity, atol=ROUNDOFF)


def test_from_matrix_inverts_to_matrix_up_to_sign():
    q = random_quaternions(30, seed=5)
    back = quat.from_matrix(quat.to_matrix(q))
    sign = np.sign(np.sum(np.asarray(back) * np.asarray(q), axis=-1, keepdims=True))
    np.testing.assert_allclose(back, sign * q, atol=ROUNDOFF)
    assert np.all(np.asarray(back)[:, 0] >= 0)


def test_axis_angle_constructors_agree():
    angle = np.linspace(-3.0, 3.0, 7)
    for k in range(3):
        axis = np.eye(3)[k] * 2.5  # not unit: from_axis_angle normalises
        expected = quat.from_axis_angle(np.broadcast_to(axis, (7, 3)), angle)
        np.testing.assert_allclose(quat.about_axis(k, angle), expected, atol=ROUNDOFF)
        rotation_vector = np.eye(3)[k] * angle[:, None]
        np.testing.assert_allclose(
            quat.from_rotation_vector(rotation_vector), expected, atol=ROUNDOFF
        )
    # A quarter turn about z takes x to y.
    quarter = quat.about_axis(2, np.pi / 2)
    np.testing.assert_allclose(quat.rotate(quarter, [1.0, 0.0, 0.0]), [0, 1, 0], atol=ROUNDOFF)
    np.testing.assert_array_equal(quat.from_rotation_vector(np.zeros(3)), [1.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="got 3"):
        quat.about_axis(3, 1.0)


def test_normalize_gives_unit_quaternions_in_the_same_direction():
    raw = np.random.default_rng(6).normal(size=(8, 4)) * 3.0
    unit = np.asarray(quat.normalize(raw))
    np.testing.assert_allclose(np.linalg.norm(unit, axis=-1), 1.0, atol=ROUNDOFF)
    np.testing.assert_allclose(
        unit * np.linalg.norm(raw, axis=-1, keepdims=True), raw, atol=ROUNDOFF
    )


# --- state, diagnostics, inertia -----------------------------------------------------------------


def test_angular_velocity_and_energy_of_a_rotated_body():
    q = random_quaternions(1, seed=7)[0]
    R = np.asarray(quat.to_matrix(q))
    omega_body = np.array([1.0, 1.0, 1.0])
    L = R @ (MOMENTS * omega_body)
    bodies = make_bodies(
        [1.0, 0.0, 0.0],
        velocity=[0.0, 1.0, 2.0],
        orientation=q,
        angular_momentum=L,
        inverse_mass=0.5,
        inverse_inertia=1 / MOMENTS,
    )
    np.testing.assert_allclose(rb.angular_velocity(bodies)[0], R @ omega_body, atol=ROUNDOFF)
    # m |v|^2 / 2 = 2 * 5 / 2 = 5; sum I_k omega_k^2 / 2 = (1 + 2 + 3) / 2 = 3.
    np.testing.assert_allclose(rb.kinetic_energy(bodies), [8.0], rtol=ROUNDOFF)
    np.testing.assert_allclose(rb.linear_momentum(bodies), [[0.0, 2.0, 4.0]], atol=ROUNDOFF)
    orbital = np.cross([1.0, 0.0, 0.0], [0.0, 2.0, 4.0])
    np.testing.assert_allclose(
        rb.angular_momentum_about(bodies, np.zeros(3)), [orbital + L], atol=ROUNDOFF
    )
    np.testing.assert_allclose(
        rb.angular_momentum_about(bodies, [1.0, 0.0, 0.0]), [L], atol=ROUNDOFF
    )


def test_principal_frame_round_trips_rotated_tensors():
    n = 20
    rng = np.random.default_rng(8)
    moments = np.sort(rng.uniform(1.0, 5.0, size=(n, 3)), axis=-1)
    R = np.asarray(quat.to_matrix(random_quaternions(n - 5, seed=9)))
    inertia = R @ (moments[:, :, None] * np.swapaxes(R, -1, -2))
    # eigh returns left-handed bases for some of these, so the handedness fix is exercised.
    assert np.any(np.linalg.det(np.linalg.eigh(inertia)[1]) < 0)
    found, rotation = rb.principal_frame(inertia)
    np.testing.assert_allclose(found, moments, rtol=ROUNDOFF)
    P = np.asarray(quat.to_matrix(rotation))
    rebuilt = P @ (np.asarray(found)[:, :, None] * np.swapaxes(P, -1, -2))
    np.testing.assert_allclose(rebuilt, inertia, atol=ROUNDOFF * 10)
    # A user frame at orientation q_user: the world tensor is the same either way.
    q_user = random_quaternions(n - 5, seed=10)
    U = np.asarray(quat.to_matrix(q_user))
    W = np.asarray(quat.to_matrix(quat.multiply(q_user, rotation)))
    world_user = U @ inertia @ np.swapaxes(U, -1, -2)
    world_principal = W @ (np.asarray(found)[:, :, None] * np.swapaxes(W, -1, -2))
    np.testing.assert_allclose(world_principal, world_user, atol=ROUNDOFF * 10)


def test_check_inertia_flags_asymmetric_indefinite_and_non_finite_tensors():
    good = np.diag(MOMENTS)
    asymmetric = good + np.array([[0, 0.1, 0], [0, 0, 0], [0, 0, 0]])
    indefinite = np.diag([1.0, 1.0, -1.0])
    singular = np.diag([1.0, 1.0, 0.0])
    not_finite = np.diag([1.0, np.nan, 1.0])
    rod_violation = np.diag([1.0, 1.0, 3.0])  # SPD, but no mass distribution has it
    check = rb.check_inertia(
        np.stack([good, asymmetric, indefinite, singular, not_finite, rod_violation])
    )
    check = rb.InertiaCheck(*(np.asarray(field) for field in check))
    np.testing.assert_array_equal(check.invalid, [False, True, True, True, True, False])
    np.testing.assert_array_equal(check.violates_triangle[[0, 5]], [False, True])
    np.testing.assert_allclose(check.smallest_moment[[0, 2]], [1.0, -1.0], rtol=ROUNDOFF)
    np.testing.assert_allclose(check.asymmetry[[0, 1]], [0.0, 0.1 / 3.0], rtol=ROUNDOFF)


# --- integration ---------------------------------------------------------------------------------


def test_projectile_follows_the_exact_parabola():
    g = np.array([0.0, 0.0, -9.81])
    x0, v0 = np.array([0.0, 0.0, 1.0]), np.array([3.0, 1.0, 10.0])
    bodies = make_bodies(x0, velocity=v0, inverse_mass=0.5)

    def gravity(b):
        return rb.gravity_force(b, g), jnp.zeros_like(b.position)

    dt, steps = 1e-3, 2000
    _, (x, v) = run(bodies, gravity, dt, steps, lambda b: (b.position[0], b.velocity[0]))
    t = dt * np.arange(1, steps + 1)[:, None]
    np.testing.assert_allclose(x, x0 + v0 * t + 0.5 * g * t**2, rtol=0, atol=PROJECTILE_ROUNDOFF)
    np.testing.assert_allclose(v, v0 + g * t, rtol=0, atol=PROJECTILE_ROUNDOFF)


def free_rotor():
    q0 = random_quaternions(1, seed=11)[0]
    spin = np.array([0.6, -0.9, 1.3])  # body-frame angular momentum, generic
    L0 = quat.rotate(q0, spin)
    return make_bodies(
        np.zeros(3), orientation=q0, angular_momentum=L0, inverse_inertia=1 / MOMENTS
    )


def test_free_asymmetric_body_conserves_angular_momentum_and_energy():
    bodies = free_rotor()
    energy0 = float(rb.kinetic_energy(bodies)[0])
    spin0 = float(np.linalg.norm(body_momentum(bodies)[0]))
    final, (energy, pi, qnorm) = run(
        bodies,
        no_forces,
        0.01,
        10_000,
        lambda b: (rb.kinetic_energy(b)[0], body_momentum(b)[0], jnp.linalg.norm(b.orientation[0])),
    )
    spin = np.linalg.norm(pi, axis=-1)
    np.testing.assert_array_equal(final.angular_momentum, bodies.angular_momentum)
    assert np.max(np.abs(spin - spin0)) / spin0 < SPIN_NORM_RELATIVE
    assert np.max(np.abs(qnorm - 1.0)) < ROUNDOFF
    error = np.abs(energy - energy0) / energy0
    assert np.max(error) < ENERGY_RELATIVE, np.max(error)
    # Bounded, not drifting: the last quarter is no worse than the first (measured ratio ~1).
    assert np.max(error[-2500:]) < 1.5 * np.max(error[:2500])
    # The body tumbled: Pi swept far round its body-frame orbit (|Pi| = 1.68 kg m^2/s).
    assert np.all(np.ptp(pi, axis=0) > 0.5), np.ptp(pi, axis=0)


@pytest.mark.parametrize(
    "axis, expect_flip", [(0, False), (1, True), (2, False)], ids=["minor", "intermediate", "major"]
)
def test_only_the_intermediate_axis_is_unstable(axis, expect_flip):
    eps = 1e-3
    spin = np.full(3, eps)
    spin[axis] = 1.0
    bodies = make_bodies(np.zeros(3), angular_momentum=spin, inverse_inertia=1 / MOMENTS)
    dt, steps = 0.01, 6000
    _, pi = run(bodies, no_forces, dt, steps, body_momentum)
    component = pi[:, 0, axis] / np.linalg.norm(spin)
    if expect_flip:
        # Linearised growth rate lambda = |Pi| sqrt((1/I2 - 1/I3)(1/I1 - 1/I2)) = 1/sqrt(12);
        # the flip comes after about ln(1/eps)/lambda = 24 s (measured first sign change 29.3 s).
        growth_time = np.log(1 / eps) * np.sqrt(12.0)
        first_flip = dt * (np.argmax(component < 0) + 1)
        assert component.min() < -0.99
        assert 0.5 * growth_time < first_flip < 2 * growth_time, first_flip
    else:
        assert np.min(component) > 1 - STABLE_AXIS_DEVIATION


def convergence_ratios(errors):
    return [errors[i] / errors[i + 1] for i in range(len(errors) - 1)]


def test_position_error_is_second_order_under_a_spring_force():
    # m = 1 kg on a spring k = 1 N/m from x = 1 m at rest: x(t) = cos t.
    def spring(b):
        return -b.position, jnp.zeros_like(b.position)

    end = 2.0
    errors = []
    for dt in (0.1, 0.05, 0.025):
        final, _ = run(make_bodies([1.0, 0.0, 0.0]), spring, dt, round(end / dt))
        errors.append(abs(float(final.position[0, 0]) - np.cos(end)))
    for ratio in convergence_ratios(errors):
        assert RATIO_BOUNDS[0] < ratio < RATIO_BOUNDS[1], errors


def test_orientation_error_is_second_order_for_the_free_rotor():
    bodies, end = free_rotor(), 2.0
    reference, _ = run(bodies, no_forces, 0.1 / 64, 1280)

    def distance(q):  # q and -q are the same rotation
        return min(
            np.linalg.norm(q - reference.orientation), np.linalg.norm(q + reference.orientation)
        )

    errors = [
        distance(run(bodies, no_forces, dt, round(end / dt))[0].orientation)
        for dt in (0.1, 0.05, 0.025)
    ]
    for ratio in convergence_ratios(errors):
        assert RATIO_BOUNDS[0] < ratio < RATIO_BOUNDS[1], errors


def test_kinematic_and_fixed_bodies_ignore_forces():
    q0 = random_quaternions(1, seed=12)[0]
    omega = np.array([0.0, 0.0, 2.0])
    bodies = make_bodies(
        np.zeros((3, 3)),
        velocity=np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        orientation=q0,
        angular_momentum=np.array([[5.0, 5.0, 5.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
        inverse_mass=np.array([1.0, 0.0, 1.0]),
        inverse_inertia=np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        kinematic=np.array([True, False, False]),
        prescribed_angular_velocity=np.array([omega, np.zeros(3), np.zeros(3)]),
    )
    push = jnp.array([[3.0, -2.0, 1.0]] * 3)

    def pushing(b):
        return push, -push

    dt, steps = 0.01, 100
    final, _ = run(bodies, pushing, dt, steps)
    t = dt * steps
    # Kinematic: prescribed translation and rotation exp(omega t), forces ignored.
    np.testing.assert_allclose(final.position[0], [t, 0.0, 0.0], atol=ROUNDOFF)
    np.testing.assert_array_equal(final.velocity[0], bodies.velocity[0])
    expected = quat.multiply(quat.about_axis(2, 2.0 * t), q0)
    np.testing.assert_allclose(final.orientation[0], expected, atol=ROUNDOFF * 10)
    np.testing.assert_allclose(rb.angular_velocity(final)[0], omega, atol=ROUNDOFF)
    # Fixed (zero inverse mass and inertia): nothing moves.
    for field in ("position", "velocity", "orientation", "angular_momentum"):
        np.testing.assert_array_equal(getattr(final, field)[1], getattr(bodies, field)[1], field)
    # Rotation-locked (zero inverse inertia): translates under the force, never turns.
    np.testing.assert_allclose(final.velocity[2], push[2] * t, rtol=ROUNDOFF * 10)
    np.testing.assert_array_equal(final.angular_momentum[2], bodies.angular_momentum[2])
    np.testing.assert_allclose(final.orientation[2], q0, atol=ROUNDOFF)


def test_central_force_conserves_total_angular_momentum_and_forces_are_evaluated_once():
    # Two spinning bodies on springs to the origin: the torque about the origin vanishes, and
    # leapfrog conserves sum (x x m v) + L_spin exactly up to round-off.
    calls = []

    def springs(b):
        calls.append(1)
        return -3.0 * b.position, jnp.zeros_like(b.position)

    bodies = make_bodies(
        np.array([[1.0, 0.0, 0.0], [0.0, -2.0, 0.5]]),
        velocity=np.array([[0.0, 1.5, 0.2], [0.7, 0.0, -0.3]]),
        angular_momentum=np.array([[0.1, 0.2, 0.3], [-0.4, 0.0, 0.9]]),
        inverse_mass=np.array([1.0, 0.25]),
        inverse_inertia=1 / MOMENTS,
    )
    before = np.asarray(rb.angular_momentum_about(bodies, np.zeros(3)).sum(axis=0))
    force, torque = springs(bodies)
    for _ in range(50):
        bodies, force, torque = rb.step(bodies, force, torque, springs, 0.02)
    assert len(calls) == 51
    after = np.asarray(rb.angular_momentum_about(bodies, np.zeros(3)).sum(axis=0))
    np.testing.assert_allclose(after, before, atol=ROUNDOFF)
    assert np.linalg.norm(np.asarray(bodies.position) - [[1.0, 0.0, 0.0], [0.0, -2.0, 0.5]]) > 0.1


def test_drift_renormalises_the_orientation():
    # A quaternion off the unit sphere by 1e-6 (far above round-off) comes back unit, for a
    # dynamic and a kinematic body alike.
    q = 1.000001 * random_quaternions(1, seed=13)[0]
    bodies = make_bodies(
        np.zeros((2, 3)),
        orientation=q,
        angular_momentum=[0.3, -0.2, 0.5],
        inverse_inertia=1 / MOMENTS,
        kinematic=np.array([False, True]),
        prescribed_angular_velocity=[0.0, 1.0, 0.0],
    )
    drifted = rb.drift(bodies, 0.1)
    np.testing.assert_allclose(np.linalg.norm(drifted.orientation, axis=-1), 1.0, atol=ROUNDOFF)


def test_symmetric_top_precesses_as_the_analytic_solution():
    # Torque-free body with I1 = I2: R(t) = exp(t L/I1) R0 exp(t (1/I3 - 1/I1) Pi_3 e_3)
    # (Landau & Lifshitz, Mechanics, section 33). Checks the sense of rotation, which the
    # conservation and self-convergence tests cannot see.
    moments = np.array([2.0, 2.0, 1.0])
    q0 = random_quaternions(1, seed=14)[0]
    spin = np.array([0.5, -0.3, 1.1])
    bodies = make_bodies(
        np.zeros(3),
        orientation=q0,
        angular_momentum=quat.rotate(q0, spin),
        inverse_inertia=1 / moments,
    )
    dt, steps = 0.01, 1000
    final, _ = run(bodies, no_forces, dt, steps)
    t = dt * steps
    precession = quat.from_rotation_vector(np.asarray(bodies.angular_momentum[0]) * t / moments[0])
    body_spin = quat.about_axis(2, (1 / moments[2] - 1 / moments[0]) * spin[2] * t)
    exact = quat.multiply(precession, quat.multiply(q0, body_spin))
    sign = np.sign(np.dot(final.orientation[0], exact))
    np.testing.assert_allclose(sign * final.orientation[0], exact, atol=TOP_ORIENTATION)
