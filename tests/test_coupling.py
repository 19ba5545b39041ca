"""Bodies moving in the fluid (PSM coupling): the kernels and the coupled step, float64.

Each test runs the coupled fluid chunk (solver.fluid.step.make_coupled_chunk with
solver.coupling.step.PsmCoupling) on a small periodic box in lattice units (dx = dt = 1,
fluid density 1), so the body's SI values are lattice values and the checks are exact algebra.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from solver_cli import FAST_COMPILE_OPTIONS

from kernels import coupling as psm
from kernels.lattices import D3Q19
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.api import compose_config
from solver.app import enable_precision
from solver.bodies import step as bs
from solver.coupling.step import PsmCoupling
from solver.errors import ConfigError
from solver.fluid.setup import BodyForce, FluidSetup
from solver.fluid.step import SINGLE, initial_state, make_coupled_chunk, make_geometry

N = 14  # periodic box of N^3 cells
RADIUS = 3.0  # cells
SPHERE_DENSITY = 1.5  # over the fluid's
TAU = 0.8
# float64 sums over ~3,000 cells and 19 directions: differences of a few 1e-16 per term
ROUND_OFF = 1e-12


@pytest.fixture(autouse=True)
def _float64():
    enable_precision("float64")


def fluid_setup() -> FluidSetup:
    return FluidSetup(lattice=D3Q19, shape=(N, N, N), omega=1.0 / TAU, dtype="float64")


def body_setup(count: int, gravity=(0.0, 0.0, 0.0)) -> bs.BodySetup:
    ones = np.ones(count)
    grid = CellGrid.covering((-4.0,) * 3, (N + 4.0,) * 3, 2 * RADIUS + 1.0, 4, 4)
    return bs.BodySetup(
        radius=RADIUS * ones, young=1e3 * ones, poisson=0.3 * ones, restitution=0.5 * ones,
        friction=0.3 * ones, rolling_friction=0.0 * ones, grid=grid, dt=1.0, skin=1.0,
        gravity=gravity,
    )  # fmt: skip


def spheres(position, velocity) -> Bodies:
    position = np.atleast_2d(np.asarray(position, dtype=np.float64))
    n = position.shape[0]
    mass = SPHERE_DENSITY * 4.0 / 3.0 * math.pi * RADIUS**3
    return Bodies(
        position=jnp.asarray(position),
        orientation=jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0]), (n, 1)),
        velocity=jnp.asarray(np.atleast_2d(velocity), dtype=jnp.float64),
        angular_momentum=jnp.zeros((n, 3)),
        prescribed_angular_velocity=jnp.zeros((n, 3)),
        inverse_mass=jnp.full((n,), 1.0 / mass),
        inverse_inertia=jnp.full((n, 3), 1.0 / (0.4 * mass * RADIUS**2)),
        kinematic=jnp.zeros((n,), bool),
    )


def run(bodies: Bodies, fluid_velocity, steps: int, gravity=(0.0, 0.0, 0.0), average=True):
    """(fluid state, coupled bodies, track (steps, n, 9), coupling) after ``steps`` coupled
    steps of spheres."""
    n = bodies.position.shape[0]
    return run_with(body_setup(n, gravity), bodies, fluid_velocity, steps, average=average)


def run_with(
    setup_bodies: bs.BodySetup, bodies: Bodies, fluid_velocity, steps: int, volume=None,
    average=True, setup: FluidSetup | None = None,
):  # fmt: skip
    """``run`` for any body set-up (clumps: ``volume`` (n,) cells^3 each displaces)."""
    setup = fluid_setup() if setup is None else setup
    coupling = PsmCoupling(
        bodies=setup_bodies, substeps=1, dx=1.0, dt=1.0, origin=(0.0, 0.0, 0.0),
        fluid_density=1.0, average_force=average, tracked=setup_bodies.n_bodies, volume=volume,
    )  # fmt: skip
    velocity = np.broadcast_to(np.asarray(fluid_velocity, float)[:, None, None, None], (3, N, N, N))
    state = initial_state(setup, np.ones((N, N, N)), velocity)
    extra = coupling.initial(bs.initial_state(coupling.bodies, bodies))
    # a few steps on 14^3 cells: compiling is nearly all their time, and LLVM's optimisations
    # double it; the algebra checked here is the same at -O0 (IEEE, no fast-math)
    chunk = jax.jit(
        make_coupled_chunk(setup, SINGLE, coupling),
        static_argnums=2,
        compiler_options=FAST_COMPILE_OPTIONS,
    )
    state, _, extra, track = chunk(state, make_geometry(setup), steps, extra)
    return state, extra, np.asarray(track), coupling


def fluid_momentum(state) -> np.ndarray:
    f = np.asarray(state.populations).reshape(D3Q19.q, -1).sum(axis=1)
    return D3Q19.c.astype(float).T @ f


def test_sphere_fraction_reproduces_the_volume_and_the_stencil_holds_it():
    centre = jnp.array([[7.31, 6.87, 7.02]])
    radius = jnp.array([RADIUS])
    size = psm.stencil_size(RADIUS)
    base = psm.stencil_base(centre, radius)
    cells = base[:, None, :] + jnp.asarray(psm.stencil_offsets(size, 3))[None]
    eps = psm.sphere_fraction(centre, radius, cells)
    volume = 4.0 / 3.0 * math.pi * RADIUS**3
    # the linear cover overestimates a ball of radius 3 cells by 2.8% (curvature, O(1/r^2))
    assert abs(float(eps.sum()) / volume - 1.0) < 0.03
    # a stencil two cells wider on every side finds no more cover: none was cut off
    wide = base[:, None, :] - 2 + jnp.asarray(psm.stencil_offsets(size + 4, 3))[None]
    assert float(psm.sphere_fraction(centre, radius, wide).sum()) == pytest.approx(
        float(eps.sum()), rel=1e-14
    )


@pytest.mark.parametrize("radii", [[2.0], [1.5, 3.0, 4.25]])
def test_compact_stencil_holds_every_covered_cell(radii):
    """The compact stencil (about half the cube) loses no cover for any position of the
    centre in its base cell, for every radius it was built for."""
    size = psm.stencil_size(max(radii))
    compact = psm.stencil_offsets(size, 3, radii)
    assert len(compact) < 0.6 * size**3
    rng = np.random.default_rng(1)
    centre = jnp.asarray(rng.uniform(10.0, 11.0, (400, 3)))
    radius = jnp.asarray(rng.choice(radii, 400))
    base = psm.stencil_base(centre, radius)
    cube = base[:, None, :] + jnp.asarray(psm.stencil_offsets(size, 3))[None]
    kept = base[:, None, :] + jnp.asarray(compact)[None]
    full = psm.sphere_fraction(centre, radius, cube).sum(axis=1)
    assert float(full.min()) > 0.9 * 4.0 / 3.0 * math.pi * min(radii) ** 3
    np.testing.assert_allclose(psm.sphere_fraction(centre, radius, kept).sum(axis=1), full,
                               rtol=1e-13)  # fmt: skip


@pytest.mark.parametrize("radii", [[2.0], [1.5, 3.0, 4.25]])
def test_cover_capacity_holds_every_covered_cell(radii):
    """No sphere covers more cells than the slots the coupled step gives it, wherever its
    centre lies; the slots are well below the stencil's cells."""
    size = psm.stencil_size(max(radii))
    offsets = psm.stencil_offsets(size, 3, radii)
    capacity = psm.cover_capacity(radii, len(offsets))
    assert capacity < 0.8 * len(offsets)
    rng = np.random.default_rng(2)
    centre = jnp.asarray(rng.uniform(10.0, 11.0, (2000, 3)))
    radius = jnp.asarray(rng.choice(radii, 2000))
    cells = psm.stencil_base(centre, radius)[:, None, :] + jnp.asarray(offsets)[None]
    covered = np.asarray(psm.sphere_fraction(centre, radius, cells) > 0).sum(axis=1)
    assert covered.max() <= capacity
    assert covered.max() >= 0.9 * capacity, "the bound is a few cells above the most covered"


