"""Cell-list neighbour search against an O(n^2) brute-force reference, and its overflow reports.

Pair sets must match exactly: both sides compare the same squared distances against the same
squared reach, and random positions put no pair on the boundary to round-off.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.neighbor_search import (
    NEIGHBOR_OFFSETS,
    CellGrid,
    bin_bodies,
    cell_index,
    neighbor_pairs,
    pair_list,
)

SKIN = 0.05
BOX = 4.0


def brute_force_pairs(positions, radii, active, skin):
    """Reference: every pair i < j of active bodies with |x_j - x_i| <= r_i + r_j + skin."""
    x = np.asarray(positions, np.float64)
    r = np.asarray(radii, np.float64)
    act = np.asarray(active, bool)
    separation = x[None, :, :] - x[:, None, :]
    d2 = np.sum(separation * separation, axis=-1)
    reach = r[:, None] + r[None, :] + skin
    close = (d2 <= reach * reach) & act[:, None] & act[None, :]
    i, j = np.nonzero(np.triu(close, k=1))
    return set(zip(i.tolist(), j.tolist(), strict=True))


def table_pairs(pairs):
    i, j, valid = (np.asarray(a) for a in pair_list(pairs))
    return set(zip(i[valid].tolist(), j[valid].tolist(), strict=True))


def scene(seed, n=300, box=BOX):
    """Random (overlapping allowed) polydisperse spheres in [0, box]^3, float64."""
    rng = np.random.default_rng(seed)
    positions = rng.uniform(0.0, box, (n, 3))
    radii = rng.uniform(0.1, 0.2, n)
    return jnp.asarray(positions), jnp.asarray(radii)


def grid_for(radii, capacity=16, max_neighbors=32, lower=(0.0, 0.0, 0.0), upper=(BOX,) * 3):
    reach = 2 * float(np.max(radii)) + SKIN
    return CellGrid.covering(lower, upper, reach, capacity, max_neighbors)


def search(grid, positions, radii, active):
    cells = bin_bodies(grid, positions, active)
    return cells, neighbor_pairs(grid, cells, positions, radii, active, SKIN)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pairs_equal_brute_force(seed):
    positions, radii = scene(seed)
    active = jnp.ones(positions.shape[0], bool)
    grid = grid_for(radii)
    cells, pairs = search(grid, positions, radii, active)
    assert not bool(cells.overflowed) and not bool(pairs.overflowed)
    expected = brute_force_pairs(positions, radii, active, SKIN)
    assert len(expected) > 100  # the scene is dense enough to test something
    assert table_pairs(pairs) == expected
    np.testing.assert_array_equal(
        np.bincount([i for i, _ in expected], minlength=positions.shape[0]), pairs.count
    )


def test_table_rows_ascending_with_padding_last():
    positions, radii = scene(3)
    active = jnp.ones(positions.shape[0], bool)
    _, pairs = search(grid_for(radii), positions, radii, active)
    partners = np.asarray(pairs.partners)
    for row, c in zip(partners, np.asarray(pairs.count), strict=True):
        assert np.all(np.diff(row[:c]) > 0) and np.all(row[c:] == -1)


def test_bodies_outside_the_box_are_clamped_without_losing_pairs():
    # The grid covers only the middle of the scene: many bodies lie outside and are clamped.
    positions, radii = scene(4, n=200)
    active = jnp.ones(positions.shape[0], bool)
    grid = grid_for(radii, capacity=64, lower=(1.0, 1.0, 1.0), upper=(3.0, 3.0, 3.0))
    cells, pairs = search(grid, positions, radii, active)
    assert not bool(cells.overflowed) and not bool(pairs.overflowed)
    assert np.all((np.asarray(cells.cell_of) >= 0) & (np.asarray(cells.cell_of) < grid.n_cells))
    assert table_pairs(pairs) == brute_force_pairs(positions, radii, active, SKIN)


def test_binning_counts_members_and_cell_index():
    positions, radii = scene(5)
    active = jnp.asarray(np.random.default_rng(5).random(positions.shape[0]) < 0.8)
    grid = grid_for(radii)
    cells = bin_bodies(grid, positions, active)
    x = (np.asarray(positions) - np.asarray(grid.lower)) // grid.cell_size
    coords = np.clip(x, 0, np.asarray(grid.shape) - 1).astype(int)
    expected_cell = np.ravel_multi_index(coords.T, grid.shape)
    np.testing.assert_array_equal(cell_index(grid, positions), expected_cell)
    act = np.asarray(active)
    np.testing.assert_array_equal(cells.cell_of, np.where(act, expected_cell, -1))
    members = np.asarray(cells.members)
    for c in range(grid.n_cells):
        inside = np.nonzero(act & (expected_cell == c))[0]
        assert cells.counts[c] == len(inside)
        np.testing.assert_array_equal(members[c, : len(inside)], inside)
        assert np.all(members[c, len(inside) :] == -1)


def test_cell_overflow_reports_cell_and_count():
    positions, radii = scene(6, n=100)
    # 20 bodies crowded into the cell around (2.1, 2.1, 2.1), capacity 4.
    rng = np.random.default_rng(6)
    crowd = 2.1 + rng.uniform(0.0, 0.05, (20, 3))
    positions = positions.at[30:50].set(crowd)
    active = jnp.ones(positions.shape[0], bool)
    grid = grid_for(radii, capacity=4, max_neighbors=64)
    cells = bin_bodies(grid, positions, active)
    target = int(cell_index(grid, jnp.asarray([[2.1, 2.1, 2.1]]))[0])
    expected_count = int(np.sum(np.asarray(cell_index(grid, positions)) == target))
    assert expected_count >= 20
    assert bool(cells.overflowed)
    assert int(cells.worst_cell) == target
    assert int(cells.worst_count) == expected_count == int(cells.counts[target])
    lowest = np.sort(np.nonzero(np.asarray(cell_index(grid, positions)) == target)[0])[:4]
    np.testing.assert_array_equal(cells.members[target], lowest)


def test_no_overflow_reports_the_fullest_cell():
    positions, radii = scene(7)
    cells = bin_bodies(grid_for(radii), positions, jnp.ones(positions.shape[0], bool))
    assert not bool(cells.overflowed)
    assert int(cells.worst_count) == int(np.max(cells.counts)) <= 16
    assert int(cells.counts[int(cells.worst_cell)]) == int(cells.worst_count)


def test_neighbor_table_overflow_reports_body_and_count():
    positions, radii = scene(8, n=100)
    # Bodies 10..19 in a tight cluster: body 10 has 9 partners j > 10 there, width is 4.
    rng = np.random.default_rng(8)
    positions = positions.at[10:20].set(2.0 + rng.uniform(0.0, 0.1, (10, 3)))
    active = jnp.ones(positions.shape[0], bool)
    grid = grid_for(radii, capacity=32, max_neighbors=4)
    cells, pairs = search(grid, positions, radii, active)
    expected = brute_force_pairs(positions, radii, active, SKIN)
    per_body = np.bincount([i for i, _ in expected], minlength=positions.shape[0])
    assert not bool(cells.overflowed)
    assert bool(pairs.overflowed)
    assert int(pairs.worst_body) == int(np.argmax(per_body)) == 10
    assert int(pairs.worst_count) == per_body.max() >= 9
    np.testing.assert_array_equal(pairs.count, per_body)
    # What is kept is a true subset, never a wrong pair.
    assert table_pairs(pairs) <= expected


def test_inactive_bodies_have_no_pairs():
    positions, radii = scene(9)
    inactive = np.random.default_rng(9).random(positions.shape[0]) < 0.3
    active = jnp.asarray(~inactive)
    cells, pairs = search(grid_for(radii), positions, radii, active)
    found = table_pairs(pairs)
    assert found == brute_force_pairs(positions, radii, active, SKIN)
    dead = set(np.nonzero(inactive)[0].tolist())
    assert not any(i in dead or j in dead for i, j in found)
    assert np.all(np.asarray(pairs.count)[inactive] == 0)
    assert not np.isin(np.asarray(cells.members), list(dead)).any()


def test_result_does_not_depend_on_body_order():
    positions, radii = scene(10)
    active = jnp.asarray(np.random.default_rng(10).random(positions.shape[0]) < 0.9)
    grid = grid_for(radii)
    _, pairs = search(grid, positions, radii, active)
    perm = np.random.default_rng(11).permutation(positions.shape[0])
    _, permuted = search(grid, positions[perm], radii[perm], active[perm])
    mapped = {tuple(sorted((int(perm[i]), int(perm[j])))) for i, j in table_pairs(permuted)}
    assert mapped == table_pairs(pairs)


def test_jit_and_vmap_over_scenes_match_single_runs():
    scenes = [scene(s) for s in range(20, 24)]
    positions = jnp.stack([p for p, _ in scenes])
    radii = jnp.stack([r for _, r in scenes])
    active = jnp.asarray(np.random.default_rng(20).random(positions.shape[:2]) < 0.9)
    grid = grid_for(np.asarray(radii))

    @jax.jit
    def batched(positions, radii, active):
        return jax.vmap(lambda x, r, a: search(grid, x, r, a))(positions, radii, active)

    cells, pairs = batched(positions, radii, active)
    assert pairs.partners.shape == (4, positions.shape[1], grid.max_neighbors)
    single = jax.jit(search, static_argnums=0)
    for b in range(4):
        one_cells, one_pairs = single(grid, positions[b], radii[b], active[b])
        for name, got, want in [
            ("members", cells.members[b], one_cells.members),
            ("counts", cells.counts[b], one_cells.counts),
            ("partners", pairs.partners[b], one_pairs.partners),
            ("count", pairs.count[b], one_pairs.count),
        ]:
            np.testing.assert_array_equal(got, want, err_msg=f"scene {b}: {name}")
        expected = brute_force_pairs(positions[b], radii[b], active[b], SKIN)
        assert table_pairs(jax.tree.map(lambda a, b=b: a[b], pairs)) == expected


def test_each_body_visits_the_27_surrounding_cells():
    # By construction: the scan runs over these offsets once each, own cell included.
    assert NEIGHBOR_OFFSETS.shape == (27, 3)
    assert {tuple(o) for o in NEIGHBOR_OFFSETS.tolist()} == set(
        itertools.product((-1, 0, 1), repeat=3)
    )


def test_pair_list_shapes_and_padding():
    positions, radii = scene(12, n=50)
    _, pairs = search(grid_for(radii), positions, radii, jnp.ones(50, bool))
    i, j, valid = pair_list(pairs)
    assert i.shape == j.shape == valid.shape == (50 * pairs.partners.shape[1],)
    assert int(valid.sum()) == int(pairs.count.sum())
    assert np.all(np.asarray(j)[~np.asarray(valid)] == -1)
    assert np.all(np.asarray(i)[np.asarray(valid)] < np.asarray(j)[np.asarray(valid)])


def test_grid_is_static_and_checked():
    grid = CellGrid((0, 0, 0), 0.5, (4, 4, 4), 8, 16)
    assert hash(grid) == hash(CellGrid((0.0, 0.0, 0.0), 0.5, (4, 4, 4), 8, 16))
    assert jax.tree.leaves(grid) == [grid]  # not a pytree of arrays
    assert CellGrid.covering((0, 0, 0), (1.0, 2.0, 2.1), 0.5, 8, 16).shape == (2, 4, 5)
    with pytest.raises(ValueError, match="cell_size"):
        CellGrid((0, 0, 0), 0.0, (4, 4, 4), 8, 16)
    with pytest.raises(ValueError, match="capacity"):
        CellGrid((0, 0, 0), 0.5, (4, 4, 4), 0, 16)
    with pytest.raises(ValueError, match="shape"):
        CellGrid((0, 0, 0), 0.5, (4, 0, 4), 8, 16)
    with pytest.raises(ValueError, match=r"2 \* 0.3 \+ 0.05 = 0.65 m"):
        grid.require_cell_size(0.3, 0.05)
    grid.require_cell_size(0.2, 0.05)
