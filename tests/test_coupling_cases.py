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
from solver.run import simulate

SEDIMENT = ["case=sediment", "fluid=d3q19", "coupling=psm"]
# a 12 x 12 x 18 mm box at 4 cells per 2 mm bead: 26 x 26 x 38 nodes
SMALL_SEDIMENT = [
    *SEDIMENT, "case.box=[0.012,0.012,0.018]", "case.resolution=4",
    "case.generate.n=12", "case.generate.box_lower=[0.0015,0.0015,0.008]",
    "case.generate.box_upper=[0.0105,0.0105,0.0165]", "case.generate.radius=0.001",
    "case.materials.glass.young=1.0e+6", "steps=40", "chunk=20", "output.every=20",
    "output.png=false", "checkpoint=none",
]  # fmt: skip


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


def test_unknown_wall_material_and_clumps_are_config_errors():
    config = compose_config([*SEDIMENT, "case.wall_material=steel"])
    with pytest.raises(ConfigError, match="case.wall_material"):
        build_coupled_case(config)
    clump = (
        "[{shape:clump,material:glass,position:[0.01,0.01,0.02],"
        "spheres:[{radius:0.001,offset:[-0.001,0,0]},{radius:0.001,offset:[0.001,0,0]}]}]"
    )
    with pytest.raises(ConfigError, match=r"case.bodies\[0\].shape"):
        build_coupled_case(compose_config(_inline(clump)))
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
    vertical = np.where(times > 0.7, -np.abs(vertical) - 1e-4, vertical)
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
    # two spheres that never meet: no kiss, no tumble
    apart = track.copy()
    apart[:, 1, 2] = lead_z + 3.0 * d
    out = case.diagnostics(times, apart, {})
    assert not out["kissed"] and not out["tumbled"] and out["min_gap_over_d"] > 1.9


def test_sediment_settles_every_sphere_inside_the_box(tmp_path):
    outcome = simulate(compose_config(SMALL_SEDIMENT), tmp_path, interactive=False)
    summary = outcome.summary
    assert summary["status"] == "completed"
    assert summary["coupling"]["bodies"] == 12 and summary["coupling"]["source"] == "random_spheres"
    diag = summary["diagnostics"]
    assert diag["outside_box"] == 0
    assert diag["max_settling_velocity_tracked_m_s"] > 0.0  # they started to fall
    assert diag["lowest_height_m"] > 0.0 and diag["bed_height_m"] <= 0.018
    track = np.genfromtxt(tmp_path / "bodies_track.csv", delimiter=",", skip_header=1)
    assert np.all(np.isfinite(track))


def test_the_example_scene_file_goes_into_the_fluid_box():
    config = compose_config([*SEDIMENT, "case.generate=null", "case.file=data/scenes/beads.yaml"])
    case = build_coupled_case(config)
    assert case.bodies.n_bodies == 9 and case.info["source"].endswith("beads.yaml")
    # resolution counts cells across the smallest bead (2 mm): 6 cells of 1/3 mm
    assert case.info["diameter_cells_min"] == pytest.approx(6.0)
    assert case.fluid.setup.shape == (62, 62, 122)
