"""Overlap checks and packing generators for rigid-body scenes (host-side NumPy).

``check_overlaps`` finds sphere pairs (clump members included) that overlap, and spheres that
penetrate planes, by more than a tolerance, with a cell list: cells of the largest diameter, each
sphere compared only with the 27 cells around its own, so the cost grows linearly with the number of
spheres (10^5 spheres take about a second). The generators are deterministic given their seed and
return scenes that pass ``check_overlaps``: ``random_spheres_in_box`` by random sequential addition
(a grid of cells makes each trial cost O(1); the jamming limit of RSA is a packing fraction of about
0.38, Torquato et al., Phys. Rev. E 74, 061308, 2006), ``clump_lattice`` a rectangular lattice of
one clump shape with optionally jittered orientations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from solver.bodies.scene import BodySpec, Material, Scene, member_world_centres
from solver.errors import ConfigError


def member_centres(scene: Scene) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """World centres (m, 3), radii (m,) and owning ``scene.bodies`` index (m,) of every sphere."""
    bodies, _ = scene.arrays()
    centres = member_world_centres(
        bodies.position, bodies.orientation, bodies.member_body, bodies.member_offset
    )
    return centres, bodies.member_radius, bodies.body_index[bodies.member_body]


def overlapping_pairs(
    centres: np.ndarray, radii: np.ndarray, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs (i, j), i < j, of spheres of different owners that overlap, and the overlap (m).

    centres (m, 3), radii (m,), owner (m,): spheres with the same owner (one clump) never count.
    """
    n = len(radii)
    if n < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    cell = 2.0 * radii.max()
    coords = np.floor((centres - centres.min(0)) / cell).astype(np.int64)
    dims = coords.max(0) + 1
    keys = coords[:, 0] + dims[0] * (coords[:, 1] + dims[1] * coords[:, 2])
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    found_i, found_j, found_overlap = [], [], []
    for shift in itertools.product((-1, 0, 1), repeat=3):
        near = coords + np.array(shift)
        valid = ((near >= 0) & (near < dims)).all(1)
        near_keys = near[:, 0] + dims[0] * (near[:, 1] + dims[1] * near[:, 2])
        start = np.searchsorted(sorted_keys, near_keys, "left")
        counts = np.where(valid, np.searchsorted(sorted_keys, near_keys, "right") - start, 0)
        i = np.repeat(np.arange(n), counts)
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        j = order[np.repeat(start, counts) + within]
        keep = (j > i) & (owner[i] != owner[j])
        i, j = i[keep], j[keep]
        overlap = radii[i] + radii[j] - np.linalg.norm(centres[i] - centres[j], axis=1)
        hit = overlap > 0
        found_i.append(i[hit])
        found_j.append(j[hit])
        found_overlap.append(overlap[hit])
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_overlap)


def check_overlaps(scene: Scene, tolerance: float = 0.0, key_prefix: str = "bodies.scene") -> None:
    """Raise ``ConfigError`` if two bodies overlap, or a body penetrates a plane, by more than
    ``tolerance`` times the smaller radius; the message names both bodies and the overlap in m."""
    centres, radii, owner = member_centres(scene)
    _, planes = scene.arrays()
    i, j, overlap = overlapping_pairs(centres, radii, owner)
    limit = tolerance * np.minimum(radii[i], radii[j])
    bad = np.flatnonzero(overlap > limit)
    if bad.size:
        k = bad[np.argmax(overlap[bad])]
        raise ConfigError(
            f"{key_prefix}.bodies[{owner[i[k]]}]",
            f"overlaps {key_prefix}.bodies[{owner[j[k]]}] by {overlap[k]:.4g} m",
            f"an overlap <= {limit[k]:.4g} m ({tolerance:g} of the smaller radius)",
            hint=f"{bad.size} overlapping pair(s) in all",
        )
    for point, normal, plane in zip(planes.point, planes.normal, planes.body_index, strict=True):
        depth = radii - (centres - point) @ normal
        bad = np.flatnonzero(depth > tolerance * radii)
        if bad.size:
            k = bad[np.argmax(depth[bad])]
            raise ConfigError(
                f"{key_prefix}.bodies[{owner[k]}]",
                f"penetrates the plane {key_prefix}.bodies[{plane}] by {depth[k]:.4g} m",
                f"a penetration <= {tolerance * radii[k]:.4g} m ({tolerance:g} of the radius)",
                hint=f"{bad.size} sphere(s) penetrate that plane",
            )


