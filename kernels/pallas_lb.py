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

    @property
    def cells(self) -> int:
        return int(np.prod(self.shape))

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


def _neighbours(spec: SweepSpec, cell: Array) -> list[Array]:
    """Per direction i, the flat index of x + c_i (block,), periodic on every axis."""
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


def _ladd(spec: SweepSpec, wall_ref, j: int, solid_node: Array, wall: Array, mask: Array):
    """Ladd's term (block,) for the population j leaving the wall nodes ``solid_node`` (flat
    indices; loaded where ``wall & mask``): 2 w_j (c_j . u_w) / c_s^2."""
    lat = spec.lattice
    load = wall & mask
    u = [plgpu.load(wall_ref.at[a, solid_node], mask=load, other=0) for a in range(lat.d)]
    return (2.0 * float(lat.w[j]) / CS2) * project(lat, j, u)


def _sweep_body(spec: SweepSpec, odd: bool, force, solid_ref, wall_ref, ref) -> None:
    """One even or odd sweep of this program's cells, the module docstring's rules; ``ref`` is
    the (q, n) buffer, read and written in place."""
    lat = spec.lattice
    q, opposite = lat.q, [int(j) for j in lat.opposite]
    cell, active = _cells(spec)
    neighbours = _neighbours(spec, cell) if odd or spec.moving else None
    wall: list[Array | None] = [None] * q  # wall[i]: x + c_i is a solid node
    if spec.walls:
        active = active & ~solid_ref[cell]
        if neighbours is not None:
            wall = [None] + [solid_ref[neighbours[i]] for i in range(1, q)]

    def slot(i: int, target: int, other: int) -> tuple[Array | int, Array]:
        """(row, column) of A[i][x + c_target], or of A[other][x] where x + c_target is
        solid."""
        hit = wall[target]
        if hit is None:
            return i, neighbours[target]
        row = jnp.where(hit, jnp.int32(other), jnp.int32(i))
        return row, jnp.where(hit, cell, neighbours[target])

    f = []
    for i in range(q):
        if not odd or i == 0:
            row, column = i, cell
        else:  # f_i from x - c_i = x + c_opp(i); from A[i][x] where that node is solid
            row, column = slot(opposite[i], opposite[i], i)
        raw = plgpu.load(ref.at[row, column], mask=active, other=0)
        f.append(_decode(spec, raw, i))
    post = _collide(spec, f, force)
    for i in range(q):
        j, value = opposite[i], post[i]
        if spec.moving and i != 0:  # f*_i bounces back as f_j(x) from the wall node x + c_i
            term = _ladd(spec, wall_ref, j, neighbours[i], wall[i], active)
            value = jnp.where(wall[i], value + term, value)
        if not odd:
            row, column = j, cell
        elif i == 0:
            row, column = 0, cell
        else:
            row, column = slot(i, i, j)
        _store(spec, ref, row, column, _encode(spec, value, i), active)


def _finish_body(spec: SweepSpec, swap: bool, solid_ref, ref) -> None:
    """After an even sweep (``swap``), stream in place: swap the pairs (A[k][x],
    A[opp k][x - c_k]) of fluid nodes (each pair once, from the cell x, for k < opp k; a link
    from a solid node is in place already). Then solid nodes at rest, f_i = w_i."""
    lat = spec.lattice
    cell, inside = _cells(spec)
    fluid = inside
    if spec.walls:
        solid = solid_ref[cell]
        fluid = inside & ~solid
    if swap:
        neighbours = _neighbours(spec, cell)
        for k in range(1, lat.q):
            j = int(lat.opposite[k])
            if j < k:
                continue
            pair = fluid & ~solid_ref[neighbours[j]] if spec.walls else fluid
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


def _call(spec: SweepSpec, body, operands: list[Array], name: str) -> Array:
    """pallas_call of ``body(*refs)`` over the grid's blocks, the last operand (the (q, n)
    populations) aliased with the result: updated in place."""
    populations = operands[-1]
    anywhere = pl.BlockSpec(memory_space=pl.ANY)  # whole arrays: the sweep indexes them itself
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(populations.shape, populations.dtype),
        grid=(pl.cdiv(spec.cells, spec.block),),
        in_specs=[anywhere] * len(operands),
        out_specs=anywhere,
        input_output_aliases={len(operands) - 1: 0},
        interpret=spec.interpret,
        # one stage: no software pipelining of a loop (the sweep has none)
        compiler_params=plgpu.CompilerParams(num_warps=spec.num_warps, num_stages=1),
        name=name,
    )(*operands)


def sweep(
    spec: SweepSpec,
    populations: Array,
    odd: bool,
    force: Force = None,
    solid: Array | None = None,
    wall_velocity: Array | None = None,
) -> Array:
    """One time step in place: the even or the odd sweep of the AA pattern.

    Args:
        populations: (q, n) in the storage dtype; even sweep: the natural layout
            A[i][x] = f_i(x); odd sweep: the layout an even sweep left.
        odd: which sweep.
        force: the body force density at this step (lattice units): None, d Python floats
            (constant: compiled in) or a (d,) array in the compute dtype.
        solid: (n,) bool, when ``spec.walls``.
        wall_velocity: (d, n) lattice velocity of the solid nodes, when ``spec.moving``.
    Returns:
        (q, n): the buffer after the sweep (the same buffer when XLA can alias it).
    """
    runtime_force = force is not None and not _is_constant(force)
    operands = []
    if runtime_force:
        operands.append(jnp.asarray(force, spec.compute).reshape(spec.lattice.d))
    if spec.walls:
        operands.append(solid)
    if spec.moving:
        operands.append(wall_velocity)
    operands.append(populations)

    def body(*refs):
        named = iter(refs[:-2])  # refs[-2] is the aliased input, the output ref's buffer
        force_ref = next(named) if runtime_force else None
        solid_ref = next(named) if spec.walls else None
        wall_ref = next(named) if spec.moving else None
        step_force = force
        if runtime_force:
            step_force = [force_ref[a] for a in range(spec.lattice.d)]
        _sweep_body(spec, odd, step_force, solid_ref, wall_ref, refs[-1])

    return _call(spec, body, operands, "lb_aa_odd" if odd else "lb_aa_even")


def finish(spec: SweepSpec, populations: Array, swap: bool, solid: Array | None = None) -> Array:
    """End a chunk in place: stream after an even sweep (``swap``; odd-length chunks) and put
    solid nodes at rest. populations: (q, n) in the storage dtype; solid: (n,) bool when
    ``spec.walls``. Returns the natural layout, the pure-JAX step's state."""
    operands = [solid, populations] if spec.walls else [populations]

    def body(*refs):
        _finish_body(spec, swap, refs[0] if spec.walls else None, refs[-1])

    return _call(spec, body, operands, "lb_aa_finish")