def test_the_blend_on_the_covered_cells_equals_the_blend_over_the_grid(monkeypatch):
    """The coupled step blends on a list of the covered cells (slots) or over every cell
    (``SLOTS_PER_CELL`` chooses); both give the same fluid and bodies to round-off: three
    spheres, two of them with overlapping stencils, one across the periodic edges, moving
    through a moving fluid with a body force."""
    from solver.coupling import step as coupling_step

    position = [[7.3, 7.1, 6.9], [7.2, 7.3, 13.4], [0.2, 13.7, 6.5]]
    velocity = [[0.01, -0.02, 0.005], [0.0, 0.01, -0.01], [-0.01, 0.0, 0.02]]
    runs = {}
    for share in (0.0, 1e9):
        monkeypatch.setattr(coupling_step, "SLOTS_PER_CELL", share)
        setup = dataclasses.replace(fluid_setup(), body_force=BodyForce((1e-5, 0.0, -2e-5)))
        runs[share] = run_with(body_setup(3), spheres(position, velocity), (0.02, 0.01, 0.0),
                               4, setup=setup)  # fmt: skip
    (grid_state, _, grid_track, _), (slot_state, _, slot_track, _) = runs[0.0], runs[1e9]
    np.testing.assert_allclose(slot_state.populations, grid_state.populations, rtol=0,
                               atol=ROUND_OFF)  # fmt: skip
    np.testing.assert_allclose(slot_track, grid_track, rtol=0, atol=ROUND_OFF)
    assert np.abs(grid_track[:, :, 6:9]).min(axis=0).max() > 1e-6, "the spheres feel a force"


