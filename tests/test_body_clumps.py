"""Clumps in the rigid-body step (solver/bodies/step.py) and the incline / box_fill cases (float64).

Soft material (E = 1e7 Pa) keeps the Hertz contact a few ms long, so each scene runs in a few
thousand steps.
"""

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import clump, quaternion, rigid_body
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bodies import cases as bc
from solver.bodies import step as bs
from solver.bodies.packings import member_centres
from solver.bodies.scene import scene_from_dict
from solver.config import (
    BoxFillConfig,
    InclineConfig,
    MaterialConfig,
    RunConfig,
)
from solver.errors import ConfigError

RADIUS, DENSITY, YOUNG, POISSON = 0.01, 7800.0, 1.0e7, 0.3
G = 9.81
SKIN = 1.0e-3

# Sums of O(1) products in float64: a few ulps per operation, over up to ~1e3 steps.
ROUND_OFF = 1e-12
# Torque-free rotation by the DLM splitting, 4000 steps of |omega| dt = 1e-4: the kinetic energy
# oscillates at O((omega dt)^2) (measured 1.9e-11); L is untouched by the drift (exact).
ROTOR_ENERGY = 1e-8
# Incline accelerations of the clump (two r = 1 cm spheres, centres r apart) fitted over the
# second half of a 0.1 s run: rolling leaves the residual oscillation of the tangential springs
# (measured -3.8e-4 at 30 deg, mu 0.5); sliding is a constant Coulomb force (measured -3.3e-14).
INCLINE_ACCELERATION = 0.02
# A clump at rest at its equilibrium overlap on a level plane: only round-off drives it.
REST_SPEED = 1e-9  # m/s, and rad/s times the radius
REST_DRIFT = 1e-10  # m over the run


def _material(friction=0.5, restitution=0.5, young=YOUNG, density=DENSITY):
    return MaterialConfig(young, POISSON, density, restitution, friction)


def _run_config(case) -> RunConfig:
    # build_body_case reads only case and seed; the rest belongs to the app
    return RunConfig(case, None, None, None, None, None, 1, 0, {})


def _dumbbell(position, velocity=(0.0, 0.0, 0.0), omega=(0.0, 0.0, 0.0), half=0.75 * RADIUS):
    """A clump of two equal spheres RADIUS at +-half along the body x axis (overlapping when
    half < RADIUS), as Bodies plus its offsets (2, 3) in the principal frame."""
    mass, moments, rotation, offsets = clump.to_principal(
        [RADIUS, RADIUS], [[-half, 0.0, 0.0], [half, 0.0, 0.0]], DENSITY
    )
    moments = np.asarray(moments)
    angular_momentum = np.asarray(  # L = R diag(I) R^T omega, R = rotation (body = world here)
        quaternion.rotate(rotation, moments * quaternion.rotate_inverse(rotation, omega))
    )
    bodies = Bodies(
        position=jnp.asarray([position], jnp.float64),
        orientation=jnp.asarray([rotation], jnp.float64),
        velocity=jnp.asarray([velocity], jnp.float64),
        angular_momentum=jnp.asarray([angular_momentum]),
        prescribed_angular_velocity=jnp.zeros((1, 3)),
        inverse_mass=jnp.array([1.0 / mass]),
        inverse_inertia=jnp.asarray([1.0 / moments]),
        kinematic=jnp.zeros((1,), bool),
    )
    return bodies, np.asarray(offsets), mass


def _sphere(position, velocity=(0.0, 0.0, 0.0)):
    mass = 4.0 / 3.0 * math.pi * RADIUS**3 * DENSITY
    bodies = Bodies(
        position=jnp.asarray([position], jnp.float64),
        orientation=jnp.asarray([[1.0, 0.0, 0.0, 0.0]]),
        velocity=jnp.asarray([velocity], jnp.float64),
        angular_momentum=jnp.zeros((1, 3)),
        prescribed_angular_velocity=jnp.zeros((1, 3)),
        inverse_mass=jnp.array([1.0 / mass]),
        inverse_inertia=jnp.full((1, 3), 1.0 / (0.4 * mass * RADIUS**2)),
        kinematic=jnp.zeros((1,), bool),
    )
    return bodies, mass


