"""Ghost-padded population buffers: pull streaming as static slices, ghost filling by a halo.

Inside a chunk every direction i lives in a buffer with one ghost layer on every face,
(nx+2, ny+2[, nz+2]). Pull streaming, f_i(x) = f_i*(x - c_i), is then the static slice
``upstream(buffer_i, c_i)``, which XLA fuses into its consumers (``jnp.roll`` would be
materialised). The ghosts a pull reads are filled from the interior through a ``Halo``: a
periodic wrap on one device, the neighbouring shard's block when sharded, so serial and
parallel runs take the same code path (docs/performance.md, docs/distributed.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from solver.distributed.halo import Halo, SingleHalo, shift_together

SINGLE = SingleHalo()

# (start, size) per axis in interior coordinates
Region = Sequence[tuple[int, int]]
# (axis, plane index) -> q arrays of that boundary plane (the axis of length 1)
Faces = dict[tuple[int, int], Sequence[Array]]


def pad_with_halo(
    field: Array, lead: int = 0, halo: Halo = SINGLE, mirror_axes: Sequence[int] = ()
) -> Array:
    """(*lead_axes, *shape) -> (*lead_axes, *(shape + 2)) with every ghost layer (faces, edges,
    corners) filled by ``halo``: periodic on one device, from the neighbours when sharded. Along
    ``mirror_axes`` the ghosts copy the block's own edge planes (symmetry planes; the leading
    components are not permuted, so only fields whose ghosts are read as scalars belong here:
    the solid and obstacle masks).

    One axis after the other: the planes sent along a later axis already hold the ghosts of the
    earlier ones, so edges and corners arrive with them (two messages per split axis, and a
    handful of copies for XLA to compile instead of one per ghost region)."""
    d = field.ndim - lead
    out = field
    for a in range(d):
        axis = lead + a
        n = out.shape[axis]
        first = lax.slice_in_dim(out, 0, 1, axis=axis)
        last = lax.slice_in_dim(out, n - 1, n, axis=axis)
        if a in mirror_axes:
            low, high = first, last
        else:  # the low ghost is the last plane of the block below (a pull along +1 reads it)
            low, high = (_from_neighbour(halo, p, a, s, d) for p, s in ((last, 1), (first, -1)))
        out = jnp.concatenate([low, out, high], axis=axis)
    return out


def _from_neighbour(halo: Halo, block: Array, axis: int, sign: int, d: int) -> Array:
    """``block`` of the shard at -sign along ``axis`` (this block's own on an unsplit axis)."""
    offset = [0] * d
    offset[axis] = sign
    route = halo.route(offset)
    return shift_blocks(halo, [block], route)[0] if any(route) else block


def shift_blocks(halo: Halo, blocks: Sequence[Array], route: Sequence[int]) -> list[Array]:
    """``shift_together`` of blocks; 16-bit floats travel as their uint16 bit patterns (MPI has
    no float16 or bfloat16 type; bitwise the same values arrive)."""
    dtype = np.dtype(blocks[0].dtype)
    if dtype.itemsize != 2 or dtype.kind not in "fV":  # ml_dtypes' bfloat16 has kind "V"
        return shift_together(halo, blocks, route)
    bits = [lax.bitcast_convert_type(b, jnp.uint16) for b in blocks]
    return [lax.bitcast_convert_type(b, dtype) for b in shift_together(halo, bits, route)]


def upstream(padded: Array, offset: Sequence[int], region: Region | None = None) -> Array:
    """Interior view of a padded (*shape + 2) array shifted by ``offset``: out(x) = a(x - offset).

    A static slice, which XLA fuses into its consumer. ``region`` restricts the view to
    (start, size) per axis in interior coordinates; None is the whole interior.
    """
    if region is None:
        region = [(0, n - 2) for n in padded.shape]
    starts = [1 - int(o) + r0 for o, (r0, _) in zip(offset, region, strict=True)]
    limits = [s + size for s, (_, size) in zip(starts, region, strict=True)]
    return lax.slice(padded, starts, limits)


def ghost_regions(
    offset: Sequence[int], shape: Sequence[int]
) -> Iterator[tuple[tuple[int, ...], list[int], list[int], list[int]]]:
    """The ghost regions that a pull along ``offset`` reads, and where their values come from.

    Yields (axes, source_start, source_size, ghost_start): the axes the region lies outside the
    interior along, a block of the unpadded interior array and the padded index where it lands.
    On one device the block is this array's own opposite edge (periodic); sharded, the same
    block of the neighbouring shard at ``-offset`` along ``axes``. Faces, edges and corners are
    all covered, which matters for diagonal directions (edges in D3Q19, corners in D3Q27).
    """
    moving = [a for a, o in enumerate(offset) if o != 0]
    for r in range(1, len(moving) + 1):
        for axes in itertools.combinations(moving, r):
            src_start, src_size, ghost_start = [], [], []
            for a, n in enumerate(shape):
                if a in axes:
                    low = offset[a] > 0  # reads the low ghost, which mirrors the last plane
                    src_start.append(n - 1 if low else 0)
                    src_size.append(1)
                    ghost_start.append(0 if low else n + 1)
                else:
                    src_start.append(0)
                    src_size.append(n)
                    ghost_start.append(1)
            yield axes, src_start, src_size, ghost_start


def write_padded(
    buffers: Sequence[Array],
    interiors: Sequence[Array],
    offsets: Sequence[Sequence[int]],
    halo: Halo = SINGLE,
    faces: Faces | None = None,
    mirror_axes: Sequence[int] = (),
) -> tuple[Array, ...]:
    """Store each ``interiors[i]`` (*shape) into ``buffers[i]`` and fill the ghosts a pull along
    ``offsets[i]`` will read, from the interior values themselves (not from the buffer: reading
    the buffer back makes XLA copy the whole array), through ``halo``: a periodic wrap, or a
    neighbour's block. Blocks for the same neighbour travel together (one message per
    neighbour and step).

    ``faces`` (overlap): (axis, plane) -> the q arrays of that boundary plane of the interiors
    (the axis of length 1), computed apart from them. The blocks sent to other shards are cut
    from these, so the messages wait only for the planes, not for the whole interior: a
    scheduler that runs collectives asynchronously (XLA:GPU's) can overlap them with the
    interior's computation. The values must equal the interiors' planes (the step computes
    both with the same per-cell arithmetic); the result is then the same bit for bit.

    ``mirror_axes``: axes whose faces are symmetry planes (``FluidSetup.mirror_axes``); their
    ghosts mirror the block's own edge planes instead (``_ghost_routes``)."""
    d = interiors[0].ndim
    out = [
        lax.dynamic_update_slice(b, x, (1,) * d) for b, x in zip(buffers, interiors, strict=True)
    ]
    received = []
    for route, items in _ghost_routes(interiors, offsets, halo, faces, mirror_axes).items():
        blocks = [block for *_, block in items]
        if any(route):
            blocks = shift_blocks(halo, blocks, route)
        received += [(*item[:-1], block) for item, block in zip(items, blocks, strict=True)]
    return write_ghosts(out, received)


# (direction, axes the region lies outside the interior along, padded start, values)
GhostBlock = tuple[int, tuple[int, ...], Sequence[int], Array]


def write_ghosts(buffers: Sequence[Array], received: Sequence[GhostBlock]) -> tuple[Array, ...]:
    """Store the ghost regions of ``received`` into ``buffers``, one write per direction and
    axis it moves along: the regions whose first crossing axis is a (a face, then the edges and
    corners that extend it along later axes) form one box, the ghost plane along a with the
    ghost cells of the later axes, assembled by concatenation (XLA fuses it into the write).
    A diagonal direction of D3Q19 takes two writes instead of three, a corner direction of
    D3Q27 three instead of seven; the values and the messages are the same."""
    out = list(buffers)
    groups: dict[tuple[int, int], list[tuple[tuple[int, ...], Sequence[int], Array]]] = {}
    for i, axes, start, block in received:
        groups.setdefault((i, min(axes)), []).append((axes, start, block))
    for (i, first), regions in groups.items():
        later = sorted({a for axes, _, _ in regions for a in axes if a != first})
        start = [min(r[1][a] for r in regions) for a in range(out[i].ndim)]
        out[i] = lax.dynamic_update_slice(out[i], _box(regions, later), start)
    return tuple(out)


def _box(regions: Sequence[tuple[tuple[int, ...], Sequence[int], Array]], axes: Sequence[int]):
    """The regions (all subsets of ``axes`` as ghost axes beside a common one) as one block:
    along each of ``axes`` the ghost cell and the interior, in the order of their starts."""
    if not axes:
        (only,) = regions
        return only[2]
    a, rest = axes[0], axes[1:]
    ghost = [r for r in regions if a in r[0]]
    inner = [r for r in regions if a not in r[0]]
    parts = sorted(
        [(ghost[0][1][a], _box(ghost, rest)), (inner[0][1][a], _box(inner, rest))],
        key=lambda part: part[0],
    )
    return jnp.concatenate([block for _, block in parts], axis=a)


def _mirrored(
    offset: Sequence[int],
    axes: Sequence[int],
    src_start: Sequence[int],
    shape: Sequence[int],
    mirror_axes: Sequence[int],
) -> tuple[list[int], list[int]]:
    """A ghost region's source start with its mirror axes' planes taken from the block's own
    edge (the low ghost copies plane 0, the high ghost the last plane), and the mirror axes
    among ``axes`` (whose velocity component the source direction reverses)."""
    start, flipped = list(src_start), []
    for a in axes:
        if a in mirror_axes:
            start[a] = 0 if offset[a] > 0 else shape[a] - 1
            flipped.append(a)
    return start, flipped


def mirror_direction(offsets: Sequence[Sequence[int]], i: int, axes: Sequence[int]) -> int:
    """The direction whose velocity is ``offsets[i]`` with the components along ``axes``
    reversed (specular reflection on planes normal to them)."""
    target = [int(v) for v in offsets[i]]
    for a in axes:
        target[a] = -target[a]
    return next(j for j, c in enumerate(offsets) if [int(v) for v in c] == target)


def _ghost_routes(
    interiors: Sequence[Array],
    offsets: Sequence[Sequence[int]],
    halo: Halo,
    faces: Faces | None = None,
    mirror_axes: Sequence[int] = (),
) -> dict[tuple[int, ...], list]:
    """The ghost blocks of ``write_padded`` grouped by the neighbour they come from (its route):
    route -> [(direction, ghost axes, ghost start, source block)]. A block bound for another
    shard is cut from ``faces`` when given (the plane of its first crossing axis). Along
    ``mirror_axes`` a ghost of direction i holds the block's own edge plane of the mirrored
    direction (specular reflection on the symmetry plane half a cell outside)."""
    routes: dict[tuple[int, ...], list] = {}
    for i, (interior, offset) in enumerate(zip(interiors, offsets, strict=True)):
        for axes, src_start, src_size, ghost_start in ghost_regions(offset, interior.shape):
            src_start, flipped = _mirrored(offset, axes, src_start, interior.shape, mirror_axes)
            j = mirror_direction(offsets, i, flipped) if flipped else i
            shift = [int(o) if a in axes and a not in flipped else 0 for a, o in enumerate(offset)]
            route = halo.route(shift)
            source, start = interiors[j], list(src_start)
            if faces is not None and any(route):
                axis = next(a for a, r in enumerate(route) if r)
                source = faces[(axis, src_start[axis])][j]
                start[axis] = 0
            block = lax.slice(source, start, [s + n for s, n in zip(start, src_size, strict=True)])
            routes.setdefault(route, []).append((i, axes, ghost_start, block))
    return routes


def face_planes(shape: Sequence[int], halo: Halo) -> list[tuple[int, int]]:
    """(axis, plane index) of the block's boundary planes whose values other shards receive:
    the first and the last plane along every axis the mesh splits."""
    d = len(shape)
    planes = []
    for a in range(d):
        unit = [0] * d
        unit[a] = 1
        if any(halo.route(unit)):
            planes += [(a, 0), (a, shape[a] - 1)] if shape[a] > 1 else [(a, 0)]
    return planes


def plane(x: Array, axis: int, index: int) -> Array:
    """The plane ``index`` of ``x`` along ``axis``, keeping the axis (length 1)."""
    return lax.slice_in_dim(x, index, index + 1, axis=axis)


def exchange_ghosts(
    interiors: Sequence[Array], offsets: Sequence[Sequence[int]], halo: Halo
) -> list[Array]:
    """Only the messages of ``write_padded``: the ghost blocks that come from other shards,
    as received (nothing is stored). The telemetry's exchange probe times this."""
    received = []
    for route, items in _ghost_routes(interiors, offsets, halo).items():
        if any(route):
            received += shift_blocks(halo, [block for *_, block in items], route)
    return received
