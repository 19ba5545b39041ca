"""Reading lowered JAX modules (StableHLO text with Shardy ops) in tests."""

from __future__ import annotations

import re
from pathlib import Path

ZERO_SIZE = re.compile(r"tensor<([0-9]+x)*0x")


def manual_signatures(text: str) -> list[str]:
    """The lines of a lowered module that give each ``sdy.manual_computation``'s types: its
    opening line (the per-shard block arguments) and its closing line (operands and results)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if "sdy.manual_computation(" not in line:
            continue
        out.append(line)
        indent = " " * (len(line) - len(line.lstrip()))
        closing = (s for s in lines[i + 1 :] if s.startswith(indent + "} : ("))
        out.extend(list(closing)[:1])
    return out


def zero_size(lines: list[str]) -> list[str]:
    """The lines that mention a zero-size tensor type (their first 200 characters)."""
    return [line.strip()[:200] for line in lines if ZERO_SIZE.search(line)]


def dumped_manual_signatures(folder: Path) -> list[str]:
    """``manual_signatures`` of every module that ``JAX_DUMP_IR_TO=folder`` wrote."""
    paths = sorted(folder.glob("*.mlir"))
    return [line for path in paths for line in manual_signatures(path.read_text())]
