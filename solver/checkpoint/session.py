"""Checkpoints of one run: where they go, when to save, resuming, and what run.json reports.

The run loop calls, in order: ``resume`` (once, before the first chunk), ``boundary`` (to end
chunks on ``every_steps`` multiples), at every chunk end ``decide`` (a save is due or a stop
signal came; every process calls it, so the decision is agreed over processes) and then
``save`` if so (``after_chunk`` does both), ``finish``.
Everything here happens between chunks.
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import json
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from solver.checkpoint.config import CheckpointConfig
from solver.checkpoint.digest import state_digest
from solver.checkpoint.store import CheckpointStore, DamagedCheckpointError
from solver.checkpoint.striping import ocdbt_file_size, prepare_directory
from solver.distributed.distribution import Distribution
from solver.errors import ConfigError
from solver.output.directory import ALLOWED, directory_problem

log = logging.getLogger("solver")

# Keys a resumed fluid run shares with its checkpoint (a model's ``identity``; other models name
# their own); other differences are reported only.
COMPATIBLE_KEYS = ("case", "lattice", "shape", "precision")


@dataclass
class Resumed:
    """A restored run: its step, state (laid out for this run), host arrays and where from."""

    step: int
    state: object
    host: dict[str, np.ndarray]
    meta: dict
    path: Path
    seconds: float
    bytes: int

    def as_dict(self) -> dict:
        return {
            "step": self.step,
            "path": str(self.path),
            "restore_s": self.seconds,
            "bytes": self.bytes,
            "gb_per_s": self.bytes / self.seconds / 1e9 if self.seconds > 0 else None,
            "saved_on": self.meta.get("domain"),
        }


@functools.cache
def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "orbax-checkpoint", "numpy", "lbsolver"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _flatten(data, prefix: str = "") -> dict:
    if not isinstance(data, dict):
        return {prefix: data}
    out = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_differences(
    saved: dict, current: dict, sections=("case", "fluid", "bodies")
) -> list[str]:
    """``key: saved -> current`` for every differing key under ``sections``."""
    a, b = _flatten(saved), _flatten(current)
    keys = sorted(k for k in set(a) | set(b) if k.split(".")[0] in sections)
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


class RunCheckpoints:
    """Checkpoint policy and bookkeeping of one run.

    Args:
        config: the ``checkpoint`` section.
        run_dir: the run's output directory (default home of the checkpoints).
        dist: the run's distribution (processes, layouts, agreement).
        identity: what a resumed run must match (``COMPATIBLE_KEYS``).
        resolved: the whole resolved config (stored, and compared on resume).
        view: the state as the checkpoint holds it, from the state the run loop carries
            (asked for only when a save happens; default: the state itself).
    """

    def __init__(
        self,
        config: CheckpointConfig,
        run_dir: Path,
        dist: Distribution,
        identity: dict,
        resolved: dict,
        view=None,
    ) -> None:
        self.config = config
        self.view = view if view is not None else (lambda state: state)
        self.dist = dist
        self.identity = identity
        self.resolved = resolved
        self.directory = Path(config.dir if config.dir else Path(run_dir) / "checkpoints")
        self.directory = self.directory.absolute()
        self.store: CheckpointStore | None = None
        self.last_save_time = time.perf_counter()
        self.last_saved_step: int | None = None
        self.resumed: Resumed | None = None
        self.striping: str | None = None
        if config.enabled:
            self._open()

    # ------------------------------------------------------------------ set-up

    def _open(self) -> None:
        config = self.config
        file_size = ocdbt_file_size(config.stripe_size, config.stripe_count, config.file_size)
        # made and probed on process 0 before anything is allocated; every process raises
        problem = directory_problem(self.directory) if self.dist.is_root else None
        problem = self.dist.runtime.broadcast_text(problem or "") or None
        if problem is not None:
            raise ConfigError(
                "checkpoint.dir",
                str(config.dir) if config.dir else str(self.directory),
                ALLOWED,
                hint=problem
                + ("" if config.dir else " (the default, <run dir>/checkpoints)")
                + "; or checkpoint=none",
            )
        if self.dist.is_root:
            result = prepare_directory(self.directory, config.stripe_count, config.stripe_size)
            self.striping = result.message
            log.info("checkpoints: %s", result.message)
        self.dist.any_process([False])  # nobody writes before the stripe layout is set
        self.store = CheckpointStore(
            self.directory,
            config.keep,
            config.async_save,
            file_size,
            self.dist.is_root,
            config.compress,
        )

    # ------------------------------------------------------------------ resuming

    def _source(self) -> tuple[CheckpointStore | None, list[int] | None]:
        """The store to resume from and the steps to consider (None: all of its steps)."""
        resume = self.config.resume
        if resume == "never":
            if self.store is not None and self.store.steps():
                raise ConfigError(
                    "checkpoint.resume",
                    "never",
                    f"auto, or a checkpoint.dir without checkpoints ({self.directory} holds "
                    f"steps {self.store.steps()})",
                    hint="starting over there would mix two runs' checkpoints",
                )
            return None, None
        if resume == "auto":
            return self.store, None
        path = Path(resume).absolute()
        if (path / "_CHECKPOINT_METADATA").is_file() and path.name.isdigit():
            return self._reader(path.parent), [int(path.name)]
        if not path.is_dir():
            raise ConfigError(
                "checkpoint.resume", resume, "auto | never | an existing checkpoint directory"
            )
        return self._reader(path), None

    def _reader(self, directory: Path) -> CheckpointStore:
        return CheckpointStore(
            directory, 1_000_000, False, 1 << 30, self.dist.is_root, read_only=True
        )

    def resume(self, template, total: int) -> Resumed | None:
        """The newest sound checkpoint restored onto this run's layout, or None (start at 0).

        ``template``: this run's initial state (shapes, dtypes; as this process holds it).

        Raises:
            ConfigError: no usable checkpoint under an explicit path, an incompatible one
                (mismatches listed), or one beyond ``total`` steps.
        """
        store, only = self._source()
        if store is None:
            return None
        steps = only if only is not None else store.steps()
        steps = json.loads(self.dist.runtime.broadcast_text(json.dumps(steps)))
        if not steps:
            if self.config.resume != "auto":
                raise ConfigError(
                    "checkpoint.resume", self.config.resume, "a directory with checkpoints"
                )
            log.info("checkpoints: none in %s, starting at step 0", store.directory)
            return None
        targets = self.dist.restore_targets(template)
        rejected: list[int] = []
        for step in sorted(steps, reverse=True):
            t0 = time.perf_counter()
            problem, size = store.check(step) if self.dist.is_root else (None, 0)
            problem = self.dist.runtime.broadcast_text(problem or "") or None
            meta = None
            if problem is None:
                try:
                    meta = store.read_meta(step)
                except DamagedCheckpointError as err:
                    problem = str(err)
            if problem is None:
                self._check_compatible(meta, store.directory / str(step), total)
                problem = self._try_restore(store, step, targets, meta)
            if problem is not None:
                log.warning("%s; trying the previous one", problem)
                rejected.append(step)
                continue
            self._set_aside(store, rejected)
            state, host = self._restored
            seconds = time.perf_counter() - t0
            size = int(self.dist.runtime.broadcast_text(str(size)))
            self.resumed = Resumed(
                step, state, host, meta, store.directory / str(step), seconds, size
            )
            log.info(
                "resumed from %s (step %d, saved on mesh %s): %.3g GB in %.2f s (%.3g GB/s)",
                self.resumed.path,
                step,
                (meta.get("domain") or {}).get("mesh"),
                size / 1e9,
                seconds,
                size / seconds / 1e9 if seconds > 0 else float("nan"),
            )
            self.last_saved_step = step if store is self.store else None
            return self.resumed
        if self.config.resume != "auto":
            raise ConfigError(
                "checkpoint.resume",
                self.config.resume,
                "a directory with a sound checkpoint",
                hint="every checkpoint in it is incomplete or damaged (see the warnings)",
            )
        log.warning("checkpoints: no sound checkpoint in %s, starting at step 0", store.directory)
        self._set_aside(store, rejected)
        return None

    def _set_aside(self, store: CheckpointStore, steps: list[int]) -> None:
        """Rejected steps of this run's own directory move to ``rejected/`` (the resumed run
        will write those steps again); those of a ``resume=PATH`` are left alone."""
        if store is not self.store or not steps:
            return
        if self.dist.is_root:
            for step in steps:
                log.warning("checkpoint step %d moved to %s", step, store.set_aside(step))
        self.dist.any_process([False])  # everyone sees the moved steps before saving
        store.manager.reload()

    def _try_restore(self, store: CheckpointStore, step: int, targets, meta: dict) -> str | None:
        """Restore on every process; the problem (agreed over processes) or None."""
        problem = None
        try:
            state, host = store.restore(step, targets)
            state = self.dist.local_view(state)
            if self._digest(state) != list(meta.get("digest", [])):
                problem = (
                    f"checkpoint {store.directory / str(step)} is damaged: its content does not "
                    "match the digest saved with it"
                )
        except DamagedCheckpointError as err:
            problem = str(err)
        (failed,) = self.dist.any_process([problem is not None])
        if failed:
            return problem or f"checkpoint {store.directory / str(step)} failed on another process"
        self._restored = (state, host)
        return None

    def _check_compatible(self, meta: dict, path: Path, total: int) -> None:
        saved = meta.get("identity", {})
        keys = list(self.identity) + [k for k in saved if k not in self.identity]
        mismatches = [
            f"{key} {saved.get(key)} in the checkpoint, {self.identity.get(key)} now"
            for key in keys
            if saved.get(key) != self.identity.get(key)
        ]
        if mismatches:
            same = (
                "case, lattice, grid and precision"
                if set(keys) == set(COMPATIBLE_KEYS)
                else ", ".join(keys)
            )
            raise ConfigError(
                "checkpoint.resume",
                str(path),
                f"a checkpoint of the same {same}",
                hint="; ".join(mismatches)
                + " (use another run dir, checkpoint.dir, or checkpoint.resume=never)",
            )
        if meta["step"] > total:
            raise ConfigError(
                "steps", total, f">= {meta['step']} (the checkpoint {path} is at that step)"
            )
        differences = config_differences(meta.get("config", {}), self.resolved)
        if differences:
            log.warning(
                "resuming with a changed config (%s); the result will differ from an "
                "uninterrupted run",
                "; ".join(differences),
            )

    # ------------------------------------------------------------------ saving

    def _digest(self, state) -> list[int]:
        leaves = jax.tree.leaves(state)
        offsets, shapes, replicated = [], [], []
        for leaf in leaves:
            offset = self.dist.block_offset(leaf.shape)
            replicated.append(offset is None)
            offsets.append(offset or (0,) * leaf.ndim)
            shapes.append(self.dist.restore_targets(leaf).shape)
        digests = state_digest(state, offsets, shapes)
        if self.dist.backend == "mpi" and not self.dist.is_root:
            digests = [0 if rep else d for d, rep in zip(digests, replicated, strict=True)]
        return [d % (1 << 32) for d in self.dist.sum_blocks(digests)]

    def boundary(self, done: int) -> int | None:
        """The next step after ``done`` where a chunk must end for a step-interval save."""
        every = self.config.every_steps if self.store is not None else None
        return None if every is None else (done // every + 1) * every

    def decide(self, done: int, total: int, stop: bool) -> tuple[bool, bool]:
        """(save, stop) at the chunk end ``done``: a save is due (``every_steps``,
        ``every_minutes``) or a stop was requested (``stop``) on any process. Every process
        calls it at every chunk end, so the answer is agreed over processes."""
        if self.store is not None:
            self._report(self.store.poll())
        due_steps = (
            self.store is not None
            and self.config.every_steps is not None
            and done % self.config.every_steps == 0
            and done < total
        )
        due_time = (
            self.store is not None
            and self.dist.is_root
            and self.config.every_minutes is not None
            and time.perf_counter() - self.last_save_time >= 60.0 * self.config.every_minutes
            and done < total
        )
        stop, due_time = self.dist.any_process([stop, due_time])
        return self.store is not None and (due_steps or due_time or stop), stop

    def after_chunk(self, done: int, total: int, state, extras, stop: bool) -> bool:
        """Save if due (or if a stop was requested on any process); True if the run must stop.

        ``state`` as this process holds it; ``extras()`` gives (host arrays, JSON metadata)
        of this step, asked for only when a save happens.
        """
        save, stop = self.decide(done, total, stop)
        if save:
            self.save(done, state, extras, wait=stop)
        return stop

    def save(self, step: int, state, extras, wait: bool = False) -> None:
        """Save ``step`` (see ``after_chunk``); with ``wait``, until it is on disk."""
        if self.store is None or step == self.last_saved_step:
            return
        state = self.view(state)
        host, meta = extras()
        full_meta = {
            **meta,
            "identity": self.identity,
            "config": self.resolved,
            "versions": _versions(),
            "domain": self.dist.describe(),
            "digest": self._digest(state),
            "written_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        record = self.store.save(step, self.dist.global_view(state), host, full_meta)
        log.info(
            "checkpoint: step %d %s (the run waited %.3f s)",
            step,
            "saving in the background" if self.config.async_save else "saved",
            record.blocking_s,
        )
        self.last_save_time = time.perf_counter()
        self.last_saved_step = step
        if wait or not self.config.async_save:
            self._report(self.store.poll(wait=True))

    def _report(self, record) -> None:
        if record is None or not self.dist.is_root:
            return
        log.info(
            "checkpoint: step %d written to %s: %.3g GB in %.2f s (%.3g GB/s)",
            record.step,
            self.directory / str(record.step),
            record.bytes / 1e9,
            record.total_s,
            record.gb_per_s or float("nan"),
        )

    def finish(self, step: int, state, extras) -> None:
        """Final save (if ``checkpoint.final``) and wait for every save to be on disk."""
        if self.store is None:
            return
        if self.config.final:
            self.save(step, state, extras, wait=True)
        self._report(self.store.poll(wait=True))
        self.store.close()

    def close(self) -> None:
        """Wait for a pending save (after an error, before the process exits)."""
        if self.store is not None:
            self._report(self.store.poll(wait=True))

    def summary(self) -> dict:
        """The ``checkpoint`` section of run.json."""
        records = self.store.records if self.store is not None else []
        done = [r for r in records if r.total_s is not None]
        return {
            "enabled": self.store is not None,
            "dir": str(self.directory) if self.store is not None else None,
            "striping": self.striping,
            "saves": [r.as_dict() for r in done],
            "save_count": len(done),
            "save_blocking_s_total": sum(r.blocking_s for r in done),
            "resumed_from": self.resumed.as_dict() if self.resumed else None,
        }
