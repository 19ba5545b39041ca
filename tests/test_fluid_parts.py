"""The parts of the fluid step: the collision registry and the host-side boundary plan."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.lattices import LATTICES
from solver.fluid import boundary_rules, collide
from solver.fluid.padded import SINGLE
from solver.fluid.setup import COLLISIONS, BodyForce, FluidSetup, OpenBoundary

# float64 sums of ~q terms of order 0.1
CONSERVATION_ATOL = 1e-12


def test_every_setup_collision_has_an_operator():
    assert set(COLLISIONS) == set(collide.OPERATORS)


@pytest.mark.parametrize("smagorinsky", [0.0, 0.17], ids=["plain", "les"])
@pytest.mark.parametrize("name", sorted(collide.OPERATORS))
@pytest.mark.parametrize("lattice_name", ["D2Q9", "D3Q19"])
def test_operators_conserve_mass_and_momentum(name, lattice_name, smagorinsky):
    """Without a force, sum_i f_i* = rho and sum_i c_i f_i* = rho u (also with the Smagorinsky
    model's local rate)."""
    if name == "kbc" and (lattice_name == "D3Q19" or smagorinsky):
        pytest.skip("KBC: D2Q9 and D3Q27 only, no LES (tests/test_kernels_collision_robust.py)")
    lattice = LATTICES[lattice_name]
    shape = (4,) * lattice.d
    rng = np.random.default_rng(3)
    f = [
        jnp.asarray(lattice.w[i] * (1.0 + 0.1 * rng.standard_normal(shape)))
        for i in range(lattice.q)
    ]
    params = collide.CollisionParams(lattice, 1.3, 3.0 / 16.0, np.dtype("float64"), smagorinsky)
    rho, u = collide.moments(lattice, f, None, params.dtype)
    post = collide.OPERATORS[name](f, rho, u, None, params)
    np.testing.assert_allclose(sum(post), rho, atol=CONSERVATION_ATOL)
    for a in range(lattice.d):
        mom = sum(int(lattice.c[i, a]) * post[i] for i in range(lattice.q))
        np.testing.assert_allclose(mom, rho * u[a], atol=CONSERVATION_ATOL)


def _channel(obstacle: np.ndarray | None = None, **extra) -> FluidSetup:
    """D2Q9 12 x 8, walls on both y faces, the obstacle (if any) solid too."""
    shape = (12, 8)
    solid = np.zeros(shape, bool)
    solid[:, [0, -1]] = True
    if obstacle is not None:
        solid |= obstacle
    return FluidSetup(LATTICES["D2Q9"], shape, 1.2, solid=solid, obstacle=obstacle, **extra)


def test_plan_holds_only_the_parts_the_setup_needs():
    periodic = FluidSetup(LATTICES["D2Q9"], (8, 8), 1.2, body_force=BodyForce((1e-5, 0.0)))
    plan = boundary_rules.plan_boundaries(periodic, SINGLE)
    assert (plan.walls, plan.nodes, plan.faces, plan.force) == ((), (), (), None)
    assert not plan.materialise

    plan = boundary_rules.plan_boundaries(_channel(), SINGLE)
    assert plan.walls == (boundary_rules.bounce_back,)
    assert plan.nodes == (boundary_rules.rest_in_solids,)
    assert plan.padded == (("solid", 0),) and not plan.materialise

    lid = np.zeros((2, 12, 8))
    lid[0, :, -1] = 0.05
    plan = boundary_rules.plan_boundaries(_channel(wall_velocity=lid), SINGLE)
    assert plan.walls == (boundary_rules.moving_wall,)
    assert plan.padded == (("solid", 0), ("wall_velocity", 1))

    obstacle = np.zeros((12, 8), bool)
    obstacle[5:7, 3:5] = True
    setup = _channel(
        wall_distance=np.full((9, 12, 8), 0.5),
        obstacle=obstacle,
        open_boundaries=(
            OpenBoundary(0, "low", "velocity", velocity=np.zeros((2, 8))),
            OpenBoundary(0, "high", "pressure", density=1.0),
        ),
    )
    plan = boundary_rules.plan_boundaries(setup, SINGLE)
    assert plan.walls == (boundary_rules.bouzidi,)
    assert len(plan.faces) == 2 and plan.force is not None and plan.materialise
    assert plan.padded == (("solid", 0), ("wall_distance", 1), ("obstacle", 0))
