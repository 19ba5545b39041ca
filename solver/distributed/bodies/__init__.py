"""One rigid-body scene split over a device mesh (spatial decomposition).

Each subdomain owns the bodies whose centres lie in its block of the box, receives ghost copies
of the bodies near its faces, and hands bodies over when they cross; buffers have fixed sizes and
every overflow is reported with its subdomain and buffer. See docs/body_decomposition.md.

Public API: ``plan_layout`` (check a mesh, fix buffer sizes), ``simulate_spatial`` (run), and
for a run loop ``device_mesh``, ``place``, ``compile_initial``, ``compile_chunk``,
``overflow_table``, ``overflow_message``, ``gather``, ``host_array``; for checkpoints
``raw_state``/``place_raw`` (bitwise, same mesh) and ``canonical_state``/``place_canonical``
(any mesh).
"""

from solver.distributed.bodies.layout import BodyLayout, plan_layout
from solver.distributed.bodies.run import (
    BodyOverflowError,
    SpatialResult,
    compile_chunk,
    compile_initial,
    device_mesh,
    gather,
    host_array,
    overflow_message,
    overflow_table,
    place,
    simulate_spatial,
)
from solver.distributed.bodies.snapshot import (
    canonical_state,
    place_canonical,
    place_raw,
    raw_state,
)
from solver.distributed.bodies.step import SpatialDiagnostics

__all__ = [
    "BodyLayout",
    "BodyOverflowError",
    "SpatialDiagnostics",
    "SpatialResult",
    "canonical_state",
    "compile_chunk",
    "compile_initial",
    "device_mesh",
    "gather",
    "host_array",
    "overflow_message",
    "overflow_table",
    "place",
    "place_canonical",
    "place_raw",
    "plan_layout",
    "raw_state",
    "simulate_spatial",
]
