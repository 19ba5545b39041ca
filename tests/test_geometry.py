"""case=geometry: mesh loading and checks, the voxeliser and link fractions against the exact
sphere, the moment kernel, the errors a user sees, and one tiny run through the CLI."""

from __future__ import annotations

import json

import h5py
import jax.numpy as jnp
import numpy as np
import pytest
import trimesh
from solver_cli import FAST_COMPILE, ROOT, run_solver

from kernels.boundaries import momentum_exchange, momentum_exchange_moment
from kernels.lattices import D3Q19, D3Q27
from solver.api import compose_config
from solver.errors import ConfigError
from solver.fluid.cases import build_case
from solver.fluid.cases.geometry import whole_periods
from solver.fluid.geometry import (
    MeshError,
    Placement,
    TriangleMesh,
    check_closed,
    load_mesh,
    mesh_link_fractions,
    solid_mask,
    sphere_link_fractions,
    sphere_mask,
)
from solver.fluid.geometry.shapes import icosphere, torus_knot
from solver.output.fields import check_xdmf

SPHERE_STL = ROOT / "data" / "meshes" / "sphere.stl"
TREFOIL_OBJ = ROOT / "data" / "meshes" / "trefoil.obj"
# rounding slack on distances compared with the chordal bound (cells)
ROUNDING = 1e-9


def chordal_bound(mesh: TriangleMesh, radius: float) -> float:
    """How far inside its sphere a mesh with vertices on the sphere can lie: the largest
    triangle's circumradius rho gives R - sqrt(R^2 - rho^2) (h^2 / (6 R) for equilateral
    triangles of edge h)."""
    a, b, c = (mesh.vertices[mesh.faces[:, k]] for k in range(3))
    ab, bc, ca = (np.linalg.norm(u - v, axis=1) for u, v in ((a, b), (b, c), (c, a)))
    area = 0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1)
    rho = float(np.max(ab * bc * ca / (4.0 * area)))
    return radius - np.sqrt(radius**2 - rho**2)


@pytest.fixture(scope="module")
def sphere_on_grid():
    """A 5120-triangle sphere of radius 9.3 cells, off-centre in a 28^3 grid (index units)."""
    radius, center = 9.3, np.array([13.37, 14.21, 13.05])
    mesh = icosphere(radius, 4)
    vertices = mesh.vertices + center
    return mesh, vertices, center, radius, (28, 28, 28)


def test_solid_nodes_match_the_exact_sphere_away_from_the_surface(sphere_on_grid):
    mesh, vertices, center, radius, shape = sphere_on_grid
    bound = chordal_bound(mesh, radius)
    solid = solid_mask(vertices, mesh.faces, shape)
    exact = sphere_mask(center, radius, shape)
    distance = np.linalg.norm(np.indices(shape) - center[:, None, None, None], axis=0)
    differ = solid != exact
    # the mesh lies inside the sphere: only nodes in the band [R - bound, R] may differ, and
    # there they are fluid for the mesh, solid for the sphere
    assert np.all(distance[differ] >= radius - bound - ROUNDING)
    assert np.all(distance[differ] <= radius + ROUNDING)
    assert not np.any(solid & ~exact)
    band = (distance >= radius - bound) & (distance <= radius)
    assert differ.sum() <= band.sum()
    assert solid.sum() > 0.9 * (4.0 / 3.0) * np.pi * radius**3


@pytest.mark.parametrize("lattice", [D3Q19, D3Q27], ids=lambda lat: lat.name)
def test_link_fractions_match_the_exact_sphere_within_the_chordal_error(sphere_on_grid, lattice):
    mesh, vertices, center, radius, shape = sphere_on_grid
    bound = chordal_bound(mesh, radius)
    solid = solid_mask(vertices, mesh.faces, shape)
    links = mesh_link_fractions(vertices, mesh.faces, lattice.c, solid)
    assert links.missing == 0 and len(links) > 1000
    assert np.all((links.fraction > 0.0) & (links.fraction <= 1.0))
    c = lattice.c[links.direction].astype(float)
    node = np.stack(np.unravel_index(links.node, shape), axis=1)
    wall = node + links.fraction[:, None] * c
    r = np.linalg.norm(wall - center, axis=1)
    # every wall point lies on the mesh, so between the sphere and the sphere shrunk by bound
    assert np.all((r >= radius - bound - ROUNDING) & (r <= radius + ROUNDING))
    # against the exact fractions on the same links: the gap along the link is the radial gap
    # over cos(angle to the normal); compare where that angle is not grazing
    exact = sphere_link_fractions(center, radius, lattice.c, solid)
    key_mesh = links.node * lattice.q + links.direction
    key_exact = exact.node * lattice.q + exact.direction
    common, im, ie = np.intersect1d(key_mesh, key_exact, return_indices=True)
    assert len(common) == len(links) == len(exact)
    normal = (wall[im] - center) / r[im, None]
    cosine = np.abs(np.einsum("ij,ij->i", normal, c[im])) / np.linalg.norm(c[im], axis=1)
    gap = np.abs(links.fraction[im] - exact.fraction[ie]) * np.linalg.norm(c[im], axis=1)
    steep = cosine > 0.3
    assert steep.mean() > 0.5
    assert np.all(gap[steep] * cosine[steep] <= 1.05 * bound + ROUNDING)


