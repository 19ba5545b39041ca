"""Boundary parts of the fluid step, in pull form, and the host-side choice of them for a setup.

Every part has the signature of ``BoundaryRule``::

    rule(f, pull) -> f

    f:    q arrays (*region), the populations at time t as far as the earlier parts made them
          (first the streamed f_i(x) = f_i*(x - c_i)), lattice units
    pull: a ``Pull``: the post-collision buffers f_i* at t-1 (q padded arrays (*shape + 2)),
          the padded geometry and the region of the interior the arrays in f cover

The step runs the parts of a ``BoundaryPlan`` in order (``plan_boundaries`` picks them from
the setup on the host, so the traced program holds only what the problem needs):

    walls  link rules, elementwise on slices of the buffers (so they work on any region):
           half-way bounce-back, Ladd's moving walls, Bouzidi's curved walls
    nodes  per-node rules on the whole interior after the walls: rest state in solid nodes
    faces  open boundaries on the materialised populations, face-sized in-place updates
    force  the momentum-exchange force on the obstacle, (f, pull) -> (d,)

The equations are in kernels/boundaries.py. A new wall rule is one function here and one branch
in ``plan_boundaries``; a new open-boundary kind is one function ``(lattice, neighbour, ob,
velocity) -> face populations`` and one entry in ``OPEN_BOUNDARIES``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels import boundaries
from kernels.equilibrium import Populations
from kernels.lattices import Lattice
from solver.distributed.halo import Halo
from solver.fluid.padded import Region, upstream
from solver.fluid.setup import FluidSetup, OpenBoundary


@dataclass(frozen=True, eq=False)
class Pull:
    """The post-collision buffers seen from (a region of) the interior, in pull form.

    Attributes:
        lattice: the velocity set.
        buffers: q arrays (*shape + 2), post-collision populations f_i* with filled ghosts.
        geometry: padded geometry arrays by name (``solid`` (*shape + 2), ``wall_distance``
            (q, *shape + 2), ...), plus ``solid_interior`` (*shape) and ``open_velocity``.
        wall_links: per direction, whether some fluid node pulls it out of a solid node.
        region: (start, size) per axis in interior coordinates; None is the whole interior.
    """

    lattice: Lattice
    buffers: Sequence[Array]
    geometry: Mapping[str, Any]
    wall_links: tuple[bool, ...]
    region: Region | None = None

    def shifted(self, padded: Array, offset: Sequence[int]) -> Array:
        """a(x - offset) over the region, for a padded (*shape + 2) array (a static slice)."""
        return upstream(padded, offset, self.region)

    def at(self, region: Region) -> Pull:
        """The same buffers seen from another region."""
        return dataclasses.replace(self, region=region)

    @cached_property
    def here(self) -> list[Array]:
        """q arrays f_i*(x): the post-collision populations at the node itself."""
        zero = (0,) * self.lattice.d
        return [self.shifted(self.buffers[i], zero) for i in range(self.lattice.q)]

    @cached_property
    def fluid(self) -> Array:
        """(*region) bool, True on fluid nodes."""
        return ~self.shifted(self.geometry["solid"], (0,) * self.lattice.d)

    @cached_property
    def incoming(self) -> list[Array | None]:
        """Per direction i, the fluid nodes whose upstream node x - c_i is solid (None: none)."""
        lat, solid = self.lattice, self.geometry["solid"]
        return [
            self.fluid & self.shifted(solid, lat.c[i]) if self.wall_links[i] else None
            for i in range(lat.q)
        ]


BoundaryRule = Callable[[Populations, Pull], Sequence[Array]]
ForceRule = Callable[[Populations, Pull], Array]


def stream(pull: Pull, walls: Sequence[BoundaryRule]) -> Sequence[Array]:
    """f_i(x) = f_i*(x - c_i) over the pull's region, then the wall rules in order."""
    lat = pull.lattice
    f: Sequence[Array] = [pull.shifted(pull.buffers[i], lat.c[i]) for i in range(lat.q)]
    for rule in walls:
        f = rule(f, pull)
    return f


# ---------------------------------------------------------------- wall rules (link rules)


def bounce_back(f: Populations, pull: Pull) -> tuple[Array, ...]:
    """Half-way bounce-back on resting walls: f_i(x) = f_j*(x) on links into a solid."""
    here, incoming = pull.here, pull.incoming
    return boundaries.halfway_bounce_back(pull.lattice, f, here, incoming, 1.0)


