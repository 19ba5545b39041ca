"""Assimilation kernels: the EnKF analysis against the exact Kalman filter, localisation,
inflation, Gaspari-Cohn; nudging's observation operator and population update."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import enkf, nudging
from kernels.equilibrium import density_velocity, equilibrium
from kernels.lattices import LATTICES

jax.config.update("jax_enable_x64", True)

# Monte Carlo error of a mean with E = 40000 members is ~ std / 200; of a variance ~ 0.7%
MEAN_TOLERANCE = 0.02  # in prior standard deviations
COVARIANCE_TOLERANCE = 0.05  # relative


def test_enkf_matches_the_kalman_filter_for_a_large_ensemble():
    rng = np.random.default_rng(0)
    mean = np.array([1.0, -0.5, 2.0])
    root = rng.normal(size=(3, 3))
    prior = root @ root.T + 0.5 * np.eye(3)
    h = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    sigma = np.array([0.3, 0.8])
    y = np.array([1.7, 1.1])
    members = 40000
    states = rng.multivariate_normal(mean, prior, size=members)
    noise = rng.normal(size=(members, 2))
    out = np.asarray(
        enkf.analysis(
            jnp.asarray(states),
            jnp.asarray(states @ h.T),
            jnp.asarray(y),
            jnp.asarray(sigma),
            jnp.asarray(noise),
        )  # fmt: skip
    )
    gain = prior @ h.T @ np.linalg.inv(h @ prior @ h.T + np.diag(sigma**2))
    exact_mean = mean + gain @ (y - h @ mean)
    exact_cov = (np.eye(3) - gain @ h) @ prior
    std = np.sqrt(np.diag(prior))
    assert np.all(np.abs(out.mean(0) - exact_mean) / std < MEAN_TOLERANCE)
    cov = np.cov(out.T)
    assert np.max(np.abs(cov - exact_cov)) / np.max(np.abs(exact_cov)) < COVARIANCE_TOLERANCE
    # the analysis shrinks the spread of the observed components
    assert cov[0, 0] < prior[0, 0] and cov[2, 2] < prior[2, 2]


def test_localisation_zero_leaves_that_state_unchanged():
    rng = np.random.default_rng(1)
    states = rng.normal(size=(32, 4))
    predicted = states[:, :1] + 0.1 * rng.normal(size=(32, 1))
    loc = jnp.asarray([[1.0], [0.5], [0.0], [1.0]])
    out = enkf.analysis(jnp.asarray(states), jnp.asarray(predicted), jnp.asarray([0.3]),
                        jnp.asarray([0.1]), jnp.asarray(rng.normal(size=(32, 1))),
                        state_localisation=loc)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(out)[:, 2], states[:, 2])
    assert not np.allclose(np.asarray(out)[:, 0], states[:, 0])


def test_inflation_scales_anomalies_and_keeps_the_mean():
    states = jnp.asarray(np.random.default_rng(2).normal(size=(10, 5)))
    out = enkf.inflate(states, 1.5)
    np.testing.assert_allclose(out.mean(0), states.mean(0), atol=1e-14)
    np.testing.assert_allclose(out - out.mean(0), 1.5 * (states - states.mean(0)), atol=1e-14)


def test_gaspari_cohn_shape():
    r = jnp.linspace(0.0, 3.0, 3001)
    w = np.asarray(enkf.gaspari_cohn(r, 1.0))
    assert w[0] == pytest.approx(1.0) and np.all(w[r >= 2.0] == 0.0)
    assert np.all(np.diff(w) <= 1e-15)  # non-increasing
    near = float(enkf.gaspari_cohn(jnp.asarray(1.0 - 1e-9), 1.0))
    far = float(enkf.gaspari_cohn(jnp.asarray(1.0 + 1e-9), 1.0))
    assert near == pytest.approx(far, abs=1e-8)  # continuous where the branches meet


def test_probe_sampling_is_exact_for_linear_fields():
    shape = (7, 5)
    x, y = np.meshgrid(np.arange(7.0), np.arange(5.0), indexing="ij")
    velocity = jnp.asarray(np.stack([0.1 * x - 0.2 * y + 0.3, 0.05 * x * 0 + 0.4 * y]))
    probes = np.array([[0.0, 0.0], [2.25, 3.5], [6.0, 4.0], [5.9, 0.1]])
    got = np.asarray(nudging.sample(velocity, nudging.probe_stencils(probes, shape)))
    expected = np.stack([0.1 * probes[:, 0] - 0.2 * probes[:, 1] + 0.3, 0.4 * probes[:, 1]], 1)
    np.testing.assert_allclose(got, expected, atol=1e-14)
    with pytest.raises(ValueError, match="probe positions"):
        nudging.probe_stencils(np.array([[7.5, 1.0]]), shape)


def test_nudging_moves_the_probe_velocity_to_the_observation():
    lattice = LATTICES["D2Q9"]
    shape = (24, 20)
    rng = np.random.default_rng(3)
    rho = 1.0 + 0.01 * rng.normal(size=shape)
    u = 0.02 * rng.normal(size=(2, *shape))
    f = jnp.stack(equilibrium(lattice, jnp.asarray(rho), jnp.asarray(u)))
    probes = np.array([[8.3, 9.6], [16.0, 5.2]])
    stencils = nudging.probe_stencils(probes, shape)
    weights = jnp.asarray(nudging.spreading_weights(probes, shape, radius=3.0))
    target = jnp.asarray([[0.05, -0.01], [-0.03, 0.02]])
    mask = jnp.ones(shape, bool).at[0].set(False)
    errors = []
    for _ in range(30):
        _, vel = density_velocity(lattice, f)
        vel = jnp.stack(vel)
        innovation = target - nudging.sample(vel, stencils)
        errors.append(float(jnp.max(jnp.abs(innovation))))
        du = nudging.velocity_correction(weights, innovation, gain=0.5)
        rho_before = jnp.sum(f, axis=0)
        f_new = nudging.nudge_populations(lattice, f, du, mask)
        # density unchanged, momentum changed by exactly rho du on the masked nodes
        np.testing.assert_allclose(jnp.sum(f_new, axis=0), rho_before, rtol=1e-13)
        mom = jnp.stack([jnp.sum(jnp.asarray(lattice.c[:, a])[:, None, None] * (f_new - f), 0)
                         for a in range(2)])  # fmt: skip
        np.testing.assert_allclose(mom, rho_before * jnp.where(mask, du, 0.0), atol=1e-13)
        f = f_new
    assert errors[-1] < 1e-3 * errors[0]
    w = nudging.spreading_weights(probes, shape, radius=3.0)
    assert w.max() <= 1.0 and np.all(w[0][np.hypot(*(np.indices(shape) - probes[0][:, None, None]
                                                     )) >= 3.0] == 0)  # fmt: skip
