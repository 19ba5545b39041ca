"""Write the sample meshes of case=geometry into this folder (docs/geometry.md, data/README.md).

    python data/meshes/make_meshes.py [--out DIR]

- sphere.stl: binary STL, a geodesic sphere of diameter 100 mm (coordinates in millimetres,
  centred at the origin), the icosahedron subdivided 5 times: 20480 triangles, edges of about
  1.9 mm, so the surface lies at most ~0.01 mm (1e-4 D) inside the exact sphere.
- trefoil.obj: OBJ, a tube of radius 18 mm around the (2, 3) torus knot of radii 100 mm and
  40 mm (coordinates in millimetres, centred at the origin), 240 x 24 quads: 11520 triangles.
  Non-convex, with rays that cross it up to six times: a test for the voxeliser.

Both are closed, consistently wound and outward-oriented; the files are deterministic (same
bytes on every run), so the checked-in copies can be regenerated and compared.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def write_binary_stl(path: Path, vertices: np.ndarray, faces: np.ndarray) -> None:
    """Binary STL: an 80-byte header, the triangle count, then per triangle the unit normal
    and three vertices (float32 little-endian) and a zero attribute word."""
    tri = vertices[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    record = np.zeros(
        len(faces), dtype=[("normal", "<f4", 3), ("vertices", "<f4", (3, 3)), ("attr", "<u2")]
    )
    record["normal"] = normal
    record["vertices"] = tri
    header = b"lbsolver sample mesh (data/meshes/make_meshes.py)".ljust(80, b" ")
    with path.open("wb") as fh:
        fh.write(header)
        fh.write(np.uint32(len(faces)).tobytes())
        fh.write(record.tobytes())


def write_obj(path: Path, vertices: np.ndarray, faces: np.ndarray, comment: str) -> None:
    """Wavefront OBJ: ``v x y z`` lines, then ``f a b c`` lines with 1-based indices."""
    lines = [f"# {comment}"]
    lines += [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in vertices]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in faces]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    from solver.fluid.geometry.shapes import icosphere, torus_knot

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sphere = icosphere(radius=50.0, subdivisions=5)
    write_binary_stl(args.out / "sphere.stl", sphere.vertices, sphere.faces)
    knot = torus_knot(major=100.0, minor=40.0, tube=18.0, segments=240, sides=24)
    write_obj(
        args.out / "trefoil.obj",
        knot.vertices,
        knot.faces,
        "trefoil torus-knot tube, mm (data/meshes/make_meshes.py)",
    )
    for name, mesh in (("sphere.stl", sphere), ("trefoil.obj", knot)):
        size = (args.out / name).stat().st_size
        print(f"{name}: {mesh.triangles} triangles, {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
