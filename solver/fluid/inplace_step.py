"""The fluid chunk on one population buffer: the native in-place kernel (``fluid.kernel=native``).

kernels/native/lb_inplace.cc advances the populations in place with the AA access pattern (an
even, local step and an odd step that pulls from and pushes to the neighbours), so the chunk
holds the state's one (q, *shape) buffer and nothing else: XLA aliases the state it is given
(donated by the run loop) with the result, and the peak device memory is the state itself plus
the geometry (docs/performance.md, "One population buffer"). Between chunks the state is the
one the pure-JAX step keeps (pre-collision populations at the chunk's time, solid nodes at
rest), so outputs, checkpoints and the health check see no difference; the pure-JAX chunk
(solver/fluid/step.py) is the reference the kernel must equal to round-off (tests/
test_native_kernel.py).

What the kernel covers: D2Q9, D3Q19, D3Q27; BGK and TRT, either with the Smagorinsky subgrid
model (the closed form of kernels/collision.py); float32 and float64
(stored as computed) and float16 storage with float32 compute ((f - w) * 2^15,
kernels/storage.py);
periodic edges, half-way bounce-back on resting and moving (Ladd) walls; a body force, constant
or periodic in time (Guo). Anything else is refused by ``unsupported`` with the reason, before
anything is traced. On several devices the grid is split along x into slabs and the AA
pattern's ghost planes travel between the kernel's phases (solver/fluid/inplace_split.py). The
GPU's
one-buffer kernel (``fluid.kernel=pallas``, solver/fluid/pallas_step.py) covers the same
physics and is checked by the same ``unsupported`` and ``require_kernel``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from kernels.collision import trt_omega_minus
from kernels.pallas_lb import MAX_CELLS as PALLAS_MAX_CELLS
from solver.errors import ConfigError
from solver.fluid.collide import body_force_at
from solver.fluid.config import KERNEL_STORAGES
from solver.fluid.native import target_name
from solver.fluid.setup import FluidSetup
from solver.fluid.step import FluidGeometry, FluidState

COLLISIONS = ("bgk", "trt")
# per one-buffer kernel: its name in messages, and the 16-bit storages it keeps besides f
ONE_BUFFER_KERNELS = {
    "native": ("the native kernel", KERNEL_STORAGES["native"]),
    "pallas": ("the Pallas kernel", KERNEL_STORAGES["pallas"]),
    "cuda": ("the CUDA kernel", KERNEL_STORAGES["cuda"]),
}
# the CUDA kernel's launch grid holds the grid's x and y (kernels/native/lb_gpu.cu)
CUDA_MAX_EXTENT = 65535


def unsupported(setup: FluidSetup, kernel: str = "native") -> str | None:
    """Why the one-buffer ``kernel`` ("native", "pallas" or "cuda") cannot run ``setup`` (one
    line), or None when it can. All cover the same physics (module docstring)."""
    name, shifted = ONE_BUFFER_KERNELS[kernel]
    if setup.collision not in COLLISIONS:
        return f"collision {setup.collision!r} ({name} has {' and '.join(COLLISIONS)})"
    if setup.storage_dtype not in (setup.dtype, *shifted):
        return f"storage {setup.storage_dtype!r} ({name} stores f, or {' or '.join(shifted)})"
    if setup.open_boundaries:
        return "open boundaries (inlets and outlets are XLA-step boundary rules)"
    if setup.wall_distance is not None:
        return "curved (Bouzidi) walls"
    if setup.obstacle is not None and bool(np.any(setup.obstacle)):
        return "a measured obstacle force (the momentum exchange is an XLA-step part)"
    if setup.sponge is not None:
        return "a sponge layer"
    if setup.mirror_axes:
        return "symmetry planes (their ghosts mirror the edge planes in the XLA step)"
    if kernel == "pallas" and setup.cells > PALLAS_MAX_CELLS:
        return f"{setup.cells} cells (the Pallas kernel indexes at most {PALLAS_MAX_CELLS})"
    if kernel == "cuda" and max(kernel_grid(setup)[:2]) > CUDA_MAX_EXTENT:
        extent = CUDA_MAX_EXTENT
        return f"a grid of {setup.shape} (the CUDA kernel takes x and y extents <= {extent})"
    return None


def require_kernel(
    setup: FluidSetup,
    kernel: str | None = None,
    shards: int = 1,
    coupled: bool = False,
    mesh: tuple[int, ...] | None = None,
) -> None:
    """Raise a ConfigError on fluid.kernel when the one-buffer ``kernel`` (default: the
    setup's) cannot run this set-up on ``shards`` devices split as ``mesh`` (shards per axis;
    the one-buffer kernels split x only), with bodies when ``coupled`` (the native kernel's
    coupled step: replicated or owned bodies, on one device or on slabs)."""
    kernel = setup.kernel if kernel is None else kernel
    reason = unsupported(setup, kernel)
    backend = jax.default_backend()
    if reason is None and kernel == "native" and backend != "cpu":
        reason = f"the {backend} back end (the native kernel is a CPU kernel)"
    if reason is None and kernel == "pallas" and backend not in ("cpu", "gpu"):
        reason = f"the {backend} back end (the Pallas kernel is a Triton kernel for GPUs)"
    if reason is None and kernel == "cuda" and backend not in ("cpu", "gpu"):
        reason = f"the {backend} back end (the CUDA kernel runs on NVIDIA GPUs)"
    if reason is None and kernel == "cuda" and shards > 1:
        reason = f"{shards} devices (the CUDA kernel runs on one device)"
    if reason is None and kernel == "cuda" and backend == "gpu":
        from solver.fluid.cuda import nvcc

        if nvcc() is None:
            reason = ("a machine without nvcc (the CUDA kernel is compiled at its first run: "
                      "put CUDA's bin/ on the PATH or set $NVCC)")  # fmt: skip
    if reason is None and shards > 1 and (mesh is None or any(m > 1 for m in mesh[1:])):
        shown = "x".join(str(m) for m in mesh) if mesh else str(shards)
        reason = (
            f"a mesh of {shards} devices split as {shown} (the one-buffer kernels split the x "
            "axis only: domain.mesh=slab)"
        )
    if reason is None and coupled and kernel in ("pallas", "cuda"):
        name = ONE_BUFFER_KERNELS[kernel][0]
        reason = f"bodies in the fluid ({name} has no coupled collision)"
    if reason is not None:
        raise ConfigError("fluid.kernel", kernel, f"xla for {reason}")


def require_native(setup: FluidSetup, shards: int = 1, coupled: bool = False) -> None:
    """Raise a ConfigError on fluid.kernel when the native kernel cannot run this set-up."""
    require_kernel(setup, "native", shards, coupled)


def solid_links(setup: FluidSetup) -> tuple[np.ndarray, np.ndarray]:
    """The links from solid nodes s = x - c_k into fluid nodes x, for the kernel's repairs.

    Returns:
        slots: (links, 2) int64, the flat indices into the (q, *shape) populations of the
            solid slot opp(k) * n + s and the fluid slot k * n + x.
        ladd: (links,) Ladd's term 6 w_k c_k . u_w(s) (lattice units; 0 on resting walls), the
            same formula as the pure-JAX step's moving-wall rule.
    """
    lat, shape = setup.lattice, setup.shape
    n = int(np.prod(shape))
    solid = np.asarray(setup.solid, bool)
    flat = np.arange(n, dtype=np.int64).reshape(shape)
    slots, ladd = [], []
    for k in range(1, lat.q):
        c = tuple(int(v) for v in lat.c[k])
        upstream_solid = np.roll(solid, c, axis=tuple(range(lat.d)))  # solid[x - c_k]
        fluid = np.nonzero((~solid & upstream_solid).ravel())[0]
        source = np.roll(flat, c, axis=tuple(range(lat.d))).ravel()[fluid]  # flat(x - c_k)
        slots.append(np.stack([int(lat.opposite[k]) * n + source, k * n + fluid], axis=1))
        term = np.zeros(len(fluid))
        if setup.wall_velocity is not None:
            wall = np.asarray(setup.wall_velocity).reshape(lat.d, n)[:, source]
            term = 6.0 * float(lat.w[k]) * (lat.c[k].astype(float) @ wall)
        ladd.append(term)
    return np.concatenate(slots).astype(np.int64), np.concatenate(ladd)


# Rotated planes (kernels/native/lb_inplace.cc Grid::shift): the shortest chunk worth it
# (rotating in and out costs about two sweeps' memory traffic: docs/performance.md, "Rotated
# planes"), and the distance in bytes that direction k's plane is moved by, k times, where rows
# are a multiple of 512 bytes
ROTATION_MIN_STEPS = 8
ROTATION_BYTES = 32 * 1024


def kernel_grid(setup: FluidSetup, shape: tuple[int, ...] | None = None) -> tuple[int, int, int]:
    """(nx, ny, nz): the native kernel's 3D grid for ``shape`` (None: the setup's; a 2D
    lattice's (x, y) is its (x, z))."""
    shape = tuple(setup.shape if shape is None else shape)
    return (shape[0], shape[1], shape[2]) if len(shape) == 3 else (shape[0], 1, shape[1])


