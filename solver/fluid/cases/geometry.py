"""A 3D wind tunnel around a body from a triangle mesh (STL, OBJ, PLY) or the exact sphere.

The tunnel spans [0, length] x [0, width] x [0, height] (m). Uniform velocity inlet on the low-x
face (regularized non-equilibrium extrapolation) and the outlet ``case.outlet`` on the high-x
face (default the non-reflecting characteristic outlet, density 1); the sides are
- ``periodic`` (default): for a body centred in the cross-section and a symmetric flow, a
  periodic array of bodies is the same as free-slip walls at half the spacing (mirror images),
  i.e. a free-slip tunnel of the given width and height;
- ``no_slip``: half-way bounce-back walls at y = 0, width and z = 0, height (one solid layer
  outside each), on which the uniform inflow keeps zero velocity;
- ``symmetry``: symmetry (free-slip) planes at y = 0, width and z = 0, height
  (``FluidSetup.mirror_axes``). The same flow as ``periodic`` for a centred body, and a body
  may cross them: placed with its centre on y = 0 and z = 0 it is a quarter model of a body in a
  tunnel twice as wide and high (a quarter of the cells; the force and moments are the
  quarter's, and so is the voxelised frontal area). The body must be symmetric about a plane it
  crosses; its links across the plane are cast against the mesh itself.
Layout: x = (i + 0.5) dx from the inlet; y = (j + 0.5) dx (periodic) or (j - 0.5) dx (no_slip,
with the solid layers at j = 0 and ny - 1), likewise z; dx = reference_length / resolution.

The body is placed by ``case.units``, ``scale``, ``rotation`` and ``translation``
(solver.fluid.geometry.mesh.Placement), checked (closed, consistently wound, outward-oriented,
no nodes enclosed twice), voxelised and given Bouzidi link fractions by casting every lattice
link against the triangles (solver.fluid.geometry.voxels); ``mesh: sphere`` is the exact sphere
of ``sphere_diameter`` centred at ``translation`` instead (solver.fluid.geometry.sphere). The
body must keep two cells from the inlet and outlet and one from the sides.

Built per block: the solid and obstacle masks and the link fractions are ``GridField``s that a
process evaluates on its own blocks only. The mesh's crossings of every z column are kept sparse
and sorted (``ColumnCrossings``: a box's nodes from its columns' crossings alone), the links are a
sparse list whose ends are classified by point queries on them, and the facts about the whole
body (node count, frontal area, link count) are read slab by slab over its bounding box
(``body_facts``): no array over the whole grid, and every block equals the whole grid's slice
bit for bit (tests/test_geometry_blocks.py).

Coefficients, lattice units with rho = 1, U the inflow velocity, A the reference area and L the
reference length (both in cells):
    C_D = F_x / (1/2 U^2 A),  C_y = F_y / (...),  C_z = F_z / (...),
    C_M = M / (1/2 U^2 A L),  moments about ``translation`` (the mesh's placed origin; the
    sphere's centre).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kernels.lattices import Lattice, lattice_by_name
from solver.errors import ConfigError
from solver.fluid.cases.base import (
    Case,
    RunData,
    box_indices,
    box_shape,
    cells,
    fluid_setup,
    lattice_scales,
    ones_field,
)
from solver.fluid.cases.cylinder import HYSTERESIS, upward_crossings
from solver.fluid.config import ANALYTIC_SPHERE, OUTLETS, GeometryConfig
from solver.fluid.geometry import (
    ColumnCrossings,
    Links,
    MeshError,
    Placement,
    check_closed,
    load_mesh,
    mesh_links,
    sphere_link_fractions,
    sphere_mask,
)
from solver.fluid.geometry.facts import BodyFacts, body_facts
from solver.fluid.geometry.sphere import sphere_bounds
from solver.fluid.grid_field import Box, GridField
from solver.fluid.setup import InflowSchedule, OpenBoundary

if TYPE_CHECKING:
    from solver.config import RunConfig

log = logging.getLogger("solver")

MIN_TUNNEL_CELLS = 4  # along every axis
INLET_CLEARANCE = 2  # cells between the body and the inlet and outlet faces
SIDE_CLEARANCE = 1  # cells between the body and the side walls (or the periodic seam)
COEFFICIENTS = ("cd", "cy", "cz", "cmx", "cmy", "cmz")


@dataclass(frozen=True)
class Body:
    """The voxelised body, built per block: its nodes on any box, its links (sparse) and the
    facts about the whole of it.

    Attributes:
        solid: (*shape) bool, the body's nodes (not the side walls'), computed per box.
        links: its link fractions (``missing``: the fluid-to-body links no crossing reached).
        facts: its node count, frontal area and link count, found slab by slab.
        triangles: triangles of the mesh (0 for the analytic sphere).
        seconds: wall time of the voxelisation (crossings, link fractions, facts), s.
    """

    solid: GridField
    links: Links
    facts: BodyFacts
    triangles: int
    seconds: float


class GeometryCase(Case):
    """Diagnostics: the mean force and moment coefficients over the last ``stats_fraction``
    of the run, and what the voxeliser made of the body."""

    def force_coefficients(self) -> list[tuple[str, int, float]]:
        force = 1.0 / (0.5 * self.info["u_lattice"] ** 2 * self.info["area_cells"])
        moment = force / self.info["length_cells"]
        return [(name, k, force if k < 3 else moment) for k, name in enumerate(COEFFICIENTS)]

    def diagnostics(self, data: RunData) -> dict:
        out = {
            key: self.info[key]
            for key in (
                "solid_nodes",
                "boundary_links",
                "links_without_crossing",
                "triangles",
                "voxelise_s",
                "reference_area_m2",
                "reference_length_m",
                "blockage",
            )
        }
        out["reynolds"] = self.reynolds
        if data.forces is None or len(data.forces) == 0:
            return out
        n = len(data.forces)
        start = min(n - 1, int(n * (1.0 - self.info["stats_fraction"])))
        window = data.forces[start:]
        coefficients = self.force_coefficients()
        cd = window[:, 0] * coefficients[0][2]
        first, last, periods = whole_periods(cd)
        dt = self.units.dt
        out["stats_window_s"] = [start * dt, n * dt]
        out["averaged_window_s"] = [(start + first) * dt, (start + last) * dt]
        out["oscillation_periods"] = periods
        out["oscillation_period_s"] = (last - first) * dt / periods if periods else None
        for name, k, factor in coefficients:
            if k < window.shape[1]:
                series = window[:, k] * factor
                out[f"{name}_mean"] = float(np.mean(series[first:last]))
                out[f"{name}_last"] = float(series[-1])
        out["cd_amplitude"] = _amplitude(cd)
        # how steady the drag is over the window: its spread relative to its mean
        out["cd_spread"] = float(2.0 * out["cd_amplitude"] / abs(np.mean(cd)))
        return out


def _amplitude(signal: np.ndarray) -> float:
    """Half the peak-to-peak of ``signal``."""
    return float(0.5 * (np.max(signal) - np.min(signal)))


def whole_periods(signal: np.ndarray) -> tuple[int, int, int]:
    """(first, last, periods): the index range [first, last) of ``signal`` spanning a whole
    number of its oscillation periods (from its first to its last upward crossing of the mean,
    Schmitt-triggered as the cylinder's lift), or (0, len, 0) when it crosses fewer than twice.

    With a reflecting outlet a steady flow in the tunnel still carries the acoustic quarter-wave
    mode its start excited (velocity inlet and pressure outlet reflect it, viscosity hardly
    damps so long a wave; the characteristic outlet lets it out): the drag rings around its
    steady value. The mean over whole periods removes that ringing, where the mean over an
    arbitrary window keeps a fraction of its amplitude.
    """
    amplitude = _amplitude(signal)
    up = upward_crossings(signal - np.mean(signal), HYSTERESIS * amplitude)
    if len(up) < 2 or amplitude <= 1e-9 * abs(np.mean(signal)):
        return 0, len(signal), 0
    return int(up[0]) + 1, int(up[-1]) + 1, len(up) - 1


def grid_shape(config: RunConfig) -> tuple[int, int, int]:
    """(nx, ny, nz), plus one solid layer on each side with no-slip walls; dx = reference
    length / resolution (as UnitConverter.from_scales)."""
    c: GeometryConfig = config.case
    dx = c.reference_length / c.resolution
    extra = 2 if c.walls == "no_slip" else 0
    return (
        int(round(c.length / dx)),
        int(round(c.width / dx)) + extra,
        int(round(c.height / dx)) + extra,
    )


def build(config: RunConfig) -> GeometryCase:
    c: GeometryConfig = config.case
    fluid = config.fluid
    lattice = lattice_by_name(fluid.lattice)
    scales = lattice_scales(
        fluid, c.reference_length, c.resolution, c.velocity, c.viscosity, c.density
    )
    units, omega = scales.units, scales.omega
    dx = units.dx
    for key, value in (("case.length", c.length), ("case.width", c.width),
                       ("case.height", c.height)):  # fmt: skip
        cells(key, value, value, dx, MIN_TUNNEL_CELLS)
    shape = grid_shape(config)
    walls = c.walls == "no_slip"
    mirror = (1, 2) if c.walls == "symmetry" else ()
    origin = (0.0, -dx, -dx) if walls else (0.0, 0.0, 0.0)
    tunnel = (c.length, c.width, c.height)
    extent = (shape[0] * dx, (shape[1] - 2 * walls) * dx, (shape[2] - 2 * walls) * dx)

    def in_wall(i, j, k):  # the solid layers of no-slip sides (index arrays, broadcastable)
        if not walls:
            return np.zeros(np.broadcast_shapes(np.shape(i), np.shape(j), np.shape(k)), bool)
        return (j == 0) | (j == shape[1] - 1) | (k == 0) | (k == shape[2] - 1)

    body = _body(c, lattice, shape, origin, dx, extent, in_wall, mirror)
    obstacle = body.solid

    def solid_on(box: Box) -> np.ndarray:
        wall = np.broadcast_to(in_wall(*box_indices(box)), box_shape(box))
        return wall | obstacle[box]

    solid = GridField(shape, bool, solid_on)
    if body.facts.nodes == 0:
        raise ConfigError(
            "case.resolution",
            c.resolution,
            "a resolution at which the body covers at least one node",
            hint="the voxelised body is empty",
        )

    # the frontal area: the reference area, or the voxelised body's projection on y-z
    frontal_cells = float(body.facts.frontal_cells)
    area = c.reference_area if c.reference_area is not None else frontal_cells * dx * dx
    u_lattice = units.to_lattice_velocity(c.velocity)
    inlet_velocity = np.zeros((3, shape[1], shape[2]))
    inlet_velocity[0] = np.where(solid[0], 0.0, u_lattice)
    center = np.asarray(c.translation)
    moment_center = tuple(float(v) for v in (center - np.asarray(origin)) / dx - 0.5)
    setup = fluid_setup(
        fluid,
        lattice,
        shape,
        omega,
        solid=solid,
        wall_distance=_link_fraction_field(body.links, lattice.q, shape, fluid.precision),
        obstacle=obstacle,
        open_boundaries=(
            OpenBoundary(
                axis=0,
                side="low",
                kind="velocity",
                velocity=inlet_velocity,
                schedule=InflowSchedule(ramp_steps=c.ramp_time / units.dt),
            ),
            OpenBoundary(axis=0, side="high", kind=OUTLETS[c.outlet], density=1.0),
        ),
        moment_center=moment_center,
        mirror_axes=mirror,
    )
    # impulsive: U everywhere at t = 0; a ramped inflow starts from rest
    start_velocity = u_lattice if c.ramp_time == 0.0 else 0.0

    def velocity_on(box: Box) -> np.ndarray:
        out = np.zeros((3,) + box_shape(box))
        out[0] = start_velocity
        out[:, solid[box]] = 0.0
        return out

    cross_section = extent[1] * extent[2]
    log.info(
        "geometry: %s, %d solid nodes, %d boundary links, voxelised in %.2f s",
        "exact sphere" if c.mesh == ANALYTIC_SPHERE else f"{body.triangles} triangles",
        body.facts.nodes,
        len(body.links),
        body.seconds,
    )
    return GeometryCase(
        name="geometry",
        setup=setup,
        units=units,
        density=ones_field(shape),
        velocity=GridField(shape, np.float64, velocity_on, (3,)),
        default_steps=units.steps_for(c.duration),
        origin=origin,
        mach=scales.mach,
        reynolds=c.velocity * c.reference_length / c.viscosity,
        measures_forces=True,
        info={
            "u_lattice": u_lattice,
            "area_cells": area / dx**2,
            "length_cells": c.reference_length / dx,
            "reference_area_m2": area,
            "reference_length_m": c.reference_length,
            "blockage": frontal_cells * dx * dx / cross_section,
            "tunnel_m": list(tunnel),
            "solid_nodes": body.facts.nodes,
            "boundary_links": len(body.links),
            "links_without_crossing": int(body.links.missing),
            "triangles": body.triangles,
            "voxelise_s": body.seconds,
            "stats_fraction": c.stats_fraction,
            "moment_center_m": list(c.translation),
        },
    )


def _link_fraction_field(links: Links, q: int, shape: tuple[int, ...], dtype) -> GridField:
    """``links.dense(q, shape, dtype)`` on any box: 1/2 everywhere but on the links."""
    where = np.unravel_index(links.node, shape)

    def on(box: Box) -> np.ndarray:
        out = np.full((q,) + box_shape(box), 0.5, dtype=dtype)
        inside = np.ones(len(links), dtype=bool)
        for a, s in enumerate(box):
            inside &= (where[a] >= s.start) & (where[a] < s.stop)
        local = tuple(where[a][inside] - s.start for a, s in enumerate(box))
        out[(links.direction[inside], *local)] = links.fraction[inside]
        return out

    return GridField(shape, dtype, on, (q,))


def _body(
    c: GeometryConfig,
    lattice: Lattice,
    shape: tuple[int, int, int],
    origin: tuple[float, ...],
    dx: float,
    extent: tuple[float, float, float],
    in_wall: Callable,
    mirror: tuple[int, ...] = (),
) -> Body:
    """Load, check, place and voxelise the configured body (ConfigError naming the key).

    No array here spans the grid: the mesh's crossings of the z columns are kept sparse
    (``ColumnCrossings``) and give the body's nodes on any box; the link fractions are cast
    against the mesh and classified by point queries (``mesh_links``); the facts about the
    whole body are read slab by slab over its bounding box (``body_facts``). ``in_wall(i, j,
    k)`` says which nodes are side walls (broadcastable index arrays). Along the ``mirror``
    axes (symmetry planes) the body may cross the sides, and its links across them are found
    on the grid widened by one image node on each side (``_across_planes``)."""
    origin_arr = np.asarray(origin)
    if c.mesh == ANALYTIC_SPHERE:
        radius = 0.5 * c.sphere_diameter
        lower = np.asarray(c.translation) - radius
        upper = np.asarray(c.translation) + radius
        _check_inside(lower, upper, dx, extent, "sphere", c.translation, mirror)
        start = time.perf_counter()
        center = (np.asarray(c.translation) - origin_arr) / dx - 0.5

        def inside(box: Box) -> np.ndarray:
            return sphere_mask(center, radius / dx, shape, box)

        bounds = sphere_bounds(center, radius / dx, shape)
        solid, fluid = _masks(shape, inside, in_wall)
        widened = _Widened(shape, mirror)
        links = widened.back(
            sphere_link_fractions(
                widened.point(center),
                radius / dx,
                lattice.c,
                widened.field(solid),
                widened.field(fluid),
            ),
            lattice.c,
        )
        return _finish(shape, lattice, solid, fluid, links, bounds, 0, start)
    try:
        mesh = load_mesh(c.mesh)
        check_closed(mesh)
    except MeshError as err:
        raise ConfigError(
            "case.mesh", c.mesh, "a closed, outward-oriented triangle mesh (STL, OBJ, PLY)",
            hint=str(err),
        ) from None  # fmt: skip
    placed = Placement(c.units, c.scale, c.rotation, c.translation).apply(mesh)
    lower, upper = placed.bounds
    what = f"{len(mesh.faces)}-triangle mesh"
    _check_inside(lower, upper, dx, extent, what, c.translation, mirror)
    vertices = (placed.vertices - origin_arr) / dx - 0.5
    start = time.perf_counter()
    try:
        columns = ColumnCrossings(vertices, placed.faces, shape)
    except MeshError as err:
        raise ConfigError(
            "case.mesh", c.mesh, "a mesh without self-intersections or overlapping parts",
            hint=str(err),
        ) from None  # fmt: skip
    solid, fluid = _masks(shape, columns.solid, in_wall)

    def classify(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inside, wall = columns.solid_at(nodes), in_wall(*nodes.T)
        return inside & ~wall, ~(inside | wall)

    widened = _Widened(shape, mirror)
    links = widened.back(
        mesh_links(
            widened.point(vertices),
            placed.faces,
            lattice.c,
            widened.shape,
            lambda nodes: classify(widened.image(nodes)),
        ),
        lattice.c,
    )
    bounds = columns.node_bounds()
    return _finish(shape, lattice, solid, fluid, links, bounds, len(placed.faces), start)


def _masks(
    shape: tuple[int, ...], inside: Callable[[Box], np.ndarray], in_wall: Callable
) -> tuple[GridField, GridField]:
    """(the body's nodes, the fluid nodes) as grid fields, from ``inside(box)`` (the nodes
    inside the surface) and the side walls (which are never the body's)."""

    def wall_on(box: Box) -> np.ndarray:
        return np.broadcast_to(in_wall(*box_indices(box)), box_shape(box))

    def body_on(box: Box) -> np.ndarray:
        return inside(box) & ~wall_on(box)

    def fluid_on(box: Box) -> np.ndarray:
        return ~(inside(box) | wall_on(box))

    return GridField(shape, bool, body_on), GridField(shape, bool, fluid_on)


def _finish(
    shape: tuple[int, int, int],
    lattice: Lattice,
    solid: GridField,
    fluid: GridField,
    links: Links,
    bounds: Box,
    triangles: int,
    start: float,
) -> Body:
    """The Body, with the facts about the whole of it (slab by slab) and its missing links."""
    facts = body_facts(solid.box, fluid.box, bounds, shape, lattice.c)
    # the links across symmetry planes (into the body's image) are not among the facts' links
    target = np.stack(np.unravel_index(links.node, shape), axis=1) + lattice.c[links.direction]
    within = ((target >= 0) & (target < np.asarray(shape))).all(axis=1)
    missing = facts.links - int(np.count_nonzero(within))
    links = Links(links.node, links.direction, links.fraction, missing)
    return Body(solid, links, facts, triangles, time.perf_counter() - start)


class _Widened:
    """The grid widened by one node on both sides of every mirror axis, whose extra nodes are
    the images of the edge nodes across the symmetry planes: the links from the grid's fluid
    nodes into a body's image across a plane are found there like any other link."""

    def __init__(self, shape: tuple[int, ...], mirror: tuple[int, ...]) -> None:
        self.grid = tuple(shape)
        self.mirror = mirror
        self.offset = np.array([1 if a in mirror else 0 for a in range(len(shape))])
        self.shape = tuple(int(n + 2 * o) for n, o in zip(shape, self.offset, strict=True))

    def point(self, points: np.ndarray) -> np.ndarray:
        """Index coordinates (..., d) on the widened grid."""
        return np.asarray(points, dtype=np.float64) + self.offset

    def image(self, nodes: np.ndarray) -> np.ndarray:
        """(m, d) widened-grid nodes -> the grid's nodes they are (or mirror)."""
        return np.clip(nodes - self.offset, 0, np.asarray(self.grid) - 1)

    def field(self, field: GridField) -> GridField:
        """A grid field on the widened grid: the image node's value everywhere."""
        if not self.mirror:
            return field

        def on(box: Box) -> np.ndarray:
            picks, source = [], []
            for a, s in enumerate(box):
                index = np.clip(np.arange(s.start, s.stop) - self.offset[a], 0, self.grid[a] - 1)
                lo = int(index.min())
                source.append(slice(lo, int(index.max()) + 1))
                picks.append(index - lo)
            values = field.box(tuple(source))
            for a, pick in enumerate(picks):
                values = np.take(values, pick, axis=a)
            return values

        return GridField(self.shape, field.dtype, on)

    def back(self, links: Links, velocities: np.ndarray) -> Links:
        """Links found on the widened grid, from the grid's own fluid nodes, in its indexing."""
        if not self.mirror:
            return links
        nodes = np.stack(np.unravel_index(links.node, self.shape), axis=1) - self.offset
        keep = ((nodes >= 0) & (nodes < np.asarray(self.grid))).all(axis=1)
        node = np.ravel_multi_index(tuple(nodes[keep].T), self.grid)
        return Links(node, links.direction[keep], links.fraction[keep], links.missing)


def _check_inside(
    lower: np.ndarray,
    upper: np.ndarray,
    dx: float,
    extent: tuple[float, ...],
    what: str,
    translation: tuple[float, ...],
    mirror: tuple[int, ...] = (),
) -> None:
    """ConfigError on case.translation unless the body's bounding box keeps INLET_CLEARANCE
    cells from the inlet and outlet and SIDE_CLEARANCE cells from the sides (not from
    symmetry planes, ``mirror`` axes, which a symmetric body may cross)."""
    margins = np.array([INLET_CLEARANCE, SIDE_CLEARANCE, SIDE_CLEARANCE]) * dx
    low_gap = lower - margins  # >= 0 when clear of the low faces
    high_gap = np.asarray(extent) - margins - upper  # >= 0 when clear of the high faces
    for axis in mirror:
        low_gap[axis] = high_gap[axis] = 0.0
    faces = (("inlet (x = 0)", "outlet (x = length)"), ("side y = 0", "side y = width"),
             ("side z = 0", "side z = height"))  # fmt: skip
    worst, name = 0.0, ""
    for axis in range(3):
        for gap, face in ((low_gap[axis], faces[axis][0]), (high_gap[axis], faces[axis][1])):
            if gap < worst:
                worst, name = gap, face
    if worst < 0.0:
        box = " x ".join(f"[{lo:.4g}, {hi:.4g}]" for lo, hi in zip(lower, upper, strict=True))
        raise ConfigError(
            "case.translation",
            list(translation),
            f"a placement keeping the body inside the tunnel, {INLET_CLEARANCE} cells from the "
            f"inlet and outlet and {SIDE_CLEARANCE} from the sides",
            hint=f"the placed {what} spans {box} m and reaches {-worst:.4g} m too close to "
            f"(or past) the {name}",
        )