def test_psm_weight_limits():
    eps = jnp.array([0.0, 0.5, 1.0])
    weight = np.asarray(psm.psm_weight(eps, TAU))
    assert weight[0] == 0.0 and weight[2] == 1.0 and 0.0 < weight[1] < 0.5


def test_the_gathered_cell_force_per_cover_is_the_blends_force_and_materialising_keeps_values():
    """cover_force on gathered 4-wide rows equals psm_blend's cell force over the cell's total
    cover (the body side of the coupled step against the grid side), with a body force and
    cells left uncovered; materialised() changes neither values nor gradients."""
    from kernels.materialise import materialised
    from solver.fluid.collide import moment_table

    rng = np.random.default_rng(3)
    shape, tau, force = (4, 5, 6), 0.8, (1e-5, -2e-5, 3e-5)
    w, q = np.asarray(D3Q19.w), D3Q19.q
    f = [jnp.asarray(w[i] * (1 + 0.05 * rng.standard_normal(shape)), jnp.float32) for i in range(q)]
    eps_total = np.where(rng.random(shape) < 0.3, 0.0, rng.uniform(0.05, 1.8, shape))
    u_s = 0.02 * rng.standard_normal((3, *shape))
    table = jnp.asarray(np.stack([eps_total, *(eps_total * u_s)], -1).reshape(-1, 4), jnp.float32)
    both = moment_table(D3Q19, f, force, np.float32)
    rho, u = both[..., 0], [both[..., 1 + a] for a in range(3)]
    covered = np.where(eps_total > 0, eps_total, 1.0)
    weight = psm.psm_weight(jnp.asarray(eps_total, jnp.float32), tau)
    u_cell = [jnp.asarray(u_s[a] * eps_total / covered, jnp.float32) for a in range(3)]
    _, cell_force = psm.psm_blend(D3Q19, f, f, rho, u, weight, u_cell, force)
    flat = jnp.asarray(rng.integers(0, math.prod(shape) + 1, size=(7, 11)), jnp.int32)
    rows = (psm.gather_rows(both.reshape(-1, 4), flat), psm.gather_rows(table, flat))
    got = psm.cover_force(*materialised(rows, jnp.int32(0)), tau, "noble_torczynski", force)
    inside = np.asarray(flat) < math.prod(shape)
    for a in range(3):
        want = (np.asarray(cell_force[a]) / covered).reshape(-1)
        want = np.where(inside, want[np.minimum(np.asarray(flat), want.size - 1)], 0.0)
        np.testing.assert_allclose(np.asarray(got[a]), want, rtol=2e-6, atol=1e-12)
    x = jnp.linspace(0.0, 1.0, 5)
    np.testing.assert_array_equal(materialised(x, jnp.int32(2)), x)
    grad = jax.grad(lambda y: jnp.sum(materialised(y, jnp.int32(2)) ** 2))(x)
    np.testing.assert_allclose(grad, 2 * x)


