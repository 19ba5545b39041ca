"""The closed-box coupled cases: dkt (two spheres) and sediment (any scene of spheres).

Bad scenes are one-line ConfigErrors naming the key before anything is traced; the DKT stages
are detected from a track whose stages are known; a small sediment run settles its spheres
inside the box through the run loop.
"""

from __future__ import annotations

import numpy as np
import pytest

from solver.api import compose_config
from solver.coupling.cases import build_coupled_case
from solver.errors import ConfigError
from solver.twin.run import run_twin

SEDIMENT = ["case=sediment", "fluid=d3q19", "coupling=psm"]


def _inline(bodies: str) -> list[str]:
    return [*SEDIMENT, "case.generate=null", f"case.bodies={bodies}"]


def sphere(x: float, y: float, z: float, r: float = 0.001, shape: str = "sphere") -> str:
    return f"{{shape:{shape},material:glass,radius:{r},position:[{x},{y},{z}]}}"


@pytest.mark.parametrize(
    ("bodies", "key"),
    [
        (f"[{sphere(0.0005, 0.01, 0.02)}]", r"case.bodies\[0\].position"),
        (f"[{sphere(0.01, 0.01, 0.02)},{sphere(0.01, 0.01, 0.0395)}]",
         r"case.bodies\[1\].position"),
        (f"[{sphere(0.01, 0.01, 0.02)},{sphere(0.0105, 0.01, 0.02)}]", "case"),
        ("[{shape:plane,material:glass,point:[0,0,0.01],normal:[0,0,1]}]",
         r"case.bodies\[0\].shape"),
    ],
    ids=["outside-low-x", "outside-top", "overlapping", "plane"],
)  # fmt: skip
def test_a_bad_scene_is_a_config_error_naming_the_key(bodies, key):
    config = compose_config(_inline(bodies))
    with pytest.raises(ConfigError, match=key):
        build_coupled_case(config)


def test_unknown_wall_material_is_a_config_error_and_clumps_go_into_the_fluid():
    config = compose_config([*SEDIMENT, "case.wall_material=steel"])
    with pytest.raises(ConfigError, match="case.wall_material"):
        build_coupled_case(config)
    clump = (
        "[{shape:clump,material:glass,position:[0.01,0.01,0.02],"
        "spheres:[{radius:0.001,offset:[-0.001,0,0]},{radius:0.001,offset:[0.001,0,0]}]}]"
    )
    case = build_coupled_case(compose_config(_inline(clump)))
    assert case.bodies.n_bodies == 1 and case.bodies.n_spheres == 2
    # touching members: the union is both spheres, exactly; resolution counts member cells
    assert case.coupling.volume[0] == 2 * 4.0 / 3.0 * np.pi * 0.001**3
    assert case.info["diameter_cells_min"] == pytest.approx(6.0)
    # stood upright (x -> -z), its lower member pokes through the floor: named, though the
    # clump's centre is inside
    low = clump.replace(
        "position:[0.01,0.01,0.02]",
        "position:[0.01,0.01,0.0015],orientation:[0.7071068,0,0.7071068,0]",
    )
    with pytest.raises(ConfigError, match=r"case.bodies\[0\].position.*member 1"):
        build_coupled_case(compose_config(_inline(low)))
    with pytest.raises(ConfigError, match="case.trailing"):
        compose_config(
            ["case=dkt", "fluid=d3q19", "coupling=psm", "case.trailing=[0.005,0.005,0.01]"]
        )


def test_dkt_stages_are_found_in_a_track_that_has_them():
    """Two spheres of d = 1 mm: the trailing one catches up (drafting), they touch at t = 0.5 s
    (kissing), then it passes the leading one at t = 0.7 s (tumbling)."""
    case = build_coupled_case(
        compose_config(["case=dkt", "fluid=d3q19", "coupling=psm", "case.resolution=4"])
    )
    d = case.info["diameter_m"]
    times = np.linspace(0.01, 1.0, 100)
    track = np.zeros((100, 2, 9))
    lead_z = 0.03 - 0.02 * times
    gap = np.interp(times, [0.0, 0.5, 0.6, 1.0], [2.0 * d, 0.0, 0.0, 1.0 * d])
    lateral = np.interp(times, [0.0, 0.5, 0.7, 1.0], [0.0, 0.0, 1.0, 1.0]) * (d + gap)
    vertical = np.sqrt(np.maximum((d + gap) ** 2 - lateral**2, 0.0))
    vertical = np.where(times > 0.7, -0.5 * d, vertical)  # half a diameter below: turned over
    track[:, 0, 2] = lead_z
    track[:, 1, 0] = lateral
    track[:, 1, 2] = lead_z + vertical
    track[:, 0, 5] = -0.02
    track[:, 1, 5] = np.gradient(track[:, 1, 2], times)
    out = case.diagnostics(times, track, {})
    assert out["drafting"] and out["drafting_speed_gain_m_s"] > 0
    assert out["kissed"] and out["kiss_time_s"] == pytest.approx(0.49, abs=0.02)
    assert out["tumbled"] and out["tumble_time_s"] == pytest.approx(0.71, abs=0.02)
    assert out["min_gap_over_d"] < 0.05
    # the same pair side by side on the floor, the trailing one a hair lower: not a tumble
    floor = track.copy()
    floor[:, 0, 2] = 0.5 * d
    floor[:, 1, 2] = np.where(times > 0.7, 0.5 * d - 1e-6, floor[:, 0, 2] + vertical)
    assert not case.diagnostics(times, floor, {})["tumbled"]
    # two spheres that never meet: no kiss, no tumble
    apart = track.copy()
    apart[:, 1, 2] = lead_z + 3.0 * d
    out = case.diagnostics(times, apart, {})
    assert not out["kissed"] and not out["tumbled"] and out["min_gap_over_d"] > 1.9


