"""A body's global facts from its masks on boxes, slab by slab over its bounding box.

A process that builds only its block of a body's solid mask still needs a few facts about the
whole body before anything is traced: how many nodes it covers, its frontal area (the nodes of
its projection along the flow, axis 0) and how many fluid-to-solid links it has (to count the
links no crossing reached). ``body_facts`` reads the masks on slabs of the body's bounding box
widened by one node (a node with a solid neighbour lies there), each with one ghost node on
every side: memory O(slab), never the whole grid, and exactly the whole-grid numbers
(``count_nonzero``, ``any(axis=0)``, ``voxels.count_links``), since the slabs partition that box.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SLAB_CELLS = 1 << 22  # cells per slab (with its ghost layers: bounds the temporaries)

Box = tuple[slice, ...]


@dataclass(frozen=True)
class BodyFacts:
    """What the whole body is, from its masks on slabs.

    Attributes:
        nodes: solid nodes of the body.
        frontal_cells: nodes of its projection on the plane of axes 1 and 2.
        links: links from a fluid node x to a body node x + c_i (no wrap-around), as
            ``voxels.count_links``.
    """

    nodes: int
    frontal_cells: int
    links: int


def _widened(box: Box, shape: tuple[int, ...], by: int = 1) -> Box:
    return tuple(
        slice(max(0, s.start - by), min(n, s.stop + by)) for s, n in zip(box, shape, strict=True)
    )


def body_facts(
    solid: Callable[[Box], np.ndarray],
    fluid: Callable[[Box], np.ndarray],
    bounds: Box,
    shape: tuple[int, int, int],
    velocities: np.ndarray,
    slab_cells: int = SLAB_CELLS,
) -> BodyFacts:
    """The body's facts from ``solid(box)`` and ``fluid(box)`` ((box shape) bool each, the
    body's nodes and the fluid nodes) read on slabs along axis 0 of ``bounds`` (a box holding
    every body node) widened by one node."""
    region = _widened(bounds, shape)
    if any(s.start >= s.stop for s in region):
        return BodyFacts(0, 0, 0)
    c = np.asarray(velocities, dtype=np.int64)
    rows_region, rest = region[0], region[1:]
    plane = (rest[0].stop - rest[0].start + 2) * (rest[1].stop - rest[1].start + 2)
    rows = max(1, slab_cells // plane)
    projection = np.zeros(tuple(s.stop - s.start for s in rest), dtype=bool)
    nodes = links = 0
    for a in range(rows_region.start, rows_region.stop, rows):
        core = (slice(a, min(a + rows, rows_region.stop)),) + rest
        ghost = _widened(core, shape)
        body, wet = solid(ghost), fluid(ghost)
        # the core in the ghost box's local coordinates
        local = [(s.start - g.start, s.stop - g.start) for s, g in zip(core, ghost, strict=True)]
        inner = body[tuple(slice(lo, hi) for lo, hi in local)]
        nodes += int(np.count_nonzero(inner))
        projection |= inner.any(axis=0)
        for ci in c:
            if not ci.any():
                continue
            # x in the core with x + c_i in the ghost box (outside it: outside the grid)
            src, dst = [], []
            for (lo, hi), v, n in zip(local, ci, body.shape, strict=True):
                lo, hi = max(lo, -v), min(hi, n - v)
                src.append(slice(lo, max(lo, hi)))
                dst.append(slice(lo + v, max(lo, hi) + v))
            links += int(np.count_nonzero(wet[tuple(src)] & body[tuple(dst)]))
    return BodyFacts(nodes, int(np.count_nonzero(projection)), links)