def _setup(member_body, offsets, gravity=(0.0, 0.0, -G), dt=2e-5, normals=()):
    s = len(member_body)
    ones = np.ones(s)
    grid = CellGrid.covering((-0.1, -0.1, -0.1), (0.1, 0.1, 0.1), 2.5 * RADIUS, 8, 8)
    return bs.BodySetup(
        radius=RADIUS * ones,
        young=YOUNG * ones,
        poisson=POISSON * ones,
        restitution=0.5 * ones,
        friction=0.3 * ones,
        rolling_friction=0.0 * ones,
        grid=grid,
        dt=dt,
        skin=SKIN,
        gravity=gravity,
        plane_point=np.zeros((len(normals), 3)),
        plane_normal=np.asarray(normals, dtype=np.float64).reshape(-1, 3),
        member_body=np.asarray(member_body),
        member_offset=np.asarray(offsets, dtype=np.float64),
    )


def _concat(*bodies: Bodies) -> Bodies:
    return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *bodies)


def _run(setup, bodies, steps):
    chunk = jax.jit(bs.make_body_chunk(setup), static_argnums=1)
    return chunk(bs.initial_state(setup, bodies), steps)


def test_setup_counts_bodies_spheres_and_bounding_radius():
    setup = _setup([0, 0, 1], [[-0.005, 0, 0], [0.005, 0, 0], [0, 0, 0]])
    assert (setup.n_bodies, setup.n_spheres, setup.spheres_only) == (2, 3, False)
    np.testing.assert_allclose(setup.bounding_radius, [0.015, RADIUS], rtol=ROUND_OFF)
    with pytest.raises(ValueError, match="body 1 has no sphere"):
        _setup([0, 2], np.zeros((2, 3)))


COLLISION_STEPS = 4000


@pytest.fixture(scope="module")
def collision():
    """One run (one compile), no gravity: body 0, a spinning dumbbell of overlapping members in
    free flight far from the rest; body 1, a dumbbell of touching members lying across its path,
    hitting sphere 2 off-centre with its lower member."""
    free, free_offsets, free_mass = _dumbbell(
        [0.05, 0.05, 0.05], [0.1, -0.05, 0.02], omega=[3.0, -5.0, 8.0], half=0.6 * RADIUS
    )
    dumbbell, offsets, mass = _dumbbell([-0.03, 0.006, 0.0], velocity=[0.5, 0.0, 0.0], half=RADIUS)
    # the dumbbell lies along its principal axis 0; turn it to lie along y (across the path)
    turn = jnp.asarray([math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)])
    dumbbell = dumbbell.replace(orientation=quaternion.multiply(turn, dumbbell.orientation))
    sphere, sphere_mass = _sphere([0.0, 0.0, 0.0], velocity=[-0.2, 0.0, 0.0])
    setup = _setup(
        [0, 0, 1, 1, 2],
        np.vstack([free_offsets, offsets, np.zeros(3)]),
        gravity=(0.0, 0.0, 0.0),
        dt=1e-5,
    )
    bodies = _concat(free, dumbbell, sphere)
    state, diag = _run(setup, bodies, COLLISION_STEPS)
    masses = np.array([free_mass, mass, sphere_mass])
    return setup, bodies, state, jax.tree_util.tree_map(np.asarray, diag), masses


def test_spinning_clump_in_free_flight_is_untouched(collision):
    """Uniform motion and constant L of body 0; its overlapping members never interact, so no
    contact is counted until bodies 1 and 2 meet."""
    setup, bodies, state, diag, masses = collision
    t = COLLISION_STEPS * setup.dt
    x0, v0 = np.asarray(bodies.position[0]), np.asarray(bodies.velocity[0])
    np.testing.assert_allclose(state.bodies.position[0], x0 + v0 * t, rtol=0, atol=ROUND_OFF)
    np.testing.assert_array_equal(state.bodies.angular_momentum[0], bodies.angular_momentum[0])
    np.testing.assert_array_equal(state.force[0], 0.0)
    np.testing.assert_array_equal(state.torque[0], 0.0)
    first = int(np.argmax(diag.contacts > 0))
    assert first > 0 and not np.any(diag.contacts[:first]), "contacts before the collision"
    assert int(state.contact_count[0]) == 0

    def spin(b):
        kinetic = np.asarray(rigid_body.kinetic_energy(b))[0]
        return kinetic - 0.5 * masses[0] * np.sum(np.asarray(b.velocity[0]) ** 2)

    drift = abs(spin(state.bodies) / spin(bodies) - 1.0)
    assert drift < ROTOR_ENERGY, f"rotational energy drift {drift}"


