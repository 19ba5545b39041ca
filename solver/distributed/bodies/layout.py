"""Which subdomain owns which body: the box split into blocks, capacities, the local cell list.

The scene's box [lower, upper) (by default the one ``setup.grid`` covers) is cut along x, y, z
into ``mesh`` equal blocks; the subdomain at mesh coordinates (i, j, k) owns the bodies whose
centre lies in its block. Bodies outside the box belong to the edge blocks (the owner index is
clamped, as the cell list clamps cells). Subdomain ranks are row-major over the mesh, x slowest
(``solver.distributed.decomposition.Decomposition``), which is also the order of the leading
axis of a global sharded array with ``PartitionSpec(("x", "y", "z"))``.

Each subdomain keeps its bodies in fixed-capacity arrays and sees copies (ghosts) of the bodies
within the interaction range ``reach = 2 max(bounding radius) + skin`` of its faces (a clump's
members lie within its bounding radius of its centre; a sphere's is its radius). Its cell list
covers its block plus a layer of ``reach`` on each split axis; a block must be at least ``reach``
wide, so every ghost comes from a neighbouring block (faces, and edges and corners by the
sequential axis exchange).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kernels.neighbor_search import CellGrid
from solver.bodies.step import BodySetup
from solver.distributed.decomposition import AXIS_NAMES, Decomposition
from solver.errors import ConfigError

CAPACITY_NAMES = ("owned", "ghost", "migration", "cell", "partners")


@dataclass(frozen=True, eq=False)
class BodyLayout:
    """A checked split of a body scene over a 3D device mesh (static, hashable by identity).

    Attributes:
        mesh: subdomains per axis (mx, my, mz).
        lower, upper: (3,) the box that is split, m.
        reach: 2 max(bounding radius) + skin, m: the largest centre distance of a candidate pair.
        capacity: bodies a subdomain owns at most.
        ghost_capacity: ghost copies a subdomain receives at most (all axes together); also the
            size of one ghost message.
        migration_capacity: bodies one migration message (one axis, one direction) carries.
        cell_capacity: bodies per cell of the local cell list.
        max_partners: partners (both directions) per owned body in its neighbour table.
        n_bodies: bodies of the whole scene (global ids 0..n-1).
        n_planes: planes of the scene (every subdomain sees all of them).
    """

    mesh: tuple[int, int, int]
    lower: tuple[float, float, float]
    upper: tuple[float, float, float]
    reach: float
    cell_size: float
    capacity: int
    ghost_capacity: int
    migration_capacity: int
    cell_capacity: int
    max_partners: int
    n_bodies: int
    n_planes: int

    @property
    def shards(self) -> int:
        return math.prod(self.mesh)

    @property
    def axis_names(self) -> tuple[str, str, str]:
        return AXIS_NAMES

    @property
    def decomposition(self) -> Decomposition:
        """Mesh coordinates and ranks (the grid shape is unused: one 'cell' per block)."""
        return Decomposition(self.mesh, self.mesh)

    @property
    def block_width(self) -> tuple[float, float, float]:
        spans = zip(self.lower, self.upper, self.mesh, strict=True)
        return tuple((u - lo) / m for lo, u, m in spans)

    def capacities(self) -> dict[str, int]:
        """Capacity of each buffer, in the order of ``CAPACITY_NAMES``."""
        values = (
            self.capacity,
            self.ghost_capacity,
            self.migration_capacity,
            self.cell_capacity,
            self.max_partners,
        )
        return dict(zip(CAPACITY_NAMES, values, strict=True))

    def local_grid(self) -> tuple[CellGrid, tuple[float, float, float]]:
        """The cell list of one subdomain and the offset of its lower corner from its block's.

        On a split axis the grid spans the block widened by ``reach`` on both sides (the
        ghost layer), starting at block_lower - reach; on an unsplit axis, the box. The grid's
        ``lower`` is 0: positions are shifted by the subdomain's own corner before binning.
        """
        shape, offset = [], []
        for a, m in enumerate(self.mesh):
            extent = self.upper[a] - self.lower[a]
            if m > 1:
                extent = extent / m + 2.0 * self.reach
                offset.append(-self.reach)
            else:
                offset.append(0.0)
            shape.append(max(1, math.ceil(extent / self.cell_size)))
        grid = CellGrid(
            (0.0, 0.0, 0.0), self.cell_size, tuple(shape), self.cell_capacity, self.max_partners
        )
        return grid, tuple(offset)

    def owner_coords(self, positions: np.ndarray) -> np.ndarray:
        """(n, 3) int mesh coordinates of the owners of centres (n, 3) m (host side)."""
        positions = np.asarray(positions, dtype=np.float64)
        lower = np.asarray(self.lower)
        width = np.asarray(self.block_width)
        index = np.floor((positions - lower) / width)
        index = np.where(np.isnan(index), 0, index)
        return np.clip(index, 0, np.asarray(self.mesh) - 1).astype(np.int64)

    def owner_ranks(self, positions: np.ndarray) -> np.ndarray:
        """(n,) rank of the owner of each centre (row-major over the mesh, x slowest)."""
        c = self.owner_coords(positions)
        mx, my, mz = self.mesh
        return (c[:, 0] * my + c[:, 1]) * mz + c[:, 2]


def _positive(key: str, value: int) -> int:
    if int(value) != value or value < 1:
        raise ConfigError(key, value, "an integer >= 1")
    return int(value)


def plan_layout(
    setup: BodySetup,
    mesh: Sequence[int],
    *,
    devices: int | None = None,
    box: tuple[Sequence[float], Sequence[float]] | None = None,
    capacity: int | None = None,
    ghost_capacity: int | None = None,
    migration_capacity: int | None = None,
    cell_capacity: int | None = None,
    max_partners: int | None = None,
    key: str = "bodies.mesh",
) -> BodyLayout:
    """Check a mesh against a scene and fix the buffer sizes (host side, before tracing).

    Args:
        setup: the single-device setup of the whole scene (spheres, clumps and planes; a
            clump is owned by the subdomain of its centre of mass).
        mesh: subdomains per axis, 3 integers >= 1.
        devices: devices available; None: not checked.
        box: (lower, upper) of the split region, m; None: the box ``setup.grid`` covers.
        capacity, ghost_capacity, migration_capacity, cell_capacity, max_partners: buffer
            sizes (see ``BodyLayout``); None: generous defaults from the scene (the body count,
            the cell list's capacity, twice its max_neighbors).

    Raises:
        ConfigError: a mesh of the wrong length, more subdomains than devices, or a block
            narrower than the interaction range (naming both numbers).
    """
    mesh = tuple(int(m) for m in mesh)
    if len(mesh) != 3 or min(mesh) < 1:
        raise ConfigError(key, list(mesh), "3 integers >= 1 (subdomains along x, y, z)")
    if devices is not None and math.prod(mesh) > devices:
        raise ConfigError(key, list(mesh), f"at most {devices} subdomains (the devices available)")
    grid = setup.grid
    if box is None:
        lower = grid.lower
        upper = tuple(lo + n * grid.cell_size for lo, n in zip(lower, grid.shape, strict=True))
    else:
        lower, upper = (tuple(float(v) for v in corner) for corner in box)
    if (
        len(lower) != 3
        or len(upper) != 3
        or any(u <= lo for lo, u in zip(lower, upper, strict=True))
    ):
        raise ConfigError("box", (lower, upper), "3D corners with upper > lower")
    # a clump's members lie within its bounding radius of its centre (a sphere's: its radius)
    reach = 2.0 * float(setup.bounding_radius.max()) + float(setup.skin)
    for a, m in enumerate(mesh):
        width = (upper[a] - lower[a]) / m
        if m > 1 and width < reach:
            raise ConfigError(
                key,
                list(mesh),
                f"blocks at least as wide as the interaction range 2 max(bounding radius) + "
                f"skin = "
                f"{reach:g} m",
                hint=f"{m} blocks along {AXIS_NAMES[a]} are {width:g} m wide; use fewer",
            )
    n = setup.n_bodies
    names = ("capacity", "ghost_capacity", "migration_capacity", "cell_capacity", "max_partners")
    given = (capacity, ghost_capacity, migration_capacity, cell_capacity, max_partners)
    defaults = (n, n, n, grid.capacity, 2 * grid.max_neighbors)
    sizes = [
        _positive(f"bodies.{name}", value if value is not None else default)
        for name, value, default in zip(names, given, defaults, strict=True)
    ]
    return sized_layout(setup, mesh, lower, upper, reach, sizes)


def sized_layout(
    setup: BodySetup,
    mesh: tuple[int, ...],
    lower: Sequence[float],
    upper: Sequence[float],
    reach: float,
    sizes: Sequence[int],
) -> BodyLayout:
    """The layout of a checked mesh: ``sizes`` the five buffer sizes in ``CAPACITY_NAMES``
    order; the cell list's cells at least ``reach`` wide."""
    return BodyLayout(
        mesh=mesh,
        lower=tuple(float(v) for v in lower),
        upper=tuple(float(v) for v in upper),
        reach=float(reach),
        cell_size=max(float(setup.grid.cell_size), float(reach)),
        capacity=sizes[0],
        ghost_capacity=sizes[1],
        migration_capacity=sizes[2],
        cell_capacity=sizes[3],
        max_partners=sizes[4],
        n_bodies=setup.n_bodies,
        n_planes=setup.n_planes,
    )


def overflow_lines(
    layout: BodyLayout,
    table: np.ndarray,
    keys: dict[str, str],
    unit: str,
    jumped: str,
    at_least: Sequence[str] = (),
) -> str | None:
    """One line per subdomain whose buffers were too small (``table`` (subdomains, 6), the
    sticky overflow counts), naming the buffer, the size needed and its config key
    (``keys``), or None if every one sufficed. ``unit`` names a subdomain in the line
    ("subdomain", "shard"); ``jumped`` follows the count of bodies that crossed more than one
    block; the sizes of the buffers in ``at_least`` are lower bounds."""
    capacities = layout.capacities()
    lines = []
    for rank, row in enumerate(np.asarray(table)):
        parts = [
            f"{name} buffer needs {'at least ' if name in at_least else ''}{int(row[a])}, "
            f"{keys[name]} = {capacities[name]}"
            for a, name in enumerate(CAPACITY_NAMES)
            if row[a] > capacities[name]
        ]
        if row[5] > 0:
            parts.append(f"{int(row[5])} bodies moved more than one block {jumped}")
        if parts:
            coords = layout.decomposition.coords(rank)
            lines.append(f"{unit} {rank} {coords}: " + "; ".join(parts))
    return "\n".join(lines) or None
