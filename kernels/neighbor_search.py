"""Neighbour search for spheres by a cell list in fixed-capacity buffers.

The box is cut into cubic cells of edge h >= d_max = 2 max(r) + skin, the largest distance at which
two bodies may interact (Verlet's skin: Verlet 1967, Phys. Rev. 159, 98). Two bodies closer than h
then lie in the same cell or in adjacent ones, so each body looks at exactly the 27 cells of
``NEIGHBOR_OFFSETS`` around its own (the cell-index method: Hockney & Eastwood 1988, "Computer
Simulation Using Particles", sec. 8-4; Allen & Tildesley 2017, "Computer Simulation of Liquids",
2nd ed., sec. 5.3). A pair (i, j), i < j, is a candidate when |x_j - x_i| <= r_i + r_j + skin.

Static shapes: a cell holds at most ``capacity`` bodies and a body at most ``max_neighbors``
partners. Nothing is dropped silently: true counts are kept beside the tables, and ``overflowed``
with the worst cell or body tells the caller which buffer to enlarge and to what size. Both
``CellList.overflowed`` and ``Pairs.overflowed`` must be False for the pair table to be complete.

Cost, for n bodies, N_c cells, capacity C and M partners per body:
- binning is O((n + N_c) C): C rounds of one segment-min each, linear in n (no sort);
- the pair search is O(27 n C) and keeps only (n, C) candidates live at a time.

Positions outside the box are clamped into the edge cells. Clamping is exact, not an approximation:
per axis it maps cell indices that differ by at most 1 to indices that differ by at most 1, so no
pair is lost; it only crowds the edge cells, which the overflow report then shows. Keeping bodies in
the box is the application's check. NaN positions land in cell 0.

Periodic boundaries are not handled (walls are planes). They would go into ``neighbor_pairs``: wrap
the neighbour cell coordinates modulo ``grid.shape`` instead of masking them, and take the minimum
image of x_j - x_i.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

# The 27 cell offsets a body visits, its own cell included: every body visits exactly 27 cells.
NEIGHBOR_OFFSETS = np.array(list(itertools.product((-1, 0, 1), repeat=3)), dtype=np.int32)

_INT32_MAX = np.iinfo(np.int32).max


@dataclass(frozen=True)
class CellGrid:
    """Static description of the cell list (hashable; usable as a jit static argument).

    Attributes:
        lower: (3,) lower corner of the box, m.
        cell_size: edge h of the cubic cells, m; at least 2 max(radius) + skin.
        shape: cells per axis (nx, ny, nz); flat index (cx ny + cy) nz + cz.
        capacity: bodies stored per cell.
        max_neighbors: partners j > i stored per body i.
    """

    lower: tuple[float, float, float]
    cell_size: float
    shape: tuple[int, int, int]
    capacity: int
    max_neighbors: int

    def __post_init__(self) -> None:
        lower = tuple(float(v) for v in self.lower)
        shape = tuple(int(v) for v in self.shape)
        if len(lower) != 3 or not all(math.isfinite(v) for v in lower):
            raise ValueError(f"CellGrid.lower must be 3 finite numbers, got {self.lower}")
        if not (math.isfinite(self.cell_size) and self.cell_size > 0):
            raise ValueError(f"CellGrid.cell_size must be > 0 and finite, got {self.cell_size}")
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"CellGrid.shape must be 3 integers >= 1, got {self.shape}")
        if math.prod(shape) * max(self.capacity, 1) >= _INT32_MAX:
            raise ValueError(f"CellGrid.shape {shape} x capacity {self.capacity} exceeds int32")
        if self.capacity < 1:
            raise ValueError(f"CellGrid.capacity must be >= 1, got {self.capacity}")
        if self.max_neighbors < 1:
            raise ValueError(f"CellGrid.max_neighbors must be >= 1, got {self.max_neighbors}")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "cell_size", float(self.cell_size))
        object.__setattr__(self, "shape", shape)

    @property
    def n_cells(self) -> int:
        return math.prod(self.shape)

    @classmethod
    def covering(
        cls,
        lower: Sequence[float],
        upper: Sequence[float],
        interaction_distance: float,
        capacity: int,
        max_neighbors: int,
    ) -> CellGrid:
        """The grid of cells of edge ``interaction_distance`` (m) covering [lower, upper] (m)."""
        if not interaction_distance > 0:
            raise ValueError(f"interaction distance must be > 0, got {interaction_distance}")
        extent = [float(u) - float(lo) for lo, u in zip(lower, upper, strict=True)]
        if min(extent) <= 0:
            raise ValueError(f"box upper {tuple(upper)} must exceed lower {tuple(lower)}")
        shape = tuple(max(1, math.ceil(e / interaction_distance)) for e in extent)
        return cls(tuple(lower), interaction_distance, shape, capacity, max_neighbors)

    def require_cell_size(self, max_radius: float, skin: float) -> None:
        """Raise before tracing if a pair at the interaction distance could be missed."""
        needed = 2.0 * float(max_radius) + float(skin)
        if self.cell_size < needed:
            raise ValueError(
                f"cell size {self.cell_size:g} m is below 2 * max radius + skin = "
                f"2 * {max_radius:g} + {skin:g} = {needed:g} m; use cells of at least {needed:g} m"
            )


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class CellList:
    """Bodies binned into cells.

    Attributes:
        cell_of: (n,) int32 flat cell index of each body; -1 for inactive bodies.
        members: (n_cells, capacity) int32 body indices in ascending order, -1 padding; a cell
            over capacity keeps its ``capacity`` lowest indices.
        counts: (n_cells,) int32 true number of bodies per cell (may exceed capacity).
        overflowed: bool scalar, some cell holds more than ``capacity`` bodies.
        worst_cell: int32 scalar, flat index of the fullest cell.
        worst_count: int32 scalar, its number of bodies (the capacity needed).
    """

    cell_of: Array
    members: Array
    counts: Array
    overflowed: Array
    worst_cell: Array
    worst_count: Array

    def replace(self, **changes) -> CellList:
        return dataclasses.replace(self, **changes)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Pairs:
    """Candidate contact pairs, each pair once, in a fixed-capacity table.

    Attributes:
        partners: (n, max_neighbors) int32, row i holds the partners j > i in ascending order,
            -1 padding; a row over capacity keeps ``max_neighbors`` of them (deterministically).
        count: (n,) int32 true number of partners j > i of each body (may exceed max_neighbors).
        overflowed: bool scalar, some row needs more than ``max_neighbors`` entries.
        worst_body: int32 scalar, the body with the most partners.
        worst_count: int32 scalar, its number of partners (the table width needed).
    """

    partners: Array
    count: Array
    overflowed: Array
    worst_body: Array
    worst_count: Array

    def replace(self, **changes) -> Pairs:
        return dataclasses.replace(self, **changes)


def cell_coordinates(grid: CellGrid, positions: Array) -> Array:
    """(n, 3) int32 cell coordinates of positions (n, 3) m, clamped into the box (see module)."""
    lower = jnp.asarray(grid.lower, positions.dtype)
    scaled = jnp.floor((positions - lower) / grid.cell_size)
    clamped = jnp.clip(scaled, 0, jnp.asarray(grid.shape, positions.dtype) - 1)
    return jnp.where(jnp.isnan(clamped), 0, clamped).astype(jnp.int32)


def _flat(grid: CellGrid, coords: Array) -> Array:
    _, ny, nz = grid.shape
    return (coords[..., 0] * ny + coords[..., 1]) * nz + coords[..., 2]


def cell_index(grid: CellGrid, positions: Array) -> Array:
    """(n,) int32 flat cell index of positions (n, 3) m, clamped into the box."""
    return _flat(grid, cell_coordinates(grid, positions))


def bin_bodies(grid: CellGrid, positions: Array, active: Array) -> CellList:
    """Bin the active bodies into cells, O((n + n_cells) capacity), linear in n.

    Slot k of every cell is filled in round k by the lowest-index body of that cell not yet placed
    (one segment-min over the bodies per round), so members are sorted and independent of any
    ordering but the body indices themselves.

    Args:
        positions: (n, 3) body centres, m.
        active: (n,) bool; inactive bodies are not binned.
    """
    n = positions.shape[0]
    n_cells = grid.n_cells
    index = jnp.arange(n, dtype=jnp.int32)
    cell_of = jnp.where(active, cell_index(grid, positions), -1)
    # Inactive bodies go to an extra segment n_cells, dropped at the end.
    segment = jnp.where(active, cell_of, n_cells)
    counts = jax.ops.segment_sum(
        active.astype(jnp.int32), segment, num_segments=n_cells + 1, indices_are_sorted=False
    )[:n_cells]

    def fill_slot(k, carry):
        members, placed = carry
        first = jax.ops.segment_min(jnp.where(placed, n, index), segment, num_segments=n_cells + 1)
        members = members.at[:, k].set(jnp.where(first[:n_cells] < n, first[:n_cells], -1))
        return members, placed | (first[segment] == index)

    members0 = jnp.full((n_cells, grid.capacity), -1, jnp.int32)
    members, _ = jax.lax.fori_loop(0, grid.capacity, fill_slot, (members0, ~active))
    worst_cell = jnp.argmax(counts).astype(jnp.int32)
    worst_count = counts[worst_cell]
    return CellList(
        cell_of=cell_of.astype(jnp.int32),
        members=members,
        counts=counts,
        overflowed=worst_count > grid.capacity,
        worst_cell=worst_cell,
        worst_count=worst_count,
    )


def neighbor_pairs(
    grid: CellGrid,
    cells: CellList,
    positions: Array,
    radii: Array,
    active: Array,
    skin: float | Array,
) -> Pairs:
    """Pairs (i, j), j > i, with |x_j - x_i| <= r_i + r_j + skin, from the 27 cells around i.

    The offsets are visited one at a time (``lax.scan``), so only (n, capacity) candidates are live.
    Complete only if neither ``cells.overflowed`` nor the returned ``overflowed`` is set.

    Args:
        cells: ``bin_bodies(grid, positions, active)``.
        positions: (n, 3) body centres, m.
        radii: (n,) sphere (or bounding-sphere) radii, m.
        active: (n,) bool; inactive bodies have no partners and are no one's partner.
        skin: extra distance, m, so that the table stays valid for a few steps.
    """
    n = positions.shape[0]
    width = grid.max_neighbors
    index = jnp.arange(n, dtype=jnp.int32)
    shape = jnp.asarray(grid.shape, jnp.int32)
    own = cell_coordinates(grid, positions)

    def visit(carry, offset):
        partners, count = carry
        coords = own + offset
        inside = active & jnp.all((coords >= 0) & (coords < shape), axis=1)
        candidates = cells.members[_flat(grid, jnp.clip(coords, 0, shape - 1))]  # (n, capacity)
        # Padding -1 fails j > i; members are active bodies only. Gathers at -1 are masked.
        valid = inside[:, None] & (candidates > index[:, None])
        separation = positions[candidates] - positions[:, None, :]
        reach = radii[:, None] + radii[candidates] + skin
        # by components: a 3-wide jnp.sum goes to YNNPACK, a pass of its own (kernels.contact.dot)
        distance2 = sum(separation[..., k] * separation[..., k] for k in range(3))
        valid = valid & (distance2 <= reach * reach)
        slot = jnp.where(valid, count[:, None] + jnp.cumsum(valid, axis=1) - 1, width)
        partners = partners.at[index[:, None], slot].set(candidates, mode="drop")
        return (partners, count + jnp.sum(valid, axis=1, dtype=jnp.int32)), None

    init = (jnp.full((n, width), -1, jnp.int32), jnp.zeros((n,), jnp.int32))
    (partners, count), _ = jax.lax.scan(visit, init, jnp.asarray(NEIGHBOR_OFFSETS))
    # Ascending rows, padding last: a fixed order for matching contact histories between rebuilds.
    partners = jnp.sort(jnp.where(partners < 0, _INT32_MAX, partners), axis=1)
    partners = jnp.where(partners == _INT32_MAX, -1, partners)
    worst_body = jnp.argmax(count).astype(jnp.int32)
    worst_count = count[worst_body]
    return Pairs(
        partners=partners,
        count=count,
        overflowed=worst_count > width,
        worst_body=worst_body,
        worst_count=worst_count,
    )


def pair_list(pairs: Pairs | Array) -> tuple[Array, Array, Array]:
    """Flat view of the table (``Pairs`` or its (n, K) partners) for the contact kernels: i, j,
    valid, each (P,), P = n max_neighbors.

    Padding entries have j = -1 and valid False; mask by ``valid`` before using i or j (a gather at
    -1 wraps to the last body in JAX).
    """
    partners = pairs.partners if isinstance(pairs, Pairs) else pairs
    n, width = partners.shape
    i = jnp.repeat(jnp.arange(n, dtype=jnp.int32), width, total_repeat_length=n * width)
    j = partners.reshape(-1)
    return i, j, j >= 0