def test_a_sphere_at_rest_in_fluid_at_rest_feels_only_buoyancy():
    g = 1e-5
    bodies = spheres([[7.3, 7.1, 6.9]], [[0.0, 0.0, 0.0]])
    _, extra, track, _ = run(bodies, (0.0, 0.0, 0.0), 1, gravity=(0.0, 0.0, -g))
    assert np.abs(track[0, 0, 6:9]).max() < ROUND_OFF, "a hydrodynamic force at rest"
    expected = -(1.0 - 1.0 / SPHERE_DENSITY) * g  # (m - rho_f V) g / m over one step
    assert track[0, 0, 5] == pytest.approx(expected, rel=1e-12)


def test_a_sphere_moving_with_a_uniform_flow_feels_no_drag():
    u0 = (0.03, -0.01, 0.02)
    bodies = spheres([[7.3, 7.1, 6.9]], [u0])
    _, _, track, _ = run(bodies, u0, 6)
    assert np.abs(track[:, 0, 6:9]).max() < ROUND_OFF, "drag in a uniform flow (Galilean check)"
    assert np.abs(track[:, 0, 3:6] - np.array(u0)).max() < ROUND_OFF


@pytest.mark.parametrize("average", [False, True])
def test_fluid_plus_body_momentum_is_conserved_in_a_periodic_box(average):
    """A sphere launched into fluid at rest: what it loses, the fluid gains, step for step.

    Velocity Verlet gives the body half of the last step's drive later (telescoping), so after
    N steps the total differs from the start by exactly -D_N / 2 (D: the drive), and the
    averaging holds back another -F_N / 2 (D_N = (F_N + F_{N-1}) / 2 then); that remainder is
    added back before the comparison, which is then exact to round-off."""
    v0 = np.array([0.04, 0.0, 0.02])
    bodies = spheres([[7.3, 7.1, 6.9]], [v0])
    steps = 30
    state, extra, track, coupling = run(bodies, (0.0, 0.0, 0.0), steps, average=average)
    mass = 1.0 / float(bodies.inverse_mass[0])
    before = mass * v0  # the fluid starts at rest
    after = fluid_momentum(state) + mass * np.asarray(extra.state.bodies.velocity[0])
    force = track[:, 0, 6:9]
    drive = 0.5 * (force[-1] + force[-2]) if average else force[-1]
    lag = -0.5 * drive - (0.5 * force[-1] if average else 0.0)
    assert np.abs(after - before - lag).max() < ROUND_OFF * np.abs(before).max() * 100
    # and the drag slowed the sphere: it lost momentum to the fluid
    speed = np.linalg.norm(track[:, 0, 3:6], axis=1)
    assert speed[-1] < 0.5 * np.linalg.norm(v0)


def test_coupled_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="coupling.method"):
        compose_config(["case=settling_sphere", "coupling=none"])
    with pytest.raises(ConfigError, match="coupling.method"):
        compose_config(["case=cavity", "coupling=psm"])
    with pytest.raises(ConfigError, match="fluid.lattice"):
        compose_config(["case=settling_sphere", "fluid=d2q9"])


