"""Sample closed surfaces as triangle meshes: the sphere and the torus knot of ``data/meshes/``,
and the large meshes of the voxeliser benchmark (``python -m solver.bench geometry``).

Both are closed, consistently wound and outward-oriented (counter-clockwise seen from outside).
"""

from __future__ import annotations

import numpy as np

from solver.fluid.geometry.mesh import TriangleMesh


def icosphere(radius: float, subdivisions: int) -> TriangleMesh:
    """A geodesic sphere: the icosahedron split ``subdivisions`` times, 20 * 4^s triangles,
    vertices on the sphere (so the surface lies inside it by at most ~h^2 / (6 r), h the
    longest edge)."""
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)
    return TriangleMesh(np.asarray(sphere.vertices, np.float64), np.asarray(sphere.faces, np.int64))


def torus_knot(
    p: int = 2,
    q: int = 3,
    major: float = 1.0,
    minor: float = 0.4,
    tube: float = 0.18,
    segments: int = 240,
    sides: int = 24,
) -> TriangleMesh:
    """A tube of radius ``tube`` around the (p, q) torus knot (p = 2, q = 3: the trefoil)
    c(phi) = ((major + minor cos q phi) cos p phi, (major + minor cos q phi) sin p phi,
    minor sin q phi), phi in [0, 2 pi): 2 * segments * sides triangles.

    The ring of ``sides`` vertices around c(phi) lies in the plane normal to the curve, spanned
    by the Frenet normal and binormal (the trefoil's curvature never vanishes, and the frame is
    periodic because the curve is). The defaults keep the tube clear of itself.
    """
    phi = np.linspace(0.0, 2.0 * np.pi, segments, endpoint=False)
    r = major + minor * np.cos(q * phi)
    curve = np.stack([r * np.cos(p * phi), r * np.sin(p * phi), minor * np.sin(q * phi)], 1)
    # derivatives of c(phi), analytic
    dr, ddr = -minor * q * np.sin(q * phi), -minor * q * q * np.cos(q * phi)
    c, s = np.cos(p * phi), np.sin(p * phi)
    d1 = np.stack([dr * c - p * r * s, dr * s + p * r * c, minor * q * np.cos(q * phi)], 1)
    d2 = np.stack(
        [
            ddr * c - 2 * p * dr * s - p * p * r * c,
            ddr * s + 2 * p * dr * c - p * p * r * s,
            -minor * q * q * np.sin(q * phi),
        ],
        1,
    )
    tangent = d1 / np.linalg.norm(d1, axis=1, keepdims=True)
    binormal = np.cross(d1, d2)
    binormal /= np.linalg.norm(binormal, axis=1, keepdims=True)
    normal = np.cross(binormal, tangent)
    theta = np.linspace(0.0, 2.0 * np.pi, sides, endpoint=False)
    ring = (
        np.cos(theta)[None, :, None] * normal[:, None]
        + np.sin(theta)[None, :, None] * (binormal[:, None])
    )
    vertices = (curve[:, None] + tube * ring).reshape(-1, 3)
    a = np.arange(segments)[:, None] * sides + np.arange(sides)[None, :]
    b = ((np.arange(segments)[:, None] + 1) % segments) * sides + np.arange(sides)[None, :]
    a1 = np.arange(segments)[:, None] * sides + (np.arange(sides)[None, :] + 1) % sides
    b1 = ((np.arange(segments)[:, None] + 1) % segments) * sides + (
        np.arange(sides)[None, :] + 1
    ) % sides
    faces = np.concatenate(
        [np.stack([a, b, b1], -1).reshape(-1, 3), np.stack([a, b1, a1], -1).reshape(-1, 3)]
    ).astype(np.int64)
    mesh = TriangleMesh(vertices, faces)
    if mesh.volume < 0:  # the (normal, binormal) ring turned the other way: flip every triangle
        mesh = TriangleMesh(vertices, faces[:, ::-1].copy())
    return mesh


def torus_knot_with(triangles: int, **kwargs) -> TriangleMesh:
    """A torus knot with about ``triangles`` triangles (segments = 10 sides)."""
    sides = max(8, int(round(np.sqrt(triangles / 20.0))))
    segments = max(30, int(round(triangles / (2 * sides))))
    return torus_knot(segments=segments, sides=sides, **kwargs)
