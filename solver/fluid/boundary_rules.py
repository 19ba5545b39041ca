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

Walls, nodes and the force run on the plan's ``regions`` (boxes around the solid nodes) when
there are any, over a plain pull of the whole block; otherwise on the whole block.

The equations are in kernels/boundaries.py. A new wall rule is one function here and one branch
in ``plan_boundaries``; a new open-boundary kind is one function ``(lattice, neighbour, ob,
velocity) -> face populations`` and one entry in ``OPEN_BOUNDARIES``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels import boundaries, open_boundaries
from kernels.equilibrium import Populations
from kernels.lattices import CS2, Lattice
from solver.distributed.halo import Halo
from solver.errors import ConfigError
from solver.fluid.grid_field import (
    any_cells,
    covering_boxes,
    merged_boxes,
    near_walls,
    plane_pulls_from,
)
from solver.fluid.grid_field import linked_directions as setup_linked_directions
from solver.fluid.padded import Region, upstream
from solver.fluid.setup import FluidSetup, InflowSchedule, OpenBoundary


@dataclass(frozen=True, eq=False)
class Pull:
    """The post-collision buffers seen from (a region of) the interior, in pull form.

    Attributes:
        lattice: the velocity set.
        buffers: q arrays (*shape + 2), post-collision populations f_i* with filled ghosts.
        geometry: padded geometry arrays by name (``solid`` (*shape + 2), ``obstacle``, ...),
            plus unpadded ``solid_interior`` (*shape), ``wall_distance`` (q, *shape), ``sponge``
            and ``open_velocity``.
        wall_links: per direction, whether some fluid node pulls it out of a solid node.
        region: (start, size) per axis in interior coordinates; None is the whole interior.
        time: int32 scalar, the step whose pre-collision populations are being made.
        previous: (axis, index) -> q arrays, the planes of the block's open faces whose rules
            read the step before (``previous_planes``): their pre-collision populations then
            (extent 1 along the axis), or empty.
    """

    lattice: Lattice
    buffers: Sequence[Array]
    geometry: Mapping[str, Any]
    wall_links: tuple[bool, ...]
    region: Region | None = None
    time: Array | int = 0
    previous: Mapping[tuple[int, int], Sequence[Array]] = dataclasses.field(default_factory=dict)

    def shifted(self, padded: Array, offset: Sequence[int]) -> Array:
        """a(x - offset) over the region, for a padded (*shape + 2) array (a static slice)."""
        return upstream(padded, offset, self.region)

    def local(self, field: Array) -> Array:
        """The region of an unpadded (*shape) array (a static slice)."""
        if self.region is None:
            return field
        return lax.slice(field, [r0 for r0, _ in self.region], [r0 + n for r0, n in self.region])

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
    distance = [
        pull.local(pull.geometry["wall_distance"][int(lat.opposite[i])])
        if pull.wall_links[i]
        else None
        for i in range(lat.q)
    ]
    return boundaries.interpolated_bounce_back(lat, f, here, incoming, distance)


def quadratic_bouzidi(periodic: Sequence[bool]) -> BoundaryRule:
    """Bouzidi's quadratic rule on resting curved walls (``FluidSetup.curved_walls``), for a
    block with these periodic axes: the third node x + 2 c_i of a link comes from the block
    wrapped around its periodic axes; across a non-periodic edge (an open face, a symmetry
    plane) the link keeps the linear rule. One device only (``require_wall_rule``)."""

    def rule(f: Populations, pull: Pull) -> tuple[Array, ...]:
        lat = pull.lattice
        here, incoming = pull.here, pull.incoming
        solid = pull.geometry["solid"]
        distance: list[Array | None] = []
        beyond: list[tuple[Array, Array, Array] | None] = []
        for i in range(lat.q):
            if not pull.wall_links[i]:
                distance.append(None)
                beyond.append(None)
                continue
            j = int(lat.opposite[i])
            away = [-int(c) for c in lat.c[i]]
            distance.append(pull.local(pull.geometry["wall_distance"][j]))
            # the halo fills only the ghosts each direction's pull reads (a buffer's side
            # -c_i), so the nodes along +c_i come from the interior, wrapped
            second = ~wrapped(solid, away, 1, pull.region)
            usable = second & ~wrapped(solid, away, 2, pull.region)
            usable = usable & inside_after_two(away, periodic, solid.shape, pull.region)
            beyond.append(
                (
                    wrapped(pull.buffers[j], away, 2, pull.region),
                    wrapped(pull.buffers[i], away, 1, pull.region),
                    usable,
                )
            )
        return boundaries.quadratic_interpolated_bounce_back(
            lat, f, here, incoming, distance, beyond
        )

    return rule


