"""The Pallas kernel on several devices: the AA pattern's halo, split along x.

The scheme of the native kernel's split (solver/fluid/inplace_split.py, docs/performance.md,
"The in-place scheme on several devices"), with the Pallas kernel's walls (a solid mask read in
the sweeps, no link repairs): the ghost planes beyond a slab's x faces live in an exchange
buffer G (2 m, plane) (m: the directions with c_x = +1); per pair of steps

    EVEN   even sweep; where a neighbour pushed into this block (R, after the first pair) and
           the pushing node is fluid, the sweep reads R instead of A (a solid neighbour pushed
           nothing: the bounce-back the odd sweep left in A stands)
    E:     G[0] <- the low neighbour's plane nx-1 (c_x = -1 slots), G[1] <- the high
           neighbour's plane 0 (c_x = +1 slots)
    ODD    odd sweep, reading G and pushing into it
    O:     R[0] <- the high neighbour's G[0], R[1] <- the low neighbour's G[1]

and ``finish`` ends the chunk: for an even length it takes R into A (where the pushing node is
fluid) and puts solid nodes at rest; for an odd length (after EVEN and E) it streams by swapping
pairs, a pair with an end in a ghost plane completed on this side from G. The ghost planes'
solid mask and wall velocity come from the neighbours once per chunk. Every sweep does the
one-device arithmetic on the same values, so the split chunk equals one device bitwise
(tests/test_pallas_split.py, interpret mode).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import jax.numpy as jnp
from jax import Array, lax

from kernels.pallas_lb import finish, sweep
from solver.distributed.halo import Halo
from solver.fluid.inplace_split import SlabExchange
from solver.fluid.pallas_step import BLOCK, force_at_step, sweep_spec
from solver.fluid.setup import FluidSetup
from solver.fluid.step import FluidGeometry, FluidState


def make_pallas_split_chunk(
    setup: FluidSetup,
    block: Sequence[int],
    halo: Halo,
    cells_per_program: int = BLOCK,
    interpret: bool | None = None,
) -> Callable[[FluidState, FluidGeometry, int], tuple[FluidState, Array]]:
    """chunk(state, geometry, n) on this shard's ``block`` (cells per axis; the grid split along
    x only), the signature of ``solver.fluid.step.make_chunk``; ``halo`` carries the blocks
    between the neighbours."""
    spec = replace(
        sweep_spec(setup, cells_per_program, interpret),
        shape=tuple(int(b) for b in block),
        split=True,
    )
    spec.check()
    lat, dtype = setup.lattice, jnp.dtype(setup.dtype)
    nx, plane, cells = spec.shape[0], spec.plane, spec.cells
    minus = [k for k in range(lat.q) if lat.c[k][0] == -1]
    plus = [k for k in range(lat.q) if lat.c[k][0] == 1]
    force_at = force_at_step(setup, dtype)
    exchange = SlabExchange(halo, lat.d)
    read_ghosts, return_pushes = exchange.read_ghosts, exchange.return_pushes

    def ghost_planes(field: Array) -> Array:
        """(..., n) -> (2, ..., plane): the low neighbour's last plane, the high one's first."""
        planes = field.reshape(*field.shape[:-1], nx, plane)
        return jnp.stack([exchange.move(planes[..., -1, :], exchange.low),
                          exchange.move(planes[..., 0, :], exchange.high)])  # fmt: skip

    def pack(a: Array) -> Array:
        """E: plane nx-1's slots with c_x = -1, plane 0's with c_x = +1 (2 m, plane)."""
        last = [lax.slice(a, (k, (nx - 1) * plane), (k + 1, nx * plane)) for k in minus]
        first = [lax.slice(a, (k, 0), (k + 1, plane)) for k in plus]
        return jnp.concatenate(last + first)

    def chunk(state: FluidState, geometry: FluidGeometry, n: int):
        t0 = state.time
        a = state.populations.reshape(lat.q, cells)
        solid = geometry.solid.reshape(cells) if spec.walls else None
        wall_u = geometry.wall_velocity.reshape(lat.d, cells) if spec.moving else None
        # the ghost planes' geometry, from the neighbours (bool travels as bytes)
        solid_ghost = None
        if spec.walls:
            solid_ghost = ghost_planes(solid.astype(jnp.uint8)).astype(bool)
        wall_ghost = ghost_planes(wall_u) if spec.moving else None

        def even(a, t, received):
            return sweep(spec, a, False, force_at(t), solid, wall_u,
                         (None, solid_ghost, wall_ghost, received))  # fmt: skip

        def pair(a, received, t):
            a = even(a, t, received)
            ghosts = (read_ghosts(pack(a)), solid_ghost, wall_ghost, None)
            a, g = sweep(spec, a, True, force_at(t + 1), solid, wall_u, ghosts)
            return a, return_pushes(g)

        pairs = n // 2
        received = None
        if pairs:
            a, received = pair(a, None, t0)
        if pairs > 1:
            a, received = lax.fori_loop(
                1, pairs, lambda k, c: pair(c[0], c[1], t0 + 2 * k), (a, received)
            )
        if n % 2:
            a = even(a, t0 + n - 1, received)
            a = finish(spec, a, True, solid, (read_ghosts(pack(a)), solid_ghost))
        else:
            a = finish(spec, a, False, solid, (received, solid_ghost))
        new_state = FluidState(populations=a.reshape(state.populations.shape), time=t0 + n)
        return new_state, jnp.zeros((n, setup.force_width), dtype)

    return chunk