def test_rotating_the_mesh_by_90_degrees_rotates_the_solid_nodes():
    """About x: the voxeliser's rays (along z) meet the body from another side."""
    knot = torus_knot()
    n = 40
    c = 0.5 * (n - 1)
    scale = 0.8 * n / float(np.ptp(knot.vertices, axis=0).max())
    place = Placement(scale=scale, translation=(c, c, c))
    turned = Placement(scale=scale, rotation=(90.0, 0.0, 0.0), translation=(c, c, c))
    a, b = place.apply(knot), turned.apply(knot)
    solid = solid_mask(a.vertices, a.faces, (n, n, n))
    rotated = solid_mask(b.vertices, b.faces, (n, n, n))
    # x' = Rx(90) x: (x, y, z) -> (x, -z, y), so node (i, j, k) of the turned body is node
    # (i, k, n - 1 - j) of the original
    i, j, k = np.indices((n, n, n))
    np.testing.assert_array_equal(rotated, solid[i, k, n - 1 - j])
    assert 500 < solid.sum() < 0.5 * n**3
    # the link fractions turn with it: direction c of the turned body is R^-1 c of the original
    links = mesh_link_fractions(a.vertices, a.faces, D3Q19.c, solid)
    turned_links = mesh_link_fractions(b.vertices, b.faces, D3Q19.c, rotated)
    np.testing.assert_allclose(
        np.sort(turned_links.fraction), np.sort(links.fraction), rtol=0, atol=1e-9
    )


def test_every_format_loads_the_same_surface(tmp_path):
    sphere = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    files = {
        "ascii.stl": sphere.export(file_type="stl_ascii"),
        "binary.stl": sphere.export(file_type="stl"),
        "mesh.obj": sphere.export(file_type="obj"),
        "mesh.ply": sphere.export(file_type="ply"),
    }
    for name, data in files.items():
        path = tmp_path / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        mesh = load_mesh(path)
        check_closed(mesh)
        assert mesh.triangles == len(sphere.faces), name
        assert mesh.volume == pytest.approx(sphere.volume, rel=1e-6), name


def test_placement_converts_units_then_scales_rotates_and_translates():
    mesh = TriangleMesh(np.array([[10.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), np.zeros((0, 3), int))
    placed = Placement("mm", 2.0, (0.0, 0.0, 90.0), (1.0, 2.0, 3.0)).apply(mesh)
    np.testing.assert_allclose(placed.vertices, [[1.0, 2.02, 3.0], [1.0, 2.0, 3.0]], atol=1e-12)


def _broken(kind: str) -> TriangleMesh:
    sphere = icosphere(1.0, 2)
    v, f = sphere.vertices, sphere.faces
    if kind == "open":
        return TriangleMesh(v, f[3:])
    if kind == "flipped":
        return TriangleMesh(v, f[:, ::-1].copy())
    if kind == "winding":
        f = f.copy()
        f[:10] = f[:10, ::-1]
        return TriangleMesh(v, f)
    raise ValueError(kind)


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("open", "not watertight: 9 open edges"),
        ("flipped", "inside-out"),
        ("winding", "inconsistent winding"),
    ],
)
def test_checks_name_the_problem(kind, needle):
    with pytest.raises(MeshError, match=needle):
        check_closed(_broken(kind))


def test_overlapping_shells_are_reported_by_the_voxeliser():
    """Two overlapping closed spheres in one mesh: nodes in both are enclosed twice."""
    sphere = icosphere(5.0, 2)
    v = np.concatenate([sphere.vertices + 10.0, sphere.vertices + 13.0])
    f = np.concatenate([sphere.faces, sphere.faces + len(sphere.vertices)])
    check_closed(TriangleMesh(v, f))  # closed and consistently wound: only the voxeliser sees it
    with pytest.raises(MeshError, match="winding number other than 0 or 1"):
        solid_mask(v, f, (24, 24, 24))


