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


def enable_precision(precision: str) -> None:
    """float64 needs JAX's x64 mode; switched on here, at the edge, and only when asked for."""
    if precision == "float64":
        import jax

        jax.config.update("jax_enable_x64", True)


def fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def compose_error(overrides: list[str]) -> str | None:
    """Compose the config with Hydra's compose API; the first line of any error, else None.

    Hydra's own handling of a composition error (e.g. ``case=nope``) prints several lines and
    exits with 1; composing first lets the app report it in one line with exit code 2.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except Exception as err:  # any composition failure is a configuration error here
        return one_line(err)
    finally:
        GlobalHydra.instance().clear()
    return None


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


def summary_lines(summary: dict) -> list[str]:
    """The short end-of-run summary."""
    lines = [
        f"case {summary['case']} on {summary['lattice']} {summary['collision'].upper()} "
        f"({summary['precision']}), grid {' x '.join(str(n) for n in summary['shape'])}",
        f"tau = {summary['tau']:.4f}   Mach = {summary['mach']:.3f}   "
        f"Re = {summary['reynolds']:.4g}",
        f"steps = {summary['steps']}   simulated time = {summary['time_s']:.4g} s   "
        f"wall time = {summary['wall_time_s']:.1f} s   {summary['mlups']:.1f} MLUPS",
    ]
    diag = summary.get("diagnostics") or {}
    keys = (
        "cd_mean",
        "cl_amplitude",
        "strouhal",
        "velocity_l2_error",
        "velocity_l2_error_transient",
        "ux_min_over_u",
        "uy_max_over_u",
    )
    parts = [
        f"{k} = {diag[k]:.4g}" if isinstance(diag.get(k), float) else f"{k} = {diag[k]}"
        for k in keys
        if k in diag
    ]
    if parts:
        lines.append("   ".join(parts))
    for name, path in summary.get("outputs", {}).items():
        lines.append(f"{name:>12}: {path}")
    return lines


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from solver.config import load
    from solver.errors import ConfigError

    output_dir = Path(HydraConfig.get().runtime.output_dir)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no TPU/GPU probe noise
    logging.getLogger("absl").setLevel(logging.WARNING)  # Orbax's per-save progress records
    try:
        config = load(cfg)
        if getattr(config.case, "kind", "fluid") == "bodies":
            outcome = None
        else:
            enable_precision(config.fluid.precision)
            from solver.simulation import DivergenceError, PreemptedError, simulate

            if config.twin is not None:
                from solver.twin.run import run_twin

                outcome = run_twin(config, output_dir)
            else:
                outcome = simulate(config, output_dir)
    except ConfigError as err:
        fail(f"bad configuration: {err}", EXIT_CONFIG)
    except DivergenceError as err:
        fail(f"{err} (output so far in {output_dir})", EXIT_DIVERGED)
    except PreemptedError as err:
        # not an error: the run did what it was asked
        hint = "; rerun with the same run dir to continue" if err.resumable else ""
        print(f"{err}{hint}", file=sys.stderr, flush=True)
        if err.shutdown:  # a service's normal end
            sys.exit(0)
        sys.exit(EXIT_PREEMPTED if err.resumable else EXIT_STOPPED)
    if outcome is None:
        _run_bodies(config, output_dir)
    elif outcome.density is not None:  # process 0 of a multi-process run, or the only one
        lines = summary_lines(outcome.summary)
        if config.twin is not None:
            from solver.twin.run import summary_lines as twin_lines

            lines += twin_lines(outcome.summary)
        print("\n".join(lines), flush=True)


def _run_bodies(config, output_dir: Path) -> None:
    """A rigid-body case (no lattice; the fluid settings are ignored): float64, no checkpoints."""
    from solver.errors import ConfigError

    enable_precision("float64")
    from solver.bodies.simulation import BodyOverflowError, simulate_bodies
    from solver.bodies.simulation import summary_lines as body_summary_lines

    try:
        outcome = simulate_bodies(config, output_dir)
    except ConfigError as err:
        fail(f"bad configuration: {err}", EXIT_CONFIG)
    except BodyOverflowError as err:
        fail(f"{err} (output so far in {output_dir})", EXIT_OVERFLOW)
    print("\n".join(body_summary_lines(outcome.summary)), flush=True)


def main() -> None:
    overrides = sys.argv[1:]
    # flags (--help, --cfg, -m, ...) are Hydra's own business; check plain overrides only
    if not any(arg.startswith("-") for arg in overrides):
        message = compose_error(overrides)
        if message is not None:
            fail(f"bad configuration: {message}", EXIT_CONFIG)
    _hydra_main()
