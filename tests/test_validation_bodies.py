"""The rigid-body validation cases at fast sizes, and the reference solutions they compare with.

Each case runs the solver's rigid-body path exactly as ``python -m validation --fast <case>``
does (about 10 s each on 2 idle cores); the reference solvers are checked against limits known in
closed form.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from validation.cases import BODY_CASES, CASES
from validation.cases.bodies import euler_first_flip, hertz_chain_velocities, rebound_ratio
from validation.context import Context
from validation.report import format_table

STEEL = {"young": 2.0e11, "poisson": 0.3, "density": 7800.0}


@pytest.mark.parametrize("name", BODY_CASES)
def test_fast_body_case_passes(name: str, tmp_path: Path) -> None:
    ctx = Context(fast=True, out=tmp_path, work=tmp_path / "runs")
    result = CASES[name](ctx)
    assert result.checks, f"{name} produced no checks"
    assert result.passed, f"{name} failed:\n{format_table(result.checks)}"
    for plot in result.plots:
        size = (tmp_path / plot).stat().st_size
        assert 0 < size < 200_000, f"{plot} is {size} bytes"


def test_elastic_pair_swaps_velocities() -> None:
    """Two equal spheres, e = 1: the striker stops and the target leaves with v0 (momentum and
    energy conservation of a head-on elastic collision)."""
    v = hertz_chain_velocities(2, 0.01, restitution=1.0, speed=0.1, gap=1e-5, duration=1e-3,
                               **STEEL)  # fmt: skip
    assert v == pytest.approx([0.0, 0.1], abs=1e-7)


def test_rebound_of_an_elastic_contact_reaches_the_drop_height() -> None:
    """e = 1: the contact stores and returns all the energy, gravity or not."""
    for model in ("hertz", "linear"):
        ratio = rebound_ratio(model, 0.01, 1e7, 0.45, 1100.0, 1.0, 1e5, 0.2, 9.81)
        assert ratio == pytest.approx(1.0, abs=1e-7), model


def test_euler_flip_delay_grows_with_log_of_the_perturbation() -> None:
    """Near the intermediate axis a perturbation grows as exp(s t), s = w sqrt((I2 - I1)(I3 - I2)
    / (I1 I3)): a 1000x smaller one flips ln(1000)/s later."""
    moments, spin = np.array([1.0, 2.0, 3.0]), 2.0
    rate = spin * math.sqrt((2 - 1) * (3 - 2) / (1 * 3))

    def flip(p: float) -> float:
        return euler_first_flip(moments, spin * np.array([p, 1.0, p]), 60.0)

    delay = flip(1e-6) - flip(1e-3)
    assert delay == pytest.approx(math.log(1e3) / rate, rel=1e-3)