def test_dumbbell_hits_sphere_off_centre_momentum_conserved(collision):
    """An off-centre hit: linear and angular momentum (about the origin) are exchanged in equal
    and opposite parts, so the totals hold to round-off while the dumbbell starts turning."""
    _, bodies, state, diag, masses = collision
    touching = diag.contacts > 0
    assert touching.any() and not touching[-1], "the collision did not happen or did not end"
    momentum0 = np.sum(masses[:, None] * np.asarray(bodies.velocity), axis=0)
    scale = masses[1] * 0.5
    np.testing.assert_allclose(diag.momentum, np.tile(momentum0, (COLLISION_STEPS, 1)), rtol=0,
                               atol=ROUND_OFF * scale)  # fmt: skip
    angular = diag.angular_momentum
    np.testing.assert_allclose(angular, np.tile(angular[0], (COLLISION_STEPS, 1)), rtol=0,
                               atol=ROUND_OFF * scale * 0.03)  # fmt: skip
    spin = np.asarray(state.bodies.angular_momentum[1] - bodies.angular_momentum[1])
    assert abs(spin[2]) > 1e-3 * scale * 0.03, f"the off-centre hit did not turn it: {spin}"
    kinetic = diag.kinetic_energy
    assert kinetic[-1] < kinetic[0], "a collision with restitution 0.5 must lose energy"


def test_scene_clump_members_start_where_the_scene_puts_them():
    """setup_from_scene's principal-frame offsets and initial_bodies' orientation put every
    member at the scene's centre with the velocity v + w x (x_k - X)."""
    q = np.array([0.9, 0.2, -0.3, 0.25])
    scene = scene_from_dict(
        {
            "materials": {
                "m": {
                    "young": 1e7,
                    "poisson": 0.3,
                    "density": 1000.0,
                    "restitution": 0.5,
                    "friction": 0.3,
                }
            },  # fmt: skip
            "bodies": [
                {"shape": "plane", "material": "m", "point": [0, 0, 0], "normal": [0, 0, 1]},
                {"shape": "sphere", "material": "m", "radius": 0.01, "position": [0.1, 0, 0.1]},
                {
                    "shape": "clump",
                    "material": "m",
                    "spheres": [
                        {"radius": 0.01, "offset": [0.004, 0.0, 0.0]},
                        {"radius": 0.008, "offset": [-0.004, 0.006, 0.0]},
                        {"radius": 0.006, "offset": [0.0, 0.0, 0.01]},
                    ],
                    "inertia": [[3e-7, 1e-8, 0], [1e-8, 4e-7, 2e-8], [0, 2e-8, 5e-7]],
                    "position": [0.0, 0.0, 0.1],
                    "orientation": q.tolist(),
                    "velocity": [0.1, 0.2, -0.3],
                    "angular_velocity": [1.0, -2.0, 3.0],
                },
            ],
        }
    )
    arrays, _ = scene.arrays()
    grid = CellGrid.covering((-0.1,) * 3, (0.2,) * 3, 0.03, 8, 8)
    setup = bc.setup_from_scene(scene, grid, 1e-5, 1e-3, (0.0, 0.0, -G))
    bodies = bc.initial_bodies(arrays)
    assert (setup.n_bodies, setup.n_spheres, setup.n_planes) == (2, 4, 1)
    omega = np.asarray(rigid_body.angular_velocity(bodies))
    centres, velocities = clump.sphere_kinematics(
        bodies.position, bodies.velocity, bodies.orientation, omega,
        setup.member_body, setup.member_offset,
    )  # fmt: skip
    expected, _, _ = member_centres(scene)
    np.testing.assert_allclose(centres, expected, rtol=0, atol=ROUND_OFF)
    np.testing.assert_allclose(omega, arrays.angular_velocity, rtol=0, atol=ROUND_OFF)
    arm = expected - arrays.position[arrays.member_body]
    v = arrays.velocity[arrays.member_body] + np.cross(arrays.angular_velocity[arrays.member_body],
                                                       arm)  # fmt: skip
    np.testing.assert_allclose(velocities, v, rtol=0, atol=ROUND_OFF)
    np.testing.assert_allclose(setup.bounding_radius[1], np.max(
        np.linalg.norm(arm[1:], axis=1) + arrays.member_radius[1:]), rtol=ROUND_OFF)  # fmt: skip


def test_stable_time_step_of_clumps():
    """A touching dumbbell keeps a lone member's step (its share of the mass is the member's and
    the rotation adds less); overlapping members lower it; moments are required for clumps."""
    member = _setup([0], np.zeros((1, 3)))
    member_mass = 4.0 / 3.0 * math.pi * RADIUS**3 * DENSITY
    lone = bs.stable_time_step(member, np.array([member_mass]))
    for half, relation in ((RADIUS, "equal"), (0.5 * RADIUS, "below")):
        _, offsets, mass = _dumbbell([0, 0, 0], half=half)
        moments = np.asarray(clump.to_principal([RADIUS] * 2, [[-half, 0, 0], [half, 0, 0]],
                                                DENSITY)[1])  # fmt: skip
        setup = _setup([0, 0], offsets)
        step = bs.stable_time_step(setup, np.array([mass]), moments[None])
        if relation == "equal":
            assert step == pytest.approx(lone, rel=ROUND_OFF)
        else:
            assert step < lone
    with pytest.raises(ValueError, match="principal moments"):
        bs.stable_time_step(setup, np.array([mass]))


