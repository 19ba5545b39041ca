"""Every case builds and runs a few steps at a tiny size; unit conversion and geometry helpers."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.lattices import D2Q9
from solver.api import compose_config, run
from solver.fluid.cases import build_case
from solver.fluid.cases.cylinder import circle_link_fractions, coefficient_statistics
from solver.fluid.units import UnitConverter

TINY = {
    "taylor_green": ["case=taylor_green", "case.resolution=8"],
    "taylor_green_3d": ["case=taylor_green", "fluid=d3q19", "case.resolution=6"],
    "beltrami_d3q27": [
        "case=taylor_green",
        "fluid=d3q27",
        "case.resolution=6",
        "case.variant=beltrami",
    ],
    "poiseuille": ["case=poiseuille", "case.resolution=6"],
    "poiseuille_periodic": [
        "case=poiseuille",
        "case.resolution=6",
        "case.amplitude=0.5",
        "case.angular_frequency=2.0",
    ],
    "couette": ["case=couette", "case.resolution=6"],
    "cavity": ["case=cavity", "case.resolution=8"],
    "duct": ["case=duct", "fluid=d3q19", "case.resolution=4"],
    "cylinder_uniform": ["case.resolution=4", "case.inflow=uniform"],
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_case_runs_a_few_steps(name, tmp_path):
    result = run(
        TINY[name] + ["steps=6", "chunk=3", "output.png=false"],
        output_dir=tmp_path,
    )
    assert result.summary["status"] == "completed"
    assert result.summary["steps"] == 6
    fields = result.fields()
    assert np.all(np.isfinite(fields["velocity"]))
    assert fields["velocity"].shape == (len(result.grid["shape"]),) + result.grid["shape"]
    assert isinstance(result.summary["diagnostics"], dict)


def test_float64_run(tmp_path):
    result = run(
        ["case=taylor_green", "case.resolution=8", "fluid.precision=float64", "steps=4"],
        output_dir=tmp_path,
    )
    assert result.summary["precision"] == "float64"
    assert result.fields()["velocity"].dtype == np.float64


def test_taylor_green_error_is_small(tmp_path):
    result = run(["case=taylor_green", "case.resolution=16"], output_dir=tmp_path)
    assert result.summary["diagnostics"]["velocity_l2_error"] < 0.03


def test_units_round_trip():
    units = UnitConverter.from_scales(0.1, 20, 1.5, 0.1, rho0=2.0)
    assert units.dx == pytest.approx(0.005)
    assert units.dt == pytest.approx(0.1 * 0.005 / 1.5)
    assert units.to_lattice_velocity(1.5) == pytest.approx(0.1)
    assert units.tau(1e-3) == pytest.approx(0.5 + 3 * 1e-3 * units.dt / units.dx**2)
    assert units.to_physical_velocity(units.to_lattice_velocity(0.7)) == pytest.approx(0.7)


def test_circle_link_fractions_land_on_the_circle():
    shape = (30, 30)
    center, radius = (14.3, 15.1), 6.2
    ii, jj = np.meshgrid(np.arange(30), np.arange(30), indexing="ij")
    obstacle = (ii - center[0]) ** 2 + (jj - center[1]) ** 2 <= radius**2
    q = circle_link_fractions(D2Q9, shape, obstacle, obstacle, center, radius)
    checked = 0
    for i in range(1, 9):
        c = D2Q9.c[i]
        for x, y in zip(*np.nonzero(~obstacle), strict=True):
            nx, ny = x + c[0], y + c[1]
            if 0 <= nx < 30 and 0 <= ny < 30 and obstacle[nx, ny]:
                p = np.array([x, y]) + q[i, x, y] * c
                assert np.hypot(p[0] - center[0], p[1] - center[1]) == pytest.approx(radius)
                assert 0 < q[i, x, y] <= 1
                checked += 1
    assert checked > 50


def test_strouhal_from_a_synthetic_lift_signal():
    dt, f = 1e-3, 3.0
    t = np.arange(4000) * dt
    cl = 0.8 * np.sin(2 * np.pi * f * t) + 0.1
    cd = 3.2 + 0.05 * np.sin(4 * np.pi * f * t)
    stats = coefficient_statistics(cd, cl, dt, diameter=0.1, u_mean=1.0, stats_fraction=0.5)
    assert stats["strouhal"] == pytest.approx(0.3, rel=1e-3)
    assert stats["cl_amplitude"] == pytest.approx(0.8, rel=1e-2)
    assert stats["cd_mean"] == pytest.approx(3.2, abs=1e-2)
    assert stats["cd_max_smoothed"] == pytest.approx(3.25, abs=1e-4)


def test_smoothed_peaks_take_the_ripple_off_and_keep_the_shedding_peak():
    """A ripple of 7 steps (+-0.005 on Cd, +-0.01 on Cl) raises the raw maxima by about its
    amplitude; the peaks averaged over 1 % of the shedding period are the smooth ones within a
    tenth of the ripple (what a window of 4.7 ripple periods leaves) and the window's own loss."""
    dt, f = 1e-4, 3.0  # 3,333 steps per shedding period: the window is 33 steps
    t = np.arange(40000) * dt
    ripple = np.sin(2 * np.pi * t / (7 * dt))
    cl = 0.98 * np.sin(2 * np.pi * f * t) + 0.01 * ripple
    cd = 3.2 + 0.04 * np.sin(4 * np.pi * f * t + 0.3) + 0.005 * ripple
    stats = coefficient_statistics(cd, cl, dt, diameter=0.1, u_mean=1.0, stats_fraction=0.5)
    assert stats["cd_max"] > 3.2445 and stats["cl_max"] > 0.985
    assert stats["cd_max_smoothed"] == pytest.approx(3.24, abs=5e-4)
    assert stats["cl_max_smoothed"] == pytest.approx(0.98, abs=1e-3)
    steady = coefficient_statistics(cd * 0 + 3.1, cl * 0, dt, 0.1, 1.0, 0.5)
    assert steady["cd_max_smoothed"] is None and steady["strouhal"] is None


