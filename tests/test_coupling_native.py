"""Bodies in the fluid on the native in-place kernel (solver/coupling/native.py,
kernels/native/lb_psm.inc) against the XLA coupled step, which is the reference.

Float64 on D3Q19 and D2Q9 (round-off: 1e-12 of the populations, O(1)), with spheres whose
stencils overlap, one across the periodic edges, a body force, a moving fluid, resting and
moving walls, BGK and TRT, both chunk parities (the AA pattern ends after an even or an odd
step); float16 storage against the XLA step at its own round-off; the app runs a float32
coupled case on both kernels, and refuses the native one on several devices (exit 2).
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lowered_ir import dumped_manual_signatures, zero_size
from mpi import mpirun
from solver_cli import FAST_COMPILE_OPTIONS, run_solver
from test_coupling_runs import FAST_COMPILE, SPLIT_RELATIVE, TINY, assert_close

from kernels.lattices import D2Q9, D3Q19
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.app import enable_precision
from solver.bodies import step as bs
from solver.coupling.native import make_native_coupled_chunk
from solver.coupling.step import PsmCoupling
from solver.fluid.inplace_step import plane_shift
from solver.fluid.setup import BodyForce, FluidSetup
from solver.fluid.step import SINGLE, initial_state, make_coupled_chunk, make_geometry

RADIUS = 2.6  # cells
ROUND_OFF = 1e-12
# a few steps on small grids: compiling is nearly all the time, and LLVM's optimisations
# double it; the arithmetic compared is the same at -O0 (IEEE, no fast-math)
FAST_XLA = FAST_COMPILE_OPTIONS  # (tests/solver_cli.py)


@pytest.fixture(autouse=True)
def _float64():
    enable_precision("float64")


def body_setup(count: int, d: int) -> bs.BodySetup:
    ones = np.ones(count)
    grid = CellGrid.covering((-4.0,) * 3, (40.0,) * 3, 2 * RADIUS + 1.0, 4, 4)
    return bs.BodySetup(
        radius=RADIUS * ones, young=1e3 * ones, poisson=0.3 * ones, restitution=0.5 * ones,
        friction=0.3 * ones, rolling_friction=0.0 * ones, grid=grid, dt=1.0, skin=1.0,
        gravity=(0.0, 0.0, 0.0),
    )  # fmt: skip


def spheres(position, velocity, omega, dtype) -> Bodies:
    position = np.asarray(position, dtype=np.float64)
    n = position.shape[0]
    mass = 1.5 * 4.0 / 3.0 * math.pi * RADIUS**3
    inertia = 0.4 * mass * RADIUS**2
    return Bodies(
        position=jnp.asarray(position, dtype),
        orientation=jnp.tile(jnp.array([1.0, 0.0, 0.0, 0.0], dtype), (n, 1)),
        velocity=jnp.asarray(velocity, dtype),
        angular_momentum=jnp.asarray(np.asarray(omega) * inertia, dtype),
        prescribed_angular_velocity=jnp.zeros((n, 3), dtype),
        inverse_mass=jnp.full((n,), 1.0 / mass, dtype),
        inverse_inertia=jnp.full((n, 3), 1.0 / inertia, dtype),
        kinematic=jnp.zeros((n,), bool),
    )


def both_runs(setup: FluidSetup, bodies: Bodies, steps: int, fluid_velocity):
    """(XLA run, native run): each (populations, track (steps, n, 9)) after ``steps``."""
    d = setup.lattice.d
    coupling = PsmCoupling(
        bodies=body_setup(bodies.position.shape[0], d), substeps=1, dx=1.0, dt=1.0,
        origin=(0.0, 0.0, 0.0), fluid_density=1.0, tracked=bodies.position.shape[0],
        dimension=d,
    )  # fmt: skip
    shape = setup.shape
    velocity = np.broadcast_to(
        np.asarray(fluid_velocity, float).reshape((d,) + (1,) * d), (d, *shape)
    )
    out = []
    for make in (lambda: make_coupled_chunk(setup, SINGLE, coupling),
                 lambda: make_native_coupled_chunk(setup, coupling)):  # fmt: skip
        state = initial_state(setup, np.ones(shape), velocity)
        extra = coupling.initial(bs.initial_state(coupling.bodies, bodies))
        chunk = jax.jit(make(), static_argnums=2, compiler_options=FAST_XLA)
        state, _, extra, track = chunk(state, make_geometry(setup), steps, extra)
        out.append((np.asarray(state.populations, np.float64), np.asarray(track, np.float64)))
    return out


def walls_along_last_axis(shape) -> np.ndarray:
    """Solid layers at both ends of the last axis (a channel)."""
    solid = np.zeros(shape, bool)
    solid[..., 0] = solid[..., -1] = True
    return solid


def test_native_coupled_step_equals_the_xla_step_in_3d(steps=9, collision="trt"):
    """Three spheres (two with overlapping stencils, one across the periodic corner) moving
    and turning in a flow with a body force, between a resting and a moving wall; TRT, and an
    odd number of steps (the chunk ends after an even step: the in-place stream; the disks
    below take BGK and an even number). 16^3 cells of float64 and 9 steps: the kernel runs on
    rotated planes (``plane_shift``), the wall links on rotated slots."""
    shape = (16, 16, 16)
    solid = walls_along_last_axis(shape)
    wall_velocity = np.zeros((3, *shape))
    # the top wall slides along x (Ladd), faster at larger x: each link's own term counts
    wall_velocity[0, :, :, -1] = 0.02 * (1.0 + np.arange(shape[0]) / shape[0])[:, None]
    setup = FluidSetup(
        lattice=D3Q19, shape=shape, omega=1.0 / 0.8, dtype="float64", collision=collision,
        solid=solid, wall_velocity=wall_velocity, body_force=BodyForce((1e-5, 0.0, -2e-5)),
    )  # fmt: skip
    position = [[7.3, 7.1, 6.4], [7.2, 7.3, 11.2], [0.2, 14.7, 8.5]]
    velocity = [[0.01, -0.02, 0.005], [0.0, 0.01, -0.01], [-0.01, 0.0, 0.02]]
    omega = [[0.0, 0.0, 0.01], [0.005, 0.0, 0.0], [0.0, -0.004, 0.0]]
    assert plane_shift(setup, steps) == 1
    (xla_f, xla_track), (native_f, native_track) = both_runs(
        setup, spheres(position, velocity, omega, jnp.float64), steps, (0.02, 0.01, 0.0)
    )
    np.testing.assert_allclose(native_f, xla_f, rtol=0, atol=ROUND_OFF)
    np.testing.assert_allclose(native_track, xla_track, rtol=0, atol=ROUND_OFF)
    assert np.abs(xla_track[:, :, 6:9]).min(axis=0).max() > 1e-6, "the spheres feel a force"


def test_native_coupled_step_equals_the_xla_step_for_disks():
    """Disks on D2Q9 in a channel with a body force, BGK, 4 steps (the chunk ends after an
    odd step): the 2D grid is the kernel's (nx, 1, ny)."""
    shape = (20, 16)
    setup = FluidSetup(
        lattice=D2Q9, shape=shape, omega=1.0 / 0.7, dtype="float64", collision="bgk",
        solid=walls_along_last_axis(shape), body_force=BodyForce((2e-5, 0.0)),
    )  # fmt: skip
    position = [[6.3, 7.1, 0.0], [11.8, 8.4, 0.0], [19.6, 4.2, 0.0]]
    velocity = [[0.01, -0.01, 0.0], [-0.005, 0.0, 0.0], [0.0, 0.01, 0.0]]
    omega = [[0.0, 0.0, 0.01], [0.0, 0.0, -0.02], [0.0, 0.0, 0.0]]
    (xla_f, xla_track), (native_f, native_track) = both_runs(
        setup, spheres(position, velocity, omega, jnp.float64), 4, (0.01, 0.0)
    )
    np.testing.assert_allclose(native_f, xla_f, rtol=0, atol=ROUND_OFF)
    np.testing.assert_allclose(native_track, xla_track, rtol=0, atol=ROUND_OFF)
    assert np.abs(xla_track[:, :, 6:8]).min(axis=0).max() > 1e-7, "the disks feel a force"


