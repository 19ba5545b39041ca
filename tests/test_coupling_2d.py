"""Disks in a 2D fluid (D2Q9 + PSM): bodies of the 3D body model held in the x-y plane.

The kernel tests run the coupled fluid chunk (solver.fluid.step.make_coupled_chunk with a
``PsmCoupling`` of dimension 2) on a small periodic box in lattice units (dx = dt = 1, fluid
density 1, disks one cell deep), float64, as tests/test_coupling.py does for spheres. The case
tests build ``case=dkt_2d`` and run it through the command line.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from solver_cli import FAST_COMPILE, FAST_COMPILE_OPTIONS, run_solver

from kernels import coupling as psm
from kernels.lattices import D2Q9
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.api import compose_config
from solver.app import enable_precision
from solver.bodies import step as bs
from solver.coupling.cases import build_coupled_case
from solver.coupling.step import PsmCoupling
from solver.errors import ConfigError
from solver.fluid.setup import FluidSetup
from solver.fluid.step import SINGLE, initial_state, make_coupled_chunk, make_geometry
from solver.twin.quarantine import read_quarantine
from solver.twin.run import run_twin

N = 24  # periodic box of N^2 cells
RADIUS = 3.0  # cells
DISK_DENSITY = 1.5  # over the fluid's
TAU = 0.8
DEPTH = 1.0  # cells: the disks are cylinders one cell deep (lattice units)
# float64 sums over ~600 cells and 9 directions: differences of a few 1e-16 per term
ROUND_OFF = 1e-12
# solver runs of a few dozen steps, whose assertions hold at any LLVM level (tests/solver_cli.py)
SHORT_RUN = {"XLA_FLAGS": FAST_COMPILE}
DKT_2D = ["case=dkt_2d", "fluid=d2q9", "coupling=psm"]


@pytest.fixture(autouse=True)
def _float64():
    enable_precision("float64")


def body_setup(count: int, gravity=(0.0, 0.0, 0.0)) -> bs.BodySetup:
    ones = np.ones(count)
    grid = CellGrid.covering((-4.0,) * 3, (N + 4.0,) * 3, 2 * RADIUS + 1.0, 4, 4)
    return bs.BodySetup(
        radius=RADIUS * ones, young=1e3 * ones, poisson=0.3 * ones, restitution=0.5 * ones,
        friction=0.3 * ones, rolling_friction=0.0 * ones, grid=grid, dt=1.0, skin=1.0,
        gravity=gravity,
    )  # fmt: skip


def disks(position, velocity, omega_z, stray: bool = False) -> Bodies:
    """Disks (cylinders DEPTH deep) at ``position`` (n, 3), moving in the plane; ``stray``:
    with an out-of-plane velocity, spin and tilt that holding them in the plane must remove."""
    position = np.atleast_2d(np.asarray(position, dtype=np.float64))
    n = position.shape[0]
    mass = DISK_DENSITY * math.pi * RADIUS**2 * DEPTH
    moment = 0.5 * mass * RADIUS**2
    velocity = np.atleast_2d(np.asarray(velocity, dtype=np.float64)).copy()
    momentum = np.zeros((n, 3))
    momentum[:, 2] = moment * np.asarray(omega_z)
    orientation = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
    if stray:
        velocity[:, 2] = 0.01
        momentum[:, 0] = 0.3
        orientation[:, 1] = 1e-3
    return Bodies(
        position=jnp.asarray(position),
        orientation=jnp.asarray(orientation),
        velocity=jnp.asarray(velocity),
        angular_momentum=jnp.asarray(momentum),
        prescribed_angular_velocity=jnp.zeros((n, 3)),
        inverse_mass=jnp.full((n,), 1.0 / mass),
        inverse_inertia=jnp.asarray(np.tile([0.0, 0.0, 1.0 / moment], (n, 1))),
        kinematic=jnp.zeros((n,), bool),
    )


def run(bodies: Bodies, steps: int, gravity=(0.0, 0.0, 0.0)):
    """(fluid state, coupled bodies, track (steps, n, 9), coupling) after ``steps`` coupled
    steps of disks in fluid at rest."""
    n = bodies.position.shape[0]
    setup = FluidSetup(lattice=D2Q9, shape=(N, N), omega=1.0 / TAU, dtype="float64")
    coupling = PsmCoupling(
        bodies=body_setup(n, gravity), substeps=1, dx=1.0, dt=1.0, origin=(0.0, 0.0, 0.0),
        fluid_density=1.0, tracked=n, dimension=2, depth=DEPTH,
    )  # fmt: skip
    state = initial_state(setup, np.ones((N, N)), np.zeros((2, N, N)))
    extra = coupling.initial(bs.initial_state(coupling.bodies, bodies))
    # compiling is nearly all these runs' time; the algebra checked is the same at -O0
    chunk = jax.jit(
        make_coupled_chunk(setup, SINGLE, coupling),
        static_argnums=2,
        compiler_options=FAST_COMPILE_OPTIONS,
    )
    state, _, extra, track = chunk(state, make_geometry(setup), steps, extra)
    return state, extra, np.asarray(track), coupling


def fluid_momentum(state) -> np.ndarray:
    f = np.asarray(state.populations).reshape(D2Q9.q, -1).sum(axis=1)
    return D2Q9.c.astype(float).T @ f


def test_the_disk_cover_reproduces_the_area_and_the_2d_lubrication_law():
    centre = jnp.array([[7.31, 6.87]])
    radius = jnp.array([RADIUS])
    size = psm.stencil_size(RADIUS)
    offsets = psm.stencil_offsets(size, 2, [RADIUS])
    cells = psm.stencil_base(centre, radius)[:, None, :] + jnp.asarray(offsets)[None]
    eps = psm.sphere_fraction(centre, radius, cells)
    # the linear cover overestimates a disk of radius 3 cells by 1.3 % (curvature, O(1/r^2))
    assert abs(float(eps.sum()) / (math.pi * RADIUS**2) - 1.0) < 0.015
    covered = int(np.sum(np.asarray(eps) > 0))
    assert covered <= psm.cover_capacity([RADIUS], len(offsets), 2) <= len(offsets)
    # cylinder and plane: 3 sqrt(2) pi mu L (R/h)^(3/2) per unit approach speed, minus the
    # cutoff's share (the lattice resolves the film above it)
    mu, radius_m, gap, cutoff, depth = 0.1, 3e-3, 2.5e-4, 1e-3, 0.5
    c = float(psm.lubrication_coefficient(gap, radius_m, mu, cutoff, 1e-9, depth))
    want = 3 * math.sqrt(2) * math.pi * mu * depth * radius_m**1.5 * (gap**-1.5 - cutoff**-1.5)
    assert c == pytest.approx(want, rel=1e-12)
    assert float(psm.lubrication_coefficient(2 * cutoff, radius_m, mu, cutoff, 1e-9, depth)) == 0


def test_fluid_plus_disk_momentum_is_conserved_and_the_disk_stays_in_its_plane():
    """A spinning disk launched into fluid at rest in a periodic box: what it loses, the fluid
    gains, step for step (up to velocity Verlet's half-step lag and the force averaging, as for
    a sphere in tests/test_coupling.py), and nothing leaves the plane: the z velocity, x and y
    angular momenta, the quaternion's x and y parts, the z force and the x, y torques are zero
    to the bit, though the disk started with a stray out-of-plane velocity, spin and tilt."""
    v0 = np.array([0.04, 0.02, 0.0])
    z0 = 0.25
    bodies = disks([[11.3, 10.8, z0]], [v0], [0.004], stray=True)
    steps = 30
    state, extra, track, _ = run(bodies, steps)
    mass = 1.0 / float(bodies.inverse_mass[0])
    before = mass * v0[:2]  # the fluid starts at rest; the stray z velocity is held to 0
    body = extra.state.bodies
    after = fluid_momentum(state) + mass * np.asarray(body.velocity[0, :2])
    force = track[:, 0, 6:8]
    lag = -0.5 * 0.5 * (force[-1] + force[-2]) - 0.5 * force[-1]
    assert np.abs(after - before - lag).max() < ROUND_OFF * np.abs(before).max() * 100
    speed = np.linalg.norm(track[:, 0, 3:5], axis=1)
    assert speed[-1] < 0.8 * np.linalg.norm(v0), "the drag slowed the disk"
    # the plane, exactly
    assert np.all(track[:, 0, 2] == z0) and np.all(np.asarray(body.position[:, 2]) == z0)
    assert np.all(track[:, 0, 5] == 0.0) and np.all(track[:, 0, 8] == 0.0)
    assert np.all(np.asarray(body.angular_momentum[:, :2]) == 0.0)
    assert np.all(np.asarray(body.orientation[:, 1:3]) == 0.0)
    assert np.all(np.asarray(extra.hydro_force[:, 2]) == 0.0)
    assert np.all(np.asarray(extra.hydro_torque[:, :2]) == 0.0)
    assert abs(float(extra.hydro_torque[0, 2])) > 1e-6, "the spinning disk feels a torque"
    assert np.all(np.asarray(extra.state.force[:, 2]) == 0.0)
    assert np.all(np.asarray(extra.state.torque[:, :2]) == 0.0)


def test_two_mirrored_disks_settle_alike_under_gravity():
    """Two disks at mirror places about the box's vertical mid-line x = (N - 1) / 2 settle: the
    same downward velocity, opposite sideways velocities and spins (to round-off), and a
    settling speed below free fall's (1 - rho_f / rho_s) g t but well above a tenth of it."""
    g, steps, mid, a = 1e-4, 40, (N - 1) / 2.0, 5.2
    bodies = disks([[mid - a, 12.4, 0.0], [mid + a, 12.4, 0.0]], np.zeros((2, 3)), [0.0, 0.0])
    _, extra, track, _ = run(bodies, steps, gravity=(0.0, -g, 0.0))
    v = track[:, :, 3:6]
    scale = np.abs(v[:, :, 1]).max()
    assert np.all(v[-1, :, 1] < 0.0), "the disks settle downwards"
    free_fall = (1.0 - 1.0 / DISK_DENSITY) * g * steps
    assert 0.1 * free_fall < -v[-1, 0, 1] < free_fall
    assert abs(v[-1, 0, 1] - v[-1, 1, 1]) < 1e-9 * scale, "the same settling"
    assert abs(v[-1, 0, 0] + v[-1, 1, 0]) < 1e-9 * scale, "mirrored sideways drift"
    w = np.asarray(extra.state.bodies.angular_momentum[:, 2])
    assert abs(w[0] + w[1]) < 1e-9 * max(np.abs(w).max(), 1e-30), "mirrored spins"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("case.leading=[0.0005,0.068]", "case.leading"),
        ("case.trailing=[0.0101,0.0695]", "case.trailing"),
        ("case.box=[0.02,0.08,0.02]", "case.leading"),  # 3D box, 2D centres
    ],
    ids=["outside", "overlapping", "3d-box"],
)
def test_bad_disks_are_config_errors_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key) as err:
        build_coupled_case(compose_config([*DKT_2D, override]))
    assert "\n" not in str(err.value)


