"""The native in-place kernel on several devices: the AA pattern's halo, split along x.

On one device the kernel wraps its odd sweep around the block's edges (periodic). Split over a
mesh of slabs along x, each shard sweeps only its own cells, and the two planes beyond its x
faces are ghosts held in a small exchange buffer G of (2, m, ny*nz) (m: the directions with
c_x = +1): G[0] the slots with c_x = -1 at x = -1, G[1] those with c_x = +1 at x = nx, the only
slots of a ghost plane that an odd sweep reads or writes. A pair of steps is four FFI calls
on the state's one buffer, with two messages per neighbour and pair (one per step, as the
pure-JAX step sends):

    EVEN   unpack the neighbours' pushes R (after the first pair), finish the previous pair's
           wall links, even sweep, pack E = the slots the neighbours' odd sweeps read
    E:     G[0] <- the low neighbour's E[0], G[1] <- the high neighbour's E[1]
    ODD    even-side wall links (a solid may sit in a ghost plane), odd sweep reading and
           pushing into G
    O:     R[0] <- the high neighbour's G[0], R[1] <- the low neighbour's G[1]

and the chunk ends with FINISH (unpack, wall links, solids at rest) or, for an odd length,
EVEN, E and TAIL (the last stream as swaps of pairs, every pair with an end in the block, so
both shards swap a crossing pair on equal copies; no message back). The derivation and the
ordering argument are in docs/performance.md ("The in-place scheme on several devices").
Every sweep does the one-device kernel's arithmetic on the same values, so the split chunk
equals the one-device chunk bitwise (tests/test_native_split.py). Chunks of 8 steps or more
run on rotated planes where the block's plane is a multiple of 1 KiB (``plane_shift``, as on
one device): a ROTATE call first, and TAIL or FINISH rotate back.

The wall links of a shard (a solid node s = x - c_k next to a fluid node x) come from the
global geometry on the host: "own" links have x in the block (s anywhere, a ghost included),
"shared" ones have s in the block and x in a ghost plane (needed by the odd tail only). Each
slot is a flat index into the state's (q, *block) buffer, or q n + an index into G.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from solver.distributed.halo import Halo
from solver.fluid.collide import body_force_at
from solver.fluid.inplace_step import ROTATION_MIN_STEPS, link_words, plane_shift
from solver.fluid.native import target_name
from solver.fluid.padded import shift_blocks
from solver.fluid.setup import FluidSetup
from solver.fluid.step import FluidGeometry, FluidState

EVEN, ODD, TAIL, FINISH, ROTATE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class SplitBodies:
    """Bodies in the fluid on the split chunk (solver/coupling/native.py): every EVEN and ODD
    call collides the covered cells of its block with the PSM blend (LbPsmPhase).

    ``entries(extra, time)`` -> (flat (E,) int32, rows (E, width), context): the stencil
    entries' cells in this block and cover rows; ``advance(extra, per_entry, context, time)``
    -> (extra, report): the bodies one fluid step on from the kernel's per-entry moments and
    summed cover (E, 2 width); ``attributes``: the kernel's tau and fraction."""

    width: int
    attributes: dict
    entries: Callable
    advance: Callable


def ghost_directions(setup: FluidSetup) -> tuple[list[int], list[int]]:
    """The directions with c_x = -1 and with c_x = +1, in lattice order (G[0]'s and G[1]'s)."""
    cx = setup.lattice.c[:, 0]
    return [k for k in range(setup.lattice.q) if cx[k] == -1], [
        k for k in range(setup.lattice.q) if cx[k] == 1
    ]


