"""Contact geometry of sphere pairs and the accumulation of pair forces onto bodies.

Pairs come in fixed-capacity buffers of P candidates: index arrays i, j (P,) into bodies 0..n-1
and a `valid` (P,) bool mask; padded entries produce exactly zero. A sphere-plane pair has j = -1
(the plane is not a body).

Geometry (3D, SI units, float dtype of the inputs):
    n      unit normal from j to i (from the plane into the sphere's side),
    delta  overlap r_i + r_j - |x_i - x_j| (sphere-plane: r_i - (x_i - p).n), active where > 0,
    c      contact point, the middle of the overlap: c = x_i - (r_i - delta/2) n,
    v_rel  (v_i + w_i x (c - x_i)) - (v_j + w_j x (c - x_j)), velocity of i relative to j at c,
    v_n = v_rel . n (negative while approaching), v_t = v_rel - v_n n.
The force laws are in `kernels.contact_models`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array


class PairGeometry(NamedTuple):
    """Kinematics of P candidate contacts (a pytree of arrays)."""

    active: Array  # (P,) bool: valid and overlapping
    overlap: Array  # (P,) m, delta >= 0, zero where inactive
    normal: Array  # (P, 3) unit, from j to i
    contact_point: Array  # (P, 3) m
    relative_velocity: Array  # (P, 3) m/s, of i relative to j at the contact point
    normal_speed: Array  # (P,) m/s, v_rel . n, negative on approach
    tangential_velocity: Array  # (P, 3) m/s, v_rel - v_n n
    relative_angular_velocity: Array  # (P, 3) rad/s, w_i - w_j (w_i for a plane)


def dot(a: Array, b: Array) -> Array:
    """a . b over the last axis of (..., 3) arrays, (...), summed component by component: a
    3-wide reduction over a long leading axis is handed by XLA:CPU to YNNPACK, which costs a
    pass of its own."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def norm(vectors: Array) -> Array:
    """|v| over the last axis of (..., 3), (...), as sqrt(`dot`(v, v))."""
    return jnp.sqrt(dot(vectors, vectors))


def safe_normalize(vectors: Array) -> Array:
    """v/|v| over the last axis, (..., 3); zero (not NaN, also in gradients) where v = 0."""
    norm2 = dot(vectors, vectors)[..., None]
    positive = norm2 > 0
    return jnp.where(positive, vectors / jnp.sqrt(jnp.where(positive, norm2, 1.0)), 0.0)


def _kinematics(
    active: Array,
    overlap: Array,
    normal: Array,
    center_i: Array,
    radius_i: Array,
    velocity_i: Array,
    omega_i: Array,
    center_j: Array,
    velocity_j: Array,
    omega_j: Array,
) -> PairGeometry:
    overlap = jnp.where(active, overlap, 0.0)
    contact = center_i - (radius_i - 0.5 * overlap)[:, None] * normal
    at_i = velocity_i + jnp.cross(omega_i, contact - center_i)
    at_j = velocity_j + jnp.cross(omega_j, contact - center_j)
    relative = jnp.where(active[:, None], at_i - at_j, 0.0)
    normal_speed = dot(relative, normal)
    tangential = relative - normal_speed[:, None] * normal
    relative_omega = jnp.where(active[:, None], omega_i - omega_j, 0.0)
    return PairGeometry(
        active, overlap, normal, contact, relative, normal_speed, tangential, relative_omega
    )


def sphere_sphere(
    center_i: Array,
    radius_i: Array,
    velocity_i: Array,
    omega_i: Array,
    center_j: Array,
    radius_j: Array,
    velocity_j: Array,
    omega_j: Array,
    valid: Array,
) -> PairGeometry:
    """Contact geometry of sphere pairs, gathered per pair by the caller.

    Args:
        center_*: (P, 3) m; radius_*: (P,) m; velocity_*: (P, 3) m/s; omega_*: (P, 3) rad/s
        (world frame); valid: (P,) bool.
    """
    offset = center_i - center_j
    distance = norm(offset)
    normal = safe_normalize(offset)
    overlap = radius_i + radius_j - distance
    active = valid & (overlap > 0) & (distance > 0)
    return _kinematics(
        active, overlap, normal, center_i, radius_i, velocity_i, omega_i,
        center_j, velocity_j, omega_j,
    )  # fmt: skip


def sphere_plane(
    center: Array,
    radius: Array,
    velocity: Array,
    omega: Array,
    plane_point: Array,
    plane_normal: Array,
    plane_velocity: Array,
    valid: Array,
) -> PairGeometry:
    """Contact geometry of spheres (i) against planes (j), which may translate.

    Args:
        center: (P, 3) m; radius: (P,) m; velocity: (P, 3) m/s; omega: (P, 3) rad/s;
        plane_point: (P, 3) m, any point of the plane; plane_normal: (P, 3) unit, pointing to the
        side the sphere is on; plane_velocity: (P, 3) m/s; valid: (P,) bool.
    """
    overlap = radius - dot(center - plane_point, plane_normal)
    active = valid & (overlap > 0)
    return _kinematics(
        active, overlap, plane_normal, center, radius, velocity, omega,
        center, plane_velocity, jnp.zeros_like(omega),
    )  # fmt: skip


def accumulate(
    n: int,
    i: Array,
    j: Array,
    force_on_i: Array,
    contact_point: Array,
    positions: Array,
    torque_extra_i: Array,
    torque_extra_j: Array,
    valid: Array,
) -> tuple[Array, Array]:
    """Sum pair forces and torques onto bodies (segment sums with `.at[].add`).

    Body i receives F and (c - x_i) x F + torque_extra_i; body j receives -F and
    (c - x_j) x (-F) + torque_extra_j; nothing goes to j where j < 0 (a plane) or the pair is not
    valid. For sphere-sphere pairs the total force and the total torque about any point vanish
    when torque_extra_j = -torque_extra_i.

    Args:
        n: number of bodies; i, j: (P,) int; force_on_i: (P, 3) N; contact_point: (P, 3) m;
        positions: (n, 3) m, body centres; torque_extra_*: (P, 3) N m, e.g. rolling resistance;
        valid: (P,) bool.

    Returns:
        force (n, 3) in N and torque (n, 3) in N m about each body's centre.
    """
    on_i = valid[:, None]
    on_j = (valid & (j >= 0))[:, None]
    body_j = jnp.where(j >= 0, j, 0)
    force_i = jnp.where(on_i, force_on_i, 0.0)
    force_j = jnp.where(on_j, -force_on_i, 0.0)
    torque_i = jnp.cross(contact_point - positions[i], force_i) + torque_extra_i
    torque_j = jnp.cross(contact_point - positions[body_j], force_j) + torque_extra_j
    torque_i = jnp.where(on_i, torque_i, 0.0)
    torque_j = jnp.where(on_j, torque_j, 0.0)
    # one scatter of 6-wide rows, i's then j's: the order of the sums per body of four
    # separate scatters (each 3-wide scatter costs about as much as the 6-wide one)
    rows = jnp.concatenate(
        [jnp.concatenate([force_i, torque_i], -1), jnp.concatenate([force_j, torque_j], -1)]
    )
    total = jnp.zeros((n, 6), dtype=force_i.dtype).at[jnp.concatenate([i, body_j])].add(rows)
    return total[:, :3], total[:, 3:]
