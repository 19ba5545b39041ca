"""Where rays along one axis pierce a triangle mesh: the scan-conversion both voxelisers share.

The rays are the lines through integer points (i, j) of a plane, running along the third axis;
in the voxeliser they are the columns of lattice nodes, in the link-fraction pass the sheared
columns of one lattice direction (``solver.fluid.geometry.voxels``). Every triangle is projected
onto the plane, the integer points inside its projection are enumerated from its bounding box
(all triangles at once, in batches: no Python loop over triangles), and for each such point the
crossing coordinate along the ray is interpolated with barycentric weights.

Exactly-once coverage. A point on an edge shared by two triangles, or on a shared vertex, must
be claimed by exactly one of the triangles that face the same way, or a ray through it would
count the surface twice or not at all. Two rules make that exact in floating point, as in a GPU
rasteriser (Pineda 1988, "A parallel algorithm for polygon rasterization", SIGGRAPH '88; the
"top-left" fill convention):
- each edge function is evaluated from the edge's endpoints in a canonical (lexicographic)
  order, so the two triangles that share an edge compute bitwise-opposite values there;
- a point with an edge function exactly zero belongs to the triangle for which the edge, walked
  counter-clockwise, points down (d_y < 0) or right along a horizontal edge (d_y = 0, d_x > 0);
  of d and -d exactly one qualifies.
Projections are made counter-clockwise before the test; the original orientation gives the
crossing's sign (+1 where an outward-oriented surface is entered along +axis, -1 where it is
left). Triangles whose projection has zero area (parallel to the rays) are skipped: their
neighbours cover the points they touch.

Coordinates are whatever units the caller uses; the rays sit at integer coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# candidates (point, triangle) tested per batch: bounds the temporaries (~100 B each)
BATCH_CANDIDATES = 1 << 22


@dataclass(frozen=True)
class Crossings:
    """Where rays pierce the surface.

    Attributes:
        column: (n, 2) int64 integer ray coordinates (i, j) in the plane.
        position: (n,) float64 coordinate along the ray axis of the crossing.
        sign: (n,) int8, +1 entering (the surface faces -axis there), -1 leaving.
        triangle: (n,) int64 index of the pierced triangle.
    """

    column: np.ndarray
    position: np.ndarray
    sign: np.ndarray
    triangle: np.ndarray

    def __len__(self) -> int:
        return len(self.position)


def pierce(
    triangles: np.ndarray,
    low: tuple[int, int],
    high: tuple[int, int],
    batch: int = BATCH_CANDIDATES,
) -> Crossings:
    """Every (ray, triangle) crossing for the rays along axis 2 through the integer points
    (i, j) with low <= (i, j) <= high (inclusive).

    Args:
        triangles: (t, 3, 3) vertex coordinates; axis 1 is the vertex, axis 2 the coordinate
            (0 and 1 span the plane of the rays, 2 runs along them).
        low, high: inclusive integer bounds of the rays' (i, j).
        batch: candidates per batch (memory bound only; the result does not depend on it).
    Returns:
        the crossings, in no particular order.
    """
    tri = np.asarray(triangles, dtype=np.float64)
    x0, x1, x2 = (np.ascontiguousarray(tri[:, k, 0]) for k in range(3))
    y0, y1, y2 = (np.ascontiguousarray(tri[:, k, 1]) for k in range(3))
    area = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
    # bounding boxes of the projections in integer ray coordinates, clipped to the plane
    # (elementwise min/max of three columns: much faster than reductions over a short axis)
    i0 = np.maximum(np.ceil(np.minimum(np.minimum(x0, x1), x2)), low[0]).astype(np.int64)
    i1 = np.minimum(np.floor(np.maximum(np.maximum(x0, x1), x2)), high[0]).astype(np.int64)
    j0 = np.maximum(np.ceil(np.minimum(np.minimum(y0, y1), y2)), low[1]).astype(np.int64)
    j1 = np.minimum(np.floor(np.maximum(np.maximum(y0, y1), y2)), high[1]).astype(np.int64)
    ni, nj = np.maximum(i1 - i0 + 1, 0), np.maximum(j1 - j0 + 1, 0)
    count = ni * nj
    keep = np.flatnonzero((count > 0) & (area != 0.0))
    if len(keep) == 0:
        return _empty()
    # counter-clockwise projections: swap vertices 1 and 2 of the clockwise ones
    ccw = tri[keep].copy()
    clockwise = area[keep] < 0
    ccw[clockwise, 1], ccw[clockwise, 2] = tri[keep][clockwise, 2], tri[keep][clockwise, 1]
    sign = np.where(clockwise, 1, -1).astype(np.int8)
    edges = _edges(ccw)
    count, i0, j0, nj = count[keep], i0[keep], j0[keep], nj[keep]
    bounds = np.cumsum(count)
    starts = np.concatenate(([0], bounds[:-1]))
    parts = []
    first = 0
    while first < len(keep):
        # triangles [first, last) hold at most `batch` candidates (at least one triangle)
        last = max(first + 1, int(np.searchsorted(bounds, starts[first] + batch, side="right")))
        parts.append(_batch(slice(first, last), keep, ccw, edges, sign, i0, j0, nj, count))
        first = last
    return Crossings(*(np.concatenate([p[k] for p in parts]) for k in range(4)))


def _empty() -> Crossings:
    return Crossings(
        np.zeros((0, 2), np.int64), np.zeros(0), np.zeros(0, np.int8), np.zeros(0, np.int64)
    )


def _edges(ccw: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per triangle and edge k (from vertex k to k + 1, counter-clockwise): the canonical start
    point (t, 3, 2), canonical direction (t, 3, 2), the flip (t, 3) that turns the canonical
    edge function into the counter-clockwise one, and whether a zero edge function belongs to
    the triangle (t, 3) (the top-left rule)."""
    p = ccw[:, :, :2]
    start, end = p, np.roll(p, -1, axis=1)
    d = end - start
    # lexicographic order of the endpoints decides the canonical direction
    forward = (start[..., 0] < end[..., 0]) | (
        (start[..., 0] == end[..., 0]) & (start[..., 1] < end[..., 1])
    )
    origin = np.where(forward[..., None], start, end)
    direction = np.where(forward[..., None], d, -d)
    flip = np.where(forward, 1.0, -1.0)
    owns_zero = (d[..., 1] < 0) | ((d[..., 1] == 0) & (d[..., 0] > 0))
    return origin, direction, flip, owns_zero


