"""Validates the ``output`` section (field files, PNG snapshots, log interval)."""

from __future__ import annotations

from dataclasses import dataclass

from solver.sections import Section

PNG_FIELDS = ("auto", "speed", "vorticity")


@dataclass(frozen=True)
class OutputConfig:
    every: int | None  # steps between field outputs; None: about 10 per run
    fields: bool
    png: bool
    png_field: str
    log_interval: float  # s of wall time between log lines off a terminal
    # the largest grid (cells) whose final fields are gathered onto process 0 at the end
    gather_cells: int = 1 << 27


def parse_output(s: Section) -> OutputConfig:
    """The typed ``output`` section."""
    return OutputConfig(
        every=s.integer("every", allow_none=True),
        fields=s.boolean("fields"),
        png=s.boolean("png"),
        png_field=s.choice("png_field", PNG_FIELDS),
        log_interval=s.number("log_interval", low=0.0),
        gather_cells=s.integer("gather_cells", low=1) if "gather_cells" in s.data else 1 << 27,
    )
