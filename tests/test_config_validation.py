"""Config validation: typed config from the composed Hydra config, one-line errors per bad key."""

from __future__ import annotations

import pytest

from solver.api import compose_config
from solver.errors import ConfigError
from solver.fluid.cases import build_case


def _error(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build_case(compose_config(overrides))
    message = str(info.value)
    assert "\n" not in message
    return info.value


def test_defaults_are_the_schaefer_turek_cylinder():
    config = compose_config([])
    case = config.case
    assert case.name == "cylinder"
    assert (case.length, case.height, case.diameter) == (2.2, 0.41, 0.1)
    assert case.center == (0.2, 0.2) and case.inflow == "parabolic"
    built = build_case(config)
    assert built.reynolds == pytest.approx(100.0)
    assert built.tau > 0.5 and built.mach <= 0.3


@pytest.mark.parametrize(
    ("overrides", "key", "allowed"),
    [
        (["case.resolution=2"], "case.resolution", ">= 4"),
        (["case.diameter=-0.1"], "case.diameter", "> 0"),
        (["case.center=[0.2,0.03]"], "case.center", "clear of both walls"),
        (["fluid.u_lattice=0.25"], "fluid.u_lattice", "Mach"),
        (["case.viscosity=1e-30"], "tau", "> 0.5"),
        (["case=duct", "fluid=d2q9"], "fluid.lattice", "3D lattice"),
        (["case=dkt", "coupling=none"], "coupling.method", "psm for case dkt"),
        (["case=taylor_green", "case.variant=beltrami"], "case.variant", "2D lattice"),
        (["fluid.precision=float16"], "fluid.precision", "float32 | float64"),
        (["fluid.les=wale"], "fluid.les", "none | smagorinsky"),
        (["fluid.les_cs=0"], "fluid.les_cs", "> 0"),
        (["fluid.lattice=D2Q5"], "fluid.lattice", "D2Q9 | D3Q19 | D3Q27"),
        (["steps=0"], "steps", ">= 1"),
        (["case=cavity", "case.re=-5"], "case.re", "> 0"),
        (["case=poiseuille", "case.amplitude=1"], "case.angular_frequency", "> 0"),
        (["case=cavity", "case.resolution=2"], "case.resolution", ">= 4"),
    ],
)
def test_bad_values_name_key_value_and_range(overrides, key, allowed):
    err = _error(overrides)
    assert err.key == key
    assert allowed in str(err)


@pytest.mark.parametrize(
    ("case", "lattice", "coupling"),
    [
        ("cylinder", "D2Q9", "none"),
        ("duct", "D3Q19", "none"),
        ("geometry", "D3Q19", "none"),
        ("dkt", "D3Q19", "psm"),
        ("dkt_2d", "D2Q9", "psm"),
        ("sediment", "D3Q19", "psm"),
        ("settling_sphere", "D3Q19", "psm"),
        ("sphere_array", "D3Q19", "psm"),
        ("wet_bounce", "D3Q19", "psm"),
    ],
)
def test_a_case_selects_the_lattice_and_coupling_it_runs_on(case, lattice, coupling):
    config = compose_config([f"case={case}"])
    assert (config.fluid.lattice, config.coupling.method) == (lattice, coupling)


def test_groups_named_on_the_command_line_win_over_the_case_s_choice():
    config = compose_config(["fluid=d3q27", "case=settling_sphere"])
    assert (config.fluid.lattice, config.coupling.method) == ("D3Q27", "psm")
    assert compose_config(["case=duct", "fluid=d3q27"]).fluid.lattice == "D3Q27"


def test_tau_message_names_the_keys_that_set_it():
    message = str(_error(["case.viscosity=1e-30"]))
    for key in ("case.viscosity", "case.resolution", "fluid.u_lattice"):
        assert key in message


def test_every_value_is_overridable():
    config = compose_config(
        ["case=cavity", "case.re=1000", "steps=7", "output.every=3", "fluid.collision=bgk"]
    )
    assert config.case.re == 1000 and config.steps == 7 and config.output.every == 3
    assert config.fluid.collision == "bgk"