def test_native_coupled_step_with_16_bit_storage(storage="float16", bound=1e-5):
    """Float16 storage, float32 compute (float32 storage: the app test below). The XLA step
    and the kernel round float32 values equal to round-off to half, so a value that straddles
    a rounding boundary differs by one unit of the half, 2^-10 |f - w| (|f - w| < 0.01 here)."""
    shape = (16, 14, 12)
    setup = FluidSetup(
        lattice=D3Q19, shape=shape, omega=1.0 / 0.8, dtype="float32", collision="trt",
        storage=storage,
    )  # fmt: skip
    position = [[7.3, 7.1, 6.9], [0.2, 13.7, 9.5]]
    velocity = [[0.01, -0.02, 0.005], [-0.01, 0.0, 0.02]]
    omega = [[0.0, 0.0, 0.01], [0.0, -0.004, 0.0]]
    (xla_f, xla_track), (native_f, native_track) = both_runs(
        setup, spheres(position, velocity, omega, jnp.float32), 4, (0.02, 0.01, 0.0)
    )
    if storage == "float16":  # the stored halves are (f - w) 2^15
        w = D3Q19.w.reshape(-1, 1, 1, 1)
        xla_f, native_f = xla_f / 32768.0 + w, native_f / 32768.0 + w
    difference = np.abs(native_f - xla_f)
    assert difference.max() < bound
    if storage == "float16":  # most halves are equal, some differ by one unit (1.4 % measured)
        assert np.mean(difference > 0) < 0.05, np.mean(difference > 0)
    velocity_scale = np.abs(xla_track[:, :, 3:6]).max()
    assert np.abs(native_track[:, :, 3:6] - xla_track[:, :, 3:6]).max() < 1e-4 * velocity_scale


