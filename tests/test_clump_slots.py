"""Clumps in a shard's body slots (``solver.distributed.bodies.clump_slots``): the contacts of
owned clumps, evaluated over their member spheres by ``forces.local_contacts`` and summed onto
their slots, equal the single-device contact forces (``solver.bodies.step.contact_forces``),
whether every clump is owned or some of them are ghosts; and the per-sphere contact tables
travel to slots and back unchanged.

Four clumps of two members each (radius 1, members 0.8 from the centre along the principal x
axis), turned at random and pressed together above a floor plane, so that members of different
clumps overlap and a member touches the floor; float64, so the bound is round-off of sums taken
in another order.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bodies import step as bs
from solver.distributed.bodies import clump_slots
from solver.distributed.bodies.in_fluid import plan_fluid_layout
from solver.distributed.bodies.step import _origin

RADIUS, OFFSET = 1.0, 0.8
CENTRES = np.array([[5.0, 5.0, 2.0], [7.3, 5.2, 2.1], [5.4, 7.2, 2.3], [7.0, 7.4, 3.6]])
N = len(CENTRES)


def setup() -> bs.BodySetup:
    s = 2 * N
    ones = np.ones(s)
    grid = CellGrid.covering((0.0,) * 3, (12.0,) * 3, 2 * RADIUS + 0.5, 8, 16)
    return bs.BodySetup(
        radius=RADIUS * ones, young=1e4 * ones, poisson=0.3 * ones, restitution=0.5 * ones,
        friction=0.3 * ones, rolling_friction=0.0 * ones, grid=grid, dt=1e-3, skin=0.5,
        gravity=(0.0, 0.0, -9.81), plane_point=np.array([[0.0, 0.0, 1.1]]),
        plane_normal=np.array([[0.0, 0.0, 1.0]]), member_body=np.repeat(np.arange(N), 2),
        member_offset=np.tile([[-OFFSET, 0.0, 0.0], [OFFSET, 0.0, 0.0]], (N, 1)),
        neighbor_list="cells",
    )  # fmt: skip


def bodies() -> Bodies:
    rng = np.random.default_rng(3)
    q = rng.standard_normal((N, 4))
    q[:, 1:3] *= 0.3  # mostly turned about z: the clumps stay flat above the floor
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return Bodies(
        position=jnp.asarray(CENTRES),
        orientation=jnp.asarray(q),
        velocity=jnp.asarray(0.1 * rng.standard_normal((N, 3))),
        angular_momentum=jnp.asarray(0.05 * rng.standard_normal((N, 3))),
        prescribed_angular_velocity=jnp.zeros((N, 3)),
        inverse_mass=jnp.asarray(1.0 / (1.0 + rng.random(N))),
        inverse_inertia=jnp.asarray(1.0 / (0.5 + rng.random((N, 3)))),
        kinematic=jnp.zeros((N,), bool),
    )


def owned_forces(
    scene: bs.BodySetup, state: Bodies, owned: list[int], ghosts: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, object]:
    """Force, torque and contact count on the ``owned`` clumps, with ``ghosts`` as copies
    (``clump_slots.slot_contacts``: the members' contacts summed per slot, the weight once)."""
    table = clump_slots.MemberTable.of(scene)
    layout = plan_fluid_layout(scene, (1, 1, 1), (0.0,) * 3, (12.0,) * 3, 6.0, max_partners=16)
    grid, _ = layout.local_grid()
    order = np.asarray(owned + ghosts)
    gid = jnp.asarray(order, jnp.int32)
    slots = jax.tree.map(lambda leaf: leaf[order], state)
    c, width, p = len(owned), table.width, scene.n_planes
    result = clump_slots.slot_contacts(
        scene, table, grid, _origin(layout, jnp.zeros(3, jnp.int32), jnp.float64), gid, slots, c,
        jnp.full((c, width * 16), -1, jnp.int32), jnp.zeros((c, width * 16, 3)),
        jnp.zeros((c, width * p, 3)), scene.params(jnp.float64),
    )  # fmt: skip
    force, torque, count = result.force, result.torque, np.asarray(result.contact_count)
    return np.asarray(force), np.asarray(torque), count, result


@pytest.fixture(scope="module")
def reference():
    scene, state = setup(), bodies()
    s = scene.n_spheres
    result = bs.contact_forces(
        scene, state, jnp.full((s, scene.table_width), -1, jnp.int32),
        jnp.zeros((s, scene.table_width, 3)), jnp.zeros((s, 1, 3)),
    )  # fmt: skip
    count = np.asarray(result.contact_count)
    # the scene is what the test needs: clumps touch each other, and one touches the floor
    assert count.sum() >= 4 and np.all(count > 0), count
    return scene, state, result


@pytest.mark.parametrize(
    "owned, ghosts", [([0, 1, 2, 3], []), ([1, 3], [0, 2]), ([2], [3, 1, 0])]
)  # fmt: skip
def test_owned_clumps_feel_the_single_device_contact_forces(reference, owned, ghosts):
    scene, state, expected = reference
    force, torque, count, _ = owned_forces(scene, state, owned, ghosts)
    np.testing.assert_allclose(force, np.asarray(expected.force)[owned], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(torque, np.asarray(expected.torque)[owned], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(count, np.asarray(expected.contact_count)[owned])


def test_members_of_one_clump_are_never_partners(reference):
    scene, state, _ = reference
    *_, result = owned_forces(scene, state, [0, 1, 2, 3], [])
    partners = np.asarray(result.partners).reshape(8, -1)  # row k: sphere k's partners here
    for sphere, row in enumerate(partners):
        listed = row[row >= 0]
        assert listed.size and not np.any(listed // 2 == sphere // 2), (sphere, listed)


def test_contact_tables_go_to_slots_and_back_unchanged():
    scene = setup()
    table = clump_slots.MemberTable.of(scene)
    s, width = scene.n_spheres, 5
    rng = np.random.default_rng(0)
    whole = jnp.asarray(rng.integers(-1, s, (s, width)), jnp.int32)
    index = jnp.asarray([3, 0, 0], jnp.int32)  # slots hold bodies 3 and 0; the last is free
    used = jnp.asarray([True, True, False])
    rows = clump_slots.pick_rows(table, whole, index, used, -1)
    assert rows.shape == (3, 2 * width)
    np.testing.assert_array_equal(rows[0], np.concatenate([whole[6], whole[7]]))
    assert np.all(np.asarray(rows[2]) == -1)
    gid = jnp.asarray([3, 0, -1], jnp.int32)
    back = np.asarray(clump_slots.place_rows(table, rows, gid, whole))
    for sphere in (0, 1, 6, 7):
        np.testing.assert_array_equal(back[sphere], whole[sphere])
    assert np.all(back[2:6] == 0)  # spheres no slot holds: zeros (other shards add them)
