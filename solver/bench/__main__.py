"""`python -m solver.bench [NAME] [options]`, NAME one of fluid, scaling, bodies, twin, twin_stall,
checkpoint, coupled, geometry, gpu-check, setup_memory, wall_boxes.

Without a benchmark name the fluid benchmark runs (MLUPS per lattice and precision against the
measured memory-copy roofline); each name is one module of this package.
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = (
    "fluid",
    "scaling",
    "bodies",
    "twin",
    "twin_stall",
    "checkpoint",
    "coupled",
    "geometry",
    "gpu-check",
    "setup_memory",
    "wall_boxes",
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name = argv[0] if argv[:1] and argv[0] in BENCHMARKS else "fluid"
    rest = argv[1:] if argv[:1] == [name] else argv
    return importlib.import_module(f"solver.bench.{name.replace('-', '_')}").main(rest)


if __name__ == "__main__":
    sys.exit(main())