def test_wet_bounce_finds_the_impact_and_the_rebound_in_a_track_that_has_them():
    """A 6 mm sphere falls at up to 0.4 m/s, touches the floor, leaves it at 0.2 m/s, then
    falls back and bounces once more at 0.3 m/s: e = 0.2 / 0.4 (the second bounce is not the
    first rebound), St = rho_s U_in d / (9 mu)."""
    case = build_coupled_case(
        compose_config(["case=wet_bounce", "fluid=d3q19", "coupling=psm", "case.resolution=3"])
    )
    info = case.info
    d, r = info["diameter_m"], 0.5 * info["diameter_m"]
    times = np.arange(1, 61) * 1e-3
    w = np.concatenate([-np.linspace(0.1, 0.4, 20), [0.2, 0.15, 0.1, 0.0, -0.1, -0.2],
                        np.full(10, -0.05), [0.3], np.full(23, 0.0)])  # fmt: skip
    gap = np.concatenate([np.linspace(4e-3, 0.0, 20), [2e-4, 4e-4, 5e-4, 5e-4, 3e-4, 1e-4],
                          np.linspace(8e-5, 0.0, 10), [1e-4], np.full(23, 1e-4)])  # fmt: skip
    track = np.zeros((60, 1, 9))
    track[:, 0, 2] = gap + r
    track[:, 0, 5] = w
    out = case.diagnostics(times, track, {})
    assert out["impacted"] and out["impact_time_s"] == pytest.approx(0.020)
    assert out["impact_velocity_m_s"] == pytest.approx(0.4)
    assert out["rebound_velocity_m_s"] == pytest.approx(0.2)
    assert out["restitution_ratio"] == pytest.approx(0.5 / info["dry_restitution"])
    stokes = info["sphere_density"] * 0.4 * d / (9.0 * info["viscosity_pa_s"])
    assert out["stokes"] == pytest.approx(stokes)
    assert out["reference_restitution_ratio"] == pytest.approx(np.exp(-35.0 / stokes))
    assert out["rebound_height_over_d"] == pytest.approx(5e-4 / d)
    above = track.copy()
    above[:, 0, 2] = r + 1e-3  # never reaches the floor
    assert case.diagnostics(times, above, {})["impacted"] is False


def test_the_example_scene_file_goes_into_the_fluid_box():
    config = compose_config([*SEDIMENT, "case.generate=null", "case.file=data/scenes/beads.yaml"])
    case = build_coupled_case(config)
    assert case.bodies.n_bodies == 9 and case.info["source"].endswith("beads.yaml")
    # resolution counts cells across the smallest bead (2 mm): 6 cells of 1/3 mm
    assert case.info["diameter_cells_min"] == pytest.approx(6.0)
    assert case.fluid.setup.shape == (62, 62, 122)


# A glass sphere in a 10 mm square duct of water-like fluid driven along x (periodic in x):
# 6 x 14 x 14 nodes at 12 cells across the side; the sphere spans 3.6 cells.
DUCT = [
    "case=duct", "fluid=d3q19", "coupling=psm", "case.side=0.01", "case.length=0.005",
    "case.u_max=0.02", "case.viscosity=1.0e-5", "case.density=1000", "case.resolution=12",
]  # fmt: skip


def _duct_sphere(z: float) -> str:
    return f"coupling.scene.bodies=[{sphere(0.0025, 0.005, z, r=0.0015)}]"


