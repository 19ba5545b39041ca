"""The native in-place kernel (``fluid.kernel=native``, kernels/native/lb_inplace.cc) against the
pure-JAX step, which is its reference.

In float64 the two agree to round-off (1e-13) on D2Q9 and D3Q19 with BGK and TRT, periodic
edges, resting and moving (Ladd) walls, a time-dependent body force, and odd and even chunk
lengths (the odd ones end with the in-place stream of the pairs); chunks compose (two chunks
of 20 steps equal one of 40 bitwise: the state between chunks is complete); the library's
lattice tables are kernels/lattices.py's; the compiled chunk holds one population buffer (XLA's
memory analysis, D3Q19 float32 <= 90 bytes per cell, the issue's goal; < 42 with float16
storage, which equals the XLA step's float16 run to one unit of the stored form); a CLI run of
the cavity
equals the XLA step's to float32 round-off; unsupported set-ups are one-line config errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.lattices import LATTICES
from solver.errors import ConfigError
from solver.fluid.config import parse_fluid
from solver.fluid.inplace_step import make_inplace_chunk, plane_shift, require_native
from solver.fluid.native import built_tables
from solver.fluid.setup import BodyForce, FluidSetup, OpenBoundary
from solver.fluid.step import initial_state, make_chunk, make_geometry
from solver.sections import Section


def _setup(lattice: str, shape, dtype="float64", collision="trt", walls=0, force=False):
    lat = LATTICES[lattice]
    solid = wall_u = None
    if walls:
        solid = np.zeros(shape, bool)
        solid[:, 0] = solid[:, -1] = True  # channel walls across axis 1
        solid[(slice(2, 4),) * len(shape)] = True  # and a block inside
        if walls == 2:
            wall_u = np.zeros((lat.d, *shape))
            wall_u[0][:, -1] = 0.05  # a sliding lid
            wall_u[-1][(slice(2, 4),) * len(shape)] = -0.02  # a moving block
    body_force = None
    if force:
        d = lat.d
        body_force = BodyForce(constant=(1e-5,) * d, amplitude=(2e-5,) * d, angular_frequency=0.3)
    return FluidSetup(lattice=lat, shape=shape, omega=1 / 0.57, dtype=dtype, collision=collision,
                      solid=solid, wall_velocity=wall_u, body_force=body_force)  # fmt: skip


def _state(setup: FluidSetup, reference, n: int):
    """A random flow with solid nodes at rest, put through ``reference`` (the XLA chunk of n
    steps, compiled once for both uses) so that it is the state the solver keeps between
    chunks."""
    rng = np.random.default_rng(0)
    shape = setup.shape
    rho = 1 + 0.01 * rng.standard_normal(shape)
    u = 0.02 * rng.standard_normal((setup.lattice.d, *shape))
    if setup.solid is not None:
        rho[setup.solid], u[:, setup.solid] = 1.0, 0.0
    state = initial_state(setup, rho, u)
    return reference(state, make_geometry(setup), n)[0]


# (lattice, shape, collision, walls: 0 none / 1 resting / 2 moving, body force, steps)
SCENARIOS = {
    "D2Q9 bgk periodic, odd": ("D2Q9", (12, 10), "bgk", 0, False, 5),
    "D2Q9 trt walls + force": ("D2Q9", (12, 10), "trt", 1, True, 6),
    "D2Q9 trt moving walls + force, odd": ("D2Q9", (12, 10), "trt", 2, True, 7),
    "D3Q19 trt moving walls + force, odd": ("D3Q19", (8, 6, 10), "trt", 2, True, 5),
}
LONG_SCENARIOS = {
    "D3Q19 bgk walls": ("D3Q19", (8, 6, 10), "bgk", 1, False, 6),
    "D3Q27 trt moving walls + force": ("D3Q27", (6, 8, 10), "trt", 2, True, 6),
    "D3Q27 bgk periodic, odd": ("D3Q27", (6, 8, 10), "bgk", 0, False, 5),
}
PARAMS = [*SCENARIOS, *(pytest.param(k, marks=pytest.mark.long) for k in LONG_SCENARIOS)]


@pytest.mark.parametrize("name", PARAMS)
def test_native_equals_the_xla_step_to_round_off(name):
    lattice, shape, collision, walls, force, n = {**SCENARIOS, **LONG_SCENARIOS}[name]
    setup = _setup(lattice, shape, collision=collision, walls=walls, force=force)
    xla_chunk = jax.jit(make_chunk(setup), static_argnums=2)
    state, geometry = _state(setup, xla_chunk, n), make_geometry(setup)
    reference, _ = xla_chunk(state, geometry, n)
    ours, forces = jax.jit(make_inplace_chunk(setup), static_argnums=2)(state, geometry, n)
    assert int(ours.time) == int(reference.time) == int(state.time) + n
    assert forces.shape == (n, setup.force_width)
    difference = np.abs(np.asarray(ours.populations) - np.asarray(reference.populations))
    assert difference.max() < 1e-13, f"{name}: max |difference| {difference.max():.3g}"
    # the flow moved: the comparison is not of two unchanged states
    assert np.abs(np.asarray(ours.populations) - np.asarray(state.populations)).max() > 1e-4


@pytest.mark.parametrize(
    "lattice, shape, collision, walls, force, n",
    [("D2Q9", (12, 10), "bgk", 0, False, 5), ("D3Q19", (8, 6, 10), "trt", 2, True, 5)],
)
def test_smagorinsky_les_equals_the_xla_step_to_round_off(lattice, shape, collision, walls,
                                                          force, n):  # fmt: skip
    """fluid.les=smagorinsky: the kernel's local even rate (and TRT's odd rate from Lambda)
    is the XLA step's to round-off; C_s = 0.3 so that the model changes the flow measurably."""
    import dataclasses

    setup = _setup(lattice, shape, collision=collision, walls=walls, force=force)
    setup = dataclasses.replace(setup, les="smagorinsky", les_cs=0.3)
    xla_chunk = jax.jit(make_chunk(setup), static_argnums=2)
    state, geometry = _state(setup, xla_chunk, n), make_geometry(setup)
    reference = np.asarray(xla_chunk(state, geometry, n)[0].populations)
    ours = jax.jit(make_inplace_chunk(setup), static_argnums=2)(state, geometry, n)[0]
    assert np.abs(np.asarray(ours.populations) - reference).max() < 1e-13
    plain = dataclasses.replace(setup, les="none")
    without = np.asarray(
        jax.jit(make_inplace_chunk(plain), static_argnums=2)(state, geometry, n)[0].populations
    )
    assert np.abs(without - reference).max() > 1e-4  # the model acted


