"""Bodies in the fluid owned by the shard that holds their centre (``coupling.bodies=owned``).

A duct of 16 x 18 x 18 nodes (walls on y and z, periodic along x) carries five spheres of
radius 1.6 cells, placed against the faces of a 2 x 2 x 2 mesh (blocks of 8 x 9 x 9 cells,
faces at 5 mm): one just before the x face (the flow carries it across), one across the
corner of all eight blocks, one within reach of three faces, one across the periodic face
x = 0 (its cover wraps onto the last blocks), and one 0.05 mm below the corner sphere
(lubrication, then contact, across the z face). They settle and drift with the flow, so
several cross a face during the run (migration), and every sphere's force is summed over the
shards its stencil touches.

The owned path on one device reproduces the replicated one bit for bit (the same cover, the
same forces, in the same order: asserted). Split, the cells' forces on a body add in another
order (float32, as with replicated bodies, tests/test_coupling_runs.py), so a split run equals
one device to round-off (measured: SPLIT_RELATIVE).
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from hooks import SignalAt
from mpi import mpirun
from shared_runs import shared_directory
from solver_cli import FAST_COMPILE, run_solver

from solver.api import compose_config
from solver.errors import PreemptedError
from solver.run import simulate

SPHERES = [
    (0.004995, 0.0025, 0.0028),  # 5 um before the x face: the flow carries it across
    (0.0051, 0.0051, 0.0051),  # across the corner of all eight blocks, thrown down at
    (0.0075, 0.0072, 0.0051),  # near the z face: settles across it
    (0.0011, 0.0074, 0.0075),  # across the periodic face x = 0 (its cover wraps)
    (0.0051, 0.0051, 0.00309),  # 0.01 mm below the corner sphere: lubrication, contact
]
THROWN = {1: "[0.0, 0.0, -0.03]"}  # m/s (lattice Mach 0.26): the corner sphere hits the one below
BODIES = (
    "["
    + ", ".join(
        f"{{shape: sphere, material: bead, radius: 0.001, position: [{x}, {y}, {z}], "
        f"velocity: {THROWN.get(i, '[0.0, 0.0, 0.0]')}}}"
        for i, (x, y, z) in enumerate(SPHERES)
    )
    + "]"
)
DUCT = [
    "case=duct", "fluid=d3q19", "coupling=psm", "case.side=0.01", "case.length=0.01",
    "case.u_max=0.02", "case.viscosity=1.0e-5", "case.density=1000", "case.resolution=16",
    f"coupling.scene.bodies={BODIES}",
    "+coupling.scene.materials.bead={young: 1.0e+4, poisson: 0.25, density: 1100.0, "
    "restitution: 0.5, friction: 0.3}",
    "coupling.scene.wall_material=bead",
    "coupling.lubrication_min_gap=0.2",  # of the radius: the thrown sphere reaches contact
    "steps=12", "chunk=6", "output.every=6", "output.png=false",
]  # fmt: skip
OWNED = "coupling.bodies=owned"
# float32 round-off of the summation order (module docstring): measured <= 2e-6, 10x
SPLIT_RELATIVE = 2e-5


def track(run_dir: Path) -> np.ndarray:
    """(rows, 9) position, velocity and hydrodynamic force of the tracked bodies."""
    return np.genfromtxt(run_dir / "bodies_track.csv", delimiter=",", skip_header=1)[:, 3:]


def last(run_dir: Path, name: str, field: str) -> np.ndarray:
    with h5py.File(run_dir / name, "r") as f:
        step = sorted((k for k in f if k.startswith("step")), key=lambda k: f[k].attrs["step"])
        return f[step[-1]][field][...]


def differences(ours: Path, reference: Path) -> dict[str, float]:
    """Largest relative difference of each compared quantity."""
    a, b = track(ours), track(reference)
    assert a.shape == b.shape
    out = {}
    for name, cols in (("position", slice(0, 3)), ("velocity", slice(3, 6)),
                       ("force", slice(6, 9))):  # fmt: skip
        out[name] = float(np.abs(a[:, cols] - b[:, cols]).max() / np.abs(b[:, cols]).max())
    u_a, u_b = last(ours, "fields.h5", "velocity"), last(reference, "fields.h5", "velocity")
    out["fluid velocity"] = float(np.abs(u_a - u_b).max() / np.abs(u_b).max())
    for field in ("position", "velocity"):
        x_a, x_b = last(ours, "bodies.h5", field), last(reference, "bodies.h5", field)
        out[f"final {field}"] = float(np.abs(x_a - x_b).max() / np.abs(x_b).max())
    return out


def assert_close(ours: Path, reference: Path, relative: float) -> None:
    found = differences(ours, reference)
    print(f"relative differences to one device: {found}")  # pytest -s shows the measurement
    for name, error in found.items():
        assert error <= relative, f"{name}: relative difference {error:.3g} > {relative}"
    count_a = last(ours, "bodies.h5", "contact_count")
    count_b = last(reference, "bodies.h5", "contact_count")
    assert np.array_equal(count_a, count_b), "contact counts differ"


def run(out: Path, args: list[str], devices: int = 1) -> Path:
    flags = FAST_COMPILE
    if devices > 1:
        flags = f"--xla_force_host_platform_device_count={devices} {flags}"
    result = run_solver([*DUCT, "checkpoint=none", *args, f"hydra.run.dir={out}"],
                        {"XLA_FLAGS": flags})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def run_mpi(out: Path, args: list[str]) -> Path:
    """``run`` on two MPI processes (each holding its blocks of ``domain.mesh``)."""
    result = mpirun(
        2,
        ["-m", "solver", *DUCT, "checkpoint=none", *args, f"hydra.run.dir={out}"],
        extra_env={"XLA_FLAGS": FAST_COMPILE},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["domain"]["processes"] == 2
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """The replicated run on one device: the reference (made once for all workers)."""
    out = shared_directory(tmp_path_factory, "owned-single", lambda d: run(d, ["domain=single"]))
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "completed" and summary["coupling"]["bodies"] == len(SPHERES)
    return out


def test_owned_on_one_device_is_the_replicated_run(single, tmp_path):
    out = run(tmp_path / "run", ["domain=single", OWNED])
    assert np.array_equal(track(out), track(single)), "bodies_track.csv differs"
    for name, field in (("fields.h5", "velocity"), ("bodies.h5", "position"),
                        ("bodies.h5", "velocity"), ("bodies.h5", "contact_count")):  # fmt: skip
        assert np.array_equal(last(out, name, field), last(single, name, field)), field


def assert_owned_buffers(out: Path, starts: list) -> None:
    """run.json tells how much of each buffer a run on the 2 x 2 x 2 mesh used (the whole
    scene by default): the most bodies one block held, from the start and every step's
    centres (blocks of 5 mm); each shard builds its pair table at least once in each chunk."""
    summary = json.loads((out / "run.json").read_text())
    assert summary["domain"]["mesh"] == [2, 2, 2]
    buffers = summary["coupling"]["buffers"]
    centres = np.concatenate([[starts], track(out)[:, :3].reshape(-1, len(starts), 3)])
    block = np.clip((centres / 0.005).astype(int), 0, 1) @ np.array([4, 2, 1])
    held = max(np.bincount(row, minlength=8).max() for row in block)
    assert buffers["owned"] == {"key": "coupling.capacity", "size": 5, "most_needed": held}
    assert 1 <= buffers["ghost"]["most_needed"] <= buffers["ghost"]["size"] == 5
    rebuilds = summary["coupling"]["pair_table"]["rebuilds"]
    assert 2 <= rebuilds <= summary["coupling"]["pair_table"]["body_steps"], rebuilds


# make test-long (~45 s): the clump scene on the same mesh below holds three of these spheres
# and two clumps in their places, and asserts all of this and more; make test also checks the
# spheres' owned path bit for bit on one device (above) and on two MPI processes (below)
@pytest.mark.long
def test_owned_on_eight_fake_devices_matches_one(single, tmp_path):
    out = run(tmp_path / "run", ["domain.mesh=[2,2,2]", OWNED], devices=8)
    assert_owned_buffers(out, SPHERES)
    # the run crosses faces: some sphere ends in another block than it started in
    start = np.asarray(SPHERES)
    end = last(out, "bodies.h5", "position")
    assert np.any((start < 0.005) != (end < 0.005)), "no sphere crossed a shard face"
    centres = track(out)[:, :3].reshape(-1, len(SPHERES), 3)
    gap = np.linalg.norm(centres[:, 1] - centres[:, 4], axis=1) - 0.002
    assert gap.min() < 0, "the thrown sphere did not touch the one below it (across the z face)"
    assert_close(out, single, SPLIT_RELATIVE)


# make test-long: make test runs owned bodies on MPI processes on the native kernel (below; the
# same passes of the owned bodies around the kernel, the same mpi halo), and the XLA step's
# owned passes split three ways on fake devices (above)
@pytest.mark.long
def test_owned_on_two_mpi_processes_matches_one(single, tmp_path):
    out = run_mpi(tmp_path / "run", ["domain.mesh=[1,1,2]", "domain.halo=mpi", OWNED])
    assert_close(out, single, SPLIT_RELATIVE)


NATIVE_SLABS = ["fluid.kernel=native", "domain.mesh=[2,1,1]", OWNED]


def test_owned_on_the_native_kernel_on_two_mpi_processes_matches_one(single, tmp_path):
    """fluid.kernel=native (the PSM collision inside the in-place kernel's sweep) with owned
    bodies on two slabs along x, on two MPI processes: the first sphere migrates across the
    slabs' face, the ghosts' partial forces go back to their owners, and the run equals the
    XLA step's replicated run on one device (float32 round-off: the kernel's arithmetic and
    the forces' summation order)."""
    out = run_mpi(tmp_path / "mpi", [*NATIVE_SLABS, "domain.halo=mpi"])
    assert json.loads((out / "run.json").read_text())["config"]["fluid"]["kernel"] == "native"
    assert SPHERES[0][0] < 0.005 < last(out, "bodies.h5", "position")[0, 0], "no migration"
    assert_close(out, single, SPLIT_RELATIVE)


# make test-long (~30 s): the same on two fake devices (xla halo, inside shard_map). make test
# has its parts: owned bodies inside shard_map on eight fake devices (above), the native kernel
# on two fake devices with bodies (tests/test_coupling_native.py), and this scene over MPI.
@pytest.mark.long
def test_owned_on_the_native_kernel_on_two_fake_devices_matches_one(single, tmp_path):
    out = run(tmp_path / "two", NATIVE_SLABS, devices=2)
    assert SPHERES[0][0] < 0.005 < last(out, "bodies.h5", "position")[0, 0], "no migration"
    assert_close(out, single, SPLIT_RELATIVE)


# --- clumps: owned by the shard that holds their centre of mass ------------------------------
# Two clumps of two members (radius 1 mm, centres 0.8 mm either side of the centre of mass) take
# the places of the first two spheres: one just before the x face (the flow carries it across),
# one turned 45 degrees about y across the corner of all eight blocks and thrown down onto a
# sphere 0.015 mm below its lower member, which is thrown up (lubrication, then contact, across
# the z face); a clump's members reach 1.8 mm from its centre, so its cover and contacts cross
# faces its centre does not.
MEMBERS = (
    "[{radius: 0.001, offset: [-0.0008, 0.0, 0.0]}, {radius: 0.001, offset: [0.0008, 0.0, 0.0]}]"
)
CLUMP_CENTRES = [*SPHERES[:4], (0.0051, 0.0051, 0.0026)]  # of mass, for clumps
CLUMP_BODIES = (
    f"[{{shape: clump, material: bead, position: [0.004995, 0.0025, 0.0028], spheres: {MEMBERS}}}, "
    "{shape: clump, material: bead, position: [0.0051, 0.0051, 0.0051], "
    f"orientation: [0.924, 0.0, 0.383, 0.0], velocity: [0.0, 0.0, -0.03], spheres: {MEMBERS}}}, "
    "{shape: sphere, material: bead, radius: 0.001, position: [0.0075, 0.0072, 0.0051]}, "
    "{shape: sphere, material: bead, radius: 0.001, position: [0.0011, 0.0074, 0.0075]}, "
    "{shape: sphere, material: bead, radius: 0.001, position: [0.0051, 0.0051, 0.0026], "
    "velocity: [0.0, 0.0, 0.03]}]"
)
CLUMPS = f"coupling.scene.bodies={CLUMP_BODIES}"


@pytest.fixture(scope="module")
def clumps_single(tmp_path_factory) -> Path:
    """The replicated run of the clump scene on one device: the reference (made once)."""
    out = shared_directory(
        tmp_path_factory, "owned-clumps", lambda d: run(d, ["domain=single", CLUMPS])
    )
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "completed" and summary["coupling"]["bodies"] == 5
    return out


# make test-long (~25 s): the same comparison, at the same bound, is made on eight fake devices
# below (the owned path on one device is checked bit for bit with spheres above)
@pytest.mark.long
def test_owned_clumps_on_one_device_match_the_replicated_run(clumps_single, tmp_path):
    """Owned clumps sum their members' contacts per slot in another order than the replicated
    step sums them per body: equal to float32 round-off (measured 1.3e-7 in the body velocity,
    1.4e-6 in the fluid's), not bit for bit as spheres are."""
    out = run(tmp_path / "run", ["domain=single", OWNED, CLUMPS])
    assert_close(out, clumps_single, SPLIT_RELATIVE)


def test_owned_clumps_on_eight_fake_devices_match_one(clumps_single, tmp_path):
    """The clump scene on a 2 x 2 x 2 mesh of fake devices (xla halo): the first clump
    migrates across the x face, members' covers and contacts cross the faces, the thrown clump
    and sphere touch across the z face, the buffers report what they held, and the run equals
    one device."""
    out = run(tmp_path / "eight", ["domain.mesh=[2,2,2]", OWNED, CLUMPS], devices=8)
    assert_owned_buffers(out, CLUMP_CENTRES)
    # the thrown clump's lower member (offset (0.57, 0, -0.57) mm, turned 45 degrees about y;
    # the clump turns by 4 degrees in the run) and the sphere thrown up at it overlap: contact
    lower = 0.0008 * np.sqrt(0.5) * np.array([1.0, 0.0, -1.0])
    centres = track(out)[:, :3].reshape(-1, len(CLUMP_CENTRES), 3)
    gap = np.linalg.norm(centres[:, 1] + lower - centres[:, 4], axis=1) - 0.002
    assert gap.min() < 0, f"the thrown clump did not touch the sphere below it: gaps {gap}"
    # the first clump starts 5 um before the x face
    assert last(out, "bodies.h5", "position")[0, 0] > 0.005, "the clump did not cross"
    assert_close(out, clumps_single, SPLIT_RELATIVE)


# make test-long (45 s): owned bodies on the native kernel over MPI are checked with spheres
# above, and clumps crossing every face by the eight fake devices
@pytest.mark.long
def test_owned_clumps_on_two_mpi_processes_match_one(clumps_single, tmp_path):
    """The clump scene on two MPI processes as slabs along x on the native kernel (mpi
    halo) equals one device."""
    processes = run_mpi(
        tmp_path / "mpi",
        [CLUMPS, "fluid.kernel=native", "domain.mesh=[2,1,1]", "domain.halo=mpi", OWNED],
    )
    assert_close(processes, clumps_single, SPLIT_RELATIVE)


def test_owned_mesh_too_fine_is_a_config_error(tmp_path):
    """Blocks of 4 cells along x are narrower than a sphere's reach: exit 2, one line."""
    result = run_solver(
        [*DUCT, "checkpoint=none", "domain.mesh=[4,1,1]", OWNED, "steps=1",
         f"hydra.run.dir={tmp_path}"],
        {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    line = [s for s in result.stderr.splitlines() if "coupling.bodies" in s]
    assert line and "use fewer" in line[0], result.stderr[-2000:]


def test_owned_buffer_overflow_stops_the_run(tmp_path):
    """A ghost buffer of one body where three spheres lie near the face: exit 4, naming the
    shard and the key. One step (the first exchange overflows): a chunk of one step compiles
    no loop (15-16 s for the test against 36 s with two steps)."""
    result = run_solver(
        [*DUCT, "checkpoint=none", "domain.mesh=[1,1,2]", OWNED, "coupling.ghost_capacity=1",
         "steps=1", "chunk=1", f"hydra.run.dir={tmp_path}"],
        {"XLA_FLAGS": f"--xla_force_host_platform_device_count=2 {FAST_COMPILE}"},
    )  # fmt: skip
    assert result.returncode == 4, result.stderr[-3000:]
    assert "coupling.ghost_capacity = 1" in result.stderr, result.stderr[-2000:]


# between chunks owned bodies are held whole, as replicated ones, whose resume
# tests/test_coupling_runs.py checks in make test; this one adds the owned chunk's entry
@pytest.mark.long
def test_owned_checkpoint_and_resume_are_bit_identical(tmp_path):
    """Stopped at step 6 of 12 with a checkpoint, the same command resumes; the owned bodies
    (held whole between chunks), their springs and the fluid end exactly as in an
    uninterrupted run."""
    config = compose_config(
        [*DUCT, OWNED, "domain=single", "checkpoint.every_steps=6",
         "checkpoint.every_minutes=null"]
    )  # fmt: skip
    reference = tmp_path / "reference"
    simulate(config, reference, interactive=False)
    stopped = tmp_path / "stopped"
    with pytest.raises(PreemptedError) as err:
        simulate(config, stopped, interactive=False, hook=SignalAt(6))
    assert err.value.resumable
    outcome = simulate(config, stopped, interactive=False)
    assert outcome.summary["checkpoint"]["resumed_from"]["step"] == 6
    assert np.array_equal(track(stopped), track(reference)), "bodies_track.csv differs"
    for name, field in (("fields.h5", "velocity"), ("bodies.h5", "position")):
        assert np.array_equal(last(stopped, name, field), last(reference, name, field)), field
