"""Checks that the closed-form solutions in solver.fluid.analytic satisfy their equations."""

from __future__ import annotations

import numpy as np
import pytest

from solver.fluid import analytic

# Finite-difference checks use a fine grid; their truncation error sets these tolerances.
FD_RTOL = 1e-3  # central differences in y and t at h = H/800, dt = 1e-4: error ~ h^2
SERIES_RTOL = 1e-6  # truncated series vs closed form (200 terms, error ~ terms^-3)


def _grad(f: np.ndarray, h: float, axis: int) -> np.ndarray:
    """Periodic central difference."""
    return (np.roll(f, -1, axis) - np.roll(f, 1, axis)) / (2 * h)


def _lap(f: np.ndarray, h: float) -> np.ndarray:
    return sum((np.roll(f, -1, a) - 2 * f + np.roll(f, 1, a)) / h**2 for a in range(f.ndim))


def test_poiseuille_satisfies_ode_and_walls() -> None:
    height, force, rho, nu = 2.0, 0.3, 1.2, 0.05
    y = np.linspace(0.0, height, 2001)
    h = y[1] - y[0]
    u = analytic.poiseuille_profile(y, height, force, rho, nu)
    upp = (u[2:] - 2 * u[1:-1] + u[:-2]) / h**2
    np.testing.assert_allclose(nu * upp, -force / rho, rtol=1e-9)
    assert u[0] == 0.0 and abs(u[-1]) < 1e-15
    mean = np.trapezoid(u, y) / height
    assert mean == pytest.approx(analytic.poiseuille_mean_velocity(height, force, rho, nu))


def test_poiseuille_startup_tends_to_steady_and_starts_at_rest() -> None:
    height, force, rho, nu = 1.0, 1.0, 1.0, 0.1
    y = np.linspace(0.0, height, 101)
    u0 = analytic.poiseuille_startup(y, 0.0, height, force, rho, nu, terms=400)
    assert np.abs(u0).max() < 1e-6 * analytic.poiseuille_profile(0.5, height, force, rho, nu)
    late = analytic.poiseuille_startup(y, 50.0, height, force, rho, nu)
    steady = analytic.poiseuille_profile(y, height, force, rho, nu)
    np.testing.assert_allclose(late, steady, atol=1e-12 * steady.max())


def test_womersley_satisfies_pde() -> None:
    height, amp, omega, rho, nu, phase = 1.0, 0.7, 3.0, 1.0, 0.05, 0.4
    y = np.linspace(0.0, height, 801)[:, None]
    t = np.array([0.3, 0.3 + 1e-4, 0.3 - 1e-4])[None, :]
    u = analytic.womersley_profile(y, t, height, amp, omega, rho, nu, phase, constant=0.2)
    h = float(y[1, 0] - y[0, 0])
    ut = (u[1:-1, 1] - u[1:-1, 2]) / 2e-4
    uyy = (u[2:, 0] - 2 * u[1:-1, 0] + u[:-2, 0]) / h**2
    force = 0.2 + amp * np.sin(omega * 0.3 + phase)
    residual = ut - nu * uyy - force / rho
    assert np.abs(residual).max() < FD_RTOL * abs(force)
    np.testing.assert_allclose(u[[0, -1], 0], 0.0, atol=1e-12)


def test_couette_transient() -> None:
    height, wall, nu = 1.0, 0.1, 0.2
    y = np.linspace(0.0, height, 51)
    start = analytic.couette_transient(y[1:-1], 0.0, height, wall, nu, terms=20000)
    assert np.abs(start).max() < 1e-3 * wall  # Gibbs-free interior converges slowly at t = 0
    late = analytic.couette_transient(y, 100.0, height, wall, nu)
    np.testing.assert_allclose(late, analytic.couette_profile(y, height, wall), atol=1e-14)


def test_duct_tends_to_channel_for_high_aspect_ratio() -> None:
    side_a, side_b, force, rho, nu = 1.0, 40.0, 1.0, 1.0, 0.1
    y = np.linspace(0.0, side_a, 41)
    u = analytic.duct_profile(y, 0.5 * side_b, side_a, side_b, force, rho, nu, terms=200)
    channel = analytic.poiseuille_profile(y, side_a, force, rho, nu)
    np.testing.assert_allclose(u, channel, atol=SERIES_RTOL * channel.max())


def _poisson_dirichlet(rhs: np.ndarray, h: float) -> np.ndarray:
    """Solve (u_yy + u_zz) = rhs, u = 0 on the boundary, 5-point stencil, by sine transforms.

    rhs: (ny, nz) values on the interior nodes of a grid with spacing h in both directions.
    """
    transforms, eigenvalues = [], []
    for n in rhs.shape:
        j = np.arange(1, n + 1)
        transforms.append(np.sin(np.pi * np.outer(j, j) / (n + 1)) * np.sqrt(2.0 / (n + 1)))
        eigenvalues.append(-(2.0 - 2.0 * np.cos(np.pi * j / (n + 1))) / h**2)
    sy, sz = transforms
    spectrum = sy @ rhs @ sz
    spectrum /= eigenvalues[0][:, None] + eigenvalues[1][None, :]
    return sy @ spectrum @ sz


