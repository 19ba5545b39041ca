"""``bodies.mesh`` through the app: box_fill split over 8 fake CPU devices against one device."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from tests.solver_cli import FAST_COMPILE, run_solver

# relative to the largest value; the decomposition differs from one device in the rounding of
# some pair forces (docs/body_decomposition.md: ~1e-15 after 100 steps, x10 per 100 steps of
# collisions); 400 steps of a pouring bed stay far below this, a missed contact would not
EQUALITY_BOUND = 1e-8


def _final(tmp_path, name: str, extra: list[str], env: dict) -> tuple[dict, np.ndarray]:
    out = tmp_path / name
    result = run_solver(["case=box_fill", "case.count=64", "case.box=[0.06,0.06,0.12]",
                         "steps=400", "chunk=200", f"hydra.run.dir={out}", *extra],
                        env_extra=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    with h5py.File(out / "bodies.h5") as f:
        last = sorted(k for k in f if k.startswith("step_"))[-1]
        fields = {k: f[last][k][()] for k in ("position", "velocity", "contact_count")}
    summary = json.loads((out / "run.json").read_text())
    return fields, summary


@pytest.mark.long  # the decomposed step equals one device in test_body_decomposition.py
def test_box_fill_on_a_mesh_equals_one_device(tmp_path):
    one, _ = _final(tmp_path, "one", [], {"XLA_FLAGS": ""})
    split, summary = _final(tmp_path, "split", ["bodies.mesh=[2,2,2]"],
                            {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})  # fmt: skip
    assert summary["decomposition"]["mesh"] == [2, 2, 2]
    assert summary["decomposition"]["ghosts_max"] > 0
    assert summary["decomposition"]["migrated"] > 0  # bodies crossed subdomain faces
    # the subdomains keep their pair tables: rebuilt at each chunk's start and as bodies pour
    table = summary["pair_table"]
    assert 2 <= table["rebuilds"] < table["body_steps"] == 400, table
    for key in ("position", "velocity"):
        scale = np.max(np.abs(one[key]))
        assert np.max(np.abs(split[key] - one[key])) <= EQUALITY_BOUND * scale, key
    np.testing.assert_array_equal(split["contact_count"], one["contact_count"])


# A lattice of 32 two-sphere clumps, turned at random, on a floor; a sphere from the next block
# along x falls onto two of them, one in each block (contacts with a ghost's member), and a clump
# flies across the x face above them (migration); 600 steps (0.016 s), 20 chunks
# of 30 steps between the scene's outputs: one chunk length, so each run compiles one chunk (a
# last chunk of another length compiles a second program: 9 s of a 30 s run). The run was
# 1,470 steps with the flying clump 1 cm farther from the face: 56 s for the two runs, 46 s now.
MEMBERS = "[{radius: 0.01, offset: [-0.01, 0, 0]}, {radius: 0.01, offset: [0.01, 0, 0]}]"
CLUMP_SCENE = [
    "case=scene", "case.bodies=[]", "steps=600", "chunk=1000",
    "case.generate={kind: clump_lattice, counts: [4, 4, 2], spacing: 0.045, material: glass, "
    f"seed: 0, spheres: {MEMBERS}, orientation_jitter: 0.3, origin: [0, 0, 0.016]}}",
    "case.extra_bodies=[{shape: plane, material: glass, point: [0, 0, 0], normal: [0, 0, 1]}, "
    "{shape: sphere, material: glass, radius: 0.01, position: [0.07, 0.045, 0.085], "
    "velocity: [0.0, 0.0, -1.0]}, {shape: clump, material: glass, position: [0.06, 0.02, 0.1], "
    f"velocity: [1.0, 0.0, 0.0], spheres: {MEMBERS}}}]",
]  # fmt: skip
# the clumps' round-off (forces summed per member, then per slot, in another order than one
# device) grows through the collisions: after 600 steps 0 in the positions, 6e-17 in the
# velocities and 7e-18 in the orientations (measured; after 1,470 steps 5e-17, 4e-15 and 2e-16,
# at 0.1 s 1.2e-9 and 5e-8); a missed or extra contact would change them at order one
CLUMP_BOUND = {"position": 1e-10, "velocity": 1e-9, "orientation": 1e-10}


def _last_sample(out) -> dict:
    with h5py.File(out / "bodies.h5") as f:
        last = sorted(k for k in f if k.startswith("step_"))[-1]
        return {k: f[last][k][()] for k in (*CLUMP_BOUND, "contact_count")}


def test_clumps_on_a_mesh_equal_one_device(tmp_path):
    """Clumps decomposed over a 2 x 2 x 1 mesh of fake devices: each owned by the subdomain
    of its centre of mass, its members in contacts with ghosts' members across the faces."""
    runs = {}
    split_flags = f"--xla_force_host_platform_device_count=4 {FAST_COMPILE}"
    for name, extra, flags in (
        ("one", [], FAST_COMPILE),
        ("split", ["bodies.mesh=[2,2,1]"], split_flags),
    ):
        out = tmp_path / name
        result = run_solver(
            [*CLUMP_SCENE, *extra, f"hydra.run.dir={out}"], env_extra={"XLA_FLAGS": flags}
        )
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = _last_sample(out)
    summary = json.loads((tmp_path / "split" / "run.json").read_text())
    traffic = summary["decomposition"]
    assert traffic["mesh"] == [2, 2, 1] and traffic["migrated"] >= 1, traffic
    assert traffic["ghost_contacts_max"] >= 1, traffic  # members touch across a face
    one, split = runs["one"], runs["split"]
    for key, bound in CLUMP_BOUND.items():
        error = np.max(np.abs(split[key] - one[key])) / np.max(np.abs(one[key]))
        assert error <= bound, f"{key}: relative difference {error:.3g} > {bound}"
    np.testing.assert_array_equal(split["contact_count"], one["contact_count"])


def test_mesh_for_too_few_devices_is_a_config_error(tmp_path):
    result = run_solver(["case=box_fill", "case.count=8", "bodies.mesh=[2,2,2]", "steps=10",
                         f"hydra.run.dir={tmp_path}"], env_extra={"XLA_FLAGS": ""})  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "bodies.mesh" in result.stderr.strip().splitlines()[-1]