def test_cylinder_geometry():
    case = build_case(compose_config(["case.resolution=10"]))
    setup = case.setup
    assert setup.shape == (220, 43)
    assert setup.solid[:, 0].all() and setup.solid[:, -1].all()
    area = setup.obstacle.sum() * case.units.dx**2
    assert area == pytest.approx(np.pi * 0.05**2, rel=0.1)
    inlet = setup.open_boundaries[0].velocity[0]
    assert inlet.max() == pytest.approx(0.1, rel=0.01)
    assert inlet[0] == 0 and inlet[-1] == 0


def test_brachet_vortex_records_its_kinetic_energy(tmp_path):
    """The turbulence variant samples <rho |u|^2/2> after every chunk; at Re = 100 on 16^3 the
    laminar start loses energy at the rate 3 / (4 Re) of its resolved initial field (averaged
    over the acoustic period the diagnostics use)."""
    viscosity = 1.0 / (2.0 * np.pi * 100.0)  # Re = u0 (L / 2 pi) / nu = 100 with L = u0 = 1
    result = run(
        ["case=taylor_green", "fluid=d3q19", "case.variant=brachet", "case.resolution=16",
         f"case.viscosity={viscosity}", "steps=40", "chunk=4", "output=none"],
        output_dir=tmp_path,
    )  # fmt: skip
    diag = result.summary["diagnostics"]
    assert result.summary["reynolds"] == pytest.approx(100.0)
    energy = np.asarray(diag["series"]["energy"])
    assert len(energy) == 11  # the start and after each of the 10 chunks
    assert diag["energy_initial"] == pytest.approx(0.125, rel=1e-4)
    # sampled at even steps: the period-2 flip of the initial layer at tau ~ 1/2 is not seen
    assert np.all(np.diff(energy[1:]) < 0)
    assert diag["dissipation_initial"] == pytest.approx(diag["dissipation_initial_exact"], rel=0.3)