def wrapped(padded: Array, step: Sequence[int], cells: int, region: Region | None) -> Array:
    """a(x - cells * step) over the region (cells <= 2), for a padded (*shape + 2) array, read
    from its interior with the indices wrapped around every axis (one device;
    ``inside_after_two`` masks the non-periodic axes). A static slice along each axis where the
    indices do not wrap (so XLA fuses it, as the pull's), a gather of the region's rows where
    they do."""
    if region is None:
        region = [(0, n - 2) for n in padded.shape]
    out = padded  # axis by axis, from the padded array itself (interior index + 1): slicing
    # the interior out first made XLA copy the whole block per read
    for axis, ((r0, size), o) in enumerate(zip(region, step, strict=True)):
        n = padded.shape[axis] - 2
        first = r0 - cells * int(o)
        if first >= 0 and first + size <= n:
            out = lax.slice_in_dim(out, first + 1, first + 1 + size, axis=axis)
        else:
            out = jnp.take(out, np.arange(first, first + size) % n + 1, axis=axis)
    return out


def inside_after_two(
    step: Sequence[int],
    periodic: Sequence[bool],
    padded_shape: Sequence[int],
    region: Region | None,
) -> Array:
    """(*region) bool: x - 2 step lies in the block along every non-periodic axis."""
    shape = [n - 2 for n in padded_shape]
    if region is None:
        region = [(0, n) for n in shape]
    sizes = [size for _, size in region]
    inside = jnp.ones(sizes, bool)
    for a, ((r0, _), o, wraps) in enumerate(zip(region, step, periodic, strict=True)):
        if wraps or o == 0:
            continue
        index = lax.broadcasted_iota(jnp.int32, sizes, a) + (r0 - 2 * int(o))
        inside = inside & (index >= 0) & (index < shape[a])
    return inside


def require_wall_rule(setup: FluidSetup, shards: int) -> None:
    """ConfigError (exit 2) on fluid.curved_walls where the quadratic rule cannot run: its
    third node lies two cells from the wall's first fluid node, beyond the one-cell halo of a
    sharded block."""
    if setup.curved_walls == "quadratic" and shards > 1 and setup.wall_distance is not None:
        raise ConfigError(
            "fluid.curved_walls",
            "quadratic",
            f"linear on a mesh of {shards} devices (the quadratic rule reads two cells beyond "
            "a wall's first fluid node, past the one-cell halo; domain.mesh with one device "
            "takes it)",
        )


# ---------------------------------------------------------------- node rules


def rest_in_solids(f: Populations, pull: Pull) -> list[Array]:
    """Solid nodes hold the rest equilibrium f_i = w_i (rho = 1, u = 0), so they stay finite."""
    lat = pull.lattice
    return [jnp.where(pull.fluid, f[i], float(lat.w[i])) for i in range(lat.q)]


# ---------------------------------------------------------------- open boundaries (face rules)


