"""Opt-in compile log for the test suite's child processes (solver runs, MPI ranks, Slurm jobs).

tests/conftest.py puts this directory first on PYTHONPATH when LBSOLVER_COMPILE_LOG is set, so
every Python started by a test imports it at start-up and appends one line per XLA compilation
of a second or more: the test that started it (LBSOLVER_CURRENT_TEST), the process's command,
the function and the seconds. Persistent-cache hits are not compilations and are not logged,
so a program that appears twice is a miss. At its exit each child also appends a line
"process" with its wall time from start-up (imports included) and the count and seconds of all
its compilations, however short: the count and cost of the processes the tests start.
"""

import atexit
import os
import sys
import time

_STARTED = time.perf_counter()

_LOG = os.environ.get("LBSOLVER_COMPILE_LOG")

if _LOG:
    try:
        from jax import monitoring
    except ImportError:  # a child that is not the project's Python (no JAX): nothing to log
        monitoring = None

    if monitoring is not None:
        _command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))
        # "child" for processes a test started; tests/conftest.py clears it in pytest's own
        # workers, whose compilations are the tests' own
        label = "child"

        _compiled = [0, 0.0]  # this process's compilations: count, seconds (all, however short)

        def _log_compile(event: str, seconds: float, **kwargs) -> None:
            if event == "/jax/core/compile/backend_compile_duration":
                _compiled[0] += 1
                _compiled[1] += seconds
            if event == "/jax/core/compile/backend_compile_duration" and seconds >= 1.0:
                test = os.environ.get("LBSOLVER_CURRENT_TEST", "?")
                name = kwargs.get("fun_name")
                level = "O0" if "optimization_level=0" in os.environ.get("XLA_FLAGS", "") else ""
                with open(_LOG, "a") as log:
                    where = f"{label}{level}: {_command[:200]}" if label else level
                    log.write(f"{test}\t{name}\t{seconds:.1f}\t{where}\n")

        monitoring.register_event_duration_secs_listener(_log_compile)

        def _log_process() -> None:
            if not label:  # a pytest worker: its time is the tests' durations
                return
            test = os.environ.get("LBSOLVER_CURRENT_TEST", "?")
            seconds = time.perf_counter() - _STARTED
            with open(_LOG, "a") as log:
                log.write(f"{test}\tprocess\t{seconds:.1f}\t{label}: {_command[:200]}"
                          f"\t{_compiled[0]} compilations, {_compiled[1]:.1f} s\n")  # fmt: skip

        atexit.register(_log_process)
