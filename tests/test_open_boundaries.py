"""Open boundaries: the link-wise inlet and outlet keep the equilibrium they prescribe, the
convective outlet carries a state out and holds its density level, mass through a channel is
conserved, and a run split into chunks equals one chunk (the outlet reads the step before).
float64 throughout (tests/conftest.py enables x64)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import open_boundaries
from kernels.equilibrium import equilibrium
from kernels.lattices import LATTICES
from solver.fluid.setup import FluidSetup, InflowSchedule, OpenBoundary
from solver.fluid.step import initial_state, make_chunk, make_geometry

# float64 round-off on populations ~0.1-0.4
EXACT = 1e-14
# mass balance of a channel: |outflow - inflow| / inflow (the issue asks for 0.1 %)
FLUX_RTOL = 1e-3

D2Q9 = LATTICES["D2Q9"]


def _face(lattice, rho, u, n=5):
    """q equilibrium arrays (n,) at density rho and velocity u (d,)."""
    rho = jnp.full((n,), rho, jnp.float64)
    vel = [jnp.full((n,), c, jnp.float64) for c in u]
    return list(equilibrium(lattice, rho, vel))


def _incoming(lattice, axis, side):
    sign = 1 if side == "low" else -1
    return [i for i in range(lattice.q) if sign * lattice.c[i, axis] > 0]


@pytest.mark.parametrize("lattice_name", ["D2Q9", "D3Q19"])
def test_velocity_bounce_back_keeps_the_prescribed_equilibrium(lattice_name):
    lat = LATTICES[lattice_name]
    u = (0.05, -0.02, 0.01)[: lat.d]
    eq = _face(lat, 1.02, u)
    garbage = [jnp.full_like(e, 7.0) for e in eq]
    incoming = _incoming(lat, 0, "low")
    out = open_boundaries.velocity_bounce_back(
        lat, garbage, eq, incoming, 1.02 + 0.0 * eq[0], [jnp.full_like(eq[0], c) for c in u]
    )
    for i in range(lat.q):
        want = eq[i] if i in incoming else garbage[i]
        np.testing.assert_allclose(out[i], want, rtol=0, atol=EXACT, err_msg=f"direction {i}")


@pytest.mark.parametrize("lattice_name", ["D2Q9", "D3Q27"])
def test_anti_bounce_back_keeps_the_prescribed_density(lattice_name):
    lat = LATTICES[lattice_name]
    u = (0.06, 0.01, -0.02)[: lat.d]
    eq = _face(lat, 0.98, u)
    garbage = [jnp.full_like(e, -3.0) for e in eq]
    incoming = _incoming(lat, 0, "high")
    out = open_boundaries.pressure_anti_bounce_back(lat, garbage, eq, eq, incoming, 0.98)
    for i in range(lat.q):
        want = eq[i] if i in incoming else garbage[i]
        np.testing.assert_allclose(out[i], want, rtol=0, atol=EXACT, err_msg=f"direction {i}")


def test_convective_outlet_advects_and_relaxes_the_density():
    lat = D2Q9
    steady = _face(lat, 1.0, (0.1, 0.0))
    incoming = _incoming(lat, 0, "high")
    # a steady state at the outlet density is a fixed point
    out = open_boundaries.convective_outflow(
        lat, steady, steady, steady, incoming, 0, 1.0, 1.0, 0.01
    )
    for i in range(lat.q):
        np.testing.assert_allclose(out[i], steady[i], rtol=0, atol=EXACT)
    # without relaxation: the implicit upwind update with the inner plane's speed 0.1
    previous = _face(lat, 1.0, (0.0, 0.0))
    out = open_boundaries.convective_outflow(
        lat, steady, previous, steady, incoming, 0, 1.0, 1.0, 0.0
    )
    for i in incoming:
        want = (previous[i] + 0.1 * steady[i]) / 1.1
        np.testing.assert_allclose(out[i], want, rtol=0, atol=EXACT)
    # a face 10 % too dense moves towards the outlet density, by a fraction ~ kappa
    dense = _face(lat, 1.1, (0.1, 0.0))
    relaxed = open_boundaries.convective_outflow(
        lat, dense, dense, dense, incoming, 0, 1.0, 1.0, 0.05
    )
    rho = float(sum(relaxed)[0])
    assert 1.0 < rho < 1.1 - 0.05 * 0.1 * 0.1, rho


STEADY = InflowSchedule()


def _channel(kind_in: str, kind_out: str, schedule=STEADY, nx=48, ny=18, tau=0.8):
    """A D2Q9 channel, walls at y = 0 and ny - 1, parabolic inflow of peak 0.05."""
    solid = np.zeros((nx, ny), bool)
    solid[:, 0] = solid[:, -1] = True
    y = np.arange(ny) - 0.5
    h = ny - 2
    profile = np.where(solid[0], 0.0, 4 * 0.05 * y * (h - y) / h**2)
    inlet = np.zeros((2, ny))
    inlet[0] = profile
    setup = FluidSetup(
        lattice=D2Q9,
        shape=(nx, ny),
        omega=1.0 / tau,
        dtype="float64",
        collision="trt",
        solid=solid,
        open_boundaries=(
            OpenBoundary(0, "low", kind_in, velocity=inlet, schedule=schedule),
            OpenBoundary(0, "high", kind_out, density=1.0),
        ),
    )
    velocity = np.zeros((2, nx, ny))
    if schedule.steady:
        velocity[0] = profile[None, :]
    return setup, velocity


def _flux(f: np.ndarray, column: int) -> float:
    """Mass flux sum_y rho u_x through the nodes of column x (lattice units)."""
    return float(sum(D2Q9.c[i, 0] * f[i, column].sum() for i in range(D2Q9.q)))


@pytest.mark.parametrize("outlet", ["convective", "pressure_anti_bounce_back", "characteristic"])
def test_channel_conserves_mass_through_the_link_wise_inlet(outlet):
    setup, velocity = _channel("velocity_bounce_back", outlet)
    state = initial_state(setup, np.ones(setup.shape), velocity)
    geometry = make_geometry(setup)
    chunk = jax.jit(make_chunk(setup), static_argnums=2)
    for _ in range(4):  # one program: 3000 steps to the steady state, 1000 more measured
        before = np.asarray(state.populations)
        state, _ = chunk(state, geometry, 1000)
    after = np.asarray(state.populations)
    fluxes = [_flux(after, x) for x in (0, 24, 47)]
    for x, flux in zip((0, 24, 47), fluxes, strict=True):
        assert abs(flux - fluxes[1]) <= FLUX_RTOL * abs(fluxes[1]), (x, fluxes)
    # what the inlet prescribes: rho u_in with the inlet column's density (the channel's
    # pressure drop makes it ~2 % above 1 here)
    inflow = float((after[:, 0].sum(axis=0) * setup.open_boundaries[0].velocity[0]).sum())
    assert abs(fluxes[0] - inflow) <= 0.01 * inflow, (fluxes, inflow)
    # the box's mass is steady: its change over 1000 steps is below 0.1 % of what flowed through
    drift = abs(after.sum() - before.sum())
    assert drift <= FLUX_RTOL * 1000 * fluxes[1], (drift, fluxes[1])


def test_chunks_equal_one_chunk_with_the_convective_outlet():
    """The outlet reads the face of the step before; at a chunk's start that is the state."""
    setup, velocity = _channel(
        "velocity_bounce_back", "convective", InflowSchedule(ramp_steps=12.0), nx=24, ny=10
    )
    state0 = initial_state(setup, np.ones(setup.shape), velocity)
    geometry = make_geometry(setup)
    chunk = jax.jit(make_chunk(setup), static_argnums=2)
    whole, _ = chunk(state0, geometry, 20)
    split, _ = chunk(state0, geometry, 10)
    split, _ = chunk(split, geometry, 10)
    assert int(split.time) == int(whole.time) == 20
    np.testing.assert_array_equal(np.asarray(split.populations), np.asarray(whole.populations))
    # the ramp started the flow: the outflow is under way and below the full inflow
    f = np.asarray(whole.populations)
    assert 0.0 < _flux(f, 12) < 2.0 / 3.0 * 0.05 * 8


