"""Solid bodies from triangle meshes and analytic shapes, on the lattice (host-side NumPy).

- ``mesh``: load STL/OBJ/PLY files, check them (closed, consistently wound, outward), place them.
- ``raster``: the scan-conversion of a mesh onto rays along one axis (shared by both passes).
- ``columns``: a mesh's crossings of every column of nodes, sorted: its solid nodes on any box.
- ``voxels``: solid nodes by signed ray crossings, Bouzidi link fractions by sheared rays.
- ``sphere``: the exact sphere, the reference for the mesh voxeliser.
"""

from solver.fluid.geometry.columns import ColumnCrossings, MeshError
from solver.fluid.geometry.mesh import (
    FORMATS,
    UNITS,
    Placement,
    TriangleMesh,
    check_closed,
    load_mesh,
)
from solver.fluid.geometry.sphere import sphere_link_fractions, sphere_mask
from solver.fluid.geometry.voxels import (
    Links,
    count_links,
    mesh_link_fractions,
    mesh_links,
    solid_mask,
)

__all__ = [
    "FORMATS",
    "ColumnCrossings",
    "UNITS",
    "Links",
    "MeshError",
    "Placement",
    "TriangleMesh",
    "check_closed",
    "count_links",
    "load_mesh",
    "mesh_link_fractions",
    "mesh_links",
    "solid_mask",
    "sphere_link_fractions",
    "sphere_mask",
]
