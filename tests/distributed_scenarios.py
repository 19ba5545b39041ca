"""Small problems that exercise every boundary kind, for 1-device vs N-device equality checks.

Each scenario is a ``FluidSetup`` plus initial fields, built on the host with NumPy:
- ``periodic``: every edge periodic, a random smooth-ish velocity field and a body force;
- ``channel``: walls on the low and high y faces, the high one moving (Ladd), a velocity inlet
  on the low x face and a pressure outlet on the high x face, and a square obstacle whose force
  is measured (half-way bounce-back);
- ``curved``: the same channel with resting walls and a round obstacle with interpolated
  (Bouzidi) bounce-back. Its link fractions are random in [0.25, 0.75]: meaningless physically,
  but they exercise the same code path as a real curved wall;
- ``open``: the channel with the link-wise inlet on a ramped schedule, the convective outlet
  (which reads the previous step's face) and a sponge layer (a random added tau per cell).
In 3D the z faces are periodic. Two more periodic boxes with a body force exercise the robust
collision operators (``COLLISION_SCENARIOS``, run where their lattice allows): ``kbc`` (D2Q9,
D3Q27) and ``regularized`` (every lattice, with the Smagorinsky model). ``fp16`` is the channel
with float16 storage of the populations (``STORAGE_SCENARIOS``): 16-bit ghost buffers and halo
messages, encoded and decoded in every step. ``mirror`` is the curved-wall channel without its
walls, with symmetry planes on both faces of every axis but x (``FluidSetup.mirror_axes``) and
the obstacle centred on the low y plane, so that links cross into its mirror image; meshes for it
split x only (a mesh splitting a mirrored axis is refused).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kernels.lattices import LATTICES
from solver.fluid.setup import BodyForce, FluidSetup, InflowSchedule, OpenBoundary

SCENARIOS = ("periodic", "channel", "curved", "open")
# symmetry planes (FluidSetup.mirror_axes) on y (and z): meshes splitting x only
MIRROR_SCENARIOS = ("mirror",)
COLLISION_SCENARIOS = ("kbc", "regularized")
# scenario -> (the scenario it stores, storage dtype)
STORAGE_SCENARIOS = {"fp16": ("channel", "float16")}
SHAPES = {2: (16, 12), 3: (8, 8, 4)}
# the wall rules and the force run on boxes of the block in these scenarios even where the
# boxes cover most of these small blocks (boundary_rules.DENSE_FRACTION): the boxes, which every
# shard takes as the union over the blocks, are compared across decompositions too
BOXED = ("curved", "open")


def scenario(name: str, lattice_name: str, dtype: str = "float32"):
    """(setup, density (*shape), velocity (d, *shape)) for a scenario on a lattice."""
    if name in STORAGE_SCENARIOS:
        base, storage = STORAGE_SCENARIOS[name]
        setup, density, velocity = scenario(base, lattice_name, dtype)
        return dataclasses.replace(setup, storage=storage), density, velocity
    lattice = LATTICES[lattice_name]
    d = lattice.d
    shape = SHAPES[d]
    rng = np.random.default_rng(7)
    density = 1.0 + 0.01 * rng.standard_normal(shape)
    velocity = 0.02 * rng.standard_normal((d, *shape))
    common = dict(lattice=lattice, shape=shape, omega=1.6, dtype=dtype, collision="trt")
    if name == "periodic":  # with the Smagorinsky model: its rate is local to each cell
        force = BodyForce(constant=(1e-5,) + (0.0,) * (d - 1))
        les = dict(les="smagorinsky", les_cs=0.17)
        return FluidSetup(**common, **les, body_force=force), density, velocity
    if name in COLLISION_SCENARIOS:  # cell-local like any collision, but long expressions
        force = BodyForce(constant=(1e-5,) + (0.0,) * (d - 1))
        extra = dict(les="smagorinsky", les_cs=0.17) if name == "regularized" else {}
        common["collision"] = name
        return FluidSetup(**common, **extra, body_force=force), density, velocity

    index = np.indices(shape)
    solid = (index[1] == 0) | (index[1] == shape[1] - 1)
    center = [n / 2 - 0.5 for n in shape]
    if name == "mirror":  # symmetry planes on every axis but x, the obstacle across the low y one
        solid = np.zeros(shape, bool)
        center[1] = -0.5
    if name == "channel":
        obstacle = (np.abs(index[0] - center[0]) < 1.5) & (np.abs(index[1] - center[1]) < 1.5)
    else:
        r2 = (index[0] - center[0]) ** 2 + (index[1] - center[1]) ** 2
        if d == 3:
            r2 = r2 + (index[2] - center[2]) ** 2
        obstacle = r2 < 2.5**2
    solid = solid | obstacle
    velocity = np.where(solid[None], 0.0, velocity)
    face = (d, *shape[1:])
    inlet = np.zeros(face)
    inlet[0] = 0.03
    inlet[0][[0, -1]] = 0.0  # wall nodes on the inlet face (face axis 0 is y)
    geometry = dict(
        solid=solid,
        obstacle=obstacle,
        open_boundaries=(
            OpenBoundary(axis=0, side="low", kind="velocity", velocity=inlet),
            OpenBoundary(axis=0, side="high", kind="pressure", density=1.0),
        ),
    )
    if name == "open":
        geometry["open_boundaries"] = (
            OpenBoundary(
                axis=0,
                side="low",
                kind="velocity_bounce_back",
                velocity=inlet,
                schedule=InflowSchedule(ramp_steps=4.0),
            ),
            OpenBoundary(axis=0, side="high", kind="convective", density=1.0),
        )
        geometry["sponge"] = rng.uniform(0.0, 0.3, shape)
    elif name == "channel":
        wall_velocity = np.zeros((d, *shape))
        wall_velocity[0][index[1] == shape[1] - 1] = 0.04
        geometry["wall_velocity"] = wall_velocity
    else:
        geometry["wall_distance"] = rng.uniform(0.25, 0.75, (lattice.q, *shape))
    if name == "mirror":
        geometry["mirror_axes"] = tuple(range(1, d))
        inlet[0] = 0.03
    return FluidSetup(**common, **geometry), density, velocity