def test_duct_matches_finite_difference_poisson_and_mean() -> None:
    side_a, side_b, force, rho, nu = 1.0, 2.0, 0.5, 1.3, 0.04
    n = 200  # cells across side_a; the 5-point stencil error is ~ (pi h)^2 / 12 ~ 2e-5
    h = side_a / n
    y = (np.arange(1, n) * h)[:, None]
    z = (np.arange(1, 2 * n) * h)[None, :]
    u = analytic.duct_profile(y, z, side_a, side_b, force, rho, nu, terms=200)
    numeric = _poisson_dirichlet(np.full((n - 1, 2 * n - 1), -force / (rho * nu)), h)
    np.testing.assert_allclose(u, numeric, atol=1e-4 * numeric.max())
    walls = analytic.duct_profile(
        np.array([0.0, side_a])[:, None], z, side_a, side_b, force, rho, nu
    )
    np.testing.assert_allclose(walls, 0.0, atol=1e-12)
    fine = 1000
    yy = np.linspace(0.0, side_a, fine + 1)[:, None]
    zz = np.linspace(0.0, side_b, 2 * fine + 1)[None, :]
    field = analytic.duct_profile(yy, zz, side_a, side_b, force, rho, nu, terms=200)
    mean = np.trapezoid(np.trapezoid(field, zz[0], axis=1), yy[:, 0]) / (side_a * side_b)
    expected = analytic.duct_mean_velocity(side_a, side_b, force, rho, nu, terms=200)
    assert mean == pytest.approx(expected, rel=1e-5)
    # square duct of side s: u_mean = 0.0351443 s^2 F / mu (White 2006, Table 3.4,
    # Darcy f Re = 56.91 on the hydraulic diameter s, so u_mean = 2 s^2 F / (mu f Re))
    square = analytic.duct_mean_velocity(1.0, 1.0, 1.0, 1.0, 1.0, terms=200)
    assert square == pytest.approx(2.0 / 56.91, rel=1e-4)


def test_taylor_green_2d_divergence_free_and_momentum() -> None:
    length, u0, nu, rho0, n = 2.0, 0.3, 0.01, 1.1, 256
    h = length / n
    coords = (np.arange(n) + 0.5) * h
    x, y = np.meshgrid(coords, coords, indexing="ij")
    t, dt = 1.5, 1e-4
    ux, uy, p = analytic.taylor_green_2d(x, y, t, u0, nu, length, rho0)
    div = _grad(ux, h, 0) + _grad(uy, h, 1)
    assert np.abs(div).max() < 1e-10
    ux1, uy1, _ = analytic.taylor_green_2d(x, y, t + dt, u0, nu, length, rho0)
    ux0, uy0, _ = analytic.taylor_green_2d(x, y, t - dt, u0, nu, length, rho0)
    for u, u_next, u_prev, axis in ((ux, ux1, ux0, 0), (uy, uy1, uy0, 1)):
        dudt = (u_next - u_prev) / (2 * dt)
        advect = ux * _grad(u, h, 0) + uy * _grad(u, h, 1)
        residual = dudt + advect + _grad(p, h, axis) / rho0 - nu * _lap(u, h)
        assert np.abs(residual).max() < 1e-3 * u0**2 * 2 * np.pi / length


@pytest.mark.parametrize("flow", [analytic.taylor_green_3d, analytic.beltrami_abc])
def test_3d_flows_solve_navier_stokes(flow) -> None:
    length, u0, nu, rho0, n = 1.0, 0.2, 0.02, 1.0, 64
    h = length / n
    coords = (np.arange(n) + 0.5) * h
    x, y, z = np.meshgrid(coords, coords, coords, indexing="ij")
    t, dt = 0.7, 1e-4
    *u, p = flow(x, y, z, t, u0, nu, length, rho0)
    *u1, _ = flow(x, y, z, t + dt, u0, nu, length, rho0)
    *u0_, _ = flow(x, y, z, t - dt, u0, nu, length, rho0)
    div = sum(_grad(u[a], h, a) for a in range(3))
    assert np.abs(div).max() < 1e-10
    assert abs(p.mean()) < 1e-12
    # spectral-accuracy is not needed: the central-difference error at 64 points is ~1e-3
    scale = u0**2 * 2 * np.pi / length
    for a in range(3):
        dudt = (u1[a] - u0_[a]) / (2 * dt)
        advect = sum(u[b] * _grad(u[a], h, b) for b in range(3))
        residual = dudt + advect + _grad(p, h, a) / rho0 - nu * _lap(u[a], h)
        assert np.abs(residual).max() < 5e-3 * scale
