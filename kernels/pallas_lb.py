"""Fused stream-collide sweeps on ONE population buffer for the GPU (JAX Pallas, Triton).

The AA access pattern (Bailey et al. 2009, "Accelerating lattice Boltzmann fluid flow
simulations using graphics processors", ICPP), on the (q, n) buffer A of the populations
(the solver's (q, *shape) state, flattened row-major: n cells, C order):
    even sweep: cell x reads f_i = A[i][x], collides, writes f*_i to A[opp i][x]  (local);
    odd sweep:  cell x reads f_i = A[opp i][x - c_i], collides, writes f*_i to A[i][x + c_i].
Cell x reads and writes the same slots in a sweep, {A[i][x]} or {A[i][x + c_i]}, and these
sets are disjoint between cells, so every program of the grid updates its cells in place
without races (the loads of a program precede its stores), and after an even + odd pair A is
in the natural layout again: A[i][x] = f_i(x), the pre-collision populations.

Half-way bounce-back, with a per-node solid mask read in the sweep (a select, instead of the
native kernel's repairs of a host-built link list between sweeps: on the GPU a repair pass is a
launch and a scattered pass of its own, while the mask is one byte per cell that the stencil's
neighbours share in the cache). Solid nodes do no work, and their slots are never read or
written by the sweeps:
    even sweep: f*_i of x goes to A[opp i][x] as always; if x + c_i is solid it is the
                population that bounces back, f_{opp i}(x) = f*_i(x) + ladd, so Ladd's term
                is added on that write;
    odd sweep:  if x - c_i is solid, f_i(x) was left in A[i][x] by the even sweep (read it
                there); if x + c_i is solid, f*_i(x) bounces back into A[opp i][x] (a slot of
                the solid node's set, which no one else touches), Ladd's term added;
so after an odd sweep A holds the pre-collision populations of every fluid node, wall links
included, as the pure-JAX step keeps them. Ladd's term for the population j = opp i leaving
the wall node s = x + c_i is 2 w_j (c_j . u_w(s)) / c_s^2 with the reference density 1, the
pure-JAX step's moving-wall rule (solver/fluid/boundary_rules.py).

``finish`` ends a chunk: after an even sweep (odd-length chunks) it streams in place by
swapping the pairs (A[k][x], A[opp k][x - c_k]) of fluid nodes (each pair belongs to one cell),
and it puts the solid nodes at rest (f_i = w_i), the state the pure-JAX step keeps.

Vectorisation: each program handles ``block`` consecutive cells of the flattened grid (a power
of two, as Triton blocks must be); the last axis is the contiguous one, so the loads and
stores of a direction are contiguous runs but at the periodic wrap. Neighbours are flat
indices computed from the cell's coordinates, wrapped by selects; loads and stores are
gathers and scatters of those indices (``ref.at[rows, cols]``), masked to the fluid cells of
the grid. Offsets are 64-bit where the buffer exceeds 4 GiB (Pallas's Triton lowering), cell
indices are int32: grids of up to 2^31 - 1 cells.

Collision: BGK or TRT with Guo's forcing, optionally with the Smagorinsky subgrid model,
kernels/collision.py and kernels/equilibrium.py
called on the block's values (the pure-JAX step's own formulas), in the compute dtype; a
16-bit storage holds (f - w) * s (kernels/storage.py), decoded on load, encoded on store.
On the CPU the sweeps run in Pallas's interpret mode (slow: for tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from kernels import collision, storage
from kernels.equilibrium import equilibrium, project
from kernels.lattices import CS2, Lattice

# A body force: None, d constants (baked into the sweep), or a (d,) array (a runtime operand)
Force = Sequence[float] | Array | None
MAX_CELLS = 2**31 - 1  # int32 cell indices


@dataclass(frozen=True)
class SweepSpec:
    """Static parameters of the sweeps.

    Attributes:
        lattice: the velocity set.
        shape: the grid (*shape), periodic on every axis.
        compute: dtype of the arithmetic, "float32" or "float64".
        storage: dtype of the buffer: ``compute``, or "float16"/"bfloat16" stored shifted.
        omega_plus: relaxation rate of the even moments (BGK: the rate).
        omega_minus: TRT's odd rate (equal to omega_plus for BGK).
        trt: TRT (True) or BGK.
        les_cs: the Smagorinsky constant C_s, 0 without a subgrid model: then the even rate is
            per cell (kernels/collision.py smagorinsky_omega, omega_plus the molecular one) and
            TRT's odd rate follows it through Lambda = ``trt_magic``.
        trt_magic: TRT's Lambda (used with les_cs > 0).
        walls: whether the grid has solid nodes (a (n,) bool mask is passed).
        moving: whether walls move (a (d, n) wall velocity is passed; Ladd's term).
        block: cells per program, a power of two.
        num_warps: Triton warps per program (GPU only).
        interpret: run in Pallas's interpret mode (the CPU back end).
    """

    lattice: Lattice
    shape: tuple[int, ...]
    compute: str
    storage: str
    omega_plus: float
    omega_minus: float
    trt: bool
    les_cs: float = 0.0
    trt_magic: float = 0.1875
    walls: bool = False
    moving: bool = False
    block: int = 256
    num_warps: int = 4
    interpret: bool = False
    split: bool = False

    @property
    def cells(self) -> int:
        return int(np.prod(self.shape))

    @property
    def plane(self) -> int:
        """Cells of one x plane (the split's ghost planes)."""
        return int(np.prod(self.shape[1:]))

    def ghost_row(self, direction: int) -> int:
        """Row of G (2 m, plane) holding ``direction``'s slot of a ghost plane: G[0:m] the
        directions with c_x = -1 at x = -1, G[m:2m] those with c_x = +1 at x = nx."""
        cx = [int(c) for c in self.lattice.c[:, 0]]
        minus = [k for k in range(self.lattice.q) if cx[k] == -1]
        plus = [k for k in range(self.lattice.q) if cx[k] == 1]
        if cx[direction] == -1:
            return minus.index(direction)
        return len(minus) + plus.index(direction)

    def check(self) -> None:
        """Raise ValueError for parameters the sweeps cannot run."""
        if self.block < 1 or self.block & (self.block - 1):
            raise ValueError(f"block={self.block}: Triton blocks are powers of two")
        if self.cells > MAX_CELLS:
            raise ValueError(f"{self.cells} cells: the sweeps index at most {MAX_CELLS}")
        if len(self.shape) != self.lattice.d:
            raise ValueError(f"shape {self.shape} is not {self.lattice.d}-dimensional")


def _cells(spec: SweepSpec) -> tuple[Array, Array]:
    """This program's flat cell indices (block,) int32, clamped into the grid, and which of
    them are in it (the last block may overhang)."""
    cell = pl.program_id(0) * spec.block + jnp.arange(spec.block, dtype=jnp.int32)
    return jnp.minimum(cell, spec.cells - 1), cell < spec.cells


def _ghosts(spec: SweepSpec, cell: Array) -> list[Array | None]:
    """Split along x: per direction i, whether x + c_i lies in a ghost plane (block,) bool;
    None where it never does (c_x = 0, or no split)."""
    if not spec.split:
        return [None] * spec.lattice.q
    x = cell // spec.plane
    nx = spec.shape[0]
    return [None if c[0] == 0 else (x == nx - 1 if c[0] == 1 else x == 0) for c in spec.lattice.c]


def _neighbours(spec: SweepSpec, cell: Array) -> list[Array]:
    """Per direction i, the flat index of x + c_i (block,), periodic on every axis (split: a
    ghost neighbour's index is its periodic image's, whose remainder by the plane is the ghost
    cell's column in G)."""
    strides = [int(np.prod(spec.shape[a + 1 :])) for a in range(len(spec.shape))]
    # per axis, the flat offset of one step back (-1) and forward (+1), wrapped by a select
    step: list[dict[int, Array | int]] = []
    for extent, stride in zip(spec.shape, strides, strict=True):
        coord = (cell // stride) % extent
        step.append({
            0: 0,
            1: jnp.where(coord == extent - 1, -(extent - 1) * stride, stride),
            -1: jnp.where(coord == 0, (extent - 1) * stride, -stride),
        })  # fmt: skip
    out = []
    for c in spec.lattice.c:
        index = cell
        for a, ca in enumerate(c):
            if ca:
                index = index + step[a][int(ca)]
        out.append(index)
    return out


def _decode(spec: SweepSpec, raw: Array, i: int) -> Array:
    return storage.decode(raw, float(spec.lattice.w[i]), spec.storage, spec.compute)


def _encode(spec: SweepSpec, f: Array, i: int) -> Array:
    return storage.encode(f, float(spec.lattice.w[i]), spec.storage, spec.compute)


def _collide(spec: SweepSpec, f: list[Array], force) -> list[Array]:
    """BGK or TRT with Guo's source on q arrays (block,) in the compute dtype: the formulas of
    solver/fluid/collide.py (moments as its ``moment_table``: sums in direction order, the
    half force added, one divide by rho)."""
    lat = spec.lattice
    rho = f[0]
    for i in range(1, lat.q):
        rho = rho + f[i]
    u = []
    for a in range(lat.d):
        total = None
        for i in range(lat.q):
            ca = int(lat.c[i, a])
            if ca:
                term = f[i] if ca == 1 else -f[i]
                total = term if total is None else total + term
        if force is not None:
            total = total + 0.5 * force[a]
        u.append(total / rho)
    feq = equilibrium(lat, rho, u)
    omega_plus, omega_minus = spec.omega_plus, spec.omega_minus
    if spec.les_cs > 0.0:  # the cell's own rate: no extra pass (solver/fluid/collide.py)
        omega_plus = collision.smagorinsky_omega(
            lat, f, feq, rho, u, force, spec.omega_plus, spec.les_cs
        )
        omega_minus = omega_plus
        if spec.trt:
            omega_minus = collision.trt_omega_minus(omega_plus, spec.trt_magic)
    if spec.trt:
        post = collision.trt(lat, f, feq, omega_plus, omega_minus)
    else:
        post = collision.bgk(lat, f, feq, omega_plus)
    if force is not None:
        source = collision.guo_source(lat, u, force, omega_plus, omega_minus)
        post = tuple(p + s for p, s in zip(post, source, strict=True))
    return [p.astype(spec.compute) for p in post]


def _store(spec: SweepSpec, ref, row, column: Array, value: Array, mask: Array) -> None:
    """Masked store of ``value`` (block,) into ref[row, column]. Masked-out lanes point past
    the grid: interpret mode turns a masked store into a scatter of every lane (the masked ones
    writing back what they read), which must not land on a live lane's slot; the scatter drops
    indices out of bounds, and on the GPU a masked lane does not touch memory at all."""
    column = jnp.where(mask, column, spec.cells)
    plgpu.store(ref.at[row, column], value, mask=mask)


def _ladd(
    spec: SweepSpec, wall_ref, j: int, solid_node: Array, wall: Array, mask: Array,
    in_ghost=None, wall_ghost_ref=None,
):  # fmt: skip
    """Ladd's term (block,) for the population j leaving the wall nodes ``solid_node`` (flat
    indices; loaded where ``wall & mask``; from the ghost planes' wall velocity on lanes
    ``in_ghost``): 2 w_j (c_j . u_w) / c_s^2."""
    lat = spec.lattice
    load = wall & mask
    if in_ghost is None:
        u = [plgpu.load(wall_ref.at[a, solid_node], mask=load, other=0) for a in range(lat.d)]
    else:
        side = 0 if lat.c[int(lat.opposite[j])][0] == -1 else 1  # the wall is at x + c_opp(j)
        column = solid_node % spec.plane
        u = [
            jnp.where(
                in_ghost,
                plgpu.load(wall_ghost_ref.at[side, a, column], mask=load & in_ghost, other=0),
                plgpu.load(wall_ref.at[a, solid_node], mask=load & ~in_ghost, other=0),
            )
            for a in range(lat.d)
        ]
    return (2.0 * float(lat.w[j]) / CS2) * project(lat, j, u)


def _sweep_body(spec: SweepSpec, odd: bool, force, solid_ref, wall_ref, ref, ghost=None) -> None:
    """One even or odd sweep of this program's cells, the module docstring's rules; ``ref`` is
    the (q, n) buffer, read and written in place. Split along x, ``ghost`` holds the refs
    (G (2 m, plane), read and written by the odd sweep; the ghost planes' solid mask (2, plane)
    and wall velocity (2, d, plane) when there are walls; R (2 m, plane), the neighbours'
    pushes into this block's boundary planes, read by the even sweep instead of A where the
    pushing node is fluid: a solid one pushed nothing, and the bounce-back is in A)."""
    lat = spec.lattice
    q, opposite = lat.q, [int(j) for j in lat.opposite]
    cell, active = _cells(spec)
    g_ref, solid_ghost_ref, wall_ghost_ref, r_ref = ghost if ghost is not None else (None,) * 4
    receiving = not odd and r_ref is not None
    neighbours = _neighbours(spec, cell) if odd or spec.moving or receiving else None
    beyond = _ghosts(spec, cell)  # beyond[i]: x + c_i is in a ghost plane
    wall: list[Array | None] = [None] * q  # wall[i]: x + c_i is a solid node
    if spec.walls:
        active = active & ~solid_ref[cell]
        if neighbours is not None:
            wall = [None] + [
                _at_ghost(spec, beyond[i], neighbours[i], solid_ref, solid_ghost_ref, i)
                for i in range(1, q)
            ]

    def slot(i: int, target: int, other: int) -> tuple[Array | int, Array, Array | None]:
        """(row, column) of A[i][x + c_target], or of A[other][x] where x + c_target is
        solid; and where it is a ghost slot (row i of G at the column's remainder)."""
        hit, ghost_lane = wall[target], beyond[target]
        if hit is None:
            return i, neighbours[target], ghost_lane
        row = jnp.where(hit, jnp.int32(other), jnp.int32(i))
        in_ghost = None if ghost_lane is None else ghost_lane & ~hit
        return row, jnp.where(hit, cell, neighbours[target]), in_ghost

    f = []
    for i in range(q):
        in_ghost = None
        if not odd or i == 0:
            row, column = i, cell
        else:  # f_i from x - c_i = x + c_opp(i); from A[i][x] where that node is solid
            row, column, in_ghost = slot(opposite[i], opposite[i], i)
        raw = _load(spec, ref, g_ref, row, column, in_ghost, opposite[i], active)
        if receiving and beyond[opposite[i]] is not None:  # x - c_i is in a ghost plane
            pushed = active & beyond[opposite[i]]
            if spec.walls:
                pushed = pushed & ~wall[opposite[i]]
            sent = plgpu.load(r_ref.at[spec.ghost_row(i), cell % spec.plane], mask=pushed, other=0)
            raw = jnp.where(pushed, sent, raw)
        f.append(_decode(spec, raw, i))
    post = _collide(spec, f, force)
    for i in range(q):
        j, value = opposite[i], post[i]
        if spec.moving and i != 0:  # f*_i bounces back as f_j(x) from the wall node x + c_i
            term = _ladd(spec, wall_ref, j, neighbours[i], wall[i], active, beyond[i],
                         wall_ghost_ref)  # fmt: skip
            value = jnp.where(wall[i], value + term, value)
        in_ghost = None
        if not odd:
            row, column = j, cell
        elif i == 0:
            row, column = 0, cell
        else:
            row, column, in_ghost = slot(i, i, j)
        value = _encode(spec, value, i)
        if in_ghost is None:
            _store(spec, ref, row, column, value, active)
        else:  # odd sweep, split: the push of x + c_i in a ghost plane goes to G
            _store(spec, ref, row, column, value, active & ~in_ghost)
            _store_ghost(spec, g_ref, spec.ghost_row(i), column, value, active & in_ghost)


def _at_ghost(spec: SweepSpec, in_ghost, index: Array, ref, ghost_ref, i: int) -> Array:
    """ref[index] (block,), or for lanes whose neighbour along c_i is in a ghost plane the
    ghost planes' ghost_ref[side, column] (side 0 at x = -1, 1 at x = nx)."""
    value = ref[index]
    if in_ghost is None:
        return value
    side = 0 if spec.lattice.c[i][0] == -1 else 1
    return jnp.where(in_ghost, ghost_ref[side, index % spec.plane], value)


def _load(spec: SweepSpec, ref, g_ref, row, column: Array, in_ghost, direction: int, mask):
    """A[row][column] (block,), or, on lanes ``in_ghost``, G's row for ``direction`` at the
    column's remainder by the plane (the odd sweep's reads from a ghost plane)."""
    if in_ghost is None:
        return plgpu.load(ref.at[row, column], mask=mask, other=0)
    here = plgpu.load(ref.at[row, column], mask=mask & ~in_ghost, other=0)
    there = plgpu.load(
        g_ref.at[spec.ghost_row(direction), column % spec.plane], mask=mask & in_ghost, other=0
    )
    return jnp.where(in_ghost, there, here)


def _store_ghost(spec: SweepSpec, g_ref, row: int, column: Array, value: Array, mask) -> None:
    """Masked store into G[row, column % plane] (masked lanes pointed past G, as ``_store``)."""
    column = jnp.where(mask, column % spec.plane, spec.plane)
    plgpu.store(g_ref.at[row, column], value, mask=mask)


def _finish_body(spec: SweepSpec, swap: bool, solid_ref, ref, ghost=None) -> None:
    """After an even sweep (``swap``), stream in place: swap the pairs (A[k][x],
    A[opp k][x - c_k]) of fluid nodes (each pair once, from the cell x, for k < opp k; a link
    from a solid node is in place already). Split along x, a pair whose other end is in a ghost
    plane is completed on this side only: A[k][x] takes G's copy of the other end (the shard
    holding it completes its own end alike, so no message goes back). Then solid nodes at
    rest, f_i = w_i."""
    lat = spec.lattice
    cell, inside = _cells(spec)
    g_ref, solid_ghost_ref, r_ref = (None, None, None) if ghost is None else ghost
    fluid = inside
    if spec.walls:
        solid = solid_ref[cell]
        fluid = inside & ~solid
    if r_ref is not None:  # split, even length: the neighbours' last pushes into this block
        neighbours = _neighbours(spec, cell)
        beyond = _ghosts(spec, cell)
        for i in range(1, lat.q):
            j = int(lat.opposite[i])
            if beyond[j] is None:
                continue
            pushed = fluid & beyond[j]
            if spec.walls:
                pushed = pushed & ~_at_ghost(
                    spec, beyond[j], neighbours[j], solid_ref, solid_ghost_ref, j
                )
            sent = plgpu.load(r_ref.at[spec.ghost_row(i), cell % spec.plane], mask=pushed, other=0)
            _store(spec, ref, i, cell, sent, pushed)
    if swap:
        neighbours = _neighbours(spec, cell)
        beyond = _ghosts(spec, cell)
        for k in range(1, lat.q):
            j = int(lat.opposite[k])
            other_fluid = fluid
            if spec.walls:
                partner = _at_ghost(spec, beyond[j], neighbours[j], solid_ref, solid_ghost_ref, j)
                other_fluid = fluid & ~partner
            in_ghost = beyond[j]
            if in_ghost is not None:  # the partner x - c_k = x + c_j is in a ghost plane
                copy = other_fluid & in_ghost
                there = plgpu.load(
                    g_ref.at[spec.ghost_row(j), neighbours[j] % spec.plane], mask=copy, other=0
                )
                _store(spec, ref, k, cell, there, copy)
            if j < k:
                continue
            pair = other_fluid if in_ghost is None else other_fluid & ~in_ghost
            here = plgpu.load(ref.at[k, cell], mask=pair, other=0)
            there = plgpu.load(ref.at[j, neighbours[j]], mask=pair, other=0)
            _store(spec, ref, k, cell, there, pair)
            _store(spec, ref, j, neighbours[j], here, pair)
    if spec.walls:
        rest = jnp.full((spec.block,), 1.0, spec.compute)
        for i in range(lat.q):
            value = _encode(spec, rest * float(lat.w[i]), i)
            _store(spec, ref, i, cell, value, inside & solid)


def _is_constant(force: Force) -> bool:
    return force is not None and all(isinstance(c, (int, float)) for c in force)


def _call(spec: SweepSpec, body, operands: list[Array], name: str, aliased: int = 1):
    """pallas_call of ``body(*refs)`` over the grid's blocks, the last ``aliased`` operands
    (the (q, n) populations, and G when an odd sweep pushes into it) aliased with the results:
    updated in place."""
    anywhere = pl.BlockSpec(memory_space=pl.ANY)  # whole arrays: the sweep indexes them itself
    outs = operands[len(operands) - aliased :]
    shapes = [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs]
    out = pl.pallas_call(
        body,
        out_shape=shapes[0] if aliased == 1 else tuple(shapes),
        grid=(pl.cdiv(spec.cells, spec.block),),
        in_specs=[anywhere] * len(operands),
        out_specs=anywhere if aliased == 1 else tuple([anywhere] * aliased),
        input_output_aliases={len(operands) - aliased + k: k for k in range(aliased)},
        interpret=spec.interpret,
        # one stage: no software pipelining of a loop (the sweep has none)
        compiler_params=plgpu.CompilerParams(num_warps=spec.num_warps, num_stages=1),
        name=name,
    )(*operands)
    return out


def sweep(
    spec: SweepSpec,
    populations: Array,
    odd: bool,
    force: Force = None,
    solid: Array | None = None,
    wall_velocity: Array | None = None,
    ghosts: tuple[Array | None, Array | None, Array | None, Array | None] | None = None,
):
    """One time step in place: the even or the odd sweep of the AA pattern.

    Args:
        populations: (q, n) in the storage dtype; even sweep: the natural layout
            A[i][x] = f_i(x); odd sweep: the layout an even sweep left.
        odd: which sweep.
        force: the body force density at this step (lattice units): None, d Python floats
            (constant: compiled in) or a (d,) array in the compute dtype.
        solid: (n,) bool, when ``spec.walls``.
        wall_velocity: (d, n) lattice velocity of the solid nodes, when ``spec.moving``.
        ghosts: with ``spec.split``: (G (2 m, plane) in the storage dtype for the odd sweep, the
            ghost planes' solid mask (2, plane) bool when ``spec.walls``, their wall velocity
            (2, d, plane) when ``spec.moving``, R (2 m, plane) for the even sweep or None).
    Returns:
        (q, n): the buffer after the sweep (the same buffer when XLA can alias it); split and
        odd: (populations, G), G holding the pushes into the ghost planes.
    """
    runtime_force = force is not None and not _is_constant(force)
    operands = []
    if runtime_force:
        operands.append(jnp.asarray(force, spec.compute).reshape(spec.lattice.d))
    if spec.walls:
        operands.append(solid)
    if spec.moving:
        operands.append(wall_velocity)
    split = spec.split
    receiving = split and not odd and ghosts[3] is not None
    if split:
        g, solid_ghost, wall_ghost, received = ghosts
        operands += [a for a, use in ((solid_ghost, spec.walls), (wall_ghost, spec.moving)) if use]
        if receiving:
            operands.append(received)
    aliased = 2 if split and odd else 1
    if split and odd:
        operands.append(g)
    operands.append(populations)
    if split and odd:  # G and A are both updated in place: A stays the last operand
        operands[-2:] = [populations, g]

    def body(*refs):
        n_in = len(operands)
        named = iter(refs[: n_in - aliased])
        force_ref = next(named) if runtime_force else None
        solid_ref = next(named) if spec.walls else None
        wall_ref = next(named) if spec.moving else None
        ghost = None
        if split:
            solid_ghost_ref = next(named) if spec.walls else None
            wall_ghost_ref = next(named) if spec.moving else None
            r_ref = next(named) if receiving else None
            g_ref = refs[-1] if odd else None  # outputs follow the inputs: (A, G)
            ghost = (g_ref, solid_ghost_ref, wall_ghost_ref, r_ref)
        step_force = force
        if runtime_force:
            step_force = [force_ref[a] for a in range(spec.lattice.d)]
        a_ref = refs[n_in] if split and odd else refs[-1]
        _sweep_body(spec, odd, step_force, solid_ref, wall_ref, a_ref, ghost)

    return _call(spec, body, operands, "lb_aa_odd" if odd else "lb_aa_even", aliased)


def finish(
    spec: SweepSpec,
    populations: Array,
    swap: bool,
    solid: Array | None = None,
    ghosts: tuple[Array, Array | None] | None = None,
) -> Array:
    """End a chunk in place: stream after an even sweep (``swap``; odd-length chunks) and put
    solid nodes at rest. populations: (q, n) in the storage dtype; solid: (n,) bool when
    ``spec.walls``; ghosts: with ``spec.split``, (G as the neighbours' even sweeps left it
    (``swap``), else R, the neighbours' last pushes into this block; the ghost planes' solid
    mask (2, plane) when ``spec.walls``). Returns the natural layout, the pure-JAX step's
    state."""
    operands = [solid] if spec.walls else []
    if spec.split:  # G after an even sweep (swap), else R
        exchanged, solid_ghost = ghosts
        operands += [exchanged] + ([solid_ghost] if spec.walls else [])
    operands.append(populations)

    def body(*refs):
        named = iter(refs[:-2])
        solid_ref = next(named) if spec.walls else None
        ghost = None
        if spec.split:
            exchanged = next(named)
            solid_ghost_ref = next(named) if spec.walls else None
            ghost = (exchanged if swap else None, solid_ghost_ref, None if swap else exchanged)
        _finish_body(spec, swap, solid_ref, refs[-1], ghost)

    return _call(spec, body, operands, "lb_aa_finish")
