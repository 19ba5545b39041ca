"""The `scene` body case (solver.bodies.scene_case): scenes from YAML/HDF5 files, generated packings
and inline bodies, through the app and in-process."""

from __future__ import annotations

import json

import numpy as np
import pytest
from solver_cli import ROOT, run_solver

from solver.bodies.cases import build_body_case
from solver.bodies.packings import overlapping_pairs
from solver.bodies.scene import load_scene, save_scene, scene_from_dict
from solver.bodies.scene_case import bodies_outside, grid_for_scene
from solver.config import load
from solver.errors import ConfigError

GLASS = {"young": 1.0e8, "poisson": 0.25, "density": 2500.0, "restitution": 0.5, "friction": 0.3}


def compose(*overrides: str):
    """The typed RunConfig of `python -m solver OVERRIDES` (Hydra's compose API, in-process)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from solver.app import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return load(hydra_compose(config_name="config", overrides=list(overrides)))


def _two_spheres(gap: float = 0.001) -> dict:
    return {
        "materials": {"glass": GLASS},
        "bodies": [
            {"shape": "plane", "material": "glass", "point": [0, 0, 0], "normal": [0, 0, 1]},
            {"shape": "sphere", "material": "glass", "radius": 0.01, "position": [0, 0, 0.01]},
            {
                "shape": "sphere",
                "material": "glass",
                "radius": 0.01,
                "position": [0, 0, 0.03 + gap],
            },
        ],
    }


def test_scene_with_a_clump_from_yaml_file_runs_through_the_app(tmp_path):
    scene = _two_spheres()
    scene["bodies"].append(
        {
            "shape": "clump",
            "material": "glass",
            "spheres": [
                {"radius": 0.008, "offset": [-0.008, 0, 0]},
                {"radius": 0.008, "offset": [0.008, 0, 0]},
            ],
            "position": [0.0, 0.0, 0.08],
            "angular_velocity": [0.0, 3.0, 0.0],
        }
    )
    path = tmp_path / "scene.yaml"
    save_scene(scene_from_dict(scene), path)
    out = tmp_path / "run"
    result = run_solver(
        [
            "case=scene",
            f"case.file={path}",
            "steps=400",
            "case.output_every=200",
            f"hydra.run.dir={out}",
        ]
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 400
    assert summary["bodies"] == 3 and summary["planes"] == 1
    assert summary["info"]["spheres"] == 4 and summary["info"]["source"] == str(path)
    assert summary["left_grid"] is None
    diag = summary["diagnostics"]
    assert diag["positions_finite"] and diag["contacts_max"] >= 1  # the lowest sits on the floor
    # the spheres rest on each other and the floor, they do not pass through it
    assert diag["lowest_centre_final_m"] > 0.009
    # bodies.diagnostics_every null: a scene totals its energies at the output steps only
    rows = np.loadtxt(out / "energies.csv", delimiter=",", skiprows=1, ndmin=2)
    np.testing.assert_array_equal(rows[:, 0], [0, 200, 400])


def test_example_hdf5_scene_by_relative_path_runs_through_the_app(tmp_path):
    relative = "data/scenes/pile.h5"  # resolved against the directory the app starts in (ROOT)
    assert load_scene(ROOT / relative) == load_scene(ROOT / "data/scenes/pile.yaml")
    result = run_solver(
        ["case=scene", f"case.file={relative}", "steps=200", f"hydra.run.dir={tmp_path}"]
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "completed" and summary["bodies"] == 5
    assert summary["info"]["source"] == str(ROOT / relative)


def test_overlapping_scene_file_exits_2_with_one_line_naming_the_bodies(tmp_path):
    path = tmp_path / "bad.h5"
    save_scene(scene_from_dict(_two_spheres(gap=-0.005)), path)
    result = run_solver(["case=scene", f"case.file={path}", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "case.bodies[1] = 'overlaps case.bodies[2] by 0.005 m'" in lines[0]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"radius": -0.01}, r"bad.yaml.bodies\[1\].radius = -0.01"),
        ({"mass": 0.0}, r"bad.yaml.bodies\[1\].mass = 0.0"),
        ({"inertia": [[1, 0, 0], [0, 1, 0], [0, 0, -1]]}, r"bad.yaml.bodies\[1\].inertia"),
    ],
)
def test_bad_body_in_a_file_names_the_body(tmp_path, change, needle):
    import yaml

    scene = _two_spheres()
    scene["bodies"][1] |= change
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(scene))
    with pytest.raises(ConfigError, match=needle):
        build_body_case(compose("case=scene", f"case.file={path}"))


def test_diagnostics_every_is_checked():
    assert compose("case=scene", "bodies.diagnostics_every=7").bodies.diagnostics_every == 7
    assert compose("case=scene").bodies.diagnostics_every is None
    key = "bodies.diagnostics_every"
    with pytest.raises(ConfigError, match=f"{key} = 0: allowed an integer >= 1"):
        compose("case=scene", "bodies.diagnostics_every=0")
    with pytest.raises(ConfigError, match=f"{key} = 5: allowed null or 1 with bodies.mesh"):
        compose("case=scene", "bodies.diagnostics_every=5", "bodies.mesh=[2,1,1]")


def test_inline_overlap_and_dt_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"case.bodies\[1\] = 'overlaps case.bodies\[2\]"):
        build_body_case(compose("case=scene", "case.bodies.2.position=[0.0,0.0,0.035]"))
    case = build_body_case(compose("case=scene"))
    with pytest.raises(ConfigError, match="case.dt .* stable step"):
        build_body_case(compose("case=scene", f"case.dt={2 * case.stable_dt}"))
    with pytest.raises(ConfigError, match="case.generate"):
        build_body_case(compose("case=scene", "case.file=x.yaml", "+case.generate.kind=lattice"))


def test_generated_random_packing_with_a_floor():
    generate = (
        "case.generate={kind: random_spheres, n: 60, radius: [0.002, 0.004], material: glass, "
        "box_lower: [0, 0, 0], box_upper: [0.04, 0.04, 0.04], seed: 3}"
    )
    floor = (
        "case.extra_bodies=[{shape: plane, material: glass, point: [0, 0, 0], normal: [0, 0, 1]}]"
    )
    case = build_body_case(compose("case=scene", generate, floor))
    setup = case.setup
    assert setup.n_bodies == 60 and setup.n_planes == 1
    centres = np.asarray(case.bodies.position)
    i, _, _ = overlapping_pairs(centres, setup.radius, np.arange(60))
    assert i.size == 0 and centres[:, 2].min() >= 0.002
    assert setup.radius.min() >= 0.002 and setup.radius.max() <= 0.004
    assert setup.grid.cell_size >= 2 * setup.radius.max() + setup.skin
    assert bodies_outside(setup.grid, centres).size == 0
    again = build_body_case(compose("case=scene", generate, floor))
    assert np.array_equal(np.asarray(again.bodies.position), centres)  # seeded


def test_grid_buffer_bounds_and_bodies_outside_the_grid():
    radius = np.full(27, 0.01)
    grid = grid_for_scene(np.zeros(3), np.full(3, 0.06), radius, skin=0.0)
    assert grid.capacity == 15  # (2d)^3 / (pi d^3 / 6) = 15.3 (8 is the true most)
    assert grid.max_neighbors == 26  # (3r)^3 - r^3 = 26 r^3 (12 touching), capped by 27 - 1
    upper = np.asarray(grid.lower) + grid.cell_size * np.asarray(grid.shape)
    positions = np.array([[0.01, 0.01, 0.01], upper + 1e-6, [np.nan, 0.0, 0.0]])
    assert bodies_outside(grid, positions).tolist() == [1, 2]


def test_generated_clump_lattice_builds_without_overlaps():
    generate = (
        "case.generate={kind: clump_lattice, counts: [2, 1, 2], spacing: 0.05, material: glass, "
        "spheres: [{radius: 0.01, offset: [-0.01, 0, 0]}, {radius: 0.01, offset: [0.01, 0, 0]}], "
        "orientation_jitter: 0.3, origin: [0, 0, 0.025], seed: 1}"
    )
    floor = (
        "case.extra_bodies=[{shape: plane, material: glass, point: [0, 0, 0], normal: [0, 0, 1]}]"
    )
    case = build_body_case(compose("case=scene", generate, floor))
    setup = case.setup
    assert setup.n_bodies == 4 and setup.n_spheres == 8 and setup.n_planes == 1
    assert case.info["spheres"] == 8
    # two overlapping members per clump double the bounds (30 and 52), capped by the 8 spheres
    assert setup.grid.capacity == 8 and setup.grid.max_neighbors == 7
    jittered = np.asarray(case.bodies.orientation)
    assert not np.allclose(jittered, jittered[:1])  # seeded random orientations
