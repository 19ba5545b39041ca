"""The native sphere chunk (``bodies.kernel=native``, kernels/native/dem_spheres.cc) against the
XLA chunk, its reference.

In float64 the two agree to round-off over several hundred steps of a small packing in a box:
the same contacts at every step, the same pair tables, slot lists and rebuilds (several, with
tangential springs carried across them), positions, velocities and springs within KINEMATICS
and CONTACTS; this covers Hertz-Mindlin with rolling resistance, spheres of several sizes, a
fixed and a kinematic sphere, a conveyor floor and an elastic wall. The linear model and
every-pair tables are checked on a vmapped ensemble whose members differ in restitution,
friction and gravity (one FFI call for the batch). Chunks compose bitwise, the threaded path
of large scenes equals the one-thread path bitwise, and unsupported set-ups are one-line config
errors. Slower variants (float32, a run through the CLI) are marked long.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from solver_cli import run_solver

from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bodies import native_step
from solver.bodies import step as bs
from solver.bodies.config import parse_bodies
from solver.bodies.native_step import make_native_chunk, require_native
from solver.errors import ConfigError
from solver.sections import Section

ROOT = Path(__file__).resolve().parents[1]
RADIUS, DENSITY, YOUNG, POISSON = 1e-3, 2500.0, 1e8, 0.25
# Relative to the largest value of each field. XLA contracts multiply-adds into FMAs where the
# kernel does not (-ffp-contract=off), so single steps differ in the last bits, and a packing's
# contacts amplify that (an overlap is a difference of nearly equal lengths). Measured after
# 300 steps of the packing below: positions 2e-15, velocities and angular momenta 3e-12,
# springs 7e-11, torques 4e-11; a one-ulp nudge of the initial positions moves the XLA step's
# own velocities by 1.3e-10 and springs by 4e-9 over the same steps, so these are round-off.
KINEMATICS = 1e-11  # positions, orientations, velocities, angular momenta, energies
CONTACTS = 1e-9  # forces, torques, tangential springs
# float32 (the same amplification of a 1.2e-7 unit round-off): measured after 300 steps
# positions 6e-7, velocities 1.7e-4, springs and torques 2.4e-4, the same contacts every step.
FLOAT32_POSITION = 1e-5
FLOAT32_VELOCITY = 1e-3


def _box_scene(count: int = 64, model: str = "hertz", rolling: float = 0.05, seed: int = 0):
    """(setup, bodies): ``count`` spheres of radius RADIUS * [0.97, 1] on a jittered lattice of
    spacing 1.99 RADIUS (about half the neighbours and the walls slightly overlapped) in a box
    of six walls, under gravity, shaken at ~0.05 m/s; sphere 0 kinematic (moving through the
    others at 0.2 m/s and spinning), sphere 1 fixed, the floor a conveyor (0.05 m/s along x),
    the wall x = 0 elastic (the others rigid)."""
    rng = np.random.default_rng(seed)
    side = math.ceil(count ** (1 / 3))
    sites = np.stack(np.meshgrid(*(np.arange(side),) * 3, indexing="ij"), -1).reshape(-1, 3)
    spacing = 1.99 * RADIUS
    jitter = rng.uniform(-0.01, 0.01, (count, 3)) * RADIUS
    position = RADIUS + spacing * sites[:count] + jitter
    radius = RADIUS * rng.uniform(0.97, 1.0, count)
    upper = np.full(3, spacing * (side - 1) + 1.99 * RADIUS)
    eye = np.eye(3)
    plane_point = np.concatenate([np.zeros((3, 3)), np.diag(upper)])
    plane_normal = np.concatenate([eye, -eye])
    plane_velocity = np.zeros((6, 3))
    plane_velocity[2] = (0.05, 0.0, 0.0)  # the floor (z = 0) a conveyor
    plane_young = np.full(6, np.inf)
    plane_young[0] = YOUNG
    skin = 0.05 * RADIUS
    grid = CellGrid.covering(-2 * RADIUS * np.ones(3), upper + 2 * RADIUS,
                             2 * radius.max() + skin, 8, 12)  # fmt: skip
    ones = np.ones(count)
    mass = DENSITY * 4.0 / 3.0 * np.pi * radius**3

    def setup(dt: float) -> bs.BodySetup:
        return bs.BodySetup(
            radius=radius, young=YOUNG * ones, poisson=POISSON * ones,
            restitution=rng_restitution, friction=0.5 * ones, rolling_friction=rolling * ones,
            grid=grid, dt=dt, skin=skin, contact_model=model, stiffness=2e4 * ones,
            plane_point=plane_point, plane_normal=plane_normal, plane_velocity=plane_velocity,
            plane_young=plane_young, plane_poisson=np.full(6, POISSON),
            plane_stiffness=np.full(6, 4e4),
        )  # fmt: skip

    rng_restitution = rng.uniform(0.4, 0.9, count)
    inverse_mass = 1.0 / mass
    inverse_inertia = np.repeat((1.0 / (0.4 * mass * radius**2))[:, None], 3, axis=1)
    inverse_mass[1], inverse_inertia[1] = 0.0, 0.0  # sphere 1 fixed
    velocity = 0.05 * rng.standard_normal((count, 3))
    velocity[0] = (0.2, 0.1, 0.0)
    velocity[1] = 0.0
    spin = rng.standard_normal((count, 3)) * 1e-9
    spin[1] = 0.0
    kinematic = np.zeros(count, bool)
    kinematic[0] = True
    prescribed = np.zeros((count, 3))
    prescribed[0] = (0.0, 0.0, 30.0)  # rad/s about z
    bodies = Bodies(
        position=jnp.asarray(position),
        orientation=jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0]), (count, 1)),
        velocity=jnp.asarray(velocity),
        angular_momentum=jnp.asarray(spin),
        prescribed_angular_velocity=jnp.asarray(prescribed),
        inverse_mass=jnp.asarray(inverse_mass),
        inverse_inertia=jnp.asarray(inverse_inertia),
        kinematic=jnp.asarray(kinematic),
    )
    masses = np.where(inverse_mass > 0, mass, np.inf)
    return setup(0.5 * bs.stable_time_step(setup(1.0), masses)), bodies


def _relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = np.max(np.abs(a))
    return float(np.max(np.abs(a - b)) / scale) if scale > 0 else float(np.max(np.abs(b)))


def _assert_equal_states(xla: bs.BodyState, native: bs.BodyState) -> None:
    """Tables and counters equal, floats within KINEMATICS or CONTACTS of each field's
    largest value."""
    for name in ("partners", "contact_count", "rebuilds", "time"):
        np.testing.assert_array_equal(getattr(native, name), getattr(xla, name), err_msg=name)
    for name, a, b in zip(bs.ActiveSlots._fields, xla.slots, native.slots, strict=True):
        np.testing.assert_array_equal(b, a, err_msg=f"slots.{name}")
    for name, a, b in zip(bs.Overflow._fields, xla.overflow, native.overflow, strict=True):
        np.testing.assert_array_equal(b, a, err_msg=f"overflow.{name}")
    fields = {f"bodies.{k}": (getattr(xla.bodies, k), getattr(native.bodies, k), KINEMATICS)
              for k in ("position", "orientation", "velocity", "angular_momentum")}  # fmt: skip
    for name in ("reference", "elastic_energy", "force", "torque", "history", "plane_history"):
        tolerance = KINEMATICS if name in ("reference", "elastic_energy") else CONTACTS
        fields[name] = (getattr(xla, name), getattr(native, name), tolerance)
    for name, (a, b, tolerance) in fields.items():
        error = _relative(a, b)
        assert error <= tolerance, f"{name}: relative difference {error:.2e} > {tolerance:.0e}"


def _assert_equal_diagnostics(xla: bs.BodyDiagnostics, native: bs.BodyDiagnostics) -> None:
    np.testing.assert_array_equal(native.contacts, xla.contacts, err_msg="contacts per step")
    np.testing.assert_array_equal(native.sampled, xla.sampled, err_msg="sampled")
    for name in ("kinetic_energy", "potential_energy", "momentum", "angular_momentum",
                 "elastic_energy"):  # fmt: skip
        error = _relative(getattr(xla, name), getattr(native, name))
        assert error <= KINEMATICS, f"diagnostics.{name}: relative difference {error:.2e}"


def test_native_chunk_equals_xla_on_a_packing_with_walls(monkeypatch):
    """300 steps (three chunks) of 64 thrown spheres: Hertz-Mindlin, rolling resistance,
    rebuilds, kinematic and fixed spheres, a conveyor floor, an elastic wall."""
    setup, bodies = _box_scene()
    assert not setup.all_pairs and setup.spheres_only
    state = jax.jit(lambda b: bs.initial_state(setup, b))(bodies)
    xla = jax.jit(bs.make_body_chunk(setup, every=7), static_argnums=1)
    native = jax.jit(make_native_chunk(setup, every=7), static_argnums=1)
    a = b = state
    for _ in range(3):
        a, diag_a = xla(a, 100)
        b, diag_b = native(b, 100)
        _assert_equal_diagnostics(diag_a, diag_b)
    _assert_equal_states(a, b)
    assert int(b.rebuilds) >= 3, f"only {int(b.rebuilds)} rebuilds: the test needs several"
    assert np.max(np.abs(b.history)) > 0 and np.max(np.abs(b.plane_history)) > 0
    assert np.asarray(diag_b.sampled).sum() < 100  # every = 7 sampled some steps only
    # chunks compose: the state between chunks is complete (bitwise, the same kernel)
    once, _ = native(state, 200)
    twice, _ = native(native(state, 100)[0], 100)
    for x, y in zip(jax.tree.leaves(once), jax.tree.leaves(twice), strict=True):
        np.testing.assert_array_equal(x, y)
    # the phases over two threads (a large scene's path) give the same state, bitwise
    monkeypatch.setattr(native_step, "PARALLEL_SPHERES", 1)
    threaded, _ = jax.jit(make_native_chunk(setup, every=7), static_argnums=1)(state, 200)
    for x, y in zip(jax.tree.leaves(once), jax.tree.leaves(threaded), strict=True):
        np.testing.assert_array_equal(x, y)


def test_native_ensemble_equals_xla_linear_all_pairs():
    """A vmapped ensemble in one call: 5 members of 12 spheres (every pair in the table), the
    linear contact model, members differing in restitution, friction and gravity."""
    setup, bodies = _box_scene(count=12, model="linear", rolling=0.0, seed=3)
    assert setup.all_pairs
    members = 5
    rng = np.random.default_rng(5)
    batch = jax.tree.map(lambda a: jnp.stack([a] * members), bodies)
    scale = jnp.asarray(rng.uniform(0.5, 1.5, (members, 1, 1)))
    batch = batch.replace(velocity=batch.velocity * scale)
    base = setup.params()
    params = jax.tree.map(lambda a: jnp.broadcast_to(a, (members, *a.shape)), base)
    params = params.replace(
        restitution=jnp.asarray(rng.uniform(0.3, 0.9, (members, 1)) * np.ones((1, 12))),
        friction=jnp.asarray(rng.uniform(0.1, 0.8, (members, 1)) * np.ones((1, 12))),
        gravity=jnp.asarray([[0.0, 0.0, -g] for g in rng.uniform(0, 20, members)]),
    )
    states = jax.jit(jax.vmap(lambda b, p: bs.initial_state(setup, b, p)))(batch, params)

    def ensemble(make):
        chunk = make(setup, batched=True)
        return jax.jit(jax.vmap(lambda s, p: chunk(s, 200, p)))

    a, diag_a = ensemble(bs.make_body_chunk)(states, params)
    b, diag_b = ensemble(make_native_chunk)(states, params)
    _assert_equal_diagnostics(diag_a, diag_b)
    _assert_equal_states(a, b)
    assert np.asarray(diag_b.contacts).max() > 0


def _bodies_section(**entries) -> Section:
    """configs/bodies/default.yaml with ``entries`` replaced."""
    defaults = yaml.safe_load((ROOT / "configs" / "bodies" / "default.yaml").read_text())
    return Section("bodies", {**defaults, **entries})


def test_kernel_key_and_what_the_native_kernel_refuses():
    assert parse_bodies(_bodies_section()).kernel == "xla"
    assert parse_bodies(_bodies_section(kernel="NATIVE")).kernel == "native"
    with pytest.raises(ConfigError, match="bodies.kernel = 'pallas'"):
        parse_bodies(_bodies_section(kernel="pallas"))
    with pytest.raises(ConfigError, match=r"kernel = 'native': allowed xla with bodies.mesh"):
        parse_bodies(_bodies_section(kernel="native", mesh=[2, 1, 1]))
    setup, _ = _box_scene(count=8)
    require_native(setup)  # plain spheres on one device: fine
    with pytest.raises(ConfigError, match="xla for an ensemble over 8 devices"):
        require_native(setup, devices=8)
    clump = bs.BodySetup(
        radius=np.full(2, RADIUS), young=np.full(2, YOUNG), poisson=np.full(2, POISSON),
        restitution=np.full(2, 0.5), friction=np.full(2, 0.5), rolling_friction=np.zeros(2),
        grid=setup.grid, dt=1e-6, member_body=np.array([0, 0]),
        member_offset=np.array([[-RADIUS, 0, 0], [RADIUS, 0, 0]]),
    )  # fmt: skip
    with pytest.raises(ConfigError, match="bodies.kernel = 'native': allowed xla for clumps"):
        require_native(clump)
    with pytest.raises(ValueError, match="clumps"):
        make_native_chunk(clump)


@pytest.mark.long
def test_native_chunk_in_float32_follows_xla():
    """bodies.precision=float32: the float library against the XLA step in single precision."""
    setup, bodies = _box_scene()
    state = jax.jit(lambda b: bs.initial_state(setup, b))(bodies.astype("float32"))
    xla = jax.jit(bs.make_body_chunk(setup), static_argnums=1)
    native = jax.jit(make_native_chunk(setup), static_argnums=1)
    a, diag_a = xla(state, 300)
    b, diag_b = native(state, 300)
    assert b.bodies.position.dtype == jnp.float32 and b.history.dtype == jnp.float32
    np.testing.assert_array_equal(diag_b.contacts, diag_a.contacts)
    np.testing.assert_array_equal(b.partners, a.partners)
    assert _relative(a.bodies.position, b.bodies.position) < FLOAT32_POSITION
    assert _relative(a.bodies.velocity, b.bodies.velocity) < FLOAT32_VELOCITY


@pytest.mark.long
def test_box_fill_through_the_cli_equals_the_xla_run(tmp_path):
    """``bodies.kernel=native`` through the app: the energies of every step and the final
    state of a box fill equal the XLA run's; run.json says which kernel ran."""
    runs = {}
    for kernel in ("xla", "native"):
        out = tmp_path / kernel
        result = run_solver(["case=box_fill", "case.count=80", "steps=600", "chunk=200",
                             "case.output_every=600", f"bodies.kernel={kernel}",
                             f"hydra.run.dir={out}"])  # fmt: skip
        assert result.returncode == 0, result.stderr
        summary = json.loads((out / "run.json").read_text())
        assert summary["kernel"] == kernel
        with h5py.File(out / "bodies.h5") as f:
            final = np.asarray(f["step_00000600"]["velocity"])
        energies = np.loadtxt(out / "energies.csv", delimiter=",", skiprows=1)
        runs[kernel] = (summary, final, energies)
    (xla, v_xla, e_xla), (native, v_native, e_native) = runs["xla"], runs["native"]
    assert native["pair_table"]["rebuilds"] == xla["pair_table"]["rebuilds"]
    assert _relative(v_xla, v_native) < KINEMATICS
    assert _relative(e_xla, e_native) < KINEMATICS


