"""The rigid-body time step composed from kernels: neighbour search, contact forces, integration.

One step (kernels.rigid_body.step, velocity Verlet with the DLM rotor):
    1. kick by the forces of the previous step (dt/2) and drift (dt);
    2. on the drifted state: the pair table (a Verlet list: pairs within r_i + r_j + skin,
       rebuilt from the cell list only when some sphere has moved more than
       ``BodySetup.rebuild_distance`` since the last rebuild, decided on the device), the
       tangential spring of every pair that persists carried into a rebuilt table, and the
       sphere-sphere and sphere-plane contacts plus gravity;
    3. kick by the new forces (dt/2).
A chunk of n steps is one ``lax.scan``; the state between chunks holds the forces and torques of
the last step, the neighbour table and the tangential histories that belong to it, and sticky
overflow diagnostics that the host reads between chunks (``overflow_message``).

Clumps: n rigid bodies carry s >= n contact spheres (``BodySetup.member_body``, offsets in the
body's principal frame). Each force evaluation places the spheres from their body's pose
(x_b + R(q_b) d, v_b + w_b x R(q_b) d, ``kernels.clump.sphere_kinematics``), searches neighbours
and evaluates contacts over spheres (pairs of spheres of one body are masked out), and sums the
sphere forces onto their body with the torque about the body's centre,
    tau_b = sum_k (c_k - x_b) x f_k + rolling torques,   c_k the contact point,
which equals sum_k (r_k - x_b) x f_k plus the torque of f_k about the sphere centre r_k. Pair
tables and tangential histories are per sphere; the effective mass of a pair is that of the two
bodies, m* = 1/(1/m_a + 1/m_b). A scene of plain spheres (each sphere its own body, zero offset)
takes the original spheres-only path, operation for operation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels import clump, rigid_body
from kernels import contact_models as cm
from kernels.contact import accumulate, sphere_plane, sphere_sphere
from kernels.materialise import materialised
from kernels.neighbor_search import CellGrid, bin_bodies, neighbor_pairs
from kernels.rigid_body import Bodies
from solver import xla_options

CONTACT_MODELS = ("hertz", "linear")
NEIGHBOR_LISTS = ("auto", "cells", "all")

RAYLEIGH_FRACTION = 0.2
"""Hertz time step = 0.2 T_R of the smallest body: the low end of the 0.2-0.3 T_R of common practice
(Li, Xu & Thornton 2005), chosen so that stiff and dense packings keep a margin."""


def _per_item(name: str, values, count: int) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (count,):
        raise ValueError(f"BodySetup.{name} must have shape ({count},), got {arr.shape}")
    if not np.all(np.isfinite(arr) | (arr == np.inf)):
        raise ValueError(f"BodySetup.{name} must be finite or +inf, got {arr}")
    return arr


@dataclass(frozen=True, eq=False)
class BodySetup:
    """Everything static about a scene of n rigid bodies made of s >= n contact spheres and p
    planes, SI units (host-side NumPy).

    Hashable by identity (``eq=False``), so it can be closed over or passed as a static argument.
    A plain sphere is a body with one sphere at offset 0; that is the default (``member_body`` and
    ``member_offset`` None), so a spheres-only scene lists its radii and materials per body.

    Attributes:
        radius: (s,) m, per contact sphere.
        young, poisson, restitution, friction, rolling_friction: (s,) per sphere; Pa, -, -, -, -.
        plane_point: (p, 3) m, a point of each plane; plane_normal: (p, 3) unit, towards the side
            the spheres are on; plane_velocity: (p, 3) m/s (planes translate, they do not turn).
        plane_young, plane_poisson, plane_restitution, plane_friction, plane_rolling_friction:
            (p,) per plane; ``plane_young = inf`` makes a rigid wall.
        contact_model: "hertz" (Hertz-Mindlin) or "linear" (spring-dashpot).
        stiffness: (s,) N/m per sphere, linear model only; a pair gets the series spring
            k = 1/(1/k_i + 1/k_j). plane_stiffness: (p,) N/m, inf for a rigid plane.
        gravity: (3,) m/s^2.
        dt: time step, s.
        grid: the cell list over the spheres; its cell size must be >= 2 max(radius) + skin.
        skin: extra search distance, m: the pair table holds pairs within r_i + r_j + skin and
            stays until a sphere has moved (skin - pair_margin) / 2 since it was built (for
            clumps the sphere's motion includes the rotation). 0: rebuilt every step.
        pair_margin: m, the gap beyond contact up to which pairs must be in the table at every
            step (a lubrication cutoff); <= skin.
        member_body: (s,) int, the body of each sphere; every body 0..n-1 owns at least one.
            None: sphere k is body k.
        member_offset: (s, 3) m, each sphere's centre in its body's principal frame, relative to
            the centre of mass. None: zeros.
        neighbor_list: "cells" (the Verlet pair table from the cell list), "all" (every pair
            of spheres, built once and never rebuilt; every sphere-plane pair), or "auto":
            "all" while s (s - 1) / 2 <= s K, i.e. s <= 2 K + 1 (K = grid.max_neighbors), where
            evaluating every pair costs no more than the table's slots, with no rebuilds (an
            ensemble's small scenes, whose rebuild condition under vmap is computed at every
            step). LAMMPS's ``neighbor nsq`` for small systems is the same idea.
    """

    radius: np.ndarray
    young: np.ndarray
    poisson: np.ndarray
    restitution: np.ndarray
    friction: np.ndarray
    rolling_friction: np.ndarray
    grid: CellGrid
    dt: float
    skin: float = 0.0
    pair_margin: float = 0.0
    gravity: tuple[float, float, float] = (0.0, 0.0, -9.81)
    contact_model: str = "hertz"
    stiffness: np.ndarray | None = None
    plane_point: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    plane_normal: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    plane_velocity: np.ndarray | None = None
    plane_young: np.ndarray | None = None
    plane_poisson: np.ndarray | None = None
    plane_restitution: np.ndarray | None = None
    plane_friction: np.ndarray | None = None
    plane_rolling_friction: np.ndarray | None = None
    plane_stiffness: np.ndarray | None = None
    member_body: np.ndarray | None = None
    member_offset: np.ndarray | None = None
    neighbor_list: str = "auto"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        radius = np.asarray(self.radius, dtype=np.float64)
        if radius.ndim != 1 or radius.size == 0 or not np.all(radius > 0):
            raise ValueError(f"BodySetup.radius must be (s,) with s >= 1 and > 0, got {radius}")
        n = radius.size
        set_(self, "radius", radius)
        owner = np.arange(n) if self.member_body is None else np.asarray(self.member_body)
        if owner.shape != (n,) or owner.dtype.kind not in "iu" or owner.min() < 0:
            raise ValueError(f"BodySetup.member_body must be ({n},) non-negative integers, got "
                             f"{owner}")  # fmt: skip
        owned = np.bincount(owner)
        if not np.all(owned > 0):
            raise ValueError(f"BodySetup.member_body: body {int(np.argmin(owned))} has no sphere "
                             f"(bodies 0..{owned.size - 1} each need one)")  # fmt: skip
        set_(self, "member_body", owner.astype(np.int64))
        offset = np.zeros((n, 3)) if self.member_offset is None else self.member_offset
        offset = np.asarray(offset, dtype=np.float64)
        if offset.shape != (n, 3) or not np.all(np.isfinite(offset)):
            raise ValueError(f"BodySetup.member_offset must be ({n}, 3) and finite, got shape "
                             f"{offset.shape}")  # fmt: skip
        set_(self, "member_offset", offset)
        for name in ("young", "poisson", "restitution", "friction", "rolling_friction"):
            set_(self, name, _per_item(name, getattr(self, name), n))
        if self.neighbor_list not in NEIGHBOR_LISTS:
            raise ValueError(f"BodySetup.neighbor_list must be one of {NEIGHBOR_LISTS}, got "
                             f"{self.neighbor_list!r}")  # fmt: skip
        if self.contact_model not in CONTACT_MODELS:
            raise ValueError(f"contact_model must be one of {CONTACT_MODELS}, got "
                             f"{self.contact_model!r}")  # fmt: skip
        if self.contact_model == "linear":
            if self.stiffness is None:
                raise ValueError("the linear contact model needs BodySetup.stiffness (n,) N/m")
            set_(self, "stiffness", _per_item("stiffness", self.stiffness, n))
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"BodySetup.dt must be > 0 and finite, got {self.dt}")
        if not (math.isfinite(self.skin) and self.skin >= 0):
            raise ValueError(f"BodySetup.skin must be >= 0, got {self.skin}")
        if not (math.isfinite(self.pair_margin) and 0 <= self.pair_margin <= self.skin):
            raise ValueError(f"BodySetup.pair_margin must be in [0, skin = {self.skin}], got "
                             f"{self.pair_margin}")  # fmt: skip
        gravity = tuple(float(g) for g in self.gravity)
        if len(gravity) != 3:
            raise ValueError(f"BodySetup.gravity must have 3 components, got {self.gravity}")
        set_(self, "gravity", gravity)
        self.grid.require_cell_size(float(radius.max()), self.skin)

        point = np.asarray(self.plane_point, dtype=np.float64).reshape(-1, 3)
        normal = np.asarray(self.plane_normal, dtype=np.float64).reshape(-1, 3)
        p = point.shape[0]
        if normal.shape != (p, 3):
            raise ValueError(f"plane_normal must be ({p}, 3), got {normal.shape}")
        lengths = np.linalg.norm(normal, axis=1)
        if p and not np.allclose(lengths, 1.0, rtol=0, atol=1e-12):
            raise ValueError(f"plane normals must be unit vectors, lengths {lengths}")
        set_(self, "plane_point", point)
        set_(self, "plane_normal", normal / np.where(lengths > 0, lengths, 1.0)[:, None])
        velocity = np.zeros((p, 3)) if self.plane_velocity is None else self.plane_velocity
        velocity = np.asarray(velocity, dtype=np.float64)
        if velocity.shape != (p, 3):
            raise ValueError(f"plane_velocity must be ({p}, 3), got {velocity.shape}")
        set_(self, "plane_velocity", velocity)
        defaults = {
            "plane_young": np.inf,
            "plane_poisson": 0.0,
            "plane_restitution": 1.0,
            "plane_friction": np.inf,
            "plane_rolling_friction": np.inf,
            "plane_stiffness": np.inf,
        }  # the mixing takes the minimum (restitution, friction) or the series spring
        for name, default in defaults.items():
            value = getattr(self, name)
            set_(self, name, _per_item(name, np.full(p, default) if value is None else value, p))

    @property
    def rebuild_distance(self) -> float:
        """m: the pair table is rebuilt once a sphere has moved farther than this since the
        last rebuild; two spheres then have closed their gap by at most skin - pair_margin, so
        every pair within contact plus pair_margin is still in the table."""
        return 0.5 * (self.skin - self.pair_margin)

    @property
    def all_pairs(self) -> bool:
        """True when every pair of spheres is in the table for good (``neighbor_list``)."""
        if self.neighbor_list != "auto":
            return self.neighbor_list == "all"
        s = self.n_spheres
        return s * (s - 1) // 2 <= s * self.grid.max_neighbors

    @property
    def table_width(self) -> int:
        """K, partners per row of the pair table: s - 1 for all pairs, else the grid's."""
        return max(self.n_spheres - 1, 1) if self.all_pairs else self.grid.max_neighbors

    @property
    def n_bodies(self) -> int:
        """Rigid bodies n (a clump counts once)."""
        return int(self.member_body.max()) + 1

    @property
    def n_spheres(self) -> int:
        """Contact spheres s (clump members included)."""
        return int(self.radius.size)

    @property
    def spheres_only(self) -> bool:
        """True when every sphere is its own body at offset 0 (the spheres-only fast path)."""
        return self.n_spheres == self.n_bodies and bool(
            np.array_equal(self.member_body, np.arange(self.n_spheres))
            and not np.any(self.member_offset)
        )

    @property
    def bounding_radius(self) -> np.ndarray:
        """(n,) m, radius of the smallest sphere about each centre of mass that holds the body's
        spheres: max_k |d_k| + r_k (the sphere radius for a plain sphere); what output shows."""
        reach = np.linalg.norm(self.member_offset, axis=1) + self.radius
        out = np.zeros(self.n_bodies)
        np.maximum.at(out, self.member_body, reach)
        return out

    @property
    def n_planes(self) -> int:
        return int(self.plane_point.shape[0])

    def params(self, dtype=jnp.float64) -> ContactParams:
        """The setup's material values, planes and gravity as arrays of ``dtype``."""

        def const(values) -> Array:
            return jnp.asarray(values, dtype=dtype)

        stiffness = self.stiffness if self.stiffness is not None else np.zeros(self.n_spheres)
        return ContactParams(
            young=const(self.young),
            poisson=const(self.poisson),
            restitution=const(self.restitution),
            friction=const(self.friction),
            rolling_friction=const(self.rolling_friction),
            stiffness=const(stiffness),
            plane_point=const(self.plane_point),
            plane_normal=const(self.plane_normal),
            plane_velocity=const(self.plane_velocity),
            plane_young=const(self.plane_young),
            plane_poisson=const(self.plane_poisson),
            plane_restitution=const(self.plane_restitution),
            plane_friction=const(self.plane_friction),
            plane_rolling_friction=const(self.plane_rolling_friction),
            plane_stiffness=const(self.plane_stiffness),
            gravity=const(self.gravity),
        )


