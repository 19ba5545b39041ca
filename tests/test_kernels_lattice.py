"""Unit tests of the velocity sets, equilibrium, moments, collision and streaming kernels."""

import jax.numpy as jnp
import numpy as np
import pytest

from kernels import collision
from kernels.equilibrium import density_velocity, equilibrium, momentum, stress
from kernels.lattices import CS2, LATTICES, lattice_by_name
from kernels.streaming import stream

# Moments of the equilibrium are exact polynomials: only round-off separates them.
EXACT = 1e-12

ALL = list(LATTICES.values())


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_lattice_isotropy(lat):
    c, w = lat.c, lat.w
    assert w.sum() == pytest.approx(1.0, abs=EXACT)
    np.testing.assert_array_equal(c[lat.opposite], -c)
    np.testing.assert_allclose(np.einsum("i,ia->a", w, c), 0, atol=EXACT)
    np.testing.assert_allclose(np.einsum("i,ia,ib->ab", w, c, c), CS2 * np.eye(lat.d), atol=EXACT)
    # fourth-order isotropy: sum w c_a c_b c_c c_d = cs^4 (d_ab d_cd + d_ac d_bd + d_ad d_bc)
    m4 = np.einsum("i,ia,ib,ic,id->abcd", w, c, c, c, c)
    eye = np.eye(lat.d)
    ref = CS2**2 * (
        np.einsum("ab,cd->abcd", eye, eye)
        + np.einsum("ac,bd->abcd", eye, eye)
        + np.einsum("ad,bc->abcd", eye, eye)
    )
    np.testing.assert_allclose(m4, ref, atol=EXACT)
    assert len({tuple(v) for v in c}) == lat.q


def test_lattice_by_name_errors():
    assert lattice_by_name("d3q19").q == 19
    with pytest.raises(ValueError, match="D2Q9"):
        lattice_by_name("D3Q15")


def random_fields(lat, shape=(5, 4, 3), seed=0):
    rng = np.random.default_rng(seed)
    shape = shape[: lat.d]
    rho = 1.0 + 0.1 * rng.standard_normal(shape)
    u = 0.05 * rng.standard_normal((lat.d, *shape))
    return jnp.asarray(rho), jnp.asarray(u)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_equilibrium_moments(lat):
    rho, u = random_fields(lat)
    feq = jnp.stack(equilibrium(lat, rho, u))
    rho2, u2 = density_velocity(lat, feq)
    np.testing.assert_allclose(rho2, rho, rtol=EXACT)
    np.testing.assert_allclose(jnp.stack(u2), u, atol=EXACT)
    pi = np.einsum("ia,ib,i...->ab...", lat.c, lat.c, np.asarray(feq))
    ref = CS2 * np.einsum("ab,...->ab...", np.eye(lat.d), rho) + np.einsum(
        "...,a...,b...->ab...", rho, u, u
    )
    np.testing.assert_allclose(pi, ref, atol=EXACT)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
@pytest.mark.parametrize("kind", ["bgk", "trt"])
def test_collision_conserves_mass_and_momentum(lat, kind):
    rng = np.random.default_rng(1)
    rho, u = random_fields(lat)
    feq = equilibrium(lat, rho, u)
    f = [e * (1 + 0.05 * rng.standard_normal(e.shape)) for e in feq]
    r, v = density_velocity(lat, f)
    eq = equilibrium(lat, r, v)
    if kind == "bgk":
        post = collision.bgk(lat, f, eq, 1.3)
    else:
        post = collision.trt(lat, f, eq, 1.3, collision.trt_omega_minus(1.3, 3 / 16))
    np.testing.assert_allclose(sum(post), sum(f), rtol=EXACT)
    np.testing.assert_allclose(
        jnp.stack(momentum(lat, post)), jnp.stack(momentum(lat, f)), atol=EXACT
    )


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_guo_source_moments(lat):
    """sum S_i = 0 and sum c_i S_i = (1 - omega-/2) F (Guo et al. 2002)."""
    rho, u = random_fields(lat)
    force = [1e-3 * (a + 1) for a in range(lat.d)]
    wm = 1.1
    src = collision.guo_source(lat, u, force, 1.7, wm)
    src = [jnp.broadcast_to(s, rho.shape) for s in src]
    np.testing.assert_allclose(sum(src), 0, atol=EXACT)
    mom = momentum(lat, src)
    for a in range(lat.d):
        np.testing.assert_allclose(mom[a], (1 - wm / 2) * force[a], atol=EXACT)


def test_trt_magic_relation():
    wp = 1 / 0.8
    wm = collision.trt_omega_minus(wp, 3 / 16)
    assert (1 / wp - 0.5) * (1 / wm - 0.5) == pytest.approx(3 / 16)


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_stream_moves_each_population_along_its_velocity(lat):
    shape = (6, 5, 4)[: lat.d]
    f = np.zeros((lat.q, *shape))
    origin = (2, 2, 2)[: lat.d]
    f[(slice(None), *origin)] = np.arange(1, lat.q + 1)
    out = np.asarray(jnp.stack(stream(lat, jnp.asarray(f))))
    for i in range(lat.q):
        dest = tuple((o + c) % n for o, c, n in zip(origin, lat.c[i], shape, strict=True))
        assert out[(i, *dest)] == i + 1
        assert out[i].sum() == i + 1


@pytest.mark.parametrize("lat", ALL, ids=lambda lat: lat.name)
def test_stress_of_first_order_populations_is_newtonian(lat):
    """Populations built from a velocity gradient carry sigma = rho nu (grad u + grad u^T)."""
    from solver.fluid.setup import FluidSetup
    from solver.fluid.step import initial_state

    shape = (3, 3, 3)[: lat.d]
    tau = 0.8
    setup = FluidSetup(lat, shape, 1 / tau, dtype="float64")
    rng = np.random.default_rng(2)
    grad = 1e-3 * rng.standard_normal((lat.d, lat.d))
    grad -= np.trace(grad) / lat.d * np.eye(lat.d)  # incompressible: trace-free
    rho = np.full(shape, 1.1)
    grad_field = np.broadcast_to(grad.reshape(grad.shape + (1,) * lat.d), grad.shape + shape)
    state = initial_state(setup, rho, np.zeros((lat.d, *shape)), grad_field)
    f = [state.populations[i] for i in range(lat.q)]
    feq = equilibrium(lat, jnp.asarray(rho), jnp.zeros((lat.d, *shape)))
    sigma = stress(lat, f, feq, 1 / tau)
    nu = (tau - 0.5) * CS2
    for (a, b), value in sigma.items():
        np.testing.assert_allclose(value, 1.1 * nu * (grad[a, b] + grad[b, a]), atol=1e-15)
