"""An exact sphere on the lattice: the reference the mesh voxeliser is compared with.

Index coordinates as in ``solver.fluid.geometry.voxels``: node (i, j, k) at the integer point.
A node is solid where |x - centre| <= r (the cylinder case's rule in 3D). For a fluid node x
whose neighbour x + c_i is solid, the link fraction is the nearer root q in (0, 1] of
|x + q c_i - centre|^2 = r^2 (Bouzidi, Firdaouss & Lallemand 2001, Phys. Fluids 13, 3452):
    q = (-b - sqrt(b^2 - |c_i|^2 (|p|^2 - r^2))) / |c_i|^2,   p = x - centre,  b = p . c_i.
Only the sphere's bounding box (plus one node) is visited.
"""

from __future__ import annotations

import numpy as np

from solver.fluid.geometry.voxels import Links


def _box(center: np.ndarray, radius: float, shape: tuple[int, ...]) -> tuple[slice, ...]:
    """Index slices of the sphere's bounding box widened by one node, clipped to the grid."""
    return tuple(
        slice(max(0, int(np.floor(c - radius)) - 1), min(n, int(np.ceil(c + radius)) + 2))
        for c, n in zip(center, shape, strict=True)
    )


def sphere_mask(
    center, radius: float, shape: tuple[int, int, int], box: tuple[slice, ...] | None = None
) -> np.ndarray:
    """(nx, ny, nz) bool, True on nodes with |x - center| <= radius (index units); on ``box``
    (three slices, step 1) only, (box shape): the whole grid's slice there, bit for bit (the
    same sums of squares of the same coordinates)."""
    center = np.asarray(center, dtype=np.float64)
    box = tuple(slice(0, int(n)) for n in shape) if box is None else box
    out = np.zeros(tuple(s.stop - s.start for s in box), dtype=bool)
    near = tuple(
        slice(max(s.start, b.start), min(s.stop, b.stop))
        for s, b in zip(box, _box(center, radius, shape), strict=True)
    )
    if any(s.start >= s.stop for s in near):
        return out
    axes = [np.arange(s.start, s.stop) - c for s, c in zip(near, center, strict=True)]
    r2 = axes[0][:, None, None] ** 2 + axes[1][None, :, None] ** 2 + axes[2][None, None, :] ** 2
    out[
        tuple(slice(s.start - b.start, s.stop - b.start) for s, b in zip(near, box, strict=True))
    ] = r2 <= radius * radius
    return out


def sphere_bounds(center, radius: float, shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A box of nodes holding the sphere's (its bounding box widened by one node, clipped)."""
    return _box(np.asarray(center, dtype=np.float64), radius, shape)


def sphere_link_fractions(
    center,
    radius: float,
    velocities: np.ndarray,
    solid: np.ndarray,
    fluid: np.ndarray | None = None,
) -> Links:
    """Exact link fractions of every link from a fluid node into the sphere's ``solid`` nodes.

    ``solid`` and ``fluid`` are read on the sphere's box only (``sphere_bounds``), so lazy grid
    fields (``GridField``) compute just that box.

    Args:
        center: (3,) index coordinates; radius: in cells.
        velocities: (q, 3) integer lattice velocities.
        solid: (nx, ny, nz) bool, the sphere's nodes (``sphere_mask``).
        fluid: (nx, ny, nz) bool, the fluid nodes (default ~solid).
    """
    center = np.asarray(center, dtype=np.float64)
    shape = solid.shape
    fluid = ~solid if fluid is None else fluid
    box = _box(center, radius, shape)
    origin = np.array([s.start for s in box])
    sub_solid, sub_fluid = solid[box], fluid[box]
    nodes, directions, fractions = [], [], []
    for i, ci in enumerate(np.asarray(velocities, dtype=np.int64)):
        if not ci.any():
            continue
        n = sub_solid.shape
        src = tuple(slice(max(0, -v), m - max(0, v)) for v, m in zip(ci, n, strict=True))
        dst = tuple(slice(max(0, v), m - max(0, -v)) for v, m in zip(ci, n, strict=True))
        hit = np.argwhere(sub_fluid[src] & sub_solid[dst]) + [s.start for s in src]
        p = hit + origin - center
        a = float(ci @ ci)
        b = p @ ci
        c0 = np.einsum("ij,ij->i", p, p) - radius * radius
        q = (-b - np.sqrt(np.maximum(b * b - a * c0, 0.0))) / a
        nodes.append(np.ravel_multi_index((hit + origin).T, shape))
        directions.append(np.full(len(hit), i, dtype=np.int64))
        fractions.append(np.clip(q, 1e-6, 1.0))
    if not nodes:
        return Links(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    return Links(np.concatenate(nodes), np.concatenate(directions), np.concatenate(fractions))
