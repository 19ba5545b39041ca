"""The parts of the fluid step: the collision registry and the host-side boundary plan."""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.lattices import LATTICES
from solver.distributed.decomposition import Decomposition
from solver.distributed.halo import XlaHalo
from solver.fluid import boundary_rules, collide, grid_field, step
from solver.fluid.grid_field import GridField
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


def _channel(obstacle: np.ndarray | None = None, shape=(12, 8), **extra) -> FluidSetup:
    """D2Q9 12 x 8 (or ``shape``), walls on both y faces, the obstacle (if any) solid too."""
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
    assert plan.padded == (("solid", 0), ("obstacle", 0))  # wall distances: no ghosts read


def _disk_channel(shape=(40, 20), center=(20.0, 9.5), radius=3.2) -> FluidSetup:
    """D2Q9 channel with walls on both y faces and a round obstacle with link fractions."""
    index = np.indices(shape)
    obstacle = (index[0] - center[0]) ** 2 + (index[1] - center[1]) ** 2 < radius**2
    rng = np.random.default_rng(5)
    return _channel(obstacle, wall_distance=rng.uniform(0.2, 0.8, (9, *shape)), shape=shape)


def _open_disk_channel(inlet: str, speed: float, outlet: str) -> FluidSetup:
    """``_disk_channel`` with an inlet at x = 0, an outlet at the other end and the disk's
    moment measured about its centre."""
    return dataclasses.replace(
        _disk_channel(),
        moment_center=(20.0, 9.5),
        open_boundaries=(
            OpenBoundary(0, "low", inlet, velocity=np.full((2, 20), speed)),
            OpenBoundary(0, "high", outlet, density=1.0),
        ),
    )


def test_wall_regions_hold_every_node_the_rules_touch():
    """The boxes hold every solid node and every node pulling from one, as few cells as the
    walls allow (two wall strips and the obstacle's box, not the grid); on a mesh the union over
    the blocks in block coordinates; a lazy GridField gives the same boxes; boxes covering most
    of the block give way to the whole block."""
    setup = _disk_channel()
    plan = boundary_rules.plan_boundaries(setup, SINGLE)
    assert plan.regions is not None and len(plan.regions) == 3
    near = grid_field.near_walls(setup.lattice.c, setup.solid, setup.shape)
    inside = np.zeros(setup.shape, bool)
    for region in plan.regions:
        inside[tuple(slice(a, a + n) for a, n in region)] = True
    assert inside[near].all()
    assert set(plan.regions) >= {((0, 40), (0, 2)), ((0, 40), (18, 2))}
    disk = [r for r in plan.regions if r[1] not in ((0, 2), (18, 2))][0]
    assert disk == ((16, 9), (6, 8))  # the disk's 7 x 6 solid nodes and a ring around them

    halo = XlaHalo(Decomposition(setup.shape, (2, 1)))
    boxed = boundary_rules.wall_regions(setup, halo)
    # the disk straddles the two blocks: its halves land at both ends of the block
    assert sorted(r[0] for r in boxed if r[1] == (6, 8)) == [(0, 5), (16, 4)]

    lazy = GridField(setup.shape, bool, lambda box: np.asarray(setup.solid)[box])
    assert grid_field.near_walls(setup.lattice.c, lazy, (20, 20)).tolist() == (
        grid_field.near_walls(setup.lattice.c, setup.solid, (20, 20)).tolist()
    )

    narrow = _disk_channel(shape=(12, 8), center=(6.0, 3.5), radius=1.6)
    assert boundary_rules.plan_boundaries(narrow, SINGLE).regions is None


def test_a_plane_pulls_from_a_solid_exactly_where_some_link_of_it_does():
    """``plane_pulls_from`` on every inner plane along every axis, periodic and with a
    symmetry plane, against the links of the whole grid; a lazy field gives the same."""
    lat = LATTICES["D3Q19"]
    solid = np.zeros((10, 8, 6), bool)
    solid[4:6, 0:2, 1:3] = True  # touches the y = 0 edge: its image across a symmetry plane
    solid[8, 7, 5] = True  # a corner node: its links wrap around y and z
    lazy = GridField(solid.shape, bool, lambda box: solid[box])
    for mirror in ((), (1,)):
        pulls = np.zeros(solid.shape, bool)
        for c in lat.c:
            pulls |= ~solid & grid_field.shifted(solid, c, range(3), mirror)
        for axis in range(3):
            for index in range(1, solid.shape[axis] - 1):
                expected = bool(np.take(pulls, index, axis=axis).any())
                got = grid_field.plane_pulls_from(lat.c, solid, axis, index, mirror)
                assert got == expected, (mirror, axis, index)
                assert grid_field.plane_pulls_from(lat.c, lazy, axis, index, mirror) == got


