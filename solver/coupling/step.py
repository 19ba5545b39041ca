"""The coupled step: the fluid's collision with moving bodies (PSM), then the bodies moved.

One fluid step of a coupled run, inside the fluid chunk (``solver.fluid.step``) at its collision:
    1. the bodies at time t are put on the grid: each sphere's (each clump member's) solid
       fraction and velocity v + omega x r on the cells of its stencil, summed per covered
       cell (each held once, in a fixed number of slots per sphere) and masked by the fluid's
       walls;
    2. every cell takes the fluid's own operator (BGK, TRT, with its forcing); the covered
       cells take the PSM blend (kernels/coupling.py), computed on the slots and written over
       the fluid's result (``patch``), which gives the force on the solid there. Where the
       slots would outnumber ``SLOTS_PER_CELL`` of the block's cells the cover is summed into
       the whole block instead and the blend runs over every cell (cheaper there);
    3. each sphere gathers its share of the cells' force and torque (its fraction over the
       cell's total); a clump sums its members' forces and their torques about its centre of
       mass; the sums run over all shards;
    4. the bodies advance by one fluid step in ``substeps`` rigid-body steps (contacts,
       gravity) with the hydrodynamic force (averaged over the last two fluid steps when
       ``average_force``) and the buoyancy -rho_f V g held constant.
Bodies are replicated on every shard by default: each shard computes the same body update from
the same summed forces (a few thousand bodies cost little next to the grid). With
``PsmCoupling.owned`` (``coupling.bodies=owned``) each shard owns the bodies whose centre its
block holds, covers the grid with its owned bodies and ghost copies of its neighbours', sends
the ghosts' partial forces back to their owners and advances its owned bodies only
(``_owned_passes``; the exchanges are ``solver.distributed.bodies.in_fluid``).

Units: the bodies are SI, the fluid is lattice units; ``PsmCoupling`` holds the scales.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels import clump, rigid_body
from kernels import coupling as psm
from kernels.materialise import materialised
from kernels.rigid_body import angular_velocity
from solver.bodies.step import BodySetup, BodyState, body_step
from solver.distributed.bodies import clump_slots, in_fluid, records
from solver.distributed.bodies.clump_slots import MemberTable
from solver.distributed.bodies.forces import local_contacts
from solver.distributed.bodies.layout import BodyLayout
from solver.distributed.bodies.step import _origin as cell_list_origin
from solver.distributed.halo import Halo
from solver.fluid.collide import (
    OPERATORS,
    CollisionParams,
    body_force_at,
    make_collide,
    moment_table,
)
from solver.fluid.setup import FluidSetup

TRACK_FIELDS = 9  # position (3), velocity (3), hydrodynamic force (3) per tracked body
# The PSM blend runs on a list of the covered cells (slots) unless the slots would be more than
# this share of the block's cells: then over every cell, which costs less there (the crossover
# measured on XLA:CPU: about 1/9, docs/performance.md)
SLOTS_PER_CELL = 0.125


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class CoupledBodies:
    """The bodies carried through the fluid chunk (replicated on every shard).

    Attributes:
        state: the rigid-body state at the fluid's time (SI units).
        hydro_force: (n, 3) N, the hydrodynamic force of the last fluid step.
        hydro_torque: (n, 3) N m, its torque about each centre of mass.
        overflow: (shards, 6) int32, with owned bodies (``coupling.bodies=owned``): each
            shard's sticky buffer needs (``solver.distributed.bodies.in_fluid``); (0, 6) when
            replicated (a leaf all the same: checkpoints keep one tree structure). With owned
            bodies ``state.partners`` and ``state.history`` are full partner rows (both
            directions, global ids, ``max_partners`` wide).
    """

    state: BodyState
    hydro_force: Array
    hydro_torque: Array
    overflow: Array

    def replace(self, **changes) -> CoupledBodies:
        return dataclasses.replace(self, **changes)


class StencilCover(NamedTuple):
    """The spheres on their stencils (s spheres, m stencil entries each), lattice units.

    Attributes:
        eps: (s, m) each entry's cover; rel: d arrays (s, m), the entries' offsets from the
        centres; flat: (s, m) int32 the entries' flat indices in the block (its size:
        outside); rows: (s, m, d + 1) eps and eps u_s per entry, to be summed per cell."""

    eps: Array
    rel: list[Array]
    flat: Array
    rows: Array


class CouplingStages(NamedTuple):
    """``PsmCoupling.stages``: cover(time, xs, vs, ws, rad, block) -> StencilCover;
    sums(stencil, rows, force) -> (force, torque) (s, 3) per sphere, lattice units;
    advance(extra, force, torque, xs) -> (extra, report); members(bodies) -> (xs, vs, ws);
    capacity: slots per sphere (``kernels.coupling.cover_capacity``); width: d + 1; tracked:
    the bodies reported each step."""

    cover: Callable
    sums: Callable
    advance: Callable
    members: Callable
    capacity: int
    width: int
    tracked: int


class BodyPasses(NamedTuple):
    """``PsmCoupling.passes``: what a coupled step does with its bodies around the collision,
    for replicated and owned bodies alike (the XLA step's ``bind`` and the native kernel's
    chunks, solver/coupling/native.py, put their own collision between the two).

    ``before(extra, block)`` -> (extra, xs, vs, ws, rad, context): the spheres this block
    covers, (s, 3) centre (m), velocity (m/s), angular velocity (rad/s), and radii (s,) cells
    (None: the scene's); owned bodies are migrated and take their neighbours' ghosts first.
    ``after(extra, context, force, torque)`` -> (extra, report): the bodies one fluid step on
    from this block's (s, 3) sums per sphere (lattice units), added over the shards."""

    before: Callable
    after: Callable


@dataclass(frozen=True, eq=False)
class PsmCoupling:
    """Static parameters of the PSM coupling of spheres to the fluid.

    Attributes:
        bodies: the rigid-body set-up (its dt is the fluid's dt / substeps): spheres and clumps
            (each member sphere covers the grid; ``radius`` is per member).
        substeps: rigid-body steps per fluid step.
        dx: m per cell; dt: s per fluid step.
        origin: (3,) m, node i along axis a sits at origin[a] + (i + 0.5) dx.
        fluid_density: kg/m^3, the density lattice density 1 stands for.
        average_force: drive the bodies by the mean force of this and the last fluid step.
        tracked: bodies (the first ones) reported every step.
        weighting: the PSM weight B(eps) (kernels.coupling.WEIGHTINGS).
        viscosity: the fluid's dynamic viscosity, Pa s (for the lubrication correction).
        lubrication_cutoff: m, gaps below it get the lubrication correction; 0: none.
        lubrication_min_gap: m, the smallest gap the correction uses (roughness).
        volume: (n,) m^3, the volume each body displaces (the union of a clump's members);
            None: spheres, 4/3 pi r^3.
        owned: the split of the bodies over the fluid's mesh when each shard owns the bodies
            whose centre its block holds (``coupling.bodies=owned``); None: every shard holds
            every body (replicated).
        dimension: the lattice's: 3, or 2 for disks on a 2D grid. A disk is a sphere of the
            body model held in the x-y plane (``hold_in_plane``: no z velocity, angular
            velocity about z only) standing for a cylinder of length ``depth`` along z: its
            mass, inertia and displaced volume are the cylinder's (set by the case), the
            lattice's force per unit depth is multiplied by ``depth``.
        depth: m, the cylinders' length in a 2D run (1 m: forces and masses per metre of
            depth); unused in 3D.
    """

    bodies: BodySetup
    substeps: int
    dx: float
    dt: float
    origin: tuple[float, ...]
    fluid_density: float
    average_force: bool = True
    tracked: int = 8
    weighting: str = "noble_torczynski"
    viscosity: float = 0.0
    lubrication_cutoff: float = 0.0
    lubrication_min_gap: float = 0.0
    volume: np.ndarray | None = None
    owned: BodyLayout | None = None
    dimension: int = 3
    depth: float = 1.0

    def __post_init__(self) -> None:
        if self.dimension not in (2, 3):
            raise ValueError(f"PsmCoupling.dimension must be 2 or 3, got {self.dimension}")
        if self.dimension == 2 and not self.bodies.spheres_only:
            raise ValueError("disks in a 2D run are single spheres: no clumps")
        if self.dimension == 2 and self.owned is not None:
            raise ValueError("disks in a 2D run are replicated bodies (coupling.bodies=owned: 3D)")

    @property
    def planar(self) -> bool:
        """Disks held in the x-y plane of a 2D lattice."""
        return self.dimension == 2

    @property
    def force_scale(self) -> float:
        """N per lattice force: rho dx^4 / dt^2 in 3D; in 2D the lattice force is per unit
        depth (rho dx^3 / dt^2, N/m), times ``depth``."""
        if self.planar:
            return self.fluid_density * self.dx**3 * self.depth / self.dt**2
        return self.fluid_density * self.dx**4 / self.dt**2

    @property
    def lubrication_depth(self) -> float | None:
        """The cylinders' length for the 2D lubrication law; None: spheres."""
        return self.depth if self.planar else None

    @property
    def radius_cells(self) -> np.ndarray:
        return self.bodies.radius / self.dx

    @property
    def stencil(self) -> int:
        return psm.stencil_size(float(self.radius_cells.max()))

    def body_volume(self) -> np.ndarray:
        """(n,) m^3, the volume each body displaces."""
        if self.volume is not None:
            return np.asarray(self.volume, dtype=float)
        if self.planar:
            return np.pi * self.bodies.radius**2 * self.depth
        if not self.bodies.spheres_only:
            raise ValueError("PsmCoupling.volume is needed for clumps (their members' union)")
        return 4.0 / 3.0 * np.pi * self.bodies.radius**3

    def buoyancy(self) -> np.ndarray:
        """(n, 3) N, -rho_f V g on each body (the fluid carries no hydrostatic pressure)."""
        volume = self.body_volume()
        return -self.fluid_density * volume[:, None] * np.asarray(self.bodies.gravity)[None, :]

    def initial(self, state: BodyState) -> CoupledBodies:
        """The coupled bodies at time 0: at rest in the fluid's eyes (no hydrodynamic force
        yet), the buoyancy already in the force the first half-kick uses."""
        buoyancy = jnp.asarray(self.buoyancy(), state.force.dtype)
        if self.planar:
            state = hold_in_plane(state)
        # two arrays, not one: both are donated to the chunk
        return CoupledBodies(
            state=state.replace(force=state.force + buoyancy),
            hydro_force=jnp.zeros_like(state.force),
            hydro_torque=jnp.zeros_like(state.torque),
            overflow=jnp.zeros((0, records.OVERFLOW_SLOTS), jnp.int32),
        )

    def owned_initial(self, state: BodyState, shards: int) -> CoupledBodies:
        """``initial`` for owned bodies: empty full partner rows (no spring yet) and no
        overflow on any of the ``shards``."""
        start = self.initial(state)
        width, p = self.owned.max_partners, self.bodies.n_planes
        n = self.bodies.n_spheres  # contact rows per sphere (a clump's members each have one)
        dtype = state.force.dtype
        body_state = start.state.replace(
            partners=jnp.full((n, width), -1, jnp.int32),
            history=jnp.zeros((n, width, 3), dtype),
            plane_history=jnp.zeros((n, p, 3), dtype),
        )
        overflow = jnp.zeros((shards, records.OVERFLOW_SLOTS), jnp.int32)
        return start.replace(state=body_state, overflow=overflow)

    def stages(self, setup: FluidSetup, halo: Halo) -> CouplingStages:
        """The parts of a coupled step that do not touch the populations, for one shard of
        ``setup``: the XLA step (``bind``) and the native kernel's (solver/coupling/native.py)
        put them around their own collisions."""
        lat = setup.lattice
        if lat.d != self.dimension:
            raise ValueError(f"a {lat.d}D lattice for a coupling of dimension {self.dimension}")
        if setup.sponge is not None:
            raise ValueError("a sponge layer is not supported with moving bodies")
        dtype = jnp.dtype(setup.dtype)
        tau = setup.tau
        offsets = psm.stencil_offsets(self.stencil, lat.d, self.radius_cells)
        capacity = psm.cover_capacity(self.radius_cells, len(offsets), lat.d)
        offsets = jnp.asarray(offsets)
        radius = self.radius_cells
        d = lat.d
        # the cover wraps across periodic faces, not across an inlet's or outlet's: a body
        # that left through one is gone from the fluid (counted in run.json, outside_domain)
        open_axes = {boundary.axis for boundary in setup.open_boundaries}
        periodic = tuple(a not in open_axes for a in range(d))
        origin = np.asarray(self.origin)[:d]
        velocity_scale = self.dt / self.dx
        force_scale = self.force_scale
        torque_scale = force_scale * self.dx
        buoyancy = self.buoyancy()
        tracked = min(self.tracked, self.bodies.n_bodies)

        def cover(time: Array, xs, vs, ws, rad, block: tuple[int, ...]) -> StencilCover:
            """The spheres xs (s, 3) m, their velocities vs, ws and radii ``rad`` (s,) cells
            (None: the scene's) on the stencils of this block."""
            center = ((xs[:, :d] - origin) / self.dx - 0.5).astype(dtype)
            v = (vs[:, :d] * velocity_scale).astype(dtype)
            # a disk turns about z only: its rate per step (s,); a sphere's vector (s, 3)
            w = ((ws[:, 2] if d == 2 else ws) * self.dt).astype(dtype)
            # per body, then per stencil cell, computed once: fused into the per-cell work
            # (and the gathers) XLA recomputes each for every cell it touches
            if rad is None:
                center, v, w = materialised((center, v, w), time)
                rad = jnp.asarray(radius, dtype)
            else:
                center, v, w, rad = materialised((center, v, w, rad.astype(dtype)), time)
            base = psm.stencil_base(center, rad)
            cells = base[:, None, :] + offsets[None, :, :]
            # (s, m) per component: the sums over a stencil run along the last axis
            rel = [cells[..., a].astype(dtype) - center[:, None, a] for a in range(d)]
            eps = psm.cover_of(rel, rad)
            if d == 2:
                spin = psm.spin_2d(w[:, None], rel)
            else:
                spin = psm.cross([w[:, None, a] for a in range(3)], rel)
            flat = psm.local_flat_index(cells, halo.origin(block), block, setup.shape, periodic)
            rows = jnp.stack([eps] + [eps * (v[:, None, a] + spin[a]) for a in range(d)], -1)
            eps, rel, flat, rows = materialised((eps, rel, flat, rows), time)
            return StencilCover(eps, rel, flat, rows)

        def sums(stencil: StencilCover, rows: tuple[Array, Array], force) -> tuple[Array, Array]:
            """(s, 3) force and torque on each sphere from this block, lattice units, from the
            moments and the summed cover at each stencil entry (``rows``): each body takes its
            cover's share eps / eps_total of a cell's force (psm_blend's cell force, per
            cover)."""
            eps, rel = stencil.eps, stencil.rel
            per_cover = psm.cover_force(*rows, tau, self.weighting, force)
            on_body = [eps * fa.reshape(eps.shape) for fa in per_cover]
            force_sum = jnp.stack([jnp.sum(fa, axis=1) for fa in on_body], -1)
            if d == 2:
                # the bodies are 3D: a disk's force has no z part, its torque only a z part
                zero = jnp.zeros_like(force_sum[:, 0])
                torque_z = jnp.sum(psm.torque_2d(rel, on_body), axis=1)
                force_sum = jnp.stack([force_sum[:, 0], force_sum[:, 1], zero], -1)
                return force_sum, jnp.stack([zero, zero, torque_z], -1)
            torque_sum = jnp.stack([jnp.sum(t, axis=1) for t in psm.cross(rel, on_body)], -1)
            return force_sum, torque_sum

        def advance(extra: CoupledBodies, force_sum, torque_sum, xs) -> tuple:
            """The bodies one fluid step on, driven by the spheres' summed force and torque
            (s, 3) lattice units from every shard: (extra, report)."""
            bodies = extra.state.bodies
            hydro_sum = halo.sum(
                jnp.stack(
                    self._to_bodies(force_sum, torque_sum, xs, bodies.position, 1.0 / self.dx)
                )
            )
            body_dtype = bodies.position.dtype
            force_si = hydro_sum[0].astype(body_dtype) * force_scale
            torque_si = hydro_sum[1].astype(body_dtype) * torque_scale
            if self.average_force:
                drive_force = 0.5 * (force_si + extra.hydro_force)
                drive_torque = 0.5 * (torque_si + extra.hydro_torque)
            else:
                drive_force, drive_torque = force_si, torque_si
            external = (drive_force + jnp.asarray(buoyancy, body_dtype), drive_torque)
            body_params = self.bodies.params(body_dtype)

            lubrication = self._lubrication(body_params, body_dtype)

            def substep(state: BodyState, _) -> tuple[BodyState, None]:
                state = body_step(self.bodies, state, body_params, external, lubrication)
                return (hold_in_plane(state) if self.planar else state), None

            state, _ = lax.scan(substep, extra.state, None, length=self.substeps)
            report = jnp.concatenate(
                [
                    state.bodies.position[:tracked],
                    state.bodies.velocity[:tracked],
                    force_si[:tracked],
                ],
                axis=1,
            )
            return CoupledBodies(state, force_si, torque_si, extra.overflow), report

        return CouplingStages(cover, sums, advance, self._members(), capacity, d + 1, tracked)

    def bind(self, setup: FluidSetup, halo: Halo) -> Callable:
        """collide(f, time, extra, geo) -> (f_post, extra, report) for one shard (see
        ``solver.fluid.step.StepCoupling``); report: (tracked, 9) SI position, velocity and
        hydrodynamic force of the tracked bodies."""
        stages = self.stages(setup, halo)
        lat = setup.lattice
        operator = OPERATORS[setup.collision]
        fluid_collide = make_collide(setup)
        params = CollisionParams.from_setup(setup)
        dtype = params.dtype
        tau = setup.tau
        capacity, width = stages.capacity, stages.width

        def hydro(f: Sequence[Array], time: Array, xs, vs, ws, rad, geo: dict):
            """The PSM collision with the spheres xs (s, 3) m, their velocities vs, ws and
            radii ``rad`` (s,) cells (None: the scene's): (post, patch, force (s, 3) and torque
            (s, 3) on each sphere from this block, lattice units)."""
            block = tuple(f[0].shape)
            stencil = stages.cover(time, xs, vs, ws, rad, block)
            force = body_force_at(setup, time)
            size = int(np.prod(block))
            solid = geo.get("solid_interior")  # the fluid's own walls take no body
            flat, eps, cover = stencil.flat, stencil.eps, stencil.rows
            if eps.shape[0] * capacity > SLOTS_PER_CELL * size:
                post, patch, rows = on_grid(f, time, flat, cover, solid, force)
            else:
                post, patch, rows = on_slots(f, time, flat, eps, cover, solid, force)
            force_sum, torque_sum = stages.sums(stencil, rows, force)
            return post, patch, force_sum, torque_sum

        before, after = self.passes(setup, halo, stages)

        def collide(f: Sequence[Array], time: Array, extra, geo: dict):
            extra, xs, vs, ws, rad, context = before(extra, tuple(f[0].shape))
            post, patch, force_sum, torque_sum = hydro(f, time, xs, vs, ws, rad, geo)
            extra, report = after(extra, context, force_sum, torque_sum)
            return post, patch, extra, report

        def blend(f, both: Array, table: Array, force) -> tuple[Array, ...]:
            """The PSM collision of cells (any shape X) from their populations f (q arrays
            (*X)), moments ``both`` (*X, d + 1) and summed cover ``table`` (*X, d + 1)."""
            rho, u = both[..., 0], [both[..., 1 + a] for a in range(lat.d)]
            eps_total = table[..., 0]
            covered = jnp.where(eps_total > 0, eps_total, 1.0)
            u_cell = [table[..., 1 + a] / covered for a in range(lat.d)]
            weight = psm.psm_weight(eps_total, tau, self.weighting)
            fluid_post = operator(f, rho, u, force, params)
            post, _ = psm.psm_blend(lat, f, fluid_post, rho, u, weight, u_cell, force)
            return tuple(p.astype(dtype) for p in post)

        def on_slots(f, time, flat, eps, cover, solid, force):
            """The blend on the covered cells only, ``capacity`` slots per sphere; every other
            cell takes the fluid's collision: (post, patch, the rows of the moments and the
            summed cover at each stencil entry)."""
            size = int(np.prod(f[0].shape))
            cells, slot = psm.cover_slots(flat, eps, size, capacity, solid)
            table = psm.slot_sums(cover.reshape(-1, width), slot, cells.shape[0])
            post = fluid_collide(f, time)  # every cell, as without bodies
            f_cells = psm.gather_cells(f, cells, lat.w)
            both = moment_table(lat, f_cells, force, dtype)  # (slots, d + 1)
            table, both = materialised((table, both), time)
            patch = (cells, blend(f_cells, both, table, force))
            return post, patch, (psm.gather_rows(both, slot), psm.gather_rows(table, slot))

        def on_grid(f, time, flat, cover, solid, force):
            """The blend over every cell of the block (bodies cover much of it): (post, None,
            the rows of the moments and the summed cover at each stencil entry)."""
            block = f[0].shape
            flat = flat.reshape(-1)
            table = psm.scatter_rows(cover.reshape(-1, width), flat, int(np.prod(block)))
            if solid is not None:
                table = jnp.where(solid.reshape(-1, 1), 0.0, table)
            both = moment_table(lat, f, force, dtype)  # (*block, d + 1)
            post = blend(f, both, table.reshape(*block, width), force)
            # gathered from the tables the step materialises anyway: a derived field's
            # arithmetic would be fused into the gather and read every input at random
            rows = (psm.gather_rows(both.reshape(-1, width), flat), psm.gather_rows(table, flat))
            return post, None, materialised(rows, time)

        return collide

    def passes(self, setup: FluidSetup, halo: Halo, stages: CouplingStages) -> BodyPasses:
        """The bodies' work before and after the collision of a coupled step on one shard
        (``BodyPasses``): replicated bodies as they are, or with ``owned`` the bodies this
        shard owns and its neighbours' ghosts."""
        if self.owned is not None:
            return self._owned_passes(setup, halo, stages.members, stages.tracked)

        def before(extra: CoupledBodies, block: tuple[int, ...]):
            xs, vs, ws = stages.members(extra.state.bodies)
            return extra, xs, vs, ws, None, xs

        def after(extra: CoupledBodies, xs, force_sum, torque_sum):
            return stages.advance(extra, force_sum, torque_sum, xs)

        return BodyPasses(before, after)

    def _owned_passes(
        self, setup: FluidSetup, halo: Halo, members: Callable, tracked: int
    ) -> BodyPasses:
        """``BodyPasses`` with ``extra`` this shard's owned bodies (``in_fluid.OwnedBodies``):
        before the collision the migration and the ghosts (the block covers its owned and
        ghost bodies), after it the ghosts' partial forces back to their owners, then the
        owners' body steps (each exchanging ghosts for the contacts)."""
        layout = self.owned
        force_scale = self.fluid_density * self.dx**4 / self.dt**2
        torque_scale = force_scale * self.dx
        buoyancy = self.buoyancy()
        radius_cells = self.radius_cells
        grid, _ = layout.local_grid()
        dt = self.bodies.dt
        dtype = jnp.dtype(setup.dtype)
        # clumps: every slot stands for its members on the grid and in contacts (clump_slots)
        table = None if self.bodies.spheres_only else MemberTable.of(self.bodies)
        width = 1 if table is None else table.width

        def before(extra, block: tuple[int, ...]):
            coords = in_fluid.shard_coords(halo, block)
            extra, message, slots, jumped = in_fluid.migrate(layout, halo, coords, extra)
            sub = extra.sub
            ghost_gid, ghosts, ghost_needed = in_fluid.exchange_ghosts(
                layout, halo, coords, sub.gid, sub.bodies
            )
            gid = jnp.concatenate([sub.gid, ghost_gid])
            both = _joined(sub.bodies, ghosts)
            owner = None
            if table is None:
                xs, vs, ws = members(both)
            else:
                gid, spheres, owner, ws = clump_slots.member_bodies(table, gid, both)
                xs, vs = spheres.position, spheres.velocity
            ids = jnp.where(gid >= 0, gid, 0)
            rad = jnp.where(gid >= 0, jnp.asarray(radius_cells, dtype)[ids], -1.0)
            context = (coords, message, slots, jumped, ghost_gid, ghosts, ghost_needed)
            return extra, xs, vs, ws, rad, (context, (xs, both.position, owner))

        def after(extra, passed, force_sum, torque_sum):
            context, (xs, position, owner) = passed
            coords, message, slots, jumped, ghost_gid, ghosts, ghost_needed = context
            sub = extra.sub
            rows = sub.gid.shape[0]
            if owner is not None:  # the members' forces onto their slots, lattice units
                force_sum, torque_sum = clump_slots.to_slots(
                    force_sum, torque_sum, xs, position, 1.0 / self.dx
                )
            partial = jnp.concatenate([force_sum, torque_sum], axis=1)
            total, back_needed = in_fluid.return_partials(
                layout, halo, coords, ghost_gid, ghosts.position, partial[rows:], sub.gid,
                partial[:rows],
            )  # fmt: skip
            body_dtype = sub.bodies.position.dtype
            owned = (sub.gid >= 0)[:, None]
            force_si = jnp.where(owned, total[:, :3].astype(body_dtype) * force_scale, 0.0)
            torque_si = jnp.where(owned, total[:, 3:].astype(body_dtype) * torque_scale, 0.0)
            if self.average_force:
                drive_force = 0.5 * (force_si + extra.hydro_force)
                drive_torque = 0.5 * (torque_si + extra.hydro_torque)
            else:
                drive_force, drive_torque = force_si, torque_si
            own_ids = jnp.where(sub.gid >= 0, sub.gid, 0)
            lift = jnp.where(owned, jnp.asarray(buoyancy, body_dtype)[own_ids], 0.0)
            external = (drive_force + lift, drive_torque)
            body_params = self.bodies.params(body_dtype)
            lubrication = self._owned_lubrication(body_params, body_dtype, rows * width)
            origin = cell_list_origin(layout, coords, body_dtype)

            def substep(carry, _):
                sub, needs, kept = carry
                found = []

                def forces_fn(bodies) -> tuple[Array, Array]:
                    g_gid, g_bodies, g_needed = in_fluid.exchange_ghosts(
                        layout, halo, coords, sub.gid, bodies
                    )
                    all_gid = jnp.concatenate([sub.gid, g_gid])
                    all_bodies = _joined(bodies, g_bodies)
                    if table is None:
                        result = local_contacts(
                            self.bodies, grid, origin, all_gid, all_bodies, rows, sub.partners,
                            sub.history, sub.plane_history, body_params, kept,
                        )  # fmt: skip
                        found.append((result, g_needed))
                        force = result.force + external[0]
                        torque = result.torque + external[1]
                        if lubrication is not None:
                            force = force + lubrication(all_gid, all_bodies, result.partners)
                        return force, torque
                    # clumps: contacts and lubrication between the members of other bodies,
                    # summed onto the owned slots (members of slot b at rows b M + k)
                    result = clump_slots.slot_contacts(
                        self.bodies, table, grid, origin, all_gid, all_bodies, rows,
                        sub.partners, sub.history, sub.plane_history, body_params, kept,
                        lubrication,
                    )  # fmt: skip
                    found.append((result, g_needed))
                    return result.force + external[0], result.torque + external[1]

                bodies, force, torque = rigid_body.step(
                    sub.bodies, sub.force, sub.torque, forces_fn, dt
                )
                result, g_needed = found[-1]
                sub = sub.replace(
                    bodies=bodies,
                    force=force,
                    torque=torque,
                    partners=result.partners,
                    history=result.history,
                    plane_history=result.plane_history,
                    contact_count=result.contact_count,
                    time=sub.time + 1,
                )
                needs = jnp.maximum(
                    needs, jnp.stack([g_needed, result.cell_count, result.partner_count])
                )
                return (sub, needs, result.kept), None

            zero = jnp.zeros((), jnp.int32)
            (sub, needs, kept), _ = lax.scan(
                substep, (sub, jnp.zeros((3,), jnp.int32), extra.table), None,
                length=self.substeps,
            )  # fmt: skip
            seen = jnp.stack([
                slots, jnp.maximum(jnp.maximum(ghost_needed, back_needed), needs[0]), message,
                needs[1], needs[2], zero,
            ])  # fmt: skip
            sub = sub.replace(overflow=jnp.maximum(sub.overflow, seen).at[5].add(jumped))
            # the tracked bodies' rows from their owners (every other shard adds zeros)
            mine = (sub.gid >= 0) & (sub.gid < tracked)
            place = jnp.where(mine, sub.gid, tracked)
            values = jnp.concatenate([sub.bodies.position, sub.bodies.velocity, force_si], axis=1)
            report = jnp.zeros((tracked + 1, TRACK_FIELDS), body_dtype).at[place].set(values)
            report = halo.sum(report[:tracked])
            return in_fluid.OwnedBodies(sub, force_si, torque_si, kept), report

        return BodyPasses(before, after)

    def _owned_lubrication(self, params, dtype, rows: int) -> Callable | None:
        """extra(gid, bodies, partners, group=None) -> (rows, 3) N: the lubrication correction
        on the owned slots (the first ``rows`` of gid (C + G,)) from their partner rows (rows,
        K) (global ids, both directions) and the planes; None when switched off. With clumps
        the slots are member spheres (sphere ids) and ``group`` their bodies' slots: members
        of one body have no film between them."""
        if self.lubrication_cutoff <= 0.0:
            return None
        radius_all = jnp.asarray(self.bodies.radius, dtype)
        mu, cutoff, dt = self.viscosity, self.lubrication_cutoff, self.bodies.dt
        planes = self.bodies.n_planes > 0
        n = self.bodies.n_spheres  # the ids of the rows: bodies, or clumps' members

        def extra(gid: Array, bodies, partners: Array, group: Array | None = None) -> Array:
            active = gid >= 0
            radius = radius_all[jnp.where(active, gid, 0)]
            min_gap = jnp.full(radius.shape, self.lubrication_min_gap, dtype)
            inverse = jnp.where(bodies.kinematic, 0.0, bodies.inverse_mass)
            local = jnp.full((n + 1,), -1, jnp.int32)
            local = local.at[jnp.where(active, gid, n)].set(
                jnp.arange(gid.shape[0], dtype=jnp.int32)
            )
            local = local.at[n].set(-1)
            width = partners.shape[1]
            j = local[jnp.where(partners >= 0, partners, n)].reshape(-1)
            i = jnp.repeat(jnp.arange(rows, dtype=jnp.int32), width,
                           total_repeat_length=rows * width)  # fmt: skip
            x, v = bodies.position, bodies.velocity
            valid = j >= 0
            if group is not None:
                valid = valid & (group[i] != group[jnp.where(valid, j, 0)])
            force = psm.lubrication_pairs(
                x, v, radius, i, j, valid, mu, cutoff, min_gap, inverse, dt, one_sided=True
            )[:rows]
            if planes:
                force = force + psm.lubrication_planes(
                    x[:rows], v[:rows], radius[:rows], params.plane_point, params.plane_normal,
                    params.plane_velocity, mu, cutoff, min_gap[:rows], inverse[:rows], dt,
                )  # fmt: skip
            return jnp.where(active[:rows, None], force, 0.0)

        return extra

    def _members(self) -> Callable:
        """members(bodies) -> (x, v, omega): (s, 3) centre (m), velocity (m/s) and angular
        velocity (rad/s) of every sphere; a sphere is its own body, with the same arithmetic."""
        if self.bodies.spheres_only:
            return lambda b: (b.position, b.velocity, angular_velocity(b))
        owner = jnp.asarray(self.bodies.member_body, jnp.int32)
        offset = self.bodies.member_offset

        def members(bodies) -> tuple[Array, Array, Array]:
            omega = angular_velocity(bodies)
            x, v = clump.sphere_kinematics(
                bodies.position, bodies.velocity, bodies.orientation, omega, owner,
                jnp.asarray(offset, bodies.position.dtype),
            )  # fmt: skip
            return x, v, omega[owner]

        return members

    def _to_bodies(
        self, force: Array, torque: Array, xs: Array, position: Array, arm_scale: float = 1.0
    ) -> tuple[Array, Array]:
        """(n, 3) force and torque per body from (s, 3) per sphere (torque about the sphere's
        centre): a clump adds its members' forces and their torques about its centre of mass,
        arm (x_k - X_b) * arm_scale; spheres pass through unchanged."""
        if self.bodies.spheres_only:
            return force, torque
        owner = jnp.asarray(self.bodies.member_body, jnp.int32)
        arm = ((xs - position[owner]) * arm_scale).astype(force.dtype)
        zero = jnp.zeros((self.bodies.n_bodies, 3), force.dtype)
        return zero.at[owner].add(force), zero.at[owner].add(torque + jnp.cross(arm, force))

    def _lubrication(self, params, dtype) -> Callable | None:
        """extra(bodies, contacts) -> (force, torque): the normal lubrication correction of
        sphere pairs (from the contact table, which holds every pair within the cutoff at
        every step: ``BodySetup.pair_margin``) and of the planes; None when switched off."""
        if self.lubrication_cutoff <= 0.0:
            return None
        radius = jnp.asarray(self.bodies.radius, dtype)
        min_gap = jnp.full(radius.shape, self.lubrication_min_gap, dtype)
        mu, cutoff = self.viscosity, self.lubrication_cutoff
        planes = self.bodies.n_planes > 0
        members = self._members()
        clumps = not self.bodies.spheres_only
        owner = jnp.asarray(self.bodies.member_body, jnp.int32)
        dt = self.bodies.dt
        depth = self.lubrication_depth

        def extra(bodies, contacts):
            s, width = contacts.partners.shape
            # 1/m per sphere (its body's; 0 for fixed and kinematic bodies)
            inverse = jnp.where(bodies.kinematic, 0.0, bodies.inverse_mass)
            inverse = inverse if not clumps else inverse[owner]
            i = jnp.repeat(jnp.arange(s, dtype=jnp.int32), width, total_repeat_length=s * width)
            j = contacts.partners.reshape(-1)
            valid = j >= 0
            if clumps:  # no lubrication between members of one clump
                valid = valid & (owner[i] != owner[jnp.where(valid, j, 0)])
            x, v, _ = members(bodies)
            force = psm.lubrication_pairs(
                x, v, radius, i, j, valid, mu, cutoff, min_gap, inverse, dt, depth=depth
            )  # fmt: skip
            if planes:
                force = force + psm.lubrication_planes(
                    x, v, radius, params.plane_point, params.plane_normal,
                    params.plane_velocity, mu, cutoff, min_gap, inverse, dt, depth,
                )  # fmt: skip
            # along the line of centres: no torque about a member's centre
            return self._to_bodies(force, jnp.zeros_like(force), x, bodies.position)

        return extra


def hold_in_plane(state: BodyState) -> BodyState:
    """The disks of a 2D run held in the x-y plane, exactly: no velocity along z (so the drift
    leaves z as it was, bit for bit), angular momentum about z only and orientations that turn
    about z only (quaternions (w, 0, 0, z)), and no z force or x, y torque carried into the
    next half-kick. The disks' forces have none of these parts already (in-plane centres,
    normals and velocities give in-plane contact forces and z torques, and the grid gives
    in-plane forces); holding them makes it exact against round-off and stray input.

    Args:
        state: the bodies' state (SI), positions (n, 3) with the disks' plane at their z."""
    bodies = state.bodies
    bodies = bodies.replace(
        velocity=bodies.velocity.at[:, 2].set(0.0),
        angular_momentum=bodies.angular_momentum.at[:, :2].set(0.0),
        prescribed_angular_velocity=bodies.prescribed_angular_velocity.at[:, :2].set(0.0),
        orientation=bodies.orientation.at[:, 1:3].set(0.0),
    )
    return state.replace(
        bodies=bodies,
        force=state.force.at[:, 2].set(0.0),
        torque=state.torque.at[:, :2].set(0.0),
    )


def _joined(a, b):
    """Two sets of slots (Bodies) as one: a's slots, then b's."""
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)
