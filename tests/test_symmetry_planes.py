"""Symmetry planes (``FluidSetup.mirror_axes``): a half or quarter model equals the whole.

A channel (2D) or tunnel (3D) with an inlet, an outlet and a round obstacle with curved
(Bouzidi) walls, symmetric about the plane through the obstacle's centre and about the periodic
seam, from a symmetric start: the half (quarter) of it beside a symmetry plane through the
obstacle, with symmetry planes on both faces of the mirrored axes, must give the whole run's
populations there and half (a quarter of) its drag. The obstacle crosses the planes, so the
links across them (into the mirrored half of the body) are exercised too.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from solver_cli import FAST_COMPILE_OPTIONS

from kernels.lattices import LATTICES
from solver.api import compose_config
from solver.distributed.decomposition import choose_mesh
from solver.errors import ConfigError
from solver.fluid import boundary_rules
from solver.fluid.cases import build_case
from solver.fluid.padded import SINGLE, mirror_direction
from solver.fluid.setup import FluidSetup, OpenBoundary
from solver.fluid.step import initial_state, make_chunk, make_geometry

STEPS = 12
# float64 and the same arithmetic up to the order of the moment sums of mirrored cells
ATOL = 1e-13


def _link_fractions(lattice, solid, center, radius) -> np.ndarray:
    """(q, *shape) exact fractions of the links from fluid nodes into the ball (periodic)."""
    c = lattice.c
    out = np.full((lattice.q, *solid.shape), 0.5)
    index = np.indices(solid.shape).astype(float)
    rel = [index[a] - center[a] for a in range(lattice.d)]
    for i in range(1, lattice.q):
        target = np.roll(solid, tuple(-int(v) for v in c[i]), axis=tuple(range(lattice.d)))
        # |x - center + t c|^2 = R^2, the smaller root in (0, 1]
        a = float(np.dot(c[i], c[i]))
        b = 2.0 * sum(rel[k] * c[i, k] for k in range(lattice.d))
        cc = sum(r * r for r in rel) - radius**2
        t = (-b - np.sqrt(np.maximum(b * b - 4 * a * cc, 0.0))) / (2 * a)
        links = target & ~solid
        out[i][links] = np.clip(t[links], 1e-6, 1.0)
    return out


def _whole_and_part(lattice_name: str):
    lattice = LATTICES[lattice_name]
    d = lattice.d
    mirror = tuple(range(1, d))
    half = 4
    shape = (14,) + (2 * half,) * (d - 1)
    center = [5.0] + [half - 0.5] * (d - 1)  # on the plane between rows half - 1 and half
    index = np.indices(shape)
    solid = sum((index[a] - center[a]) ** 2 for a in range(d)) < 2.3**2
    part = (slice(None),) + (slice(half, None),) * (d - 1)

    # a random start on the part, mirrored into the rest of the whole (u reversed along the
    # mirrored axis), so that the whole is symmetric about both planes of every mirrored axis
    rng = np.random.default_rng(11)
    part_shape = tuple(shape[0:1]) + (half,) * (d - 1)
    density = 1.0 + 0.01 * rng.standard_normal(part_shape)
    velocity = 0.03 * rng.standard_normal((d, *part_shape))
    velocity[0] += 0.05
    whole_density, whole_velocity = density, velocity
    for a in mirror:
        flipped = np.flip(whole_velocity, axis=a + 1).copy()
        flipped[a] *= -1.0
        whole_velocity = np.concatenate([flipped, whole_velocity], axis=a + 1)
        whole_density = np.concatenate([np.flip(whole_density, axis=a), whole_density], axis=a)
    whole_velocity = np.where(solid[None], 0.0, whole_velocity)

    inlet = np.zeros((d, *shape[1:]))
    inlet[0] = 0.04
    common = dict(lattice=lattice, omega=1.7, dtype="float64", collision="trt")

    def setup(sl, mirror_axes):
        face = (slice(None),) + sl[1:]
        return FluidSetup(
            **common,
            shape=solid[sl].shape,
            solid=solid[sl],
            obstacle=solid[sl],
            wall_distance=_link_fractions(lattice, solid, center, 2.3)[(slice(None), *sl)],
            open_boundaries=(
                OpenBoundary(0, "low", "velocity", velocity=inlet[face]),
                OpenBoundary(0, "high", "characteristic", density=1.0),
            ),
            mirror_axes=mirror_axes,
        )

    everything = (slice(None),) * d
    return (
        (setup(everything, ()), whole_density, whole_velocity),
        (setup(part, mirror), whole_density[part], whole_velocity[(slice(None), *part)]),
        part,
    )


def _run(setup, density, velocity):
    # compiled without LLVM's optimisations (12 s against 19 s for D3Q19): the mirror planes
    # are a property of the XLA program, and the whole and the part round alike at any level
    chunk = jax.jit(make_chunk(setup), static_argnums=2, compiler_options=FAST_COMPILE_OPTIONS)
    state, forces = chunk(initial_state(setup, density, velocity), make_geometry(setup), STEPS)
    return np.asarray(state.populations), np.asarray(forces)


# the quarter model (two mirrored axes: their shared edge ghosts) covers what the 2D half does
@pytest.mark.parametrize("lattice_name", [pytest.param("D2Q9", marks=pytest.mark.long), "D3Q19"])
def test_half_and_quarter_models_equal_the_whole(lattice_name):
    (whole, rho, u), (part, part_rho, part_u), sl = _whole_and_part(lattice_name)
    d = whole.lattice.d
    f_whole, force_whole = _run(whole, rho, u)
    f_part, force_part = _run(part, part_rho, part_u)
    assert np.isfinite(f_whole).all()
    np.testing.assert_allclose(f_part, f_whole[(slice(None), *sl)], rtol=0, atol=ATOL)
    # the drag of the part is the whole's over the number of parts
    parts = 2 ** (d - 1)
    assert abs(force_whole[-1, 0]) > 1e-3
    np.testing.assert_allclose(force_part[:, 0] * parts, force_whole[:, 0], rtol=1e-10)


def test_mirror_ghosts_reflect_the_velocity_component_and_keep_the_rest():
    """The ghost of direction i beyond a symmetry plane holds the edge plane of the direction
    with that component reversed; the plan finds the links into the mirrored half of a body
    that crosses the plane (a periodic wrap would look at the far side)."""
    lattice = LATTICES["D3Q19"]
    c = lattice.c
    for i, axes in itertools.product(range(lattice.q), [(1,), (2,), (1, 2)]):
        j = mirror_direction(c, i, axes)
        expected = c[i].copy()
        expected[list(axes)] *= -1
        assert (c[j] == expected).all()
    shape = (6, 6, 6)
    solid = np.zeros(shape, bool)
    solid[2:4, 0, 2:4] = True  # a body cut by the low y plane, its other half mirrored
    setup = FluidSetup(lattice, shape, 1.2, solid=solid, mirror_axes=(1,))
    links = boundary_rules.linked_directions(setup, solid)
    periodic = boundary_rules.linked_directions(FluidSetup(lattice, shape, 1.2, solid=solid), solid)
    # fluid nodes at y = 0 beside the body pull from its mirror image along +y diagonals
    up_diagonal = [i for i in range(lattice.q) if c[i, 1] == 1 and c[i, 0] != 0]
    assert all(links[i] for i in up_diagonal)
    assert links != periodic or all(links)
    with pytest.raises(ValueError, match="mirror_axes"):
        FluidSetup(lattice, shape, 1.2, mirror_axes=(0,))
    assert boundary_rules.plan_boundaries(setup, SINGLE).wall_links == tuple(links)


def test_meshes_leave_the_mirrored_axes_whole():
    with pytest.raises(ConfigError) as err:
        choose_mesh([1, 2, 1], (32, 16, 16), 8, unsplit=(1, 2))
    assert err.value.key == "domain.mesh" and "symmetry planes (y, z)" in str(err.value)
    assert choose_mesh("pencil", (32, 16, 16), 4, unsplit=(1, 2)).mesh == (4, 1, 1)
    assert choose_mesh("pencil", (32, 16, 16), 4).mesh == (2, 2, 1)


TUNNEL = [
    "case=geometry", "fluid=d3q19", "fluid.collision=bgk", "case.resolution=8",
    "case.length=0.6",
]  # fmt: skip


@pytest.mark.parametrize("mesh", ["data/meshes/sphere.stl", "sphere"])
def test_quarter_tunnel_holds_a_quarter_of_the_whole_tunnels_body(mesh):
    """``case.walls=symmetry`` with the sphere centred on the y = 0 and z = 0 planes: the
    solid nodes and every link fraction (those across the planes, cast against the mesh
    itself, included) are the quarter of the periodic tunnel twice as wide and high."""
    whole = build_case(compose_config(TUNNEL + [
        f"case.mesh={mesh}", "case.width=0.4", "case.height=0.4",
        "case.translation=[0.2,0.2,0.2]",
    ]))  # fmt: skip
    quarter = build_case(compose_config(TUNNEL + [
        f"case.mesh={mesh}", "case.width=0.2", "case.height=0.2",
        "case.translation=[0.2,0.0,0.0]", "case.walls=symmetry",
    ]))  # fmt: skip
    part = (slice(None), slice(16, None), slice(16, None))
    assert quarter.setup.mirror_axes == (1, 2)
    np.testing.assert_array_equal(
        np.asarray(quarter.setup.solid), np.asarray(whole.setup.solid)[part]
    )
    np.testing.assert_array_equal(
        np.asarray(quarter.setup.wall_distance),
        np.asarray(whole.setup.wall_distance)[(slice(None), *part)],
    )
    assert 4 * quarter.info["boundary_links"] == whole.info["boundary_links"] > 0
    assert 4 * quarter.info["solid_nodes"] == whole.info["solid_nodes"]
    assert quarter.info["links_without_crossing"] == 0