def moving_wall(f: Populations, pull: Pull) -> tuple[Array, ...]:
    """Half-way bounce-back with Ladd's term, f_i(x) = f_j*(x) + 2 w_i rho_w (c_i.u_w) / c_s^2,
    u_w the velocity of the solid node x - c_i (``wall_velocity``)."""
    lat = pull.lattice
    here, incoming = pull.here, pull.incoming
    wall_u = [
        [pull.shifted(pull.geometry["wall_velocity"][a], lat.c[i]) for a in range(lat.d)]
        if pull.wall_links[i]
        else None
        for i in range(lat.q)
    ]
    # Ladd's term with the reference density rho_w = 1: the wall node's own density is not at
    # hand in pull form without re-reading all q directions
    return boundaries.halfway_bounce_back(lat, f, here, incoming, 1.0, wall_u)


def bouzidi(f: Populations, pull: Pull) -> tuple[Array, ...]:
    """Bouzidi's interpolated bounce-back on resting curved walls, link fractions from
    ``wall_distance`` (the fraction of the link x -> x + c_j in the fluid, j = opposite(i))."""
    lat = pull.lattice
    here, incoming = pull.here, pull.incoming
    zero = (0,) * lat.d
    distance = [
        pull.shifted(pull.geometry["wall_distance"][int(lat.opposite[i])], zero)
        if pull.wall_links[i]
        else None
        for i in range(lat.q)
    ]
    return boundaries.interpolated_bounce_back(lat, f, here, incoming, distance)


# ---------------------------------------------------------------- node rules


def rest_in_solids(f: Populations, pull: Pull) -> list[Array]:
    """Solid nodes hold the rest equilibrium f_i = w_i (rho = 1, u = 0), so they stay finite."""
    lat = pull.lattice
    return [jnp.where(pull.fluid, f[i], float(lat.w[i])) for i in range(lat.q)]


# ---------------------------------------------------------------- open boundaries (face rules)


def velocity_inlet(
    lattice: Lattice, neighbour: Populations, ob: OpenBoundary, velocity: Array
) -> tuple[Array, ...]:
    """Prescribed velocity (d, *face), density extrapolated from the neighbour plane."""
    vel = [jnp.expand_dims(velocity[a], ob.axis) for a in range(lattice.d)]
    return boundaries.nonequilibrium_extrapolation(lattice, neighbour, velocity=vel)


def pressure_outlet(
    lattice: Lattice, neighbour: Populations, ob: OpenBoundary, velocity: Array | None
) -> tuple[Array, ...]:
    """Prescribed density ``ob.density``, velocity extrapolated from the neighbour plane."""
    return boundaries.nonequilibrium_extrapolation(lattice, neighbour, density=ob.density)


# OpenBoundary.kind -> populations on the face from those one plane inside
OPEN_BOUNDARIES: dict[str, Callable[..., tuple[Array, ...]]] = {
    "velocity": velocity_inlet,
    "pressure": pressure_outlet,
}


def open_boundary(
    ob: OpenBoundary, index: int, walls: Sequence[BoundaryRule], halo: Halo, has_solid: bool
) -> BoundaryRule:
    """The face rule for ``setup.open_boundaries[index]``: overwrite every population on the
    face by regularized non-equilibrium extrapolation (fluid nodes only).

    ``f`` must be materialised arrays: the plane one cell inside is recomputed from the
    buffers over that plane alone (streaming and ``walls``) and the face is written with an
    in-place update, so the extrapolation costs face-sized work (a select against a face mask
    instead made XLA evaluate it in every cell).
    """
    face_values = OPEN_BOUNDARIES[ob.kind]

    def apply(f: Populations, pull: Pull) -> list[Array]:
        lat, d = pull.lattice, pull.lattice.d
        velocity = pull.geometry["open_velocity"][index]
        local_shape = f[0].shape
        n = local_shape[ob.axis]
        face, inner = (0, 1) if ob.side == "low" else (n - 1, n - 2)
        plane = [(0, size) for size in local_shape]
        plane[ob.axis] = (inner, 1)
        neighbour = stream(pull.at(plane), walls)
        values = face_values(lat, neighbour, ob, velocity)
        start = [0] * d
        start[ob.axis] = face
        # solid face nodes, and every node of a shard away from the global face, keep their
        # own values
        edge = halo.at_edge(ob.axis, ob.side)
        keep = None if edge is True else ~jnp.asarray(edge)
        if has_solid:
            solid_face = lax.index_in_dim(pull.geometry["solid_interior"], face, ob.axis)
            keep = solid_face if keep is None else keep | solid_face
        if keep is not None:
            values = [
                jnp.where(keep, lax.index_in_dim(p, face, ob.axis), v)
                for v, p in zip(values, f, strict=True)
            ]
        return [
            lax.dynamic_update_slice(p, v.astype(p.dtype), start)
            for p, v in zip(f, values, strict=True)
        ]

    return apply