def test_characteristic_outlet_lets_a_sound_pulse_leave():
    """A density pulse at rest splits into two sound waves that run into outlets on both ends
    (Thompson 1987): the pressure outlet returns about 80 % of each wave and the convective one
    about 20 % (measured); the characteristic outlet returns 2 %. Then the box relaxes to the
    outlets' density."""
    nx, ny, amplitude = 160, 2, 1e-3
    outlets = tuple(
        OpenBoundary(0, side, "characteristic", density=1.0) for side in ("low", "high")
    )
    setup = FluidSetup(
        lattice=D2Q9, shape=(nx, ny), omega=1.0 / 0.6, dtype="float64", collision="bgk",
        open_boundaries=outlets,
    )  # fmt: skip
    x = np.arange(nx)[:, None] * np.ones((1, ny))
    density = 1.0 + amplitude * np.exp(-(((x - nx / 2) / 6.0) ** 2))
    state = initial_state(setup, density, np.zeros((2, nx, ny)))
    geometry = make_geometry(setup)
    chunk = jax.jit(make_chunk(setup), static_argnums=2)
    state, _ = chunk(state, geometry, 100)
    wave = np.abs(np.asarray(state.populations).sum(axis=0) - 1.0).max()
    assert wave > 0.3 * amplitude  # the two waves, not yet at the faces
    # the waves reach the faces after (nx/2) / c_s = 139 steps; the echo is back by then
    state, _ = chunk(state, geometry, 100)
    echo = np.abs(np.asarray(state.populations).sum(axis=0) - 1.0).max()
    assert echo < 0.05 * wave, (echo, wave)
    for _ in range(30):  # the same program
        state, _ = chunk(state, geometry, 100)
    rest = np.abs(np.asarray(state.populations).sum(axis=0) - 1.0).max()
    assert rest < 1e-3 * amplitude, rest
