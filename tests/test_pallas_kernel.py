"""The fused GPU kernel (``fluid.kernel=pallas``, kernels/pallas_lb.py) against the pure-JAX
step, which is its reference, run on the CPU in Pallas's interpret mode.

In float64 the two agree to round-off (1e-13) on D3Q19 TRT with moving (Ladd) walls and a
time-dependent body force over an odd chunk (which ends with the in-place stream of the pairs)
and on periodic D3Q27 BGK; in float32 to a few units in the last place; with float16 and
bfloat16 storage to one unit of the stored form. Programs of 32 cells on grids of 120 cells
exercise the grid's blocks and its overhanging last one. Chunks compose bitwise. The kernel
lowers for CUDA here (no GPU needed): every sweep is a Triton kernel whose IR verifies, updating
the population buffer in place. Unsupported set-ups are one-line config errors. Interpret mode
is slow to compile: the grids are tiny and the compiled chunks shared between tests.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_native_kernel import fluid_section

from kernels.lattices import LATTICES
from solver.errors import ConfigError
from solver.fluid.config import parse_fluid
from solver.fluid.inplace_step import require_kernel
from solver.fluid.pallas_step import make_pallas_chunk
from solver.fluid.setup import BodyForce, FluidSetup, OpenBoundary
from solver.fluid.step import initial_state, make_chunk, make_geometry

# float64: the sweeps run the pure-JAX step's formulas; only the order of a few sums differs
ROUND_OFF_F64 = 1e-13
# float32: a few units in the last place of populations <= 1/3 after a few steps
ULPS_F32 = 4
BLOCK = 32  # cells per program: several programs and a partial last one on 120 cells


def _setup(lattice: str, shape, dtype="float64", collision="trt", walls=0, force=False,
           storage=None, les="none") -> FluidSetup:  # fmt: skip
    """walls: 0 none, 1 resting (channel walls and a block), 2 moving (a lid and the block);
    force: a body force constant plus periodic in time."""
    lat = LATTICES[lattice]
    solid = wall_u = body_force = None
    if walls:
        solid = np.zeros(shape, bool)
        solid[:, 0] = solid[:, -1] = True
        solid[(slice(2, 4),) * len(shape)] = True
        if walls == 2:
            wall_u = np.zeros((lat.d, *shape))
            wall_u[0][:, -1] = 0.05
            wall_u[-1][(slice(2, 4),) * len(shape)] = -0.02
    if force:
        d = lat.d
        body_force = BodyForce(constant=(1e-5,) * d, amplitude=(2e-5,) * d, angular_frequency=0.3)
    return FluidSetup(lattice=lat, shape=shape, omega=1 / 0.57, dtype=dtype, collision=collision,
                      solid=solid, wall_velocity=wall_u, body_force=body_force,
                      storage=storage, kernel="pallas", les=les, les_cs=0.3)  # fmt: skip


# name -> (lattice, shape, collision, walls, force, dtype, storage, steps); "les": with the
# Smagorinsky model (C_s = 0.3, so that it changes the flow)
SCENARIOS = {
    "D3Q19 trt les moving walls + force, odd, float64": (
        "D3Q19", (6, 5, 4), "trt", 2, True, "float64", None, 5),
    "D3Q27 bgk periodic, float64": ("D3Q27", (6, 5, 4), "bgk", 0, False, "float64", None, 2),
    "D2Q9 trt moving walls + force, odd, float32": (
        "D2Q9", (12, 10), "trt", 2, True, "float32", None, 3),
    "D2Q9 trt moving walls + force, odd, float16": (
        "D2Q9", (12, 10), "trt", 2, True, "float32", "float16", 3),
    "D2Q9 bgk walls, bfloat16": ("D2Q9", (12, 10), "bgk", 1, False, "float32", "bfloat16", 2),
}  # fmt: skip


@cache
def _scenario(name: str):
    """(setup, state, XLA reference after n steps, the jitted pallas chunk, n): the state a
    random flow put through the XLA chunk (solid nodes at rest, as the solver keeps them)."""
    lattice, shape, collision, walls, force, dtype, storage, n = SCENARIOS[name]
    les = "smagorinsky" if " les " in name else "none"
    setup = _setup(lattice, shape, dtype, collision, walls, force, storage, les)
    rng = np.random.default_rng(0)
    rho = 1 + 0.01 * rng.standard_normal(shape)
    u = 0.02 * rng.standard_normal((setup.lattice.d, *shape))
    if setup.solid is not None:
        rho[setup.solid], u[:, setup.solid] = 1.0, 0.0
    geometry = make_geometry(setup)
    xla_chunk = jax.jit(make_chunk(setup), static_argnums=2)
    state = xla_chunk(initial_state(setup, rho, u), geometry, n)[0]
    reference = xla_chunk(state, geometry, n)[0]
    ours = jax.jit(make_pallas_chunk(setup, block=BLOCK), static_argnums=2)
    return setup, state, reference, ours, n


def _run(name: str):
    setup, state, reference, chunk, n = _scenario(name)
    result, forces = chunk(state, make_geometry(setup), n)
    assert int(result.time) == int(state.time) + n
    assert forces.shape == (n, setup.force_width)
    assert result.populations.dtype == state.populations.dtype
    ours = np.asarray(result.populations).astype(np.float64)
    ref = np.asarray(reference.populations).astype(np.float64)
    moved = np.abs(ours - np.asarray(state.populations).astype(np.float64)).max()
    return ours, ref, moved


# the D3Q27 one in make test-long (test time: the D3Q19 one covers the same sweeps with more)
FLOAT64 = [
    pytest.param(k, marks=pytest.mark.long) if k.startswith("D3Q27") else k
    for k in SCENARIOS
    if k.endswith("float64")
]


@pytest.mark.parametrize("name", FLOAT64)
def test_float64_equals_the_xla_step_to_round_off(name):
    ours, ref, moved = _run(name)
    difference = np.abs(ours - ref).max()
    assert difference < ROUND_OFF_F64, f"{name}: max |difference| {difference:.3g}"
    assert moved > 1e-3  # the flow moved: not a comparison of two unchanged states


@pytest.mark.long  # test time; float32 compute is also exercised by the 16-bit storage test
def test_float32_equals_the_xla_step_to_a_few_ulps():
    ours, ref, moved = _run("D2Q9 trt moving walls + force, odd, float32")
    ulps = np.abs(ours - ref) / np.spacing(np.abs(ref).astype(np.float32))
    assert ulps.max() <= ULPS_F32, f"{ulps.max():.1f} units in the last place"
    assert moved > 1e-3


# bfloat16 differs from float16 by its type and scale only (kernels/storage.py)
@pytest.mark.parametrize("storage", ["float16", pytest.param("bfloat16", marks=pytest.mark.long)])
def test_16_bit_storage_equals_the_xla_step_to_one_unit_of_the_stored_form(storage):
    """Both steps hold (f - w) * s in the 16-bit type and compute in float32: the kernel's
    float32 rounding (and its moving-wall links, rounded once after Ladd's term where the
    pure-JAX step adds it to the decoded value) moves stored values by at most one unit in the
    last place of the largest of them, the storage's own resolution."""
    name = next(k for k in SCENARIOS if k.endswith(storage))
    ours, ref, moved = _run(name)
    unit = float(np.spacing(np.abs(ref).astype(storage).max()).astype(np.float64))
    difference = np.abs(ours - ref).max()
    assert difference <= unit, f"{difference} stored units, more than one ({unit})"
    assert moved > 4 * unit