def test_open_faces_rerun_the_walls_only_where_the_plane_inside_pulls_from_a_solid():
    """A face's rule re-runs the wall rules on the plane one cell inside: in a channel whose
    walls run along it they are kept, beside an obstacle away from the face there are none."""
    faces = (
        OpenBoundary(0, "low", "velocity", velocity=np.zeros((2, 20))),
        OpenBoundary(0, "high", "pressure", density=1.0),
    )
    walls = (boundary_rules.bounce_back,)
    channel = dataclasses.replace(_disk_channel(), open_boundaries=faces)
    assert [boundary_rules.face_walls(channel, ob, walls) for ob in faces] == [walls, walls]
    free = dataclasses.replace(channel, solid=np.asarray(channel.obstacle))
    assert [boundary_rules.face_walls(free, ob, walls) for ob in faces] == [(), ()]
    near_outlet = np.zeros(channel.shape, bool)
    near_outlet[-1, 8:11] = True  # on the outlet face itself: the plane inside pulls from it
    touching = dataclasses.replace(free, solid=near_outlet | np.asarray(free.solid))
    assert [boundary_rules.face_walls(touching, ob, walls) for ob in faces] == [(), walls]


def test_rules_on_boxes_equal_the_rules_on_the_whole_block(monkeypatch):
    """Curved walls, the rest state in solids, the force and its moment computed on the boxes
    give the whole block's populations (to the few ulps of XLA's FMA contraction, which depends
    on the array's shape: tests/test_distributed_equality.py) and its force (summed in
    another order)."""
    setup = _open_disk_channel("velocity_bounce_back", 0.0, "characteristic")
    face = np.zeros((2, 20))
    face[0, 1:-1] = 0.04
    setup.open_boundaries[0].velocity[...] = face
    rng = np.random.default_rng(2)
    density = 1.0 + 0.01 * rng.standard_normal(setup.shape)
    velocity = np.where(setup.solid[None], 0.0, 0.03 + 0.01 * rng.standard_normal((2, 40, 20)))

    def run():
        chunk = jax.jit(step.make_chunk(setup), static_argnums=2)
        state, forces = chunk(
            step.initial_state(setup, density, velocity), step.make_geometry(setup), 6
        )
        return np.asarray(state.populations), np.asarray(forces)

    assert boundary_rules.plan_boundaries(setup, SINGLE).regions is not None
    boxed, boxed_forces = run()
    monkeypatch.setattr(boundary_rules, "DENSE_FRACTION", 0.0)
    assert boundary_rules.plan_boundaries(setup, SINGLE).regions is None
    whole, whole_forces = run()
    assert np.isfinite(whole).all() and np.abs(whole_forces[:, 0]).max() > 1e-4
    np.testing.assert_allclose(boxed, whole, rtol=0, atol=2e-6)
    np.testing.assert_allclose(boxed_forces, whole_forces, rtol=1e-4, atol=1e-7)


def _computation(text: str, name: str) -> str:
    """The computation ``name`` (``ENTRY`` or ``%name``) of a compiled program's text."""
    part = text[text.index(f"\n{name} ") :]
    return part[: part.index("\n}")]


def test_the_step_loop_hoists_nothing_from_the_geometry_and_copies_no_grid_array():
    """The chunk's loop reads the geometry through a barrier with the iteration index, so XLA
    leaves what the parts derive from it (Bouzidi's coefficients and the link masks of every
    direction and box) inside the loop's fusions: no fusion of the loop body's computations
    with operands runs before the loop (hoisted, each was a kernel to compile and an array
    carried through the loop). An even chunk: the loop body is the whole program."""
    setup = _open_disk_channel("velocity", 0.02, "convective")
    chunk = jax.jit(step.make_chunk(setup), static_argnums=2)
    state = step.initial_state(setup, np.ones(setup.shape), np.zeros((2, *setup.shape)))
    text = chunk.lower(state, step.make_geometry(setup), 6).compile().as_text()
    entry = _computation(text, "ENTRY")
    hoisted = [
        line
        for line in entry.splitlines()
        if "while/body" in line and " fusion(" in line and " fusion()" not in line
    ]
    assert len(hoisted) == 0, hoisted[:3]
    assert " while(" in entry  # the loop is there to hoist out of

    # one step per iteration, every buffer updated in place: the loop body copies no array of
    # the grid's size (the outlet reads the scratch buffers of the step before, which the
    # pull overwrites: without their face planes copied out first, XLA copied all q of them)
    body_name = re.search(r" while\(.*?body=(%[\w.\-]+)", entry).group(1)
    body = _computation(text, body_name)
    grid = {"40,20", "42,22"}
    copies = [
        line
        for line in body.splitlines()
        if " copy(" in line and re.search(r"\[([\d,]*)\]", line).group(1) in grid
    ]
    assert copies == [], copies[:3]