def test_bodies_in_a_fluid_case_are_checked_against_its_walls():
    case = build_coupled_case(compose_config([*DUCT, _duct_sphere(0.005)]))
    assert case.name == "duct" and case.bodies.n_bodies == 1
    assert case.info["wall_planes"] == 4  # y and z walls; x is periodic
    assert case.info["domain_lower_m"] == [0.0, 0.0, 0.0]
    assert case.info["domain_upper_m"] == pytest.approx([0.005, 0.01, 0.01])
    with pytest.raises(ConfigError, match=r"coupling.scene.bodies\[0\].position"):
        build_coupled_case(compose_config([*DUCT, _duct_sphere(0.009)]))  # through the wall
    with pytest.raises(ConfigError, match=r"coupling.scene.bodies\[0\].position"):  # 2D: z = 0
        build_coupled_case(compose_config(["case=cavity", "coupling=psm", _duct_sphere(0.005)]))
    with pytest.raises(ConfigError, match="coupling.scene"):  # a coupled case has its own
        compose_config(["case=dkt", "fluid=d3q19", "coupling=psm", _duct_sphere(0.005)])
    with pytest.raises(ConfigError, match="coupling.method"):
        compose_config([*DUCT[:2], "coupling=none", _duct_sphere(0.005)])
    tunnel = ["case=geometry", "fluid=d3q19", "coupling=psm", "case.mesh=sphere"]
    with pytest.raises(ConfigError, match="case.walls"):  # symmetry planes mirror the fluid only
        build_coupled_case(
            compose_config([*tunnel, "case.walls=symmetry", "case.resolution=4", _duct_sphere(0.1)])
        )


PUSH = -0.005  # m/s of the recorded kinematic sphere: upstream, against the duct flow


def test_a_kinematic_sphere_follows_its_pose_sensor_through_the_duct_flow(tmp_path):
    """Bodies in a fluid case, moved by the body twin: a kinematic sphere (r 1.5 mm), driven
    by a replayed pose sensor, is pushed upstream against the duct flow; a free, slightly
    heavy clump of two spheres (1050 kg/m^3) above it sinks. The pushed sphere keeps the
    recorded velocity, the fluid pushes back on it (downstream), and the duct keeps its own
    diagnostics."""
    dt = 0.01 / 12 * 0.1 / 0.02  # dx * u_lattice / u_max
    recording = tmp_path / "poses.csv"
    lines = ["time,sensor,value,units"]
    for k in range(1, 7):
        t = 6 * dt * k
        lines.append(f'{t:.6f},pusher,{0.0035 + PUSH * t:.6f};0.005;0.003;1;0;0;0,"m,1"')
    recording.write_text("\n".join(lines) + "\n")
    pusher = sphere(0.0035, 0.005, 0.003, r=0.0015).replace("}", ",kinematic:true}")
    free = (  # a clump: two members of r 0.8 mm side by side along x
        "{shape:clump,material:light,position:[0.0025,0.005,0.0075],spheres:["
        "{radius:0.0008,offset:[-0.0007,0,0]},{radius:0.0008,offset:[0.0007,0,0]}]}"
    )
    config = compose_config(
        [*DUCT, f"coupling.scene.bodies=[{pusher},{free}]",
         "+coupling.scene.materials.light={young: 1.0e+5, poisson: 0.25, density: 1050.0, "
         "restitution: 0.5, friction: 0.3}",
         # soft: 24 body steps per fluid step instead of 244 (no contact in these 48 steps)
         "coupling.scene.materials.glass.young=1.0e+5",
         "twin=replay", "twin.sensors=[{id: pusher, kind: body_pose, body: 0, units: 'm,1'}]",
         f"twin.every={6 * dt}", f"twin.recording={recording}", "steps=48", "chunk=6",
         "output.every=24", "output.png=false", "checkpoint=none"]
    )  # fmt: skip
    summary = run_twin(config, tmp_path / "run", interactive=False).summary
    assert summary["status"] == "completed" and summary["coupling"]["bodies"] == 2
    assert summary["coupling"]["spheres"] == 3
    assert summary["twin"]["pose_updates"] == 6
    diag = summary["diagnostics"]
    assert "velocity_l2_error" in diag  # the duct's own diagnostics stay
    assert diag["outside_domain"] == 0
    track = np.genfromtxt(tmp_path / "run" / "bodies_track.csv", delimiter=",", names=True)
    pushed, sinking = track[track["body"] == 0], track[track["body"] == 1]
    assert pushed["vx"][-1] == pytest.approx(PUSH, rel=1e-5)
    assert pushed["fx"][-1] > 0.0, "the fluid pushes back on the sphere moving upstream"
    assert sinking["vz"][-1] < 0.0, "the heavier clump sinks"
    assert np.all(np.isfinite(track["fx"]))