def test_lubrication_matches_brenner_and_is_equal_and_opposite():
    mu, cutoff, radius = 0.1, 1e-3, 3e-3
    min_gap = jnp.full((2,), 1e-6)
    radii = jnp.full((2,), radius)
    # a sphere approaching a plane z = 0 at 0.2 m/s with a gap of 0.25 mm
    position = jnp.array([[0.0, 0.0, radius + 2.5e-4], [0.0, 0.0, 1.0]])
    velocity = jnp.array([[0.0, 0.0, -0.2], [0.0, 0.0, 0.0]])
    force = psm.lubrication_planes(
        position, velocity, radii, jnp.zeros((1, 3)), jnp.array([[0.0, 0.0, 1.0]]),
        jnp.zeros((1, 3)), mu, cutoff, min_gap,
    )  # fmt: skip
    expected = 6 * math.pi * mu * radius**2 * (1 / 2.5e-4 - 1 / cutoff) * 0.2
    assert float(force[0, 2]) == pytest.approx(expected, rel=1e-12)
    assert np.all(np.asarray(force[1]) == 0.0), "no force beyond the cutoff"
    # two spheres closing at 0.1 m/s with a gap of 0.1 mm: R_eff = R / 2, forces opposite
    position = jnp.array([[0.0, 0.0, 0.0], [2 * radius + 1e-4, 0.0, 0.0]])
    velocity = jnp.array([[0.05, 0.0, 0.0], [-0.05, 0.0, 0.0]])
    i, j, valid = jnp.array([0, 1]), jnp.array([1, -1]), jnp.array([True, False])
    force = np.asarray(
        psm.lubrication_pairs(position, velocity, radii, i, j, valid, mu, cutoff, min_gap)
    )
    expected = 6 * math.pi * mu * (radius / 2) ** 2 * (1 / 1e-4 - 1 / cutoff) * 0.1
    assert force[0, 0] == pytest.approx(-expected, rel=1e-12)
    assert np.array_equal(force[1], -force[0])


def test_the_lubrication_damping_is_implicit_and_never_reverses_an_approach():
    """c' = c (1 - exp(-x)) / x, x = c dt / m*: c where the step is short, and a sphere driven
    into a plane by a damper stiffer than its explicit limit (c dt / m = 3, where the explicit
    step would reverse and grow the approach: factor 1 - 3) slows like exp(-t c / m) step for
    step, never reversing."""
    c = jnp.array([1e-3, 10.0, 1e6])
    inverse, dt = jnp.array([2.0, 2.0, 2.0]), 1e-3
    damped = np.asarray(psm.implicit_damping(c, inverse, dt))
    assert damped[0] == pytest.approx(1e-3, rel=1e-6)
    x = 1e6 * 2.0 * 1e-3
    assert damped[2] == pytest.approx((1.0 - math.exp(-x)) / (2.0 * 1e-3), rel=1e-12)
    assert np.all(damped * 2.0 * dt <= 1.0)
    assert np.asarray(psm.implicit_damping(c, jnp.zeros(3), dt)).tolist() == c.tolist()
    # a 1 kg sphere 1 um above the plane z = 0, approaching at 1 mm/s; mu chosen so that the
    # explicit coefficient gives c dt / m = 3
    mu, radius, gap, dt = 1.0, 1e-3, 1e-6, 1e-3
    cutoff = 1.0
    c_explicit = 6 * math.pi * mu * radius**2 * (1 / gap - 1 / cutoff)
    mu = mu * 3.0 / (c_explicit * dt)
    v = -1e-3
    for _ in range(5):
        force = psm.lubrication_planes(
            jnp.array([[0.0, 0.0, radius + gap]]), jnp.array([[0.0, 0.0, v]]),
            jnp.array([radius]), jnp.zeros((1, 3)), jnp.array([[0.0, 0.0, 1.0]]),
            jnp.zeros((1, 3)), mu, cutoff, jnp.array([1e-9]), jnp.array([1.0]), dt,
        )  # fmt: skip
        new_v = v + float(force[0, 2]) * dt
        assert v < new_v <= 0.0, "the damper reversed the approach"
        assert new_v == pytest.approx(v * math.exp(-3.0), rel=1e-9)
        v = new_v


# --- clumps in the fluid ----------------------------------------------------------------------

