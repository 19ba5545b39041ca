"""The body records' compaction and placement helpers (solver/distributed/bodies/records.py)
against NumPy references on random masks and slots: they stand in for ``jnp.nonzero`` and
scatters (docs/performance.md "Start-up and compile time"), and must pick the same entries.
Fixed shapes, random contents: each helper compiles once per shape."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from solver.distributed.bodies import records

TRIALS = 40


@pytest.mark.parametrize("size", [7, 30])  # fewer and more slots than the 20 entries
def test_select_and_first_of_pick_the_first_true_entries_in_order(size):
    n = 20
    picks = jax.jit(lambda m: (records.select(m, size), records.first_of(m, size)))
    padded = jax.jit(lambda m: records.compacted(m, size, fill_value=n)[0])
    rng = np.random.default_rng(size)
    for _ in range(TRIALS):
        mask = rng.random(n) < rng.random()
        (index, used, count), kept = picks(mask)
        expected = np.nonzero(mask)[0][:size]
        assert int(count) == mask.sum()
        assert np.array_equal(np.asarray(used), np.arange(size) < mask.sum())
        assert np.array_equal(np.asarray(index)[: len(expected)], expected)
        assert not np.asarray(index)[len(expected) :].any()  # padded with 0
        assert np.array_equal(np.asarray(kept), np.isin(np.arange(n), expected))
        assert np.all(np.asarray(padded(mask))[len(expected) :] == n)


def test_append_rows_writes_the_got_rows_in_order_and_drops_the_overflow():
    held, sent = 9, 11
    append = jax.jit(records.append_rows)
    rng = np.random.default_rng(1)
    for _ in range(TRIALS):
        rows, received = rng.random((held, 3)), rng.random((sent, 3))
        got = rng.random(sent) < rng.random()
        start = int(rng.integers(0, held + 2))  # past the end: an overflowed buffer
        expected = rows.copy()
        for i, slot in enumerate(start + np.cumsum(got) - 1):
            if got[i] and slot < held:
                expected[slot] = received[i]
        out = append(rows, jnp.int32(start), received, got)
        assert np.array_equal(np.asarray(out), expected)


def test_put_in_slots_equals_a_scatter_per_leaf():
    capacity, sent = 8, 6
    put = jax.jit(records.put_in_slots)
    scatter = jax.jit(lambda t, s, v: jax.tree.map(lambda a, b: a.at[s].set(b, mode="drop"), t, v))
    rng = np.random.default_rng(2)
    for _ in range(TRIALS):
        order = rng.permutation(capacity + sent)[:sent]
        slot = np.where(order < capacity, order, capacity + 1)  # distinct, or dropped
        targets = (
            rng.random((capacity, 2)),
            rng.integers(0, 9, capacity),
            rng.random(capacity) < 0.5,
        )
        values = (rng.random((sent, 2)), rng.integers(0, 9, sent), rng.random(sent) < 0.5)
        placed = put(targets, values, slot)
        expected = scatter(targets, slot, values)
        for a, b in zip(placed, expected, strict=True):
            assert np.array_equal(np.asarray(a), np.asarray(b))
