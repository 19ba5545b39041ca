"""The native in-place kernel split over devices along x (solver/fluid/inplace_split.py): the
AA pattern's ghost planes travel between the kernel's phases, and the result equals the
one-device kernel bitwise.

- on one shard (the halo a periodic wrap) for every scenario of tests/test_native_kernel.py,
  with even and odd chunk lengths;
- on 2 and 4 fake CPU devices (xla halo, ``shard_map``): moving walls with solid links across
  the shard faces, a body force, the Smagorinsky model, float16 storage;
- through the CLI: the lid-driven cavity on 2 MPI processes (mpi halo) writes the one-process
  fields.h5 bit for bit;
- a mesh that splits another axis is a one-line config error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from mpi import mpirun
from native_split_worker import random_state
from solver_cli import run_solver
from test_distributed_app import assert_same_field_files
from test_distributed_equality import fake_device_env, records
from test_native_kernel import LONG_SCENARIOS, PARAMS, SCENARIOS, _setup

from solver.errors import ConfigError
from solver.fluid.inplace_split import make_split_chunk
from solver.fluid.inplace_step import kernel_rates, make_inplace_chunk, require_kernel
from solver.fluid.padded import SINGLE
from solver.fluid.step import make_geometry

ROOT = Path(__file__).resolve().parent.parent
WORKER = str(Path(__file__).resolve().parent / "native_split_worker.py")
CAVITY = ["case=cavity", "case.resolution=14", "steps=61", "output.every=61",
          "output.png=false", "fluid.kernel=native"]  # fmt: skip


@pytest.mark.parametrize("name", PARAMS)
def test_split_chunk_on_one_shard_equals_the_whole_chunk(name):
    lattice, shape, collision, walls, force, steps = {**SCENARIOS, **LONG_SCENARIOS}[name]
    setup = _setup(lattice, shape, "float64", collision, walls, force)
    state = random_state(setup)
    geometry = make_geometry(setup)
    whole = jax.jit(make_inplace_chunk(setup), static_argnums=2)
    split = make_split_chunk(setup, shape, SINGLE, lambda: 0, 1, *kernel_rates(setup))
    split = jax.jit(split, static_argnums=2)
    for n in (steps, 1, 2):
        a = np.asarray(whole(state, geometry, n)[0].populations)
        b = np.asarray(split(state, geometry, n)[0].populations)
        assert np.array_equal(a, b), f"{name}, {n} steps: max diff {np.abs(a - b).max()}"


def test_split_chunk_on_fake_devices_equals_one_device():
    result = subprocess.run(
        [sys.executable, WORKER], cwd=ROOT, env=fake_device_env(), capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = records(result.stdout)
    assert len(found) == 8, result.stdout
    for r in found:
        assert r["finite"], r
        assert r["bitwise"], r
    assert sum(r["shift"] > 0 for r in found) == 3, found  # rotated planes on the slabs


def test_mpirun_native_cavity_equals_one_process(tmp_path):
    single = tmp_path / "single"
    result = run_solver([*CAVITY, "domain=single", f"hydra.run.dir={single}"])
    assert result.returncode == 0, result.stderr[-2000:]
    out = tmp_path / "mpi"
    overrides = ["domain.mesh=[2,1]", "domain.halo=mpi", f"hydra.run.dir={out}"]
    result = mpirun(2, ["-m", "solver", *CAVITY, *overrides])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "run.json").read_text())
    assert summary["domain"]["processes"] == 2 and summary["status"] == "completed"
    assert_same_field_files(out, single)


def test_a_mesh_splitting_another_axis_is_a_config_error():
    setup = _setup("D2Q9", (12, 10), "float32", "trt", 1, False)
    require_kernel(setup, "native", shards=4, mesh=(4, 1))  # slabs along x: fine
    require_kernel(setup, "pallas", shards=2, mesh=(2, 1))
    for kernel in ("native", "pallas"):
        with pytest.raises(ConfigError, match="split the x axis only: domain.mesh=slab"):
            require_kernel(setup, kernel, shards=2, mesh=(1, 2))


def test_split_chunk_holds_one_population_buffer():
    """XLA's memory analysis of the split chunk: the state's one buffer plus the exchange
    buffers of two planes (D3Q19 float32 with walls: 79.5 bytes per cell at 64^3; the issue's
    goal is 90)."""
    shape = (16, 32, 32)
    setup = _setup("D3Q19", shape, "float32", "trt", 1, False)
    split = make_split_chunk(setup, shape, SINGLE, lambda: 0, 1, *kernel_rates(setup))
    compiled = (
        jax.jit(split, static_argnums=2, donate_argnums=0)
        .lower(random_state(setup), make_geometry(setup), 4)
        .compile()
    )
    m = compiled.memory_analysis()
    peak = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
            + m.temp_size_in_bytes)  # fmt: skip
    assert peak / np.prod(shape) <= 90.0, f"{peak / np.prod(shape):.1f} bytes per cell"