def test_chunks_compose_bitwise():
    """Two chunks of 3 steps equal one of 6: nothing of the in-place layout outlives a chunk
    (the pairs are streamed after an odd chunk, the solid nodes put at rest)."""
    setup, state, _, chunk, _ = _scenario("D2Q9 trt moving walls + force, odd, float32")
    geometry = make_geometry(setup)
    once = chunk(state, geometry, 6)[0]
    twice = chunk(chunk(state, geometry, 3)[0], geometry, 3)[0]
    assert np.array_equal(np.asarray(once.populations), np.asarray(twice.populations))
    assert int(once.time) == int(twice.time)


def _custom_calls(module) -> list:
    calls = []

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    if inner.operation.name == "stablehlo.custom_call":
                        calls.append(inner.operation)
                    walk(inner.operation)

    walk(module.operation)
    return calls


def cuda_target():
    """A context in which Pallas lowers for an H100 without a GPU present: JAX 0.11 asks the
    abstract mesh's device for the compute capability (0.10 assumed 9.0 when none was
    visible); the same Hopper target on both."""
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100", num_cores=None,
                                         platform="gpu")  # fmt: skip
    return jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((1,), ("lowering",), abstract_device=device)
    )


@pytest.mark.parametrize(
    "lattice, dtype, storage, walls, force",
    [("D3Q19", "float32", "float16", 2, True), ("D3Q27", "float64", None, 0, True)],
)
def test_lowers_for_the_gpu_in_place(lattice, dtype, storage, walls, force):
    """Lowered for CUDA without a GPU: each sweep is one Triton kernel (its IR verifies, so an
    op Triton lacks fails here) that writes the population buffer it reads (an output aliased
    with an input), and the chunk's state is donated into its result."""
    from jax._src.lib.mlir import ir
    from jax._src.pallas.triton import lowering as triton_lowering

    setup = _setup(lattice, (6, 5, 4), dtype, "trt", walls, force, storage)
    state = initial_state(setup, np.ones(setup.shape), np.zeros((setup.lattice.d, *setup.shape)))
    chunk = jax.jit(make_pallas_chunk(setup, interpret=False), static_argnums=2,
                    donate_argnums=0)  # fmt: skip
    geometry = make_geometry(setup)  # eager: outside the abstract mesh, which runs no ops
    with cuda_target():
        lowered = chunk.trace(state, geometry, 3).lower(lowering_platforms=("cuda",))
    calls = _custom_calls(lowered.compiler_ir("stablehlo"))
    # even and odd sweeps in the loop, the last even sweep, the stream of the pairs
    assert [c.attributes["call_target_name"].value for c in calls] == ["__gpu$xla.gpu.triton"] * 4
    for call in calls:
        assert "output_operand_aliases" in call.attributes
        triton_ir = ir.StringAttr(call.attributes["mhlo.backend_config"]["ir"]).value_bytes
        with triton_lowering._new_ir_context():
            module = ir.Module.parse(triton_ir)
            assert module.operation.verify()
    assert "tf.aliasing_output" in lowered.as_text()


