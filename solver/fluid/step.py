"""The fluid time step composed from parts, on ghost-padded buffers.

A chunk of n steps keeps post-collision populations in buffers with one ghost layer on every
face, (nx+2, ny+2[, nz+2]) per direction (solver/fluid/padded.py): two, alternated, where the
pull is fused into the collision; one, beside scratch buffers, where it is materialised.
One step is a composition of parts, each chosen on the host from the ``FluidSetup`` so that the
traced program holds only the work the problem needs:
    1. pull: f_i(x) = f_i*(x - c_i) is a static slice of the padded buffer (no copy: XLA fuses
       it into its consumers, unlike jnp.roll, which it materialises);
    2. boundary parts (solver/fluid/boundary_rules.py), in order: wall rules (half-way
       bounce-back, Ladd's moving walls, Bouzidi's curved walls) reading only slices of the
       same buffer; rest state in solid nodes; the populations materialised once into scratch
       buffers where they are long expressions; inlets and outlets by regularized
       non-equilibrium extrapolation; the momentum-exchange force on the obstacle;
    3. collision (solver/fluid/collide.py): moments (rho, u) once, materialised as one
       (*shape, d+1) array so that the q output fusions do not each recompute them from all q
       inputs, then the setup's operator (BGK, TRT) with Guo's source, written into the other
       buffer's interior;
    4. ghost layers filled from the freshly computed interior (periodic edges). A neighbouring
       subdomain or a wall fills the same ghosts in the distributed code: halos are one more
       boundary rule.
The state seen outside a chunk holds pre-collision populations at its time; the chunk collides
them once on entry and streams once on exit; between them two steps per loop iteration, the last
iteration's second one skipped where n - 1 is odd ("An even chunk without a step beside the
loop"). Where the plan writes the pulled populations into
scratch buffers (curved walls, open faces, a force), the scratch carries them from one step to
the next, and each step is collide, write, pull: the collision overwrites the one padded buffer
that the previous step's pull read, and a loop body of one step is the whole program for any
chunk length (docs/performance.md, "One step body per chunk", "One padded buffer"). Their loop
reads the geometry through a barrier with the iteration index, so that XLA computes what the
parts derive from it (wall coefficients, link masks) inside the fusions that use them instead of
hoisting each out of the loop ("Geometry inside the loop"). With a
16-bit ``setup.storage`` the state and the padded buffers hold the stored form (f - w) * s
(kernels/storage.py): the pull decodes what it slices (fused into the slice's consumers) and
the collision's outputs are encoded where they are written, so every population is decoded once
and encoded once per step (docs/storage.md).
docs/performance.md has the measurements behind each choice; docs/architecture.md says how to
add a part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels import storage as stored_form
from kernels.equilibrium import density_velocity, equilibrium
from kernels.lattices import CS2
from kernels.materialise import materialised
from solver.distributed.halo import Halo
from solver.fluid.boundary_rules import Pull, plan_boundaries, previous_planes, stream
from solver.fluid.collide import body_force_at, make_collide
from solver.fluid.padded import (
    SINGLE,
    _ghost_routes,
    face_planes,
    ghost_regions,
    pad_with_halo,
    plane,
    shift_blocks,
    upstream,
    write_ghosts,
    write_padded,
)
from solver.fluid.setup import FluidSetup

# the padded-buffer helpers and body_force_at lived here before the step was split into parts
__all__ = [
    "SINGLE",
    "FluidGeometry",
    "FluidState",
    "body_force_at",
    "decode_populations",
    "encode_populations",
    "ghost_regions",
    "initial_state",
    "macroscopic",
    "make_chunk",
    "make_coupled_chunk",
    "make_geometry",
    "make_step",
    "pad_with_halo",
    "upstream",
    "write_padded",
]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FluidState:
    """Dynamic fluid state.

    Attributes:
        populations: (q, *shape) pre-collision populations at ``time``, lattice units, in the
            setup's storage form: f itself, or (f - w) * s in a 16-bit ``setup.storage``
            (``decode_populations`` gives f).
        time: int32 scalar, the number of steps done.
    """

    populations: Array
    time: Array

    def replace(self, **changes) -> FluidState:
        return dataclasses.replace(self, **changes)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FluidGeometry:
    """Device arrays of the static geometry, passed to the step as an argument (not a constant).

    Attributes:
        solid: (*shape) bool or None.
        obstacle: (*shape) bool or None, solid nodes whose force is measured.
        wall_velocity: (d, *shape) lattice velocity of solid nodes, or None.
        wall_distance: (q, *shape) link fractions for interpolated bounce-back, or None.
        open_velocity: per open boundary, (d, *face) prescribed velocity or None.
        sponge: (*shape) added relaxation time of the absorbing layer, or None.
    """

    solid: Array | None
    obstacle: Array | None
    wall_velocity: Array | None
    wall_distance: Array | None
    open_velocity: tuple[Array | None, ...]
    sponge: Array | None = None


def make_geometry(setup: FluidSetup, place: Callable | None = None) -> FluidGeometry:
    """The setup's geometry arrays on the device in the setup's dtype.

    ``place(array, dtype, lead, face_axis)`` puts each array somewhere else (a sharded layout,
    or its partition spec): ``lead`` counts the leading non-spatial axes, ``face_axis`` is the
    axis a face array lacks (None for whole-grid arrays). Default: one device.
    """
    if place is None:

        def place(arr, dtype, lead, face_axis):
            return jnp.asarray(arr, dtype=dtype)

    def put(arr, dtype, lead=0, face_axis=None):
        return None if arr is None else place(arr, dtype, lead, face_axis)

    return FluidGeometry(
        solid=put(setup.solid, bool),
        obstacle=put(setup.obstacle, bool),
        wall_velocity=put(setup.wall_velocity, setup.dtype, 1),
        wall_distance=put(setup.wall_distance, setup.dtype, 1),
        open_velocity=tuple(put(b.velocity, setup.dtype, 1, b.axis) for b in setup.open_boundaries),
        sponge=put(setup.sponge, setup.dtype),
    )


def initial_state(
    setup: FluidSetup,
    density: np.ndarray,
    velocity: np.ndarray,
    velocity_gradient: np.ndarray | None = None,
) -> FluidState:
    """Populations for the given fields: equilibrium, plus the first-order non-equilibrium part
    when the velocity gradient is known.

    The Chapman-Enskog first-order part, f_i^(1) = -(tau w_i rho / c_s^2) Q_i : grad u with
    Q_i = c_i c_i - c_s^2 I, starts the run on the viscous stress of the flow instead of zero
    stress, which removes an initial layer that otherwise spoils convergence orders.

    Args:
        density: (*shape) lattice density.
        velocity: (d, *shape) lattice velocity.
        velocity_gradient: None or (d, d, *shape) with [a, b] = d u_b / d x_a, lattice units.
    """
    lat = setup.lattice
    rho = jnp.asarray(density, dtype=setup.dtype)
    u = jnp.asarray(velocity, dtype=setup.dtype)
    f = equilibrium(lat, rho, [u[a] for a in range(lat.d)])
    if velocity_gradient is not None:
        grad = jnp.asarray(velocity_gradient, dtype=setup.dtype)
        out = []
        for i in range(lat.q):
            contraction = sum(
                (float(lat.c[i, a] * lat.c[i, b]) - (CS2 if a == b else 0.0)) * grad[a, b]
                for a in range(lat.d)
                for b in range(lat.d)
            )
            out.append(f[i] - (setup.tau * float(lat.w[i]) / CS2) * rho * contraction)
        f = tuple(out)
    populations = jnp.stack(f).astype(setup.dtype)  # x64 mode must not promote float32
    populations = encode_populations(setup, populations)
    return FluidState(populations=populations, time=jnp.zeros((), jnp.int32))


def encode_populations(setup: FluidSetup, populations: Array) -> Array:
    """(q, *shape) populations f in the compute dtype -> the stored form (q, *shape) in
    ``setup.storage_dtype`` (f itself when the storage is the compute dtype)."""
    if setup.storage_dtype == setup.dtype:
        return populations
    return stored_form.encode_all(populations, setup.lattice.w, setup.storage_dtype, setup.dtype)


def decode_populations(setup: FluidSetup, populations: Array) -> Array:
    """(q, *shape) stored populations (a state's) -> f (q, *shape) in the compute dtype."""
    if setup.storage_dtype == setup.dtype:
        return populations
    return stored_form.decode_all(populations, setup.lattice.w, setup.storage_dtype, setup.dtype)


def _codecs(setup: FluidSetup) -> tuple[list[Callable], list[Callable], Callable]:
    """Per direction, encode(f_i) -> buffer values and decode(buffer values) -> f_i, and the
    map from stacked buffer values to the state's storage dtype. Identities when the storage
    is the compute dtype, so that the traced program is the plain solver's.

    bfloat16 values travel through the chunk's buffers as their uint16 bit patterns, rounded by
    integer arithmetic (``kernels.storage.bfloat16_bits``, the same bits as a conversion):
    XLA:CPU has no bfloat16 arithmetic; on bfloat16 buffers it rewrote every in-place update
    into a float32 copy of the whole buffer, and with uint16 buffers but its own conversion it
    still materialised each encoded interior once (docs/performance.md, "Storage precision").
    The state itself holds bfloat16.
    """
    storage, compute = setup.storage_dtype, setup.dtype
    q = setup.lattice.q
    if storage == compute:
        return [lambda x: x] * q, [lambda x: x] * q, lambda x: x
    weights = [float(w) for w in setup.lattice.w]
    if storage == "bfloat16":
        bits = jnp.dtype(storage)

        def from_buffer(x):
            return lax.bitcast_convert_type(x, bits)

        encoders = [
            lambda x, w=w: stored_form.bfloat16_bits(x - jnp.asarray(w, compute)) for w in weights
        ]
        decoders = [
            lambda x, w=w: stored_form.from_bfloat16_bits(x) + jnp.asarray(w, compute)
            for w in weights
        ]
    else:

        def from_buffer(x):
            return x

        encoders = [lambda x, w=w: stored_form.encode(x, w, storage, compute) for w in weights]
        decoders = [lambda x, w=w: stored_form.decode(x, w, storage, compute) for w in weights]
    return encoders, decoders, from_buffer


# ---------------------------------------------------------------- the chunk


class StepCoupling(Protocol):
    """What couples other physics into the fluid step at its collision (solver.coupling).

    ``bind(setup, halo)`` returns collide(f, time, extra, geo) -> (f_post, patch, extra,
    report) for one shard: ``f`` the q pre-collision arrays of its block, ``extra`` the coupled
    state (a pytree replicated on every shard, e.g. the bodies), ``geo`` the step's geometry
    (its "solid_interior": the block's solid mask or None), ``report`` a pytree recorded every
    step. ``f_post`` is the post-collision state of every cell but those of ``patch`` = (cells,
    values): cells (c,) int32 flat indices into the block (the block's size: no cell), values
    q arrays (c,), the post-collision populations there, written over ``f_post`` before the
    ghosts are filled (so a coupling that changes few cells costs no pass over the grid).
    """

    def bind(self, setup: FluidSetup, halo: Halo) -> Callable: ...


def make_chunk(
    setup: FluidSetup, halo: Halo = SINGLE, overlap: bool = False
) -> Callable[[FluidState, FluidGeometry, int], tuple[FluidState, Array]]:
    """Build chunk(state, geometry, n) -> (state after n steps, forces (n, d)).

    ``n`` is static; the caller jits with static_argnums=2 and donates the state. The forces
    are the momentum-exchange force on ``setup.obstacle`` at each step, lattice units, summed
    over all shards; with ``setup.moment_center`` each row continues with the moment about it
    (``setup.force_width`` values per row).

    ``setup`` describes the global problem (which parts the step holds is decided on it, so
    every shard traces the same program); ``state`` and ``geometry`` hold this shard's block,
    and ``halo`` fills the ghost layers and tells which global faces the block touches. With
    the default ``SingleHalo`` the block is the whole grid with periodic edges.

    ``overlap``: collide the block's boundary planes on the split axes apart from the rest and
    send the halo messages from them, so that the exchange does not wait for the whole block
    (``write_padded``'s ``faces``): an asynchronous collective (XLA:GPU's latency-hiding
    scheduler) can then overlap it with the interior's collision. The same bits either way; it
    costs the planes' collision twice, which buys nothing where collectives run synchronously
    (XLA:CPU, mpi4jax): docs/performance.md, "Halo overlap".
    """
    chunk = _make_chunk(setup, halo, None, overlap)

    def fluid_chunk(state: FluidState, geometry: FluidGeometry, n: int):
        new_state, forces, _, _ = chunk(state, geometry, n, ())
        return new_state, forces

    return fluid_chunk


def make_coupled_chunk(setup: FluidSetup, halo: Halo, coupling: StepCoupling) -> Callable:
    """Build chunk(state, geometry, n, extra) -> (state, forces (n, d), extra, reports): the
    fluid chunk with ``coupling``'s collision; ``reports`` stacks each step's report (leading
    axis n)."""
    return _make_chunk(setup, halo, coupling)


def _make_chunk(
    setup: FluidSetup, halo: Halo, coupling: StepCoupling | None, overlap: bool = False
) -> Callable:
    lat = setup.lattice
    q, d = lat.q, lat.d
    dtype = jnp.dtype(setup.dtype)
    plan = plan_boundaries(setup, halo)
    encoders, decoders, to_storage = _codecs(setup)

    def encoded(post: Sequence[Array]) -> tuple[Array, ...]:
        return tuple(enc(p) for enc, p in zip(encoders, post, strict=True))

    def state_populations(state: FluidState) -> list[Array]:
        # per direction: decoding the stacked array would materialise a float32 copy of it
        if setup.storage_dtype == setup.dtype:
            return [state.populations[i] for i in range(q)]
        w, storage = lat.w, setup.storage_dtype
        return [
            stored_form.decode(state.populations[i], float(w[i]), storage, setup.dtype)
            for i in range(q)
        ]

    if coupling is None:
        fluid_collide = make_collide(setup)

        def collide(f, time, extra, geo):
            return fluid_collide(f, time, geo["sponge"]), None, extra, ()

    else:
        # one trace and one lowering for the chunk's three coupled collisions (entry, the
        # loop's two): JAX reuses a nested jit's jaxpr for the same input types
        collide = jax.jit(coupling.bind(setup, halo))

    def write(dst, post: Sequence[Array], patch, time: Array, faces=None) -> tuple[Array, ...]:
        """Encoded ``post`` (and the coupling's ``patch`` over it) into the padded buffers;
        ``faces``: the boundary planes' encoded values, collided apart (overlap)."""
        if patch is None:
            return write_padded(dst, post, lat.c, halo, faces, setup.mirror_axes)
        cells, values = patch
        return _write_patched(
            dst, post, cells, encoded(values), lat.c, halo, time, setup.mirror_axes
        )

    def pull(buffers: Sequence[Array], geo: dict, scratch: tuple, time: Array):
        """Pre-collision populations f_i(x, t) (q arrays (*shape)) at step ``time``, the
        obstacle force (d,) and the scratch buffers they were written to (empty when not
        materialised; before the write they hold f_i(x, t-1), which convective outlets read)."""
        # decoding the whole padded buffer is elementwise: XLA fuses it with the slices the
        # parts take into their consumers (no pass of its own)
        buffers = [dec(b) for dec, b in zip(decoders, buffers, strict=True)]
        previous = {}
        planes = previous_planes(setup.open_boundaries, scratch[0].shape) if scratch else []
        if planes:
            # the face rules read these planes of the step before, copied out before the
            # scratch buffers are overwritten (and the overwrite waits for them, below)
            previous = materialised({k: [plane(s, *k) for s in scratch] for k in planes}, time)
        view = Pull(lat, buffers, geo, plan.wall_links, time=time, previous=previous)
        regions = plan.regions
        pre = stream(view, () if regions else plan.walls)
        if not regions:
            for rule in plan.nodes:
                pre = rule(pre, view)
        pre = [p.astype(dtype) for p in pre]
        if plan.materialise:
            zero = (0,) * d
            # The scratch buffers hold what the collision that wrote ``buffers`` read, and
            # every buffer's ghosts are that collision's values again: adding 0 * one value of
            # each written buffer (and of the previous planes) orders every overwrite of the
            # scratch after all the reads of it (without it XLA copied every moving
            # direction's buffer, or every scratch buffer, once per step). The scalar is
            # materialised: fused, XLA recomputed its q loads in every cell.
            marks = sum(b[zero] for b in buffers)
            marks = marks + sum(v[0][zero] for v in previous.values())
            written = materialised(0.0 * marks, time)
            pre = [
                lax.dynamic_update_slice(s, p + written, zero)
                for s, p in zip(scratch, pre, strict=True)
            ]
            for region in regions or ():
                # the walls and nodes on the boxes only, written over the plain pull
                local = view.at(region)
                near = stream(local, plan.walls)
                for rule in plan.nodes:
                    near = rule(near, local)
                start = [r0 for r0, _ in region]
                pre = [
                    lax.dynamic_update_slice(p, v.astype(dtype), start)
                    for p, v in zip(pre, near, strict=True)
                ]
            for rule in plan.faces:
                pre = rule(pre, view)
            scratch = tuple(pre)
        force = jnp.zeros((setup.force_width,), dtype)
        if plan.force is not None and regions:
            for region in regions:
                start = [r0 for r0, _ in region]
                limit = [r0 + n for r0, n in region]
                force = force + plan.force(
                    [lax.slice(p, start, limit) for p in pre], view.at(region)
                )
        elif plan.force is not None:
            force = plan.force(pre, view)
        return tuple(pre), force, scratch

    def collide_write(dst, pre, extra, geo: dict, time: Array, after: Array | None = None):
        """Collide ``pre`` (the q arrays f_i(x, time)) and write the encoded result into ``dst``.

        ``after``: a force measured from the other buffer. Adding 0 * after makes this write
        depend on it; otherwise XLA may schedule that force sum (which reads a buffer written
        or scratch overwritten later) late and protect the buffer with q full copies per step.
        """
        post, patch, extra, report = collide(pre, time, extra, geo)
        faces = boundary_planes(pre, time, geo) if overlap and coupling is None else None
        if after is not None and plan.force is not None:
            post = tuple(p + 0.0 * after[0] for p in post)
            if faces:
                faces = {k: tuple(p + 0.0 * after[0] for p in v) for k, v in faces.items()}
        if faces:
            faces = {k: encoded(v) for k, v in faces.items()}
        dst = write(dst, encoded(post), patch, time, faces or None)
        return dst, extra, report

    def advance(src, dst, extra, geo: dict, time: Array, after: Array | None = None):
        """One step of a plan without scratch buffers: pull from ``src`` (post-collision at
        time-1), collide, write ``dst``."""
        pre, force, _ = pull(src, geo, (), time)
        dst, extra, report = collide_write(dst, pre, extra, geo, time, after)
        return dst, extra, force, report

    def collide_pull(buffer, scratch, extra, geo: dict, time: Array):
        """One step in the other order (materialised plans): collide the scratch buffers'
        f(x, time), write ``buffer``, pull f(x, time + 1) from it into the scratch buffers."""
        buffer, extra, report = collide_write(buffer, scratch, extra, geo, time)
        _, force, scratch = pull(buffer, geo, scratch, time + 1)
        return buffer, scratch, extra, force, report

    def boundary_planes(pre: Sequence[Array], time: Array, geo: dict) -> dict:
        """The post-collision populations of the block's planes that other shards receive,
        collided on their own (the same per-cell arithmetic as the block's collision)."""
        out = {}
        for axis, index in face_planes(pre[0].shape, halo):
            sponge = geo["sponge"]
            if sponge is not None:
                sponge = plane(sponge, axis, index)
            out[(axis, index)] = fluid_collide([plane(p, axis, index) for p in pre], time, sponge)
        return out

    def padded_geometry(geometry: FluidGeometry) -> dict:
        """The geometry the parts read: the fields they name padded with filled ghosts."""
        geo = {
            "open_velocity": geometry.open_velocity,
            "solid_interior": geometry.solid,
            "sponge": geometry.sponge,
            # read only at the node itself: no ghosts, and no padded copy of q arrays
            "wall_distance": geometry.wall_distance,
        }
        for name, lead in plan.padded:
            geo[name] = pad_with_halo(getattr(geometry, name), lead, halo, setup.mirror_axes)
        return geo

    def stacked(*reports):
        return jax.tree.map(lambda *r: jnp.stack(r), *reports)

    def chunk(state: FluidState, geometry: FluidGeometry, n: int, extra):
        geo = padded_geometry(geometry)
        if plan.materialise:
            return materialised_chunk(state, geo, n, extra)
        t0 = state.time
        pre = state_populations(state)
        post, patch, extra, report = collide(pre, t0, extra, geo)
        faces = None
        if overlap and coupling is None:
            faces = {k: encoded(v) for k, v in boundary_planes(pre, t0, geo).items()} or None
        reports = [jax.tree.map(lambda r: r[None], report)]
        # only the ghosts each direction's pull reads, as in every step
        post = encoded(post)
        a = write(tuple(jnp.pad(jnp.zeros_like(p), 1) for p in post), post, patch, t0, faces)
        b = tuple(jnp.zeros_like(p) for p in a)
        forces = []

        # two steps per iteration, a -> b -> a, so the loop carry never swaps buffers
        # (a swapped carry makes XLA insert full copies); n - 1 steps in n // 2 iterations:
        # when n - 1 is odd the last iteration's second step is skipped (a conditional in the
        # loop rather than a step beside it: one program of two steps for every n)
        pairs = n // 2
        odd = (n - 1) % 2 == 1

        def two_steps(carry, k, geo):
            a, b, extra = carry
            b, extra, f1, r1 = advance(a, b, extra, geo, t0 + 2 * k + 1)

            def second(a, extra):
                a, extra, f2, r2 = advance(b, a, extra, geo, t0 + 2 * k + 2, after=f1)
                return a, extra, f2, r2

            def skipped(a, extra):
                return a, extra, jnp.zeros_like(f1), jax.tree.map(jnp.zeros_like, r1)

            if odd:
                a, extra, f2, r2 = lax.cond(k < pairs - 1, second, skipped, a, extra)
            else:
                a, extra, f2, r2 = second(a, extra)
            return (a, b, extra), (jnp.stack([f1, f2]), stacked(r1, r2))

        # the geometry stays loop-invariant here: periodic boxes and plain walls derive a mask
        # per direction from it, which XLA computes once for the loop and the steps beside it
        # (made inside the loop, the masks were computed again for those: +16 B/cell, D3Q19)
        a, b, extra = scan_steps(two_steps, (a, b, extra), pairs, forces, reports, geo, vary=False)
        if odd:
            a = b
            forces[-1] = forces[-1][:-1]
            reports[-1] = jax.tree.map(lambda r: r[:-1], reports[-1])
        pre, f, _ = pull(a, geo, (), t0 + n)
        forces.append(f[None])
        return concluded(pre, t0 + n, forces, reports, extra)

    def materialised_chunk(state: FluidState, geo: dict, n: int, extra):
        """The chunk of a plan that writes the pulled populations into scratch buffers: each
        step collides them, writes the padded buffer and pulls the next step's from it. The
        scratch buffers stand between the pull and the collision, so one padded buffer serves
        every step (the collision overwrites what the pull of the step before read, in the
        loop's previous iteration) and the loop body is one step: the whole program for any
        ``n`` (the other order needs a collision before the loop and a pull after it)."""
        t0 = state.time
        # the scratch holds f(t0): the first collision's input and the "previous step" of the
        # first pull
        scratch = tuple(state_populations(state))
        # zeros like the state (not jnp.zeros): inside shard_map they vary over the mesh as
        # the buffer the loop writes does
        stored = [jax.eval_shape(enc, p).dtype for enc, p in zip(encoders, scratch, strict=True)]
        buffer = tuple(
            jnp.pad(jnp.zeros_like(p, s), 1) for p, s in zip(scratch, stored, strict=True)
        )

        def one_step(carry, k, geo):
            buffer, scratch, extra = carry
            buffer, scratch, extra, f, r = collide_pull(buffer, scratch, extra, geo, t0 + k)
            return (buffer, scratch, extra), (f[None], jax.tree.map(lambda x: x[None], r))

        forces, reports = [], []
        _, scratch, extra = scan_steps(one_step, (buffer, scratch, extra), n, forces, reports, geo)
        return concluded(scratch, t0 + n, forces, reports, extra)

    def scan_steps(
        body: Callable,
        carry: tuple,
        iterations: int,
        forces: list,
        reports: list,
        geo: dict,
        vary: bool = True,
    ):
        """``carry`` after ``iterations`` of ``body(carry, k, geo)`` -> (carry, (forces (s,
        width), reports (s, ...))) for the s steps of an iteration; their forces (iterations
        * s, width) and reports appended to ``forces`` and ``reports``.

        ``vary``: the geometry passes a barrier with the iteration index, so XLA sees it vary
        over the loop and computes what the parts derive from it (wall coefficients and masks
        per direction and box) inside the fusions that use them. Hoisted out of the loop,
        each was a kernel of its own to compile and a loop-carried array to read back every
        step (docs/performance.md, "Geometry inside the loop")."""
        if iterations == 0:
            return carry

        def scanned(carry, k):
            varying = geo
            if vary:
                varying, k = lax.optimization_barrier((geo, k))
            return body(carry, k, varying)

        steps = jnp.arange(iterations, dtype=jnp.int32)
        carry, (stepped, stepped_reports) = lax.scan(scanned, carry, steps)
        forces.append(stepped.reshape(-1, setup.force_width))
        reports.append(jax.tree.map(lambda r: r.reshape((-1, *r.shape[2:])), stepped_reports))
        return carry

    def concluded(pre: Sequence[Array], time: Array, forces: list, reports: list, extra):
        """The chunk's results: the state holding ``pre`` (q arrays f(x, time)), the forces of
        every step (summed over shards) and the reports, concatenated over the steps."""
        new_state = FluidState(populations=to_storage(jnp.stack(encoded(pre))), time=time)
        forces = jnp.concatenate(forces)
        if plan.force is not None:
            forces = halo.sum(forces)
        reports = jax.tree.map(lambda *r: jnp.concatenate(r), *reports)
        return new_state, forces, extra, reports

    return chunk


def _write_patched(
    buffers: Sequence[Array],
    interiors: Sequence[Array],
    cells: Array,
    values: Sequence[Array],
    offsets: Sequence[Sequence[int]],
    halo: Halo,
    time: Array,
    mirror_axes: Sequence[int] = (),
) -> tuple[Array, ...]:
    """``write_padded`` with the values of a few cells replaced: each interior (*shape) is
    stored, then ``values[i]`` (c,) are scattered over it at the flat block indices ``cells``
    (c,) (the block's size: dropped), then the ghosts are filled from the buffers' own interiors.

    The ghost blocks are sliced from the patched buffer (one face of it each), so that a patched
    cell on a face reaches its neighbour through the same halo as any other cell; the slices are
    materialised before the ghosts are written (were XLA to fuse a slice into the write of the
    same buffer, it would copy the whole buffer)."""
    shape = tuple(interiors[0].shape)
    d = len(shape)
    padded = tuple(n + 2 for n in shape)
    out = [
        lax.dynamic_update_slice(b, x, (1,) * d) for b, x in zip(buffers, interiors, strict=True)
    ]
    # the cells' padded coordinates (past the buffer where there is no cell: dropped)
    size = int(np.prod(shape))
    coords, rest = [], cells
    for a in reversed(range(d)):
        coords.append(jnp.where(cells < size, rest % shape[a] + 1, padded[a]))
        rest = rest // shape[a]
    coords = tuple(reversed(coords))
    out = [o.at[coords].set(v, mode="drop") for o, v in zip(out, values, strict=True)]
    views = [lax.slice(o, (1,) * d, tuple(n + 1 for n in shape)) for o in out]
    received = []
    for route, items in _ghost_routes(views, offsets, halo, None, mirror_axes).items():
        blocks = materialised([block for *_, block in items], time)
        if any(route):
            blocks = shift_blocks(halo, blocks, route)
        received += [(*item[:-1], block) for item, block in zip(items, blocks, strict=True)]
    return write_ghosts(out, received)


def make_step(setup: FluidSetup) -> Callable[[FluidState, FluidGeometry], tuple[FluidState, Array]]:
    """Build step(state, geometry) -> (state, force on obstacle (d,) in lattice units)."""
    chunk = make_chunk(setup)

    def step(state: FluidState, geometry: FluidGeometry) -> tuple[FluidState, Array]:
        new_state, forces = chunk(state, geometry, 1)
        return new_state, forces[0]

    return step


def macroscopic(
    setup: FluidSetup, state: FluidState, geometry: FluidGeometry | None = None
) -> tuple[Array, Array]:
    """Density (*shape) and velocity (d, *shape) in lattice units at the state's time.

    Solid nodes report density 1 and the wall velocity (zero for resting walls). Elementwise,
    so it runs unchanged on one shard's block or on a sharded global array; ``geometry`` must
    match ``state`` (None: the setup's global arrays). Computed in the compute dtype from the
    decoded populations, whatever the storage.
    """
    lat = setup.lattice
    f = decode_populations(setup, state.populations)
    rho, u = density_velocity(lat, [f[i] for i in range(lat.q)], body_force_at(setup, state.time))
    u = jnp.stack(u)
    geometry = make_geometry(setup) if geometry is None else geometry
    if geometry.solid is not None:
        solid = geometry.solid
        rho = jnp.where(solid, 1.0, rho).astype(f.dtype)
        wall_u = jnp.zeros_like(u) if geometry.wall_velocity is None else geometry.wall_velocity
        u = jnp.where(solid[None], wall_u, u).astype(f.dtype)
    return rho, u
