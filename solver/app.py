"""`python -m solver`: the Hydra application.

Exit codes: 0 done, 2 bad configuration (one line on stderr, no traceback), 3 divergence
(one line on stderr; output written so far stays intact, run.json has status "diverged"),
4 neighbour-search buffer overflow in a rigid-body case (one line naming the cell or body and the
capacity; output so far stays intact, run.json has status "overflow"), 75 stopped by
SIGTERM/SIGUSR1/SIGUSR2 after writing a checkpoint (run.json has status "preempted"; run the
same command with the same run directory to continue), 76 stopped by a signal with checkpoints
off (status "stopped"; nothing to resume).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
EXIT_CONFIG = 2
EXIT_DIVERGED = 3
EXIT_OVERFLOW = 4
EXIT_PREEMPTED = 75  # = solver.checkpoint.preemption.EXIT_PREEMPTED (not imported: JAX-free)
EXIT_STOPPED = 76  # stopped by a signal with checkpoints off: nothing to resume


def run_precision(config) -> str:
    """The floating-point precision a run computes in: rigid bodies always in float64 (the
    fluid settings are ignored there), the fluid as ``fluid.precision``."""
    if getattr(config.case, "kind", "fluid") == "bodies":
        return "float64"
    return config.fluid.precision


def enable_precision(precision: str) -> None:
    """float64 needs JAX's x64 mode; switched on here, at the edge, and only when asked for."""
    if precision == "float64":
        import jax

        jax.config.update("jax_enable_x64", True)


def fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def one_line(err: BaseException) -> str:
    """Hydra's multi-line messages (e.g. the list of available options) as one line."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    # Hydra appends the config search path: noise for a user
    cut = next((i for i, line in enumerate(lines) if line.startswith("Config search path")), None)
    lines = lines[:cut]
    if not lines:
        return type(err).__name__
    head, rest = lines[0], lines[1:]
    for i, line in enumerate(rest):
        if line.rstrip().endswith(":"):
            return "; ".join([head] + rest[:i] + [f"{line} {', '.join(rest[i + 1 :])}"])
    return "; ".join(lines)


def _run_task(cfg: DictConfig) -> None:
    """The job: one run of the composed config (Hydra has set up its directory and logging)."""
    from hydra.core.hydra_config import HydraConfig

    from solver.config import load
    from solver.errors import ConfigError

    output_dir = Path(HydraConfig.get().runtime.output_dir)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no TPU/GPU probe noise
    logging.getLogger("absl").setLevel(logging.WARNING)  # Orbax's per-save progress records
    try:
        config = load(cfg)
        enable_precision(run_precision(config))
        from solver.errors import BodyOverflowError, DivergenceError, PreemptedError

        if config.twin is not None:
            from solver.twin.run import run_twin

            outcome = run_twin(config, output_dir)
        else:
            from solver.run import simulate

            outcome = simulate(config, output_dir)
    except ConfigError as err:
        fail(f"bad configuration: {err}", EXIT_CONFIG)
    except DivergenceError as err:
        fail(f"{err} (output so far in {output_dir})", EXIT_DIVERGED)
    except BodyOverflowError as err:
        fail(f"{err} (output so far in {output_dir})", EXIT_OVERFLOW)
    except PreemptedError as err:
        # not an error: the run did what it was asked
        hint = "; rerun with the same run dir to continue" if err.resumable else ""
        print(f"{err}{hint}", file=sys.stderr, flush=True)
        if err.shutdown:  # a service's normal end
            sys.exit(0)
        sys.exit(EXIT_PREEMPTED if err.resumable else EXIT_STOPPED)
    if outcome.is_root:  # process 0 of a multi-process run, or the only one
        lines = outcome.model.summary_lines(outcome.summary)
        if config.twin is not None:
            from solver.twin.run import summary_lines as twin_lines

            lines += twin_lines(outcome.summary)
        print("\n".join(lines), flush=True)


# Hydra's own command line, for runs with flags (--help, --cfg, -m for sweeps, ...)
_hydra_main = hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(
    _run_task
)


def main() -> None:
    overrides = sys.argv[1:]
    # flags (--help, --cfg, -m, ...) are Hydra's own business: hydra.main handles them
    if any(arg.startswith("-") for arg in overrides):
        _hydra_main()
    else:
        run_overrides(overrides)


def run_overrides(overrides: list[str]) -> None:
    """A plain run (no flags): what ``hydra.main`` does for it, with the config composed once.

    ``hydra.main`` composes the config twice (once to look for a multirun mode, once for the
    run), and a composition error there prints several lines and exits with 1; composing once
    here, as Hydra's own ``Hydra.run`` does, reports such an error in one line with exit code 2
    and saves two of the three compositions a run made before (0.7 s of every run's start on a
    slow 2-core machine). The run directory, ``.hydra/``, the logging set-up and the callbacks
    are Hydra's own (``hydra.core.utils.run_job``). Hydra is pinned below 1.4 (pyproject.toml):
    ``Hydra.create_main_hydra2`` and ``Callbacks`` are its internals.
    """
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job
    from hydra.types import HydraContext, RunMode

    search_path = create_automatic_config_search_path(__file__, None, str(CONFIG_DIR))
    app = Hydra.create_main_hydra2(task_name="solver", config_search_path=search_path)
    try:
        try:
            cfg = app.compose_config(
                config_name="config",
                overrides=[*overrides, "hydra.mode=RUN"],  # as hydra.main adds it
                run_mode=RunMode.RUN,
                with_log_configuration=True,
            )
        except Exception as err:  # any composition failure is a configuration error here
            fail(f"bad configuration: {one_line(err)}", EXIT_CONFIG)
        message = run_dir_error(overrides)
        if message is not None:
            fail(f"bad configuration: {message}", EXIT_CONFIG)
        callbacks = Callbacks(cfg)
        callbacks.on_run_start(config=cfg, config_name="config")
        job = run_job(
            hydra_context=HydraContext(config_loader=app.config_loader, callbacks=callbacks),
            task_function=_run_task,
            config=cfg,
            job_dir_key="hydra.run.dir",
            job_subdir_key=None,
        )
        callbacks.on_run_end(config=cfg, config_name="config", job_return=job)
        _ = job.return_value  # re-raises what the task raised (a bug: user errors exit above)
    finally:
        GlobalHydra.instance().clear()


def run_dir_error(overrides: list[str]) -> str | None:
    """A ``hydra.run.dir`` given on the command line that cannot be written, as one line (Hydra
    itself would create it before any of the app runs and fail with a traceback)."""
    from solver.errors import ConfigError
    from solver.output.directory import check_directory

    for arg in overrides:
        if arg.startswith("hydra.run.dir="):
            try:
                check_directory("hydra.run.dir", arg.split("=", 1)[1])
            except ConfigError as err:
                return str(err)
    return None
