"""`python -m solver.bench` runs the real step and reports consistent figures (no timing)."""

import json
import os
import subprocess
import sys

import pytest
from solver_cli import FAST_COMPILE

from kernels.lattices import lattice_by_name


def test_bench_reports_every_row_with_a_consistent_roofline(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "solver.bench", "--lattices", "D2Q9,D3Q19"]
    cmd += ["--precisions", "float32", "--sizes", "8", "--steps", "3", "--repeats", "1"]
    cmd += ["--case", "walls", "--kernels", "xla,native", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "roof" in done.stdout and "D3Q19" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {(r["lattice"], r["case"], r["kernel"]) for r in rows} == {
        (lat, case, kernel)
        for lat in ("D2Q9", "D3Q19")
        for case in ("walls",)
        for kernel in ("xla", "native")
    }
    for row in rows:
        q = lattice_by_name(row["lattice"]).q
        assert row["mlups"] > 0 and row["bandwidth_gbs"] > 0
        # roofline: every cell reads and writes its q float32 populations once
        expected = row["bandwidth_gbs"] * 1e9 / (2 * q * 4) / 1e6
        assert row["roofline_mlups"] == pytest.approx(expected, rel=1e-6)
        assert row["fraction"] == pytest.approx(row["mlups"] / row["roofline_mlups"], rel=1e-6)
        if row["kernel"] == "xla":  # two buffers of q populations besides the state
            assert row["peak_bytes_per_cell"] >= 2 * q * 4
        elif row["case"] == "periodic":  # one buffer and nothing else
            assert q * 4 <= row["peak_bytes_per_cell"] < q * 4 + 1
        else:  # plus the solid mask and the list of wall links (large on an 8^3 box)
            assert q * 4 < row["peak_bytes_per_cell"] < 2 * q * 4


def test_gpu_check_without_a_gpu_says_so_and_exits_2():
    """No GPU here: the check refuses to report CPU figures as GPU ones."""
    result = subprocess.run(
        [sys.executable, "-m", "solver.bench", "gpu-check"], capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr
    assert "not gpu" in result.stderr and "make gpu-install" in result.stderr


def test_gpu_check_probe_is_a_real_loop():
    """The copy probe (its trip count a runtime value, so XLA:GPU cannot fuse the iterations
    into one pass) reports a plausible rate; the datasheet is found by device kind."""
    from solver.bench.gpu_check import copy_bandwidth, datasheet

    rate = copy_bandwidth(2**24, 4)
    assert 1e8 < rate < 1e13
    assert datasheet("NVIDIA H200") == 4.8e12 and datasheet("cpu") is None


def test_gpu_check_runs_only_the_parts_asked_for(capsys):
    """launch/gpu_check_offline.sh runs the check in parts (the headline first, each under its
    own time limit): a part not asked for is not run, and an unknown part is refused."""
    from solver.bench import gpu_check

    assert gpu_check.main(["--allow-cpu", "--parts", "scaling"]) == 0
    out = capsys.readouterr().out
    assert "copy bandwidth" in out
    assert "throughput at" not in out and "agreement with" not in out and "determinism" not in out
    with pytest.raises(SystemExit, match="--parts 'speed' not in throughput, agreement"):
        gpu_check.parse_args(["--parts", "throughput,speed"])


def test_gpu_check_goes_on_when_the_largest_cube_fails(monkeypatch, capsys):
    """A largest-cube row that runs out of device memory (its estimate comes from the 256^3
    program) is reported and the rows after it still run: a GPU lease allows one run. The
    device's allocator failure cannot happen here, so the two bench calls are stand-ins."""
    from types import SimpleNamespace

    from solver.bench import gpu_check

    row = SimpleNamespace(mlups=1.0, fraction=0.5, peak_bytes_per_cell=80.0)
    monkeypatch.setattr(gpu_check.fluid_bench, "measure_copy", lambda dtype: lambda: 1e9)

    def bench_one(*args, storage="float32", **kwargs):  # the bench's signature has storage
        return row

    monkeypatch.setattr(gpu_check.fluid_bench, "bench_one", bench_one)

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 53 GB")

    monkeypatch.setattr(gpu_check, "largest_cube_row", out_of_memory)
    rows = gpu_check.throughput_rows(8, 2, 1, 2**30, ("pallas",), ("D3Q19",),
                                     ("float32", "float16"), largest=900)  # fmt: skip
    out = capsys.readouterr().out
    assert "D3Q19  float32 pallas at 900^3: FAILED (RuntimeError: RESOURCE_EXHAUSTED" in out
    assert [r["storage"] for r in rows] == ["float32", "float16"]  # the next row still ran


# the coupled bench's rows and figures, not its speed, are checked here: its programs compile
# without LLVM optimisation (the 24^3 run with both kernels: 48 s -> 29 s)
FAST_ENV = {**os.environ, "XLA_FLAGS": FAST_COMPILE}


# the owned rows in make test-long: the replicated case covers the bench's rows and figures,
# tests/test_coupling_owned.py the owned coupled step (35 s of make test's budget); so do the
# native rows beside the xla ones: the bench's native rows are made on two MPI processes below,
# the native coupled step is tested in tests/test_coupling_native.py (its chunk compiles in
# ~27 s here: 76 s with both kernels against ~40 s)
@pytest.mark.parametrize(
    ("bodies", "kernels"),
    [
        ("replicated", ["xla"]),
        pytest.param("replicated", ["xla", "native"], marks=pytest.mark.long),
        pytest.param("owned", ["xla"], marks=pytest.mark.long),
    ],
)
def test_coupled_bench_rows_for_both_ways_of_holding_bodies(tmp_path, bodies, kernels):
    """``python -m solver.bench coupled``: a row per kernel and count, the bodies held as
    asked, finite figures (each kernel's fluid-only row is its 100 % reference)."""
    out = tmp_path / "coupled.json"
    cmd = [sys.executable, "-m", "solver.bench", "coupled", "--edge", "24", "--counts", "0,8",
           "--steps", "4", "--repeats", "1", "--bodies", bodies, "--kernels", ",".join(kernels),
           "--json", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=FAST_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    expected = [(k, n, bodies) for k in kernels for n in (0, 8)]
    assert [(r["kernel"], r["spheres"], r["bodies"]) for r in rows] == expected
    for reference, coupled in zip(rows[::2], rows[1::2], strict=True):
        assert reference["fraction_of_fluid"] == 1.0
        assert coupled["fraction_of_fluid"] > 0.0 and coupled["mlups"] > 0
        assert coupled["solid_fraction"] > 0


# owned bodies in make test-long (45 s against 17 s replicated): the launch, the rounds and
# the rows are the same, and tests/test_coupling_owned.py holds the owned native step on MPI
@pytest.mark.parametrize("bodies", ["replicated", pytest.param("owned", marks=pytest.mark.long)])
def test_coupled_bench_on_two_mpi_processes(tmp_path, bodies):
    """``--processes 2``: weak scaling on two MPI processes (an edge^3 slab and the count's
    spheres each, on the native kernel, the bodies held as asked): rank 0 writes the rows for
    the whole grid and all the spheres."""
    out = tmp_path / "coupled.json"
    cmd = [sys.executable, "-m", "solver.bench", "coupled", "--edge", "16", "--counts", "0,4",
           "--steps", "4", "--repeats", "1", "--bodies", bodies, "--kernels", "native",
           "--processes", "2", "--json", str(out)]  # fmt: skip
    sizes = "sized" if bodies == "owned" else "scene"  # owned: buffers sized per process
    cmd += ["--capacities", sizes]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=FAST_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["processes"], r["spheres"], r["cells"]) for r in rows] == [
        (2, 0, 2 * 16**3),
        (2, 8, 2 * 16**3),
    ]
    assert rows[0]["fraction_of_fluid"] == 1.0
    assert rows[1]["fraction_of_fluid"] > 0.0 and rows[1]["solid_fraction"] > 0
    assert all(r["bodies"] == bodies and r["capacities"] == sizes for r in rows)


def test_mpi_workers_do_not_inherit_the_parents_mpi_launch():
    """A benchmark started from a process that had initialised MPI (mpi4py's singleton init
    sets PMIX_* and OMPI_MCA_orte_* in the environment its children inherit) launches its own
    mpirun job: with the inherited variables Open MPI's mpirun exits 1 without a word (this
    failed the 2-process bench test whenever it ran after an in-process MPI test)."""
    pytest.importorskip("mpi4py")
    child = (
        "import os, shutil, subprocess\n"
        "from solver.bench.scaling import child_env\n"
        "env = child_env(None)\n"
        "launch = [k for k in os.environ if k.startswith(('PMIX_', 'OMPI_MCA_orte_'))]\n"
        "left = [k for k in env if k.startswith(('PMIX_', 'ORTE_', 'OMPI_MCA_orte_'))]\n"
        "run = [shutil.which('mpirun'), '-n', '1', 'true']\n"
        "print(len(launch), len(left), subprocess.run(run, env=env).returncode)\n"
    )
    parent = (
        "from mpi4py import MPI\n"
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {child!r}])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, timeout=120
    )
    inherited, left, returncode = (int(word) for word in done.stdout.split())
    assert inherited > 0  # the parent's MPI launch is in the child's environment
    assert left == 0 and returncode == 0, done.stderr[-2000:]


def test_wall_boxes_bench_rows_compare_the_boxes_with_the_whole_block(tmp_path):
    """The 2D-2 cylinder's two wall strips and cylinder become 3 boxes, and the boxed chunk
    holds fewer bytes per cell than the whole-block one (figures: docs/performance.md)."""
    from solver.bench.wall_boxes import main

    out = tmp_path / "boxes.json"
    args = ["--cases", "cylinder", "--steps", "2", "--repeats", "1", "--rounds", "1"]
    assert main([*args, "--json", str(out)]) == 0
    whole, boxed = json.loads(out.read_text())
    assert (whole["rules"], whole["boxes"]) == ("whole block", 0)
    assert (boxed["rules"], boxed["boxes"]) == ("boxes", 3)
    assert boxed["peak_bytes_per_cell"] < whole["peak_bytes_per_cell"]
    for row in (whole, boxed):
        assert row["fraction"] == pytest.approx(row["mlups"] / row["roofline_mlups"])
    with pytest.raises(SystemExit) as exit_info:
        main(["--cases", "sphere,box"])
    assert exit_info.value.code == 2