# ---------------------------------------------------------------- force on the obstacle


def obstacle_force(obstacle_links: Sequence[bool]) -> ForceRule:
    """Momentum exchange (Ladd 1994) on the links from fluid nodes into ``obstacle``:
    F = sum over links of c_j [f_j*(x) + f_i(x)], d scalars in lattice units (this block's
    share; the chunk sums over shards)."""

    def measure(f: Populations, pull: Pull) -> Array:
        lat = pull.lattice
        at_obstacle = [
            pull.fluid & pull.shifted(pull.geometry["obstacle"], lat.c[i])
            if obstacle_links[i]
            else None
            for i in range(lat.q)
        ]
        force = jnp.stack(boundaries.momentum_exchange(lat, pull.here, f, at_obstacle))
        return force.astype(f[0].dtype)

    return measure


# ---------------------------------------------------------------- the plan for a setup


def linked_directions(setup: FluidSetup, mask: np.ndarray | None) -> list[bool]:
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


@dataclass(frozen=True)
class BoundaryPlan:
    """The boundary parts of one setup, in the order the step applies them.

    Attributes:
        walls: link rules after streaming (also re-run on the planes next to open faces).
        nodes: per-node rules on the whole interior after the walls.
        faces: open-boundary rules on the materialised populations.
        force: the obstacle force, or None (then the step reports zeros).
        wall_links: per direction, whether it has links into a solid.
        padded: geometry fields the parts read, (FluidGeometry attribute, leading axes), padded
            with ghosts in this order.
        materialise: write the populations after walls and nodes into scratch buffers once,
            before the faces, the force and the collision read them.
    """

    walls: tuple[BoundaryRule, ...] = ()
    nodes: tuple[BoundaryRule, ...] = ()
    faces: tuple[BoundaryRule, ...] = ()
    force: ForceRule | None = None
    wall_links: tuple[bool, ...] = ()
    padded: tuple[tuple[str, int], ...] = ()
    materialise: bool = False


def plan_boundaries(setup: FluidSetup, halo: Halo) -> BoundaryPlan:
    """Pick the boundary parts the setup needs, on the host (global setup: every shard traces
    the same program)."""
    has_solid = setup.solid is not None and bool(setup.solid.any())
    wall_links = tuple(linked_directions(setup, setup.solid if has_solid else None))
    obstacle_links = linked_directions(setup, setup.obstacle if has_solid else None)
    moving = has_solid and setup.wall_velocity is not None and bool(np.any(setup.wall_velocity))
    curved = has_solid and setup.wall_distance is not None
    walls: tuple[BoundaryRule, ...] = ()
    padded: list[tuple[str, int]] = []
    if has_solid:
        padded.append(("solid", 0))
        if curved:  # Bouzidi's walls rest: a wall velocity is not used with them
            walls = (bouzidi,)
            padded.append(("wall_distance", 1))
        elif moving:
            walls = (moving_wall,)
        else:
            walls = (bounce_back,)
    force = None
    if any(obstacle_links):
        force = obstacle_force(obstacle_links)
        padded.append(("obstacle", 0))
    if moving and not curved:
        padded.append(("wall_velocity", 1))
    faces = tuple(
        open_boundary(ob, k, walls, halo, has_solid) for k, ob in enumerate(setup.open_boundaries)
    )
    # With curved walls, open faces or a force the streamed populations are long expressions
    # that every consumer (moments, q outputs, force sums) would recompute; they are written
    # once into scratch buffers instead (an in-place update of a loop-carried array, which XLA
    # cannot fuse away). Open faces need it in any case (in-place face updates).
    return BoundaryPlan(
        walls=walls,
        nodes=(rest_in_solids,) if has_solid else (),
        faces=faces,
        force=force,
        wall_links=wall_links,
        padded=tuple(padded),
        materialise=curved or bool(faces) or force is not None,
    )
