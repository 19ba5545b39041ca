"""The Smagorinsky subgrid model (kernels.collision.smagorinsky_omega) and the LES collisions."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from kernels import collision
from kernels.equilibrium import equilibrium
from kernels.lattices import CS2, LATTICES
from solver.fluid import collide

# float64: the closed form and the moment sums agree to round-off
EXACT = 1e-12
OMEGA0 = 1.9  # tau0 = 0.526: a nearly inviscid fluid, where the model matters
SMAGORINSKY = 0.17


def _with_flux(lattice, rho, u, flux):
    """Populations feq(rho, u) + w_i/(2 c_s^4) (c_ia c_ib - c_s^2 d_ab) Q_ab: their
    non-equilibrium second moment is Q (symmetric, traceless; 4th-order isotropy)."""
    feq = equilibrium(lattice, rho, u)
    c, w = lattice.c, lattice.w
    out = []
    for i in range(lattice.q):
        h = np.einsum("a,b->ab", c[i], c[i]) - CS2 * np.eye(lattice.d)
        out.append(feq[i] + w[i] / (2 * CS2**2) * jnp.einsum("ab,ab...->...", h, flux))
    return out, feq


def _random_flux(d, shape, rng):
    """Symmetric traceless (d, d, *shape) momentum fluxes of order 1e-3."""
    a = 1e-3 * rng.standard_normal((d, d, *shape))
    sym = 0.5 * (a + np.swapaxes(a, 0, 1))
    trace = np.trace(sym)
    return jnp.asarray(sym - np.einsum("ab,...->ab...", np.eye(d), trace / d))


@pytest.mark.parametrize("name", ["D2Q9", "D3Q19", "D3Q27"])
def test_smagorinsky_rate_solves_its_closure(name):
    """nu_t = c_s^2 (tau - tau0) equals (C_s)^2 |S| with S = -Q / (2 rho c_s^2 tau) of the same
    tau: the closed form is the root of the model's quadratic, cell by cell."""
    lattice = LATTICES[name]
    rng = np.random.default_rng(1)
    shape = (3,) * lattice.d
    rho = jnp.asarray(1.0 + 0.05 * rng.standard_normal(shape))
    u = [jnp.asarray(0.05 * rng.standard_normal(shape)) for _ in range(lattice.d)]
    flux = _random_flux(lattice.d, shape, rng)
    f, feq = _with_flux(lattice, rho, u, flux)
    omega = np.asarray(collision.smagorinsky_omega(lattice, f, feq, rho, u, None, OMEGA0,
                                                   SMAGORINSKY))  # fmt: skip
    tau, tau0 = 1.0 / omega, 1.0 / OMEGA0
    assert np.all(tau > tau0)
    strain = -np.asarray(flux) / (2 * np.asarray(rho) * CS2 * tau)
    magnitude = np.sqrt(2 * np.sum(strain * strain, axis=(0, 1)))
    np.testing.assert_allclose(CS2 * (tau - tau0), SMAGORINSKY**2 * magnitude, rtol=EXACT)


def test_smagorinsky_rate_is_the_same_for_a_rotated_shear():
    """A shear in the x-y plane, the same in x-z and y-z, and a random rotation of it (D3Q27):
    one eddy viscosity (|Q| is invariant, and the lattice's moments are exact)."""
    lattice = LATTICES["D3Q27"]
    rho, u = jnp.ones((1,)), [jnp.zeros((1,))] * 3
    base = np.zeros((3, 3))
    base[0, 1] = base[1, 0] = 2e-3
    q, _ = np.linalg.qr(np.random.default_rng(4).standard_normal((3, 3)))
    tensors = [base, base[[0, 2, 1]][:, [0, 2, 1]], base[[2, 0, 1]][:, [2, 0, 1]], q @ base @ q.T]
    rates = []
    for tensor in tensors:
        f, feq = _with_flux(lattice, rho, u, jnp.asarray(tensor)[..., None])
        rates.append(float(collision.smagorinsky_omega(lattice, f, feq, rho, u, None, OMEGA0,
                                                       SMAGORINSKY)[0]))  # fmt: skip
    np.testing.assert_allclose(rates, rates[0], rtol=EXACT)
    assert rates[0] < OMEGA0