def test_a_bad_2d_input_exits_2_with_one_line(tmp_path):
    """Through the command line: a disk outside the channel, and owned bodies on a 2D grid."""
    for override, key in (
        ("case.leading=[0.0005,0.068]", "case.leading"),
        ("coupling.bodies=owned", "coupling.bodies"),
    ):
        result = run_solver(
            [*DKT_2D, override, "steps=1", f"hydra.run.dir={tmp_path / key}"], timeout=120
        )
        assert result.returncode == 2, result.stderr[-2000:]
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and key in lines[0] and "Traceback" not in result.stderr


def test_a_short_2d_dkt_run_writes_its_diagnostics(tmp_path):
    result = run_solver(
        [*DKT_2D, "case.resolution=4", "steps=20", "chunk=20", "output.png=false",
         f"hydra.run.dir={tmp_path}"],
        timeout=300,
        env_extra=SHORT_RUN,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run.json").read_text())
    diag = summary["diagnostics"]
    for key in ("min_gap_over_d", "drafting", "drafting_speed_gain_m_s", "kissed", "tumbled"):
        assert key in diag, key
    assert diag["min_gap_over_d"] > 0.9 and not diag["kissed"]  # 20 steps: still apart
    assert summary["coupling"]["disk_depth_m"] == 1.0
    assert summary["coupling"]["vertical_axis"] == 1
    track = np.loadtxt(tmp_path / "bodies_track.csv", delimiter=",", skiprows=1)
    assert np.all(track[:, 5] == 0.0) and np.all(track[:, 8] == 0.0), "z position and velocity"
    assert np.all(track[:, 7] < 0.0), "settling along -y"


# --- disks of coupling.scene in a 2D fluid case ------------------------------------------------
# a periodic channel 1 m long and 1 m high (32 cells), driven by g = 8 nu u_max / H^2 = 0.8 m/s^2
CHANNEL = ["case=poiseuille", "fluid=d2q9", "coupling=psm", "case.length=1.0"]
NEUTRAL = "coupling.scene.materials.glass.density=1.0"  # the channel's fluid density
CLUMP = (
    "{shape: clump, material: glass, position: [0.5, 0.5, 0], spheres: "
    "[{radius: 0.05, offset: [-0.05, 0, 0]}, {radius: 0.05, offset: [0.05, 0, 0]}]}"
)


def _disk(x: float, y: float, z: float = 0.0, extra: str = "") -> str:
    return (f"coupling.scene.bodies=[{{shape: sphere, material: glass, radius: 0.1, "
            f"position: [{x}, {y}, {z}]{extra}}}]")  # fmt: skip


def test_disks_of_a_scene_join_a_2d_fluid_case():
    case = build_coupled_case(compose_config([*CHANNEL, NEUTRAL, _disk(0.5, 0.5)]))
    assert case.bodies.n_bodies == 1 and case.coupling.dimension == 2
    assert case.info["wall_planes"] == 2  # the channel's walls; x is periodic
    assert case.info["vertical_axis"] == 1 and case.info["disk_depth_m"] == 1.0
    assert tuple(case.bodies.gravity) == (0.0, -9.81, 0.0)  # the default: down y in 2D
    # a flat generator box places disks in the plane z = 0 of a closed cavity
    generate = ("coupling.scene.generate={kind: random_spheres, material: glass, n: 12, "
                "radius: 0.04, box_lower: [0.05, 0.3, 0], box_upper: [0.95, 0.95, 0]}")  # fmt: skip
    case = build_coupled_case(compose_config(["case=cavity", "coupling=psm", generate]))
    position = np.asarray(case.initial.position)
    assert position.shape == (12, 3) and np.all(position[:, 2] == 0.0)
    assert np.all((position[:, :2] > 0.05 + 0.04 - 1e-12) & (position[:, :2] < 0.95 - 0.04))


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ([_disk(0.5, 0.5, z=0.01)], r"coupling.scene.bodies\[0\].position"),
        ([_disk(0.5, 0.5, extra=", velocity: [0, 0, 0.1]")], r"bodies\[0\].velocity"),
        ([_disk(0.5, 0.5, extra=", angular_velocity: [1, 0, 0]")], r"bodies\[0\].angular_vel"),
        ([_disk(0.5, 0.5), "coupling.scene.gravity=[0,0,-9.81]"], "coupling.scene.gravity"),
        ([_disk(0.5, 0.05)], r"coupling.scene.bodies\[0\].position"),  # through the wall
        ([f"coupling.scene.bodies=[{CLUMP}]"], r"coupling.scene.bodies\[0\].shape"),
        # faster than lattice Mach 0.3 (1.73 m/s here): at its speed, or at its rim
        ([_disk(0.5, 0.5, extra=", velocity: [10, 0, 0]")], r"bodies\[0\].velocity.*1.732 m/s"),
        ([_disk(0.5, 0.5, extra=", angular_velocity: [0, 0, 100]")], r"angular_velocity.*10 m/s"),
    ],
    ids=["z-position", "z-velocity", "x-spin", "z-gravity", "wall", "clump", "fast", "spin"],
)
def test_bad_scene_disks_are_config_errors_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key) as err:
        build_coupled_case(compose_config([*CHANNEL, *overrides]))
    assert "\n" not in str(err.value)