@pytest.mark.production_compile  # FMA contraction included: the loop body's code is the same
@pytest.mark.parametrize("splits", [(4, 2), (5, 1)], ids=["4+2", "5+1"])
def test_a_run_split_into_chunks_of_any_length_gives_the_same_bits(splits):
    """Where the plan materialises the pull (curved walls, open faces, a force), the loop body
    of one step is the whole chunk: chunks of any length run the same compiled step, so a run
    gives the same bits however it is split (at the production optimisation level, FMA
    contraction included). Populations and forces of 6 steps in one chunk and in two. A chunk
    of one step is the exception for the force: XLA inlines a loop of one iteration, and the
    force's sums, fused with what surrounds them, may round differently (by 1 ulp)."""
    setup = _open_disk_channel("velocity", 0.02, "convective")
    chunk = jax.jit(step.make_chunk(setup), static_argnums=2)
    geometry = step.make_geometry(setup)
    rng = np.random.default_rng(3)
    velocity = np.where(setup.solid[None], 0.0, 0.02 + 0.01 * rng.standard_normal((2, 40, 20)))
    start = step.initial_state(setup, np.ones(setup.shape), velocity)
    whole, whole_forces = chunk(start, geometry, 6)
    state, forces = start, []
    for n in splits:
        state, f = chunk(state, geometry, n)
        forces.append(np.asarray(f))
    assert int(state.time) == int(whole.time) == 6
    assert np.abs(whole_forces[:, 0]).max() > 1e-5
    np.testing.assert_array_equal(np.asarray(state.populations), np.asarray(whole.populations))
    forces, whole_forces = np.concatenate(forces), np.asarray(whole_forces)
    if min(splits) > 1:
        np.testing.assert_array_equal(forces, whole_forces)
    else:
        np.testing.assert_array_equal(forces[:5], whole_forces[:5])
        np.testing.assert_allclose(forces[5:], whole_forces[5:], rtol=1e-5, atol=1e-7)


def test_an_even_chunk_compiles_no_step_beside_the_loop():
    """Plain walls (the pull fused into the collision, two buffers, two steps per loop
    iteration): a chunk of n steps runs n - 1 steps between its first collision and its last
    pull, so an even n leaves one step over; the loop's last iteration skips its second step
    (a conditional) instead of a step compiled beside the loop. The program outside the loop
    is the same for 6 steps as for 7 (but a few small fusions; with a step beside the loop: 83
    fusions against 51), and 6 steps give the bits of 5 + 1 and of
    3 + 3 (no FMA here: without optimisation every step rounds alike)."""
    setup = _channel(body_force=BodyForce((1e-5, 0.0)))
    assert not boundary_rules.plan_boundaries(setup, SINGLE).materialise
    chunk = jax.jit(step.make_chunk(setup), static_argnums=2)
    rng = np.random.default_rng(5)
    velocity = np.where(setup.solid[None], 0.0, 0.02 * rng.standard_normal((2, 12, 8)))
    start = step.initial_state(setup, np.ones(setup.shape), velocity)
    geometry = step.make_geometry(setup)

    def outside_the_loop(n: int) -> int:
        text = chunk.lower(start, geometry, n).compile().as_text()
        return _computation(text, "ENTRY").count(" fusion(")

    # a step compiled beside the loop adds some 30 fusions (83 against 51 on jaxlib 0.10); what
    # else may differ is small: the force slice, and on jaxlib 0.11 at -O0 an iota and a mask
    # that are not folded (48 against 46, measured 2026-12-07)
    assert outside_the_loop(6) - outside_the_loop(7) <= 4
    whole = np.asarray(chunk(start, geometry, 6)[0].populations)
    assert np.abs(whole - np.asarray(start.populations)).max() > 1e-4
    for splits in ((5, 1), (3, 3)):
        state = start
        for n in splits:
            state = chunk(state, geometry, n)[0]
        assert int(state.time) == 6
        np.testing.assert_array_equal(np.asarray(state.populations), whole)