def _batch(
    part: slice,
    keep: np.ndarray,
    ccw: np.ndarray,
    edges: tuple[np.ndarray, ...],
    sign: np.ndarray,
    i0: np.ndarray,
    j0: np.ndarray,
    nj: np.ndarray,
    count: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """The crossings (column, position, sign, triangle) of the kept triangles ``part``:
    ``keep`` maps them to the input's indices, ``ccw`` (k, 3, 3) their counter-clockwise
    vertices, ``edges`` their edge data (``_edges``), ``i0``, ``j0`` the low corners and ``nj``
    the widths of their bounding boxes in rays, ``count`` the rays in each box."""
    origin, direction, flip, owns_zero = (e[part] for e in edges)
    n = count[part]
    local_tri = np.repeat(np.arange(len(n)), n)
    offset = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    width = nj[part][local_tri]
    pi = (i0[part][local_tri] + offset // width).astype(np.float64)
    pj = (j0[part][local_tri] + offset % width).astype(np.float64)
    inside = np.ones(len(pi), dtype=bool)
    w = []
    for k in range(3):
        o, dv = origin[local_tri, k], direction[local_tri, k]
        wk = flip[local_tri, k] * (dv[:, 0] * (pj - o[:, 1]) - dv[:, 1] * (pi - o[:, 0]))
        inside &= (wk > 0) | ((wk == 0) & owns_zero[local_tri, k])
        w.append(wk)
    hit = np.flatnonzero(inside)
    tri = local_tri[hit]
    z = ccw[part][:, :, 2][tri]
    # barycentric weight of vertex k: the edge function of the opposite edge (k+1 -> k+2)
    w0, w1, w2 = w[1][hit], w[2][hit], w[0][hit]
    position = (w0 * z[:, 0] + w1 * z[:, 1] + w2 * z[:, 2]) / (w0 + w1 + w2)
    column = np.stack([pi[hit], pj[hit]], axis=1).astype(np.int64)
    global_tri = keep[part][tri]
    return column, position, sign[part][tri], global_tri