def test_moment_kernel_equals_the_sum_over_links():
    rng = np.random.default_rng(1)
    shape = (5, 4, 3)
    lat = D3Q19
    post = [jnp.asarray(rng.random(shape)) for _ in range(lat.q)]
    new = [jnp.asarray(rng.random(shape)) for _ in range(lat.q)]
    incoming = [None] + [jnp.asarray(rng.random(shape) < 0.3) for _ in range(lat.q - 1)]
    center = np.array([1.3, 2.1, 0.4])
    arm = [jnp.asarray(np.indices(shape)[a] - center[a]) for a in range(3)]
    moment = np.array(momentum_exchange_moment(lat, post, new, incoming, arm))
    force = np.array(momentum_exchange(lat, post, new, incoming))
    expected, total = np.zeros(3), np.zeros(3)
    for i in range(1, lat.q):
        j = int(lat.opposite[i])
        for node in np.argwhere(np.asarray(incoming[i])):
            f = lat.c[j] * float(post[j][tuple(node)] + new[i][tuple(node)])
            expected += np.cross(node - center, f)
            total += f
    np.testing.assert_allclose(moment, expected, rtol=1e-12)
    np.testing.assert_allclose(force, total, rtol=1e-12)


def test_whole_periods_remove_the_acoustic_ringing_from_the_mean():
    """The drag rings at the tunnel's quarter-wave period around its steady value; the mean
    over whole periods recovers that value where a plain window mean does not."""
    steps = np.arange(3000)
    drag = 1.2 + 0.15 * np.sin(2.0 * np.pi * steps / 940.0 + 0.3)
    first, last, periods = whole_periods(drag)
    assert periods == 2 and abs(last - first - 2 * 940) <= 1
    assert abs(drag[first:last].mean() - 1.2) < 1e-4 < abs(drag.mean() - 1.2)
    assert whole_periods(np.full(50, 1.1)) == (0, 50, 0)


SMALL = [
    "case=geometry",
    "fluid=d3q19",
    "case.length=0.6",
    "case.width=0.3",
    "case.height=0.3",
    "case.translation=[0.2,0.15,0.15]",
]


def test_stl_sphere_and_exact_sphere_give_the_same_lattice_body():
    """The sample STL (20480 triangles, chordal error 1e-4 D) against the exact sphere at
    D = 12 cells: the same solid nodes, the link fractions within the chordal error."""
    cases = {
        mesh: build_case(compose_config(SMALL + [f"case.mesh={mesh}", "case.resolution=12"]))
        for mesh in (str(SPHERE_STL), "sphere")
    }
    stl, exact = cases[str(SPHERE_STL)].setup, cases["sphere"].setup
    np.testing.assert_array_equal(stl.solid, exact.solid)
    np.testing.assert_array_equal(stl.obstacle, exact.obstacle)
    # radius 6 cells, edges ~0.23 cells: the mesh lies within 0.003 cells of the sphere, which
    # a grazing link (cosine ~0.1) stretches to ~0.03 of a link
    np.testing.assert_allclose(stl.wall_distance, exact.wall_distance, atol=0.03)
    assert np.abs(stl.wall_distance - exact.wall_distance).mean() < 1e-4
    info = cases[str(SPHERE_STL)].info
    assert info["triangles"] == 20480 and info["links_without_crossing"] == 0
    assert info["solid_nodes"] == int(exact.obstacle.sum())


def test_no_slip_sides_add_wall_layers_outside_the_tunnel():
    case = build_case(compose_config(SMALL + ["case.resolution=4", "case.walls=no_slip"]))
    setup = case.setup
    assert setup.shape == (24, 14, 14) and case.origin[1:] == (-0.025, -0.025)
    walls = setup.solid & ~setup.obstacle
    assert walls[:, 0, :].all() and walls[:, -1, :].all() and walls[:, :, 0].all()
    assert not walls[:, 1:-1, 1:-1].any()
    inlet = setup.open_boundaries[0].velocity[0]
    assert np.all(inlet[0, :] == 0.0) and np.all(inlet[1:-1, 1:-1] > 0.0)


