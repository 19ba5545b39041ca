"""The composed rigid-body step (solver/bodies/step.py) against analytic mechanics (float64).

Soft spheres (E = 1e7 Pa, steel density) keep the Hertz contact about 2-3 ms long, so dt = 1e-5 to
2e-5 s resolves it with 100-300 steps and every scene stays at a few thousand steps.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import contact_models as cm
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bodies import step as bs

RADIUS, DENSITY, YOUNG, POISSON = 0.01, 7800.0, 1.0e7, 0.3
MASS = 4.0 / 3.0 * math.pi * RADIUS**3 * DENSITY
LINEAR_STIFFNESS = 1.0e5  # N/m per body; a body-plane pair with a rigid plane gets all of it
G = 9.81
SKIN = 1.0e-3

# Exact algebra in float64: velocity Verlet integrates a constant force exactly.
ROUND_OFF = 1e-12
# Rebound height / drop height against e^2. Gravity acts during the finite (soft) contact and the
# dashpot sees half-step velocities, so the ratio falls short by O(g t_c / v) + O(dt / t_c):
# measured -1.7e-2 (Hertz, e = 0.5), -1.4e-3 (Hertz, 0.9), -9.6e-3 / -3.4e-4 (linear, 0.5 / 0.9)
# from a 0.2 m drop; 0.03 covers the worst case with margin.
BOUNCE = 0.03
# Head-on restitution of free spheres (no gravity): only the O(dt / t_c) dashpot error is left,
# measured 5.4e-5 at ~300 steps per contact.
HEAD_ON = 2e-3
# Incline accelerations from a linear fit of the velocity after the contact settled; the residual
# tangential-spring oscillation leaves -9.4e-4 when rolling; sliding is exact to 1e-13 (measured).
INCLINE = 1e-2


def spheres(position, velocity=None) -> Bodies:
    """Solid spheres of RADIUS and DENSITY at rest (or with the given velocities)."""
    position = np.atleast_2d(np.asarray(position, dtype=np.float64))
    n = position.shape[0]
    velocity = np.zeros((n, 3)) if velocity is None else np.asarray(velocity, dtype=np.float64)
    inertia = 0.4 * MASS * RADIUS**2
    return Bodies(
        position=jnp.asarray(position),
        orientation=jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0]), (n, 1)),
        velocity=jnp.asarray(velocity),
        angular_momentum=jnp.zeros((n, 3)),
        prescribed_angular_velocity=jnp.zeros((n, 3)),
        inverse_mass=jnp.full((n,), 1.0 / MASS),
        inverse_inertia=jnp.full((n, 3), 1.0 / inertia),
        kinematic=jnp.zeros((n,), bool),
    )


def make_setup(
    n=1,
    model="hertz",
    restitution=0.5,
    friction=0.5,
    normals=((0.0, 0.0, 1.0),),
    dt=2e-5,
    gravity=(0.0, 0.0, -G),
    capacity=4,
    upper=(0.05, 0.05, 0.3),
) -> bs.BodySetup:
    ones = np.ones(n)
    grid = CellGrid.covering((-0.05, -0.05, -0.05), upper, 2.5 * RADIUS, capacity, 4)
    return bs.BodySetup(
        radius=RADIUS * ones,
        young=YOUNG * ones,
        poisson=POISSON * ones,
        restitution=restitution * ones,
        friction=friction * ones,
        rolling_friction=0.0 * ones,
        grid=grid,
        dt=dt,
        skin=SKIN,
        gravity=gravity,
        contact_model=model,
        stiffness=LINEAR_STIFFNESS * ones,
        plane_point=np.zeros((len(normals), 3)),
        plane_normal=np.asarray(normals, dtype=np.float64).reshape(-1, 3),
    )


def run(setup, bodies, steps):
    chunk = jax.jit(bs.make_body_chunk(setup), static_argnums=1)
    return chunk(bs.initial_state(setup, bodies), steps)


@pytest.mark.parametrize("model", ["hertz", "linear"])
@pytest.mark.parametrize("restitution", [0.5, 0.9])
def test_bounce_height_ratio_is_restitution_squared(model, restitution):
    drop = 0.2  # m, lowest point above the plane
    setup = make_setup(model=model, restitution=restitution)
    assert setup.dt < bs.stable_time_step(setup, np.array([MASS]))
    steps = int(2.5 * math.sqrt(2 * drop / G) / setup.dt)
    _, diag = run(setup, spheres([[0.0, 0.0, RADIUS + drop]]), steps)
    height = np.asarray(diag.potential_energy) / (MASS * G) - RADIUS
    touching = np.asarray(diag.contacts) > 0
    first = int(np.argmax(touching))
    assert touching[first], "the sphere never reached the plane"
    released = first + int(np.argmax(~touching[first:]))
    again = np.nonzero(touching[released:])[0]
    stop = released + (int(again[0]) if again.size else steps)
    ratio = height[released:stop].max() / drop
    error = ratio / restitution**2 - 1.0
    assert abs(error) < BOUNCE, f"{model} e={restitution}: rebound ratio {ratio}, error {error}"


def test_projectile_is_an_exact_parabola():
    setup = make_setup(normals=np.zeros((0, 3)))
    x0, v0 = np.array([0.0, 0.0, 0.05]), np.array([0.3, -0.1, 1.0])
    steps = 1000
    state, diag = run(setup, spheres([x0], [v0]), steps)
    t = steps * setup.dt
    g = np.array(setup.gravity)
    np.testing.assert_allclose(state.bodies.position[0], x0 + v0 * t + 0.5 * g * t**2,
                               rtol=0, atol=ROUND_OFF)  # fmt: skip
    np.testing.assert_allclose(state.bodies.velocity[0], v0 + g * t, rtol=0, atol=ROUND_OFF)
    assert int(state.time) == steps and not np.any(np.asarray(diag.contacts))


def test_head_on_collision_conserves_momentum_and_restitution():
    restitution = 0.9
    setup = make_setup(n=2, restitution=restitution, normals=np.zeros((0, 3)), dt=1e-5,
                       gravity=(0.0, 0.0, 0.0))  # fmt: skip
    v = np.array([[0.5, 0.0, 0.0], [-0.3, 0.0, 0.0]])
    bodies = spheres([[-0.012, 0.0, 0.0], [0.012, 0.0, 0.0]], v)
    state, diag = run(setup, bodies, 2000)
    touching = np.asarray(diag.contacts) > 0
    assert touching.any() and not touching[-1], "the collision did not happen or did not end"
    momentum = np.asarray(diag.momentum)
    np.testing.assert_allclose(momentum, MASS * np.sum(v, axis=0)[None].repeat(2000, 0),
                               rtol=0, atol=ROUND_OFF * MASS)  # fmt: skip
    after = np.asarray(state.bodies.velocity)
    measured = -(after[1, 0] - after[0, 0]) / (v[1, 0] - v[0, 0])
    assert abs(measured - restitution) < HEAD_ON, f"restitution {measured}, wanted {restitution}"


def _incline_acceleration(theta, friction):
    normal = (math.sin(theta), 0.0, math.cos(theta))
    downhill = np.array([math.cos(theta), 0.0, -math.sin(theta)])
    setup = make_setup(restitution=0.3, friction=friction, normals=(normal,))
    E_star = cm.effective_modulus(YOUNG, POISSON, np.inf, 0.0)
    overlap = (3 * MASS * G * math.cos(theta) / (4 * E_star * math.sqrt(RADIUS))) ** (2 / 3)
    start = (RADIUS - overlap) * np.array(normal)
    steps = 5000
    _, diag = run(setup, spheres([start]), steps)
    speed = np.asarray(diag.momentum) @ downhill / MASS
    t = np.arange(1, steps + 1) * setup.dt
    settled = slice(steps // 2, None)
    assert np.all(np.asarray(diag.contacts)[settled] == 1), "the sphere left the incline"
    return np.polyfit(t[settled], speed[settled], 1)[0]


def test_incline_rolls_below_friction_threshold():
    theta, friction = math.radians(30.0), 0.5
    assert math.tan(theta) < 3.5 * friction
    expected = 5.0 / 7.0 * G * math.sin(theta)
    measured = _incline_acceleration(theta, friction)
    assert abs(measured / expected - 1) < INCLINE, f"rolling: {measured} vs {expected}"


def test_incline_slides_above_friction_threshold():
    theta, friction = math.radians(30.0), 0.1
    assert math.tan(theta) > 3.5 * friction
    expected = G * (math.sin(theta) - friction * math.cos(theta))
    measured = _incline_acceleration(theta, friction)
    assert abs(measured / expected - 1) < INCLINE, f"sliding: {measured} vs {expected}"


def test_tangential_history_survives_table_rebuild():
    """The (0, 2) spring moves from slot 0 to slot 1 when the new partner 1 appears."""
    overlap = 1e-4
    setup = make_setup(n=3, normals=np.zeros((0, 3)), gravity=(0.0, 0.0, 0.0))
    setup = dataclasses.replace(setup, neighbor_list="cells")  # 3 spheres: "auto" takes all
    gap = 2 * RADIUS - overlap
    bodies = spheres([[0.0, 0.0, 0.0], [0.0, gap, 0.0], [gap, 0.0, 0.0]])
    spring = np.array([0.0, 1e-6, 0.0])  # tangent to the (0, 2) normal, x
    partners = jnp.full((3, 4), -1, jnp.int32).at[0, 0].set(2)
    history = jnp.zeros((3, 4, 3)).at[0, 0].set(spring)
    result = bs.contact_forces(setup, bodies, partners, history, jnp.zeros((3, 0, 3)))
    np.testing.assert_array_equal(result.partners[0], [1, 2, -1, -1])
    np.testing.assert_allclose(result.history[0, 1], spring, rtol=0, atol=ROUND_OFF * 1e-6)
    np.testing.assert_array_equal(result.history[0, 0], 0.0)  # the new pair starts unloaded
    G_star = cm.effective_shear_modulus(YOUNG, POISSON, YOUNG, POISSON)
    k_t = cm.mindlin_tangential_stiffness(G_star, RADIUS / 2, overlap)
    # body 2 (j of the pair) feels +k_t xi along y, and nothing else along y
    np.testing.assert_allclose(result.force[2, 1], k_t * spring[1], rtol=ROUND_OFF)
    np.testing.assert_array_equal(result.contact_count, [2, 1, 1])


def test_persistent_pair_keeps_its_spring_through_a_chunk():
    """Two touching spheres sheared slowly (stick): the spring grows step after step."""
    setup = make_setup(n=2, normals=np.zeros((0, 3)), gravity=(0.0, 0.0, 0.0), dt=1e-5)
    gap = 2 * RADIUS - 1e-4
    shear = 1e-4  # m/s, far below slip
    bodies = spheres([[0.0, 0.0, 0.0], [gap, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.0, shear, 0.0]])
    state, _ = run(setup, bodies, 10)
    np.testing.assert_array_equal(state.partners[0, 0], 1)
    # xi gains v_t dt per force evaluation (v_t of body 0 relative to 1 is -shear): 11 of them with
    # initial_state's. Measured 10.48 increments (the spring starts the spheres turning, which
    # lowers v_t); a history dropped at a rebuild would hold at most one increment.
    increments = float(state.history[0, 0, 1]) / (-shear * setup.dt)
    assert 9.0 < increments <= 11.0, f"spring holds {increments} increments of v_t dt"


def test_overflow_reports_cell_and_count():
    positions = [[0.001, 0.001, 0.001], [0.01, 0.01, 0.01]]  # one cell, not touching
    full = make_setup(n=2, capacity=1, normals=np.zeros((0, 3)), gravity=(0.0, 0.0, 0.0))
    full = dataclasses.replace(full, neighbor_list="cells")  # "all" pairs never overflow
    state, _ = run(full, spheres(positions), 3)
    message = bs.overflow_message(full, state)
    cell = int(np.ravel_multi_index((2, 2, 2), full.grid.shape))
    assert message is not None and f"cell {cell}" in message, message
    assert "holds 2 bodies, capacity 1" in message, message
    roomy = make_setup(n=2, capacity=2, normals=np.zeros((0, 3)), gravity=(0.0, 0.0, 0.0))
    roomy = dataclasses.replace(roomy, neighbor_list="cells")
    state, _ = run(roomy, spheres(positions), 3)
    assert bs.overflow_message(roomy, state) is None


def test_vmap_over_scenes_equals_separate_runs():
    setup = make_setup(restitution=0.5)
    heights = [0.0002, 0.0005, 0.001]
    states = [bs.initial_state(setup, spheres([[0.0, 0.0, RADIUS + h]])) for h in heights]
    chunk = bs.make_body_chunk(setup)
    batched = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)
    together, diag = jax.jit(jax.vmap(lambda s: chunk(s, 1000)))(batched)
    single = jax.jit(chunk, static_argnums=1)
    for k, state in enumerate(states):
        alone, _ = single(state, 1000)
        for name in ("position", "velocity", "angular_momentum"):
            np.testing.assert_allclose(
                getattr(together.bodies, name)[k], getattr(alone.bodies, name),
                rtol=0, atol=ROUND_OFF, err_msg=f"scene {k} {name}",
            )  # fmt: skip
        np.testing.assert_allclose(together.plane_history[k], alone.plane_history, atol=ROUND_OFF)
    touched = np.any(np.asarray(diag.contacts) > 0, axis=1)
    assert touched.all(), f"scenes that reached the plane: {touched}"


def test_verlet_list_gives_the_contacts_and_motion_of_the_every_step_rebuild():
    """36 spheres thrown about a box (floor, four walls, friction, float64): the pair table
    kept until a sphere has moved half the skin gives the same motion, bit for bit, as the
    table rebuilt at every step with the same reach, with a small fraction of the rebuilds."""
    skin = 0.4 * RADIUS
    rng = np.random.default_rng(3)
    grid = np.stack(np.meshgrid(*[np.arange(3)] * 2, np.arange(4), indexing="ij"), -1)
    position = (grid.reshape(-1, 3) - [1, 1, 0]) * 2.2 * RADIUS + [0, 0, 1.2 * RADIUS]
    position = position + rng.uniform(-0.05, 0.05, position.shape) * RADIUS
    velocity = rng.uniform(-0.2, 0.2, position.shape)
    half = 3.4 * RADIUS  # the walls leave 0.6 r around the 3 x 3 columns
    normals = [[0, 0, 1], [1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0]]
    points = [[0, 0, 0], [-half, 0, 0], [half, 0, 0], [0, -half, 0], [0, half, 0]]
    base = make_setup(n=len(position), normals=normals, capacity=8)
    base = dataclasses.replace(base, plane_point=np.asarray(points, float))
    verlet = dataclasses.replace(base, skin=skin)
    every_step = dataclasses.replace(base, skin=skin, pair_margin=skin)  # rebuild distance 0
    assert verlet.rebuild_distance == 0.5 * skin and every_step.rebuild_distance == 0.0
    bodies = spheres(position, velocity)
    steps = 1500
    kept, kept_diag = run(verlet, bodies, steps)
    rebuilt, rebuilt_diag = run(every_step, bodies, steps)
    assert int(rebuilt.rebuilds) == steps
    assert 0 < int(kept.rebuilds) < steps // 10, f"{int(kept.rebuilds)} rebuilds"  # 5 measured
    contacts = np.asarray(rebuilt_diag.contacts)
    assert contacts.sum() > 10 * steps, "the spheres keep touching (the test sees contacts)"
    np.testing.assert_array_equal(np.asarray(kept_diag.contacts), contacts)
    for name in ("position", "velocity", "angular_momentum", "orientation"):
        np.testing.assert_array_equal(
            getattr(kept.bodies, name), getattr(rebuilt.bodies, name), err_msg=name
        )
    np.testing.assert_array_equal(kept.plane_history, rebuilt.plane_history)
    # the energy sums the same contacts laid out in other slots: equal to round-off
    np.testing.assert_allclose(kept.elastic_energy, rebuilt.elastic_energy, rtol=1e-12)


def test_diagnostics_every_k_steps_samples_the_same_totals_and_leaves_the_state_bitwise():
    """make_body_chunk(every=3): totals at steps that are multiples of 3 and at the chunk's
    last step, equal to the every-step chunk's there, zeros (sampled False) between; the state
    is the same bit for bit (the totals never feed back)."""
    setup = make_setup(n=2, normals=((0.0, 0.0, 1.0),), dt=5e-5)
    bodies = spheres([[0.0, 0.0, 1.2 * RADIUS], [2.05 * RADIUS, 0.0, RADIUS * 0.99]],
                     [[0.3, 0.0, -0.5], [-0.2, 0.1, 0.0]])  # fmt: skip
    start = bs.initial_state(setup, bodies)
    every_step = jax.jit(bs.make_body_chunk(setup), static_argnums=1)
    sparse = jax.jit(bs.make_body_chunk(setup, every=3), static_argnums=1)
    for first in (start, every_step(start, 2)[0]):  # chunks starting at step 0 and at step 2
        state_a, full = every_step(first, 7)
        state_b, some = sparse(first, 7)
        jax.tree.map(np.testing.assert_array_equal, state_a, state_b)
        steps = int(first.time) + 1 + np.arange(7)
        want = (steps % 3 == 0) | (np.arange(7) == 6)
        np.testing.assert_array_equal(np.asarray(some.sampled), want)
        assert np.asarray(full.sampled).all()
        for name in ("kinetic_energy", "potential_energy", "momentum", "angular_momentum",
                     "contacts", "elastic_energy"):  # fmt: skip
            a, b = np.asarray(getattr(full, name)), np.asarray(getattr(some, name))
            np.testing.assert_array_equal(b[want], a[want], err_msg=name)
            assert not np.any(b[~want]), name
        assert np.asarray(full.contacts).max() > 0, "nothing touched: the totals were trivial"
    with pytest.raises(ValueError, match="every"):
        bs.make_body_chunk(setup, every=0)


def test_bucket_capacities_halve_down_to_the_smallest_bucket():
    assert bs.bucket_capacities(100) == (100,)
    assert bs.bucket_capacities(6400) == (3200, 6400)
    assert bs.bucket_capacities(80_000) == (2500, 5000, 10_000, 20_000, 40_000, 80_000)
    assert len(bs.bucket_capacities(10**7)) == bs.MAX_BUCKETS
    assert bs.bucket_capacities(80_000, buckets=False) == (80_000,)


def test_compacted_pairs_in_a_smaller_bucket_move_the_packing_as_the_full_lists():
    """800 jittered lattice spheres settling in a walled box (the body bench's scene): a third
    of the pair table and a tenth of the sphere-wall pairs are real, so the step evaluates
    the compacted lists over half their length (a lax.switch branch); 400 steps end where
    evaluating the whole lists (the vmapped ensembles' path) ends, the same contacts and
    states to round-off: XLA compiles each length as its own program and may contract
    multiply-adds differently (measured after 400 steps: 1.3e-14 of a position, 1.1e-9 of a
    velocity)."""
    from solver.bench.bodies import _lattice_counts, _spheres, build_scene

    n = 800
    setup, position = build_scene(n, _lattice_counts(n), seed=0)
    state = jax.jit(lambda b: bs.initial_state(setup, b))(_spheres(position))
    pair_sizes = bs.bucket_capacities(n * setup.grid.max_neighbors)
    plane_sizes = bs.bucket_capacities(n * setup.n_planes)
    assert len(pair_sizes) == 2 and len(plane_sizes) == 2
    assert 0 < int(state.slots.pair_count) <= pair_sizes[0]
    assert 0 < int(state.slots.plane_count) <= plane_sizes[0]
    steps = 400
    switched = jax.jit(bs.make_body_chunk(setup, steps), static_argnums=1)(state, steps)[0]
    whole = jax.jit(bs.make_body_chunk(setup, steps, batched=True), static_argnums=1)
    whole = whole(state, steps)[0]
    assert int(switched.rebuilds) >= 1 and int(jnp.sum(switched.contact_count)) > n
    np.testing.assert_array_equal(switched.contact_count, whole.contact_count)
    np.testing.assert_array_equal(switched.partners, whole.partners)
    # a stick-slip switch amplifies round-off: measured 1.1e-9 of the largest velocity
    tolerance = {"position": 1e-11, "orientation": 1e-11, "velocity": 1e-7,
                 "angular_momentum": 1e-7, "force": 1e-7, "history": 1e-7}  # fmt: skip
    for name, share in tolerance.items():
        got = getattr(switched.bodies if hasattr(switched.bodies, name) else switched, name)
        want = np.asarray(getattr(whole.bodies if hasattr(whole.bodies, name) else whole, name))
        np.testing.assert_allclose(got, want, rtol=0, atol=share * np.max(np.abs(want)),
                                   err_msg=name)  # fmt: skip


def test_all_pairs_table_moves_a_small_scene_as_the_cell_list_does():
    """9 spheres thrown about a box (s <= 2 K + 1: "auto" evaluates every pair, built once):
    the same contacts at every step as the Verlet table from the cell list, no rebuild, and
    the same motion to round-off (the two are different programs)."""
    rng = np.random.default_rng(5)
    position = np.stack(np.meshgrid(*[np.arange(3)] * 2, [0], indexing="ij"), -1).reshape(-1, 3)
    position = (position - [1, 1, 0]) * 2.2 * RADIUS + [0, 0, 1.2 * RADIUS]
    velocity = rng.uniform(-0.2, 0.2, position.shape)
    half = 3.4 * RADIUS
    normals = [[0, 0, 1], [1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0]]
    points = [[0, 0, 0], [-half, 0, 0], [half, 0, 0], [0, -half, 0], [0, half, 0]]
    base = make_setup(n=len(position), normals=normals, capacity=8)
    base = dataclasses.replace(base, plane_point=np.asarray(points, float), skin=0.4 * RADIUS)
    assert base.all_pairs and base.table_width == 8
    cells = dataclasses.replace(base, neighbor_list="cells")
    bodies = spheres(position + rng.uniform(-0.05, 0.05, position.shape) * RADIUS, velocity)
    steps = 1000
    every, every_diag = run(base, bodies, steps)
    listed, listed_diag = run(cells, bodies, steps)
    assert int(every.rebuilds) == 0 and int(listed.rebuilds) > 0
    contacts = np.asarray(listed_diag.contacts)
    assert contacts.sum() > 3 * steps, "the spheres keep touching (the test sees contacts)"
    np.testing.assert_array_equal(np.asarray(every_diag.contacts), contacts)
    for name in ("position", "velocity"):
        want = np.asarray(getattr(listed.bodies, name))
        np.testing.assert_allclose(getattr(every.bodies, name), want, rtol=0,
                                   atol=1e-9 * np.max(np.abs(want)), err_msg=name)  # fmt: skip
