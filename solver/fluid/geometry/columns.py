"""A mesh's crossings of every z column of nodes, kept sorted: its solid nodes on any box.

``solid_mask`` (solver.fluid.geometry.voxels) needs, for the nodes of column (i, j), only the
crossings of the ray through (i, j): node k is solid where the signed crossings below it,
``above = clip(floor(z_c) + 1, 0, nz) <= k``, sum to 1. ``ColumnCrossings`` scan-converts the
mesh once over the whole (nx, ny) plane (the same ``pierce`` call as the whole-grid voxeliser,
so the same crossings bit for bit) and keeps the crossings sorted by (i, j, above): O(crossings)
memory, a few per column the body covers, not O(nx ny nz). Then
- ``solid(box)``: the solid nodes on any box, from the crossings of the box's columns alone
  (the crossings below the box's first layer all count at that layer): the whole-grid mask's
  slice there, bit for bit, since winding numbers are sums of integers;
- ``solid_at(nodes)``: the same decision at scattered nodes (binary search per node), what the
  link-fraction pass asks of a link's two ends;
- the self-intersection check of ``solid_mask`` (winding numbers other than 0 or 1, a column
  whose crossings do not sum to 0) on the sorted crossings, with the same count and first node;
- ``node_bounds``: a box that holds every solid node (from the columns with crossings).
"""

from __future__ import annotations

import numpy as np

from solver.fluid.geometry.raster import pierce

Box = tuple[slice, ...]


class MeshError(ValueError):
    """A mesh that cannot be voxelised: open, inconsistently wound, self-intersecting,
    unreadable. The message is one line naming the problem."""


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenated index ranges [starts[m], stops[m]), int64."""
    n = np.maximum(stops - starts, 0)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offset = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
    return np.repeat(starts, n) + offset


class ColumnCrossings:
    """The crossings of a closed, outward-oriented mesh with every z column of a grid.

    Args:
        vertices: (v, 3) index coordinates (node (i, j, k) at the integer point).
        faces: (t, 3) vertex indices, counter-clockwise seen from outside.
        shape: grid shape (nx, ny, nz).
    Raises:
        MeshError: nodes with a winding number other than 0 or 1, or a column whose
            crossings do not cancel (self-intersection, overlapping shells, an inverted part).
    """

    def __init__(self, vertices: np.ndarray, faces: np.ndarray, shape: tuple[int, int, int]):
        self.shape = tuple(int(n) for n in shape)
        n0, n1, n2 = self.shape
        crossings = pierce(np.asarray(vertices, np.float64)[faces], (0, 0), (n0 - 1, n1 - 1))
        above = np.clip(np.floor(crossings.position).astype(np.int64) + 1, 0, n2)
        column = crossings.column[:, 0] * n1 + crossings.column[:, 1]
        key = column * (n2 + 1) + above
        order = np.argsort(key, kind="stable")
        self.key = key[order]  # (m,) sorted (i * ny + j) * (nz + 1) + above
        self.sign = crossings.sign[order].astype(np.int64)
        # winding after each crossing, counted from its column's first crossing
        self._cumulative = np.concatenate(([0], np.cumsum(self.sign)))
        self._check()

    def __len__(self) -> int:
        return len(self.key)

    def _column_start(self, column: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.key, column * (self.shape[2] + 1), side="left")

    def _check(self) -> None:
        """``solid_mask``'s MeshError, from the sorted crossings: the segment from each
        crossing's ``above`` to the next one's in its column (or nz) has the winding number
        after that crossing."""
        n2 = self.shape[2]
        if len(self.key) == 0:
            return
        column, above = np.divmod(self.key, n2 + 1)
        winding = self._cumulative[1:] - self._cumulative[self._column_start(column)]
        last = np.ones(len(column), dtype=bool)
        last[:-1] = column[1:] != column[:-1]
        following = np.where(last, n2, np.roll(above, -1))
        length = following - above
        bad = (winding != 0) & (winding != 1) & (length > 0)
        if bad.any() or (winding[last] != 0).any():
            count = int(length[bad].sum())
            first = None
            if bad.any():
                m = int(np.flatnonzero(bad)[0])
                i, j = divmod(int(column[m]), self.shape[1])
                first = (i, j, int(above[m]))
            raise MeshError(
                f"self-intersecting or overlapping surface: {count} nodes have a winding number "
                f"other than 0 or 1 (first at node {first})"
            )

    def solid(self, box: Box) -> np.ndarray:
        """(box shape) bool, the nodes of ``box`` (three slices, step 1) inside the mesh."""
        (i0, i1), (j0, j1), (k0, k1) = ((s.start, s.stop) for s in box)
        n1, n2 = self.shape[1], self.shape[2]
        bi, bj, bk = i1 - i0, j1 - j0, k1 - k0
        rows = np.arange(i0, i1, dtype=np.int64) * n1
        first = np.searchsorted(self.key, (rows + j0) * (n2 + 1), side="left")
        stop = np.searchsorted(self.key, (rows + j1) * (n2 + 1), side="left")
        pick = _ranges(first, stop)
        column, above = np.divmod(self.key[pick], n2 + 1)
        i, j = np.divmod(column, n1)
        # crossings below the box count at its first layer, those above it nowhere
        local = ((i - i0) * bj + (j - j0)) * (bk + 1) + np.clip(above, k0, k1) - k0
        # int16 sums in place, as solid_mask's (2 bytes per cell of temporaries: the box is
        # a slab of a block, and the crossings few)
        winding = np.zeros((bi, bj, bk + 1), dtype=np.int16)
        np.add.at(winding.reshape(-1), local, self.sign[pick].astype(np.int16))
        np.cumsum(winding, axis=2, dtype=np.int16, out=winding)
        return winding[:, :, :bk] == 1

    def solid_at(self, nodes: np.ndarray) -> np.ndarray:
        """(m,) bool, whether each node of ``nodes`` (m, 3) int (inside the grid) is inside."""
        n1, n2 = self.shape[1], self.shape[2]
        column = nodes[:, 0] * n1 + nodes[:, 1]
        below = np.searchsorted(self.key, column * (n2 + 1) + nodes[:, 2], side="right")
        return self._cumulative[below] - self._cumulative[self._column_start(column)] == 1

    def node_bounds(self) -> Box:
        """A box holding every solid node: the columns with crossings and the layers between
        their lowest and highest crossing (empty when there are none)."""
        if len(self.key) == 0:
            return tuple(slice(0, 0) for _ in self.shape)
        column, above = np.divmod(self.key, self.shape[2] + 1)
        i, j = np.divmod(column, self.shape[1])
        return (
            slice(int(i.min()), int(i.max()) + 1),
            slice(int(j.min()), int(j.max()) + 1),
            slice(int(above.min()), int(above.max())),
        )
