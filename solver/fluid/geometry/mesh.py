"""Triangle meshes from files: loading, the checks a voxeliser needs, and placement.

Formats: STL (binary and ASCII), OBJ and PLY, read with trimesh (https://trimesh.org), which
also merges the duplicated vertices of STL files so that neighbouring triangles share them.

Checks (``check_closed``), each a one-line ``MeshError`` naming the problem:
- no triangles, or non-finite vertex coordinates;
- not watertight: edges used by one triangle only (the rims of holes, counted) or by more than
  two (non-manifold edges, counted);
- inconsistent winding: two triangles that walk a shared edge in the same direction, so that
  no single "outside" exists (trimesh's ``is_winding_consistent``);
- inside-out: a negative enclosed volume (every normal points inwards).
Self-intersections are not searched for triangle by triangle (that needs O(t log t) triangle
pairs tests); they are found where they matter, by the voxeliser: a region enclosed twice or
with the wrong orientation gives lattice nodes a winding number other than 0 or 1
(``solver.fluid.geometry.voxels.solid_mask``). Intersections that enclose no lattice node go
unnoticed; they change no solid node (the link fractions still take the nearest crossing).

Placement (``Placement``): vertices in the file's unit are converted to metres, scaled, rotated
by Euler angles in degrees (about x, then y, then z, axes fixed in space: R = Rz Ry Rx) and
translated: x = R (s u v) + t, with u the unit's size in metres and s the scale. The file's own
origin lands at the translation t.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from solver.fluid.geometry.columns import MeshError

FORMATS = (".stl", ".obj", ".ply")
UNITS = {"m": 1.0, "cm": 1e-2, "mm": 1e-3}


@dataclass(frozen=True)
class TriangleMesh:
    """A closed triangle surface.

    Attributes:
        vertices: (v, 3) float64 coordinates (m once placed).
        faces: (t, 3) int64 vertex indices, counter-clockwise seen from outside.
    """

    vertices: np.ndarray
    faces: np.ndarray

    @property
    def triangles(self) -> int:
        return len(self.faces)

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower corner, upper corner) of the vertices' bounding box, (3,) each."""
        return self.vertices.min(axis=0), self.vertices.max(axis=0)

    @property
    def volume(self) -> float:
        """Signed enclosed volume (divergence theorem over the triangles): > 0 when the
        triangles are counter-clockwise seen from outside."""
        a, b, c = (self.vertices[self.faces[:, k]] for k in range(3))
        return float(np.einsum("ij,ij->", a, np.cross(b, c)) / 6.0)


@dataclass(frozen=True)
class Placement:
    """Where a mesh goes: x = R (scale * unit * v) + translation, R = Rz Ry Rx.

    Attributes:
        units: the file's length unit, one of UNITS.
        scale: dimensionless factor (> 0).
        rotation: (3,) Euler angles in degrees about the fixed x, y and z axes, applied in
            that order.
        translation: (3,) m, where the file's origin lands.
    """

    units: str = "m"
    scale: float = 1.0
    rotation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    translation: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def matrix(self) -> np.ndarray:
        """(3, 3) rotation matrix R = Rz Ry Rx."""
        ax, ay, az = np.radians(self.rotation)
        rx = np.array([[1, 0, 0], [0, np.cos(ax), -np.sin(ax)], [0, np.sin(ax), np.cos(ax)]])
        ry = np.array([[np.cos(ay), 0, np.sin(ay)], [0, 1, 0], [-np.sin(ay), 0, np.cos(ay)]])
        rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
        return rz @ ry @ rx

    def apply(self, mesh: TriangleMesh) -> TriangleMesh:
        """The placed mesh (vertices in m)."""
        factor = self.scale * UNITS[self.units]
        vertices = (factor * mesh.vertices) @ self.matrix().T + np.asarray(self.translation)
        return TriangleMesh(vertices, mesh.faces)


def load_mesh(path: str | Path) -> TriangleMesh:
    """Read an STL (binary or ASCII), OBJ or PLY file; a scene of several parts is merged.

    Raises:
        MeshError: a missing or unreadable file, an unsupported format, no triangles.
    """
    import trimesh  # deferred: only geometry cases need it

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise MeshError(f"unsupported format {suffix or '(none)'!r}; use {', '.join(FORMATS)}")
    if not path.is_file():
        raise MeshError(f"no such file: {path}")
    try:
        loaded = trimesh.load(path, file_type=suffix[1:], force="mesh")
        vertices = np.asarray(loaded.vertices, dtype=np.float64)
        faces = np.asarray(loaded.faces, dtype=np.int64)
    # trimesh's parsers raise many types on malformed files (ValueError, KeyError, IndexError,
    # struct.error, UnicodeDecodeError, ...): any of them means "cannot read this file"
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise MeshError(f"cannot read {path.name} as {suffix[1:].upper()}: {first}") from None
    if faces.ndim != 2 or len(faces) == 0:
        raise MeshError(f"{path.name} holds no triangles")
    return TriangleMesh(vertices, faces)


def check_closed(mesh: TriangleMesh) -> None:
    """Raise ``MeshError`` unless the mesh is a closed, consistently wound, outward-oriented
    surface (see the module docstring for what is and is not detected)."""
    import trimesh

    if not np.all(np.isfinite(mesh.vertices)):
        raise MeshError(f"{int((~np.isfinite(mesh.vertices)).any(axis=1).sum())} vertices "
                        "have non-finite coordinates")  # fmt: skip
    f = mesh.faces
    first, second = (
        np.concatenate([f[:, 0], f[:, 1], f[:, 2]]),
        np.concatenate([f[:, 1], f[:, 2], f[:, 0]]),
    )
    # each undirected edge as one integer key: 1-D unique is much faster than unique rows
    key = np.minimum(first, second) * len(mesh.vertices) + np.maximum(first, second)
    _, uses = np.unique(key, return_counts=True)
    open_edges, shared = int(np.sum(uses == 1)), int(np.sum(uses > 2))
    if open_edges or shared:
        parts = []
        if open_edges:
            parts.append(f"{open_edges} open edges (used by one triangle: holes)")
        if shared:
            parts.append(f"{shared} non-manifold edges (used by more than two triangles)")
        raise MeshError("not watertight: " + " and ".join(parts))
    surface = trimesh.Trimesh(mesh.vertices, mesh.faces, process=False)
    if not surface.is_winding_consistent:
        raise MeshError(
            "inconsistent winding: neighbouring triangles are oriented in opposite senses "
            "(fix the face orientation, e.g. trimesh.repair.fix_winding)"
        )
    volume = mesh.volume
    if not volume > 0.0:
        raise MeshError(
            f"inside-out: the enclosed volume is {volume:.4g} (normals point inwards; "
            "reverse the triangles' vertex order)"
        )