@dataclass(frozen=True, eq=False)
class Face:
    """What a face rule sees of one open face: q arrays of extent 1 along ``ob.axis``.

    Attributes:
        ob: the open boundary.
        pull: the step's pull (its ``time`` and ``previous`` included).
        current: q arrays, the face's populations as streaming and the walls left them.
        walls: the wall rules (re-run on the plane inside for ``neighbour``).
        face, inner: the face's index along the axis and that of the plane one cell inside.
        velocity: d arrays, the prescribed velocity at this step (inlets), else None.
        box_length: nodes of the whole box along the normal.
    """

    ob: OpenBoundary
    pull: Pull
    current: list[Array]
    walls: Sequence[BoundaryRule]
    face: int
    inner: int
    velocity: list[Array] | None
    box_length: int

    def _plane(self, index: int) -> Region:
        plane = [(0, size) for size in self.current[0].shape]
        plane[self.ob.axis] = (index, 1)
        return plane

    @cached_property
    def neighbour(self) -> Sequence[Array]:
        """f_i(x_inner, t): the plane one cell inside, streamed and walled (plane-sized work)."""
        return stream(self.pull.at(self._plane(self.inner)), self.walls)

    @cached_property
    def here_face(self) -> list[Array]:
        """f_i*(x_face, t-1): the face's post-collision populations."""
        return self.pull.at(self._plane(self.face)).here

    @cached_property
    def here_inner(self) -> list[Array]:
        """f_i*(x_inner, t-1): the post-collision populations one cell inside."""
        return self.pull.at(self._plane(self.inner)).here

    @cached_property
    def previous_face(self) -> list[Array]:
        """f_i(x_face, t-1): the face's pre-collision populations of the previous step."""
        return list(self.pull.previous[(self.ob.axis, self.face)])

    def incoming(self) -> list[int]:
        """Directions that enter the box through the face (streamed from outside it)."""
        sign = 1 if self.ob.side == "low" else -1
        normal = self.pull.lattice.c[:, self.ob.axis]
        return [i for i in range(self.pull.lattice.q) if sign * normal[i] > 0]


def velocity_inlet(lattice: Lattice, face: Face) -> tuple[Array, ...]:
    """Prescribed velocity on the face node, density extrapolated from the plane inside."""
    return boundaries.nonequilibrium_extrapolation(lattice, face.neighbour, velocity=face.velocity)


def pressure_outlet(lattice: Lattice, face: Face) -> tuple[Array, ...]:
    """Prescribed density ``ob.density`` on the face node, velocity extrapolated."""
    return boundaries.nonequilibrium_extrapolation(lattice, face.neighbour, density=face.ob.density)


def velocity_bounce_back(lattice: Lattice, face: Face) -> list[Array]:
    """Link-wise inlet: the velocity sits half a cell outside the face node; the incoming
    populations bounce back with Ladd's term and the face node's own density."""
    rho = sum(face.here_face)
    return open_boundaries.velocity_bounce_back(
        lattice, face.current, face.here_face, face.incoming(), rho, face.velocity
    )


def pressure_anti_bounce_back(lattice: Lattice, face: Face) -> list[Array]:
    """Link-wise outlet: the density ``ob.density`` half a cell outside the face node, the
    velocity there extrapolated from the face and the plane inside (at t-1)."""
    return open_boundaries.pressure_anti_bounce_back(
        lattice, face.current, face.here_face, face.here_inner, face.incoming(), face.ob.density
    )


# the sigma of Poinsot & Lele's pressure relaxation K = sigma c_s / L (Rudy & Strikwerda 1980
# found 0.58 the best compromise between reflection and drift)
OUTLET_SIGMA = 0.58


def convective_outlet(lattice: Lattice, face: Face) -> list[Array]:
    """Convective outflow: the incoming populations advected out with the normal velocity of
    the plane inside (clipped to [0, 1]), the face density relaxed to ``ob.density`` at
    K = sigma c_s / L per step (L the box's length along the normal)."""
    sign = 1.0 if face.ob.side == "high" else -1.0
    relaxation = OUTLET_SIGMA * math.sqrt(CS2) / face.box_length
    return open_boundaries.convective_outflow(
        lattice,
        face.current,
        face.previous_face,
        face.neighbour,
        face.incoming(),
        face.ob.axis,
        sign,
        face.ob.density,
        relaxation,
    )


