"""One body scene split over a device mesh equals the single-device run (solver.bodies.step).

The scene (tests/body_decomposition_worker.py): 216 spheres of two sizes in a walled box with
gravity, random velocities (3 m/s) and spins, Hertz-Mindlin contacts with friction and rolling
friction, one kinematic and one fixed body, run 100 steps. Bodies migrate between subdomains
and touch ghosts in every run (both asserted). The single-device reference is computed once
here and handed to the workers.

Equality bound. A pair's force is evaluated with the single-device operand order and summed onto
a body in the single-device order (solver/distributed/bodies/forces.py), so the runs differ only
where XLA:CPU rounds an elementwise expression differently for arrays of another length, mostly
fused multiply-adds in vectorised loops: the last bits of some pair forces (measured on one
state: 91 of 343 bodies' forces differ, by <= 1.4e-15 N; 12 with FMA off). Contacts then
amplify such differences, since the dynamics is chaotic. Measured after 100 steps: <= 1.3e-15
relative (max |a - b| over max |a|) in position, velocity, orientation and angular momentum on
fake devices, <= 2.4e-15 over MPI, forces and torques <= 6e-15; continued, the difference grows
about tenfold per 100 steps (3.1e-13 after 400). STATE_RTOL = 1e-10 leaves over four orders of
magnitude, while a single missed contact for one step changes a velocity by F dt / m ~ 1e-4
relative and fails the test. Contact counts must agree exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from body_decomposition_worker import BOX, reference, scene
from mpi import mpirun
from shared_runs import shared_directory
from solver_cli import FAST_COMPILE

from solver.distributed.bodies import BodyOverflowError, plan_layout
from solver.distributed.bodies.run import host_subdomains
from solver.errors import ConfigError

WORKER = str(Path(__file__).resolve().parent / "body_decomposition_worker.py")
# The split runs compile with LLVM's optimisations off and without FMA (compiling is most of
# their time), as the reference does (tests/conftest.py)
ROOT = Path(__file__).resolve().parent.parent
STEPS = 100
STATE_RTOL = 1e-10  # see the module docstring
FIELDS = ("position", "velocity", "orientation", "angular_momentum", "force", "torque")


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory) -> str:
    setup, bodies = scene()
    path = tmp_path_factory.mktemp("body_reference") / "reference.npz"
    np.savez(path, steps=STEPS, **reference(setup, bodies, STEPS))
    return str(path)


def records(stdout: str, tag: str = "RESULT") -> list[dict]:
    return [
        json.loads(line[len(tag) + 1 :])
        for line in stdout.splitlines()
        if line.startswith(tag + " ")
    ]


def check(results: list[dict], meshes: list[list[int]], processes: int) -> None:
    assert [r["mesh"] for r in results] == meshes, f"expected {meshes}, got {results}"
    for r in results:
        name = f"mesh {r['mesh']} ({r['processes']} processes)"
        measured = ", ".join(f"{f} {r['fields'][f]['rel_diff']:.2g}" for f in FIELDS)
        print(f"{name}: relative differences {measured}; migrated {r['migrated']}, "
              f"contacts with ghosts {r['ghost_contacts']}")  # fmt: skip
        assert r["processes"] == processes, name
        for field in FIELDS:
            rel = r["fields"][field]["rel_diff"]
            assert rel <= STATE_RTOL, f"{name}: {field} differs by {rel:.3g} relative"
        assert r["contacts_equal"], f"{name}: contact counts differ"
        assert r["energy_rel_diff"] <= STATE_RTOL, f"{name}: kinetic energy {r['energy_rel_diff']}"
        # the decomposition was exercised: bodies changed owner and touched ghosts
        assert r["migrated"] > 0, f"{name}: no body migrated"
        assert r["ghost_contacts"] > 0, f"{name}: no contact with a ghost"
        overflow = r["overflow_max"]
        assert all(o <= c for o, c in zip(overflow, r["capacities"], strict=False)), name
        assert overflow[5] == 0, f"{name}: a body jumped more than one block"


def fake_devices(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count=8 {FAST_COMPILE}"
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run(
        [sys.executable, WORKER, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def fake_device_run(tmp_path_factory, reference_file) -> str:
    """One worker process on 8 fake CPU devices: both meshes, then a too small ghost buffer
    (one process start and one JAX import for both tests, made once for all pytest workers:
    some 50 s)."""

    def make(path: Path) -> None:
        meshes = [",".join(map(str, m)) for m in FAKE_MESHES]
        result = fake_devices(
            ["--meshes", *meshes, "--reference", reference_file, "--steps", str(STEPS)]
            + ["--chunk", str(STEPS // 2)]  # two chunks: the state carries over between them
            + ["--overflow", "2,2,2"]
        )
        assert result.returncode == 0, result.stderr[-3000:]
        (path / "stdout.txt").write_text(result.stdout)

    shared = shared_directory(tmp_path_factory, "body-fake-devices", make)
    return (shared / "stdout.txt").read_text()


FAKE_MESHES = [[2, 2, 2], [8, 1, 1]]  # corners and edges; eight slabs (many migrations)


@pytest.mark.timeout(900)
def test_fake_devices_equal_single_device(fake_device_run):
    check(records(fake_device_run), FAKE_MESHES, processes=1)


@pytest.mark.timeout(900)
def test_overflow_names_subdomain_and_capacity(fake_device_run):
    (record,) = records(fake_device_run, "OVERFLOW")
    lines = record["message"].splitlines()
    # every subdomain of the [2, 2, 2] box touches the others: each receives > 4 ghosts
    assert len(lines) == 8, record["message"]
    assert lines[0].startswith("after step"), lines[0]
    assert "subdomain 0 (0, 0, 0): ghost buffer needs at least" in lines[0], lines[0]
    needed = int(lines[0].split("needs at least ")[1].split(",")[0])
    assert needed > 4, lines[0]
    assert all("bodies.ghost_capacity = 4" in line for line in lines), record["message"]


@pytest.mark.timeout(900)
def test_mpi_processes_equal_single_device(reference_file):
    args = ["--meshes", "2,1,1", "--reference", reference_file, "--steps", str(STEPS)]
    result = mpirun(2, [WORKER, *args], timeout=900, extra_env={"XLA_FLAGS": FAST_COMPILE})
    assert result.returncode == 0, result.stderr[-3000:]
    check(records(result.stdout), [[2, 1, 1]], processes=2)


# ---- host-side checks (no compilation) -----------------------------------------------------


def test_initial_owner_overflow_is_reported_before_running():
    setup, bodies = scene()
    layout = plan_layout(setup, (2, 2, 2), capacity=10)
    with pytest.raises(BodyOverflowError, match=r"subdomain \d \(\d, \d, \d\) owns \d+ bodies"):
        host_subdomains(setup, layout, bodies)


def test_blocks_narrower_than_the_interaction_range_are_refused():
    setup, _ = scene()
    reach = 2 * setup.radius.max() + setup.skin
    pattern = r"bodies.mesh = \[16, 1, 1\].*2 max\(bounding radius\) \+ skin"
    with pytest.raises(ConfigError, match=pattern):
        plan_layout(setup, (16, 1, 1))  # 0.0125 m blocks < reach
    assert reach <= 0.2 / 8  # while [8, 1, 1] fits
    with pytest.raises(ConfigError, match="at most 4 subdomains"):
        plan_layout(setup, (2, 2, 2), devices=4)
    with pytest.raises(ConfigError, match="3 integers"):
        plan_layout(setup, (2, 2))


def test_owners_cover_the_box_and_clamp_outside():
    setup, bodies = scene()
    layout = plan_layout(setup, (2, 2, 2))
    positions = np.array([[0.01, 0.01, 0.01], [0.19, 0.01, 0.11], [-1.0, 5.0, 0.09]])
    np.testing.assert_array_equal(layout.owner_ranks(positions), [0, 5, 2])
    host = host_subdomains(setup, layout, bodies)
    gid = host["gid"]
    assert sorted(gid[gid >= 0].tolist()) == list(range(setup.n_bodies))


def test_kept_pair_table_gives_the_rebuilt_forces_and_is_rebuilt_when_it_must():
    """``local_contacts`` over a pair table kept from the step before (a Verlet list of the
    owned slots) equals a rebuild every step, and rebuilds when a body moved too far or a slot
    changed hands. The scene's 216 spheres, pressed together on one subdomain, are moved by
    small random steps (contacts open and close), each step evaluated both ways from its own
    tables."""
    from solver.distributed.bodies.forces import local_contacts, unbuilt_table
    from solver.distributed.bodies.step import _origin

    setup, bodies = scene()
    layout = plan_layout(setup, (1, 1, 1), capacity=setup.n_bodies, max_partners=24)
    host = host_subdomains(setup, layout, bodies)
    grid, _ = layout.local_grid()
    params = setup.params(np.float64)
    origin = _origin(layout, np.zeros(3, np.int32), np.float64)
    rows = layout.capacity
    gid = np.asarray(host["gid"])
    state = {name: np.asarray(host[name]) for name in ("partners", "history", "plane_history")}
    placed = jax.tree.map(jax.numpy.asarray, host["bodies"])

    def contacts(position, gid, tables, kept=None):
        return local_contacts(
            setup, grid, origin, gid, placed.replace(position=position), rows,
            tables["partners"], tables["history"], tables["plane_history"], params, kept,
        )  # fmt: skip

    evaluate = jax.jit(contacts)

    def springs(result) -> np.ndarray:
        """(rows, n, 3) the tangential spring of each pair, by the partner's id."""
        partners, history = np.asarray(result.partners), np.asarray(result.history)
        dense = np.zeros((rows, setup.n_bodies, 3))
        row, slot = np.nonzero(partners >= 0)
        dense[row, partners[row, slot]] = history[row, slot]
        return dense

    rng = np.random.default_rng(5)
    # the lattice pressed together about the box's centre: gaps of about a tenth of a radius
    # either way, so that the random steps open and close contacts
    position = 0.5 * BOX + 0.68 * (np.asarray(placed.position) - 0.5 * BOX)
    assert np.all(gid >= 0)  # one subdomain: every slot holds a body
    rebuilt_tables, kept_tables = dict(state), dict(state)
    kept = unbuilt_table(rows, rows, layout.max_partners, np.float64)
    step = setup.rebuild_distance / 3  # several steps between rebuilds
    rebuilds, touching = [], []
    for _ in range(12):
        fresh = evaluate(position, gid, rebuilt_tables)
        reused = evaluate(position, gid, kept_tables, kept)
        rebuilds.append(int(reused.cell_count) > 0)  # zero where the table was kept
        touching.append(int(np.sum(fresh.contact_count)))
        for field in ("force", "torque"):
            np.testing.assert_allclose(
                getattr(reused, field), getattr(fresh, field), rtol=1e-12, atol=1e-15
            )
        # the springs per pair (the two tables list the pairs out of contact differently)
        np.testing.assert_allclose(springs(reused), springs(fresh), rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(reused.contact_count, fresh.contact_count)
        kept, evaluated_at = reused.kept, position
        rebuilt_tables = {n: getattr(fresh, n) for n in state}
        kept_tables = {n: getattr(reused, n) for n in state}
        direction = rng.standard_normal(position.shape)
        position = position + step * direction / np.linalg.norm(direction, axis=1)[:, None]
    print(f"rebuilt at steps {np.flatnonzero(rebuilds).tolist()}, touching {touching}")
    assert rebuilds[0] and not all(rebuilds[1:]) and any(rebuilds[1:]), rebuilds
    assert len(set(touching)) > 1, f"no contact opened or closed: {touching}"
    # a slot that changes hands rebuilds at once, though nothing moved
    swapped = gid.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    same = evaluate(evaluated_at, gid, kept_tables, kept)
    assert int(same.cell_count) == 0
    assert int(evaluate(evaluated_at, swapped, kept_tables, same.kept).cell_count) > 0
