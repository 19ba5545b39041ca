"""Bodies in the fluid on the native in-place kernel (``fluid.kernel=native``, one device).

The coupled chunk of solver/fluid/step.py with the fluid's step done by
kernels/native/lb_psm.inc (the handler LbPsmStep of the native library): each fluid step puts
the bodies on their stencils (``PsmCoupling.stages``), then one call of the kernel advances the
populations in place (the AA pattern's even or odd sweep) with the PSM collision in the cells
the stencils cover, done row by row inside the sweep, and returns per stencil entry its cell's
moments and summed cover, from which the bodies' forces are summed as in the XLA step; then
the bodies move. So the population buffer is the native kernel's one buffer, and the bodies
cost their cells' collision: no list of covered cells built in JAX, no gather or scatter of
populations, no second pass over the grid or the ghosts (docs/performance.md, "Bodies in the
fluid: the coupled step").

Results equal the XLA coupled step to round-off (tests/test_coupling_native.py: float64 to
1e-12, float16 storage to one unit of the stored half, a float32 run through the app to 1e-5
relative). On slabs along x (several devices or MPI processes) ``make_native_coupled_split_chunk``
runs the split phases of solver/fluid/inplace_split.py with the same row hook (LbPsmPhase)
and adds the bodies' forces over the shards. Owned bodies (``coupling.bodies=owned``) take the
same passes around the kernel as in the XLA step (``PsmCoupling.passes``: migration and ghosts
before each call, the ghosts' partial forces back to their owners after it).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from solver.distributed.halo import Halo
from solver.fluid.collide import body_force_at
from solver.fluid.inplace_split import SplitBodies, make_split_chunk
from solver.fluid.inplace_step import (
    kernel_attributes,
    kernel_rates,
    link_words,
    plane_shift,
    solid_links,
    unsupported,
)
from solver.fluid.native import target_name
from solver.fluid.setup import FluidSetup
from solver.fluid.step import SINGLE, FluidGeometry, FluidState

# LbPsmStep's phases (kernels/native/lb_psm.inc)
EVEN, ODD, END_AFTER_EVEN, END_AFTER_ODD, ROTATE = 0, 1, 2, 3, 4


def _require_covered(setup: FluidSetup) -> None:
    """Raises ValueError where the native kernel does not cover the setup."""
    reason = unsupported(setup, "native")
    if reason is not None:
        raise ValueError(f"fluid.kernel=native does not support {reason}")


def make_native_coupled_chunk(setup: FluidSetup, coupling) -> Callable:
    """chunk(state, geometry, n, extra) -> (state, forces (n, force_width) of zeros, extra,
    reports), the signature of ``solver.fluid.step.make_coupled_chunk`` on one device, for a
    ``solver.coupling.step.PsmCoupling`` (replicated bodies, or owned by the one shard).

    Raises:
        ValueError: the native kernel does not cover the setup.
    """
    _require_covered(setup)
    stages = coupling.stages(setup, SINGLE)
    before, after = coupling.passes(setup, SINGLE, stages)
    lat, dtype = setup.lattice, jnp.dtype(setup.dtype)
    stored = jnp.dtype(setup.storage_dtype)
    target = target_name(lat, stored, psm=True)
    has_solid = setup.solid is not None and bool(np.any(setup.solid))
    links, ladd = solid_links(setup) if has_solid else (np.zeros((0, 2), np.int64), np.zeros(0))
    ladd = jnp.asarray(ladd, dtype)
    # the kernel's grid is 3D: a 2D force (F_x, F_y) acts along its axes (x, z)
    axes = [0, 1, 2] if lat.d == 3 else [0, 2]
    block = tuple(setup.shape)
    attributes = dict(
        **kernel_attributes(setup, has_solid),
        tau=np.float64(setup.tau),
        fraction=np.int64(coupling.weighting == "fraction"),
    )

    width = stages.width

    def kernel(populations, solid, force3, flat, rows, phase: int, shift: int, words):
        """One step of the kernel: (populations, per entry (E, 2 width): its cell's moments
        and summed cover) from the stencil entries' cells flat (E,) and cover rows (E, width),
        on planes rotated by ``shift`` rows per direction (``plane_shift``; ``words``: the
        wall links' slots for them, ``link_words``; the END phases rotate back)."""
        entries = flat.shape[0]
        call = jax.ffi.ffi_call(
            target,
            (
                jax.ShapeDtypeStruct(populations.shape, stored),
                jax.ShapeDtypeStruct((entries, 2 * width), dtype),
            ),
            input_output_aliases={0: 0},
        )
        populations, per_entry = call(
            populations, solid, words, ladd, force3, flat, rows,
            phase=np.int64(phase), shift=np.int64(shift), **attributes,
        )  # fmt: skip
        return populations, per_entry

    def force_of(time):
        force = body_force_at(setup, time)
        force3 = jnp.zeros((3,), dtype)
        if force is not None:
            force3 = force3.at[jnp.asarray(axes)].set(jnp.stack(force).astype(dtype))
        return force, force3

    def chunk(state: FluidState, geometry: FluidGeometry, n: int, extra):
        solid = geometry.solid if has_solid else jnp.zeros((1,), bool)
        shift = plane_shift(setup, n)
        words = link_words(setup, links, shift)
        empty_cells = jnp.zeros((0,), jnp.int32)
        empty_table = jnp.zeros((0, width), dtype)

        def step(populations, extra, time, phase: int):
            extra, xs, vs, ws, rad, context = before(extra, block)
            stencil = stages.cover(time, xs, vs, ws, rad, block)
            force, force3 = force_of(time)
            populations, per_entry = kernel(
                populations, solid, force3, stencil.flat.reshape(-1),
                stencil.rows.reshape(-1, width), phase, shift, words,
            )  # fmt: skip
            rows = (per_entry[:, :width], per_entry[:, width:])
            force_sum, torque_sum = stages.sums(stencil, rows, force)
            extra, report = after(extra, context, force_sum, torque_sum)
            return populations, extra, report

        def two_steps(carry, k):
            populations, extra = carry
            time = state.time + 2 * k
            populations, extra, r1 = step(populations, extra, time, EVEN)
            populations, extra, r2 = step(populations, extra, time + 1, ODD)
            return (populations, extra), jax.tree.map(lambda a, b: jnp.stack([a, b]), r1, r2)

        populations = state.populations
        if shift:  # the planes rotated in for the chunk's steps
            populations, _ = kernel(
                populations, solid, force_of(state.time)[1], empty_cells, empty_table, ROTATE,
                shift, words,
            )  # fmt: skip
        reports = []
        pairs = n // 2
        if pairs:
            (populations, extra), paired = lax.scan(
                two_steps, (populations, extra), jnp.arange(pairs, dtype=jnp.int32)
            )
            reports.append(jax.tree.map(lambda r: r.reshape((2 * pairs, *r.shape[2:])), paired))
        if n % 2:
            populations, extra, report = step(populations, extra, state.time + n - 1, EVEN)
            reports.append(jax.tree.map(lambda r: r[None], report))
        # the natural layout at the chunk's end (planes rotated back; an even step left it
        # swapped), solids at rest
        end = END_AFTER_EVEN if n % 2 else END_AFTER_ODD
        if end == END_AFTER_EVEN or has_solid or shift:
            populations, _ = kernel(
                populations, solid, force_of(state.time)[1], empty_cells, empty_table, end,
                shift, words,
            )  # fmt: skip
        reports = jax.tree.map(lambda *r: jnp.concatenate(r), *reports)
        new_state = FluidState(populations=populations, time=state.time + n)
        return new_state, jnp.zeros((n, setup.force_width), dtype), extra, reports

    return chunk


def make_native_coupled_split_chunk(
    setup: FluidSetup,
    coupling,
    block: tuple[int, ...],
    halo: Halo,
    shard: Callable,
    shards,
) -> Callable:
    """chunk(state, geometry, n, extra) -> (state, forces, extra, reports) on this shard's
    slab (``block``; the grid split along x, solver/fluid/inplace_split.py, whose arguments
    ``halo``, ``shard`` and ``shards`` are), for a ``PsmCoupling`` with replicated or owned
    bodies: each EVEN and ODD call collides this block's covered cells (LbPsmPhase), and the
    bodies' force and torque are this block's sums added over the shards (replicated:
    ``halo.sum``; owned: the ghosts' partials sent to their owners), as the XLA coupled step
    does.

    Raises:
        ValueError: the native kernel does not cover the setup.
    """
    _require_covered(setup)
    stages = coupling.stages(setup, halo)
    before, after = coupling.passes(setup, halo, stages)
    width = stages.width
    block = tuple(int(b) for b in block)

    def entries(extra, time):
        # owned bodies migrate here: the moved ones go to advance in the context
        extra, xs, vs, ws, rad, context = before(extra, block)
        stencil = stages.cover(time, xs, vs, ws, rad, block)
        return stencil.flat.reshape(-1), stencil.rows.reshape(-1, width), (stencil, extra, context)

    def advance(_, per_entry, context, time):
        stencil, extra, passed = context
        rows = (per_entry[:, :width], per_entry[:, width:])
        force_sum, torque_sum = stages.sums(stencil, rows, body_force_at(setup, time))
        return after(extra, passed, force_sum, torque_sum)

    attributes = dict(
        tau=np.float64(setup.tau), fraction=np.int64(coupling.weighting == "fraction")
    )
    bodies = SplitBodies(width, attributes, entries, advance)
    return make_split_chunk(setup, block, halo, shard, shards, *kernel_rates(setup), bodies)
