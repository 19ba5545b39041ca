"""The checkpoint directory: Orbax saves and restores, a size manifest, damage detection.

Layout of ``checkpoint.dir``::

    <step>/state/            the state pytree (global arrays; every process writes its blocks)
    <step>/host/             host-side arrays (the force history), written by process 0
    <step>/meta/metadata     JSON: step, simulated time, config, versions, mesh, digests
    <step>/manifest.json     written by process 0 after the step is committed: every file's size

Orbax writes a step into a temporary directory and renames it when every process has
finished, so a save interrupted mid-write never shows up as a step. The manifest is written
after that; a step without one (the process died between the rename and the manifest) is
treated as incomplete and never loaded. At restore a step is checked against its manifest
(a missing or truncated file is named in the warning), then restored, then its content digest
is compared with the one saved; any failure falls back to the previous step.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("solver")

MANIFEST = "manifest.json"
FORMAT_VERSION = 1


@dataclass
class SaveRecord:
    """One save: when it started, how long the run waited, when it was seen complete."""

    step: int
    started: float
    blocking_s: float
    total_s: float | None = None
    bytes: int = 0

    @property
    def gb_per_s(self) -> float | None:
        if not self.total_s or not self.bytes:
            return None
        return self.bytes / self.total_s / 1e9

    def as_dict(self) -> dict:
        return {
            "step": self.step,
            "blocking_s": self.blocking_s,
            "total_s": self.total_s,
            "bytes": self.bytes,
            "gb_per_s": self.gb_per_s,
        }


class DamagedCheckpointError(RuntimeError):
    """A step that exists but cannot be trusted; the message names it and the reason."""


def _ocp():
    import orbax.checkpoint as ocp

    return ocp


def _is_empty(leaf) -> bool:
    return int(np.prod(leaf.shape)) == 0


def _hollow(tree):
    """``tree`` with its zero-size leaves (a body state's contact history when there are no
    planes) replaced by None: Orbax refuses to save them, and they hold no data."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef.unflatten([None if _is_empty(leaf) else leaf for leaf in leaves])


def _refill(restored, targets):
    """``restored`` (from ``_hollow(targets)``) with the zero-size leaves back, as the targets
    describe them (shape, dtype, sharding)."""
    import jax
    import jax.numpy as jnp

    leaves, treedef = jax.tree_util.tree_flatten(targets)
    got = jax.tree_util.tree_flatten(restored, is_leaf=lambda x: x is None)[0]
    if len(got) != len(leaves):
        raise ValueError(f"restored {len(got)} leaves for {len(leaves)} targets")
    out = []
    for target, value in zip(leaves, got, strict=True):
        if _is_empty(target):
            sharding = getattr(target, "sharding", None)
            empty = jnp.zeros(target.shape, target.dtype)
            value = empty if sharding is None else jax.device_put(empty, sharding)
        out.append(value)
    return treedef.unflatten(out)


def multiprocessing_options() -> object:
    """Orbax's options naming every process of the run as active (the defaults for one).

    Orbax (0.12) waits at its main-thread barriers with ``jax.experimental.multihost_utils.
    sync_global_devices``, an all-reduce over every device (NCCL between GPUs), unless the
    processes are named: then it waits at the ``jax.distributed`` coordination service's
    key-value barrier (as its background save thread always does). Naming them keeps NCCL out
    of checkpoints under ``domain.halo=mpi``, where the halos need no NCCL either."""
    import jax

    ocp = _ocp()
    if jax.process_count() == 1:
        return ocp.options.MultiprocessingOptions()
    return ocp.options.MultiprocessingOptions(active_processes=set(range(jax.process_count())))


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