def characteristic_outlet(lattice: Lattice, face: Face) -> tuple[Array, ...]:
    """Non-reflecting outlet: the face's normal velocity carried out at u_n + c_s, its density
    from the incoming acoustic invariant held (relaxed to ``ob.density`` at K = sigma c_s / L
    per step, as the convective outlet's density)."""
    return open_boundaries.characteristic_outflow(
        lattice,
        face.previous_face,
        face.neighbour,
        face.ob.axis,
        1.0 if face.ob.side == "high" else -1.0,
        face.ob.density,
        OUTLET_SIGMA * math.sqrt(CS2) / face.box_length,
    )


# OpenBoundary.kind -> the face's populations (q arrays of extent 1 along the axis)
OPEN_BOUNDARIES: dict[str, Callable[[Lattice, Face], Sequence[Array]]] = {
    "velocity": velocity_inlet,
    "pressure": pressure_outlet,
    "velocity_bounce_back": velocity_bounce_back,
    "pressure_anti_bounce_back": pressure_anti_bounce_back,
    "convective": convective_outlet,
    "characteristic": characteristic_outlet,
}


# the kinds whose rule reads the face's pre-collision populations of the step before
READS_PREVIOUS = frozenset({"convective", "characteristic"})


def previous_planes(
    open_boundaries: Sequence[OpenBoundary], shape: Sequence[int]
) -> list[tuple[int, int]]:
    """(axis, index) of the block's (``shape``) face planes whose open-face rules read the
    step before (``Pull.previous``)."""
    planes = []
    for ob in open_boundaries:
        index = 0 if ob.side == "low" else shape[ob.axis] - 1
        if ob.kind in READS_PREVIOUS and (ob.axis, index) not in planes:
            planes.append((ob.axis, index))
    return planes


def schedule_factor(schedule: InflowSchedule, time: Array, dtype) -> Array | float:
    """The inlet velocity's factor s(t) at step ``time`` (InflowSchedule)."""
    if schedule.steady:
        return 1.0
    t = time.astype(dtype)
    factor = jnp.ones((), dtype)
    if schedule.ramp_steps > 0.0:
        phase = jnp.minimum(t / schedule.ramp_steps, 1.0)
        factor = 0.5 * (1.0 - jnp.cos(jnp.pi * phase))
    if schedule.period_steps > 0.0:
        factor = factor * jnp.sin((2.0 * jnp.pi / schedule.period_steps) * t)
    return factor


def open_boundary(
    ob: OpenBoundary,
    index: int,
    walls: Sequence[BoundaryRule],
    halo: Halo,
    has_solid: bool,
    box_length: int,
) -> BoundaryRule:
    """The face rule for ``setup.open_boundaries[index]``: overwrite the face's populations by
    the kind's rule (OPEN_BOUNDARIES), on fluid nodes only.

    ``f`` must be materialised arrays: the face is written with an in-place update, so the rule
    costs face-sized work (a select against a face mask instead made XLA evaluate it in every
    cell).
    """
    face_values = OPEN_BOUNDARIES[ob.kind]

    def apply(f: Populations, pull: Pull) -> list[Array]:
        lat, d = pull.lattice, pull.lattice.d
        n = f[0].shape[ob.axis]
        face_index, inner = (0, 1) if ob.side == "low" else (n - 1, n - 2)
        velocity = None
        if ob.is_inlet:
            prescribed = pull.geometry["open_velocity"][index]
            factor = schedule_factor(ob.schedule, pull.time, prescribed.dtype)
            velocity = [jnp.expand_dims(prescribed[a], ob.axis) * factor for a in range(d)]
        current = [lax.slice_in_dim(p, face_index, face_index + 1, axis=ob.axis) for p in f]
        face = Face(ob, pull, current, walls, face_index, inner, velocity, box_length)
        values = face_values(lat, face)
        start = [0] * d
        start[ob.axis] = face_index
        # solid face nodes, and every node of a shard away from the global face, keep their
        # own values
        edge = halo.at_edge(ob.axis, ob.side)
        keep = None if edge is True else ~jnp.asarray(edge)
        if has_solid:
            solid_face = lax.index_in_dim(pull.geometry["solid_interior"], face_index, ob.axis)
            keep = solid_face if keep is None else keep | solid_face
        # only the directions a rule replaced are written back: an update of f_i whose value
        # reads the face of another f_j that is itself updated in place made XLA copy every
        # written array in full (the convective outlet's density relaxation: -45 % MLUPS)
        changed = [v is not c for v, c in zip(values, current, strict=True)]
        if keep is not None:
            values = [jnp.where(keep, c, v) for v, c in zip(values, current, strict=True)]
        return [
            lax.dynamic_update_slice(p, v.astype(p.dtype), start) if new else p
            for p, v, new in zip(f, values, changed, strict=True)
        ]

    return apply


