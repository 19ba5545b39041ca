"""How much memory a fluid run needs, estimated from the validated config before any array exists.

A grid too large for the machine otherwise fails deep inside NumPy or XLA after a long
allocation (``ArrayMemoryError: Unable to allocate 149 GiB``). ``check_fits`` runs at the start
of ``build_case`` and refuses such a grid with a ConfigError naming ``case.resolution``, the
figures, and the largest resolution that fits.

The estimate follows what the code allocates, in bytes, for N cells, d dimensions, q directions
and the populations' item size s (4 for float32, 8 for float64):

host (NumPy, float64 as the case builders allocate):
    case arrays      8 (1 + d) N for the initial density and velocity, N for the solid mask,
                     8 d N for moving-wall velocities, 8 q N + N for a curved obstacle's link
                     fractions and mask (``solver.fluid.cases``);
    builder scratch  what a builder holds on top of them at its peak (the analytic Taylor-Green
                     fields, the cylinder's link-fraction temporaries);
    output           the gathered final density and velocity in lattice and SI units, float64.
With several processes the case arrays and the builder's scratch are a process's blocks (its
L cells per shard; the grid fields are built per block, ``solver.fluid.setup.GridField``, and
placed a slab at a time, so the scratch is at most a slab's; the ``geometry`` case's voxeliser
too, ``solver.fluid.geometry.columns``); the output is the whole grid up to
``output.gather_cells`` (process 0 gathers the final fields for the case's diagnostics and the
PNG), above it one plane.
device (per shard of L cells, Lp = L with one ghost layer on every face; ``solver.fluid.step``):
    populations      the state, the chunk's padded buffers (two; one beside the scratch
                     buffers of materialised streaming: curved walls, open boundaries, force
                     measurement) and the wall rules' temporaries: s q (1 + b Lp / L + extra) L
                     with b = 2, or 1 with a curved obstacle; with
                     fluid.kernel=native the state alone, s q L, plus the solid mask and the
                     wall links (solver/fluid/inplace_step.py); with fluid.kernel=pallas the
                     state alone plus the solid mask and the wall velocities
                     (solver/fluid/pallas_step.py);
    geometry         masks and wall arrays, unpadded and padded; the (d + 1) moments.
Checked against a built case and XLA's compiled-memory figures in tests/test_fluid_memory.py
(within a factor of 2 either way). On the CPU the devices' arrays live in host memory too.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernels.lattices import LATTICES
from solver.errors import ConfigError
from solver.fluid.grid_field import SLAB_CELLS

F64 = 8  # bytes of a float64: the case builders' NumPy arrays
# cases whose set-up builds whole-grid arrays on every process (the STL voxeliser)
WHOLE_GRID_SETUP: tuple[str, ...] = ()  # cases whose set-up is not built per block


@dataclass(frozen=True)
class Footprint:
    """Which arrays a case builds, beyond the initial density and velocity.

    Attributes:
        solid: a solid mask (walls).
        wall_velocity: moving walls, (d, *shape) float64.
        curved: a curved obstacle: link fractions (q, *shape) float64 and an obstacle mask;
            the step then materialises the streamed populations.
        scratch: float64 fields per cell the builder holds at its peak on top of its arrays,
            as a function of the dimension.
        coupled: bodies in the fluid (solver.coupling): the step's solid fraction, solid
            velocity, weight and force fields, 2 d + 2 per cell.
    """

    solid: bool = True
    wall_velocity: bool = False
    curved: bool = False
    scratch: Callable[[int], float] = lambda d: 0.0
    coupled: bool = False


FOOTPRINTS: dict[str, Footprint] = {
    # circle_link_fractions: index grids, offsets, the quadratic's terms (measured peak ~9.4)
    "cylinder": Footprint(curved=True, scratch=lambda d: 10.0),
    # the analytic fields: coordinate grids (d), components and pressure (d + 1), their stack
    # (d), lattice-unit copies (d + 1): about 4 d
    "taylor_green": Footprint(solid=False, scratch=lambda d: 4.0 * d),
    "poiseuille": Footprint(),
    "couette": Footprint(wall_velocity=True),
    "cavity": Footprint(wall_velocity=True),
    "duct": Footprint(),
    # the voxeliser's winding-number sums (float64 counts, int16 sums) and the body's mask
    "geometry": Footprint(curved=True, scratch=lambda d: 2.0),
    "settling_sphere": Footprint(coupled=True),
    "wet_bounce": Footprint(coupled=True),
    "sphere_array": Footprint(solid=False, coupled=True),
    "dkt": Footprint(coupled=True),
    "sediment": Footprint(coupled=True),
}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a fluid run needs (see the module docstring).

    Attributes:
        shape: the global grid.
        shards: devices the grid is split over.
        host_case: the case's arrays as the builder returns them.
        host_scratch: the builder's temporaries on top of them, at its peak.
        host_output: the gathered final fields (lattice and SI units).
        device: the largest shard's arrays on one device during a chunk.
    """

    shape: tuple[int, ...]
    shards: int
    host_case: int
    host_scratch: int
    host_output: int
    device: int

    @property
    def host(self) -> int:
        """Peak host bytes: the case's arrays plus the larger of the builder's scratch and the
        final output (the two are never held together)."""
        return self.host_case + max(self.host_scratch, self.host_output)


