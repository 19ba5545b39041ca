"""Fluid-body coupling by the partially saturated cells method (PSM), lattice units.

Noble & Torczynski 1998 (Int. J. Mod. Phys. C 9, 1189): each cell holds a solid fraction
eps in [0, 1] and the solid's velocity u_s there. The collision blends the fluid's own
collision with a solid operator by the weight

    B = eps (tau - 1/2) / ((1 - eps) + (tau - 1/2)),

    f_i* = f_i + (1 - B) (f_i^fluid* - f_i) + B Omega_i^s,
    Omega_i^s = f_{-i} - f_{-i}^eq(rho, u) + f_i^eq(rho, u_s) - f_i,

where f^fluid* is the fluid operator's post-collision state (BGK, TRT, ... with its forcing)
and Omega^s bounces the non-equilibrium part back about the solid's velocity. The momentum the
solid operator removes from the fluid is the hydrodynamic force on the solid in that cell,

    F = - sum_i B Omega_i^s c_i        (lattice force: momentum per step per cell),

so fluid plus bodies conserve momentum exactly. Cells change between fluid and solid smoothly
(eps is continuous in the body's position), which is why PSM shows no force spikes when a body
moves across the grid, unlike bounce-back with refill.

Bodies reach the grid through a stencil: the cells of a cube of S^d cells per body starting at
``base`` (the cell index of its lower corner) that the body may cover. The covered cells are
listed once each in slots (``cover_slots``), where the fields of many bodies are summed and
the blend runs, or, where bodies cover much of the block, summed into the whole grid
(``scatter_rows``); per-body totals come back by gather. All
functions are pure and run unchanged on one shard's block (``origin``: the block's first cell
in the global grid) inside ``shard_map``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import Array

from kernels.equilibrium import equilibrium
from kernels.lattices import Lattice

WEIGHTINGS = ("noble_torczynski", "fraction")


def psm_weight(eps: Array, tau: float, weighting: str = "noble_torczynski") -> Array:
    """The weight B of the solid operator for cover eps in [0, 1].

    "noble_torczynski": B = eps (tau - 1/2) / ((1 - eps) + (tau - 1/2)) (Noble & Torczynski
    1998), below eps in partial cells for tau < 3/2; "fraction": B = eps (Holdych's simpler
    choice), which makes partial cells less permeable.
    """
    eps = jnp.clip(eps, 0.0, 1.0)
    if weighting == "fraction":
        return eps
    if weighting != "noble_torczynski":
        raise ValueError(f"weighting {weighting!r} not in {WEIGHTINGS}")
    return eps * (tau - 0.5) / ((1.0 - eps) + (tau - 0.5))


def psm_blend(
    lattice: Lattice,
    f: Sequence[Array],
    fluid_post: Sequence[Array],
    rho: Array,
    u: Sequence[Array],
    weight: Array,
    u_solid: Sequence[Array],
    body_force: Sequence[Array | float] | None = None,
) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
    """The PSM collision and the hydrodynamic force density on the solid.

    The force is the first moment of the solid term, in closed form rather than summed over
    the q directions (a second pass over every population on XLA:CPU): with j = sum_i c_i f_i
    = rho u - F/2 (u is the force-shifted velocity) and sum_i c_i f_i^eq(rho, v) = rho v,

        sum_i c_i Omega_i^s = -j + rho u + rho u_s - j = rho (u_s - u) + F,
        force on the solid  = B (rho (u - u_s) - F).

    Args:
        f: q arrays (*shape), pre-collision populations.
        fluid_post: q arrays (*shape), the fluid operator's post-collision populations.
        rho: (*shape) density; u: d arrays (*shape) fluid velocity (as the fluid operator used,
            shifted by half the body force).
        weight: (*shape) B from ``psm_weight``.
        u_solid: d arrays (*shape) velocity of the solid in each cell.
        body_force: d arrays or scalars, the fluid's body force density F (None: none).

    Returns:
        (post, force): q arrays (*shape) post-collision populations and d arrays (*shape) the
        force on the solid per cell, lattice units.
    """
    q, d = lattice.q, lattice.d
    feq_fluid = equilibrium(lattice, rho, u)
    feq_solid = equilibrium(lattice, rho, u_solid)
    post = []
    for i in range(q):
        o = int(lattice.opposite[i])
        solid_term = weight * (f[o] - feq_fluid[o] + feq_solid[i] - f[i])
        post.append(f[i] + (1.0 - weight) * (fluid_post[i] - f[i]) + solid_term)
    force = []
    for a in range(d):
        drag = rho * (u[a] - u_solid[a])
        if body_force is not None:
            drag = drag - body_force[a]
        force.append(weight * drag)
    return tuple(post), tuple(force)


# ---------------------------------------------------------------- bodies on the grid


def stencil_size(radius_cells: float) -> int:
    """S, the cells per axis of a stencil that holds every cell a sphere of radius r (cells)
    touches with ``sphere_fraction``: 2 r + 1 cells of partial cover plus one for the floor."""
    return int(np.ceil(2.0 * radius_cells + 1.0)) + 1


def stencil_offsets(size: int, d: int, radii: Sequence[float] | None = None) -> np.ndarray:
    """(m, d) int32 offsets of the cells of a stencil, C order.

    Without ``radii``: the whole cube, m = S^d. With the bodies' radii (cells): only the cells
    that a sphere of one of these radii can cover from any position of its centre in its base
    cell, about half the cube (1.85x fewer for r = 2, 1.8x for r = 7.5), so that the scatter
    and gather of every step move half as much. A sphere of radius r has its centre at
    base + r + 1/2 + t, t in [0, 1)^d; it covers cell o while |o - (r + 1/2 + t)| < r + 1/2
    (``sphere_fraction``), so o is kept where the distance from o to the box r + 1/2 + [0, 1]^d
    is below r + 1/2.
    """
    cube = np.array(list(itertools.product(range(size), repeat=d)), dtype=np.int32)
    if radii is None:
        return cube
    keep = np.zeros(len(cube), bool)
    for radius in np.unique(np.round(np.asarray(radii, float), 12)):
        reach = radius + 0.5
        gap = np.maximum(0.0, np.maximum(reach - cube, cube - reach - 1.0))
        keep |= np.sqrt(np.sum(gap * gap, axis=1)) < reach
    return cube[keep]


def stencil_base(center: Array, radius: Array) -> Array:
    """(n, d) int32 lower corner of each body's stencil.

    Args:
        center: (n, d) body centres in cell-index coordinates (cell i's centre at i).
        radius: (n,) radius in cells.
    """
    return jnp.floor(center - radius[:, None] - 0.5).astype(jnp.int32)


def sphere_fraction(center: Array, radius: Array, cells: Array) -> Array:
    """(n, S^d) solid fraction of each stencil cell covered by each sphere.

    eps = clip(r + 1/2 - |x - X|, 0, 1): the cell's cover by a ball approximated by its
    centre's distance to the surface, linear across one cell (the sphere's volume is
    reproduced to O(1/r^2), and eps is continuous in the position, so a moving body changes
    the cells it covers gradually).

    Args:
        center: (n, d) cell-index coordinates; radius: (n,) cells;
        cells: (n, S^d, d) the cells' integer indices (``base[:, None] + offsets``).
    """
    d = center.shape[-1]
    rel = [cells[..., a].astype(center.dtype) - center[:, None, a] for a in range(d)]
    return cover_of(rel, radius)


def cover_of(rel: Sequence[Array], radius: Array) -> Array:
    """(n, m) ``sphere_fraction`` from the cells' offsets from the centres, d arrays (n, m).

    The squared distance is summed component by component: a reduction over a last axis of
    3 goes to a library call on XLA:CPU that costs as much as the rest of the stencil work."""
    square = rel[0] * rel[0]
    for r in rel[1:]:
        square = square + r * r
    return jnp.clip(radius[:, None] + 0.5 - jnp.sqrt(square), 0.0, 1.0)


def cross(a: Sequence[Array], b: Sequence[Array]) -> list[Array]:
    """a x b for vectors held as 3 arrays of components (the stencil's (n, m) layout)."""
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def spin_2d(omega: Array, r: Sequence[Array]) -> list[Array]:
    """omega e_z x r for in-plane vectors r (2 arrays of components): (-omega r_y, omega r_x),
    the velocity of a disk's cells about its centre (omega: rad per step about z)."""
    return [-omega * r[1], omega * r[0]]


def torque_2d(r: Sequence[Array], force: Sequence[Array]) -> Array:
    """The z component r_x F_y - r_y F_x of r x F for in-plane r and F (2 arrays each), the
    only component a disk held in the plane feels."""
    return r[0] * force[1] - r[1] * force[0]


def local_flat_index(
    cells: Array,
    origin: Sequence[Array | int],
    block: Sequence[int],
    grid: Sequence[int],
    periodic: Sequence[bool] | None = None,
) -> Array:
    """Flat index of each global cell in this block, or the block size where it lies outside.

    Args:
        cells: (..., d) global cell indices (may lie outside the grid: wrapped periodically
            along the periodic axes, outside along the others).
        origin: d global indices of the block's first cell.
        block: the block's shape; grid: the global grid's shape.
        periodic: per axis, whether the grid wraps (None: every axis). An axis with an inlet
            or outlet does not: a body leaving through it must not reappear at the other end.
    """
    d = len(block)
    periodic = (True,) * d if periodic is None else tuple(periodic)
    flat = jnp.zeros(cells.shape[:-1], jnp.int32)
    inside = jnp.ones(cells.shape[:-1], bool)
    for a in range(d):
        index = jnp.mod(cells[..., a], grid[a]) if periodic[a] else cells[..., a]
        local = index - origin[a]
        inside = inside & (local >= 0) & (local < block[a])
        flat = flat * block[a] + local
    size = int(np.prod(block))
    return jnp.where(inside, flat, size)


def cover_capacity(radii: Sequence[float], stencil: int, d: int = 3) -> int:
    """The most cells a sphere (d = 2: a disk) of one of these radii (cells) covers
    (``sphere_fraction`` > 0), for any position of its centre, and at most ``stencil`` (its
    stencil's cells): the slots per body of ``cover_slots``. About 0.7 of the stencil for
    r = 2 to 4.

    A sphere covers the cells o with |o - x| < r + 1/2. The lattice is symmetric about every
    half-integer plane, so centres x in [0, 1/2]^d cover every case; each such x lies within
    h sqrt(d)/2 of a point s of a grid of spacing h = 1/16, so its cells lie within
    r + 1/2 + h sqrt(d)/2 of s: the count over those spheres about every s bounds it (a few
    cells above the exact maximum)."""
    h = 0.0625
    samples = np.array(list(itertools.product(np.arange(0.0, 0.5 + h / 2, h), repeat=d)))
    most = 0
    for radius in np.unique(np.round(np.asarray(radii, float), 12)):
        reach = radius + 0.5 + h * np.sqrt(float(d)) / 2.0
        span = np.arange(-int(np.ceil(reach)) - 1, int(np.ceil(reach)) + 2)
        points = np.array(list(itertools.product(span, repeat=d)), float)
        for sample in samples:
            distance = np.sqrt(np.sum((points - sample) ** 2, axis=1))
            most = max(most, int(np.sum(distance < reach)))
    return min(most, stencil)


def cover_slots(
    flat: Array, eps: Array, size: int, capacity: int, solid: Array | None = None
) -> tuple[Array, Array]:
    """The cells the bodies cover, each once: a list of ``capacity`` slots per body.

    A cell in the stencils of several bodies (near bodies' stencils overlap) is held by the
    first of its stencil entries that covers it, in a slot of that entry's body; the PSM blend
    then runs on the slots, n ``capacity`` of them (``cover_capacity``: every body has room
    for all the cells it covers), rather than on the whole grid. Slots left over name no cell.

    Args:
        flat: (n, m) flat indices of the stencil entries' cells in the block (``size``:
            outside the block).
        eps: (n, m) the entries' cover; an entry with eps = 0 covers nothing.
        size: the number of cells of the block.
        solid: (*block) bool, the fluid's own walls, which take no body (None: none).

    Returns:
        (cells, slot): cells (n capacity,) the cell each slot holds (``size``: none); slot
        (n m,) the slot of each entry's cell (n capacity: the entry covers nothing).
    """
    n, m = flat.shape
    flat, eps = flat.reshape(-1), eps.reshape(-1)
    valid = (flat < size) & (eps > 0)
    if solid is not None:
        valid = valid & ~solid.reshape(-1).at[flat].get(mode="fill", fill_value=True)
    entry = jnp.arange(n * m, dtype=jnp.int32)
    first = jnp.full((size,), n * m, jnp.int32).at[jnp.where(valid, flat, size)].min(entry)
    owner = jnp.where(valid, first.at[flat].get(mode="fill", fill_value=0), n * m)
    holds = (owner == entry).reshape(n, m)
    # the cells a body holds go to its slots in stencil order
    rank = jnp.cumsum(holds.astype(jnp.int32), axis=1) - 1
    body = jnp.arange(n, dtype=jnp.int32)[:, None] * capacity
    slot_of_entry = jnp.where(holds, body + rank, n * capacity).reshape(-1)
    cells = jnp.full((n * capacity,), size, jnp.int32).at[slot_of_entry].set(flat, mode="drop")
    slot = slot_of_entry.at[owner].get(mode="fill", fill_value=n * capacity)
    return cells, slot


def slot_sums(rows: Array, slot: Array, slots: int) -> Array:
    """(slots, w) sums of the entries' rows (k, w) into their slots (``cover_slots``); entries
    of no slot (index ``slots``) are dropped. Rows add in the entries' order, as a scatter into
    the grid would.

    One scatter of w-wide rows, not w scatters of one value: XLA:CPU's scatter loop costs per
    index (docs/performance.md)."""
    return jnp.zeros((slots, rows.shape[-1]), rows.dtype).at[slot].add(rows, mode="drop")


def scatter_rows(values: Array, flat: Array, size: int) -> Array:
    """Sum per-stencil-cell rows into a (size, k) table of the block's cells: (..., k) ->
    (size, k); cells outside the block (flat index = size) are dropped. One scatter of k-wide
    rows, not k scatters of one value."""
    k = values.shape[-1]
    return (
        jnp.zeros((size, k), values.dtype)
        .at[flat.reshape(-1)]
        .add(values.reshape(-1, k), mode="drop")
    )


def gather_cells(f: Sequence[Array], cells: Array, fill: Sequence[float]) -> list[Array]:
    """q arrays (k,): each field f_i (*block) at the cells (k,) (flat indices; the block's
    size: none, where f_i takes ``fill[i]``, e.g. the lattice weights, which keep the moments
    finite). A field that is an expression (the fluid step's pull: slices of the padded
    buffers) is not copied first: XLA fuses it into the gather, evaluated at the cells only."""
    return [
        fi.reshape(-1).at[cells].get(mode="fill", fill_value=float(w))
        for fi, w in zip(f, fill, strict=True)
    ]


def gather_rows(table: Array, flat: Array) -> Array:
    """Rows of a materialised (size, k) table at flat indices (...,): (..., k); zero where the
    index is ``size`` (outside the block, or no slot).

    The coupled step gathers from tables it has materialised anyway (the moments, the summed
    cover) rather than from derived fields: XLA fuses a derived field's arithmetic into the
    gather, which then reads every input at random once per field."""
    return table.at[flat].get(mode="fill", fill_value=0.0)


def cover_force(
    moments: Array,
    cover: Array,
    tau: float,
    weighting: str = "noble_torczynski",
    body_force: Sequence[Array | float] | None = None,
) -> list[Array]:
    """d arrays (...): the lattice force on the solid per unit cover in each cell, the cell's
    force B (rho (u - u_s) - F) (as ``psm_blend`` gives it) over the cell's total cover; a
    body covering eps of the cell takes eps times it. One array per component, so that the
    sums over a stencil run along its last axis.

    Args:
        moments: (..., d+1) rho and the force-shifted u of the cells (``moment_table``).
        cover: (..., d+1) the cells' summed cover eps_total and eps u_s (``slot_sums``).
        body_force: d scalars, the fluid's body force density F (None: none).
    """
    d = moments.shape[-1] - 1
    eps_total = cover[..., 0]
    covered = jnp.where(eps_total > 0, eps_total, 1.0)
    weight = psm_weight(eps_total, tau, weighting)
    rho = moments[..., 0]
    force = []
    for a in range(d):
        drag = rho * (moments[..., 1 + a] - cover[..., 1 + a] / covered)
        if body_force is not None:
            drag = drag - body_force[a]
        force.append(weight * drag / covered)
    return force


# ---------------------------------------------------------------- lubrication


def lubrication_coefficient(
    gap: Array,
    radius_eff: Array,
    viscosity: float,
    cutoff: float,
    min_gap: Array,
    depth: float | None = None,
) -> Array:
    """6 pi mu R^2 (1/h - 1/h_c) for gaps below the cutoff, else 0 (SI units); for cylinders
    of length ``depth`` (disks of a 2D run) 3 sqrt(2) pi mu L R^(3/2) (h^(-3/2) - h_c^(-3/2)).

    The lattice resolves the squeeze flow between two surfaces only down to about one cell;
    below ``cutoff`` the missing part of the leading lubrication force (Brenner 1961; as a
    correction, Simeonov & Calantoni 2012, Ocean Model. 55, 68; waLBerla's
    ``LubricationCorrection``) is added. ``gap`` is clamped at ``min_gap`` (surface roughness:
    the force stays finite in contact).

    Two parallel cylinders squeeze a film h(x) = h + x^2 / (2 R); the 2D Reynolds equation
    gives dp/dx = 12 mu V x / h(x)^3 and, integrated twice over the line, the force per
    length 12 mu V (2 R)^(3/2) h^(-3/2) pi/8 = 3 sqrt(2) pi mu V (R/h)^(3/2): weaker than a
    sphere's 1/h as h -> 0 (the film escapes sideways along the whole line).

    Args:
        gap: surface gap h, m (negative in contact); radius_eff: R1 R2 / (R1 + R2) for two
        spheres, R for a sphere and a plane, m; viscosity: dynamic, Pa s; cutoff: h_c, m;
        depth: L, m, the cylinders' length (None: spheres).
    """
    h = jnp.maximum(gap, min_gap)
    if depth is None:
        coefficient = 6.0 * jnp.pi * viscosity * radius_eff**2 * (1.0 / h - 1.0 / cutoff)
    else:
        coefficient = (  # a Python float: NumPy's float64 scalar would promote float32 under x64
            3.0 * math.sqrt(2.0) * jnp.pi * viscosity * depth * radius_eff**1.5
            * (h**-1.5 - cutoff**-1.5)
        )  # fmt: skip
    return jnp.where(gap < cutoff, coefficient, 0.0)


def implicit_damping(coefficient: Array, inverse_mass: Array | None, dt: float) -> Array:
    """The damping coefficient c' = c (1 - exp(-x)) / x, x = c dt / m*, that takes from a
    pair's relative velocity in one step of ``dt`` what the damper c alone would over that step
    (v exp(-x)): c' -> c where x << 1, and c' dt / m* <= 1 however large c grows, so the
    lubrication force never reverses a pair's approach and sets no limit on the body step (the
    explicit c alone needs c dt / m* <= 1/2, which a small roughness gap turns into hundreds of
    body steps per fluid step).

    Args:
        coefficient: c (...,) N s/m; inverse_mass: 1/m* = 1/m_i + 1/m_j (...,) 1/kg, 0 for two
            fixed bodies; None (or dt = 0): c unchanged.
    """
    if inverse_mass is None or dt <= 0.0:
        return coefficient
    x = coefficient * inverse_mass * dt
    ratio = -jnp.expm1(-x) / jnp.where(x > 0, x, 1.0)
    return coefficient * jnp.where(x > 0, ratio, 1.0)


def lubrication_planes(
    position: Array,
    velocity: Array,
    radius: Array,
    plane_point: Array,
    plane_normal: Array,
    plane_velocity: Array,
    viscosity: float,
    cutoff: float,
    min_gap: Array,
    inverse_mass: Array | None = None,
    dt: float = 0.0,
    depth: float | None = None,
) -> Array:
    """(s, 3) N, the normal lubrication force of every plane on every sphere.

    F = -c(h) ((v - v_plane) . n) n: it resists approach and separation alike.

    Args:
        position, velocity: (s, 3) sphere centres (m) and velocities (m/s); radius: (s,) m;
        plane_point, plane_normal, plane_velocity: (p, 3); min_gap: (s,) m;
        inverse_mass: (s,) 1/kg and dt (s), the body step: c is made ``implicit_damping``;
        depth: m, disks (cylinders of this length) in a 2D run; None: spheres.
    """
    gap = jnp.einsum("spa,pa->sp", position[:, None, :] - plane_point[None], plane_normal)
    gap = gap - radius[:, None]
    approach = jnp.einsum("spa,pa->sp", velocity[:, None, :] - plane_velocity[None], plane_normal)
    c = lubrication_coefficient(
        gap, radius[:, None], viscosity, cutoff, min_gap[:, None], depth
    )  # fmt: skip
    c = implicit_damping(c, None if inverse_mass is None else inverse_mass[:, None], dt)
    return -jnp.einsum("sp,pa->sa", c * approach, plane_normal)


def lubrication_pairs(
    position: Array,
    velocity: Array,
    radius: Array,
    i: Array,
    j: Array,
    valid: Array,
    viscosity: float,
    cutoff: float,
    min_gap: Array,
    inverse_mass: Array | None = None,
    dt: float = 0.0,
    one_sided: bool = False,
    depth: float | None = None,
) -> Array:
    """(s, 3) N, the normal lubrication forces of sphere pairs (i, j), summed per sphere.

    On i: F = c(h) ((v_j - v_i) . n) n with n from i to j; on j the opposite (``one_sided``:
    on i only, for pair lists that hold each pair once from either side).

    Args:
        position, velocity: (s, 3); radius: (s,) m; i, j, valid: (P,) the pair list
        (``kernels.neighbor_search.pair_list``; padding masked by ``valid``); min_gap: (s,) m;
        inverse_mass: (s,) 1/kg and dt (s), the body step: c is made ``implicit_damping``;
        depth: m, disks (cylinders of this length) in a 2D run; None: spheres.
    """
    j_safe = jnp.where(valid, j, 0)
    d = position[j_safe] - position[i]
    distance = jnp.sqrt(jnp.sum(d * d, axis=-1))
    n = d / jnp.where(distance > 0, distance, 1.0)[:, None]
    ri, rj = radius[i], radius[j_safe]
    gap = distance - ri - rj
    closing = jnp.sum((velocity[j_safe] - velocity[i]) * n, axis=-1)
    c = lubrication_coefficient(
        gap, ri * rj / (ri + rj), viscosity, cutoff, jnp.minimum(min_gap[i], min_gap[j_safe]),
        depth,
    )  # fmt: skip
    if inverse_mass is not None:
        c = implicit_damping(c, inverse_mass[i] + inverse_mass[j_safe], dt)
    f = jnp.where(valid, c * closing, 0.0)[:, None] * n
    out = jnp.zeros_like(position)
    if one_sided:
        return out.at[i].add(f)
    return out.at[i].add(f).at[j_safe].add(-f)