def test_a_clump_case_with_the_native_kernel_exits_2(tmp_path):
    result = run_solver(["case=incline", "case.shape=clump", "bodies.kernel=native",
                         f"hydra.run.dir={tmp_path}"])  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "bodies.kernel = 'native': allowed xla for clumps" in result.stderr


def test_bodies_in_the_fluid_with_the_native_kernel_exit_2(tmp_path):
    """The coupled step moves its bodies with the XLA body step: refused before any set-up."""
    result = run_solver(["case=settling_sphere", "fluid=d3q19", "coupling=psm",
                         "bodies.kernel=native", f"hydra.run.dir={tmp_path}"])  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "bodies.kernel = 'native': allowed xla for bodies in the fluid" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.long
def test_bench_times_both_kernels_in_one_run(tmp_path):
    """``python -m solver.bench bodies --kernels xla,native``: a row per kernel, same scene."""
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "solver.bench", "bodies", "--sizes", "64", "--ensemble",
               "4", "--ensemble-bodies", "8", "--steps", "2", "--repeats", "1", "--kernels",
               "xla,native", "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["kind"], r["kernel"]) for r in rows] == [
        ("packing", "xla"), ("packing", "native"), ("ensemble", "xla"), ("ensemble", "native")
    ]  # fmt: skip
    packing = [r for r in rows if r["kind"] == "packing"]
    assert packing[0]["contacts_per_body"] == packing[1]["contacts_per_body"]