MIN_BUCKET = 2048
"""Smallest evaluated prefix of a compacted pair list (``bucket_capacities``): below it the
saving no longer pays for another compiled copy of the contact law."""
MAX_BUCKETS = 6
"""At most this many prefix sizes per list (the full list, 1/2, 1/4, ... of it)."""


class ActiveSlots(NamedTuple):
    """The pairs a step evaluates, compacted when the pair table is built.

    The pair table (s, K) is sized for the worst row and the sphere-plane table (s, p) holds
    every combination, but a packing fills a third of the first and a box's walls touch a few
    per cent of the second. Both lists below are ascending (the order of the tables, so forces
    are summed in the same order as over the full tables) and padded at the end.
    """

    pairs: Array  # (s K,) int32 flat entries i K + k of the table's real pairs; s K pads
    pair_count: Array  # int32 scalar, entries in use
    planes: Array  # (s p,) int32 flat entries b p + k of the sphere-plane pairs within reach
    plane_count: Array  # int32 scalar


def bucket_capacities(total: int, buckets: bool = True) -> tuple[int, ...]:
    """Static prefix sizes (ascending, the last ``total``) over which a compacted list of
    ``total`` entries is evaluated: halving down to ``MIN_BUCKET``, at most ``MAX_BUCKETS``;
    ``buckets`` False (a vmapped ensemble, where a switch would run every branch): total only."""
    sizes = [total]
    while buckets and len(sizes) < MAX_BUCKETS and sizes[-1] // 2 >= MIN_BUCKET:
        sizes.append(-(-sizes[-1] // 2))
    return tuple(reversed(sizes))


def over_prefix(count: Array, sizes: tuple[int, ...], evaluate: Callable):
    """``evaluate(size)`` for the smallest static size >= ``count`` (a ``lax.switch`` on the
    device; one branch per size, each compiled for its own length)."""
    if len(sizes) == 1:
        return evaluate(sizes[0])
    index = sum((count > size).astype(jnp.int32) for size in sizes[:-1])
    return lax.switch(index, [functools.partial(evaluate, size) for size in sizes])


def compacted(mask: Array) -> tuple[Array, Array]:
    """Flat indices (mask.size,) int32 of the True entries of ``mask``, ascending, padded with
    mask.size, and their count."""
    total = mask.size
    (index,) = jnp.nonzero(mask.reshape(-1), size=total, fill_value=total)
    return index.astype(jnp.int32), jnp.sum(mask, dtype=jnp.int32)


class Overflow(NamedTuple):
    """Neighbour-search buffer diagnostics (scalars): the fullest cell and the longest row."""

    overflowed: Array  # bool: some cell or row exceeded its capacity
    worst_cell: Array  # int32 flat cell index
    worst_cell_count: Array  # int32 spheres in it (capacity needed)
    worst_body: Array  # int32 sphere with most partners j > i
    worst_body_count: Array  # int32 its partners (max_neighbors needed)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ContactParams:
    """The material values, planes and gravity of a scene as traced arrays (SI units).

    ``BodySetup.params()`` builds them from the setup; every step function takes them as an
    optional argument, so an ensemble can vmap over members that differ in these values while
    sharing one compiled program (radius, grid, dt and the contact model stay static).

    Attributes:
        young, poisson, restitution, friction, rolling_friction, stiffness: (s,) per sphere
            (stiffness N/m, linear model only; zeros otherwise).
        plane_point, plane_normal, plane_velocity: (p, 3).
        plane_young, plane_poisson, plane_restitution, plane_friction, plane_rolling_friction,
            plane_stiffness: (p,).
        gravity: (3,) m/s^2.
    """

    young: Array
    poisson: Array
    restitution: Array
    friction: Array
    rolling_friction: Array
    stiffness: Array
    plane_point: Array
    plane_normal: Array
    plane_velocity: Array
    plane_young: Array
    plane_poisson: Array
    plane_restitution: Array
    plane_friction: Array
    plane_rolling_friction: Array
    plane_stiffness: Array
    gravity: Array

    def replace(self, **changes) -> ContactParams:
        return dataclasses.replace(self, **changes)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class BodyState:
    """Dynamic state of a scene (a pytree of arrays).

    Attributes:
        bodies: the n rigid bodies at ``time``.
        force, torque: (n, 3) N and N m acting at ``time`` (what kernels.rigid_body.step expects).
        partners: (s, K) int32, the sphere pair table the histories belong to (rows ascending,
            -1 last).
        history: (s, K, 3) m, tangential springs of the sphere-sphere pairs (i, partners[i, k]).
        plane_history: (s, p, 3) m, tangential springs of the sphere-plane pairs.
        contact_count: (n,) int32 active contacts of each body at ``time`` (over its spheres).
        time: int32 scalar, steps done.
        overflow: sticky Overflow over all steps so far (the worst counts seen).
        elastic_energy: float scalar, J stored in the normal contact springs at ``time``
            (`contact_forces`); zero by default for states built by hand.
        reference: (s, 3) m, the sphere centres when the pair table was built (the Verlet
            list's reference); None: rebuild at the next step.
        rebuilds: int32 scalar, pair-table rebuilds so far.
        slots: the entries of the pair tables that a step evaluates (``ActiveSlots``), built
            with the table; None: rebuild at the next step.
    """

    bodies: Bodies
    force: Array
    torque: Array
    partners: Array
    history: Array
    plane_history: Array
    contact_count: Array
    time: Array
    overflow: Overflow
    elastic_energy: Array = field(default_factory=lambda: jnp.zeros(()))
    reference: Array | None = None
    rebuilds: Array = field(default_factory=lambda: jnp.zeros((), jnp.int32))
    slots: ActiveSlots | None = None

    def replace(self, **changes) -> BodyState:
        return dataclasses.replace(self, **changes)


class ContactResult(NamedTuple):
    """What `contact_forces` returns."""

    force: Array  # (n, 3) N, contacts plus gravity, per body
    torque: Array  # (n, 3) N m about each centre of mass
    partners: Array  # (s, K) int32, the new sphere pair table
    history: Array  # (s, K, 3) m, springs of the new table
    plane_history: Array  # (s, p, 3) m
    contact_count: Array  # (n,) int32, per body
    overflow: Overflow
    elastic_energy: Array  # J in the normal springs of all contacts
    reference: Array  # (s, 3) m, sphere centres when the table was built
    rebuilt: Array  # bool: the table was rebuilt at this evaluation
    slots: ActiveSlots  # the entries evaluated, as built with the table


class BodyDiagnostics(NamedTuple):
    """Per-step totals over the dynamic bodies (fixed and kinematic ones excluded)."""

    kinetic_energy: Array  # J
    potential_energy: Array  # J, -sum m g . x
    momentum: Array  # (3,) kg m/s
    angular_momentum: Array  # (3,) kg m^2/s about the origin
    contacts: Array  # int32, sum of contact_count (a sphere-sphere pair counts twice)
    elastic_energy: Array | float = 0.0  # J in the normal contact springs (BodyState's)
    # False: a step between samples (make_body_chunk's ``every``); its totals are zeros
    sampled: Array | bool = True


def carry_history(old_partners: Array, old_history: Array, new_partners: Array) -> Array:
    """Histories (n, K, 3) of the new table: the old spring where (i, j) was already a pair, else 0.

    Row i of both tables lists partners of body i; an entry of the new row is matched against the
    whole old row by comparing (K, K) per body, so shifted slots are found too.
    """
    same = (new_partners[:, :, None] == old_partners[:, None, :]) & (new_partners >= 0)[:, :, None]
    return jnp.sum(jnp.where(same[..., None], old_history[:, None, :, :], 0.0), axis=2)


def _pair_laws(
    setup: BodySetup,
    geometry,
    E_star: Array,
    G_star: Array,
    R_star: Array,
    m_star: Array,
    k_linear: Array | None,
    beta: Array,
    friction: Array,
    rolling: Array | None,
    history: Array,
) -> tuple[Array, Array, Array, Array]:
    """Force on i (P, 3), rolling torque on i (P, 3), new history (P, 3) and the elastic energy
    (P,) J of P contacts; ``beta`` (P,) is the pair's damping parameter, the smaller of its
    partners' `cm.restitution_beta` (the beta of the mixed restitution, `cm.hertz_dashpot`).

    The energy is what the normal spring holds: (8/15) E* sqrt(R*) delta^(5/2) (Hertz, the
    integral of (4/3) E* sqrt(R*) delta^(3/2)) or k delta^2 / 2 (linear); zero for inactive pairs.
    The tangential spring is left out: while slipping, its xi is set from the limited force less
    the damper (kernels.contact_models.tangential_force), which is no stored energy, and k_t
    follows the overlap (measured: counting k_t |xi|^2 / 2 made kinetic + potential + elastic
    rise by 5e-3 of the released energy in one step of a box fill, against 1e-5 without it).
    """
    active = geometry.active
    if setup.contact_model == "hertz":
        f_n = cm.normal_force_hertz_beta(
            geometry.overlap, geometry.normal_speed, E_star, R_star, m_star, beta, active
        )
        k_t = cm.mindlin_tangential_stiffness(G_star, R_star, geometry.overlap)
        eta_t = cm.hertz_dashpot(beta, m_star, k_t)
        delta = geometry.overlap
        normal_energy = 8.0 / 15.0 * E_star * jnp.sqrt(R_star) * (delta * delta * jnp.sqrt(delta))
    else:
        eta_n = cm.linear_dashpot(beta, m_star, k_linear)
        f_n = cm.normal_force_linear(
            geometry.overlap, geometry.normal_speed, k_linear, eta_n, active
        )
        k_t = cm.linear_tangential_stiffness(k_linear)
        eta_t = cm.linear_dashpot(beta, m_star, k_t)
        normal_energy = 0.5 * k_linear * geometry.overlap**2
    f_t, history = cm.tangential_force(
        history, geometry.normal, geometry.tangential_velocity, f_n, k_t, eta_t, friction,
        setup.dt, active,
    )  # fmt: skip
    force = f_n[:, None] * geometry.normal + f_t
    if rolling is None:
        torque = jnp.zeros_like(force)
    else:
        torque = cm.rolling_resistance_torque(
            geometry.relative_angular_velocity, geometry.normal, rolling, R_star, f_n, active
        )
    # the select drops the k = inf of a rigid linear plane times a zero overlap (inf * 0)
    return force, torque, history, jnp.where(active, normal_energy, 0.0)


def _mass_inverse(bodies: Bodies) -> Array:
    """1/m per body, 0 for fixed and kinematic bodies (infinitely heavy for a contact)."""
    return jnp.where(bodies.kinematic, 0.0, bodies.inverse_mass)


def _no_overflow() -> Overflow:
    """The record of a table that was not built (or cannot overflow)."""
    zero = jnp.zeros((), jnp.int32)
    return Overflow(jnp.zeros((), bool), zero, zero, zero, zero)


def _all_pairs(setup: BodySetup) -> tuple[int, np.ndarray]:
    """The all-pairs table (s, s - 1) int32 (row i: i + 1, ..., s - 1, then -1) and the number
    of its pairs that interact (spheres of different bodies); host-side, static."""
    s, width = setup.n_spheres, setup.table_width
    j = np.arange(width)[None, :] + np.arange(s)[:, None] + 1
    table = np.where(j < s, j, -1).astype(np.int32)
    return int(np.sum(_real_pairs(setup, table))), table


def _real_pairs(setup: BodySetup, table: np.ndarray) -> np.ndarray:
    """(s, K) bool: entries of a host-side table that are pairs of spheres of different bodies."""
    owner = setup.member_body
    row = np.arange(table.shape[0])[:, None]
    return (table >= 0) & (owner[row] != owner[np.where(table >= 0, table, 0)])


def contact_forces(
    setup: BodySetup,
    bodies: Bodies,
    partners: Array,
    history: Array,
    plane_history: Array,
    params: ContactParams | None = None,
    reference: Array | None = None,
    slots: ActiveSlots | None = None,
    buckets: bool = True,
) -> ContactResult:
    """Contact forces and gravity on the bodies, over the sphere pair table (a Verlet list).

    Args:
        bodies: the state at which forces act (n bodies).
        partners: (s, K) int32 previous sphere pair table; history: (s, K, 3) m its tangential
        springs; plane_history: (s, p, 3) m.
        params: material values, planes and gravity; None: ``setup.params()``. The planes must
            not change while a table is kept (pass reference None after changing them).
        reference: (s, 3) m, the sphere centres the table was built at; the table is kept
            while no sphere has moved more than ``setup.rebuild_distance`` from them, else
            rebuilt from the cell list (``lax.cond``, on the device). None: rebuilt.
        slots: the entries evaluated, built with the table (``ActiveSlots``); None: rebuilt.
        buckets: evaluate the compacted lists over the smallest of ``bucket_capacities``
            prefixes that holds them (a ``lax.switch``); False under ``vmap``, where a switch
            evaluates every branch.

    Returns:
        ContactResult, forces and torques per body. A kept table gives the same contacts and
        forces as a rebuilt one, bit for bit while both lists fall in the same prefix size: its
        extra pairs are not touching and add exact zeros, and its touching pairs sit in the
        same order (rows ascending); across sizes to round-off (each size is compiled as its
        own program, whose multiply-adds XLA may contract differently). In a rebuilt
        table pairs that persist keep their spring (`carry_history`), new pairs start at zero;
        two spheres of one body never interact. Only the table's real pairs and the
        sphere-plane pairs within r + skin of the plane at the build are evaluated (in table
        order, so the sums are those over the full tables): a sphere that moved at most
        ``rebuild_distance`` <= skin since cannot touch any other plane; springs of the planes
        out of reach are zero, as they were the step the sphere left the plane.
    """
    grid = setup.grid
    n, s, p = setup.n_bodies, setup.n_spheres, setup.n_planes
    width = setup.table_width
    dtype = bodies.position.dtype

    def const(values):
        return jnp.asarray(values, dtype=dtype)

    if params is None:
        params = setup.params(dtype)
    radius = const(setup.radius)
    young, poisson = params.young, params.poisson
    friction = params.friction
    # per sphere and plane, not per contact: beta(min(e_i, e_j)) = min(beta_i, beta_j)
    beta, plane_beta = cm.restitution_beta(params.restitution), None
    if p:
        plane_beta = cm.restitution_beta(params.plane_restitution)
    # static: an ensemble that varies rolling friction builds its setup with a nonzero value
    use_rolling = bool(np.any(setup.rolling_friction > 0))
    rolling = params.rolling_friction
    inverse_mass = _mass_inverse(bodies)
    omega = rigid_body.angular_velocity(bodies)
    x, v = bodies.position, bodies.velocity
    if setup.spheres_only:
        owner = None  # sphere k is body k: no gathers, the original arithmetic exactly
        xs, vs, ws, inverse_mass_s = x, v, omega, inverse_mass
    else:
        owner = jnp.asarray(setup.member_body, jnp.int32)
        xs, vs = clump.sphere_kinematics(
            x, v, bodies.orientation, omega, owner, const(setup.member_offset)
        )
        ws, inverse_mass_s = omega[owner], inverse_mass[owner]
    everyone = jnp.ones((s,), bool)

    def rebuild(_) -> tuple[Array, Array, Array, Overflow, ActiveSlots]:
        cells = bin_bodies(grid, xs, everyone)
        table = neighbor_pairs(grid, cells, xs, radius, everyone, setup.skin)
        overflow = Overflow(
            overflowed=cells.overflowed | table.overflowed,
            worst_cell=cells.worst_cell,
            worst_cell_count=cells.worst_count,
            worst_body=table.worst_body,
            worst_body_count=table.worst_count,
        )
        real = table.partners >= 0
        if owner is not None:  # two spheres of one body never interact
            row = jnp.arange(s, dtype=jnp.int32)[:, None]
            real = real & (owner[row] != owner[jnp.where(real, table.partners, 0)])
        pair_slots, pair_count = compacted(real)
        reach = jnp.zeros((s, p), bool)
        if p:
            offset = xs[:, None, :] - params.plane_point[None]
            gap = jnp.sum(offset * params.plane_normal[None], axis=-1) - radius[:, None]
            reach = gap <= setup.skin
        plane_slots, plane_count = compacted(reach)
        return (
            table.partners,
            carry_history(partners, history, table.partners),
            jnp.where(reach[..., None], plane_history, 0.0),
            overflow,
            ActiveSlots(pair_slots, pair_count, plane_slots, plane_count),
        )

    def keep(_) -> tuple[Array, Array, Array, Overflow, ActiveSlots]:
        return partners, history, plane_history, _no_overflow(), slots

    pair_sizes = bucket_capacities(s * width, buckets)
    plane_sizes = bucket_capacities(s * p, buckets)
    if setup.all_pairs:
        real_pairs, table = _all_pairs(setup)
        pair_sizes = (max(real_pairs, 1),)  # static: the count never changes
        plane_sizes = (max(s * p, 1),)
    if setup.all_pairs and (reference is None or slots is None):
        rebuilt, overflow = jnp.ones((), bool), _no_overflow()
        new_partners = jnp.asarray(table)
        history = carry_history(partners, history, new_partners)
        partners = new_partners
        pair_slots, pair_count = compacted(jnp.asarray(_real_pairs(setup, table)))
        plane_slots = jnp.arange(s * p, dtype=jnp.int32)
        slots = ActiveSlots(pair_slots, pair_count, plane_slots, jnp.asarray(s * p, jnp.int32))
        reference = jnp.copy(xs)
    elif setup.all_pairs:  # the table holds every pair for good: nothing to decide
        rebuilt, overflow = jnp.zeros((), bool), _no_overflow()
    elif reference is None or slots is None:
        rebuilt = jnp.ones((), bool)
        partners, history, plane_history, overflow, slots = rebuild(None)
        reference = jnp.copy(xs)  # its own buffer: the state is donated leaf by leaf
    else:
        moved = jnp.max(jnp.sum((xs - reference) ** 2, axis=1))
        rebuilt = moved > setup.rebuild_distance**2
        partners, history, plane_history, overflow, slots = lax.cond(rebuilt, rebuild, keep, None)
        reference = jnp.where(rebuilt, xs, reference)

    pair_total = s * width
    partner_flat, history_flat = partners.reshape(-1), history.reshape(-1, 3)

    def pair_forces(size: int) -> tuple[Array, Array, Array, Array, Array]:
        entry = slots.pairs[:size]
        valid = entry < pair_total
        flat = jnp.where(valid, entry, 0)
        i = flat // width
        j = jnp.where(valid, partner_flat[flat], -1)
        js = jnp.where(valid, j, 0)
        geometry = sphere_sphere(
            xs[i], radius[i], vs[i], ws[i], xs[js], radius[js], vs[js], ws[js], valid
        )
        inverse_sum = inverse_mass_s[i] + inverse_mass_s[js]
        m_star = 1.0 / jnp.where(inverse_sum > 0, inverse_sum, 1.0)
        k_linear = None
        if setup.contact_model == "linear":
            stiffness = params.stiffness
            k_linear = 1.0 / (1.0 / stiffness[i] + 1.0 / stiffness[js])
        force_ij, roll_ij, spring, energy_ij = _pair_laws(
            setup,
            geometry,
            cm.effective_modulus(young[i], poisson[i], young[js], poisson[js]),
            cm.effective_shear_modulus(young[i], poisson[i], young[js], poisson[js]),
            cm.effective_radius(radius[i], radius[js]),
            m_star,
            k_linear,
            cm.mixed_coefficient(beta[i], beta[js]),
            cm.mixed_coefficient(friction[i], friction[js]),
            cm.mixed_coefficient(rolling[i], rolling[js]) if use_rolling else None,
            history_flat[flat],
        )
        # written once: each output of the pair pass (the rows of the scatter below, the
        # springs) would otherwise recompute the contact law (kernels.materialise)
        force_ij, roll_ij, spring, contact = materialised(
            (force_ij, roll_ij, spring, geometry.contact_point), slots.pair_count
        )
        # onto the bodies: accumulate's torque (c - x_b) x F about the body's centre of mass
        body_i = i if owner is None else owner[i]
        body_j = j if owner is None else jnp.where(valid, owner[js], -1)
        force, torque = accumulate(
            n, body_i, body_j, force_ij, contact, x, roll_ij, -roll_ij, valid
        )
        touching = geometry.active.astype(jnp.int32)
        count = jnp.zeros((n,), jnp.int32).at[body_i].add(touching)
        count = count.at[jnp.where(valid, body_j, 0)].add(touching)
        springs = history_flat.at[jnp.where(valid, entry, pair_total)].set(spring, mode="drop")
        return force, torque, springs, count, jnp.sum(energy_ij)

    force, torque, new_history, count, elastic = over_prefix(
        slots.pair_count, pair_sizes, pair_forces
    )

    new_plane_history = plane_history
    if p:
        plane_total = s * p
        plane_flat = plane_history.reshape(-1, 3)

        def plane_forces(size: int) -> tuple[Array, Array, Array, Array, Array]:
            entry = slots.planes[:size]
            valid = entry < plane_total
            flat = jnp.where(valid, entry, 0)
            b, k = flat // p, flat % p  # the sphere and the plane of each pair
            plane_geometry = sphere_plane(
                xs[b], radius[b], vs[b], ws[b], params.plane_point[k],
                params.plane_normal[k], params.plane_velocity[k], valid,
            )  # fmt: skip
            plane_young, plane_poisson = params.plane_young, params.plane_poisson
            k_plane = None
            if setup.contact_model == "linear":
                k_plane = 1.0 / (1.0 / params.stiffness[b] + 1.0 / params.plane_stiffness[k])
            inv = inverse_mass_s[b]
            rolling_plane = params.plane_rolling_friction
            force_bp, roll_bp, spring, energy_bp = _pair_laws(
                setup,
                plane_geometry,
                cm.effective_modulus(young[b], poisson[b], plane_young[k], plane_poisson[k]),
                cm.effective_shear_modulus(young[b], poisson[b], plane_young[k], plane_poisson[k]),
                radius[b],  # R* of a sphere on a plane
                1.0 / jnp.where(inv > 0, inv, 1.0),
                k_plane,
                cm.mixed_coefficient(beta[b], plane_beta[k]),
                cm.mixed_coefficient(friction[b], params.plane_friction[k]),
                cm.mixed_coefficient(rolling[b], rolling_plane[k]) if use_rolling else None,
                plane_flat[flat],
            )
            force_bp, roll_bp, spring, contact = materialised(
                (force_bp, roll_bp, spring, plane_geometry.contact_point), slots.plane_count
            )
            body_b = b if owner is None else owner[b]
            no_plane = jnp.full((size,), -1, jnp.int32)
            f_plane, t_plane = accumulate(
                n, body_b, no_plane, force_bp, contact, x, roll_bp, jnp.zeros_like(roll_bp), valid
            )
            on_planes = (
                jnp.zeros((n,), jnp.int32).at[body_b].add(plane_geometry.active.astype(jnp.int32))
            )
            springs = plane_flat.at[jnp.where(valid, entry, plane_total)].set(spring, mode="drop")
            return f_plane, t_plane, springs, on_planes, jnp.sum(energy_bp)

        f_plane, t_plane, plane_springs, on_planes, plane_energy = over_prefix(
            slots.plane_count, plane_sizes, plane_forces
        )
        force, torque = force + f_plane, torque + t_plane
        count = count + on_planes
        new_plane_history = plane_springs.reshape(s, p, 3)
        elastic = elastic + plane_energy

    force = force + rigid_body.gravity_force(bodies, params.gravity)
    return ContactResult(
        force,
        torque,
        partners,
        new_history.reshape(s, width, 3),
        new_plane_history,
        count,
        overflow,
        elastic,
        reference,
        rebuilt,
        slots,
    )


def _merge_overflow(seen: Overflow, new: Overflow) -> Overflow:
    """The worst of two overflow records (sticky flag, largest counts with their cell/body)."""
    cell = new.worst_cell_count > seen.worst_cell_count
    body = new.worst_body_count > seen.worst_body_count
    return Overflow(
        overflowed=seen.overflowed | new.overflowed,
        worst_cell=jnp.where(cell, new.worst_cell, seen.worst_cell),
        worst_cell_count=jnp.maximum(seen.worst_cell_count, new.worst_cell_count),
        worst_body=jnp.where(body, new.worst_body, seen.worst_body),
        worst_body_count=jnp.maximum(seen.worst_body_count, new.worst_body_count),
    )


# XLA:CPU's older fusion emitter compiles a program that runs once (the forces at time 0) in
# about 60 % of the time, with the same bits (the contact forces of 1e5 spheres: 13.1 -> 8.0 s
# to compile, the same 0.36 s to run); an option of this compilation only, not of the process,
# and only where the jaxlib still has that emitter (0.10; not 0.11: solver.xla_options)
ONCE_OPTIONS = {"cpu": {"xla_cpu_use_fusion_emitters": False}}


def run_once(fun: Callable, *args):
    """``fun(*args)`` compiled for one call (``jax.jit``; on CPUs with ``ONCE_OPTIONS``)."""
    lowered = jax.jit(fun).lower(*args)
    options = xla_options.known(ONCE_OPTIONS.get(jax.default_backend(), {}))
    return lowered.compile(compiler_options=options)(*args)


def initial_state(
    setup: BodySetup, bodies: Bodies, params: ContactParams | None = None
) -> BodyState:
    """The state at time 0: empty histories, the first pair table and its forces."""
    n, s = setup.n_bodies, setup.n_spheres
    p, width = setup.n_planes, setup.table_width
    if bodies.position.shape != (n, 3):
        raise ValueError(f"bodies.position must be ({n}, 3) for this setup, got "
                         f"{bodies.position.shape}")  # fmt: skip
    dtype = bodies.position.dtype
    partners = jnp.full((s, width), -1, jnp.int32)
    history = jnp.zeros((s, width, 3), dtype)
    plane_history = jnp.zeros((s, p, 3), dtype)
    # one compiled program: op by op, the contact law's few hundred operations each compile a
    # kernel of their own (7 s for two spheres, more than the run's own step)
    first = jax.jit(lambda *args: contact_forces(setup, *args))
    result = first(bodies, partners, history, plane_history, params)
    return BodyState(
        bodies=bodies,
        force=result.force,
        torque=result.torque,
        partners=result.partners,
        history=result.history,
        plane_history=result.plane_history,
        contact_count=result.contact_count,
        time=jnp.zeros((), jnp.int32),
        overflow=result.overflow,
        elastic_energy=result.elastic_energy,
        reference=result.reference,
        rebuilds=jnp.zeros((), jnp.int32),
        slots=result.slots,
    )


def diagnostics(
    setup: BodySetup, state: BodyState, params: ContactParams | None = None
) -> BodyDiagnostics:
    """Energy, momentum and contact totals of a state (potential energy in ``params.gravity``)."""
    bodies = state.bodies
    dtype = bodies.position.dtype
    gravity = jnp.asarray(setup.gravity, dtype) if params is None else params.gravity
    weight = rigid_body.gravity_force(bodies, gravity)
    dynamic = ~bodies.kinematic
    return BodyDiagnostics(
        kinetic_energy=jnp.sum(jnp.where(dynamic, rigid_body.kinetic_energy(bodies), 0.0)),
        potential_energy=-jnp.sum(jnp.where(dynamic[:, None], weight * bodies.position, 0.0)),
        momentum=jnp.sum(
            jnp.where(dynamic[:, None], rigid_body.linear_momentum(bodies), 0.0), axis=0
        ),
        angular_momentum=jnp.sum(
            jnp.where(
                dynamic[:, None], rigid_body.angular_momentum_about(bodies, jnp.zeros(3)), 0.0
            ),
            axis=0,
        ),  # fmt: skip
        contacts=jnp.sum(state.contact_count),
        elastic_energy=state.elastic_energy,
    )


def body_step(
    setup: BodySetup,
    state: BodyState,
    params: ContactParams,
    external: tuple[Array, Array] | None = None,
    extra: Callable[[Bodies, ContactResult], tuple[Array, Array]] | None = None,
    buckets: bool = True,
) -> BodyState:
    """One step of ``setup.dt``: velocity Verlet with contacts and gravity, plus ``external``
    (force (n, 3) N, torque (n, 3) N m) held constant over the step (a fluid's force) and
    ``extra(bodies, contacts)``, forces that depend on the drifted state (lubrication).
    ``buckets``: see `contact_forces` (False when the step is vmapped)."""
    results: list[ContactResult] = []

    def forces_fn(bodies: Bodies) -> tuple[Array, Array]:
        results.append(
            contact_forces(
                setup,
                bodies,
                state.partners,
                state.history,
                state.plane_history,
                params,
                state.reference,
                state.slots,
                buckets,
            )  # fmt: skip
        )
        force, torque = results[-1].force, results[-1].torque
        if external is not None:
            force, torque = force + external[0], torque + external[1]
        if extra is not None:
            more = extra(bodies, results[-1])
            force, torque = force + more[0], torque + more[1]
        return force, torque

    bodies, force, torque = rigid_body.step(
        state.bodies, state.force, state.torque, forces_fn, setup.dt
    )
    result = results[-1]
    return BodyState(
        bodies=bodies,
        force=force,
        torque=torque,
        partners=result.partners,
        history=result.history,
        plane_history=result.plane_history,
        contact_count=result.contact_count,
        time=state.time + 1,
        overflow=_merge_overflow(state.overflow, result.overflow),
        elastic_energy=result.elastic_energy,
        reference=result.reference,
        rebuilds=state.rebuilds + result.rebuilt.astype(jnp.int32),
        slots=result.slots,
    )


def make_body_chunk(
    setup: BodySetup, every: int = 1, batched: bool = False
) -> Callable[..., tuple[BodyState, BodyDiagnostics]]:
    """Build chunk(state, n, params=None) -> (state after n steps, BodyDiagnostics per step with
    leading axis n).

    ``n`` is static (jit with static_argnums=1); ``params`` (ContactParams) defaults to
    ``setup.params()``. The chunk is pure and vmaps over a batch of states and params that share
    ``setup`` (ensembles).

    ``every`` > 1: the totals are computed only at steps that are multiples of ``every`` and at
    the chunk's last step (a ``lax.cond``: the other steps skip the reductions; at 10^4 spheres
    that was not measurable, within +-5 %); the rows between are zeros with ``sampled`` False.
    Under ``vmap`` the condition becomes a select that computes both sides: ensembles keep
    ``every`` = 1, and build the chunk with ``batched`` True (no switch over the sizes of the
    compacted pair lists, `contact_forces`).
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")

    def one_step(state: BodyState, params: ContactParams) -> tuple[BodyState, BodyDiagnostics]:
        state = body_step(setup, state, params, buckets=not batched)
        return state, diagnostics(setup, state, params)

    def sampled_step(state: BodyState, params: ContactParams, last: Array):
        state = body_step(setup, state, params, buckets=not batched)

        def sample(s: BodyState) -> BodyDiagnostics:
            return diagnostics(setup, s, params)._replace(sampled=jnp.ones((), bool))

        def skip(s: BodyState) -> BodyDiagnostics:
            shapes = jax.eval_shape(sample, s)
            return jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)

        due = (state.time % every == 0) | last
        return state, lax.cond(due, sample, skip, state)

    def chunk(
        state: BodyState, n: int, params: ContactParams | None = None
    ) -> tuple[BodyState, BodyDiagnostics]:
        if params is None:
            params = setup.params(state.bodies.position.dtype)
        if every == 1:
            return lax.scan(lambda s, _: one_step(s, params), state, None, length=n)
        return lax.scan(
            lambda s, k: sampled_step(s, params, k == n - 1), state, jnp.arange(n, dtype=jnp.int32)
        )

    return chunk


def overflow_message(setup: BodySetup, state: BodyState) -> str | None:
    """Host-side report of a neighbour-search overflow (None when the buffers sufficed).

    For a batch of states, the first member that overflowed is reported.
    """
    flags = np.atleast_1d(np.asarray(state.overflow.overflowed))
    if not flags.any():
        return None
    member = int(np.argmax(flags))
    pick = [np.atleast_1d(np.asarray(a))[member] for a in state.overflow]
    _, cell, cell_count, body, body_count = (int(a) for a in pick)
    grid = setup.grid
    # the tables hold spheres; in a spheres-only scene sphere k is body k
    items = "bodies" if setup.spheres_only else "spheres"
    who = (
        f"body {body}"
        if setup.spheres_only
        else f"sphere {body} (of body {int(setup.member_body[body])})"
    )
    parts = []
    if cell_count > grid.capacity:
        coords = np.unravel_index(cell, grid.shape)
        parts.append(
            f"cell {cell} {tuple(int(c) for c in coords)} holds {cell_count} {items}, "
            f"capacity {grid.capacity}"
        )
    if body_count > grid.max_neighbors:
        parts.append(f"{who} has {body_count} neighbours, max_neighbors {grid.max_neighbors}")
    return "; ".join(parts)


def stable_time_step(
    setup: BodySetup, masses: np.ndarray, moments: np.ndarray | None = None
) -> float:
    """The largest time step the contact stiffness allows, in s (host-side, before tracing).

    Each contact sphere k of a body b with finite mass is given the mass
        m_k = min(m_b V_k / sum_b V, m_eff_k),
        1/m_eff_k = 1/m_b + max_n (d_k x n) . I_b^-1 (d_k x n) = 1/m_b + |d_k|^2 lambda_k,
    the smaller of its share of the body's mass by volume and the least effective mass that a
    normal force through its centre meets over all directions n: the force has the arm d_k (the
    sphere's offset in the principal frame), the rotation it drives adds the second term, and
    d_k x n sweeps the plane normal to d_k, so lambda_k is the largest eigenvalue of
    diag(1/I_b) restricted to that plane. Both equal m_b for a plain sphere (one member, d = 0),
    so spheres keep the sphere rule exactly. Overlapping members make sum_b V exceed the body's
    volume, which only lowers m_k (conservative).

    Hertz: RAYLEIGH_FRACTION (0.2) of the smallest Rayleigh time T_R of a sphere
    (kernels.contact_models.critical_time_step_hertz, density m_k / (4/3 pi r_k^3)).
    Linear: the kernel's bound t_c/10 = pi sqrt(m*/k)/10 at the smallest m*/k. For a pair,
    m*/k = (1/k_i + 1/k_j)/(1/m_i + 1/m_j) >= min(m_i/k_i, m_j/k_j) (the mediant inequality), and a
    plane only raises m*/k, so min_k m_k/k_k bounds every pair: exact for identical spheres,
    conservative otherwise, and linear in s.

    Args:
        masses: (n,) kg per body; inf for fixed or kinematic bodies (their spheres are skipped).
        moments: (n, 3) kg m^2, principal moments of inertia (inf: no rotation about that axis);
            needed when a sphere sits off its body's centre (clumps), ignored otherwise.
    """
    masses = np.asarray(masses, dtype=np.float64)
    n = setup.n_bodies
    if masses.shape != (n,):
        raise ValueError(f"masses must be ({n},), got {masses.shape}")
    owner, radius = setup.member_body, setup.radius
    arm2 = np.sum(setup.member_offset**2, axis=1)
    body_mass = masses[owner]
    finite = np.isfinite(body_mass)
    if not finite.any():
        return math.inf
    volume = 4.0 / 3.0 * np.pi * radius**3
    share = body_mass * volume / np.bincount(owner, weights=volume, minlength=n)[owner]
    if np.any(arm2 > 0):
        if moments is None:
            raise ValueError("stable_time_step needs the principal moments (n, 3) for clumps")
        moments = np.asarray(moments, dtype=np.float64)
        if moments.shape != (n, 3):
            raise ValueError(f"moments must be ({n}, 3), got {moments.shape}")
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse = np.where(np.isfinite(moments), 1.0 / moments, 0.0)[owner]  # (s, 3)
            unit = setup.member_offset / np.sqrt(np.where(arm2 > 0, arm2, 1.0))[:, None]
            across = np.eye(3) - unit[:, :, None] * unit[:, None, :]  # projector normal to d_k
            restricted = across @ (inverse[:, :, None] * across)
            rotational = arm2 * np.linalg.eigvalsh(restricted)[:, -1]
            effective = 1.0 / (1.0 / body_mass + rotational)
        share = np.minimum(share, effective)
    else:
        share = np.where(setup.spheres_only, body_mass, share)  # bit-exact sphere masses
    if setup.contact_model == "hertz":
        r = radius[finite]
        density = share[finite] / (4.0 / 3.0 * np.pi * r**3)
        shear = setup.young[finite] / (2.0 * (1.0 + setup.poisson[finite]))
        rayleigh = cm.critical_time_step_hertz(r, density, shear, setup.poisson[finite])
        return float(RAYLEIGH_FRACTION * np.min(np.asarray(rayleigh)))
    ratio = share[finite] / setup.stiffness[finite]
    return float(np.min(np.asarray(cm.critical_time_step_linear(ratio, 1.0))))
