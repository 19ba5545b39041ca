"""case=geometry built per block: a mesh's solid nodes on any box (``ColumnCrossings``), its
link fractions classified by point queries (``mesh_links``) and the body's facts read slab by
slab (``body_facts``) equal the whole-grid voxeliser's, bit for bit, and a tunnel split over
two devices runs as on one.

The whole-grid reference is the voxeliser as it was before the per-block build
(``dense_winding``: the crossings' signs summed into the whole grid and added up each column).
The meshes: the sample STL sphere and OBJ trefoil knot (data/meshes), and two whose
triangles' edges and vertices sit exactly on lattice columns and nodes (an axis-aligned box and
an octahedron with integer corners), so that rays graze edges and pass through vertices and
the rasteriser's tie rules decide. The lattice-case fields (solid, obstacle, wall_distance) are
also checked box by box in tests/test_setup_blocks.py (cases geometry, geometry_walls,
geometry_trefoil), and never built whole by two MPI processes there.
"""

from __future__ import annotations

import itertools
import json

import h5py
import numpy as np
import pytest
import trimesh
from solver_cli import FAST_COMPILE, ROOT, run_solver

from kernels.lattices import D3Q19, D3Q27
from solver.fluid.geometry import (
    ColumnCrossings,
    MeshError,
    Placement,
    TriangleMesh,
    count_links,
    load_mesh,
    mesh_link_fractions,
    mesh_links,
    solid_mask,
    sphere_mask,
)
from solver.fluid.geometry.facts import body_facts
from solver.fluid.geometry.raster import pierce
from solver.fluid.geometry.shapes import icosphere

SHAPE = (30, 27, 25)  # uneven on purpose
FORCE_RTOL = 1e-4  # obstacle forces are sums whose order follows the blocks


def _fit(mesh: TriangleMesh, size: float, rotation=(0.0, 0.0, 0.0)) -> TriangleMesh:
    """``mesh`` scaled to ``size`` cells across, rotated, off-centre in SHAPE (index units)."""
    lower, upper = mesh.bounds
    scale = size / float((upper - lower).max())
    centre = np.array(SHAPE) / 2.0 - 0.5 + np.array([0.37, -0.21, 0.13])
    placed = Placement(scale=scale, rotation=rotation).apply(
        TriangleMesh(mesh.vertices - 0.5 * (lower + upper), mesh.faces)
    )
    return TriangleMesh(placed.vertices + centre, placed.faces)


def _on_lattice(mesh: trimesh.Trimesh, corner) -> TriangleMesh:
    """``mesh`` moved by an integer ``corner``, its triangles turned outward-facing."""
    faces = np.asarray(mesh.faces, np.int64)
    out = TriangleMesh(np.asarray(mesh.vertices, float) + corner, faces)
    return out if out.volume > 0 else TriangleMesh(out.vertices, faces[:, ::-1].copy())


def _meshes() -> dict[str, TriangleMesh]:
    octahedron = trimesh.Trimesh(
        vertices=8.0 * np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1],
                                 [0, 0, -1]], float),
        faces=[[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5],
               [0, 3, 5]],
    )  # fmt: skip
    return {
        "sphere_stl": _fit(load_mesh(ROOT / "data" / "meshes" / "sphere.stl"), 17.3),
        "trefoil_obj": _fit(
            load_mesh(ROOT / "data" / "meshes" / "trefoil.obj"), 22.0, (10.0, 20.0, 30.0)
        ),  # fmt: skip
        # faces through node planes, edges along node lines, corners on nodes
        "box_on_nodes": _on_lattice(trimesh.creation.box(extents=(12, 10, 8)), (14, 12, 11)),
        # vertices on nodes, edges' projections through columns
        "octahedron_on_nodes": _on_lattice(octahedron, (14, 13, 12)),
    }


MESHES = _meshes()


