"""The CUDA kernel (``fluid.kernel=cuda``, kernels/native/lb_gpu.cu): the native CPU kernel's
scheme and per-cell code (kernels/native/lb_cell.h) as a CUDA FFI kernel, one thread per cell.

Without a GPU (make test) the kernel runs as its emulation: the same source compiled by g++,
the per-cell and per-link functions called in loops instead of kernel launches. It must store
the same bits as the native CPU kernel (both compile the shared code without contraction), in
float64, float32 and float16 storage, with moving walls (the link repairs), a time-dependent
body force, the Smagorinsky model and odd chunks (the in-place stream of the pairs); and so
equal the XLA step to round-off (checked directly once, and by test_native_kernel.py for the
native kernel). nvcc compiles the CUDA build (the device code of every
instantiation), whose library loads without a GPU, and the chunk lowered for CUDA is one custom
call on the donated state, aliased. On a GPU (launch/gpu_check_offline.sh runs this file with
JAX_PLATFORMS=cuda,cpu) the same equality tests run the CUDA build on the device against the
native kernel on the host CPU.
"""

from __future__ import annotations

import ctypes
import dataclasses

import jax
import numpy as np
import pytest
from test_native_kernel import _setup, _state, fluid_section
from test_pallas_kernel import _custom_calls, cuda_target

from solver.errors import ConfigError
from solver.fluid import cuda
from solver.fluid.config import parse_fluid
from solver.fluid.inplace_step import make_inplace_chunk, require_kernel
from solver.fluid.step import initial_state, make_chunk, make_geometry

# name -> (lattice, shape, collision, walls: 0 none / 1 resting / 2 moving, force, dtype,
# storage, les, steps)
SCENARIOS = {
    "D2Q9 trt moving walls + force, odd, float64": ("D2Q9", (12, 10), "trt", 2, True, "float64",
                                                    None, False, 7),
    "D3Q19 trt moving walls + force, odd": ("D3Q19", (8, 6, 10), "trt", 2, True, "float32", None,
                                            False, 5),
    "D2Q9 float16 storage, moving walls + force, odd": ("D2Q9", (12, 21), "trt", 2, True,
                                                        "float32", "float16", False, 7),
    "D2Q9 bgk smagorinsky, walls": ("D2Q9", (12, 10), "bgk", 1, False, "float32", None, True, 6),
}  # fmt: skip
LONG_SCENARIOS = {
    "D3Q27 trt moving walls + force": ("D3Q27", (6, 8, 10), "trt", 2, True, "float32", None,
                                       False, 6),
    "D3Q19 float16 storage, trt smagorinsky, moving walls, odd": ("D3Q19", (8, 6, 10), "trt", 2,
                                                                 True, "float32", "float16",
                                                                 True, 5),
}  # fmt: skip
PARAMS = [*SCENARIOS, *(pytest.param(k, marks=pytest.mark.long) for k in LONG_SCENARIOS)]


def _scenario(name: str):
    lattice, shape, collision, walls, force, dtype, storage, les, n = {
        **SCENARIOS,
        **LONG_SCENARIOS,
    }[name]
    setup = _setup(lattice, shape, dtype, collision, walls, force)
    setup = dataclasses.replace(setup, storage=storage, les="smagorinsky" if les else "none",
                                les_cs=0.3)  # fmt: skip
    return setup, n


@pytest.mark.parametrize("name", PARAMS)
def test_equals_the_native_kernel_bitwise(name):
    """The CUDA kernel (its emulation on a CPU; the CUDA build on a GPU) against the native
    kernel on the host CPU: the same bits after an odd or even chunk. The start is a random
    flow put through the native chunk (a state as the solver keeps it), so that no XLA step is
    compiled here: the native kernel's agreement with the XLA step is test_native_kernel.py's
    (to 1e-13 in float64, one stored unit with float16 storage), and carries over."""
    setup, n = _scenario(name)
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        native = jax.jit(make_inplace_chunk(setup), static_argnums=2)
        state = _state(setup, native, n)
        expected = np.asarray(native(state, make_geometry(setup), n)[0].populations)
    device = jax.devices()[0]
    ours_state, geometry = jax.device_put((state, make_geometry(setup)), device)
    chunk = jax.jit(make_inplace_chunk(setup, "cuda"), static_argnums=2)
    ours, forces = chunk(ours_state, geometry, n)
    assert int(ours.time) == int(state.time) + n
    assert forces.shape == (n, setup.force_width)
    ours = np.asarray(ours.populations)
    assert ours.dtype == expected.dtype
    assert np.array_equal(ours, expected), f"max |difference| {np.abs(ours - expected).max():.3g}"
    # the flow moved: the comparison is not of two unchanged states
    moved = np.abs(ours.astype(np.float64) - np.asarray(state.populations, np.float64)).max()
    assert moved > (10 if setup.storage is not None else 1e-4)  # stored (f - w) 2^15: units