@pytest.mark.parametrize(
    ("overrides", "key", "needle"),
    [
        (["case.mesh=data/meshes/nothing_here.stl"], "case.mesh", "no such file"),
        (["case.mesh=pyproject.toml"], "case.mesh", "unsupported format '.toml'"),
        (["case.translation=[0.03,0.15,0.15]"], "case.translation", "inlet (x = 0)"),
        (["case.translation=[0.2,0.15,0.27]"], "case.translation", "side z = height"),
        (["case.scale=4"], "case.translation", "too close"),
        (["case.units=inch"], "case.units", "m | cm | mm"),
        (["case.rotation=[0,90]"], "case.rotation", "3 angles"),
        (["fluid=d2q9"], "fluid.lattice", "3D lattice"),
    ],
)
def test_bad_geometry_configs_name_the_key(overrides, key, needle):
    with pytest.raises(ConfigError) as info:
        build_case(compose_config(SMALL + ["case.resolution=4", *overrides]))
    message = str(info.value)
    assert "\n" not in message and message.startswith(key) and needle in message


def _mesh_file(folder, kind: str):
    """A broken mesh file and the words its error must hold."""
    path = folder / f"{kind}.stl"
    if kind == "garbage":
        path.write_bytes(b"solid nothing\nthis is not an stl file\n" * 3)
        return path, "holds no triangles"
    broken = _broken(kind)
    trimesh.Trimesh(broken.vertices, broken.faces, process=False).export(path)
    return path, {"open": "9 open edges", "flipped": "inside-out"}[kind]


MESH_FILE = ["case.units=m", "case.scale=0.05"]


@pytest.mark.parametrize("kind", ["flipped", "garbage"])
def test_bad_mesh_files_name_the_problem(tmp_path, kind):
    path, needle = _mesh_file(tmp_path, kind)
    with pytest.raises(ConfigError) as info:
        build_case(compose_config(SMALL + [f"case.mesh={path}", *MESH_FILE]))
    message = str(info.value)
    assert "\n" not in message and message.startswith("case.mesh") and needle in message


def test_open_mesh_exits_2_with_one_line(tmp_path):
    path, needle = _mesh_file(tmp_path, "open")
    result = run_solver(
        SMALL + [f"case.mesh={path}", *MESH_FILE, f"hydra.run.dir={tmp_path}"], timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "case.mesh" in lines[0] and needle in lines[0]


def test_tiny_tunnel_run_writes_coefficients_and_the_body(tmp_path):
    """24 x 12 x 12 D3Q19, the STL sphere at 4 cells per diameter, 50 steps."""
    result = run_solver(
        SMALL + ["case.resolution=4", "case.ramp_time=0", "steps=50", "chunk=50",
                 "output.every=50", "checkpoint=none", f"hydra.run.dir={tmp_path}"],
        # no LLVM optimisation: what is checked here is the run's outputs, not its speed
        {"XLA_FLAGS": FAST_COMPILE},
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["shape"] == [24, 12, 12] and summary["status"] == "completed"
    diag = summary["diagnostics"]
    # impulsive start, 50 steps: the drag is far from converged, but positive and bounded
    assert 0.3 < diag["cd_mean"] < 10.0
    assert abs(diag["cy_mean"]) < 1e-3 * diag["cd_mean"]  # symmetric body, symmetric flow
    for key in ("cz_mean", "cmx_mean", "cmy_mean", "cmz_mean"):
        assert np.isfinite(diag[key])
    assert diag["reynolds"] == pytest.approx(100.0)
    assert diag["solid_nodes"] > 0 and diag["boundary_links"] > diag["solid_nodes"]
    assert diag["voxelise_s"] >= 0.0 and diag["triangles"] == 20480
    forces = np.genfromtxt(tmp_path / "forces.csv", delimiter=",", names=True)
    assert len(forces) == 50
    assert {"fx_lattice", "mz_lattice", "cd", "cy", "cz", "cmx", "cmy", "cmz"} <= set(
        forces.dtype.names
    )
    assert forces["cd"][-1] == pytest.approx(diag["cd_last"], rel=1e-6)
    assert check_xdmf(tmp_path / "fields.xdmf") == []
    with h5py.File(tmp_path / "fields.h5", "r") as f:
        assert int(f["solid"][...].sum()) == diag["solid_nodes"]  # periodic sides: body only


def test_voxeliser_benchmark_reports_every_phase(tmp_path, capsys):
    from solver.bench.__main__ import main

    out = tmp_path / "geometry.json"
    assert main(["geometry", "--triangles", "3000", "--grid", "40", "--json", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row["triangles"] >= 2000 and row["grid"] == [40, 40, 40]
    assert row["solid_nodes"] > 0 and row["boundary_links"] > 0
    assert row["links_without_crossing"] == 0
    assert set(row["seconds"]) == {"check", "solid", "links", "dense"}
    assert "M nodes/s" in capsys.readouterr().out
