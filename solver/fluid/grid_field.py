"""Grid fields computed on demand for any box of cells: each process builds only its block.

A ``GridField`` is a field over the grid, (*lead, *grid), given by a function that computes it
on a box of cells. A process of a distributed run asks it only for its own blocks
(``Distribution.put``: its block under ``mpi``, each addressable shard's index under ``xla``, as
``jax.make_array_from_callback`` asks), a slab at a time; converting it to an array
(``np.asarray``) evaluates the whole grid once and keeps it, which the single-device path and
the whole-grid consumers do (fields.h5's solid mask and the PNG on process 0, the one-device
kernels, bodies in the fluid, the twin). ``any_cells`` and ``linked_directions`` answer the
boundary plan's global questions slab by slab, without the whole grid in memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

SLAB_CELLS = 1 << 20  # cells per slab when a lazy field is reduced or placed slab by slab

Box = tuple[slice, ...]


def _box_shape(box: Box) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in box)


class GridField(np.lib.mixins.NDArrayOperatorsMixin):
    """A field over the grid, shape (*lead, *grid), computed on demand for any box of cells.

    ``compute(box)`` returns the values on ``box`` (one slice per grid axis, with explicit
    start < stop and step 1) as a C-contiguous array (*lead, *box shape) of ``dtype``. It must
    give on every box exactly the values the whole-grid evaluation has there (elementwise
    formulas on the box's global indices or coordinates; ghost cells where a value depends on
    its neighbours), so that blocks built apart and slices of the whole array are bitwise equal
    (``tests/test_setup_blocks.py``).

    Indexing with basic slices and integers computes only the box asked for (or slices the
    whole array once it exists); any other use (``np.asarray``, NumPy functions and operators,
    ndarray methods such as ``.sum()``) evaluates the whole grid once and keeps it.

    Attributes:
        grid_shape: the grid axes' shape.
        lead: the leading (non-spatial) axes' shape, e.g. (d,) for a velocity.
        shape: lead + grid_shape.
        dtype: the values' dtype.
    """

    def __init__(
        self,
        grid_shape: tuple[int, ...],
        dtype,
        compute: Callable[[Box], np.ndarray],
        lead: tuple[int, ...] = (),
    ) -> None:
        self.grid_shape = tuple(int(n) for n in grid_shape)
        self.lead = tuple(int(n) for n in lead)
        self.shape = self.lead + self.grid_shape
        self.dtype = np.dtype(dtype)
        self._compute = compute
        self._whole: np.ndarray | None = None

    @classmethod
    def constant(
        cls, grid_shape: tuple[int, ...], value: float, dtype=np.float64, lead: tuple = ()
    ) -> GridField:
        """The same value on every cell (``np.full``)."""
        return cls(
            grid_shape,
            dtype,
            lambda box: np.full(tuple(lead) + _box_shape(box), value, dtype=dtype),
            lead,
        )

    def __repr__(self) -> str:
        built = "built" if self._whole is not None else "lazy"
        return f"GridField(shape={self.shape}, dtype={self.dtype}, {built})"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array."""
        return self.size * self.dtype.itemsize

    @property
    def built(self) -> bool:
        """Whether the whole grid has been evaluated (and is kept)."""
        return self._whole is not None

    def full_box(self) -> Box:
        return tuple(slice(0, n) for n in self.grid_shape)

    def box(self, box: Box) -> np.ndarray:
        """The values on ``box`` (one slice per grid axis), (*lead, *box shape)."""
        box = tuple(slice(*s.indices(n)[:2]) for s, n in zip(box, self.grid_shape, strict=True))
        if self._whole is not None:
            return self._whole[(slice(None),) * len(self.lead) + box]
        out = self._compute(box)
        expected = self.lead + _box_shape(box)
        if out.shape != expected or out.dtype != self.dtype:
            raise ValueError(
                f"grid field computed {out.shape} {out.dtype} on {box}, "
                f"expected {expected} {self.dtype}"
            )
        return out

    def whole(self) -> np.ndarray:
        """The whole grid (evaluated once, then kept)."""
        if self._whole is None:
            self._whole = self.box(self.full_box())
        return self._whole

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self.whole()
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(v) if isinstance(v, GridField) else v for v in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getattr__(self, name: str):
        # ndarray methods (.sum(), .copy(), .astype(), ...) on the whole grid
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.whole(), name)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        parsed = self._parse(index)
        if parsed is None:
            return self.whole()[index]
        lead_index, box, drop = parsed
        grid_index = tuple(0 if a in drop else slice(None) for a in range(len(box)))
        return self.box(box)[lead_index + grid_index]

    def _parse(self, index):
        """(index into the lead axes, box over the grid axes, grid axes given by an integer)
        for an index of basic slices (step 1) and integers; None for anything else."""
        index = index if isinstance(index, tuple) else (index,)
        if any(v is Ellipsis for v in index):
            if sum(v is Ellipsis for v in index) > 1:
                return None
            k = index.index(Ellipsis)
            fill = self.ndim - (len(index) - 1)
            index = index[:k] + (slice(None),) * fill + index[k + 1 :]
        if len(index) > self.ndim:
            return None
        index = index + (slice(None),) * (self.ndim - len(index))
        n_lead = len(self.lead)
        lead_index = index[:n_lead]
        if not all(isinstance(v, (slice, int, np.integer)) for v in lead_index):
            return None
        box, drop = [], set()
        for axis, v in enumerate(index[n_lead:]):
            n = self.grid_shape[axis]
            if isinstance(v, slice):
                if v.step not in (None, 1):
                    return None
                start, stop, _ = v.indices(n)
                box.append(slice(start, max(start, stop)))
            elif isinstance(v, (int, np.integer)):
                i = int(v) + n if v < 0 else int(v)
                if not 0 <= i < n:
                    raise IndexError(f"index {v} out of range for axis of size {n}")
                box.append(slice(i, i + 1))
                drop.add(axis)
            else:
                return None
        return tuple(lead_index), tuple(box), drop

    # ------------------------------------------------------------ reductions by slabs

    def slabs(self) -> list[Box]:
        """Boxes of whole planes along axis 0, about SLAB_CELLS cells each, covering the grid."""
        plane = max(1, math.prod(self.grid_shape[1:]) * max(1, math.prod(self.lead)))
        rows = max(1, SLAB_CELLS // plane)
        rest = tuple(slice(0, n) for n in self.grid_shape[1:])
        n0 = self.grid_shape[0]
        return [(slice(a, min(a + rows, n0)),) + rest for a in range(0, n0, rows)]

    def any(self, *args, **kwargs):
        """Whether any value is nonzero (slab by slab unless the whole grid is kept); with
        arguments (``axis=...``) ``ndarray.any`` of the whole grid."""
        if args or kwargs:
            return self.whole().any(*args, **kwargs)
        if self._whole is not None:
            return bool(self._whole.any())
        return any(bool(self.box(b).any()) for b in self.slabs())

    def count_nonzero(self) -> int:
        """Nonzero values (slab by slab unless the whole grid is kept)."""
        if self._whole is not None:
            return int(np.count_nonzero(self._whole))
        return sum(int(np.count_nonzero(self.box(b))) for b in self.slabs())


def any_cells(array) -> bool:
    """Whether any value of a grid field (GridField or array) is nonzero, without building a
    lazy field's whole grid."""
    if isinstance(array, GridField):
        return array.any()
    return bool(np.any(array))


def _rows(array, start: int, stop: int) -> np.ndarray:
    """Rows start..stop-1 along the first grid axis of a grid field, wrapped periodically."""
    n = array.shape[0]
    rest = (slice(None),) * (len(array.shape) - 1)
    parts, k = [], start
    while k < stop:
        i = k % n
        m = min(stop - k, n - i)
        parts.append(np.asarray(array[(slice(i, i + m),) + rest]))
        k += m
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def shifted(array: np.ndarray, shifts, axes, mirror_axes=()) -> np.ndarray:
    """out[x] = array[x - s] for shifts s (-1, 0 or 1) along ``axes``: periodic, or across a
    symmetry plane along ``mirror_axes`` (the node beyond the edge is the edge node's image)."""
    out = array
    for s, a in zip(shifts, axes, strict=True):
        s = int(s)
        if not s:
            continue
        if a in mirror_axes:
            n = out.shape[a]
            out = np.take(out, np.clip(np.arange(n) - s, 0, n - 1), axis=a)
        else:
            out = np.roll(out, s, axis=a)
    return out


def linked_directions(velocities: np.ndarray, mask, solid, mirror_axes=()) -> list[bool]:
    """Which directions i have a fluid node (not in ``solid``) whose upstream node x - c_i
    (periodic, or mirrored along ``mirror_axes``) is in ``mask``. Slab by slab along the first
    axis for a ``GridField`` mask or solid (the result is the same: a global fact every process
    needs before tracing the step)."""
    q = len(velocities)
    if mask is None or not any_cells(mask):
        return [False] * q
    found = [False] * q
    for a, b, upstream in _upstream_slabs(velocities, mask, _slabs(mask, solid), mirror_axes):
        fluid = ~_rows(solid, a, b)
        for i in range(1, q):
            if not found[i]:
                found[i] = bool((upstream(i) & fluid).any())
    return found


def plane_pulls_from(velocities: np.ndarray, solid, axis: int, index: int, mirror_axes=()) -> bool:
    """Whether a fluid node of the grid's plane ``index`` along ``axis`` (0 < index < n - 1)
    pulls some direction out of a solid node (periodic, or mirrored along ``mirror_axes``, on
    the plane's other axes): whether a wall rule changes anything on that plane. Reads three
    planes of a lazy field, never the whole grid."""
    c = np.asarray(velocities)
    d = c.shape[1]
    box = [slice(None)] * d
    box[axis] = slice(index - 1, index + 2)
    ext = np.moveaxis(np.asarray(solid[tuple(box)]), axis, 0)
    others = [a for a in range(d) if a != axis]
    mirrored = [others.index(a) for a in mirror_axes if a != axis]  # axes of a plane
    fluid = ~ext[1]
    for i in range(len(c)):
        up = shifted(ext[1 - int(c[i, axis])], c[i, others], range(d - 1), mirrored)
        if bool((up & fluid).any()):
            return True
    return False


def near_walls(velocities: np.ndarray, solid, block: tuple[int, ...], mirror_axes=()) -> np.ndarray:
    """(block) bool: where, in any block of shape ``block`` tiling the grid, a node is solid or
    pulls some direction out of a solid node (periodic, or mirrored along ``mirror_axes``),
    i.e. every node a wall rule, the rest state in solids or the momentum exchange touches.
    Slab by slab for a ``GridField``."""
    out = np.zeros(block, dtype=bool)
    for a, b, upstream in _upstream_slabs(velocities, solid, _slabs(solid), mirror_axes):
        near = np.zeros((b - a,) + tuple(solid.shape[1:]), dtype=bool)
        for i in range(len(velocities)):
            near |= upstream(i)
        out |= _fold(near, a, block)
    return out


def _slabs(*fields) -> list[tuple[slice, ...]]:
    """The slabs of the first lazy field among ``fields``, else one slab of the whole grid."""
    for field in fields:
        if isinstance(field, GridField):
            return list(field.slabs())
    return [(slice(0, fields[0].shape[0]),)]


def _upstream_slabs(velocities: np.ndarray, mask, slabs, mirror_axes):
    """Per slab of rows a..b-1 along the first axis: (a, b, upstream), where upstream(i) is the
    slab's (b - a, ...) bool array of mask[x - c_i] (periodic, or mirrored along
    ``mirror_axes``), read from the slab and one ghost row on each side."""
    c = np.asarray(velocities)
    d = c.shape[1]
    for box in slabs:
        a, b = box[0].start, box[0].stop
        ext = _rows(mask, a - 1, b + 1)  # ghost rows a - 1 and b

        def upstream(i: int, ext=ext, n=b - a) -> np.ndarray:
            c0 = int(c[i, 0])  # rows x - c0 of the slab: ext rows 1 - c0 ..
            return shifted(ext[1 - c0 : 1 - c0 + n], c[i, 1:], range(1, d), mirror_axes)

        yield a, b, upstream


def _fold(rows: np.ndarray, first: int, block: tuple[int, ...]) -> np.ndarray:
    """OR of a slab of whole rows (global rows first.., every other axis whole) over the blocks
    of shape ``block`` tiling the grid: (block) bool, True where any block is True."""
    n, rest = rows.shape[0], rows.shape[1:]
    split = [n]
    for size, b in zip(rest, block[1:], strict=True):
        split += [size // b, b]
    folded = rows.reshape(split).any(axis=tuple(range(1, 2 * len(rest), 2)))
    out = np.zeros(block, dtype=bool)
    np.logical_or.at(out, (np.arange(first, first + n) % block[0],), folded)
    return out


def covering_boxes(mask: np.ndarray) -> list[tuple[slice, ...]]:
    """Boxes that together hold every True cell of ``mask``: the bounding box, split at every
    empty plane along any axis and shrunk again, recursively (a wall row and a cylinder become
    three boxes, not the whole grid)."""
    d = mask.ndim

    def split(box: tuple[slice, ...]) -> list[tuple[slice, ...]]:
        sub = mask[box]
        if not sub.any():
            return []
        used = [
            np.flatnonzero(sub.any(axis=tuple(b for b in range(d) if b != a))) for a in range(d)
        ]
        box = tuple(
            slice(s.start + int(u[0]), s.start + int(u[-1]) + 1)
            for s, u in zip(box, used, strict=True)
        )
        for a, u in enumerate(used):
            gaps = np.flatnonzero(np.diff(u) > 1)
            if len(gaps):
                out = []
                for run in np.split(u - u[0], gaps + 1):
                    part = list(box)
                    part[a] = slice(box[a].start + int(run[0]), box[a].start + int(run[-1]) + 1)
                    out += split(tuple(part))
                return out
        return [box]

    return split(tuple(slice(0, n) for n in mask.shape))


def merged_boxes(boxes: list[tuple[slice, ...]], most: int) -> list[tuple[slice, ...]]:
    """At most ``most`` boxes covering ``boxes``: the pair whose joint bounding box adds the
    fewest cells is merged until few enough remain."""

    def volume(box):
        return math.prod(s.stop - s.start for s in box)

    def join(p, r):
        return tuple(
            slice(min(a.start, b.start), max(a.stop, b.stop)) for a, b in zip(p, r, strict=True)
        )

    boxes = list(boxes)
    while len(boxes) > most:
        _, i, j = min(
            (volume(join(boxes[i], boxes[j])) - volume(boxes[i]) - volume(boxes[j]), i, j)
            for i in range(len(boxes))
            for j in range(i + 1, len(boxes))
        )
        boxes[i] = join(boxes[i], boxes[j])
        del boxes[j]
    return boxes
