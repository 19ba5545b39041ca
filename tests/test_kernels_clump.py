"""Clump mass properties and member kinematics against hand-computed and analytic values.

float64 throughout (tests/conftest.py enables x64). Measured figures are from CPU, NumPy/JAX
float64.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import clump
from kernels import quaternion as quat

# Closed-form sums of O(1) numbers: a few ulps per operation.
ROUNDOFF = 1e-12
# Two equal spheres R = 1 at d = R, resolution 64: union volume error measured 1.4e-5 relative
# (7.6e-5 of the lens volume); 3x the measured figure.
OVERLAP_VOLUME_RELATIVE = 5e-5
# Same clump: inertia against a 2e6-point quadrature of the solid of revolution, measured 2.4e-5
# (I_xx) and 7.0e-6 (I_yy); about 3x the larger.
OVERLAP_INERTIA_RELATIVE = 8e-5
# Central difference of member positions under a rotation by omega dt, dt = 1e-5: O(dt^2) ~ 1e-10
# truncation plus round-off 1e-16/1e-5; measured below 1e-10.
FINITE_DIFFERENCE = 1e-8

DENSITY = 2500.0  # kg/m^3


def sphere_mass(r):
    return 4.0 / 3.0 * np.pi * r**3 * DENSITY


def test_single_sphere_is_exact():
    r, c = 0.3, np.array([0.1, -0.2, 0.5])
    mass, centre, inertia = clump.clump_mass_properties([r], [c], DENSITY)
    m = sphere_mass(r)
    np.testing.assert_allclose(mass, m, rtol=ROUNDOFF)
    np.testing.assert_allclose(centre, c, rtol=ROUNDOFF)
    np.testing.assert_allclose(inertia, 0.4 * m * r**2 * np.eye(3), rtol=ROUNDOFF, atol=ROUNDOFF)
    mass, moments, _, offsets = clump.to_principal([r], [c], DENSITY)
    np.testing.assert_allclose(moments, 0.4 * m * r**2, rtol=ROUNDOFF)
    np.testing.assert_allclose(offsets, 0.0, atol=ROUNDOFF)


@pytest.mark.parametrize("gap", [0.1, 0.0], ids=["apart", "touching"])
def test_dumbbell_parallel_axis_and_principal_axes(gap):
    radii = np.array([0.2, 0.3])
    axis = np.array([1.0, 2.0, -0.5]) / np.linalg.norm([1.0, 2.0, -0.5])
    length = radii.sum() + gap
    offsets = np.array([[0.1, 0.0, 0.2], [0.1, 0.0, 0.2] + length * axis])
    mass, centre, inertia = clump.clump_mass_properties(radii, offsets, DENSITY)
    m = sphere_mass(radii)
    com = (m @ offsets) / m.sum()
    expected = sum(
        0.4 * mk * rk**2 * np.eye(3) + mk * (d @ d * np.eye(3) - np.outer(d, d))
        for mk, rk, d in zip(m, radii, offsets - com, strict=True)
    )
    np.testing.assert_allclose(mass, m.sum(), rtol=ROUNDOFF)
    np.testing.assert_allclose(centre, com, rtol=ROUNDOFF)
    np.testing.assert_allclose(inertia, expected, rtol=ROUNDOFF, atol=ROUNDOFF * expected.max())

    _, moments, rotation, principal = clump.to_principal(radii, offsets, DENSITY)
    along = np.sum(0.4 * m * radii**2)
    across = along + m[0] * m[1] / m.sum() * length**2
    np.testing.assert_allclose(moments, [along, across, across], rtol=ROUNDOFF)
    R = np.asarray(quat.to_matrix(rotation))
    assert abs(abs(R[:, 0] @ axis) - 1.0) < ROUNDOFF, "smallest moment not along the dumbbell"
    np.testing.assert_allclose(R @ np.diag(moments) @ R.T, inertia, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(principal[:, 1:], 0.0, atol=ROUNDOFF)
    np.testing.assert_allclose(abs(principal[1, 0] - principal[0, 0]), length, rtol=ROUNDOFF)


def solid_of_revolution(d, R=1.0, n=2_000_001):
    """Volume, I_xx, I_yy (about the midpoint) of two spheres R at x = -+d/2, unit density."""
    x = np.linspace(-d / 2 - R, d / 2 + R, n)
    rho2 = np.maximum(np.maximum(R**2 - (x + d / 2) ** 2, R**2 - (x - d / 2) ** 2), 0.0)
    volume = np.trapezoid(np.pi * rho2, x)
    ixx = np.trapezoid(np.pi / 2 * rho2**2, x)
    iyy = np.trapezoid(np.pi / 4 * rho2**2 + np.pi * rho2 * x**2, x)
    return volume, ixx, iyy


def test_overlapping_equal_spheres_against_lens_volume():
    R, d = 1.0, 1.0
    offsets = [[-d / 2, 0.0, 0.0], [d / 2, 0.0, 0.0]]
    mass, centre, inertia = clump.clump_mass_properties([R, R], offsets, 1.0, resolution=64)
    lens = np.pi * (4 * R + d) * (2 * R - d) ** 2 / 12
    union = 2 * 4 / 3 * np.pi * R**3 - lens
    assert abs(mass - union) / union < OVERLAP_VOLUME_RELATIVE, (mass, union)
    volume, ixx, iyy = solid_of_revolution(d)
    assert abs(volume - union) / union < 1e-10  # the reference quadrature itself
    np.testing.assert_allclose(np.diag(inertia), [ixx, iyy, iyy], rtol=OVERLAP_INERTIA_RELATIVE)
    # Symmetry of the grid about the midpoint and about the axis.
    np.testing.assert_allclose(centre, 0.0, atol=ROUNDOFF)
    assert abs(inertia[1, 1] - inertia[2, 2]) < ROUNDOFF
    np.testing.assert_allclose(inertia - np.diag(np.diag(inertia)), 0.0, atol=ROUNDOFF)
    # Finer grid is closer (second order, measured 1.4e-5 -> 4.9e-7).
    finer, _, _ = clump.clump_mass_properties([R, R], offsets, 1.0, resolution=128)
    assert abs(finer - union) < 0.25 * abs(mass - union)


def test_overlap_vanishing_is_continuous():
    R = 1.0
    d = 2 * R - 1e-4
    mass, _, inertia = clump.clump_mass_properties([R, R], [[0, 0, 0], [d, 0, 0]], 1.0)
    _, _, touching = clump.clump_mass_properties([R, R], [[0, 0, 0], [2 * R, 0, 0]], 1.0)
    lens = np.pi * (4 * R + d) * (2 * R - d) ** 2 / 12
    spheres = 2 * 4 / 3 * np.pi * R**3
    # A tiny overlap removes at most about the tiny lens (1.6e-8; measured 0: the lens, 0.01 wide,
    # falls between grid lines h = 0.03 apart), never a grid-sized error.
    assert 0 <= spheres - mass < 2 * lens, (spheres - mass, lens)
    np.testing.assert_allclose(inertia, touching, rtol=1e-4, atol=1e-12)


def test_to_principal_round_trip():
    radii = np.array([0.3, 0.2, 0.25])
    offsets = np.array([[0.0, 0.0, 0.0], [0.4, 0.1, 0.0], [-0.1, 0.35, 0.3]])
    mass, moments, rotation, principal = clump.to_principal(radii, offsets, DENSITY)
    _, centre, inertia = clump.clump_mass_properties(radii, offsets, DENSITY)
    assert np.all(np.diff(moments) >= 0)
    R = np.asarray(quat.to_matrix(rotation))
    np.testing.assert_allclose(R @ np.diag(moments) @ R.T, inertia, rtol=1e-10, atol=1e-14)
    # Placing the body at the centre with the principal rotation restores the input offsets.
    back = clump.member_positions(centre[None], rotation[None], principal[None])
    np.testing.assert_allclose(back[0], offsets, atol=ROUNDOFF)


def test_member_positions_and_velocities_hand_computed():
    q = quat.about_axis(2, np.pi / 2)[None]  # 90 degrees about z: x -> y, y -> -x
    position = jnp.array([[1.0, 2.0, 3.0]])
    offsets = jnp.array([[[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [9.0, 9.0, 9.0]]])
    mask = jnp.array([[True, True, False]])
    x = clump.member_positions(position, q, offsets, mask)
    np.testing.assert_allclose(x[0, :2], [[1.0, 3.0, 3.0], [0.5, 2.0, 3.0]], atol=ROUNDOFF)
    np.testing.assert_allclose(x[0, 2], position[0], atol=ROUNDOFF)  # padding at the centre
    v = clump.member_velocities(jnp.array([[0.1, 0.0, 0.0]]), jnp.array([[0, 0, 2.0]]), q, offsets)
    # omega x (R c): (0,0,2) x (0,1,0) = (-2,0,0); (0,0,2) x (-0.5,0,0) = (0,-1,0)
    np.testing.assert_allclose(v[0, :2], [[-1.9, 0.0, 0.0], [0.1, -1.0, 0.0]], atol=ROUNDOFF)


def test_velocity_field_matches_finite_difference_of_rotation():
    rng = np.random.default_rng(3)
    n, m, dt = 4, 3, 1e-5
    position = jnp.asarray(rng.normal(size=(n, 3)))
    q = quat.normalize(jnp.asarray(rng.normal(size=(n, 4))))
    offsets = jnp.asarray(rng.normal(size=(n, m, 3)))
    omega = jnp.asarray(rng.normal(size=(n, 3)))
    velocity = jnp.asarray(rng.normal(size=(n, 3)))

    def at(t):
        turned = quat.multiply(quat.from_rotation_vector(omega * t), q)
        return clump.member_positions(position + velocity * t, turned, offsets)

    difference = (at(dt) - at(-dt)) / (2 * dt)
    v = jax.jit(clump.member_velocities)(velocity, omega, q, offsets)
    np.testing.assert_allclose(v, difference, atol=FINITE_DIFFERENCE)


def test_single_member_at_centre():
    q = quat.normalize(jnp.array([[0.3, -0.2, 0.9, 0.1]]))
    x = clump.member_positions(jnp.array([[1.0, 2.0, 3.0]]), q, jnp.zeros((1, 1, 3)))
    v = clump.member_velocities(jnp.ones((1, 3)), jnp.array([[1.0, 5, 2]]), q, jnp.zeros((1, 1, 3)))
    np.testing.assert_allclose(x, [[[1.0, 2.0, 3.0]]], atol=ROUNDOFF)
    np.testing.assert_allclose(v, np.ones((1, 1, 3)), atol=ROUNDOFF)


def test_gather_couple_and_mask():
    centre = jnp.array([[0.0, 0.0, 0.0]])
    x = jnp.array([[[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [5.0, 5.0, 5.0]]])
    f = jnp.array([[[0.0, 2.0, 0.0], [0.0, -2.0, 0.0], [jnp.nan, 1e9, 1.0]]])
    tau = jnp.array([[[0.0, 0.0, 0.5], [0.0, 0.0, 0.0], [jnp.nan, 0.0, 0.0]]])
    mask = jnp.array([[True, True, False]])
    force, torque = jax.jit(clump.gather_member_forces)(f, x, centre, tau, mask)
    np.testing.assert_allclose(force, [[0.0, 0.0, 0.0]], atol=ROUNDOFF)
    # Couple: (x1 - x2) x F = (2,0,0) x (0,2,0) = (0,0,4), plus the member torque 0.5.
    np.testing.assert_allclose(torque, [[0.0, 0.0, 4.5]], atol=ROUNDOFF)
    unmasked, _ = clump.gather_member_forces(f, x, centre)
    assert not np.all(np.isfinite(unmasked)), "the padded member must matter without the mask"


@pytest.mark.parametrize(
    "radii, offsets, density",
    [([0.0], [[0, 0, 0]], 1.0), ([1.0], [[0, 0, 0]], -1.0), ([1.0, 1.0], [[0, 0, 0]], 1.0)],
    ids=["zero-radius", "negative-density", "shape-mismatch"],
)
def test_bad_geometry_raises(radii, offsets, density):
    with pytest.raises(ValueError):
        clump.clump_mass_properties(radii, offsets, density)
