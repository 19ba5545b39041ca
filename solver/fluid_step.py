"""The fluid time step composed from kernels: collide, stream, apply boundary rules.

One step maps pre-collision populations at time t to those at t+1:
    1. moments (rho, u) with Guo's half-force shift;
    2. BGK or TRT collision with Guo's source;
    3. periodic pull streaming;
    4. walls: half-way bounce-back (Ladd's rule on moving walls) or Bouzidi on curved walls;
    5. inlets and outlets by non-equilibrium extrapolation;
    6. momentum-exchange force on the obstacle; solid nodes reset to rest.
Static choices (which directions touch walls, which boundary kinds exist) are read from the
FluidSetup on the host, so the traced program contains only the work the problem needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from kernels import boundaries, collision
from kernels.equilibrium import density_velocity, equilibrium
from kernels.lattices import CS2
from kernels.streaming import shift, stream
from solver.fluid_setup import FluidSetup


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class FluidState:
    """Dynamic fluid state.

    Attributes:
        populations: (q, *shape) pre-collision populations, lattice units.
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


def make_geometry(setup: FluidSetup) -> FluidGeometry:
    """Move the setup's geometry arrays to the device in the setup's dtype."""

    def as_device(arr, dtype):
        return None if arr is None else jnp.asarray(arr, dtype=dtype)

    return FluidGeometry(
        solid=as_device(setup.solid, bool),
        obstacle=as_device(setup.obstacle, bool),
        wall_velocity=as_device(setup.wall_velocity, setup.dtype),
        wall_distance=as_device(setup.wall_distance, setup.dtype),
        open_velocity=tuple(as_device(b.velocity, setup.dtype) for b in setup.open_boundaries),
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
            out.append(f[i] - (setup.tau * lat.w[i] / CS2) * rho * contraction)
        f = tuple(out)
    return FluidState(populations=jnp.stack(f), time=jnp.zeros((), jnp.int32))


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


def make_step(setup: FluidSetup) -> Callable[[FluidState, FluidGeometry], tuple[FluidState, Array]]:
    """Build step(state, geometry) -> (state, force on obstacle (d,) in lattice units)."""
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
    moving = setup.wall_velocity is not None and bool(np.any(setup.wall_velocity))
    curved = setup.wall_distance is not None

    def step(state: FluidState, geometry: FluidGeometry) -> tuple[FluidState, Array]:
        f = state.populations
        fl = [f[i] for i in range(q)]
        force = body_force_at(setup, state.time)
        rho, u = density_velocity(lat, fl, force)
        feq = equilibrium(lat, rho, u)
        if setup.collision == "trt":
            post = collision.trt(lat, fl, feq, omega_plus, omega_minus)
        else:
            post = collision.bgk(lat, fl, feq, omega_plus)
        if force is not None:
            src = collision.guo_source(lat, u, force, omega_plus, omega_minus)
            post = tuple(post[i] + src[i] for i in range(q))
        new = stream(lat, post)

        obstacle_force = jnp.zeros((d,), dtype=f.dtype)
        if has_solid:
            solid = geometry.solid
            fluid = ~solid
            incoming = [
                (fluid & shift(solid, lat.c[i])) if wall_links[i] else None for i in range(q)
            ]
            if curved:
                distance = [
                    geometry.wall_distance[int(lat.opposite[i])] if wall_links[i] else None
                    for i in range(q)
                ]
                new = boundaries.interpolated_bounce_back(lat, new, post, incoming, distance)
            else:
                wall_u = None
                if moving:
                    wall_u = [
                        [shift(geometry.wall_velocity[a], lat.c[i]) for a in range(d)]
                        if wall_links[i]
                        else None
                        for i in range(q)
                    ]
                new = boundaries.halfway_bounce_back(lat, new, post, incoming, rho, wall_u)
            new = _apply_open_boundaries(setup, geometry, new)
            if any(obstacle_links):
                at_obstacle = [
                    (fluid & shift(geometry.obstacle, lat.c[i])) if obstacle_links[i] else None
                    for i in range(q)
                ]
                obstacle_force = jnp.stack(
                    boundaries.momentum_exchange(lat, post, new, at_obstacle)
                ).astype(f.dtype)
            new = tuple(jnp.where(solid, lat.w[i], new[i]).astype(f.dtype) for i in range(q))
        else:
            new = _apply_open_boundaries(setup, geometry, new)

        next_state = FluidState(populations=jnp.stack(new), time=state.time + 1)
        return next_state, obstacle_force

    return step


def _apply_open_boundaries(setup: FluidSetup, geometry: FluidGeometry, new: tuple) -> tuple:
    """Overwrite every population on inlet and outlet faces (fluid nodes only)."""
    lat = setup.lattice
    for ob, velocity in zip(setup.open_boundaries, geometry.open_velocity, strict=True):
        n = setup.shape[ob.axis]
        face, inner = (0, 1) if ob.side == "low" else (n - 1, n - 2)
        neighbour = [jnp.take(p, inner, axis=ob.axis) for p in new]
        current = [jnp.take(p, face, axis=ob.axis) for p in new]
        if ob.kind == "velocity":
            values = boundaries.nonequilibrium_extrapolation(
                lat, neighbour, velocity=[velocity[a] for a in range(lat.d)]
            )
        else:
            values = boundaries.nonequilibrium_extrapolation(lat, neighbour, density=ob.density)
        if geometry.solid is not None:
            face_fluid = ~jnp.take(geometry.solid, face, axis=ob.axis)
            values = [jnp.where(face_fluid, v, c) for v, c in zip(values, current, strict=True)]
        index = [slice(None)] * lat.d
        index[ob.axis] = face
        new = tuple(
            p.at[tuple(index)].set(v.astype(p.dtype)) for p, v in zip(new, values, strict=True)
        )
    return new


def make_chunk(
    setup: FluidSetup,
) -> Callable[[FluidState, FluidGeometry, int], tuple[FluidState, Array]]:
    """Build chunk(state, geometry, n) -> (state, forces (n, d)); n is static, caller jits."""
    step = make_step(setup)

    def chunk(state: FluidState, geometry: FluidGeometry, n: int) -> tuple[FluidState, Array]:
        def body(carry, _):
            return step(carry, geometry)

        return jax.lax.scan(body, state, None, length=n)

    return chunk


def macroscopic(
    setup: FluidSetup, state: FluidState, geometry: FluidGeometry | None = None
) -> tuple[Array, Array]:
    """Density (*shape) and velocity (d, *shape) in lattice units at the state's time.

    Solid nodes report density 1 and the wall velocity (zero for resting walls).
    """
    lat = setup.lattice
    f = state.populations
    rho, u = density_velocity(lat, [f[i] for i in range(lat.q)], body_force_at(setup, state.time))
    u = jnp.stack(u)
    if setup.solid is not None:
        solid = jnp.asarray(setup.solid)
        rho = jnp.where(solid, 1.0, rho).astype(f.dtype)
        wall_u = (
            jnp.zeros_like(u) if setup.wall_velocity is None else jnp.asarray(setup.wall_velocity)
        )
        u = jnp.where(solid[None], wall_u, u).astype(f.dtype)
    return rho, u
