"""Speed of the mesh voxeliser: solid nodes and Bouzidi link fractions of a large mesh.

    python -m solver.bench geometry [--triangles 1000000] [--grid 256] [--shape knot|sphere]
                                    [--lattice D3Q19] [--repeats 1] [--json PATH]

The mesh is made in memory (solver/fluid/geometry/shapes.py): the trefoil torus-knot tube
(non-convex, rays cross it up to six times) or a geodesic sphere, with about ``--triangles``
triangles (the sphere: the nearest 20 * 4^s), scaled to 85 % of a ``--grid``^3 box. Phases,
each timed on its own (median of ``--repeats``; NumPy on one core):

- check: the closedness checks (edge counts, winding, volume) of ``check_closed``;
- solid: inside/outside of every node (``solid_mask``: one scan-conversion, a cumulative sum);
- links: link fractions of every fluid-to-solid link (``mesh_link_fractions``: q/2 sheared
  scan-conversions);
- dense: writing them into the (q, n^3) float32 ``wall_distance`` array the step reads, which
  is memory-bound (and the largest allocation of the three).

and the per-block path that ``case=geometry`` takes (each process builds only its block; no
array over the whole grid):

- crossings: the crossings of every z column, sorted, and the winding check
  (``ColumnCrossings``; the one scan-conversion of the solid pass);
- half block: the solid nodes of one of two blocks (half the grid along x) from them;
- links by queries: the link fractions with each link's ends classified by point queries on
  the crossings (``mesh_links``) instead of whole-grid masks;
- facts: node count, frontal area and fluid-to-solid link count, slab by slab over the body's
  bounding box (``body_facts``).

Printed per phase: seconds and nodes per second (n^3 / seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from kernels.lattices import lattice_by_name
from solver.fluid.geometry import (
    ColumnCrossings,
    check_closed,
    mesh_link_fractions,
    mesh_links,
    solid_mask,
)
from solver.fluid.geometry.facts import body_facts
from solver.fluid.geometry.mesh import TriangleMesh
from solver.fluid.geometry.shapes import icosphere, torus_knot_with

SHAPES = ("knot", "sphere")


def make_mesh(shape: str, triangles: int) -> TriangleMesh:
    """The benchmark mesh, about ``triangles`` triangles, unit-sized."""
    if shape == "sphere":
        subdivisions = max(0, int(round(np.log(max(triangles, 20) / 20.0) / np.log(4.0))))
        return icosphere(1.0, subdivisions)
    return torus_knot_with(triangles)


def fit_to_grid(mesh: TriangleMesh, n: int, fill: float = 0.85) -> np.ndarray:
    """Vertices in index coordinates: the mesh centred in an n^3 grid, its largest extent
    ``fill`` n cells."""
    lower, upper = mesh.bounds
    size = float((upper - lower).max())
    return (mesh.vertices - 0.5 * (lower + upper)) * (fill * n / size) + 0.5 * (n - 1)


def timed(fn, repeats: int):
    """(result of the last call, median seconds over ``repeats`` calls)."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times)


def run(shape: str, triangles: int, n: int, lattice_name: str, repeats: int) -> dict:
    lattice = lattice_by_name(lattice_name)
    mesh = make_mesh(shape, triangles)
    vertices = fit_to_grid(mesh, n)
    grid = (n, n, n)
    _, t_check = timed(lambda: check_closed(mesh), repeats)
    solid, t_solid = timed(lambda: solid_mask(vertices, mesh.faces, grid), repeats)
    links, t_links = timed(
        lambda: mesh_link_fractions(vertices, mesh.faces, lattice.c, solid), repeats
    )
    _, t_dense = timed(lambda: links.dense(lattice.q, grid), repeats)
    blocks = per_block(vertices, mesh.faces, grid, lattice, repeats)
    if blocks.pop("links") != len(links):
        raise AssertionError("the per-block links differ from the whole-grid ones")
    nodes = n**3
    return {
        "shape": shape,
        "triangles": mesh.triangles,
        "grid": [n, n, n],
        "lattice": lattice.name,
        "solid_nodes": int(solid.sum()),
        "boundary_links": len(links),
        "links_without_crossing": int(links.missing),
        "seconds": {"check": t_check, "solid": t_solid, "links": t_links, "dense": t_dense},
        "per_block_seconds": blocks,
        "nodes_per_s": {
            "solid": nodes / t_solid,
            "links": nodes / t_links,
            "solid+links": nodes / (t_solid + t_links),
        },
    }


def per_block(vertices, faces, grid, lattice, repeats: int) -> dict:
    """Seconds of the per-block path's phases (and the number of links it found)."""
    columns, t_crossings = timed(lambda: ColumnCrossings(vertices, faces, grid), repeats)
    half = (slice(0, grid[0] // 2), slice(0, grid[1]), slice(0, grid[2]))
    _, t_block = timed(lambda: columns.solid(half), repeats)

    def classify(nodes):
        inside = columns.solid_at(nodes)
        return inside, ~inside

    links, t_links = timed(lambda: mesh_links(vertices, faces, lattice.c, grid, classify), repeats)

    def fluid(box):
        return ~columns.solid(box)

    bounds = columns.node_bounds()
    _, t_facts = timed(lambda: body_facts(columns.solid, fluid, bounds, grid, lattice.c), repeats)
    return {"crossings": t_crossings, "half_block": t_block, "links_by_queries": t_links,
            "facts": t_facts, "links": len(links)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solver.bench geometry", description=__doc__)
    parser.add_argument("--triangles", type=int, default=1_000_000)
    parser.add_argument("--grid", type=int, default=256, help="nodes per edge of the cube")
    parser.add_argument("--shape", choices=SHAPES, default="knot")
    parser.add_argument("--lattice", default="D3Q19", choices=("D3Q19", "D3Q27"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    row = run(args.shape, args.triangles, args.grid, args.lattice, args.repeats)
    s, rate = row["seconds"], row["nodes_per_s"]
    print(
        f"{row['shape']}: {row['triangles']:,} triangles on {args.grid}^3 "
        f"({args.grid**3:,} nodes), {row['lattice']}: {row['solid_nodes']:,} solid nodes, "
        f"{row['boundary_links']:,} boundary links ({row['links_without_crossing']} without "
        "a crossing)"
    )
    print(f"  check        {s['check']:8.3f} s")
    print(f"  solid nodes  {s['solid']:8.3f} s   {rate['solid'] / 1e6:8.1f} M nodes/s")
    print(f"  link fract.  {s['links']:8.3f} s   {rate['links'] / 1e6:8.1f} M nodes/s")
    print(f"  both         {s['solid'] + s['links']:8.3f} s   "
          f"{rate['solid+links'] / 1e6:8.1f} M nodes/s")  # fmt: skip
    print(f"  dense array  {s['dense']:8.3f} s   (q x n^3 float32 wall_distance)")
    b = row["per_block_seconds"]
    print("per block (case=geometry):")
    print(f"  crossings    {b['crossings']:8.3f} s   (every z column, sorted, winding check)")
    print(f"  half block   {b['half_block']:8.3f} s   (solid nodes of one of two blocks)")
    print(f"  link fract.  {b['links_by_queries']:8.3f} s   (ends classified by point queries)")
    print(f"  body facts   {b['facts']:8.3f} s   (slab by slab over the body's box)")
    if args.json is not None:
        args.json.write_text(json.dumps(row, indent=2) + "\n")
    return 0