def test_unsupported_set_ups_are_config_errors():
    fluid = fluid_section

    assert parse_fluid(fluid(kernel="pallas")).kernel == "pallas"
    assert parse_fluid(fluid(kernel="pallas", storage="bfloat16")).storage == "bfloat16"
    assert parse_fluid(fluid(kernel="pallas", les="smagorinsky")).les == "smagorinsky"
    for bad, words in (
        ({"collision": "regularized"}, "collision=regularized"),
        ({"collision": "kbc", "lattice": "D3Q27"}, "collision=kbc"),
    ):
        with pytest.raises(ConfigError, match=f"fluid.kernel.*{words}"):
            parse_fluid(fluid(kernel="pallas", **bad))
    setup = _setup("D2Q9", (12, 10))
    require_kernel(setup)  # one device, walls and forces: fine
    for kwargs, words in (({"shards": 2}, "mesh of 2"), ({"coupled": True}, "bodies")):
        with pytest.raises(ConfigError, match=f"fluid.kernel = 'pallas'.*{words}"):
            require_kernel(setup, **kwargs)
    inlet = OpenBoundary(axis=0, side="low", kind="velocity", velocity=np.zeros((2, 10)))
    sponge = np.zeros(setup.shape)
    curved = np.full((9, *setup.shape), 0.5)
    for changes, words in (
        ({"open_boundaries": (inlet,)}, "open boundaries"),
        ({"sponge": sponge}, "sponge"),
        ({"solid": np.eye(12, 10, dtype=bool), "wall_distance": curved}, "Bouzidi"),
        ({"solid": np.eye(12, 10, dtype=bool), "obstacle": np.eye(12, 10, dtype=bool)},
         "obstacle force"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=words) as error:
            require_kernel(dataclasses.replace(setup, **changes))
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="pallas does not support"):
        make_pallas_chunk(dataclasses.replace(setup, open_boundaries=(inlet,)))
    assert jnp.dtype(setup.dtype) == jnp.float64


def test_memory_estimate_holds_one_buffer():
    """The start-up estimate (solver/fluid/memory.py) counts the state and the geometry the
    sweeps read: a duct's populations and solid mask."""
    from solver.api import compose_config
    from solver.fluid.memory import estimate

    per_cell = {}
    for kernel in ("xla", "pallas"):
        config = compose_config(["case=duct", "fluid=d3q19", f"fluid.kernel={kernel}"])
        per_cell[kernel] = estimate(config, (64, 64, 64)).device / 64**3
    assert per_cell["pallas"] == 19 * 4 + 1
    assert per_cell["xla"] > 2 * per_cell["pallas"]


def test_cavity_runs_through_the_cli(tmp_path):
    """The whole path: fluid.kernel=pallas parsed, checked, dispatched to the chunk; the lid
    drives a flow (the fields' agreement with the XLA step is the tests above)."""
    import json

    import h5py
    from solver_cli import run_solver

    args = ["case=cavity", "case.resolution=16", "steps=20", "checkpoint=none", "output.every=20"]
    result = run_solver([*args, "fluid.kernel=pallas", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run.json").read_text())["config"]["fluid"]["kernel"] == "pallas"
    with h5py.File(tmp_path / "fields.h5", "r") as f:
        velocity = f["step_00000020"]["velocity"][...]
    assert np.isfinite(velocity).all() and np.abs(velocity).max() > 0


def test_a_case_the_kernel_lacks_exits_2_with_the_reason(tmp_path):
    from solver_cli import run_solver

    result = run_solver(["case=cylinder", "case.resolution=8", "steps=2", "checkpoint=none",
                         "fluid.kernel=pallas", f"hydra.run.dir={tmp_path}"])  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "fluid.kernel = 'pallas'" in result.stderr and "open boundaries" in result.stderr


@pytest.mark.long
def test_gpu_check_runs_its_pallas_rows_on_the_cpu(capsys):
    """``make gpu-check``'s code paths at a tiny size, the pallas kernel interpreted: the
    throughput rows beside xla, the largest-cube row, the agreement and determinism checks."""
    from solver.bench import gpu_check

    code = gpu_check.main(["--allow-cpu", "--edge", "8", "--steps", "3", "--lattices", "D3Q19",
                           "--storages", "float16", "--largest", "8"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "D3Q19  float16 pallas at 8^3" in out
    assert "float16 pallas: max |df|" in out and "pallas bitwise" in out