def test_a_coupled_case_runs_on_the_native_kernel_and_on_slabs(tmp_path):
    """The app: the tiny settling sphere on the native kernel tracks its sphere and writes its
    fluid as the XLA step does (float32 round-off); split into two slabs along x on two fake
    devices (xla halo, LbPsmPhase inside shard_map) it equals the one-device native run to the
    same bound (the forces on the sphere are summed over the slabs in another order). Owned
    bodies on the native kernel: tests/test_coupling_owned.py."""
    runs = {}
    for kernel in ("xla", "native"):
        runs[kernel] = tmp_path / kernel
        result = run_solver(
            [*TINY, "checkpoint=none", f"fluid.kernel={kernel}", f"hydra.run.dir={runs[kernel]}"],
            {"XLA_FLAGS": FAST_COMPILE},
        )
        assert result.returncode == 0, result.stderr[-2000:]
    assert_close(runs["native"], runs["xla"], SPLIT_RELATIVE)
    config = json.loads((runs["native"] / "run.json").read_text())["config"]
    assert config["fluid"]["kernel"] == "native"
    slabs = [*TINY, "checkpoint=none", "fluid.kernel=native", "domain.mesh=[2,1,1]"]
    two, ir = tmp_path / "two", tmp_path / "ir"
    result = run_solver(
        [*slabs, f"hydra.run.dir={two}"],
        {
            "XLA_FLAGS": f"{FAST_COMPILE} --xla_force_host_platform_device_count=2",
            "JAX_DUMP_IR_TO": str(ir),
        },
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((two / "run.json").read_text())["domain"]["mesh"] == [2, 1, 1]
    assert_close(two, runs["native"], SPLIT_RELATIVE)
    # the replicated bodies hold a zero-size leaf (their overflow record): none may enter the
    # shard_map, where JAX 0.11.2 crashes on it (solver/distributed/manual.py)
    signatures = dumped_manual_signatures(ir)
    assert signatures, "no shard_map in the dumped modules: the check would see nothing"
    assert zero_size(signatures) == [], zero_size(signatures)


# make test-long (about 25 s): the native kernel's coupled step over MPI is checked in make test
# with owned bodies (tests/test_coupling_owned.py), replicated bodies over MPI with the XLA step
# (tests/test_coupling_runs.py), and these slabs on two fake devices above
@pytest.mark.long
def test_a_coupled_case_on_the_native_kernel_on_two_mpi_processes(tmp_path):
    """The tiny settling sphere on the native kernel as two slabs on two MPI processes (mpi
    halo) equals the one-device native run (float32 round-off)."""
    single = tmp_path / "native"
    result = run_solver(
        [*TINY, "checkpoint=none", "fluid.kernel=native", f"hydra.run.dir={single}"],
        {"XLA_FLAGS": FAST_COMPILE},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    slabs = [*TINY, "checkpoint=none", "fluid.kernel=native", "domain.mesh=[2,1,1]"]
    processes = tmp_path / "mpi"
    result = mpirun(
        2,
        ["-m", "solver", *slabs, "domain.halo=mpi", f"hydra.run.dir={processes}"],
        extra_env={"XLA_FLAGS": FAST_COMPILE},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((processes / "run.json").read_text())["domain"]["processes"] == 2
    assert_close(processes, single, SPLIT_RELATIVE)
