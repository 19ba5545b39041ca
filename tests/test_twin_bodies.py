"""The twin of a rigid-body scene: a kinematic body follows its pose sensor and pushes a free
sphere; bad pose sensors are configuration errors."""

from __future__ import annotations

import json

import h5py
import numpy as np

from tests.solver_cli import run_solver

SPEED = 0.5  # m/s of the recorded pusher along +x
POSE_TOLERANCE = 1e-12  # m: the pose is set to the reading at each update, not integrated


def _scene(extra: list[str]) -> list[str]:
    return [
        "case=scene",
        "case.bodies=[{shape: sphere, material: glass, radius: 0.01, position: [0, 0, 0], "
        "kinematic: true}, {shape: sphere, material: glass, radius: 0.01, position: [0.05, 0, 0]}]",
        "case.gravity=[0,0,0]",
        "case.materials.glass.young=1.0e+6",  # soft: a large stable step keeps the test short
        "case.dt=1.0e-4",  # 100 steps per 0.01 s update: updates land on the readings exactly
        "case.duration=0.1",
        "case.margin=0.1",
        "twin=replay",
        "twin.sensors=[{id: pusher, kind: body_pose, body: 0, units: 'm,1'}]",
        "twin.every=0.01",
        *extra,
    ]


def test_kinematic_body_follows_its_pose_sensor(tmp_path):
    recording = tmp_path / "poses.csv"
    lines = ["time,sensor,value,units"]
    for k in range(1, 11):
        t = 0.01 * k
        lines.append(f'{t:.2f},pusher,{SPEED * t:.6f};0;0;1;0;0;0,"m,1"')
    lines.append('0.05,pusher,0;0;0;2;0;0;0,"m,1"')  # not a unit quaternion: quarantined
    recording.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    result = run_solver([*_scene([f"twin.recording={recording}", f"hydra.run.dir={out}"])])
    assert result.returncode == 0, result.stderr[-3000:]
    twin = json.loads((out / "run.json").read_text())["twin"]
    assert twin["pose_updates"] == 10 and twin["rejected_by_reason"] == {"out_of_range": 1}
    with h5py.File(out / "bodies.h5") as f:
        last = sorted(k for k in f if k.startswith("step_"))[-1]
        position = f[last]["position"][()]
        velocity = f[last]["velocity"][()]
    assert abs(position[0, 0] - SPEED * 0.1) < POSE_TOLERANCE  # at the last reading
    np.testing.assert_allclose(velocity[0], [SPEED, 0, 0], atol=1e-9)  # from the readings
    assert velocity[1, 0] > 0.1 * SPEED  # the free sphere was pushed


def test_pose_sensor_on_a_dynamic_body_is_a_config_error(tmp_path):
    result = run_solver(_scene(["twin.sensors=[{id: p, kind: body_pose, body: 1, units: 'm,1'}]",
                                "twin.recording=data/twin/cylinder_recording.csv",
                                f"hydra.run.dir={tmp_path}"]))  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "twin.sensors.p.body" in result.stderr.strip().splitlines()[-1]
