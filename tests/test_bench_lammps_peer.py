"""The LAMMPS peer of the rigid-body bench: the deck is the bench's scene and contact law.

Runs Debian's `lmp` (installed by `make test` as root; skipped where it is absent) on a small
packing written by solver/bench/lammps_peer.py and compares the end state with the solver's
own chunk on the same packing. Normal contacts (Hertz, the restitution damping, rigid walls,
gravity) agree to round-off. Friction is left out: the tangential impulse of a sliding contact's
first step already differs by ~20 % between the codes (docs/performance.md; consistent with the
order in which each adds the step's slip to the spring, not verified further).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from kernels.contact_models import restitution_beta
from solver.bench import bodies as bb
from solver.bench import lammps_peer as lp

ROOT = Path(__file__).resolve().parent.parent
needs_lammps = pytest.mark.skipif(lp.executable() is None, reason="lmp (Debian's lammps) absent")


def test_tsuji_restitution_gives_lammps_the_solvers_damper() -> None:
    for e in (0.3, 0.5, 0.7, 0.9, 0.99):
        tsuji = lp.tsuji_restitution(e)
        assert 0.0 < tsuji < 1.0
        want = np.sqrt(5.0) * -float(restitution_beta(np.float64(e)))
        assert lp.tsuji_alpha(tsuji) == pytest.approx(want, rel=1e-12)
    # LAMMPS's fit ends at alpha(0) = 1.2728: a stronger damper has no equivalent
    with pytest.raises(ValueError, match="no LAMMPS tsuji equivalent"):
        lp.tsuji_restitution(0.1)
    # LAMMPS's fit decreases on [0, 1]: the bisection's premise
    assert np.all(np.diff(lp.tsuji_alpha(np.linspace(0.0, 1.0, 1001))) < 0)


@needs_lammps
def test_lammps_and_the_solver_agree_on_a_frictionless_packing(tmp_path: Path) -> None:
    jax.config.update("jax_enable_x64", True)
    from solver.bodies.step import initial_state, make_body_chunk

    n, steps = 64, 300
    setup, position = bb.build_scene(n, (4, 4, 4), seed=2)
    setup = dataclasses.replace(setup, friction=np.zeros(n))
    deck = lp.write_deck(tmp_path, setup, position, bb.DENSITY, steps, "lazy", final=True)
    text = deck.read_text()
    assert "pair_style      granular" in text and text.count("wall/gran") == 3
    run = lp.run(deck, "lazy", ranks=1)
    assert (run.atoms, run.steps) == (n, steps) and run.body_steps_per_s > 0
    x_lammps, v_lammps = lp.read_final(tmp_path)
    state = jax.jit(lambda b: initial_state(setup, b))(bb._spheres(position))
    state, _ = jax.jit(make_body_chunk(setup), static_argnums=1)(state, steps)
    x, v = np.asarray(state.bodies.position), np.asarray(state.bodies.velocity)
    speed = np.abs(v).max()
    assert speed > 0.05, "the packing did not move: nothing was compared"
    assert np.abs(v - v_lammps).max() < 1e-9 * speed
    assert np.abs(x - x_lammps).max() < 1e-12


@needs_lammps
def test_bench_cli_prints_lammps_beside_the_solver(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "solver.bench", "bodies", "--sizes", "27", "--ensemble",
               "0", "--steps", "5", "--repeats", "1", "--peer", "lammps", "--peer-steps", "20",
               "--peer-ranks", "1", "--peer-dir", str(tmp_path / "decks"),
               "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "solver/LAMMPS" in done.stdout
    peers = json.loads(out.read_text())["peers"]
    assert [p["policy"] for p in peers] == ["lazy", "every"]
    for p in peers:
        assert p["bodies"] == 27 and p["steps"] == 20 and p["lammps_body_steps_per_s"] > 0
        assert p["solver_fraction"] == pytest.approx(
            p["solver_body_steps_per_s"] / p["lammps_body_steps_per_s"]
        )
        assert Path(p["deck"]).is_file()
    assert "check no" in (tmp_path / "decks" / "n27_every" / "in.bodies").read_text()
