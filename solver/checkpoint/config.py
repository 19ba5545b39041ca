"""Validates the ``checkpoint`` section (when and where to save, resume, Lustre striping)."""

from __future__ import annotations

from dataclasses import dataclass

from solver.checkpoint.striping import parse_size
from solver.errors import ConfigError
from solver.sections import Section


@dataclass(frozen=True)
class CheckpointConfig:
    enabled: bool
    every_steps: int | None  # save when the step count is a multiple of it
    every_minutes: float | None  # save at the first chunk end this long after the last save
    keep: int  # newest checkpoints kept
    dir: str | None  # None: <run dir>/checkpoints
    async_save: bool
    resume: str  # "auto" | "never" | a path
    final: bool  # save the last state too
    stripe_count: int | None  # Lustre stripes per file (-1: all targets); None: keep default
    stripe_size: int | None  # bytes per Lustre stripe; None: keep default
    file_size: int  # target bytes per Orbax data file
    compress: bool = False  # zstd on the state's chunks

    @classmethod
    def disabled(cls) -> CheckpointConfig:
        return cls(False, None, None, 1, None, True, "never", False, None, None, 1 << 30)


def parse_checkpoint(s: Section) -> CheckpointConfig:
    """The typed ``checkpoint`` section."""

    def size(name: str, allow_none: bool) -> int | None:
        value = s.raw(name)
        if value is None and allow_none:
            return None
        try:
            return parse_size(value)
        except (TypeError, ValueError):
            raise ConfigError(
                s.key(name), value, "a size in bytes, e.g. 1048576, 4M or 1G"
            ) from None

    stripe_count = s.raw("stripe_count")
    if stripe_count is not None and (
        isinstance(stripe_count, bool)
        or not isinstance(stripe_count, int)
        or not (stripe_count == -1 or stripe_count >= 1)
    ):
        raise ConfigError(
            s.key("stripe_count"), stripe_count, "an integer >= 1, -1 (all targets) or null"
        )
    resume = s.raw("resume")
    if not isinstance(resume, str) or not resume.strip():
        raise ConfigError(s.key("resume"), resume, "auto | never | a checkpoint path")
    directory = s.raw("dir")
    if directory is not None and (not isinstance(directory, str) or not directory.strip()):
        raise ConfigError(s.key("dir"), directory, "a directory path or null (the run dir)")
    return CheckpointConfig(
        enabled=s.boolean("enabled"),
        every_steps=s.integer("every_steps", allow_none=True),
        every_minutes=s.number("every_minutes", low=0.0, allow_none=True),
        keep=s.integer("keep"),
        dir=directory,
        async_save=s.boolean("async_save"),
        resume=resume,
        final=s.boolean("final"),
        stripe_count=stripe_count,
        stripe_size=size("stripe_size", allow_none=True),
        file_size=size("file_size", allow_none=False),
        compress=s.boolean("compress"),
    )