# ---------------------------------------------------------------- force on the obstacle


def obstacle_force(
    obstacle_links: Sequence[bool],
    center: Sequence[float] | None = None,
    halo: Halo | None = None,
) -> ForceRule:
    """Momentum exchange (Ladd 1994) on the links from fluid nodes into ``obstacle``:
    F = sum over links of c_j [f_j*(x) + f_i(x)], d scalars in lattice units (this block's
    share; the chunk sums over shards).

    With ``center`` (index coordinates) the moment about it follows the force,
    M = sum over links of (x - center) x c_j [...] (3 values in 3D, 1 in 2D); ``halo`` gives
    the block's place in the global grid (its ``origin``).
    """

    def measure(f: Populations, pull: Pull) -> Array:
        lat = pull.lattice
        at_obstacle = [
            pull.fluid & pull.shifted(pull.geometry["obstacle"], lat.c[i])
            if obstacle_links[i]
            else None
            for i in range(lat.q)
        ]
        dtype = f[0].dtype
        momentum = boundaries.exchanged_momentum(lat, pull.here, f, at_obstacle)
        force = [jnp.sum(m) for m in momentum]
        if center is not None:
            shape = f[0].shape
            # the block's place in the grid, and the region's in the block
            origin = halo.origin(tuple(n - 2 for n in pull.buffers[0].shape))
            start = [0] * lat.d if pull.region is None else [r0 for r0, _ in pull.region]
            arm = [
                lax.broadcasted_iota(dtype, shape, a) + (origin[a] + start[a] - center[a])
                for a in range(lat.d)
            ]
            force += boundaries.moment_of(arm, momentum)
        return jnp.stack([jnp.asarray(v, dtype) for v in force])

    return measure


# ---------------------------------------------------------------- the plan for a setup