def link_tables(
    setup: FluidSetup, block: Sequence[int], start: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The wall links of the shard whose block (cells per axis) starts at global x ``start``.

    Returns:
        own: (links, 2) int64 (solid slot, fluid slot), x in the block.
        own_ladd: (links,) Ladd's term 6 w_k c_k . u_w(s), lattice units.
        shared: (links, 2) int64, s in the block and x in a ghost plane.
        shared_ladd: (links,).
    """
    lat, shape = setup.lattice, setup.shape
    d, q = lat.d, lat.q
    nx = int(block[0])
    n = math.prod(block)
    plane = n // nx
    minus, plus = ghost_directions(setup)
    m = len(plus)
    # the block's planes with one ghost plane either side (periodic): only these are built
    local = _planes(setup.solid, start, nx, shape[0], 0).astype(bool)  # (nx + 2, *rest)
    wall = None
    if setup.wall_velocity is not None:
        wall = _planes(setup.wall_velocity, start, nx, shape[0], 1)  # (d, nx + 2, *rest)
    rest = local.shape[1:]

    def slot(k: int, lx: np.ndarray, rest_index: np.ndarray) -> np.ndarray:
        """Slots of direction k at local x (-1..nx) and flat rest index."""
        inside = (lx >= 0) & (lx < nx)
        out = k * n + lx * plane + rest_index
        if k in minus:
            ghost = q * n + minus.index(k) * plane + rest_index
            out = np.where(lx < 0, ghost, out)
        if k in plus:
            ghost = q * n + (m + plus.index(k)) * plane + rest_index
            out = np.where(lx >= nx, ghost, out)
        assert np.all(inside | ((lx < 0) & (k in minus)) | ((lx >= nx) & (k in plus)))
        return out.astype(np.int64)

    def ladd(k: int, sx: np.ndarray, s_rest: np.ndarray) -> np.ndarray:
        if wall is None:
            return np.zeros(len(sx))
        u = wall[(slice(None), sx + 1, *np.unravel_index(s_rest, rest))]  # (d, links)
        return 6.0 * float(lat.w[k]) * (lat.c[k].astype(float) @ u)

    tables: dict[str, list] = {"own": [], "own_ladd": [], "shared": [], "shared_ladd": []}
    grid = np.indices((nx + 2, *rest)).reshape(d, -1)
    grid[0] -= 1  # local x: -1 .. nx
    cell_solid = local.ravel()
    cell_rest = np.ravel_multi_index(tuple(grid[1:]), rest) if d > 1 else np.zeros(0)
    real = (grid[0] >= 0) & (grid[0] < nx)
    for k in range(1, q):
        c = lat.c[k].astype(int)
        # the neighbour s = x - c_k of every cell x, in local coordinates (rest periodic)
        sx = grid[0] - c[0]
        s_rest_coords = [(grid[a] - c[a]) % rest[a - 1] for a in range(1, d)]
        s_rest = np.ravel_multi_index(tuple(s_rest_coords), rest)
        valid = (sx >= -1) & (sx <= nx)
        s_solid = np.zeros_like(cell_solid)
        s_solid[valid] = local[(sx[valid] + 1, *[r[valid] for r in s_rest_coords])]
        link = valid & ~cell_solid & s_solid
        opp = int(lat.opposite[k])
        for name, chosen in (
            ("own", link & real),
            ("shared", link & ~real & (sx >= 0) & (sx < nx)),
        ):
            solid_slots = slot(opp, sx[chosen], s_rest[chosen])
            fluid_slots = slot(k, grid[0][chosen], cell_rest[chosen])
            tables[name].append(np.stack([solid_slots, fluid_slots], axis=1))
            tables[name + "_ladd"].append(ladd(k, sx[chosen], s_rest[chosen]))
    return (
        np.concatenate(tables["own"]).astype(np.int64),
        np.concatenate(tables["own_ladd"]),
        np.concatenate(tables["shared"]).astype(np.int64),
        np.concatenate(tables["shared_ladd"]),
    )


class SlabExchange:
    """The AA pattern's two messages on slabs along x, shared by the native and the Pallas
    split: every exchanged buffer holds the c_x = -1 half (the low ghost plane's slots, or this
    block's last plane's) before the c_x = +1 half along its first axis."""

    def __init__(self, halo: Halo, d: int) -> None:
        self.halo = halo
        self.low = (1,) + (0,) * (d - 1)  # from the low neighbour
        self.high = (-1,) + (0,) * (d - 1)  # from the high neighbour

    def move(self, part: Array, offset: tuple[int, ...]) -> Array:
        """``part`` as sent by the neighbour at -offset (unchanged where nothing is split)."""
        route = self.halo.route(offset)
        return shift_blocks(self.halo, [part], route)[0] if any(route) else part

    def read_ghosts(self, e: Array) -> Array:
        """E -> G: the low neighbour's c_x = -1 half, the high neighbour's c_x = +1 half."""
        minus, plus = jnp.split(e, 2)
        return jnp.concatenate([self.move(minus, self.low), self.move(plus, self.high)])

    def return_pushes(self, g: Array) -> Array:
        """G -> R: the high neighbour's pushes into its low ghost, the low one's into its high."""
        minus, plus = jnp.split(g, 2)
        return jnp.concatenate([self.move(minus, self.high), self.move(plus, self.low)])


def _planes(field, start: int, nx: int, extent: int, axis: int) -> np.ndarray:
    """Planes start - 1 .. start + nx of ``field`` along ``axis`` (x), periodic, as one array:
    a lazy field (``GridField``) builds only these."""

    def cut(lo: int, hi: int) -> np.ndarray:
        return np.asarray(field[(slice(None),) * axis + (slice(lo, hi),)])

    low, high = (start - 1) % extent, (start + nx) % extent
    return np.concatenate([cut(low, low + 1), cut(start, start + nx), cut(high, high + 1)], axis)


def _stacked(tables: list[np.ndarray], width: tuple[int, ...]) -> np.ndarray:
    """Per-shard tables padded with zeros to one length and stacked: (shards, longest, *width)
    (a zero link (0, 0) is padding: its two slots are equal)."""
    longest = max(1, *(len(t) for t in tables))
    out = np.zeros((len(tables), longest, *width), tables[0].dtype)
    for i, t in enumerate(tables):
        out[i, : len(t)] = t
    return out


def make_split_chunk(
    setup: FluidSetup,
    block: Sequence[int],
    halo: Halo,
    shard: Callable[[], Array | int],
    shards: int | Sequence[int],
    omega_minus: float,
    les_scale: float,
    bodies: SplitBodies | None = None,
) -> Callable:
    """chunk(state, geometry, n) on this shard's block (cells per axis; the grid split along x
    only into slabs), the signature of ``solver.fluid.step.make_chunk``; with ``bodies``
    chunk(state, geometry, n, extra) -> (state, forces, extra, reports), the signature of
    ``solver.fluid.step.make_coupled_chunk``.

    ``shards``: the number of slabs, every one of which may run this program (inside
    ``shard_map``), or the x indices of the only ones that will (one process per slab: its
    own); ``shard()`` is the position of this shard's among them (traced inside
    ``shard_map``). ``halo`` carries the blocks between the neighbours; the rates are those of
    ``make_inplace_chunk``.
    """
    lat, dtype = setup.lattice, jnp.dtype(setup.dtype)
    stored = jnp.dtype(setup.storage_dtype)
    target = target_name(lat, stored, phases=True, psm=bodies is not None)
    block = tuple(int(b) for b in block)
    nx, plane = block[0], math.prod(block[1:])
    m = len(ghost_directions(setup)[1])
    has_solid = setup.solid is not None and bool(np.any(setup.solid))
    # rotated planes (inplace_step.plane_shift) for chunks of ROTATION_MIN_STEPS or more: the
    # steps run on them, TAIL and FINISH rotate back and take the natural slots
    rotation = plane_shift(setup, ROTATION_MIN_STEPS, block)
    if has_solid:
        slabs = range(shards) if isinstance(shards, int) else shards
        per_shard = [link_tables(setup, block, p * nx) for p in slabs]
        own = _stacked([t[0] for t in per_shard], (2,))
        own_ladd = _stacked([t[1] for t in per_shard], ())
        shared = _stacked([t[2] for t in per_shard], (2,))
        shared_ladd = _stacked([t[3] for t in per_shard], ())
    else:
        count = shards if isinstance(shards, int) else len(shards)
        own = shared = np.zeros((count, 1, 2), np.int64)
        own_ladd = shared_ladd = np.zeros((count, 1))
    natural = (link_words(setup, own, 0, block), link_words(setup, shared, 0, block))
    rotated = natural
    if has_solid and rotation:
        rotated = (link_words(setup, own, rotation, block),
                   link_words(setup, shared, rotation, block))  # fmt: skip
    axes = [0, 1, 2] if lat.d == 3 else [0, 2]
    exchange = SlabExchange(halo, lat.d)

    def chunk(state: FluidState, geometry: FluidGeometry, n: int, extra=None):
        t0 = state.time
        index = shard()
        shift = rotation if n >= ROTATION_MIN_STEPS else 0

        def links_of(slots):
            own_slots, shared_slots = (table[index] for table in slots)
            return [own_slots, jnp.asarray(own_ladd, dtype)[index],
                    shared_slots, jnp.asarray(shared_ladd, dtype)[index]]  # fmt: skip

        step_links = links_of(rotated if shift else natural)
        end_links = links_of(natural) if shift and has_solid else step_links
        solid = geometry.solid if has_solid else jnp.zeros((1,), bool)

        def force(step):
            if setup.body_force is None:
                return jnp.zeros(3, dtype)
            value = jnp.stack(body_force_at(setup, t0 + step)).astype(dtype)
            return jnp.zeros(3, dtype).at[jnp.array(axes)].set(value)

        def phase(a, g, which: int, step, unpack: bool = True, pushes=None, entries=None):
            """One call: (a, g), and with bodies the per-entry results of ``entries`` (flat,
            rows; None: none, in the phases without a sweep) last."""
            pushes = g if pushes is None else pushes
            links = end_links if which in (TAIL, FINISH) else step_links
            outputs = [
                jax.ShapeDtypeStruct(a.shape, stored),
                jax.ShapeDtypeStruct((2, m, plane), stored),
            ]
            extra_args, attributes = [], {}
            if bodies is not None:
                w = bodies.width
                flat, rows = entries or (jnp.zeros((0,), jnp.int32), jnp.zeros((0, w), dtype))
                outputs.append(jax.ShapeDtypeStruct((flat.shape[0], 2 * w), dtype))
                extra_args, attributes = [flat, rows], bodies.attributes
            call = jax.ffi.ffi_call(target, tuple(outputs), input_output_aliases={0: 0, 1: 1})
            out = call(
                a, g, solid, *links, force(step), pushes, *extra_args,
                phase=np.int64(which), unpack=np.int64(unpack), shift=np.int64(shift),
                omega_plus=np.float64(setup.omega), omega_minus=np.float64(omega_minus),
                walls=np.int64(has_solid), force=np.int64(setup.body_force is not None),
                les_scale=np.float64(les_scale),
                trt_magic=np.float64(setup.trt_magic if setup.collision == "trt" else -1.0),
                **attributes,
            )  # fmt: skip
            return out if entries is not None else out[:2]

        def swept(a, g, which: int, step, unpack: bool, pushes, extra):
            """An EVEN or ODD call: (a, g, extra, report), the bodies moved by it (no bodies:
            extra and report None)."""
            if bodies is None:
                a, g = phase(a, g, which, step, unpack, pushes)
                return a, g, extra, None
            flat, rows, context = bodies.entries(extra, t0 + step)
            a, g, per_entry = phase(a, g, which, step, unpack, pushes, (flat, rows))
            extra, report = bodies.advance(extra, per_entry, context, t0 + step)
            return a, g, extra, report

        # the carry: populations, the neighbours' pushes R and this shard's own (the wall
        # links of the previous odd sweep read them), the bodies
        def pair(a, r, pushed, extra, step, unpack: bool):
            a, e, extra, r1 = swept(a, r, EVEN, step, unpack, pushed, extra)
            a, g, extra, r2 = swept(a, exchange.read_ghosts(e), ODD, step + 1, True, None, extra)
            reports = (
                None if bodies is None else jax.tree.map(lambda u, v: jnp.stack([u, v]), r1, r2)
            )
            return (a, exchange.return_pushes(g), g, extra), reports

        a = state.populations
        r = pushed = jnp.zeros((2, m, plane), stored)
        if shift:
            a, _ = phase(a, r, ROTATE, 0)
        reports = []
        pairs = n // 2
        if pairs:
            (a, r, pushed, extra), first = pair(a, r, pushed, extra, 0, unpack=False)
            reports.append(first)
        if pairs > 1:
            (a, r, pushed, extra), paired = jax.lax.scan(
                lambda c, p: pair(*c, 2 * p, True),
                (a, r, pushed, extra),
                jnp.arange(1, pairs, dtype=jnp.int32),
            )
            if bodies is not None:
                reports.append(jax.tree.map(lambda u: u.reshape((-1, *u.shape[2:])), paired))
        if n % 2:
            a, e, extra, last = swept(a, r, EVEN, n - 1, pairs > 0, pushed, extra)
            a, _ = phase(a, exchange.read_ghosts(e), TAIL, n - 1)
            if bodies is not None:
                reports.append(jax.tree.map(lambda u: u[None], last))
        else:
            a, _ = phase(a, r, FINISH, n - 1, True, pushed)
        new_state = FluidState(populations=a, time=t0 + n)
        forces = jnp.zeros((n, setup.force_width), dtype)
        if bodies is None:
            return new_state, forces
        return new_state, forces, extra, jax.tree.map(lambda *u: jnp.concatenate(u), *reports)

    return chunk