# --- incline with a clump ------------------------------------------------------------------------


def _incline_case(angle, friction, shape="clump", duration=0.1):
    config = InclineConfig(
        radius=RADIUS,
        material=_material(friction=friction, density=1100.0),
        angle=angle,
        gravity=G,
        contact_model="hertz",
        stiffness=1e5,
        duration=duration,
        dt=None,
        output_every=None,
        shape=shape,
        clump_separation=0.5,
    )
    return bc.build_body_case(_run_config(config))


def _run_case(case, outputs=20, chunk=None, params=None, bodies=None):
    """Run a built case like the app does (outputs at equal steps) and call its diagnose.

    chunk: a jitted chunk of a case with the same static setup (reused to save a compile);
    params, bodies: replace the case's ContactParams and initial bodies.
    """
    setup = case.setup
    steps = case.default_steps // outputs
    if chunk is None:
        chunk = jax.jit(bs.make_body_chunk(setup), static_argnums=1)
    params = setup.params() if params is None else params
    state = bs.initial_state(setup, case.bodies if bodies is None else bodies, params)
    first = bs.diagnostics(setup, state, params)
    rows = [jax.tree_util.tree_map(lambda a: np.asarray(a)[None], first)]
    times, positions, orientations, velocities = [0.0], [], [], []

    def keep(state):
        positions.append(np.asarray(state.bodies.position))
        orientations.append(np.asarray(state.bodies.orientation))
        velocities.append(np.asarray(state.bodies.velocity))

    keep(state)
    for k in range(outputs):
        state, diag = chunk(state, steps, params)
        rows.append(jax.tree_util.tree_map(np.asarray, diag))
        times.append((k + 1) * steps * setup.dt)
        keep(state)
    assert bs.overflow_message(setup, state) is None
    table = bs.BodyDiagnostics(*(np.concatenate(column) for column in zip(*rows, strict=True)))
    series = {
        "time": np.arange(table.kinetic_energy.size) * setup.dt,
        "kinetic": table.kinetic_energy,
        "potential": table.potential_energy,
        "elastic": table.elastic_energy,
        "momentum": table.momentum,
        "angular_momentum": table.angular_momentum,
        "contacts": table.contacts,
        "orientation": np.array(orientations),
        "velocity": np.array(velocities),
    }
    return case.diagnose(np.array(times), np.array(positions), series), state, series


@pytest.fixture(scope="module")
def incline_chunk():
    """The compiled chunk of the 30 degree clump incline; every incline test below has the same
    static setup (dt, grid, model) and differs only in traced values (friction, plane, bodies)."""
    case = _incline_case(30.0, 0.5)
    return case, jax.jit(bs.make_body_chunk(case.setup), static_argnums=1)


@pytest.mark.parametrize(
    ("angle", "friction", "regime"), [(30.0, 0.5, "rolling"), (30.0, 0.1, "sliding")]
)
def test_incline_clump_acceleration_matches_regime(incline_chunk, angle, friction, regime):
    compiled_case, chunk = incline_chunk
    case = _incline_case(angle, friction)
    assert case.setup.dt == compiled_case.setup.dt and case.setup.grid == compiled_case.setup.grid
    assert case.setup.n_bodies == 1 and case.setup.n_spheres == 2
    diag, _, _ = _run_case(case, chunk=chunk, params=case.setup.params())
    assert diag["regime"] == regime and diag["shape"] == "clump"
    # the overlapping pair is not a sphere: I_y / (m r^2) above 2/5, from kernels/clump
    assert 0.41 < diag["inertia_ratio"] < 0.45, diag
    error = diag["acceleration_relative_error"]
    assert abs(error) < INCLINE_ACCELERATION, diag
    assert diag["lateral_offset_max_m"] < 1e-9, diag


