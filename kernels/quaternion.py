"""Unit quaternions as arrays (..., 4), scalar first: q = (w, x, y, z) = (cos a/2, sin a/2 n).

A unit quaternion q stands for the rotation by angle a about the unit axis n; here it always maps
body-frame coordinates to world-frame coordinates, v_world = q v_body q*. Products are Hamilton
products, so multiply(p, q) is the rotation q followed by p (as matrices: R(p) R(q)). Every function
broadcasts over the leading axes; vectors are (..., 3), matrices (..., 3, 3) acting on columns.
Reference for the algebra: Kuipers, "Quaternions and Rotation Sequences" (Princeton, 1999), ch. 5.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike


def _parts(a: Array, count: int) -> list[Array]:
    return [a[..., k] for k in range(count)]


def _cross(a: list[Array], b: list[Array]) -> list[Array]:
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


# The algebra below works on components and stacks each result once: jnp.cross and 3-wide sums
# made XLA:CPU write a concatenate or a YNNPACK reduction per operation, ~4x slower over a
# rigid-body drift (docs/performance.md, "Rigid bodies"). Callers that gather from these results
# should materialise them first (kernels.materialise): a fused chain recomputes per load.


def multiply(p: ArrayLike, q: ArrayLike) -> Array:
    """Hamilton product p q, (..., 4): rotating by q, then by p."""
    pw, *pv = _parts(jnp.asarray(p), 4)
    qw, *qv = _parts(jnp.asarray(q), 4)
    w = pw * qw - (pv[0] * qv[0] + pv[1] * qv[1] + pv[2] * qv[2])
    c = _cross(pv, qv)
    return jnp.stack([w, *(pw * qv[k] + qw * pv[k] + c[k] for k in range(3))], axis=-1)


def conjugate(q: ArrayLike) -> Array:
    """q* = (w, -x, -y, -z), (..., 4): the inverse rotation of a unit quaternion."""
    w, x, y, z = _parts(jnp.asarray(q), 4)
    return jnp.stack([w, -x, -y, -z], axis=-1)


def normalize(q: ArrayLike) -> Array:
    """q / |q|, (..., 4). The zero quaternion has no direction and gives NaN."""
    w, x, y, z = _parts(jnp.asarray(q), 4)
    length = jnp.sqrt(w * w + x * x + y * y + z * z)
    return jnp.stack([w / length, x / length, y / length, z / length], axis=-1)


def rotate(q: ArrayLike, v: ArrayLike) -> Array:
    """Body -> world: q v q*, (..., 3), for a unit q (..., 4) and v (..., 3).

    Evaluated without forming the matrix: t = 2 u x v, v' = v + w t + u x t, with u = (x, y, z).
    """
    w, *u = _parts(jnp.asarray(q), 4)
    vs = _parts(jnp.asarray(v), 3)
    t = [2.0 * c for c in _cross(u, vs)]
    ut = _cross(u, t)
    return jnp.stack([vs[k] + w * t[k] + ut[k] for k in range(3)], axis=-1)


def rotate_inverse(q: ArrayLike, v: ArrayLike) -> Array:
    """World -> body: q* v q, (..., 3), for a unit q (..., 4) and v (..., 3)."""
    return rotate(conjugate(q), v)


def to_matrix(q: ArrayLike) -> Array:
    """Rotation matrix R (..., 3, 3) of a unit q (..., 4), so that R @ v = rotate(q, v)."""
    q = jnp.asarray(q)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


def from_matrix(R: ArrayLike) -> Array:
    """Unit quaternion (..., 4) of a rotation matrix R (..., 3, 3), returned with w >= 0.

    Shepperd's method (Shepperd 1978, J. Guidance and Control 1(3), 223): of the four
    quantities 4w^2 - 1 = tr R, 4x^2 - 1 = 2 R_00 - tr R, ... the largest is chosen, so the
    component computed from a square root is at least 1/2 and the other three come from sums and
    differences of off-diagonal entries without cancellation. All four candidates (each equal to
    4 c q, c the chosen component) are formed and the one with the largest pivot is selected, so
    there is no Python branch and the result is smooth away from the switching surfaces. A matrix
    that is only nearly orthogonal (e.g. from an eigensolver) still gives a unit quaternion.
    """
    R = jnp.asarray(R)
    r = [[R[..., i, j] for j in range(3)] for i in range(3)]
    trace = r[0][0] + r[1][1] + r[2][2]
    candidates = jnp.stack(
        [
            jnp.stack([1 + trace, r[2][1] - r[1][2], r[0][2] - r[2][0], r[1][0] - r[0][1]], -1),
            jnp.stack(
                [r[2][1] - r[1][2], 1 + 2 * r[0][0] - trace, r[0][1] + r[1][0], r[0][2] + r[2][0]],
                -1,
            ),
            jnp.stack(
                [r[0][2] - r[2][0], r[0][1] + r[1][0], 1 + 2 * r[1][1] - trace, r[1][2] + r[2][1]],
                -1,
            ),
            jnp.stack(
                [r[1][0] - r[0][1], r[0][2] + r[2][0], r[1][2] + r[2][1], 1 + 2 * r[2][2] - trace],
                -1,
            ),
        ],
        axis=-2,
    )
    pivots = jnp.stack([trace, r[0][0], r[1][1], r[2][2]], axis=-1)
    choice = jnp.argmax(pivots, axis=-1)[..., None, None]
    q = normalize(jnp.take_along_axis(candidates, choice, axis=-2)[..., 0, :])
    return jnp.where(q[..., :1] < 0, -q, q)


def from_axis_angle(axis: ArrayLike, angle: ArrayLike) -> Array:
    """Rotation by angle (...) rad about axis (..., 3), normalised here (nonzero), -> (..., 4)."""
    axis = jnp.asarray(axis)
    half = 0.5 * jnp.asarray(angle)[..., None]
    unit = axis / jnp.linalg.norm(axis, axis=-1, keepdims=True)
    return jnp.concatenate([jnp.cos(half), jnp.sin(half) * unit], axis=-1)


def from_rotation_vector(phi: ArrayLike) -> Array:
    """Rotation by |phi| rad about phi / |phi|, phi (..., 3) -> (..., 4); 0 gives (1, 0, 0, 0).

    q = (cos(a/2), sin(a/2)/a phi), a = |phi|, with sin(a/2)/a evaluated safely (and with finite
    gradients) at a = 0.
    """
    phi = jnp.asarray(phi)
    angle = jnp.linalg.norm(phi, axis=-1, keepdims=True)
    small = angle < 1e-8
    safe = jnp.where(small, 1.0, angle)
    # sin(a/2)/a = 1/2 - a^2/48 + O(a^4); the series is exact in float64 below 1e-8.
    scale = jnp.where(small, 0.5 - angle**2 / 48.0, jnp.sin(0.5 * safe) / safe)
    return jnp.concatenate([jnp.cos(0.5 * angle), scale * phi], axis=-1)


def about_axis(k: int, angle: ArrayLike) -> Array:
    """Rotation by angle (...) rad about the coordinate axis k (0, 1 or 2), (..., 4)."""
    if k not in (0, 1, 2):
        raise ValueError(f"axis index k must be 0, 1 or 2, got {k}")
    half = 0.5 * jnp.asarray(angle)
    zero = jnp.zeros_like(half)
    vector = [zero, zero, zero]
    vector[k] = jnp.sin(half)
    return jnp.stack([jnp.cos(half), *vector], axis=-1)
