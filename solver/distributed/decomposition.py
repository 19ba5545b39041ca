"""Which device holds which block of the grid: choosing and checking the mesh.

Pure arithmetic on shapes (no devices, no JAX), so it is checked before anything starts. The mesh
has one entry per spatial axis: ``mesh[a]`` shards split axis a into equal blocks. Presets:
``single`` (one device), ``slab`` (split x), ``pencil`` (split x and y), ``block`` (split every
axis) and ``auto`` (the split of the available devices over all axes with the least halo
surface). Shard (i, j[, k]) holds cells [i nx/mx, (i+1) nx/mx) x ... of the global grid.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from solver.errors import ConfigError

PRESETS = ("auto", "single", "slab", "pencil", "block")
AXIS_NAMES = ("x", "y", "z")
MIN_LOCAL_CELLS = 2  # a shard needs an inner plane next to an inlet/outlet face


@dataclass(frozen=True)
class Decomposition:
    """A checked split of ``shape`` over ``mesh``.

    Attributes:
        shape: global grid, cells per axis.
        mesh: shards per axis.
    """

    shape: tuple[int, ...]
    mesh: tuple[int, ...]

    @property
    def shards(self) -> int:
        return math.prod(self.mesh)

    @property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(n // m for n, m in zip(self.shape, self.mesh, strict=True))

    @property
    def axis_names(self) -> tuple[str, ...]:
        return AXIS_NAMES[: len(self.shape)]

    def coords(self, rank: int) -> tuple[int, ...]:
        """Mesh coordinates of shard ``rank`` (row-major over the mesh, x slowest)."""
        return tuple(int(c) for c in _unravel(rank, self.mesh))

    def rank(self, coords: Sequence[int]) -> int:
        """Shard number at mesh ``coords``, wrapped periodically."""
        r = 0
        for c, m in zip(coords, self.mesh, strict=True):
            r = r * m + c % m
        return r

    def block(self, rank: int) -> tuple[slice, ...]:
        """The global index ranges shard ``rank`` holds."""
        local = self.local_shape
        return tuple(
            slice(c * n, (c + 1) * n) for c, n in zip(self.coords(rank), local, strict=True)
        )

    def halo_cells(self) -> int:
        """Cells on the faces between shards, a proxy for halo traffic per step."""
        total = 0
        for a, m in enumerate(self.mesh):
            if m > 1:
                total += m * math.prod(n for b, n in enumerate(self.shape) if b != a)
        return total


def _unravel(rank: int, mesh: Sequence[int]) -> list[int]:
    out = []
    for m in reversed(mesh):
        out.append(rank % m)
        rank //= m
    return out[::-1]


def _fmt(values: Sequence[int], sep: str = " x ") -> str:
    return sep.join(str(v) for v in values)


def _factorisations(n: int, axes: int) -> list[tuple[int, ...]]:
    """Every ordered way to write n as a product of ``axes`` positive integers."""
    if axes == 1:
        return [(n,)]
    return [
        (f, *rest)
        for f in range(1, n + 1)
        if n % f == 0
        for rest in _factorisations(n // f, axes - 1)
    ]


def _divides(shape: Sequence[int], mesh: Sequence[int]) -> bool:
    return all(_fits(n, m) for n, m in zip(shape, mesh, strict=True))


def _fits(cells: int, shards: int) -> bool:
    """Equal blocks, and (along a split axis) at least MIN_LOCAL_CELLS cells per block."""
    return shards == 1 or (cells % shards == 0 and cells // shards >= MIN_LOCAL_CELLS)


def choose_mesh(
    spec: str | Sequence[int],
    shape: Sequence[int],
    devices: int,
    key: str = "domain.mesh",
    unsplit: Sequence[int] = (),
) -> Decomposition:
    """The decomposition of ``shape`` asked for by ``spec`` on ``devices`` devices.

    Args:
        spec: a preset name (PRESETS) or one shard count per axis.
        shape: global grid, cells per axis.
        devices: devices available (all processes together).
        unsplit: axes no mesh may split (those with symmetry planes: their ghosts mirror the
            block's own edge planes, ``FluidSetup.mirror_axes``).

    Raises:
        ConfigError: a mesh longer or shorter than the grid's dimension, larger than the devices,
            one that does not divide the grid (naming both numbers), or one splitting an
            ``unsplit`` axis.
    """
    shape = tuple(int(n) for n in shape)
    d = len(shape)
    if isinstance(spec, str):
        if spec not in PRESETS:
            raise ConfigError(key, spec, f"one of {', '.join(PRESETS)} or a list of {d} integers")
        return _preset(spec, shape, devices, key, tuple(unsplit))
    mesh = tuple(int(m) for m in spec)
    if len(mesh) != d or any(m < 1 for m in mesh):
        raise ConfigError(key, list(mesh), f"{d} integers >= 1 (one per axis of the {d}D grid)")
    split = [AXIS_NAMES[a] for a in unsplit if mesh[a] > 1]
    if split:
        whole = ", ".join(AXIS_NAMES[a] for a in unsplit)
        raise ConfigError(
            key,
            list(mesh),
            f"a mesh that leaves the axes with symmetry planes ({whole}) whole",
            hint=f"it splits {', '.join(split)}; split x instead (domain.mesh=slab)",
        )
    if math.prod(mesh) > devices:
        raise ConfigError(
            key,
            list(mesh),
            f"at most {devices} shards in all",
            hint=f"the mesh needs {math.prod(mesh)} devices but {devices} are available",
        )
    for a, (n, m) in enumerate(zip(shape, mesh, strict=True)):
        if not _fits(n, m):
            raise ConfigError(
                key,
                list(mesh),
                f"shard counts dividing the grid {_fmt(shape)} into blocks of >= "
                f"{MIN_LOCAL_CELLS} cells",
                hint=f"{n} cells along {AXIS_NAMES[a]} do not divide into {m} shards"
                if n % m
                else f"{n} cells along {AXIS_NAMES[a]} over {m} shards leave blocks of "
                f"{n // m} cell(s)",
            )
    return Decomposition(shape, mesh)


def _preset(
    name: str, shape: tuple[int, ...], devices: int, key: str, unsplit: tuple[int, ...] = ()
) -> Decomposition:
    d = len(shape)
    if name == "single" or devices == 1:
        return Decomposition(shape, (1,) * d)
    split_axes = {"slab": 1, "pencil": min(2, d), "block": d, "auto": d}[name]
    candidates = [
        (*f, *(1,) * (d - split_axes))
        for f in _factorisations(devices, split_axes)
        if _divides(shape, (*f, *(1,) * (d - split_axes)))
        and all(((*f, *(1,) * (d - split_axes)))[a] == 1 for a in unsplit)
    ]
    if name in ("pencil", "block"):
        # a pencil splits two axes and a block all of them when the device count allows
        proper = [m for m in candidates if all(x > 1 for x in m[:split_axes])]
        candidates = proper or candidates
    if not candidates:
        raise ConfigError(
            key,
            name,
            f"a mesh of {devices} shards that divides the grid {_fmt(shape)}",
            hint=f"no split of {devices} devices over {split_axes} axes divides it; "
            "give domain.mesh explicitly or change the resolution",
        )
    # ties (64^3 on 8: [2,2,2] and [4,2,1] cut the same area) go to fewer split axes, which
    # means fewer messages per step, then to more shards along x
    best = min(
        candidates,
        key=lambda m: (Decomposition(shape, m).halo_cells(), sum(x > 1 for x in m), m[::-1]),
    )
    return Decomposition(shape, best)


def neighbour_offsets(d: int) -> list[tuple[int, ...]]:
    """The 3^d - 1 offsets to neighbouring shards (faces, edges, corners)."""
    return [o for o in itertools.product((-1, 0, 1), repeat=d) if any(o)]