def test_emulation_equals_the_xla_step_to_round_off():
    """One scenario against the XLA step directly (D3Q19 float64, TRT, moving walls, periodic
    force, odd chunk), in case the native kernel and the CUDA kernel shared an error."""
    setup, n = _scenario("D3Q19 trt moving walls + force, odd")
    setup = dataclasses.replace(setup, dtype="float64")
    xla_chunk = jax.jit(make_chunk(setup), static_argnums=2)
    state, geometry = _state(setup, xla_chunk, n), make_geometry(setup)
    reference = np.asarray(xla_chunk(state, geometry, n)[0].populations)
    ours = jax.jit(make_inplace_chunk(setup, "cuda"), static_argnums=2)(state, geometry, n)[0]
    assert np.abs(np.asarray(ours.populations) - reference).max() < 1e-13


def test_chunks_compose_bitwise():
    """Two chunks of 19 and 21 steps equal one of 40 (nothing of the in-place layout outlives a
    chunk)."""
    setup = _setup("D2Q9", (12, 10), "float64", "trt", 2, True)
    chunk = jax.jit(make_inplace_chunk(setup, "cuda"), static_argnums=2)
    state = _state(setup, chunk, 2)
    geometry = make_geometry(setup)
    once = chunk(state, geometry, 40)[0]
    twice = chunk(chunk(state, geometry, 19)[0], geometry, 21)[0]
    assert np.array_equal(np.asarray(once.populations), np.asarray(twice.populations))


needs_nvcc = pytest.mark.skipif(cuda.nvcc() is None, reason="no nvcc on this machine")


@needs_nvcc
@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_nvcc_builds_the_cuda_library(storage):
    """nvcc compiles the device code of every instantiation (walls, force, LES; even and odd
    sweeps) for the target architecture; the library, with the CUDA runtime linked in
    statically, loads without a GPU and exports the handler."""
    library = cuda.build("D3Q19", storage, emulate=False)
    assert library.name == f"liblb_gpu_cuda_D3Q19_{storage}.so"
    assert hasattr(ctypes.CDLL(str(library)), "LbGpuChunk")


@needs_nvcc
def test_lowers_for_cuda_as_one_aliased_call():
    """Lowered for CUDA without a GPU: the chunk is one custom call of the CUDA build's target
    with its attributes, its result aliased with the populations it reads, and the state
    donated into the chunk's result."""
    setup = _setup("D3Q19", (6, 5, 4), "float32", "trt", 2, True)
    state = initial_state(setup, np.ones(setup.shape), np.zeros((3, *setup.shape)))
    geometry = make_geometry(setup)  # eager: outside the abstract mesh, which runs no ops
    chunk = jax.jit(make_inplace_chunk(setup, "cuda", block=256, emulate=False),
                    static_argnums=2, donate_argnums=0)  # fmt: skip
    with cuda_target():
        lowered = chunk.trace(state, geometry, 3).lower(lowering_platforms=("cuda",))
    calls = _custom_calls(lowered.compiler_ir("stablehlo"))
    assert [c.attributes["call_target_name"].value for c in calls] == [
        "solver_lb_gpu_cuda_D3Q19_float32"
    ]
    config = str(calls[0].attributes["mhlo.backend_config"])
    for attribute in ("block = 256", "steps = 3", "walls = 1", "force = 1", "shift = 0"):
        assert attribute in config, config
    assert "output_operand_aliases" in calls[0].attributes
    assert "tf.aliasing_output" in lowered.as_text()


def test_unsupported_set_ups_are_config_errors():
    fluid = fluid_section
    assert parse_fluid(fluid(kernel="cuda")).kernel == "cuda"
    assert parse_fluid(fluid(kernel="cuda", storage="float16")).storage == "float16"
    for bad, words in (
        ({"collision": "regularized"}, "collision=regularized"),
        ({"storage": "bfloat16"}, "storage=bfloat16"),
    ):
        with pytest.raises(ConfigError, match=f"fluid.kernel.*{words}"):
            parse_fluid(fluid(kernel="cuda", **bad))
    setup = dataclasses.replace(_setup("D3Q19", (8, 6, 10)), kernel="cuda")
    require_kernel(setup)
    with pytest.raises(ConfigError, match="one device"):
        require_kernel(setup, shards=2, mesh=(2, 1, 1))
    with pytest.raises(ConfigError, match="bodies in the fluid"):
        require_kernel(setup, coupled=True)
    with pytest.raises(ValueError, match="fluid.kernel=cuda does not support collision"):
        make_inplace_chunk(dataclasses.replace(setup, collision="regularized"), "cuda")


def test_a_gpu_without_nvcc_is_a_config_error(monkeypatch):
    """On a GPU (mocked: the back end's name; none exists here) the kernel is compiled at its
    first run, so a machine without nvcc is refused at start-up with the remedy, not with a
    build error's traceback."""
    setup = dataclasses.replace(_setup("D3Q19", (8, 6, 10)), kernel="cuda")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(cuda, "nvcc", lambda: None)
    with pytest.raises(ConfigError, match="without nvcc.*NVCC"):
        require_kernel(setup)