@pytest.mark.parametrize("name", ["bgk", "trt"])
@pytest.mark.parametrize("lattice_name", ["D2Q9", "D3Q19"])
def test_les_collisions_leave_uniform_flow_alone(name, lattice_name):
    """With the model on, a strained cell relaxes at its own rate (not the plain one), and a
    cell at equilibrium (no strain) keeps the molecular rate, so it is left exactly as plain
    BGK/TRT leaves it (conservation: tests/test_fluid_parts.py)."""
    lattice = LATTICES[lattice_name]
    shape = (4,) * lattice.d
    rng = np.random.default_rng(3)
    f = [jnp.asarray(lattice.w[i] * (1.0 + 0.1 * rng.standard_normal(shape)))
         for i in range(lattice.q)]  # fmt: skip
    les = collide.CollisionParams(lattice, OMEGA0, 3.0 / 16.0, np.dtype("float64"), SMAGORINSKY)
    plain = collide.CollisionParams(lattice, OMEGA0, 3.0 / 16.0, np.dtype("float64"))
    rho, u = collide.moments(lattice, f, None, les.dtype)
    post = collide.OPERATORS[name](f, rho, u, None, les)
    assert not np.allclose(np.asarray(post[0]), np.asarray(
        collide.OPERATORS[name](f, rho, u, None, plain)[0]), rtol=1e-9)  # fmt: skip
    feq = equilibrium(lattice, rho, u)
    same = collide.OPERATORS[name](feq, rho, u, None, les)
    for i in range(lattice.q):
        np.testing.assert_allclose(same[i], collide.OPERATORS[name](feq, rho, u, None, plain)[i],
                                   rtol=0, atol=EXACT)  # fmt: skip


def test_smagorinsky_rate_has_finite_gradients_in_uniform_flow():
    import jax

    lattice = LATTICES["D2Q9"]
    rho, u = jnp.ones((2,)), [jnp.full((2,), 0.05), jnp.zeros((2,))]

    def rate(scale):
        feq = equilibrium(lattice, rho * scale, u)
        return jnp.sum(collision.smagorinsky_omega(lattice, feq, feq, rho * scale, u, None,
                                                   OMEGA0, SMAGORINSKY))  # fmt: skip

    assert math.isfinite(float(jax.grad(rate)(1.0)))


def test_smagorinsky_keeps_an_under_resolved_cavity_stable(tmp_path):
    """Lid-driven cavity at Re = 10^4 on 48^2 cells (tau0 = 0.5014), D2Q9 TRT: without a
    subgrid model the lid's corner diverges within 400 steps (exit 3, the message suggesting
    fluid.les); with the Smagorinsky model (C_s = 0.17) 30,000 steps (62 lid transits) stay
    finite (measured)."""
    import json

    from solver_cli import PRODUCTION, run_solver

    base = ["case=cavity", "case.re=10000", "case.resolution=48", "fluid=d2q9",
            "fluid.collision=trt", "fluid.les_cs=0.17", "checkpoint=none",
            "output.every=10000"]  # fmt: skip
    plain = run_solver([*base, "fluid.les=none", "steps=2000", f"hydra.run.dir={tmp_path / 'a'}"],
                       PRODUCTION)  # fmt: skip
    assert plain.returncode == 3, plain.stderr
    assert "fluid.les=smagorinsky" in plain.stderr
    les = run_solver([*base, "fluid.les=smagorinsky", "steps=30000",
                      f"hydra.run.dir={tmp_path / 'b'}"], PRODUCTION)  # fmt: skip
    assert les.returncode == 0, les.stderr
    summary = json.loads((tmp_path / "b" / "run.json").read_text())
    assert summary["les"] == {"model": "smagorinsky", "smagorinsky_constant": 0.17}
    assert summary["status"] == "completed" and summary["steps"] == 30000