def plane_shift(setup: FluidSetup, steps: int, shape: tuple[int, ...] | None = None) -> int:
    """Rows by which the native kernel shifts direction k's plane (k times this) for a chunk
    of ``steps`` steps on ``shape`` (None: the setup's grid; a shard's block on several
    devices), 0 for the natural layout: where a plane is a multiple of 1 KiB, 1 row, or,
    where a row is a multiple of 512 bytes, the odd number of rows nearest above
    ``ROTATION_BYTES``; at most the largest odd shift that keeps q times it below the
    plane's rows. Short chunks keep the natural layout.

    Why: the q planes are n cells apart, so where n times the stored size is a multiple of a
    large power of two, a cell's q copies fall into one set of the L1 and L2 caches and evict
    each other (D3Q19 float32 on this CPU: 129 MLUPS at 128^3, 204 at 127^3). Shifted by k
    rows, copy k moves k rows' bytes on. With rows of 512 bytes or more, one row is too short
    a step: copy k's row y + 1 met copy k + 1's row y, and all copies fell into a few sets of
    the L1 (measured at 256^3: 184 MLUPS with 1 row, 240 with 17 or 33; docs/performance.md,
    "Rotated planes")."""
    nx, ny, nz = kernel_grid(setup, shape)
    item = np.dtype(setup.storage_dtype).itemsize
    if nx * ny * nz * item % 1024 or steps < ROTATION_MIN_STEPS:
        return 0
    row = nz * item
    want = 1 if row % 512 else -(-ROTATION_BYTES // row) | 1  # odd: not a power of two
    most = (nx * ny - 1) // setup.lattice.q  # every direction's shift below the plane's rows
    most -= 1 - most % 2
    return max(min(want, most), 0)


def rotated_slots(
    setup: FluidSetup, slots: np.ndarray, shift: int, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """Flat slots k n + cell of the (q, *shape) populations (any shape of int64; ``shape``
    None: the setup's grid) as the slots of the planes rotated by ``shift`` rows per
    direction (``plane_shift``). Slots from q n on (a shard's ghost buffer, on several
    devices) are not the planes' and stay."""
    if shift == 0:
        return slots
    nx, ny, nz = kernel_grid(setup, shape)
    n, rows = nx * ny * nz, nx * ny
    k, cell = np.divmod(slots, n)
    rotated = k * n + ((cell // nz + k * shift) % rows) * nz + cell % nz
    return np.where(slots < setup.lattice.q * n, rotated, slots)


def link_words(
    setup: FluidSetup, slots: np.ndarray, shift: int, shape: tuple[int, ...] | None = None
) -> Array:
    """The links' slots (..., 2) int64 as the kernel takes them for planes rotated by
    ``shift`` (on ``shape``: None, the setup's grid; a shard's block): their uint32 words (JAX
    holds no int64 without x64 mode; the kernel reads the same bytes as int64)."""
    rotated = rotated_slots(setup, slots, shift, shape)
    return jnp.asarray(np.ascontiguousarray(rotated).view(np.uint32))


def kernel_rates(setup: FluidSetup) -> tuple[float, float]:
    """(omega_minus, les_scale) as the kernel takes them: TRT's odd rate (BGK: omega), and the
    Smagorinsky scale 18 sqrt(2) C_s^2 of kernels/collision.py (0: no subgrid model; TRT keeps
    Lambda under it)."""
    omega_minus = setup.omega
    if setup.collision == "trt":
        omega_minus = trt_omega_minus(setup.omega, setup.trt_magic)
    les_scale = 18.0 * math.sqrt(2.0) * setup.les_cs**2 if setup.les == "smagorinsky" else 0.0
    return omega_minus, les_scale


def kernel_attributes(setup: FluidSetup, walls: bool) -> dict:
    """The collision attributes every native handler takes (kernels/native/lb_inplace.cc):
    the rates, whether it has walls and a body force, the LES scale, and TRT's Lambda (< 0:
    BGK)."""
    omega_minus, les_scale = kernel_rates(setup)
    return dict(
        omega_plus=np.float64(setup.omega),
        omega_minus=np.float64(omega_minus),
        walls=np.int64(walls),
        force=np.int64(setup.body_force is not None),
        les_scale=np.float64(les_scale),
        trt_magic=np.float64(setup.trt_magic if setup.collision == "trt" else -1.0),
    )


def make_inplace_chunk(
    setup: FluidSetup,
    kernel: str = "native",
    block: int | None = None,
    emulate: bool | None = None,
) -> Callable[[FluidState, FluidGeometry, int], tuple[FluidState, Array]]:
    """chunk(state, geometry, n) -> (state after n steps, forces (n, force_width) of zeros),
    the signature of ``solver.fluid.step.make_chunk`` on one device.

    ``kernel``: "native" (the CPU kernel) or "cuda" (kernels/native/lb_gpu.cu: the same
    scheme, arguments and results on a GPU), with ``block`` threads per CUDA block along z
    (None: solver.fluid.cuda.BLOCK); ``emulate`` True calls the CUDA kernel's CPU emulation,
    False the CUDA build (None: the emulation on the CPU back end).

    Raises:
        ValueError: the kernel does not cover the setup (``unsupported``).
    """
    reason = unsupported(setup, kernel)
    if reason is not None:
        raise ValueError(f"fluid.kernel={kernel} does not support {reason}")
    lat, dtype = setup.lattice, jnp.dtype(setup.dtype)
    stored = jnp.dtype(setup.storage_dtype)
    extra = {}
    if kernel == "cuda":
        from solver.fluid import cuda

        target = cuda.target_name(lat, stored, emulate)
        extra["block"] = np.int64(cuda.BLOCK if block is None else block)
    else:
        target = target_name(lat, stored)
    has_solid = setup.solid is not None and bool(np.any(setup.solid))
    slots, ladd = solid_links(setup) if has_solid else (np.zeros((0, 2), np.int64), np.zeros(0))
    # the kernel's grid is 3D: a 2D force (F_x, F_y) acts along its axes (x, z)
    axes = [0, 1, 2] if lat.d == 3 else [0, 2]

    def chunk(state: FluidState, geometry: FluidGeometry, n: int):
        t0 = state.time
        shift = plane_shift(setup, n) if kernel == "native" else 0  # a CPU cache remedy
        forces = jnp.zeros((1, 3), dtype)
        if setup.body_force is not None:
            times = t0 + jnp.arange(n, dtype=jnp.int32)
            per_step = jax.vmap(lambda t: jnp.stack(body_force_at(setup, t)))(times)
            per_step = jnp.broadcast_to(per_step, (n, lat.d)).astype(dtype)
            forces = jnp.zeros((n, 3), dtype).at[:, axes].set(per_step)
        solid = geometry.solid if has_solid else jnp.zeros((1,), bool)
        call = jax.ffi.ffi_call(
            target,
            jax.ShapeDtypeStruct(state.populations.shape, stored),
            input_output_aliases={0: 0},
        )
        populations = call(
            state.populations,
            solid,
            link_words(setup, slots, shift),
            jnp.asarray(ladd, dtype),
            forces,
            steps=np.int64(n),
            shift=np.int64(shift),
            **kernel_attributes(setup, has_solid),
            **extra,
        )
        new_state = FluidState(populations=populations, time=t0 + n)
        return new_state, jnp.zeros((n, setup.force_width), dtype)

    return chunk
