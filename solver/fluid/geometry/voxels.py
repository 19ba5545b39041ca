"""A closed triangle mesh on the lattice: solid nodes and the link fractions of curved walls.

Coordinates are lattice index units: node (i, j, k) sits at the integer point (i, j, k) (a case
maps its physical coordinates with x_index = (x - origin) / dx - 1/2). All NumPy, vectorised over
triangles (``solver.fluid.geometry.raster``); no Python loop over triangles or nodes.

Solid nodes (``solid_mask``). Rays along z through every column (i, j) of nodes; each crossing
of the surface at height z_c adds its sign (+1 entering, -1 leaving an outward-oriented
surface) to the winding number of every node above it, k > z_c. A node is solid where the
winding number is 1 and fluid where it is 0 (the parity of the crossings below it, but signed,
so that it also checks the mesh). Any other value means overlapping shells, a self-intersection
or an inverted part; that is reported (``MeshError``) with the number of such nodes. Cost: one
scan-conversion of the mesh plus a cumulative sum over the grid. The crossings are kept sorted
by column (``solver.fluid.geometry.columns.ColumnCrossings``), so that the same mask can be
built on any box alone, bit for bit.

Link fractions (``mesh_link_fractions``). For a fluid node x whose neighbour x + c_i is solid,
Bouzidi's rule needs q in (0, 1] with x + q c_i on the wall (Bouzidi, Firdaouss & Lallemand 2001,
Phys. Fluids 13, 3452). Each lattice line along c_i is one ray: choose the last axis a with
c_a != 0 (c oriented so that c_a = +1) and shear the other coordinates, u_b = x_b - c_b x_a. The
lattice stays integer in (u, x_a) and every line x + t c_i becomes the column at fixed u, with
x_a = x_a(node) + t. One scan-conversion of the sheared mesh per pair of opposite directions
(q/2 passes: 9 for D3Q19, 13 for D3Q27) gives every crossing of every lattice line; the crossing
at x_a = z_c lies on the link between the nodes at k = floor(z_c) and k + 1 of that line, at
t = z_c - k from the lower one and 1 - t from the upper one. A link with several crossings
(a feature thinner than a cell) keeps the nearest one. The fractions are the exact intersections
with the triangles, so they are as accurate as the mesh itself: against the surface it
approximates they err by the mesh's chordal deviation, h^2 / (8 R) for edges of length h on a
radius R, and the boundary stays second order where that is below the lattice's own error.

A crossing exactly at a node ends both links that meet there. A fluid-to-solid link that no
crossing reaches only touches the surface: its solid node lies exactly on the surface (as on
the edges of a box whose faces pass through nodes, which the half-open rules count as solid on
one side) or within rounding of it. It keeps q = 1/2 and is counted (``Links.missing``).

``mesh_links`` is the same pass without whole-grid masks: each link's two ends are classified by
a callback (point queries on ``ColumnCrossings``), so a process that builds only its block never
holds a mask of the whole grid; the links are a sparse list, O(surface).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solver.fluid.geometry.columns import ColumnCrossings
from solver.fluid.geometry.raster import pierce

MIN_FRACTION = 1e-6  # a wall through the fluid node itself: q = 0 is raised to this


@dataclass(frozen=True)
class Links:
    """Link fractions of the links from fluid nodes into a solid, sparse.

    Attributes:
        node: (n,) int64 flat index (C order over the grid) of the fluid node x.
        direction: (n,) int64 lattice direction i (x + c_i is solid).
        fraction: (n,) float64 q in (0, 1]: the wall sits at x + q c_i.
        missing: fluid-to-solid links with no crossing found (they keep q = 1/2).
    """

    node: np.ndarray
    direction: np.ndarray
    fraction: np.ndarray
    missing: int = 0

    def __len__(self) -> int:
        return len(self.node)

    def dense(self, q: int, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
        """(q, *shape) array with the fractions on the links and 1/2 everywhere else (the
        layout of ``FluidSetup.wall_distance``)."""
        out = np.full((q, int(np.prod(shape))), 0.5, dtype=dtype)
        out[self.direction, self.node] = self.fraction
        return out.reshape((q,) + tuple(shape))


def solid_mask(vertices: np.ndarray, faces: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """Nodes inside a closed, outward-oriented triangle mesh.

    Args:
        vertices: (v, 3) index coordinates.
        faces: (t, 3) vertex indices, counter-clockwise seen from outside.
        shape: grid shape (nx, ny, nz).
    Returns:
        (nx, ny, nz) bool, True inside.
    Raises:
        MeshError: nodes with a winding number other than 0 or 1 (self-intersection,
            overlapping shells, an inverted part), with their count and the first of them.
    """
    columns = ColumnCrossings(vertices, faces, shape)
    return columns.solid(tuple(slice(0, int(n)) for n in shape))


def mesh_link_fractions(
    vertices: np.ndarray,
    faces: np.ndarray,
    velocities: np.ndarray,
    solid: np.ndarray,
    fluid: np.ndarray | None = None,
) -> Links:
    """Link fractions of every link from a fluid node into ``solid``, cast against the mesh.

    Args:
        vertices: (v, 3) index coordinates; faces: (t, 3) vertex indices.
        velocities: (q, 3) integer lattice velocities c_i (entries in {-1, 0, 1}).
        solid: (nx, ny, nz) bool, the nodes inside this mesh (``solid_mask``).
        fluid: (nx, ny, nz) bool, the nodes that are fluid (default ~solid); a link from a node
            that is neither (another solid) is skipped.
    Returns:
        the links and their fractions (see ``Links``).
    """
    fluid = ~solid if fluid is None else fluid

    def classify(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        where = tuple(nodes.T)
        return solid[where], fluid[where]

    links = mesh_links(vertices, faces, velocities, solid.shape, classify)
    expected = count_links(velocities, solid, fluid)
    return Links(links.node, links.direction, links.fraction, missing=expected - len(links))


def mesh_links(
    vertices: np.ndarray,
    faces: np.ndarray,
    velocities: np.ndarray,
    shape: tuple[int, int, int],
    classify: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> Links:
    """``mesh_link_fractions`` without whole-grid masks: ``classify(nodes)`` gives (solid,
    fluid), (m,) bool each, at the nodes (m, 3) that the lattice lines cross the mesh between
    (e.g. ``ColumnCrossings.solid_at``). Memory O(links), not O(grid). ``missing`` is 0 (it
    needs the count of every fluid-to-solid link: ``count_links``)."""
    c = np.asarray(velocities, dtype=np.int64)
    index = {tuple(v): i for i, v in enumerate(c.tolist())}
    triangles = np.asarray(vertices, dtype=np.float64)[faces]  # (t, 3, 3), gathered once
    found = []
    for i, ci in enumerate(c):
        if not ci.any():
            continue
        a = int(np.flatnonzero(ci)[-1])
        if ci[a] != 1:  # the partner of a direction with c_a = +1: done with it
            continue
        opposite = index[tuple((-ci).tolist())]
        found.append(_pass(triangles, ci, a, i, opposite, tuple(shape), classify))
    node = np.concatenate([f[0] for f in found]) if found else np.zeros(0, np.int64)
    direction = np.concatenate([f[1] for f in found]) if found else np.zeros(0, np.int64)
    fraction = np.concatenate([f[2] for f in found]) if found else np.zeros(0)
    # a link crossed more than once keeps its nearest crossing
    key = node * len(c) + direction
    order = np.lexsort((fraction, key))
    first = np.ones(len(order), dtype=bool)
    first[1:] = key[order][1:] != key[order][:-1]
    keep = order[first]
    return Links(node[keep], direction[keep], fraction[keep])


def _pass(
    triangles: np.ndarray,
    c: np.ndarray,
    a: int,
    plus: int,
    minus: int,
    shape: tuple[int, int, int],
    classify: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node, direction, fraction) of the links along +c (index ``plus``) and -c (``minus``)
    from one scan-conversion of ``triangles`` (t, 3, 3) sheared along axis ``a``."""
    b = [axis for axis in range(3) if axis != a]
    # the sheared frame: columns u_b = x_b - c_b x_a, rays along x_a
    along = triangles[:, :, a]
    sheared = np.empty_like(triangles)
    sheared[:, :, 0] = triangles[:, :, b[0]] - c[b[0]] * along
    sheared[:, :, 1] = triangles[:, :, b[1]] - c[b[1]] * along
    sheared[:, :, 2] = along
    low, high = [], []
    for axis in b:
        reach = c[axis] * (shape[a] - 1)  # u_b = x_b - c_b x_a over the grid
        low.append(int(min(0, -reach)))
        high.append(int(shape[axis] - 1 + max(0, -reach)))
    crossings = pierce(sheared, tuple(low), tuple(high))
    k = np.floor(crossings.position).astype(np.int64)
    t = crossings.position - k
    column = crossings.column
    # a crossing exactly at a node ends the link below it too (t = 1 on k - 1 -> k)
    on_node = np.flatnonzero(t == 0.0)
    k = np.concatenate([k, k[on_node] - 1])
    t = np.concatenate([t, np.ones(len(on_node))])
    column = np.concatenate([column, column[on_node]])
    lower = np.empty((len(k), 3), dtype=np.int64)
    lower[:, a] = k
    for col, axis in enumerate(b):
        lower[:, axis] = column[:, col] + c[axis] * k
    upper = lower + c
    inside = np.ones(len(k), dtype=bool)
    for axis in range(3):
        for node in (lower[:, axis], upper[:, axis]):
            inside &= (node >= 0) & (node < shape[axis])
    lower, upper, t = lower[inside], upper[inside], t[inside]
    lo = np.ravel_multi_index(lower.T, shape)
    up = np.ravel_multi_index(upper.T, shape)
    solid_lo, fluid_lo = classify(lower)
    solid_up, fluid_up = classify(upper)
    forward = fluid_lo & solid_up  # the link lower -> upper (+c) enters the solid
    backward = fluid_up & solid_lo  # upper -> lower (-c)
    node = np.concatenate([lo[forward], up[backward]])
    direction = np.concatenate(
        [np.full(int(forward.sum()), plus), np.full(int(backward.sum()), minus)]
    ).astype(np.int64)
    fraction = np.maximum(np.concatenate([t[forward], 1.0 - t[backward]]), MIN_FRACTION)
    return node, direction, fraction


def count_links(velocities: np.ndarray, solid: np.ndarray, fluid: np.ndarray) -> int:
    """Number of links from a ``fluid`` node x to a ``solid`` node x + c_i (no wrap-around)."""
    total = 0
    for ci in np.asarray(velocities, dtype=np.int64):
        if not ci.any():
            continue
        src = tuple(slice(max(0, -v), n - max(0, v)) for v, n in zip(ci, solid.shape, strict=True))
        dst = tuple(slice(max(0, v), n - max(0, -v)) for v, n in zip(ci, solid.shape, strict=True))
        total += int(np.count_nonzero(fluid[src] & solid[dst]))
    return total