class CheckpointStore:
    """Orbax ``CheckpointManager`` over one directory, plus the manifest rules above.

    Every process of a run constructs one and calls ``save``/``restore`` together; process 0
    (``is_root``) writes manifests and checks them.

    Args:
        directory: the checkpoint directory (created if missing).
        keep: newest steps kept.
        async_save: return from ``save`` once the arrays are off the devices.
        file_size: target bytes per OCDBT data file (see ``striping.ocdbt_file_size``).
        is_root: this is process 0.
        compress: zstd-compress the state's chunks.
        read_only: only restore (another run's directory): no saves, no clean-up.
    """

    def __init__(
        self,
        directory: Path,
        keep: int,
        async_save: bool,
        file_size: int,
        is_root: bool,
        compress: bool = False,
        read_only: bool = False,
    ) -> None:
        ocp = _ocp()
        self.directory = Path(directory).absolute()
        self.is_root = is_root
        self.file_size = file_size
        self.async_save = async_save
        if not read_only:  # every process, before Orbax looks (idempotent)
            self.directory.mkdir(parents=True, exist_ok=True)
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep,
                enable_async_checkpointing=async_save,
                # another run's directory (resume=PATH) may be saving right now: leave it alone
                cleanup_tmp_directories=not read_only,
                create=False,  # made above: Orbax refuses ``create`` with active_processes
                read_only=read_only,
                multiprocessing_options=multiprocessing_options(),
            ),
            item_handlers={
                # zstd takes ~6x the CPU time of an uncompressed save for ~25% fewer bytes of
                # float fields; on a busy node that CPU time comes out of the step rate
                "state": ocp.PyTreeCheckpointHandler(use_compression=compress),
                "host": ocp.PyTreeCheckpointHandler(),
                "meta": ocp.JsonCheckpointHandler(),
            },
        )
        self.pending: SaveRecord | None = None
        self.records: list[SaveRecord] = []

    # ------------------------------------------------------------------ saving

    def steps(self) -> list[int]:
        """Steps present (committed by Orbax), oldest first."""
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def save(self, step: int, state, host: dict[str, np.ndarray], meta: dict) -> SaveRecord:
        """Start saving ``step`` (waits for the previous save first). ``state`` holds global
        arrays; ``host`` numpy arrays; ``meta`` JSON data."""
        ocp = _ocp()
        self.poll(wait=True)
        t0 = time.perf_counter()
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.PyTreeSave(
                    _hollow(state), ocdbt_target_data_file_size=self.file_size
                ),
                host=ocp.args.PyTreeSave(host),
                meta=ocp.args.JsonSave({**meta, "format": FORMAT_VERSION, "step": step}),
            ),
            force=True,
        )
        record = SaveRecord(step, t0, time.perf_counter() - t0)
        self.pending = record
        self.records.append(record)
        if not self.async_save:
            self.poll(wait=True)
        return record

    def poll(self, wait: bool = False) -> SaveRecord | None:
        """Complete the pending save if it has finished (or wait for it): write its manifest.
        Returns the record completed now, if any."""
        record = self.pending
        if record is None:
            return None
        if wait:
            self.manager.wait_until_finished()
        elif self.manager.is_saving_in_progress():
            return None
        self.pending = None
        record.total_s = time.perf_counter() - record.started
        self.manager.check_for_errors()
        if self.is_root:
            record.bytes = self._write_manifest(record.step)
        return record

    def _write_manifest(self, step: int) -> int:
        step_dir = self.directory / str(step)
        files = {
            str(f.relative_to(step_dir)): f.stat().st_size
            for f in sorted(step_dir.rglob("*"))
            if f.is_file() and f.name != MANIFEST
        }
        total = sum(files.values())
        tmp = step_dir / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps({"step": step, "bytes": total, "files": files}, indent=1))
        with open(tmp) as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, step_dir / MANIFEST)
        return total

    def close(self) -> None:
        self.poll(wait=True)
        self.manager.close()

    # ------------------------------------------------------------------ checking and restoring

    def check(self, step: int) -> tuple[str | None, int]:
        """Problem with ``step`` against its manifest (None if sound) and its size in bytes."""
        step_dir = self.directory / str(step)
        manifest = step_dir / MANIFEST
        if not manifest.is_file():
            return f"checkpoint {step_dir} is incomplete (no {MANIFEST}: its save never ended)", 0
        try:
            files = json.loads(manifest.read_text())["files"]
        except (ValueError, KeyError, OSError) as err:
            return f"checkpoint {step_dir} has an unreadable {MANIFEST} ({err})", 0
        for name, size in files.items():
            path = step_dir / name
            if not path.is_file():
                return f"checkpoint {step_dir} is damaged: {path} is missing", 0
            actual = path.stat().st_size
            if actual != size:
                return (
                    f"checkpoint {step_dir} is damaged: {path} has {actual} bytes, "
                    f"{size} were written"
                ), 0
        return None, sum(files.values())

    def set_aside(self, step: int) -> Path:
        """Move a rejected step out of the way (process 0 only) into ``rejected/``, where it
        is kept for inspection, so that the resumed run can save that step again."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = self.directory / "rejected" / f"{step}_{stamp}"
        target.parent.mkdir(exist_ok=True)
        os.replace(self.directory / str(step), target)
        return target

    def read_meta(self, step: int) -> dict:
        path = self.directory / str(step) / "meta" / "metadata"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise DamagedCheckpointError(
                f"checkpoint {self.directory / str(step)} has unreadable metadata ({err})"
            ) from None

    def restore(self, step: int, targets) -> tuple[object, dict[str, np.ndarray]]:
        """The state (into abstract ``targets``: shapes, dtypes, shardings) and host arrays
        of ``step``. Raises ``DamagedCheckpointError`` when Orbax cannot read it."""
        ocp = _ocp()
        try:
            hollow = _hollow(targets)
            out = self.manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.PyTreeRestore(
                        hollow, restore_args=ocp.checkpoint_utils.construct_restore_args(hollow)
                    ),
                    host=ocp.args.PyTreeRestore(),
                ),
            )
            state = _refill(out["state"], targets)
        except Exception as err:  # any read failure makes the step unusable; the caller falls back
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DamagedCheckpointError(
                f"checkpoint {self.directory / str(step)} could not be read: {first}"
            ) from err
        host = {k: np.asarray(v) for k, v in (out["host"] or {}).items()}
        return state, host