CLUMP_OFFSET = 2.0  # cells: two members of radius RADIUS, centres 4 cells apart (they overlap)


def clump_setup(gravity=(0.0, 0.0, 0.0)) -> bs.BodySetup:
    """One body: two members at -/+ CLUMP_OFFSET along its principal x axis."""
    ones = np.ones(2)
    grid = CellGrid.covering((-4.0,) * 3, (N + 4.0,) * 3, 2 * RADIUS + 1.0, 4, 4)
    return bs.BodySetup(
        radius=RADIUS * ones, young=1e3 * ones, poisson=0.3 * ones, restitution=0.5 * ones,
        friction=0.3 * ones, rolling_friction=0.0 * ones, grid=grid, dt=1.0, skin=1.0,
        gravity=gravity, member_body=np.array([0, 0]),
        member_offset=np.array([[-CLUMP_OFFSET, 0.0, 0.0], [CLUMP_OFFSET, 0.0, 0.0]]),
    )  # fmt: skip


def clump_inertia(mass: float) -> np.ndarray:
    """(3,) principal moments of clump_setup's two members (mass / 2 each, parallel axes)."""
    sphere = 0.4 * mass * RADIUS**2
    return np.array([sphere, sphere + mass * CLUMP_OFFSET**2, sphere + mass * CLUMP_OFFSET**2])


def clump_body(position, velocity, omega, mass: float, inertia) -> Bodies:
    """One clump with world axes as its principal axes (identity orientation)."""
    inertia = np.asarray(inertia, float)
    return Bodies(
        position=jnp.asarray([position], jnp.float64),
        orientation=jnp.array([[1.0, 0.0, 0.0, 0.0]]),
        velocity=jnp.asarray([velocity], jnp.float64),
        angular_momentum=jnp.asarray([inertia * np.asarray(omega)], jnp.float64),
        prescribed_angular_velocity=jnp.zeros((1, 3)),
        inverse_mass=jnp.array([1.0 / mass]),
        inverse_inertia=jnp.asarray([1.0 / inertia]),
        kinematic=jnp.zeros((1,), bool),
    )


def test_a_clump_feels_the_force_and_torque_of_its_members_about_its_centre():
    """A clump's first-step hydrodynamic force and torque equal those of two free spheres put
    where its members are, moving as its members move: the grid sees the same cover, and the
    clump adds the members' forces and their torques about its centre of mass."""
    centre = np.array([7.3, 7.1, 6.9])
    v, omega = np.array([0.01, -0.02, 0.015]), np.array([0.004, -0.003, 0.006])
    arms = np.array([[-CLUMP_OFFSET, 0.0, 0.0], [CLUMP_OFFSET, 0.0, 0.0]])
    mass = 2 * SPHERE_DENSITY * 4.0 / 3.0 * math.pi * RADIUS**3
    inertia = clump_inertia(mass)
    clump = clump_body(centre, v, omega, mass, inertia)
    _, extra, _, _ = run_with(clump_setup(), clump, (0.0, 0.0, 0.0), 1, volume=np.array([1.0]))

    members = spheres(centre + arms, v + np.cross(omega, arms))
    members = members.replace(
        angular_momentum=jnp.asarray(
            np.tile(omega / np.asarray(members.inverse_inertia[0]), (2, 1))
        )
    )
    _, free, _, _ = run(members, (0.0, 0.0, 0.0), 1)
    force = np.asarray(free.hydro_force)
    torque = np.asarray(free.hydro_torque) + np.cross(arms, force)
    assert np.abs(force).max() > 1e-4, "the test needs a real drag"
    assert np.asarray(extra.hydro_force[0]) == pytest.approx(force.sum(0), abs=ROUND_OFF)
    assert np.asarray(extra.hydro_torque[0]) == pytest.approx(torque.sum(0), abs=ROUND_OFF)
    assert np.abs(torque.sum(0)).max() > 1e-4, "the test needs a real torque"


