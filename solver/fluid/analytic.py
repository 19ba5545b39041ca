"""Closed-form solutions of the incompressible Navier-Stokes equations used to check the solver.

Pure NumPy and units-agnostic: every function works in whatever consistent units it is given
(SI or lattice units). Arguments broadcast against each other, so coordinates may be 1-D node
lists or full meshgrids. Velocities are returned component by component.

Conventions:
- Periodic flows (Taylor-Green, Beltrami) live in a box ``[0, length)^d`` with wavenumber
  ``k = 2 pi / length``; pressure is the deviation from the mean pressure.
- Wall-bounded flows have their walls at ``y = 0`` and ``y = height`` (for the duct also at
  ``z = 0`` and ``z = side_b``); the caller places the walls (for half-way bounce-back they sit
  half a cell outside the last fluid node).
- A body force is given as a force density ``F`` (force per volume); the acceleration is F/rho.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "beltrami_abc",
    "couette_profile",
    "couette_transient",
    "duct_mean_velocity",
    "duct_profile",
    "poiseuille_mean_velocity",
    "poiseuille_profile",
    "poiseuille_startup",
    "taylor_green_2d",
    "taylor_green_3d",
    "womersley_profile",
]


# --- periodic decaying flows -------------------------------------------------------------------


def taylor_green_2d(
    x: ArrayLike,
    y: ArrayLike,
    t: ArrayLike,
    u0: float,
    nu: float,
    length: float,
    rho0: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decaying 2D Taylor-Green vortex array, an exact solution of incompressible Navier-Stokes.

    Taylor & Green (1937), Proc. R. Soc. Lond. A 158, 499. With k = 2 pi / length and
    F(t) = exp(-2 nu k^2 t):

        ux =  u0 sin(k x) cos(k y) F(t)
        uy = -u0 cos(k x) sin(k y) F(t)
        p  =  rho0 u0^2 / 4 (cos(2 k x) + cos(2 k y)) F(t)^2

    The field is divergence-free, the nonlinear term is balanced exactly by the pressure
    gradient, and each velocity component is an eigenfunction of the Laplacian (-2 k^2), so the
    flow decays at the rate 2 nu k^2 (kinetic energy at 4 nu k^2).

    Args:
        x, y: coordinates (any broadcastable shape), same length unit as ``length``.
        t: time.
        u0: initial velocity amplitude.
        nu: kinematic viscosity (length^2 / time).
        length: side of the periodic box.
        rho0: density, only scales the pressure.

    Returns:
        (ux, uy, p): arrays of the broadcast shape; p is relative to the mean pressure.
    """
    k = 2.0 * np.pi / length
    x, y, t = np.asarray(x, float), np.asarray(y, float), np.asarray(t, float)
    decay = np.exp(-2.0 * nu * k * k * t)
    ux = u0 * np.sin(k * x) * np.cos(k * y) * decay
    uy = -u0 * np.cos(k * x) * np.sin(k * y) * decay
    p = 0.25 * rho0 * u0 * u0 * (np.cos(2 * k * x) + np.cos(2 * k * y)) * decay * decay
    return ux, uy, p


