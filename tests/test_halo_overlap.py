"""Halo overlap (``domain.overlap``): the messages wait only for the boundary planes.

With ``overlap`` the XLA step collides the planes that other shards receive apart from the
block and cuts the halo messages from them, so that an asynchronous collective (XLA:GPU's
latency-hiding scheduler) can run while the interior collides. Two properties, both checkable
on a CPU:
- the same bits as one device, on fake devices and over MPI (the scenarios and the worker of
  tests/test_distributed_equality.py, with ``--overlap``);
- the dependence itself, read from the traced step: nothing a message depends on is the
  whole block's collision. The trace uses a halo whose every axis crosses shards and whose
  ``shift`` is a marker primitive (``rev``, which the step never uses otherwise), so the
  messages can be found in the program; the control (no overlap) must show the dependence.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.extend.core as jex_core
import numpy as np
import pytest
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributed_scenarios import scenario  # noqa: E402
from mpi import mpirun  # noqa: E402
from test_distributed_equality import (  # noqa: E402
    FAST_COMPILE,
    WORKER,
    check,
    finish,
    records,
    run_fake,
)

from solver.distributed.config import overlap_halos  # noqa: E402
from solver.distributed.halo import SingleHalo  # noqa: E402
from solver.fluid.step import initial_state, make_chunk, make_geometry  # noqa: E402


class MarkedHalo(SingleHalo):
    """Every axis split; a message is ``rev`` (reversing a block of one plane changes
    nothing this test reads: only the program's structure is inspected)."""

    def shift(self, block, offset):
        return lax.rev(block, (0,))

    def route(self, offset):
        return tuple(int(o) for o in offset)


def _equations(jaxpr) -> list:
    """Every equation of ``jaxpr`` and of the sub-jaxprs it calls (scan bodies, pjit)."""
    out = []
    for eqn in jaxpr.eqns:
        out.append(eqn)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                out += _equations(inner)
            elif hasattr(value, "eqns"):
                out += _equations(value)
    return out


def _message_cones(jaxpr, buffer_shape: tuple[int, ...]) -> list[set]:
    """Per message (a ``rev``), the output shapes of every equation it depends on within this
    step: within the (sub-)jaxpr that holds it, back to the padded buffers the step pulls
    from (equations with a ``buffer_shape`` output: the previous step's writes)."""
    cones = []

    def visit(jx):
        producer = {}
        for eqn in jx.eqns:
            for v in eqn.outvars:
                producer[v] = eqn
        for eqn in jx.eqns:
            if eqn.primitive.name == "rev":
                shapes, stack, seen = set(), list(eqn.invars), set()
                while stack:
                    v = stack.pop()
                    if not isinstance(v, jex_core.Var) or id(v) in seen or v not in producer:
                        continue
                    seen.add(id(v))
                    p = producer[v]
                    outs = {tuple(o.aval.shape) for o in p.outvars}
                    if buffer_shape in outs:
                        continue
                    shapes |= outs
                    stack += list(p.invars)
                cones.append(shapes)
            for value in eqn.params.values():
                inner = getattr(value, "jaxpr", None)
                if inner is not None and hasattr(inner, "eqns"):
                    visit(inner)
                elif hasattr(value, "eqns"):
                    visit(value)

    visit(jaxpr)
    return cones


@pytest.mark.parametrize("lattice", ["D2Q9", "D3Q19"])
def test_messages_wait_only_for_the_boundary_planes(lattice):
    setup, density, velocity = scenario("periodic", lattice)
    state = initial_state(setup, density, velocity)
    geometry = make_geometry(setup)
    # the whole block's moment table (rho and u per cell): the collision's first product
    whole = (*setup.shape, setup.lattice.d + 1)
    cones = {}
    for overlap in (False, True):
        chunk = make_chunk(setup, MarkedHalo(), overlap)
        jaxpr = jax.make_jaxpr(lambda s, g, c=chunk: c(s, g, 3))(state, geometry).jaxpr
        cones[overlap] = _message_cones(jaxpr, tuple(n + 2 for n in setup.shape))
        assert cones[overlap], "no halo message found in the traced step"
    # control: without overlap some message is cut from the whole block's collision
    assert any(whole in c for c in cones[False])
    # with overlap, no message depends on it: every message waits for its planes only
    assert not any(whole in c for c in cones[True]), "a message waits for the whole block"


def test_overlap_is_the_same_program_on_one_device():
    """One shard (nothing crosses): ``overlap`` adds nothing to the step."""
    setup, density, velocity = scenario("channel", "D2Q9")
    state = initial_state(setup, density, velocity)
    geometry = make_geometry(setup)
    plain = jax.jit(make_chunk(setup), static_argnums=2)(state, geometry, 3)[0]
    over = jax.jit(make_chunk(setup, overlap=True), static_argnums=2)(state, geometry, 3)[0]
    np.testing.assert_array_equal(np.asarray(plain.populations), np.asarray(over.populations))


def test_auto_is_off_on_cpus():
    assert overlap_halos("auto") is False
    assert overlap_halos(True) is True
    assert overlap_halos(False) is False


def test_bad_overlap_value_is_a_config_error():
    from solver.distributed.config import parse_domain
    from solver.errors import ConfigError
    from solver.sections import Section

    with pytest.raises(ConfigError, match="domain.overlap"):
        parse_domain(Section("domain", {"mesh": "auto", "halo": "xla", "overlap": "sometimes"}))


@pytest.mark.timeout(1200)
def test_overlap_bitwise_on_fake_devices():
    """Every boundary kind and float16 storage, D2Q9 on 4 x 2 fake devices (corners cross
    shards): the same checks as without overlap (bitwise; curved walls within the FMA bound,
    as tests/test_distributed_equality.py explains, though FAST_COMPILE has no FMA and they
    come out bitwise too). Compiled fast (34 -> 17 s): the overlap is a property of the
    program; tests/test_distributed_equality.py checks the production code generation."""
    scenarios = ["periodic", "channel", "curved", "open", "fp16"]
    args = ["--overlap", "--lattices", "D2Q9", "--meshes", "4,2", "--scenarios", *scenarios]
    proc = run_fake(args, FAST_COMPILE)
    check(records(finish(proc)), 5)


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_overlap_bitwise_in_3d():
    """D3Q19 with edges crossing shards (2 x 1 x 2): walls, inlet, outlet, the regularized
    operator with LES."""
    args = ["--overlap", "--lattices", "D3Q19", "--meshes", "2,1,2"]
    proc = run_fake([*args, "--scenarios", "channel", "regularized"], FAST_COMPILE)
    check(records(finish(proc)), 2)


# the planes and the messages cut from them are the fake-device test's; the MPI halo's shift
# itself is tested without overlap in tests/test_distributed_equality.py
@pytest.mark.long
@pytest.mark.timeout(1200)
def test_overlap_bitwise_over_mpi():
    args = [
        "--overlap",
        "--halo",
        "mpi",
        "--lattices",
        "D2Q9",
        "--meshes",
        "2,2",
        "--scenarios",
        "channel",
    ]
    result = mpirun(4, [WORKER, *args], timeout=1100, extra_env={"XLA_FLAGS": FAST_COMPILE})
    assert result.returncode == 0, result.stderr[-3000:]
    check(records(result.stdout), 1)