def estimate(
    config, shape: tuple[int, ...], mesh: tuple[int, ...] | None = None, processes: int = 1
) -> MemoryEstimate:
    """The memory a run of the fluid case ``config.case`` needs on a grid of ``shape`` split
    into equal blocks by ``mesh`` (shards per axis; None: one device) over ``processes``
    processes (host figures per process)."""
    lattice = LATTICES[config.fluid.lattice]
    d, q = lattice.d, lattice.q
    itemsize = 8 if config.fluid.precision == "float64" else 4
    footprint = FOOTPRINTS[config.case.name]
    cells = math.prod(shape)
    mesh = tuple(mesh) if mesh is not None else (1,) * len(shape)

    block = [max(1, -(-n // m)) for n, m in zip(shape, mesh, strict=True)]
    local = math.prod(block)
    # the cells whose set-up arrays a process builds: the whole grid on one process, its own
    # blocks (and a slab's scratch) with several, except for the whole-grid voxeliser
    built = cells
    scratch_cells = cells
    if processes > 1 and config.case.name not in WHOLE_GRID_SETUP:
        built = min(cells, local * max(1, math.prod(mesh) // processes))
        scratch_cells = min(built, SLAB_CELLS)
    host_case = F64 * (1 + d) * built
    if footprint.solid:
        host_case += built
    if footprint.wall_velocity:
        host_case += F64 * d * built
    if footprint.curved:
        host_case += F64 * q * built + built
    host_scratch = int(F64 * footprint.scratch(d) * scratch_cells)
    # process 0 gathers the final fields, up to output.gather_cells (above: the PNG's plane)
    output = getattr(config, "output", None)
    gathered = cells if output is None or cells <= output.gather_cells else cells // shape[-1]
    host_output = 2 * F64 * (1 + d) * gathered
    padded = math.prod(n + 2 for n in block)
    # the state and the padded buffers hold the stored form (fluid.storage: 2 bytes for the
    # 16-bit formats); temporaries and scratch buffers hold decoded compute values. A curved
    # obstacle's plan materialises the pull: one padded buffer beside the scratch buffers
    stored = 2 if config.fluid.storage in ("float16", "bfloat16") else itemsize
    held = 1.0 + (1.0 if footprint.curved else 2.0) * padded / local
    copies = 0.0
    if footprint.solid:
        copies += 1.0  # the wall rules' temporaries
    if footprint.curved:
        copies += 1.0  # the scratch buffers of the materialised pull (compute dtype)
    device = (stored * held + itemsize * copies) * q * local + itemsize * (d + 1) * local
    if footprint.solid:
        device += local + padded
    if footprint.wall_velocity:
        device += itemsize * d * (local + padded)
    if getattr(config.fluid, "kernel", "xla") in ("native", "cuda"):
        # the in-place kernels (the CPU's, and its scheme on GPUs) hold the state alone
        # (aliased in and out), the solid mask and its wall links (16 bytes of slots and one
        # Ladd term each; at most q - 1 per fluid node next to a wall: counted as if one node
        # in eight were)
        device = stored * q * local
        if footprint.solid:
            device += local + (16 + itemsize) * (q - 1) * local // 8
    elif getattr(config.fluid, "kernel", "xla") == "pallas":
        # the GPU kernel holds the state alone (aliased in and out of every sweep), the solid
        # mask and the moving walls' velocities, which its sweeps read where they need them
        device = stored * q * local
        if footprint.solid:
            device += local
        if footprint.wall_velocity:
            device += itemsize * d * local
    if footprint.curved:
        # the link fractions (unpadded), the obstacle's mask (padded and not)
        device += itemsize * q * local + local + padded
    if footprint.coupled:
        device += itemsize * (2 * d + 2) * local
    return MemoryEstimate(
        tuple(int(n) for n in shape),
        math.prod(mesh),
        int(host_case),
        int(host_scratch),
        int(host_output),
        int(device),
    )


# --------------------------------------------------------------------- what is available


def _meminfo_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Room left under this container's memory limit (cgroup v2, else v1), if it has one."""
    for limit_file, usage_file in (
        (root / "memory.max", root / "memory.current"),
        (root / "memory" / "memory.limit_in_bytes", root / "memory" / "memory.usage_in_bytes"),
    ):
        try:
            limit = limit_file.read_text().strip()
            usage = int(usage_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:  # "max" or a huge v1 value: no limit
            return max(0, int(limit) - usage)
    return None


def host_available() -> int | None:
    """Bytes of host memory a new allocation can get: /proc/meminfo's MemAvailable (else the
    free pages), capped by a container's memory limit. None if nothing can be read."""
    available = _meminfo_available()
    if available is None:
        try:
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (OSError, ValueError, AttributeError):
            available = None
    limit = _cgroup_available()
    if limit is not None:
        available = limit if available is None else min(available, limit)
    return available


def device_available() -> int | None:
    """Bytes free on the fullest local accelerator (``memory_stats``' bytes_limit minus
    bytes_in_use); None where devices report no limit (the CPU: its arrays use host memory)."""
    import jax

    free = []
    for device in jax.local_devices():
        try:
            stats = device.memory_stats()
        except Exception:  # backends without memory statistics raise or return None
            stats = None
        if not stats or "bytes_limit" not in stats:
            return None
        free.append(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))
    return min(free) if free else None


# --------------------------------------------------------------------- the check


def size(value: float) -> str:
    """Bytes as a short binary figure: '149 GiB', '2.1 TiB', '640 MiB'."""
    for unit, power in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if value >= 1 << power:
            figure = value / (1 << power)
            return f"{figure:.2g} {unit}" if figure < 10 else f"{figure:.0f} {unit}"
    return f"{int(value)} B"


@dataclass(frozen=True)
class Available:
    """Bytes free now: host memory, and per accelerator (None on the CPU)."""

    host: int | None
    device: int | None
    local_shards: int  # shards this process holds (their arrays share host memory on the CPU)

    def fits(self, need: MemoryEstimate) -> bool:
        if self.device is None:  # CPU devices: everything is host memory
            total = need.host + need.device * self.local_shards
            return self.host is None or total <= self.host
        host_ok = self.host is None or need.host <= self.host
        return host_ok and need.device <= self.device

    def describe(self, need: MemoryEstimate) -> str:
        grid = " x ".join(str(n) for n in need.shape)
        if self.device is None:
            total = need.host + need.device * self.local_shards
            devices = "" if self.local_shards == 1 else f" x {self.local_shards} CPU devices"
            return (
                f"the {grid} grid needs about {size(total)} of memory ({size(need.host)} of "
                f"fields on the host and {size(need.device)} of populations{devices}), "
                f"{size(self.host)} available"
            )
        return (
            f"the {grid} grid needs about {size(need.host)} on the host and "
            f"{size(need.device)} per device ({need.shards} device(s)); "
            f"{size(self.host) if self.host is not None else '?'} available on the host, "
            f"{size(self.device)} per device"
        )


def _mesh(config, shape: tuple[int, ...], devices: int | None = None) -> tuple[int, ...]:
    """The mesh the run will use (``domain.mesh`` on ``devices``, default JAX's device count);
    one device where that mesh is invalid (the distribution reports it when the run starts)."""
    import jax

    from solver.distributed.decomposition import choose_mesh

    try:
        count = jax.device_count() if devices is None else devices
        return choose_mesh(config.domain.mesh, shape, count).mesh
    except ConfigError:
        return (1,) * len(shape)


def available_now(shards: int, processes: int | None = None) -> Available:
    """What this process can allocate now, holding ``shards`` of the grid's blocks in all over
    ``processes`` processes (default JAX's process count)."""
    import jax

    processes = jax.process_count() if processes is None else processes
    local = max(1, shards // max(1, processes))
    return Available(host_available(), device_available(), local)


def check_fits(
    config,
    grid_shape: Callable[[object], tuple[int, ...]],
    available: Available | None = None,
    mesh: tuple[int, ...] | None = None,
    processes: int = 1,
    devices: int | None = None,
) -> MemoryEstimate:
    """Refuse a fluid case whose arrays cannot fit in the memory available now.

    ``grid_shape(config)`` is the case's grid, computed the way its builder does; ``mesh`` and
    ``available`` default to the run's device mesh (``domain.mesh`` on ``devices``, default
    JAX's) and what this machine has free now; ``processes`` share the grid (the runtime's
    process count: the host figures are one process's).

    Raises:
        ConfigError: ``case.resolution``, with the figures and the largest resolution that fits.
    """
    shape = tuple(grid_shape(config))
    mesh = _mesh(config, shape, devices) if mesh is None else tuple(mesh)
    if available is None:
        available = available_now(math.prod(mesh), processes)
    need = estimate(config, shape, mesh, processes)
    if available.fits(need):
        return need
    resolution = config.case.resolution

    def fits(r: int) -> bool:
        smaller = dataclasses.replace(config, case=dataclasses.replace(config.case, resolution=r))
        return available.fits(estimate(smaller, tuple(grid_shape(smaller)), mesh, processes))

    low, high = 0, resolution  # fits(low) or low == 0; not fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    allowed = f"<= {low} on this machine" if low >= 1 else "a grid that fits in memory"
    raise ConfigError("case.resolution", resolution, allowed, hint=available.describe(need))
