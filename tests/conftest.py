"""Shared test settings: float64 available for exactness checks; CPU only (no GPU here).

Compiled programs are shared across the whole test session, solver subprocesses and MPI ranks
included: JAX's persistent compilation cache in a fresh directory per session (exported, so
every child process finds it). Most test time is compilation, and many tests compile the same
program (a reference run and its resumed twin, every rank of an MPI job, one case in several
tests). The cache key is the optimised program plus the compile options and devices, so a hit
is the same executable: results are unchanged. Every program is stored, however fast it
compiles: a solver run's set-up compiles some 70 small programs of a few tens of ms each (the
eager operations on the initial state, 1.5-2 s a run), which the next run of that case loads
instead (measured 2026-12-06: six test files of solver runs and checkpoints 537 -> 492 s of
CPU; the whole suite 3,676 -> 3,651 worker-s, within its run-to-run spread).

`make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`). The cache directory
is made here, in the controller, before the workers start, so they share it. The Slurm tests
share one test cluster whose start and job queue are not safe to drive from two processes, so
they run on one worker (group "processes"), and so do the tests that launch MPI jobs: each
already keeps both cores busy with 2-4 ranks, and two of them at once oversubscribe the cores
with ranks that spin while they wait for each other.

Where the time goes: `LBSOLVER_COMPILE_LOG=FILE make test` appends a line per compilation of a
second or more, in pytest's workers and in every process a test starts (tests/compile_log).
Measured 2026-12-06 (904 tests, pytest 26:49 on 2 cores): compilations took 1,812 of the
workers' 3,320 s, 1,149 s of it in child processes (solver runs, MPI ranks). Hence the suite
compiles fast by default, in its workers (below) and in the runs it starts (FAST_COMPILE in
their XLA_FLAGS, tests/solver_cli.py and tests/mpi.py), and tests/shared_runs.py makes a
reference run once for the tests on both workers to compare against.
"""

import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_OWN_CACHE = None  # the cache directory this process made (removed when the session ends)
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE = tempfile.mkdtemp(prefix="lbsolver-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# MPI ranks the tests start (mpirun, srun, the benches' launchers) yield their core while they
# wait instead of spinning: 2-4 ranks share 2 cores with the other pytest worker, and a rank
# spinning in a receive takes the core from the one still compiling the program it waits for
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")

import jax  # noqa: E402
import pytest  # noqa: E402
from jax._src import compiler as jax_compiler  # noqa: E402
from solver_cli import FAST_CODEGEN  # noqa: E402

jax.config.update("jax_enable_x64", True)


def pytest_unconfigure(config: pytest.Config) -> None:
    # the controller made the directory (the workers inherit it, _OWN_CACHE None there); with
    # every program stored it holds some 100 MB after a full run
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slurm") is not None or "mpi" in item.name.lower():
            item.add_marker(pytest.mark.xdist_group("processes"))


# Opt-in: LBSOLVER_COMPILE_LOG=FILE appends one line per XLA compilation of a second or more
# made in this process (the test, the function, seconds), to find tests that compile the same
# program twice (a persistent-cache miss) or compile more than they need to.
_COMPILE_LOG = os.environ.get("LBSOLVER_COMPILE_LOG")
_current_test = ["(collection)"]

if _COMPILE_LOG:
    import sys

    _site = sys.modules.get("sitecustomize")
    if getattr(_site, "_LOG", None):
        # a pytest-xdist worker, started with tests/compile_log on its path: that listener
        # logs this process's compilations too, as the test's own
        _site.label = ""
    else:
        from jax import monitoring

        def _log_compile(event: str, seconds: float, **kwargs) -> None:
            if event == "/jax/core/compile/backend_compile_duration" and seconds >= 1.0:
                with open(_COMPILE_LOG, "a") as log:
                    log.write(f"{_current_test[0]}\t{kwargs.get('fun_name')}\t{seconds:.1f}\n")

        monitoring.register_event_duration_secs_listener(_log_compile)

    # Child processes (solver runs, MPI ranks, Slurm jobs) log through tests/compile_log.
    _children = os.path.join(os.path.dirname(__file__), "compile_log")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_children, os.environ.get("PYTHONPATH")) if p
    )


# Every test's own compilations skip LLVM's optimisations and take XLA:CPU's older fusion
# emitter without FMA instructions (FAST_CODEGEN, as FAST_COMPILE does for the solver runs and
# MPI ranks the tests start, tests/solver_cli.py): a D3Q19 chunk compiles in half the time or
# less, and compiling is most of a test's time. What a test asserts (equality of two runs
# compiled alike, conservation, an order of convergence, an error bound) is a property of the
# XLA program, the same however its code is generated; only FMA contraction differs, and
# without FMA a split run rounds as the whole one does. Tests marked production_compile keep
# the production level (an FMA bound, a property of the optimised code); so do the runs of
# `make validate` and `make bench`. JAX's in-memory caches do not know these options, so they
# are cleared where they change: a program compiled for one kind of test is never run by the
# other (the persistent cache keys on them). Measured 2026-12-07, the nine tests that compiled
# most in the workers, alone and alternated: 134 -> 95 s.
# (Set in the setup hook, before any fixture of the test, module fixtures included, is made.)
# Only on CPUs: where make gpu-check runs the kernels' tests on a GPU (JAX_PLATFORMS=cuda,cpu),
# they compile as the solver does there.
_FAST_DEFAULT = os.environ["JAX_PLATFORMS"] == "cpu"
_fast_compile = [_FAST_DEFAULT]
jax.config.update("jax_disable_most_optimizations", _FAST_DEFAULT)
_compile_options = jax_compiler.get_compile_options


def _with_fast_codegen(*args, **kwargs):
    """JAX's compile options, plus FAST_CODEGEN unless a production_compile test runs (JAX has no
    global setting for an XLA option: jax.jit(compiler_options=) is per function)."""
    options = _compile_options(*args, **kwargs)
    if _fast_compile[0]:
        options.env_option_overrides += list(FAST_CODEGEN.items())
    return options


jax_compiler.get_compile_options = _with_fast_codegen


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    fast = _FAST_DEFAULT and item.get_closest_marker("production_compile") is None
    if fast != _fast_compile[0]:
        jax.clear_caches()
        jax.config.update("jax_disable_most_optimizations", fast)
        _fast_compile[0] = fast
    _current_test[0] = item.nodeid
    if _COMPILE_LOG:
        os.environ["LBSOLVER_CURRENT_TEST"] = item.nodeid
