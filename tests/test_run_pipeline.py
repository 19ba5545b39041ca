"""The run loop's pipelined health check (``solver.run.HealthCheck``): the next chunk is
dispatched before the previous chunk's flags are read. The reference is the same run with the
check unsplit (the loop's synchronous path); divergence reports, outputs and results must not
change."""

from __future__ import annotations

import json

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from solver.api import compose_config
from solver.errors import BodyOverflowError, DivergenceError
from solver.model import Problem
from solver.models import build_model
from solver.run import simulate

# BGK at tau = 0.50001 with Mach 0.29 on 16^2 cells diverges at step 120 (chunks of 10 steps)
DIVERGING = ["case=cavity", "case.re=1e6", "case.resolution=16", "fluid.collision=bgk",
             "fluid.u_lattice=0.17", "steps=3000", "chunk=10", "output.every=50",
             "checkpoint=none", "telemetry=none", "output.png=false"]  # fmt: skip
HEALTHY = ["case=cavity", "case.resolution=24", "steps=200", "chunk=10", "output.every=100",
           "checkpoint=none", "telemetry=none", "output.png=false"]  # fmt: skip


class Synchronous:
    """A model with its check unsplit: the loop checks every chunk before the next one."""

    check_start = None

    def __init__(self, model) -> None:
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)


class Recorded:
    """A model that counts the flag reads made after the next chunk was dispatched."""

    def __init__(self, model) -> None:
        self._model = model
        self.advances = self.reads = self.deferred = 0
        self.last_deferred = False

    def __getattr__(self, name):
        return getattr(self._model, name)

    def advance(self, state, n):
        self.advances += 1
        return self._model.advance(state, n)

    def check_start(self, state, done):
        return self.advances, self._model.check_start(state, done)

    def check_finish(self, pending):
        dispatched, inner = pending
        self.reads += 1
        self.last_deferred = self.advances > dispatched
        self.deferred += self.last_deferred
        return self._model.check_finish(inner)


def _run(overrides: list[str], out, wrap) -> tuple[dict, object]:
    """(summary and final fields, the wrapped model) of a run."""
    models = []

    def factory(config, runtime, output_dir, unbounded):
        models.append(wrap(build_model(config, runtime, output_dir, unbounded)))
        return models[0]

    try:
        outcome = simulate(compose_config(overrides), out, interactive=False, model_factory=factory)
    except (DivergenceError, BodyOverflowError) as err:
        return {"summary": err.summary, "fields": None}, models[0]
    return {"summary": outcome.summary, "fields": outcome.fields}, models[0]


class FailsAt:
    """A model whose check finds an overflow at the chunk end ``step`` (the loop's exit 4)."""

    def __init__(self, model, step: int, split: bool) -> None:
        self._model, self._step = model, step
        if not split:
            self.check_start = None

    def __getattr__(self, name):
        return getattr(self._model, name)

    def _problem(self, done: int) -> Problem | None:
        if done != self._step:
            return None
        return Problem("overflow", f"overflow by step {done}", BodyOverflowError, {"at": done})

    def check(self, state, done):
        return self._model.check(state, done) or self._problem(done)

    def check_start(self, state, done):
        return done, self._model.check_start(state, done)

    def check_finish(self, pending):
        done, inner = pending
        return self._model.check_finish(inner) or self._problem(done)


def _h5(path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {
            f"{group}/{name}": f[group][name][...]
            for group in f
            if group.startswith("step_")
            for name in f[group]
        }


def _steps(fields: dict) -> set[int]:
    return {int(key.split("/")[0].removeprefix("step_")) for key in fields}


def test_donation_waits_for_a_read_dispatched_before_it():
    """The pipeline's premise: a check dispatched on an array reads the array as it was,
    even when the next dispatch donates (and overwrites in place) that array."""
    probe = jax.jit(lambda x: (jnp.argmax(~jnp.isfinite(x)), jnp.sum(jnp.isnan(x))))
    # reads x (an unread argument is not donated) and writes 2 everywhere, in x's buffer
    overwrite = jax.jit(lambda x: jnp.where(jnp.isnan(x), 2.0, x + 2.0), donate_argnums=0)
    for size in (1 << 12, 1 << 22):
        x = jnp.zeros(size, jnp.float32).at[size // 3].set(jnp.nan)
        where, count = probe(x)  # dispatched, not waited for
        y = overwrite(x)  # reuses x's buffer
        assert x.is_deleted()
        assert int(where) == size // 3 and int(count) == 1
        assert float(y[size // 3]) == 2.0


def test_divergence_step_and_outputs_unchanged(tmp_path):
    pipelined, recorded = _run(DIVERGING, tmp_path / "p", Recorded)
    reference, _ = _run(DIVERGING, tmp_path / "s", Synchronous)
    summary = pipelined["summary"]
    assert summary["status"] == reference["summary"]["status"] == "diverged"
    assert summary["divergence"] == reference["summary"]["divergence"]
    assert summary["divergence"]["step"] == summary["steps"] == reference["summary"]["steps"]
    # the failing chunk's flags were read after the next chunk was dispatched (then discarded)
    assert recorded.last_deferred and recorded.advances == recorded.reads + 1
    written = json.loads((tmp_path / "p" / "run.json").read_text())
    assert written["divergence"] == summary["divergence"]
    ours, theirs = _h5(tmp_path / "p" / "fields.h5"), _h5(tmp_path / "s" / "fields.h5")
    assert ours.keys() == theirs.keys() and ours
    assert max(_steps(ours)) < summary["divergence"]["step"]
    for key in ours:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)


def test_healthy_run_bitwise_unchanged(tmp_path):
    pipelined, recorded = _run(HEALTHY, tmp_path / "p", Recorded)
    reference, _ = _run(HEALTHY, tmp_path / "s", Synchronous)
    assert pipelined["summary"]["status"] == "completed" and pipelined["summary"]["steps"] == 200
    # chunk ends 10..90 and 110..190 are pipelined (their flags read after the next dispatch)
    assert recorded.deferred == 18 and recorded.reads == recorded.advances == 20
    for name in ("density", "velocity"):
        np.testing.assert_array_equal(
            pipelined["fields"][name], reference["fields"][name], err_msg=name
        )
    ours, theirs = _h5(tmp_path / "p" / "fields.h5"), _h5(tmp_path / "s" / "fields.h5")
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    diagnostics = [json.dumps(r["summary"]["diagnostics"]) for r in (pipelined, reference)]
    assert diagnostics[0] == diagnostics[1]


@pytest.mark.parametrize("split", [True, False], ids=["pipelined", "synchronous"])
def test_overflow_status_and_step_at_a_pipelined_chunk_end(tmp_path, split):
    # chunk ends 10 and 20 are not output steps: pipelined when the check is split
    overrides = ["case=cavity", "case.resolution=8", "steps=60", "chunk=10", "output.every=30",
                 "checkpoint=none", "telemetry=none", "output.png=false"]  # fmt: skip
    result, _ = _run(overrides, tmp_path, lambda m: FailsAt(m, 20, split))
    summary = result["summary"]
    assert summary["status"] == "overflow" and summary["steps"] == 20 and summary["at"] == 20
    assert json.loads((tmp_path / "run.json").read_text())["steps"] == 20
    assert _steps(_h5(tmp_path / "fields.h5")) == {0}