def dense_winding(mesh: TriangleMesh, shape=SHAPE) -> np.ndarray:
    """(nx, ny, nz + 1) int16: the whole-grid voxeliser's winding numbers (the crossings'
    signs added into every column, summed up along it)."""
    n0, n1, n2 = shape
    crossings = pierce(mesh.vertices[mesh.faces], (0, 0), (n0 - 1, n1 - 1))
    above = np.clip(np.floor(crossings.position).astype(np.int64) + 1, 0, n2)
    flat = (crossings.column[:, 0] * n1 + crossings.column[:, 1]) * (n2 + 1) + above
    steps = np.bincount(flat, weights=crossings.sign, minlength=n0 * n1 * (n2 + 1))
    return np.cumsum(steps.astype(np.int16).reshape(n0, n1, n2 + 1), axis=2, dtype=np.int16)


def boxes(shape, solid: np.ndarray) -> list[tuple[slice, ...]]:
    """Blocks of 2- and 3-way splits of every axis, cuts through the body's middle, single
    layers and single cells inside it."""
    middle = [int(round(np.mean(w))) for w in np.nonzero(solid)]
    cuts = []
    for n, m in zip(shape, middle, strict=True):
        halves = [slice(0, n // 2), slice(n // 2, n), slice(n // 3, 2 * n // 3)]
        through = [slice(m, n), slice(m - 1, m + 2), slice(m, m + 1)]
        cuts.append([slice(0, n), *halves, *through, slice(n - 1, n)])
    return list(itertools.product(*cuts))[::5]


@pytest.fixture(scope="module", params=sorted(MESHES))
def mesh_case(request):
    mesh = MESHES[request.param]
    winding = dense_winding(mesh)
    return request.param, mesh, winding[:, :, : SHAPE[2]] == 1


def test_solid_on_boxes_equals_whole_grid(mesh_case):
    name, mesh, reference = mesh_case
    assert reference.any() and not reference.all(), name
    columns = ColumnCrossings(mesh.vertices, mesh.faces, SHAPE)
    assert np.array_equal(solid_mask(mesh.vertices, mesh.faces, SHAPE), reference)
    for box in boxes(SHAPE, reference):
        assert np.array_equal(columns.solid(box), reference[box]), f"{name} on {box}"
    nodes = np.argwhere(np.ones(SHAPE, bool))
    assert np.array_equal(columns.solid_at(nodes), reference.ravel()), name
    bounds = columns.node_bounds()
    assert reference[bounds].sum() == reference.sum(), "a solid node outside node_bounds"


@pytest.mark.parametrize("lattice", [D3Q19, D3Q27], ids=lambda lat: lat.name)
def test_links_by_point_queries_equal_whole_grid(mesh_case, lattice):
    """Fluid = not solid and not a wall layer at j = 0 (which a link may also reach)."""
    name, mesh, solid = mesh_case
    wall = np.zeros(SHAPE, bool)
    wall[:, 0, :] = True
    body, fluid = solid & ~wall, ~(solid | wall)
    reference = mesh_link_fractions(mesh.vertices, mesh.faces, lattice.c, body, fluid)
    columns = ColumnCrossings(mesh.vertices, mesh.faces, SHAPE)

    def classify(nodes):
        inside, on_wall = columns.solid_at(nodes), nodes[:, 1] == 0
        return inside & ~on_wall, ~(inside | on_wall)

    links = mesh_links(mesh.vertices, mesh.faces, lattice.c, SHAPE, classify)
    assert len(links) == len(reference) > 100, name
    for part in ("node", "direction", "fraction"):
        assert np.array_equal(getattr(links, part), getattr(reference, part)), (name, part)
    facts = body_facts(
        lambda box: columns.solid(box) & ~wall[box],
        lambda box: ~(columns.solid(box) | wall[box]),
        columns.node_bounds(),
        SHAPE,
        lattice.c,
        slab_cells=100,  # many slabs of a few rows
    )
    assert facts.nodes == int(body.sum())
    assert facts.frontal_cells == int(np.count_nonzero(body.any(axis=0)))
    assert facts.links == count_links(lattice.c, body, fluid)
    assert facts.links - len(links) == reference.missing
    if name == "box_on_nodes":  # edges through nodes: links that only touch the surface
        assert reference.missing > 0


def test_overlapping_shells_give_the_whole_grid_error():
    """Two overlapping spheres: the same count and first node as the whole-grid voxeliser."""
    a, b = icosphere(6.0, 2), icosphere(5.0, 2)
    mesh = TriangleMesh(
        np.concatenate([a.vertices + [13.2, 12.1, 11.7], b.vertices + [17.4, 13.3, 12.6]]),
        np.concatenate([a.faces, b.faces + len(a.vertices)]),
    )
    winding = dense_winding(mesh)
    inside = winding[:, :, : SHAPE[2]]
    bad = (inside != 0) & (inside != 1)
    assert bad.any()
    first = tuple(int(v) for v in np.argwhere(bad)[0])
    with pytest.raises(MeshError) as info:
        ColumnCrossings(mesh.vertices, mesh.faces, SHAPE)
    assert f"{int(bad.sum())} nodes have a winding number" in str(info.value)
    assert f"(first at node {first})" in str(info.value)


def test_sphere_mask_on_boxes_equals_whole_grid():
    centre, radius = np.array([14.37, 12.8, 11.5]), 7.3
    whole = sphere_mask(centre, radius, SHAPE)
    assert whole.sum() > 1000
    for box in boxes(SHAPE, whole):
        assert np.array_equal(sphere_mask(centre, radius, SHAPE, box), whole[box]), box


TUNNEL = ["case=geometry", "fluid=d3q19", "case.length=0.6", "case.width=0.3",
          "case.height=0.3", "case.translation=[0.2,0.15,0.15]", "case.resolution=4",
          "case.ramp_time=0", "steps=8", "chunk=8", "output.every=8", "output.png=false",
          "checkpoint=none"]  # fmt: skip


def test_tunnel_split_over_two_devices_equals_one(tmp_path):
    """The STL sphere tunnel (24 x 12 x 12) split along z, the rays' axis, through the body
    (each device's block starts inside it): the same body, links, fields and forces as on one
    device. Both compile without LLVM optimisation, so without FMA contraction: bitwise."""
    runs = {}
    for name, domain, devices in (("one", "domain=single", 1), ("two", "domain.mesh=[1,1,2]", 2)):
        out = tmp_path / name
        flags = f"--xla_force_host_platform_device_count={devices} {FAST_COMPILE}"
        result = run_solver([*TUNNEL, domain, f"hydra.run.dir={out}"], {"XLA_FLAGS": flags})
        assert result.returncode == 0, result.stderr[-2000:]
        runs[name] = out
    one, two = (json.loads((runs[k] / "run.json").read_text()) for k in ("one", "two"))
    assert len(two["devices"]) == 2
    for key in ("solid_nodes", "boundary_links", "links_without_crossing", "blockage"):
        assert one["diagnostics"][key] == two["diagnostics"][key], key
    with h5py.File(runs["one"] / "fields.h5") as a, h5py.File(runs["two"] / "fields.h5") as b:
        names = []
        a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
        assert "solid" in names
        for n in names:
            assert np.array_equal(a[n][...], b[n][...]), f"{n} differs from one device"
    forces = [np.genfromtxt(runs[k] / "forces.csv", delimiter=",", names=True) for k in runs]
    assert len(forces[0]) == 8
    for column in ("fx_lattice", "fy_lattice", "fz_lattice"):
        # sums over the links, in an order that follows the blocks: relative rounding
        np.testing.assert_allclose(
            forces[1][column],
            forces[0][column],
            rtol=FORCE_RTOL,
            atol=FORCE_RTOL * np.abs(forces[0]["fx_lattice"]).max(),
        )