def test_a_neutrally_buoyant_disk_rides_the_channel_flow_on_its_centreline(tmp_path):
    """40 steps (0.125 s) from rest: the fluid's core accelerates at g (the walls' diffusion
    length sqrt(nu t) = 0.11 m has not reached it), and a disk of the fluid's density follows it,
    lagging a little; on the centreline it stays there (the channel is symmetric about it).
    Two kinematic disks, mirrored about the centreline, keep their prescribed velocity exactly."""
    free = "{shape: sphere, material: glass, radius: 0.1, position: [0.5, 0.5, 0]}"
    pushed = ("{shape: sphere, material: glass, radius: 0.05, position: [0.2, %s, 0], "
              "velocity: [0.05, 0, 0], kinematic: true}")  # fmt: skip
    bodies = f"coupling.scene.bodies=[{free}, {pushed % 0.2}, {pushed % 0.8}]"
    result = run_solver(
        [*CHANNEL, NEUTRAL, bodies, "steps=40", "chunk=40", "output.png=false",
         f"hydra.run.dir={tmp_path}"],
        timeout=300,
        env_extra=SHORT_RUN,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    track = np.loadtxt(tmp_path / "bodies_track.csv", delimiter=",", skiprows=1)
    track = track.reshape(-1, 3, track.shape[1])  # (steps, body, column)
    t, y, z, vx, vz = (track[-1, 0, k] for k in (1, 4, 5, 6, 8))
    core = 0.8 * t  # m/s, g t
    assert 0.5 * core < vx < 1.01 * core, (vx, core)
    assert abs(y - 0.5) < 1e-5 and z == 0.0 and vz == 0.0
    kinematic = track[:, 1:]
    assert np.allclose(kinematic[..., 6], 0.05, rtol=1e-6) and np.all(kinematic[..., 7:9] == 0.0)
    # float32 positions: 40 x 34 body steps of 4.6e-6 m added to 0.2 m (ulp 1.5e-8): ~1e-5 m
    assert np.allclose(kinematic[-1, :, 3], 0.2 + 0.05 * t, rtol=0.0, atol=3e-5)
    assert np.all(kinematic[:, 0, 4] == kinematic[0, 0, 4])  # no drift across the channel
    diag = json.loads((tmp_path / "run.json").read_text())["diagnostics"]
    assert diag["outside_domain"] == 0


def test_a_pose_sensor_drives_a_kinematic_disk_and_out_of_plane_poses_are_quarantined(tmp_path):
    """The body twin on a 2D grid: a kinematic disk follows its replayed pose sensor upstream
    against the channel flow; the one reading off the plane (z = 0.01 m) is rejected into the
    quarantine, not applied (the step would have held the disk in the plane silently). The run
    is float32 in a process where this module's fixture turned x64 on: no float64 constant may
    leak into the coupled step (the 2D lubrication law's NumPy sqrt once did)."""
    dt = 1.0 / 32 * 0.1  # dx u_lattice / u_max
    every = 5 * dt
    push = -0.2  # m/s
    lines = ["time,sensor,value,units"]
    for k in range(1, 5):
        t = every * k
        z = 0.01 if k == 3 else 0.0
        lines.append(f'{t:.8f},pusher,{0.5 + push * t:.8f};0.5;{z};1;0;0;0,"m,1"')
    recording = tmp_path / "poses.csv"
    recording.write_text("\n".join(lines) + "\n")
    pusher = ("{shape: sphere, material: glass, radius: 0.1, position: [0.5, 0.5, 0], "
              "kinematic: true}")  # fmt: skip
    config = compose_config(
        [*CHANNEL, NEUTRAL, f"coupling.scene.bodies=[{pusher}]", "twin=replay",
         "twin.sensors=[{id: pusher, kind: body_pose, body: 0, units: 'm,1'}]",
         f"twin.every={every}", f"twin.recording={recording}", "steps=20", "chunk=5",
         "output.every=20", "output.png=false", "checkpoint=none"]
    )  # fmt: skip
    summary = run_twin(config, tmp_path / "run", interactive=False).summary
    assert summary["status"] == "completed"
    assert summary["twin"]["pose_updates"] == 3 and summary["twin"]["rejected"] == 1
    (record,) = read_quarantine(summary["twin"]["quarantine"])
    assert record["reason"] == "out_of_range" and "2D grid" in record["detail"]
    track = np.genfromtxt(tmp_path / "run" / "bodies_track.csv", delimiter=",", names=True)
    assert track["vx"][-1] == pytest.approx(push, rel=1e-5)
    assert np.all(track["z"] == 0.0) and np.all(track["vz"] == 0.0)
    assert track["fx"][-1] > 0.0, "the fluid pushes back on the disk moving upstream"


def test_a_divergence_driven_by_fast_bodies_names_them_and_the_remedy(tmp_path):
    """Glass disks (2500 kg/m^3) falling through water in a cavity whose time step is set by
    a 0.2 m/s lid: they outrun the lattice, the run diverges (exit 3), and the message names
    the bodies' lattice Mach number and fluid.u_lattice rather than "look safe"."""
    generate = ("coupling.scene.generate={kind: random_spheres, material: glass, n: 20, "
                "radius: 0.04, box_lower: [0.05, 0.3, 0], box_upper: [0.95, 0.95, 0]}")  # fmt: skip
    result = run_solver(
        ["case=cavity", "fluid=d2q9", "coupling=psm", "case.duration=1.0",
         "case.lid_velocity=0.2", "case.density=1000", generate, "output.png=false",
         "checkpoint=none", f"hydra.run.dir={tmp_path}"],
        timeout=300,
        env_extra=SHORT_RUN,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    assert "a body moves at" in result.stderr and "fluid.u_lattice" in result.stderr
    assert "look safe" not in result.stderr
    divergence = json.loads((tmp_path / "run.json").read_text())["divergence"]
    assert divergence["body_mach"] > 0.3


def test_a_disk_leaving_through_the_outlet_is_gone_from_the_fluid_and_counted(tmp_path):
    """A disk carried out of the Schaefer-Turek channel: once past the outlet (x = 2.2 m) it
    covers no cell (the cover wraps across periodic faces only, not to the inlet), so its
    hydrodynamic force is exactly 0; run.json counts it outside the domain."""
    disk = ("{shape: sphere, material: glass, radius: 0.02, position: [2.16, 0.2, 0.0], "
            "velocity: [1.0, 0, 0]}")  # fmt: skip
    result = run_solver(
        ["case=cylinder", "fluid=d2q9", "fluid.collision=bgk", "coupling=psm",
         "case.resolution=10", "case.duration=0.08", NEUTRAL, f"coupling.scene.bodies=[{disk}]",
         "output.png=false", "checkpoint=none", f"hydra.run.dir={tmp_path}"],
        timeout=300,
        env_extra=SHORT_RUN,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    track = np.genfromtxt(tmp_path / "bodies_track.csv", delimiter=",", names=True)
    gone = track["x"] - 0.02 > 2.2 + 0.01  # wholly past the outlet, a cell to spare
    assert gone.sum() > 10 and np.any(track["fx"][~gone] != 0.0)
    assert np.all(track["fx"][gone] == 0.0) and np.all(track["fy"][gone] == 0.0)
    assert json.loads((tmp_path / "run.json").read_text())["diagnostics"]["outside_domain"] == 1