def test_float16_storage_equals_the_xla_step_to_one_unit_of_the_stored_form():
    """With fluid.storage=float16 both steps hold (f - w) * 2^15 in float16 and compute in
    float32: the kernel's float32 rounding (and its moving-wall links, rounded to float16 once
    more after Ladd's term) moves stored values by at most one unit in the last place of the
    largest of them (7.6e-6 in f here), the storage's own resolution."""
    import dataclasses

    # 21 cells along z: the F16C path takes z = 1..16 in blocks of eight, the scalar one the rest
    setup = _setup("D2Q9", (12, 21), dtype="float32", walls=2, force=True)
    setup = dataclasses.replace(setup, storage="float16")
    xla_chunk = jax.jit(make_chunk(setup), static_argnums=2)
    state, geometry = _state(setup, xla_chunk, 7), make_geometry(setup)
    reference = np.asarray(xla_chunk(state, geometry, 7)[0].populations)
    ours = jax.jit(make_inplace_chunk(setup), static_argnums=2)(state, geometry, 7)[0]
    assert ours.populations.dtype == np.float16
    ours = np.asarray(ours.populations)
    unit = float(np.spacing(np.abs(reference).max()))
    difference = np.abs(ours.astype(np.float64) - reference).max()
    assert difference <= unit, f"{difference} stored units, more than one ({unit})"
    assert np.abs(ours.astype(np.float64) - np.asarray(state.populations)).max() > 10


def test_chunks_compose_bitwise():
    """Two chunks of 20 steps equal one of 40: nothing of the in-place layout outlives a
    chunk (the solid slots are restored, the pairs streamed)."""
    setup = _setup("D2Q9", (12, 10), walls=2, force=True)
    chunk = jax.jit(make_inplace_chunk(setup), static_argnums=2)
    state, geometry = _state(setup, chunk, 2), make_geometry(setup)
    once = chunk(state, geometry, 40)[0]
    twice = chunk(chunk(state, geometry, 19)[0], geometry, 21)[0]
    assert np.array_equal(np.asarray(once.populations), np.asarray(twice.populations))


@pytest.mark.parametrize("lattice", ["D2Q9", "D3Q19"])
def test_library_tables_are_the_lattices(lattice):
    lat = LATTICES[lattice]
    c, opposite, w = built_tables(lat, np.float64)
    expected = lat.c if lat.d == 3 else np.stack([lat.c[:, 0], 0 * lat.c[:, 0], lat.c[:, 1]], 1)
    assert np.array_equal(c, expected)
    assert np.array_equal(opposite, lat.opposite)
    assert np.array_equal(w, lat.w)


def test_one_population_buffer_in_memory():
    """XLA's memory analysis of the donated chunk: the populations once (aliased in and out)
    plus the solid mask; the XLA step holds two padded buffers besides the state."""
    setup = _setup("D3Q19", (32, 32, 32), dtype="float32", walls=1)
    state = initial_state(setup, np.ones(setup.shape), np.zeros((3, *setup.shape)))
    geometry = make_geometry(setup)

    def per_cell(make) -> float:
        compiled = (
            jax.jit(make(setup), static_argnums=2, donate_argnums=0)
            .lower(state, geometry, 20)
            .compile()
        )
        m = compiled.memory_analysis()
        total = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
        return (total + m.temp_size_in_bytes) / setup.cells

    native = per_cell(make_inplace_chunk)
    assert native <= 90.0, f"{native:.1f} bytes per cell"
    assert native < 19 * 4 + 4, native  # 76 for the populations, 1 for the solid mask
    assert per_cell(make_chunk) > 2 * native
    import dataclasses

    setup = dataclasses.replace(setup, storage="float16")
    state = initial_state(setup, np.ones(setup.shape), np.zeros((3, *setup.shape)))
    assert per_cell(make_inplace_chunk) < 19 * 2 + 4  # 38 for the float16 populations