def test_clump_resting_on_a_level_plane_stays_put(incline_chunk):
    """The incline's clump on a level plane z = 0 at the Hertz equilibrium overlap of each sphere
    (half the weight on each): nothing moves beyond round-off."""
    case, chunk = incline_chunk
    mass = float(case.mass[0])
    e_star = YOUNG / (2.0 * (1.0 - POISSON**2))
    overlap = (0.5 * mass * G / (4.0 / 3.0 * e_star * math.sqrt(RADIUS))) ** (2.0 / 3.0)
    start = jnp.asarray([[0.0, 0.0, RADIUS - overlap]])
    bodies = case.bodies.replace(position=start)
    params = case.setup.params().replace(plane_normal=jnp.asarray([[0.0, 0.0, 1.0]]))
    _, state, series = _run_case(case, chunk=chunk, params=params, bodies=bodies)
    drift = float(np.max(np.abs(np.asarray(state.bodies.position - start))))
    speed = float(np.max(np.abs(series["velocity"])))
    omega = np.asarray(rigid_body.angular_velocity(state.bodies)) * RADIUS
    assert np.all(series["contacts"] == 2), "both spheres should touch the plane throughout"
    assert drift < REST_DRIFT and speed < REST_SPEED, (drift, speed)
    assert np.max(np.abs(omega)) < REST_SPEED, f"the clump spun up: {omega}"


def test_incline_bad_shape_is_a_config_error():
    import yaml

    from solver.config import from_dict

    case = yaml.safe_load((Path(__file__).parents[1] / "configs/case/incline.yaml").read_text())
    with pytest.raises(ConfigError, match=r"^case\.shape = 'cube'"):
        from_dict({"case": case | {"shape": "cube"}})
    with pytest.raises(ConfigError, match=r"^case\.clump_separation = 1\.5"):
        from_dict({"case": case | {"clump_separation": 1.5}})


# --- box_fill ------------------------------------------------------------------------------------

# 50 spheres (r = 5 mm +- 10 %) dropped from up to 0.1 m, 0.3 s (7700 steps), seed 0. Measured:
# kinetic energy left 1.0e-3 of m g r of the whole bed (settled); largest overlap 0.68 % of the
# radius; packing fraction 0.536 (a loose random bed with friction 0.5).
BOX_SETTLED = 0.02
BOX_OVERLAP = 0.03
# Kinetic + potential + normal-spring energy may only fall, but not to round-off: velocity
# Verlet sees a contact start or end between two steps, so the work of its first and last
# partial step is off by O(F delta) with delta < v dt (a release gains what an onset lost).
# Measured: largest one-step rise, and largest rise above the lowest total so far, 1.3e-5 of the
# potential energy released.
BOX_ENERGY_RISE = 1e-4


def _box_case(**changes):
    values = dict(
        count=50,
        radius=0.005,
        radius_spread=0.1,
        material=_material(friction=0.5, density=2500.0),
        box=(0.04, 0.04, 0.1),
        fill_from=0.3,
        gravity=G,
        contact_model="hertz",
        stiffness=1e5,
        duration=0.3,
        dt=None,
        output_every=None,
    )
    return BoxFillConfig(**(values | changes))


def test_box_fill_settles_inside_without_gaining_energy():
    case = bc.build_body_case(_run_config(_box_case()))
    diag, state, series = _run_case(case)
    assert diag["spheres"] == 50 and diag["escaped"] == 0 and diag["escaped_any_output"] == 0
    assert diag["kinetic_over_mgr"] < BOX_SETTLED, diag
    assert diag["overlap_max_relative"] < BOX_OVERLAP, diag
    assert diag["energy_series"] == "kinetic+potential+elastic"
    assert diag["energy_rise_max_over_released"] < BOX_ENERGY_RISE, diag
    assert diag["energy_regained_max_over_released"] < BOX_ENERGY_RISE, diag
    total = series["kinetic"] + series["potential"] + series["elastic"]
    assert total[-1] < total[0] - 0.9 * diag["potential_released_J"], "energy was not dissipated"
    assert 0.45 < diag["packing_fraction"] < 0.65, diag


def test_box_fill_too_many_spheres_names_count():
    with pytest.raises(ConfigError, match=r"^case\.count = 5000"):
        bc.build_body_case(_run_config(_box_case(count=5000)))


@pytest.mark.parametrize(
    ("key", "value"),
    [("radius_spread", 0.5), ("fill_from", 1.0), ("box", [0.1, 0.0, 0.1]), ("count", 0)],
)
def test_box_fill_bad_values_name_the_key(key, value):
    import yaml

    from solver.config import from_dict

    case = yaml.safe_load((Path(__file__).parents[1] / "configs/case/box_fill.yaml").read_text())
    with pytest.raises(ConfigError, match=rf"^case\.{key} = "):
        from_dict({"case": case | {key: value}})