def linked_directions(setup: FluidSetup, mask: np.ndarray | None) -> list[bool]:
    """Which directions i have a fluid node whose upstream node x - c_i is in ``mask``
    (``solver.fluid.grid_field.linked_directions``: a lazy mask slab by slab, never whole)."""
    return setup_linked_directions(setup.lattice.c, mask, setup.solid, setup.mirror_axes)


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
        regions: boxes of the block (interior coordinates) holding every node the walls, the
            nodes and the force rules touch, or None for the whole block. With regions (only
            when materialised) the whole block is streamed plainly and the rules run on the
            boxes alone, written over it: an obstacle's curved walls and force then cost its
            surface, not the grid (docs/performance.md, "Wall rules on boxes").
    """

    walls: tuple[BoundaryRule, ...] = ()
    nodes: tuple[BoundaryRule, ...] = ()
    faces: tuple[BoundaryRule, ...] = ()
    force: ForceRule | None = None
    wall_links: tuple[bool, ...] = ()
    padded: tuple[tuple[str, int], ...] = ()
    materialise: bool = False
    regions: tuple[Region, ...] | None = None


# a plan uses at most this many boxes, and none when they hold more than this part of the block
MOST_REGIONS = 8
DENSE_FRACTION = 0.5


def wall_regions(setup: FluidSetup, halo: Halo) -> tuple[Region, ...] | None:
    """The boxes of a block that hold every solid node and every node pulling from one, the
    same for every block (the union over the blocks of the halo's mesh, so that every shard
    traces the same program); None where they would cover most of the block anyway."""
    block = halo.block_shape(setup.shape)
    mask = near_walls(setup.lattice.c, setup.solid, block, setup.mirror_axes)
    boxes = merged_boxes(covering_boxes(mask), MOST_REGIONS)
    covered = sum(math.prod(s.stop - s.start for s in box) for box in boxes)
    if not boxes or covered > DENSE_FRACTION * math.prod(block):
        return None
    return tuple(tuple((s.start, s.stop - s.start) for s in box) for box in boxes)


def periodic_axes(setup: FluidSetup) -> tuple[bool, ...]:
    """Per axis, whether the block wraps around it on one device: not across an open face or
    a pair of symmetry planes."""
    closed = {ob.axis for ob in setup.open_boundaries} | set(setup.mirror_axes)
    return tuple(a not in closed for a in range(setup.lattice.d))


def face_walls(
    setup: FluidSetup, ob: OpenBoundary, walls: tuple[BoundaryRule, ...]
) -> tuple[BoundaryRule, ...]:
    """The wall rules an open face re-runs on the plane one cell inside (``Face.neighbour``):
    none where no fluid node of that plane pulls out of a solid, since they would change
    nothing there (the same values; each rule's per-direction coefficients would still be
    compiled into the chunk). Only the plane of the global face counts: on a shard away from
    it the face rule's values are discarded."""
    n = setup.shape[ob.axis]
    if not walls or n < 3:
        return walls
    inner = 1 if ob.side == "low" else n - 2
    if plane_pulls_from(setup.lattice.c, setup.solid, ob.axis, inner, setup.mirror_axes):
        return walls
    return ()


def plan_boundaries(setup: FluidSetup, halo: Halo) -> BoundaryPlan:
    """Pick the boundary parts the setup needs, on the host (global setup: every shard traces
    the same program)."""
    has_solid = setup.solid is not None and any_cells(setup.solid)
    wall_links = tuple(linked_directions(setup, setup.solid if has_solid else None))
    obstacle_links = linked_directions(setup, setup.obstacle if has_solid else None)
    moving = has_solid and setup.wall_velocity is not None and any_cells(setup.wall_velocity)
    curved = has_solid and setup.wall_distance is not None
    walls: tuple[BoundaryRule, ...] = ()
    padded: list[tuple[str, int]] = []
    if has_solid:
        padded.append(("solid", 0))
        if curved:  # Bouzidi's walls rest: a wall velocity is not used with them
            walls = (bouzidi,)
            if setup.curved_walls == "quadratic":
                walls = (quadratic_bouzidi(periodic_axes(setup)),)
        elif moving:
            walls = (moving_wall,)
        else:
            walls = (bounce_back,)
    force = None
    if any(obstacle_links):
        force = obstacle_force(obstacle_links, setup.moment_center, halo)
        padded.append(("obstacle", 0))
    if moving and not curved:
        padded.append(("wall_velocity", 1))
    faces = tuple(
        open_boundary(ob, k, face_walls(setup, ob, walls), halo, has_solid, setup.shape[ob.axis])
        for k, ob in enumerate(setup.open_boundaries)
    )
    materialise = curved or bool(faces) or force is not None
    # boxes pay where the rules are long expressions (curved walls) or a sum (the force)
    regions = wall_regions(setup, halo) if has_solid and (curved or force is not None) else None
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
        materialise=materialise,
        regions=regions,
    )