def test_cavity_run_through_the_cli_equals_the_xla_step(tmp_path):
    import h5py
    from solver_cli import run_solver

    args = ["case=cavity", "case.resolution=24", "steps=60", "checkpoint=none", "output.every=30"]
    runs = {}
    for kernel in ("xla", "native"):
        out = tmp_path / kernel
        result = run_solver([*args, f"fluid.kernel={kernel}", f"hydra.run.dir={out}"])
        assert result.returncode == 0, result.stderr[-3000:]
        with h5py.File(out / "fields.h5", "r") as f:
            runs[kernel] = {k: f[k]["velocity"][...] for k in f if k.startswith("step")}
    assert sorted(runs["native"]) == sorted(runs["xla"])
    for step, velocity in runs["xla"].items():
        scale = np.abs(velocity).max()
        assert np.abs(runs["native"][step] - velocity).max() <= 1e-5 * scale, step


def fluid_section(lattice: str = "D3Q19", **extra) -> Section:
    """A ``fluid`` config section (TRT, float32) with ``extra`` keys, for ``parse_fluid``."""
    data = {"lattice": lattice, "collision": "trt", "trt_magic": 0.1875, "les": "none",
            "les_cs": 0.1, "precision": "float32", "storage": None, "u_lattice": 0.1}  # fmt: skip
    return Section("fluid", {**data, **extra})


def test_unsupported_set_ups_are_config_errors():
    def fluid(**extra) -> Section:
        return fluid_section("D2Q9", **extra)

    assert parse_fluid(fluid()).kernel == "xla"
    assert parse_fluid(fluid(kernel="native")).kernel == "native"
    assert parse_fluid(fluid(kernel="native", les="smagorinsky")).les == "smagorinsky"
    for bad in (
        {"kernel": "native", "collision": "regularized"},
        {"kernel": "native", "storage": "bfloat16"},
        {"kernel": "warp"},
    ):
        with pytest.raises(ConfigError, match="fluid.kernel"):
            parse_fluid(fluid(**bad))
    setup = _setup("D2Q9", (12, 10))
    require_native(setup)  # fine on one device
    require_native(setup, coupled=True)  # bodies in the fluid on one device
    with pytest.raises(ConfigError, match="mesh of 2"):
        require_native(setup, shards=2)
    inlet = OpenBoundary(axis=0, side="low", kind="velocity", velocity=np.zeros((2, 10)))
    with_inlet = FluidSetup(lattice=setup.lattice, shape=setup.shape, omega=1.5,
                            open_boundaries=(inlet,))  # fmt: skip
    with pytest.raises(ConfigError, match="open boundaries"):
        require_native(with_inlet)
    assert jnp.dtype(setup.dtype) == jnp.float64


@pytest.mark.parametrize(
    "lattice, shape, dtype, storage, walls, shift",
    [
        ("D2Q9", (16, 16), "float64", None, 2, 1),
        ("D3Q19", (8, 8, 8), "float32", None, 0, 1),  # periodic: every corner cell is fluid
        ("D2Q9", (16, 32), "float32", "float16", 2, 1),  # the F16C path's blocks of eight
        # rows of 512 bytes: the longest odd shift the plane's rows allow (9 x 7 < 64)
        ("D2Q9", (64, 64), "float64", None, 2, 7),
        ("D3Q19", (8, 8, 128), "float32", None, 0, 3),  # periodic, 19 x 3 < 64
    ],
)
def test_rotated_planes_equal_the_natural_layout_bitwise(
    lattice, shape, dtype, storage, walls, shift
):
    """A chunk of 9 steps on a grid whose plane is a multiple of 1 KiB runs on rotated planes
    (``plane_shift``: 8 steps or more, ``shift`` rows per direction); chunks of 4 and 5 steps
    keep the natural layout. Moving walls (the link repairs on rotated slots) or a periodic
    box, a body force and an odd length (the pairs streamed after rotating back): the same
    bits."""
    import dataclasses

    setup = _setup(lattice, shape, dtype=dtype, walls=walls, force=True)
    if storage is not None:
        setup = dataclasses.replace(setup, storage=storage)
    stored = np.dtype(storage or dtype).itemsize
    assert setup.cells * stored % 1024 == 0
    assert plane_shift(setup, 9) == shift and plane_shift(setup, 5) == 0
    chunk = jax.jit(make_inplace_chunk(setup), static_argnums=2)
    state, geometry = _state(setup, chunk, 3), make_geometry(setup)
    once = chunk(state, geometry, 9)[0]
    twice = chunk(chunk(state, geometry, 4)[0], geometry, 5)[0]
    assert np.array_equal(np.asarray(once.populations), np.asarray(twice.populations))
    assert not np.array_equal(np.asarray(once.populations), np.asarray(state.populations))
