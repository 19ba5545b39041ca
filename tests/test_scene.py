"""Scenes: loaders (dict, YAML, HDF5), validation errors, overlap checks and packing generators."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from solver.bodies.packings import check_overlaps, clump_lattice, random_spheres_in_box
from solver.bodies.scene import BodySpec, Scene, load_scene, save_scene, scene_from_dict
from solver.errors import ConfigError

STEEL = {"young": 2e11, "poisson": 0.3, "density": 7800.0, "restitution": 0.9, "friction": 0.3}
SCENE = {
    "materials": {"steel": STEEL, "rubber": STEEL | {"young": 1e7, "rolling_friction": 0.01}},
    "bodies": [
        {"shape": "plane", "material": "steel", "point": [0, 0, 0], "normal": [0, 0, 2]},
        {"shape": "sphere", "material": "steel", "radius": 0.01, "position": [0, 0, 0.1]},
        {
            "shape": "sphere", "material": "rubber", "radius": 0.02, "mass": 0.5,
            "position": [0.1, 0, 0.1], "velocity": [1, 2, 3], "angular_velocity": [0, 0, 4],
            "orientation": [0, 0, 0, 2], "fixed": False, "kinematic": True,
        },
        {
            "shape": "clump", "material": "rubber", "density": 900.0,
            "spheres": [{"radius": 0.01, "offset": [-0.01, 0, 0]},
                        {"radius": 0.01, "offset": [0.01, 0, 0]}],
            "position": [0.3, 0, 0.1],
        },
        {
            "shape": "clump", "material": "steel", "mass": 0.2,
            "spheres": [{"radius": 0.01, "offset": [0, 0, 0]},
                        {"radius": 0.005, "offset": [0.02, 0, 0]}],
            "inertia": [[1e-5, 0, 0], [0, 2e-5, 1e-6], [0, 1e-6, 2e-5]],
            "position": [0.5, 0, 0.1], "fixed": True,
        },
    ],
}  # fmt: skip
GLASS = scene_from_dict(SCENE).materials["steel"]


def test_dict_loads_with_defaults_and_normalisation():
    scene = scene_from_dict(SCENE)
    assert [b.shape for b in scene.bodies] == ["plane", "sphere", "sphere", "clump", "clump"]
    np.testing.assert_array_equal(scene.bodies[0].normal, [0, 0, 1])
    np.testing.assert_array_equal(scene.bodies[2].orientation, [0, 0, 0, 1])
    np.testing.assert_array_equal(scene.bodies[1].orientation, [1, 0, 0, 0])
    assert scene.materials["rubber"].rolling_friction == 0.01
    assert scene.materials["steel"].rolling_friction == 0.0
    bodies, planes = scene.arrays()
    assert bodies.position.shape == (4, 3) and planes.point.shape == (1, 3)
    assert list(bodies.member_body) == [0, 1, 2, 2, 3, 3]
    assert list(bodies.body_index) == [1, 2, 3, 4]
    mass = 7800.0 * 4 / 3 * np.pi * 0.01**3
    np.testing.assert_allclose(bodies.mass[:2], [mass, 0.5])
    np.testing.assert_allclose(bodies.inertia[0], 0.4 * mass * 0.01**2 * np.eye(3))
    # clump of two equal spheres on the x axis: I_xx = 2/5 m r^2, I_yy = I_xx + m d^2
    m2 = 900.0 * 2 * 4 / 3 * np.pi * 0.01**3
    expected = np.diag([0.4 * m2 * 1e-4, 0.4 * m2 * 1e-4 + m2 * 1e-4, 0.4 * m2 * 1e-4 + m2 * 1e-4])
    np.testing.assert_allclose(bodies.inertia[2], expected, rtol=1e-12)
    np.testing.assert_array_equal(bodies.inertia[3], SCENE["bodies"][4]["inertia"])
    assert bodies.kinematic.tolist() == [False, True, False, False]
    assert bodies.fixed.tolist() == [False, False, False, True]
    assert bodies.material_names[bodies.material[1]] == "rubber"


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".h5", ".hdf5"])
def test_file_round_trip(tmp_path, suffix):
    scene = scene_from_dict(SCENE)
    path = tmp_path / f"scene{suffix}"
    save_scene(scene, path)
    loaded = load_scene(path)
    assert loaded == scene
    assert loaded != Scene(scene.materials, scene.bodies[:-1])


def test_dict_round_trip_and_equality_sees_changes():
    scene = scene_from_dict(SCENE)
    assert scene_from_dict(scene.to_dict()) == scene
    other = copy.deepcopy(SCENE)
    other["bodies"][3]["spheres"][1]["offset"] = [0.01, 0, 1e-12]
    other["bodies"][3]["inertia"] = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert scene_from_dict(other) != scene


def test_handwritten_yaml(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "materials:\n  steel: {young: 2.0e+11, poisson: 0.3, density: 7800, restitution: 0.9,"
        " friction: 0.3}\nbodies:\n  - {shape: sphere, material: steel, radius: 0.01,"
        " position: [0, 0, 0.1]}\n"
    )
    scene = load_scene(path)
    assert scene.bodies == [
        BodySpec("sphere", "steel", radius=0.01, position=np.array([0, 0, 0.1]))
    ]


def test_yaml_python_tag_is_rejected_not_executed(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "evil.yaml"
    path.write_text(f"materials: !!python/object/apply:os.system ['touch {marker}']\nbodies: []\n")
    with pytest.raises(ConfigError, match="evil.yaml"):
        load_scene(path)
    assert not marker.exists()


def _bad(path: str, value):
    data = copy.deepcopy(SCENE)
    *parents, last = path
    target = data
    for p in parents:
        target = target[p]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return data


BAD = [
    (("bodies", 1, "material"), "gold", "bodies.scene.bodies[1].material", "'gold'"),
    (("bodies", 1, "radius"), 0.0, "bodies.scene.bodies[1].radius", "0.0"),
    (("bodies", 1, "radius"), -1, "bodies.scene.bodies[1].radius", "-1"),
    (("bodies", 2, "mass"), -0.5, "bodies.scene.bodies[2].mass", "-0.5"),
    (("bodies", 3, "density"), 0, "bodies.scene.bodies[3].density", "0"),
    (("bodies", 3, "spheres", 1, "radius"), -0.01, "bodies.scene.bodies[3].spheres[1].radius", ""),
    (("materials", "steel", "density"), 0, "bodies.scene.materials.steel.density", "0"),
    (("materials", "steel", "young"), -2e11, "bodies.scene.materials.steel.young", "-2"),
    (("materials", "steel", "poisson"), 0.5, "bodies.scene.materials.steel.poisson", "0.5"),
    (("materials", "steel", "poisson"), -1.0, "bodies.scene.materials.steel.poisson", "-1.0"),
    (("materials", "steel", "restitution"), 0, "bodies.scene.materials.steel.restitution", "0"),
    (("materials", "steel", "restitution"), 1.1, "bodies.scene.materials.steel.restitution", "1.1"),
    (("materials", "steel", "friction"), -0.1, "bodies.scene.materials.steel.friction", "-0.1"),
    (("materials", "steel", "friction"), KeyError, "bodies.scene.materials.steel.friction", "None"),
    (("bodies", 1, "radius"), KeyError, "bodies.scene.bodies[1].radius", "None"),
    (("bodies", 1, "position"), KeyError, "bodies.scene.bodies[1].position", "None"),
    (("bodies", 0, "normal"), KeyError, "bodies.scene.bodies[0].normal", "None"),
    (("bodies", 1, "position"), [0, 0], "bodies.scene.bodies[1].position", "[0, 0]"),
    (("bodies", 1, "velocity"), [0, 0, 1, 2], "bodies.scene.bodies[1].velocity", "[0, 0, 1, 2]"),
    (("bodies", 1, "orientation"), [1, 0, 0], "bodies.scene.bodies[1].orientation", "[1, 0, 0]"),
    (("bodies", 1, "position"), [0, float("nan"), 0], "bodies.scene.bodies[1].position", "nan"),
    (("bodies", 1, "radius"), float("inf"), "bodies.scene.bodies[1].radius", "inf"),
    (("bodies", 2, "density"), 100.0, "bodies.scene.bodies[2].mass", "0.5"),
    (("bodies", 1, "orientation"), [0, 0, 0, 0], "bodies.scene.bodies[1].orientation", "[0.0, 0.0"),
    (("bodies", 0, "normal"), [0, 0, 0], "bodies.scene.bodies[0].normal", "[0.0, 0.0, 0.0]"),
    (("bodies", 4, "inertia"), [[1, 0, 0], [0, 1, 0], [0.5, 0, 1]], "bodies[4].inertia", "0.5"),
    (("bodies", 4, "inertia"), [[1, 0, 0], [0, -1, 0], [0, 0, 1]], "bodies[4].inertia", "-1"),
    (("bodies", 4, "inertia"), [[1, 2, 0], [2, 1, 0], [0, 0, 1]], "bodies[4]: eigenvalue -1", ""),
    (("bodies", 4, "inertia"), [[1, 0], [0, 1]], "bodies.scene.bodies[4].inertia", "[[1, 0]"),
    (("bodies", 1, "shape"), "cube", "bodies.scene.bodies[1].shape", "'cube'"),
    (("bodies", 1, "colour"), "red", "bodies.scene.bodies[1].colour", "'red'"),
    (("bodies", 2, "fixed"), True, "bodies.scene.bodies[2].kinematic", "True"),
    (("bodies", 3, "spheres", 1, "offset"), [0.02, 0, 0], "bodies[3].spheres", "centre of mass"),
]


@pytest.mark.parametrize(("path", "value", "key", "shown"), BAD, ids=[b[2] + b[3] for b in BAD])
def test_bad_input_names_key_and_value(path, value, key, shown):
    with pytest.raises(ConfigError) as caught:
        scene_from_dict(_bad(path, value))
    message = str(caught.value)
    assert "\n" not in message
    assert key in message and shown in message
    assert "allowed" in message


def test_hdf5_bad_value_names_file_and_body(tmp_path):
    import h5py

    path = tmp_path / "s.h5"
    save_scene(scene_from_dict(SCENE), path)
    with h5py.File(path, "r+") as f:
        f["bodies/radius"][2] = -3.0
    with pytest.raises(ConfigError, match=r"s\.h5\.bodies\[2\]\.radius = -3\.0"):
        load_scene(path)


def test_overlap_check_finds_planted_pair():
    scene = random_spheres_in_box(2000, 0.005, (0, 0, 0), (0.3, 0.3, 0.3), GLASS, seed=3)
    check_overlaps(scene)
    bodies = list(scene.bodies)
    moved = bodies[1500].position + np.array([0.009, 0.0, 0.0])  # 1 mm overlap
    bodies[700] = BodySpec("sphere", "steel", radius=0.005, position=moved)
    planted = Scene(scene.materials, bodies)
    with pytest.raises(ConfigError) as caught:
        check_overlaps(planted)
    message = str(caught.value)
    assert "bodies[700]" in message and "bodies[1500]" in message
    assert "by 0.001 m" in message
    check_overlaps(planted, tolerance=0.25)  # 1 mm is 0.2 of the radius


def test_overlap_check_planes_and_clumps():
    scene = scene_from_dict(SCENE)
    check_overlaps(scene)
    sunk = _bad(("bodies", 1, "position"), [0, 0, 0.008])
    with pytest.raises(ConfigError, match=r"bodies\[1\].*plane .*bodies\[0\] by 0.002 m"):
        check_overlaps(scene_from_dict(sunk))
    touching = _bad(("bodies", 3, "position"), [0.1, 0.0, 0.1 + 0.028])
    with pytest.raises(ConfigError, match=r"bodies\[2\] .*bodies\[3\] by 0.0002679 m"):
        check_overlaps(scene_from_dict(touching))


def test_random_spheres_deterministic_inside_box_no_overlap():
    lower, upper = np.array([0.0, -0.1, 0.2]), np.array([0.2, 0.1, 0.3])
    a = random_spheres_in_box(500, (0.003, 0.006), lower, upper, GLASS, seed=7)
    b = random_spheres_in_box(500, (0.003, 0.006), lower, upper, GLASS, seed=7)
    c = random_spheres_in_box(500, (0.003, 0.006), lower, upper, GLASS, seed=8)
    assert a == b and a != c
    assert len(a.bodies) == 500
    bodies, _ = a.arrays()
    r = bodies.member_radius[:, None]
    assert np.all(bodies.position - r >= lower) and np.all(bodies.position + r <= upper)
    assert r.min() >= 0.003 and r.max() <= 0.006 and r.max() - r.min() > 0.002
    check_overlaps(a)


def test_random_spheres_impossible_packing_message():
    with pytest.raises(ConfigError) as caught:
        random_spheres_in_box(200, 0.1, (0, 0, 0), (1, 1, 1), GLASS, seed=0, max_attempts=200)
    message = str(caught.value)
    assert "generator.n = 200" in message
    placed = int(message.split("placed ")[1].split(" of")[0])
    assert 0 < placed < 200
    fraction = float(message.split("packing fraction ")[1].split(")")[0])
    assert fraction == pytest.approx(placed * 4 / 3 * np.pi * 0.1**3, abs=1e-3)


def test_clump_lattice():
    spheres = [(0.01, (0.01, 0, 0)), (0.01, (-0.01, 0, 0)), (0.008, (0, 0.012, 0))]
    a = clump_lattice((2, 3, 4), 0.05, spheres, GLASS, orientation_jitter=1.0, seed=5)
    assert a == clump_lattice((2, 3, 4), 0.05, spheres, GLASS, orientation_jitter=1.0, seed=5)
    assert a != clump_lattice((2, 3, 4), 0.05, spheres, GLASS, orientation_jitter=1.0, seed=6)
    assert len(a.bodies) == 24 and all(b.shape == "clump" for b in a.bodies)
    orientations = np.array([b.orientation for b in a.bodies])
    np.testing.assert_allclose(np.linalg.norm(orientations, axis=1), 1.0)
    assert np.all(orientations[:, 0] >= np.cos(0.5) - 1e-12) and np.ptp(orientations[:, 0]) > 0
    check_overlaps(a)
    loaded = scene_from_dict(a.to_dict())  # re-centred clumps pass validation
    for x, y in zip(loaded.bodies, a.bodies, strict=True):  # renormalising moves the last bit
        np.testing.assert_allclose(x.orientation, y.orientation, rtol=0, atol=1e-15)
    with pytest.raises(ConfigError, match="spacing = 0.03"):
        clump_lattice((2, 2, 2), 0.03, spheres, GLASS)


def _file_problem(path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_scene(path)
    err = caught.value
    assert err.key == "case.file" and err.value == str(path)
    assert "\n" not in str(err)
    return err.hint


def test_a_file_that_is_no_scene_names_case_file_and_the_reason(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "broken.yaml").write_text("materials:\n  steel: {young: 1\nbodies: []\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "empty.yml").write_text("")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "text.h5").write_text("not hdf5\n")
    (tmp_path / "scene.txt").write_text("materials: {}\n")
    assert _file_problem("/etc/passwd") == "its name has no .yaml, .yml, .h5 or .hdf5 suffix"
    assert "ends in '.txt'" in _file_problem(tmp_path / "scene.txt")
    assert _file_problem(tmp_path / "missing.yaml") == "no such file"
    assert _file_problem(tmp_path / "dir.yaml") == "it is a directory"
    assert "not YAML" in _file_problem(tmp_path / "broken.yaml")
    assert "at line 3" in _file_problem(tmp_path / "broken.yaml")
    assert "not a YAML mapping" in _file_problem(tmp_path / "list.yaml")
    assert "empty" in _file_problem(tmp_path / "empty.yml")
    assert "not a text file" in _file_problem(tmp_path / "binary.yaml")
    assert "not an HDF5 file" in _file_problem(tmp_path / "text.h5")


def test_hdf5_without_the_scene_groups_and_an_unreadable_file(tmp_path, monkeypatch):
    import pathlib

    import h5py

    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1, 2, 3]
    assert "without the scene layout" in _file_problem(tmp_path / "other.h5")

    path = tmp_path / "locked.yaml"
    path.write_text("materials: {}\n")
    real_open = pathlib.Path.open

    def refuse(self, *args, **kwargs):  # chmod does not stop root, who runs CI containers
        if self == path:
            raise PermissionError(13, "Permission denied")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", refuse)
    assert _file_problem(path) == "cannot read it: Permission denied"