def taylor_green_brachet(
    x: ArrayLike,
    y: ArrayLike,
    z: ArrayLike,
    u0: float,
    length: float,
    rho0: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Initial field of the classic 3D Taylor-Green vortex (Brachet et al. 1983, J. Fluid Mech.
    130, 411), the turbulence benchmark (no closed form for t > 0). With k = 2 pi / length:

        ux =  u0 sin(k x) cos(k y) cos(k z)
        uy = -u0 cos(k x) sin(k y) cos(k z)
        uz =  0
        p  =  rho0 u0^2 / 16 (cos(2 k x) + cos(2 k y)) (cos(2 k z) + 2)

    Mean kinetic energy u0^2 / 8; initial dissipation rate nu <|grad u|^2> = 3 nu k^2 u0^2 / 4.

    Returns:
        (ux, uy, uz, p) of the broadcast shape of (x, y, z).
    """
    k = 2.0 * np.pi / length
    x, y, z = (np.asarray(a, float) for a in (x, y, z))
    ux = u0 * np.sin(k * x) * np.cos(k * y) * np.cos(k * z)
    uy = -u0 * np.cos(k * x) * np.sin(k * y) * np.cos(k * z)
    shape = np.broadcast_shapes(ux.shape, uy.shape)
    p = rho0 * u0 * u0 / 16.0 * (np.cos(2 * k * x) + np.cos(2 * k * y)) * (np.cos(2 * k * z) + 2)
    return (np.broadcast_to(ux, shape).copy(), np.broadcast_to(uy, shape).copy(),
            np.zeros(shape), np.broadcast_to(p, shape).copy())  # fmt: skip


def taylor_green_brachet_gradient(
    x: ArrayLike, y: ArrayLike, z: ArrayLike, u0: float, length: float
) -> np.ndarray:
    """Velocity gradient (3, 3, *shape), [a, b] = d u_b / d x_a, of ``taylor_green_brachet``."""
    k = 2.0 * np.pi / length
    sx, sy, sz = (np.sin(k * np.asarray(a, float)) for a in (x, y, z))
    cx, cy, cz = (np.cos(k * np.asarray(a, float)) for a in (x, y, z))
    g = u0 * k
    zero = 0.0 * (sx * sy * sz)
    rows = [
        [g * cx * cy * cz, g * sx * sy * cz, zero],  # d/dx of (u, v, w)
        [-g * sx * sy * cz, -g * cx * cy * cz, zero],  # d/dy
        [-g * sx * cy * sz, g * cx * sy * sz, zero],  # d/dz
    ]
    shape = np.broadcast_shapes(*(np.shape(r) for row in rows for r in row))
    return np.stack([np.stack([np.broadcast_to(r, shape) for r in row]) for row in rows])


def taylor_green_3d(
    x: ArrayLike,
    y: ArrayLike,
    z: ArrayLike,
    t: ArrayLike,
    u0: float,
    nu: float,
    length: float,
    rho0: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact 3D Taylor-Green flow: the 2D vortex array in the x-y plane, uniform along z.

    The classic 3D Taylor-Green vortex (u = u0 sin x cos y cos z, v = -u0 cos x sin y cos z,
    w = 0) is *not* an exact solution: it transitions to turbulence and has no closed form. The
    2D field extended uniformly along z is exact in 3D (uz = 0, no z dependence) and is what a
    3D lattice must reproduce to the same accuracy as D2Q9; use :func:`beltrami_abc` for an exact
    flow that exercises all three directions.

    Args:
        x, y, z: coordinates (broadcastable), same length unit as ``length``; z is unused
            except for the output shape.
        t, u0, nu, length, rho0: as in :func:`taylor_green_2d`.

    Returns:
        (ux, uy, uz, p) of the broadcast shape of (x, y, z, t).
    """
    ux, uy, p = taylor_green_2d(x, y, t, u0, nu, length, rho0)
    shape = np.broadcast_shapes(ux.shape, np.shape(z))
    ux, uy, p = (np.broadcast_to(a, shape).copy() for a in (ux, uy, p))
    return ux, uy, np.zeros(shape), p


def beltrami_abc(
    x: ArrayLike,
    y: ArrayLike,
    z: ArrayLike,
    t: ArrayLike,
    u0: float,
    nu: float,
    length: float,
    rho0: float = 1.0,
    coefficients: tuple[float, float, float] = (1.0, 1.0, 1.0),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decaying Arnold-Beltrami-Childress flow, an exact fully 3D Navier-Stokes solution.

    With (A, B, C) = u0 * coefficients, k = 2 pi / length and F(t) = exp(-nu k^2 t):

        ux = (A sin(k z) + C cos(k y)) F
        uy = (B sin(k x) + A cos(k z)) F
        uz = (C sin(k y) + B cos(k x)) F
        p  = -rho0 |u|^2 / 2  (+ its mean, subtracted here)

    The field is a Beltrami field (curl u = k u), so u x curl u = 0 and the nonlinear term
    u . grad u = grad(|u|^2 / 2) is a pure gradient, balanced by the pressure; each component is
    a Laplacian eigenfunction (-k^2). See e.g. Dombre et al. (1986), J. Fluid Mech. 167, 353,
    and Ethier & Steinman (1994), Int. J. Numer. Meth. Fluids 19, 369 for Beltrami solutions.

    Returns:
        (ux, uy, uz, p) of the broadcast shape; p has zero mean over the periodic box.
    """
    k = 2.0 * np.pi / length
    x, y, z, t = (np.asarray(a, float) for a in (x, y, z, t))
    a, b, c = (u0 * s for s in coefficients)
    decay = np.exp(-nu * k * k * t)
    ux = (a * np.sin(k * z) + c * np.cos(k * y)) * decay
    uy = (b * np.sin(k * x) + a * np.cos(k * z)) * decay
    uz = (c * np.sin(k * y) + b * np.cos(k * x)) * decay
    # the box mean of |u|^2 / 2 is (A^2 + B^2 + C^2) / 2 * F^2
    mean_energy = 0.5 * (a * a + b * b + c * c) * decay * decay
    p = -rho0 * (0.5 * (ux * ux + uy * uy + uz * uz) - mean_energy)
    return ux, uy, uz, p


# --- plane channel flows -----------------------------------------------------------------------


def poiseuille_profile(
    y: ArrayLike, height: float, force_density: float, rho: float, nu: float
) -> np.ndarray:
    """Steady plane Poiseuille flow driven by a uniform body force between walls at 0 and height.

        u(y) = F / (2 rho nu) * y (height - y),      so that  nu u'' = -F / rho,  u(0) = u(H) = 0.

    Args:
        y: wall-normal coordinate.
        height: channel height H.
        force_density: body force per volume F along the channel (a pressure gradient -dp/dx
            gives the same flow).
        rho: density.
        nu: kinematic viscosity.

    Returns:
        streamwise velocity, shape of y.
    """
    y = np.asarray(y, float)
    return force_density / (2.0 * rho * nu) * y * (height - y)


def poiseuille_mean_velocity(height: float, force_density: float, rho: float, nu: float) -> float:
    """Mean velocity of :func:`poiseuille_profile`: F H^2 / (12 rho nu) (2/3 of the peak)."""
    return force_density * height * height / (12.0 * rho * nu)


def poiseuille_startup(
    y: ArrayLike,
    t: ArrayLike,
    height: float,
    force_density: float,
    rho: float,
    nu: float,
    terms: int = 200,
) -> np.ndarray:
    """Plane Poiseuille flow started from rest at t = 0 by a constant body force.

    Sine-series solution of u_t = nu u_yy + F/rho with u(0) = u(H) = 0 and u(y, 0) = 0:

        u = u_steady(y) - sum_{n odd} 4 g H^2 / (nu pi^3 n^3) sin(n pi y / H)
                                       exp(-n^2 pi^2 nu t / H^2),      g = F / rho.

    Args:
        y, t: broadcastable coordinates and times (t >= 0).
        terms: number of odd modes kept (the error at t = 0 decays like terms^-2).
    """
    y, t = np.asarray(y, float), np.asarray(t, float)
    g = force_density / rho
    u = poiseuille_profile(y, height, force_density, rho, nu)
    for n in range(1, 2 * terms, 2):
        amplitude = 4.0 * g * height**2 / (nu * np.pi**3 * n**3)
        u = u - amplitude * np.sin(n * np.pi * y / height) * np.exp(
            -((n * np.pi / height) ** 2) * nu * t
        )
    return u


def womersley_profile(
    y: ArrayLike,
    t: ArrayLike,
    height: float,
    amplitude: float,
    angular_frequency: float,
    rho: float,
    nu: float,
    phase: float = 0.0,
    constant: float = 0.0,
) -> np.ndarray:
    """Time-periodic channel flow driven by F(t) = constant + amplitude sin(omega t + phase).

    The periodic (long-time) state of u_t = nu u_yy + F(t)/rho, u(0) = u(H) = 0 (Womersley 1955,
    J. Physiol. 127, 553, here for a plane channel and a body force). With lambda^2 = i omega / nu
    and g = amplitude / rho:

        u = u_steady(y; constant) + Im[ U(y) exp(i (omega t + phase)) ],
        U(y) = g / (i omega) (1 - cosh(lambda (y - H/2)) / cosh(lambda H/2))

    Args:
        y, t: broadcastable coordinates and times.
        height: channel height H.
        amplitude: amplitude of the periodic force density.
        angular_frequency: omega (radians per time unit), > 0.
        rho, nu: density and kinematic viscosity.
        phase: phase of the force in radians.
        constant: steady part of the force density (adds a Poiseuille profile).
    """
    y, t = np.asarray(y, float), np.asarray(t, float)
    lam = np.sqrt(1j * angular_frequency / nu)
    g = amplitude / rho
    half = 0.5 * height
    # cosh ratio written with exponentials of non-positive real part, so large lambda H is safe
    s = y - half
    ratio = (np.exp(lam * (np.abs(s) - half)) + np.exp(-lam * (np.abs(s) + half))) / (
        1.0 + np.exp(-2.0 * lam * half)
    )
    shape = g / (1j * angular_frequency) * (1.0 - ratio)
    u = np.imag(shape * np.exp(1j * (angular_frequency * t + phase)))
    if constant:
        u = u + poiseuille_profile(y, height, constant, rho, nu)
    return u


def couette_profile(y: ArrayLike, height: float, wall_velocity: float) -> np.ndarray:
    """Steady plane Couette flow: wall at y=0 at rest, wall at y=height moving at wall_velocity.

    u(y) = U y / H
    """
    return wall_velocity * np.asarray(y, float) / height


def couette_transient(
    y: ArrayLike,
    t: ArrayLike,
    height: float,
    wall_velocity: float,
    nu: float,
    terms: int = 200,
) -> np.ndarray:
    """Couette flow started from rest: the wall at y=height starts moving at U at t = 0.

        u = U y / H + (2 U / pi) sum_{n>=1} (-1)^n / n sin(n pi y / H) exp(-n^2 pi^2 nu t / H^2)

    (the series cancels U y / H at t = 0, since y/H = (2/pi) sum (-1)^(n+1) sin(n pi y/H) / n).
    """
    y, t = np.asarray(y, float), np.asarray(t, float)
    u = couette_profile(y, height, wall_velocity)
    for n in range(1, terms + 1):
        u = u + (2.0 * wall_velocity / np.pi) * (-1.0) ** n / n * np.sin(
            n * np.pi * y / height
        ) * np.exp(-((n * np.pi / height) ** 2) * nu * t)
    return u


# --- rectangular duct --------------------------------------------------------------------------


def duct_profile(
    y: ArrayLike,
    z: ArrayLike,
    side_a: float,
    side_b: float,
    force_density: float,
    rho: float,
    nu: float,
    terms: int = 50,
) -> np.ndarray:
    """Fully developed flow in a rectangular duct driven by a uniform body force (series solution).

    White, Viscous Fluid Flow (3rd ed., 2006), Eq. (3-48): for a duct -a <= y' <= a, -b <= z' <= b
    and a driving force density F (= -dp/dx), mu = rho nu,

        u = 16 a^2 F / (mu pi^3) sum_{i = 1, 3, 5, ...} (-1)^((i-1)/2)
                [1 - cosh(i pi z' / 2a) / cosh(i pi b / 2a)] cos(i pi y' / 2a) / i^3

    Here the walls are at y = 0, side_a and z = 0, side_b (a = side_a/2, b = side_b/2,
    y' = y - a, z' = z - b). As side_b / side_a -> infinity the profile tends to the plane
    Poiseuille profile across y. The series converges like terms^-3 (fast).

    Args:
        y, z: cross-section coordinates (broadcastable).
        side_a, side_b: duct side lengths along y and z.
        force_density: body force per volume along the duct axis.
        rho, nu: density and kinematic viscosity.
        terms: number of odd terms kept.

    Returns:
        axial velocity of the broadcast shape of (y, z).
    """
    a, b = 0.5 * side_a, 0.5 * side_b
    yp = np.asarray(y, float) - a
    zp = np.abs(np.asarray(z, float) - b)
    mu = rho * nu
    total = np.zeros(np.broadcast_shapes(yp.shape, zp.shape))
    for i in range(1, 2 * terms, 2):
        m = i * np.pi / (2.0 * a)
        # cosh(m z') / cosh(m b) without overflow, using z' <= b
        ratio = (np.exp(m * (zp - b)) + np.exp(-m * (zp + b))) / (1.0 + np.exp(-2.0 * m * b))
        total = total + (-1.0) ** ((i - 1) // 2) * (1.0 - ratio) * np.cos(m * yp) / i**3
    return 16.0 * a * a * force_density / (mu * np.pi**3) * total


def duct_mean_velocity(
    side_a: float, side_b: float, force_density: float, rho: float, nu: float, terms: int = 50
) -> float:
    """Mean velocity of :func:`duct_profile` (White 2006, Eq. 3-49 divided by the area 4ab):

    u_mean = a^2 F / (3 mu) [1 - 192 a / (pi^5 b) sum_{i odd} tanh(i pi b / 2a) / i^5]
    """
    a, b = 0.5 * side_a, 0.5 * side_b
    mu = rho * nu
    series = sum(np.tanh(i * np.pi * b / (2.0 * a)) / i**5 for i in range(1, 2 * terms, 2))
    return float(a * a * force_density / (3.0 * mu) * (1.0 - 192.0 * a / (np.pi**5 * b) * series))
