"""Bodies in a fluid case: the scene of ``coupling.scene`` added to duct, taylor_green, ... .

The fluid case is built as it would be alone (its units, walls, forcing, inlets and its own
diagnostics); the scene's spheres (SI, in the case's coordinates: node i at origin + (i + 1/2) dx)
move in it by PSM. Contact planes: each face of the grid whose outer node layer is solid
throughout (a wall of the case) is a plane half-way between that layer and the first fluid
node, as the fluid's half-way bounce-back sees it; faces without such a layer (periodic, open)
have no plane, and a sphere that leaves through them is counted in run.json
(``outside_domain``): it crosses a periodic face in the fluid's eyes (its cover wraps), while its
contacts stay within the domain, and leaves the fluid through an inlet or outlet (no wrap).

On a 2D lattice (D2Q9: poiseuille, cavity, cylinder) the scene's spheres are disks in the plane
z = 0, cylinders of ``DISK_DEPTH`` (solver.coupling.box.planar_bodies), held in the plane; the
default gravity is then 9.81 m/s^2 down y.

Refused before anything is traced (one-line ConfigError naming ``coupling.scene.<key>``): a
plane in the scene, a sphere or clump member not wholly inside the fluid's walls or over a
solid node of the case (an obstacle), overlapping bodies, an unknown wall material; on a 2D
lattice a clump, a centre, velocity or gravity out of the plane, a spin about x or y.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from solver.bodies.packings import member_centres
from solver.bodies.scene_case import scene_of
from solver.coupling.box import couple, plane_slab, wall_faces, with_planes
from solver.coupling.case import SceneCase, scene_source_name
from solver.errors import ConfigError
from solver.fluid.cases import build_case
from solver.fluid.cases.base import Case

if TYPE_CHECKING:
    from solver.config import RunConfig

PREFIX = "coupling.scene"


def check_clear_of_solid(
    case: Case, centres: np.ndarray, radii: np.ndarray, owner: np.ndarray | None = None
) -> None:
    """ConfigError for the first sphere (centres (m, 3) m, radii (m,) m, owner (m,) the index
    of its body in the scene, None: its own) that covers a solid node of the case inside its
    walls (an obstacle): PSM would blend it into the wall."""
    solid = case.setup.solid
    if solid is None:
        return
    inner = solid.copy()
    for axis, n in enumerate(solid.shape):  # the wall layers themselves are planes
        for layer in (0, n - 1):
            if np.take(solid, layer, axis=axis).all():
                index = [slice(None)] * solid.ndim
                index[axis] = layer
                inner[tuple(index)] = False
    nodes = np.argwhere(inner)
    if nodes.size == 0:
        return
    points = np.asarray(case.origin) + (nodes + 0.5) * case.units.dx
    for k, (c, r) in enumerate(zip(centres, radii, strict=True)):
        if np.any(np.sum((points - c[: solid.ndim]) ** 2, axis=1) < r * r):
            i = k if owner is None else int(owner[k])
            raise ConfigError(
                f"{PREFIX}.bodies[{i}].position", [float(v) for v in c],
                f"a sphere of radius {r:g} m clear of the case's solid nodes (its obstacle)",
            )  # fmt: skip


def check_in_plane(scene, gravity: tuple[float, float, float]) -> None:
    """ConfigError unless the scene's bodies are disks in the plane z = 0 of a 2D fluid: single
    spheres centred at z = 0, moving in the plane and spinning about z only, under a gravity in
    the plane (the step holds them there; it must not quietly drop a component)."""
    if gravity[2] != 0.0:
        raise ConfigError(
            f"{PREFIX}.gravity", list(gravity), "[gx, gy, 0] on a 2D lattice (y up: [0, -9.81, 0])"
        )
    for i, body in enumerate(scene.bodies):
        if body.shape != "sphere":
            raise ConfigError(
                f"{PREFIX}.bodies[{i}].shape", body.shape, "sphere (a disk) on a 2D lattice"
            )
        out_of_plane = {
            "position": (abs(body.position[2]), "z = 0 (the plane of a 2D fluid)"),
            "velocity": (abs(body.velocity[2]), "a z component 0 on a 2D lattice"),
            "angular_velocity": (
                np.abs(body.angular_velocity[:2]).max(),
                "x and y components 0 on a 2D lattice (a disk spins about z)",
            ),
        }
        for key, (size, allowed) in out_of_plane.items():
            if size != 0.0:
                value = [float(v) for v in getattr(body, key)]
                raise ConfigError(f"{PREFIX}.bodies[{i}].{key}", value, allowed)


def build_scene_in_fluid(config: RunConfig):
    """The CoupledCase of a fluid case with the bodies of ``coupling.scene``."""
    fluid_case = build_case(config)
    if fluid_case.setup.mirror_axes:
        # a body near a symmetry plane would need its mirror image in the coupling too
        raise ConfigError(
            "case.walls",
            config.case.walls,
            "periodic or no_slip with bodies in the fluid (coupling.scene)",
            hint="symmetry planes mirror the fluid only",
        )
    spec = config.coupling.scene
    scene = scene_of(spec, PREFIX)
    planar = fluid_case.setup.lattice.d == 2
    gravity = spec.gravity or ((0.0, -9.81, 0.0) if planar else (0.0, 0.0, -9.81))
    planes, lower, upper = wall_faces(fluid_case)
    if planar:
        check_in_plane(scene, gravity)
        lower, upper = plane_slab(scene, lower, upper)
    full = with_planes(scene, planes, lower, upper, spec.wall_material, PREFIX)
    check_clear_of_solid(fluid_case, *member_centres(scene))
    units = fluid_case.units
    nu = (fluid_case.tau - 0.5) / 3.0 * units.dx**2 / units.dt  # the case's viscosity, m^2/s
    parts = couple(
        config, fluid_case, full, tuple(gravity), nu * units.rho0, lower, upper, prefix=PREFIX
    )
    return parts.case(
        SceneCase, fluid_case.name, None,
        source=scene_source_name(spec), wall_planes=len(planes),
        **({"vertical_axis": 1} if planar else {}),
    )  # fmt: skip
