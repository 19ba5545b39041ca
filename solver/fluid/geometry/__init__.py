"""Solid bodies from triangle meshes and analytic shapes, on the lattice (host-side NumPy).

- ``mesh``: load STL/OBJ/PLY files, check them (closed, consistently wound, outward), place them.
- ``raster``: the scan-conversion of a mesh onto rays along one axis (shared by both passes).
- ``voxels``: solid nodes by signed ray crossings, Bouzidi link fractions by sheared rays.
- ``sphere``: the exact sphere, the reference for the mesh voxeliser.
"""

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
    MeshError,
    count_links,
    mesh_link_fractions,
    solid_mask,
)

__all__ = [
    "FORMATS",
    "UNITS",
    "Links",
    "MeshError",
    "Placement",
    "TriangleMesh",
    "check_closed",
    "count_links",
    "load_mesh",
    "mesh_link_fractions",
    "solid_mask",
    "sphere_link_fractions",
    "sphere_mask",
]