def random_spheres_in_box(
    n: int,
    radius: float | tuple[float, float],
    box_lower: Sequence[float],
    box_upper: Sequence[float],
    material: Material,
    seed: int = 0,
    max_attempts: int = 1000,
    key_prefix: str = "bodies.scene.generator",
) -> Scene:
    """``n`` non-overlapping spheres inside the box, by random sequential addition.

    radius: one value (m) or a (min, max) range drawn uniformly, placed largest first. Each sphere
    gets up to ``max_attempts`` trial centres; a ``ConfigError`` says how many were placed and
    the packing fraction reached when one cannot be placed. Spheres lie wholly inside the box.
    A flat box (box_upper[2] == box_lower[2]) places the centres in that plane: disks for a 2D
    fluid, spread in x and y (the packing fraction is then the disks' area fraction).
    """
    lower, upper = np.asarray(box_lower, dtype=float), np.asarray(box_upper, dtype=float)
    r_min, r_max = (radius, radius) if np.isscalar(radius) else (float(radius[0]), float(radius[1]))
    if not 0 < r_min <= r_max:
        raise ConfigError(f"{key_prefix}.radius", radius, "> 0, as (min, max) with min <= max")
    flat = upper[2] == lower[2]
    spread = slice(0, 2) if flat else slice(0, 3)
    if not np.all(upper[spread] - lower[spread] > 2 * r_max):
        raise ConfigError(
            f"{key_prefix}.box_upper",
            np.asarray(box_upper).tolist(),
            f"more than one diameter ({2 * r_max:g} m) above box_lower on every axis"
            " (or equal on z: disks in that plane)",
        )
    rng = np.random.default_rng(seed)
    axes = np.array([1.0, 1.0, 0.0 if flat else 1.0])  # a flat box: centres on its plane
    radii = np.full(n, r_min) if r_min == r_max else np.sort(rng.uniform(r_min, r_max, n))[::-1]
    cell = 2.0 * r_max
    dims = np.ceil((upper - lower) / cell).astype(np.int64)
    capacity = int(min(n, (cell + 2 * r_min) ** 3 / (4 / 3 * math.pi * r_min**3) + 1))
    grid = np.full((*(dims + 2), capacity), -1, dtype=np.int64)  # one empty cell layer round it
    filled = np.zeros(dims + 2, dtype=np.int64)
    centres = np.zeros((n, 3))
    for k, r in enumerate(radii):
        for _ in range(max_attempts):
            x = rng.uniform(lower + r * axes, upper - r * axes)
            c = np.floor((x - lower) / cell).astype(np.int64) + 1
            near = grid[c[0] - 1 : c[0] + 2, c[1] - 1 : c[1] + 2, c[2] - 1 : c[2] + 2].ravel()
            near = near[near >= 0]
            if np.all(np.sum((centres[near] - x) ** 2, axis=1) >= (radii[near] + r) ** 2):
                break
        else:
            fraction = (
                math.pi * np.sum(radii[:k] ** 2) / np.prod(upper[:2] - lower[:2])
                if flat
                else 4 / 3 * math.pi * np.sum(radii[:k] ** 3) / np.prod(upper - lower)
            )
            raise ConfigError(
                f"{key_prefix}.n",
                n,
                f"at most about {k} spheres of radius {radius} in this box",
                hint=f"placed {k} of {n} (packing fraction {fraction:.3f}) before {max_attempts} "
                "attempts failed; enlarge the box or lower n or the radius",
            )
        centres[k] = x
        grid[tuple(c)][filled[tuple(c)]] = k
        filled[tuple(c)] += 1
    bodies = [
        BodySpec("sphere", material.name, radius=float(r), position=x)
        for r, x in zip(radii, centres, strict=True)
    ]
    return Scene({material.name: material}, bodies)


def clump_lattice(
    counts: Sequence[int],
    spacing: float | Sequence[float],
    clump_spheres: Sequence[tuple[float, Sequence[float]]],
    material: Material,
    orientation_jitter: float = 0.0,
    seed: int = 0,
    origin: Sequence[float] = (0.0, 0.0, 0.0),
    key_prefix: str = "bodies.scene.generator",
) -> Scene:
    """A counts[0] x counts[1] x counts[2] lattice of one clump shape, ``spacing`` (m) apart.

    clump_spheres: ((radius, body-frame offset (3,)), ...), re-centred on their volume-weighted
    centre. Each orientation is turned by a random angle in [0, orientation_jitter] (rad) about a
    random axis. The spacing must be at least the clump's bounding diameter on every axis.
    """
    radii = np.array([float(r) for r, _ in clump_spheres])
    offsets = np.array([o for _, o in clump_spheres], dtype=float).reshape(-1, 3)
    offsets -= radii**3 @ offsets / np.sum(radii**3)
    bound = np.max(np.linalg.norm(offsets, axis=1) + radii)
    step = np.broadcast_to(np.asarray(spacing, dtype=float), (3,))
    if not np.all(step >= 2 * bound):
        raise ConfigError(
            f"{key_prefix}.spacing", spacing, f">= the clump's bounding diameter {2 * bound:.4g} m"
        )
    rng = np.random.default_rng(seed)
    spheres = tuple((float(r), o) for r, o in zip(radii, offsets, strict=True))
    bodies = []
    for index in itertools.product(*(range(int(c)) for c in counts)):
        axis = rng.normal(size=3)
        angle = rng.uniform(0.0, orientation_jitter)
        axis /= np.linalg.norm(axis)
        orientation = np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis])
        position = np.asarray(origin, dtype=float) + step * np.array(index)
        bodies.append(
            BodySpec(
                "clump", material.name, spheres=spheres, position=position, orientation=orientation
            )
        )
    return Scene({material.name: material}, bodies)