def test_a_clump_in_a_uniform_flow_feels_no_drag_and_conserves_momentum():
    """Galilean check for a clump (no force, no torque when it moves with the fluid), then the
    momentum of fluid + clump in a periodic box, exact up to velocity Verlet's lag (as for a
    sphere: the test above)."""
    centre = np.array([7.3, 7.1, 6.9])
    mass = 2 * SPHERE_DENSITY * 4.0 / 3.0 * math.pi * RADIUS**3
    inertia = clump_inertia(mass)
    u0 = np.array([0.03, -0.01, 0.02])
    clump = clump_body(centre, u0, (0.0, 0.0, 0.0), mass, inertia)
    steps = 16  # both runs: one compiled program (the persistent cache serves the second)
    _, extra, track, _ = run_with(clump_setup(), clump, u0, steps, volume=np.array([1.0]))
    assert np.abs(track[:, 0, 6:9]).max() < ROUND_OFF, "drag in a uniform flow (Galilean check)"
    assert np.abs(np.asarray(extra.hydro_torque)).max() < ROUND_OFF

    v0 = np.array([0.0, 0.03, 0.04])  # broadside and along: both members drag, and it turns
    clump = clump_body(centre, v0, (0.0, 0.0, 0.005), mass, inertia)
    state, extra, track, _ = run_with(
        clump_setup(), clump, (0.0, 0.0, 0.0), steps, volume=np.array([1.0])
    )
    after = fluid_momentum(state) + mass * np.asarray(extra.state.bodies.velocity[0])
    force = track[:, 0, 6:9]
    lag = -0.5 * 0.5 * (force[-1] + force[-2]) - 0.5 * force[-1]
    assert np.abs(after - mass * v0 - lag).max() < ROUND_OFF * np.abs(mass * v0).max() * 100
    speed = np.linalg.norm(track[:, 0, 3:6], axis=1)
    assert speed[-1] < 0.8 * np.linalg.norm(v0)


def test_a_clump_at_rest_feels_the_buoyancy_of_its_members_union():
    """Two overlapping members: the buoyancy is rho_f g times their union (the lens counted
    once), which ``displaced_volumes`` finds by quadrature to 1e-5."""
    from solver.bodies.scene import scene_from_dict
    from solver.coupling.box import displaced_volumes

    r, d = 1.0, 2.0 * CLUMP_OFFSET / RADIUS  # the members of clump_setup, in radii
    lens = math.pi * (4 * r + d) * (2 * r - d) ** 2 / 12.0
    union = 2 * 4.0 / 3.0 * math.pi * r**3 - lens
    scene = scene_from_dict(
        {
            "materials": {"m": {"young": 1e6, "poisson": 0.3, "density": 1000.0,
                                "restitution": 0.5, "friction": 0.3}},
            "bodies": [
                {"shape": "clump", "material": "m", "position": [0, 0, 0], "spheres": [
                    {"radius": r, "offset": [-d / 2, 0, 0]},
                    {"radius": r, "offset": [d / 2, 0, 0]},
                ]},
                {"shape": "sphere", "material": "m", "radius": 0.5, "position": [5, 0, 0]},
            ],
        },
        key_prefix="case",
    )  # fmt: skip
    volume = displaced_volumes(scene)
    assert volume[0] == pytest.approx(union, rel=1e-5)
    assert volume[1] == 4.0 / 3.0 * math.pi * 0.5**3

    g = 1e-5
    union_cells = union * RADIUS**3
    mass = 2 * SPHERE_DENSITY * 4.0 / 3.0 * math.pi * RADIUS**3
    inertia = clump_inertia(mass)
    clump = clump_body([7.3, 7.1, 6.9], (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), mass, inertia)
    _, _, track, _ = run_with(
        clump_setup((0.0, 0.0, -g)), clump, (0.0, 0.0, 0.0), 1, volume=np.array([union_cells])
    )
    assert np.abs(track[0, 0, 6:9]).max() < ROUND_OFF, "a hydrodynamic force at rest"
    assert track[0, 0, 5] == pytest.approx(-(1.0 - union_cells / mass) * g, rel=1e-12)
