"""The fluid time step composed from kernels, on ghost-padded buffers.

A chunk of n steps keeps post-collision populations in two buffers with one ghost layer on every
face, (nx+2, ny+2[, nz+2]) per direction, and alternates between them. One step:
    1. pull: f_i(x) = f_i*(x - c_i) is a static slice of the padded buffer (no copy: XLA fuses
       it into its consumers, unlike jnp.roll, which it materialises);
    2. walls: half-way bounce-back (Ladd's rule on moving walls) or Bouzidi on curved walls,
       both reading only slices of the same buffer;
    3. inlets and outlets by regularized non-equilibrium extrapolation;
    4. momentum-exchange force on the obstacle;
    5. moments (rho, u) once, materialised as one (*shape, d+1) array so that the q output
       fusions do not each recompute them from all q inputs;
    6. BGK or TRT collision with Guo's source, written into the other buffer's interior;
    7. ghost layers filled from the freshly computed interior (periodic edges). A neighbouring
       subdomain or a wall fills the same ghosts in the distributed code: halos are one more
       boundary rule.
The state seen outside a chunk holds pre-collision populations at its time; the chunk collides
them once on entry and streams once on exit. docs/performance.md has the measurements behind
each choice. Static choices (which directions touch walls, which boundary kinds exist) are read
from the FluidSetup on the host, so the traced program holds only the work the problem needs.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels import boundaries, collision
from kernels.equilibrium import density_velocity, equilibrium
from kernels.lattices import CS2
from solver.distributed.decomposition import neighbour_offsets
from solver.distributed.halo import Halo, SingleHalo, shift_together
from solver.fluid.setup import FluidSetup

SINGLE = SingleHalo()


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FluidState:
    """Dynamic fluid state.

    Attributes:
        populations: (q, *shape) pre-collision populations at ``time``, lattice units.
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
    """

    solid: Array | None
    obstacle: Array | None
    wall_velocity: Array | None
    wall_distance: Array | None
    open_velocity: tuple[Array | None, ...]


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
    return FluidState(populations=populations, time=jnp.zeros((), jnp.int32))


def body_force_at(setup: FluidSetup, time: Array) -> tuple | None:
    """Body force density (d scalars, lattice units) at step ``time``; None without a force."""
    bf = setup.body_force
    if bf is None:
        return None
    if bf.amplitude is None or not any(bf.amplitude):
        return tuple(float(c) for c in bf.constant)
    s = jnp.sin(bf.angular_frequency * time.astype(setup.dtype) + bf.phase)
    return tuple(c + a * s for c, a in zip(bf.constant, bf.amplitude, strict=True))


def _linked_directions(setup: FluidSetup, mask: np.ndarray | None) -> list[bool]:
    """Which directions i have a fluid node whose upstream node x - c_i is in ``mask``."""
    lat = setup.lattice
    if mask is None or not mask.any():
        return [False] * lat.q
    fluid = ~setup.solid
    out = []
    for i in range(lat.q):
        up = np.roll(mask, tuple(int(v) for v in lat.c[i]), axis=tuple(range(lat.d)))
        out.append(i != 0 and bool((up & fluid).any()))
    return out


# ---------------------------------------------------------------- padded-buffer helpers


def pad_with_halo(field: Array, lead: int = 0, halo: Halo = SINGLE) -> Array:
    """(*lead_axes, *shape) -> (*lead_axes, *(shape + 2)) with every ghost layer (faces, edges,
    corners) filled by ``halo``: periodic on one device, from the neighbours when sharded (one
    message per neighbour)."""
    d = field.ndim - lead
    shape = field.shape[lead:]
    padded = jnp.pad(field, [(0, 0)] * lead + [(1, 1)] * d)
    routes: dict[tuple[int, ...], list] = {}
    for offset in neighbour_offsets(d):
        moving = tuple(a for a, o in enumerate(offset) if o)
        for axes, src_start, src_size, ghost_start in ghost_regions(offset, shape):
            if axes == moving:  # the region only this offset reads
                block = lax.slice(
                    field,
                    [0] * lead + src_start,
                    list(field.shape[:lead])
                    + [s + n for s, n in zip(src_start, src_size, strict=True)],
                )
                routes.setdefault(halo.route(offset), []).append((ghost_start, block))
    for route, items in routes.items():
        blocks = [block for _, block in items]
        if any(route):
            blocks = shift_together(halo, blocks, route)
        for (ghost_start, _), block in zip(items, blocks, strict=True):
            padded = lax.dynamic_update_slice(padded, block, [0] * lead + ghost_start)
    return padded


def upstream(
    padded: Array, offset: Sequence[int], region: Sequence[tuple[int, int]] | None = None
) -> Array:
    """Interior view of a padded (*shape + 2) array shifted by ``offset``: out(x) = a(x - offset).

    A static slice, which XLA fuses into its consumer. ``region`` restricts the view to
    (start, size) per axis in interior coordinates; None is the whole interior.
    """
    if region is None:
        region = [(0, n - 2) for n in padded.shape]
    starts = [1 - int(o) + r0 for o, (r0, _) in zip(offset, region, strict=True)]
    limits = [s + size for s, (_, size) in zip(starts, region, strict=True)]
    return lax.slice(padded, starts, limits)


def ghost_regions(offset: Sequence[int], shape: Sequence[int]):
    """The ghost regions that a pull along ``offset`` reads, and where their values come from.

    Yields (axes, source_start, source_size, ghost_start): the axes the region lies outside the
    interior along, a block of the unpadded interior array and the padded index where it lands.
    On one device the block is this array's own opposite edge (periodic); sharded, the same
    block of the neighbouring shard at ``-offset`` along ``axes``. Faces, edges and corners are
    all covered, which matters for diagonal directions (edges in D3Q19, corners in D3Q27).
    """
    moving = [a for a, o in enumerate(offset) if o != 0]
    for r in range(1, len(moving) + 1):
        for axes in itertools.combinations(moving, r):
            src_start, src_size, ghost_start = [], [], []
            for a, n in enumerate(shape):
                if a in axes:
                    low = offset[a] > 0  # reads the low ghost, which mirrors the last plane
                    src_start.append(n - 1 if low else 0)
                    src_size.append(1)
                    ghost_start.append(0 if low else n + 1)
                else:
                    src_start.append(0)
                    src_size.append(n)
                    ghost_start.append(1)
            yield axes, src_start, src_size, ghost_start


def write_padded(
    buffers: Sequence[Array],
    interiors: Sequence[Array],
    offsets: Sequence[Sequence[int]],
    halo: Halo = SINGLE,
) -> tuple[Array, ...]:
    """Store each ``interiors[i]`` (*shape) into ``buffers[i]`` and fill the ghosts a pull along
    ``offsets[i]`` will read, from the interior values themselves (not from the buffer: reading
    the buffer back makes XLA copy the whole array), through ``halo``: a periodic wrap, or a
    neighbour's block. Blocks for the same neighbour travel together (one message per
    neighbour and step)."""
    d = interiors[0].ndim
    out = [
        lax.dynamic_update_slice(b, x, (1,) * d) for b, x in zip(buffers, interiors, strict=True)
    ]
    routes: dict[tuple[int, ...], list] = {}
    for i, (interior, offset) in enumerate(zip(interiors, offsets, strict=True)):
        for axes, src_start, src_size, ghost_start in ghost_regions(offset, interior.shape):
            block = lax.slice(
                interior, src_start, [s + n for s, n in zip(src_start, src_size, strict=True)]
            )
            shift = [int(o) if a in axes else 0 for a, o in enumerate(offset)]
            routes.setdefault(halo.route(shift), []).append((i, ghost_start, block))
    for route, items in routes.items():
        blocks = [block for _, _, block in items]
        if any(route):
            blocks = shift_together(halo, blocks, route)
        for (i, ghost_start, _), block in zip(items, blocks, strict=True):
            out[i] = lax.dynamic_update_slice(out[i], block, ghost_start)
    return tuple(out)


# ---------------------------------------------------------------- the step


def make_chunk(
    setup: FluidSetup, halo: Halo = SINGLE
) -> Callable[[FluidState, FluidGeometry, int], tuple[FluidState, Array]]:
    """Build chunk(state, geometry, n) -> (state after n steps, forces (n, d)).

    ``n`` is static; the caller jits with static_argnums=2 and donates the state. The forces
    are the momentum-exchange force on ``setup.obstacle`` at each step, lattice units, summed
    over all shards.

    ``setup`` describes the global problem (which directions touch walls is decided on it, so
    every shard traces the same program); ``state`` and ``geometry`` hold this shard's block,
    and ``halo`` fills the ghost layers and tells which global faces the block touches. With
    the default ``SingleHalo`` the block is the whole grid with periodic edges.
    """
    lat = setup.lattice
    q, d = lat.q, lat.d
    omega_plus = setup.omega
    omega_minus = (
        collision.trt_omega_minus(omega_plus, setup.trt_magic)
        if setup.collision == "trt"
        else omega_plus
    )
    has_solid = setup.solid is not None and bool(setup.solid.any())
    wall_links = _linked_directions(setup, setup.solid if has_solid else None)
    obstacle_links = _linked_directions(setup, setup.obstacle if has_solid else None)
    moving = has_solid and setup.wall_velocity is not None and bool(np.any(setup.wall_velocity))
    curved = has_solid and setup.wall_distance is not None
    dtype = jnp.dtype(setup.dtype)

    def collide(pre: Sequence[Array], time: Array) -> tuple[Array, ...]:
        force = body_force_at(setup, time)
        # one materialised (*shape, d+1) array (rho, u): every population enters as
        # p[..., None] * (1, c_i), divided by (1, rho, ..., rho). The divide keeps XLA from
        # re-fusing the moments into the q output fusions (which would each re-read all q
        # inputs); avoiding a concatenate keeps the fusion vectorised (with 27 inputs LLVM left
        # the concatenate form scalar: D3Q27 1.5x faster periodic, 2.7x with walls)
        rows = np.concatenate([np.ones((q, 1)), lat.c], axis=1).astype(dtype)  # (q, d+1)
        sums = sum(pre[i][..., None] * rows[i] for i in range(q))
        if force is not None:
            half_force = [jnp.zeros((), dtype)] + [jnp.asarray(0.5 * f, dtype) for f in force]
            sums = sums + jnp.stack(half_force)
        rho_col = sum(pre[i] for i in range(q))[..., None]
        first = lax.broadcasted_iota(jnp.int32, sums.shape, sums.ndim - 1) == 0
        moments = sums / jnp.where(first, jnp.ones_like(rho_col), rho_col)
        rho, u = moments[..., 0], [moments[..., 1 + a] for a in range(d)]
        feq = equilibrium(lat, rho, u)
        if setup.collision == "trt":
            post = collision.trt(lat, pre, feq, omega_plus, omega_minus)
        else:
            post = collision.bgk(lat, pre, feq, omega_plus)
        if force is not None:
            src = collision.guo_source(lat, u, force, omega_plus, omega_minus)
            post = tuple(post[i] + src[i] for i in range(q))
        return tuple(p.astype(dtype) for p in post)

    def walls(buffers: Sequence[Array], geo: dict, region=None) -> tuple[list, list, Array]:
        """Streamed populations with the wall rules applied, over ``region`` (None: all).

        Returns (pre, here, fluid): q arrays after walls, q arrays f_i*(x), the fluid mask.
        """
        zero = (0,) * d
        pre = [upstream(buffers[i], lat.c[i], region) for i in range(q)]
        if not has_solid:
            return pre, None, None
        here = [upstream(buffers[i], zero, region) for i in range(q)]  # f_i*(x)
        solid = geo["solid"]
        fluid = ~upstream(solid, zero, region)
        incoming = [
            fluid & upstream(solid, lat.c[i], region) if wall_links[i] else None for i in range(q)
        ]
        if curved:
            distance = [
                upstream(geo["wall_distance"][int(lat.opposite[i])], zero, region)
                if wall_links[i]
                else None
                for i in range(q)
            ]
            pre = boundaries.interpolated_bounce_back(lat, pre, here, incoming, distance)
        else:
            wall_u = None
            if moving:
                wall_u = [
                    [upstream(geo["wall_velocity"][a], lat.c[i], region) for a in range(d)]
                    if wall_links[i]
                    else None
                    for i in range(q)
                ]
            # Ladd's term with the reference density 1: the wall node's own density is not at
            # hand in pull form without re-reading all q directions
            pre = boundaries.halfway_bounce_back(lat, pre, here, incoming, 1.0, wall_u)
        return pre, here, fluid

    def open_boundaries(buffers: Sequence[Array], geo: dict, pre: Sequence[Array]) -> tuple:
        """Overwrite every population on inlet and outlet faces (fluid nodes only).

        ``pre`` are materialised arrays; the plane one cell inside is recomputed from the
        buffers over that plane alone and the face is written with an in-place update, so the
        extrapolation costs face-sized work (a select against a face mask instead made XLA
        evaluate it in every cell).
        """
        pre = list(pre)
        for ob, velocity in zip(setup.open_boundaries, geo["open_velocity"], strict=True):
            local_shape = pre[0].shape
            n = local_shape[ob.axis]
            face, inner = (0, 1) if ob.side == "low" else (n - 1, n - 2)
            plane = [(0, size) for size in local_shape]
            plane[ob.axis] = (inner, 1)
            neighbour, _, _ = walls(buffers, geo, plane)
            if ob.kind == "velocity":
                vel = [jnp.expand_dims(velocity[a], ob.axis) for a in range(d)]
                values = boundaries.nonequilibrium_extrapolation(lat, neighbour, velocity=vel)
            else:
                values = boundaries.nonequilibrium_extrapolation(lat, neighbour, density=ob.density)
            start = [0] * d
            start[ob.axis] = face
            # solid face nodes, and every node of a shard away from the global face, keep
            # their own values
            edge = halo.at_edge(ob.axis, ob.side)
            keep = None if edge is True else ~jnp.asarray(edge)
            if has_solid:
                solid_face = lax.index_in_dim(geo["solid_interior"], face, ob.axis)
                keep = solid_face if keep is None else keep | solid_face
            if keep is not None:
                values = [
                    jnp.where(keep, lax.index_in_dim(p, face, ob.axis), v)
                    for v, p in zip(values, pre, strict=True)
                ]
            pre = [
                lax.dynamic_update_slice(p, v.astype(dtype), start)
                for p, v in zip(pre, values, strict=True)
            ]
        return tuple(pre)

    # With curved walls, inlets/outlets or force measurement the streamed populations are long
    # expressions that every consumer (moments, q outputs, force sums) would recompute; they
    # are written once into scratch buffers instead (an in-place update of a loop-carried
    # array, which XLA cannot fuse away).
    materialize = curved or bool(setup.open_boundaries) or any(obstacle_links)

    def pull(buffers: Sequence[Array], geo: dict, scratch: tuple):
        """Pre-collision populations (q arrays (*shape)), the obstacle force (d,) and the
        scratch buffers they were written to (empty when not materialised)."""
        pre, here, fluid = walls(buffers, geo)
        if has_solid:
            pre = [jnp.where(fluid, pre[i], float(lat.w[i])) for i in range(q)]
        pre = [p.astype(dtype) for p in pre]
        if materialize:
            zero = (0,) * d
            pre = [lax.dynamic_update_slice(s, p, zero) for s, p in zip(scratch, pre, strict=True)]
            pre = open_boundaries(buffers, geo, pre)
            scratch = tuple(pre)
        force = jnp.zeros((d,), dtype)
        if any(obstacle_links):
            at_obstacle = [
                fluid & upstream(geo["obstacle"], lat.c[i]) if obstacle_links[i] else None
                for i in range(q)
            ]
            force = jnp.stack(boundaries.momentum_exchange(lat, here, pre, at_obstacle))
            force = force.astype(dtype)
        return tuple(pre), force, scratch

    def advance(src, dst, scratch, geo: dict, time: Array, after: Array | None = None):
        """One step: pull from ``src`` (post-collision at time-1), collide, write ``dst``.

        ``after``: the previous step's force. Adding 0 * after makes this step's writes depend
        on it; otherwise XLA may schedule that force sum (which reads the buffer written here)
        late and protects the buffer with q full copies per step.
        """
        pre, force, scratch = pull(src, geo, scratch)
        post = collide(pre, time)
        if after is not None and any(obstacle_links):
            post = tuple(p + 0.0 * after[0] for p in post)
        dst = write_padded(dst, post, lat.c, halo)
        return dst, scratch, force

    def padded_geometry(geometry: FluidGeometry) -> dict:
        geo = {"open_velocity": geometry.open_velocity}
        if has_solid:
            geo["solid"] = pad_with_halo(geometry.solid, 0, halo)
            geo["solid_interior"] = geometry.solid
            if curved:
                geo["wall_distance"] = pad_with_halo(geometry.wall_distance, 1, halo)
            if any(obstacle_links):
                geo["obstacle"] = pad_with_halo(geometry.obstacle, 0, halo)
            if moving:
                geo["wall_velocity"] = pad_with_halo(geometry.wall_velocity, 1, halo)
        return geo

    def chunk(state: FluidState, geometry: FluidGeometry, n: int) -> tuple[FluidState, Array]:
        geo = padded_geometry(geometry)
        t0 = state.time
        post = collide([state.populations[i] for i in range(q)], t0)
        # only the ghosts each direction's pull reads, as in every step
        a = write_padded(tuple(jnp.pad(jnp.zeros_like(p), 1) for p in post), post, lat.c, halo)
        b = tuple(jnp.zeros_like(p) for p in a)
        forces = []

        # zeros_like keeps the shard-varying type inside shard_map (a scan carry must keep it)
        zero = jnp.zeros_like(state.populations[0])
        scratch = tuple(zero for _ in range(q)) if materialize else ()

        # two steps per iteration, a -> b -> a, so the loop carry never swaps buffers
        # (a swapped carry makes XLA insert full copies)
        def two_steps(carry, k):
            a, b, scratch = carry
            b, scratch, f1 = advance(a, b, scratch, geo, t0 + 2 * k + 1)
            a, scratch, f2 = advance(b, a, scratch, geo, t0 + 2 * k + 2, after=f1)
            return (a, b, scratch), jnp.stack([f1, f2])

        pairs = (n - 1) // 2
        if pairs:
            (a, b, scratch), paired = lax.scan(
                two_steps, (a, b, scratch), jnp.arange(pairs, dtype=jnp.int32)
            )
            forces.append(paired.reshape(2 * pairs, d))
        if (n - 1) % 2:
            b, scratch, f = advance(a, b, scratch, geo, t0 + n - 1)
            a = b
            forces.append(f[None])
        pre, f, _ = pull(a, geo, scratch)
        forces.append(f[None])
        new_state = FluidState(populations=jnp.stack(pre), time=t0 + n)
        forces = jnp.concatenate(forces)
        if any(obstacle_links):
            forces = halo.sum(forces)
        return new_state, forces

    return chunk


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
    match ``state`` (None: the setup's global arrays).
    """
    lat = setup.lattice
    f = state.populations
    rho, u = density_velocity(lat, [f[i] for i in range(lat.q)], body_force_at(setup, state.time))
    u = jnp.stack(u)
    geometry = make_geometry(setup) if geometry is None else geometry
    if geometry.solid is not None:
        solid = geometry.solid
        rho = jnp.where(solid, 1.0, rho).astype(f.dtype)
        wall_u = jnp.zeros_like(u) if geometry.wall_velocity is None else geometry.wall_velocity
        u = jnp.where(solid[None], wall_u, u).astype(f.dtype)
    return rho, u
