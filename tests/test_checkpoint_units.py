"""Checkpoint building blocks: the content digest, the config section, stop signals."""

from __future__ import annotations

import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from solver_cli import run_solver

from solver.checkpoint.digest import block_digest, state_digest
from solver.checkpoint.preemption import StopRequests


def _blocks_sum(x: np.ndarray, splits: tuple[int, ...]) -> int:
    """Digest of ``x`` summed over a grid of blocks (``splits`` blocks per axis)."""
    total = 0
    sizes = [n // s for n, s in zip(x.shape, splits, strict=True)]
    for index in np.ndindex(*splits):
        start = tuple(i * n for i, n in zip(index, sizes, strict=True))
        block = x[tuple(slice(s, s + n) for s, n in zip(start, sizes, strict=True))]
        total += int(block_digest(jnp.asarray(block), start, x.shape))
    return total % (1 << 32)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.float16])
def test_digest_does_not_depend_on_the_split(dtype):
    x = (np.random.default_rng(0).random((3, 8, 12)) * 100).astype(dtype)
    whole = int(block_digest(jnp.asarray(x), (0, 0, 0), x.shape))
    for splits in [(1, 2, 1), (1, 4, 3), (3, 2, 2)]:
        assert _blocks_sum(x, splits) == whole, splits


def test_digest_sees_any_change():
    x = np.random.default_rng(1).random((4, 16)).astype(np.float32)
    base = int(block_digest(jnp.asarray(x), (0, 0), x.shape))
    flipped = x.copy()
    flipped.view(np.uint32)[2, 5] ^= 1  # one bit of one value
    swapped = x.copy()
    swapped[0, [3, 4]] = swapped[0, [4, 3]]
    shifted = np.roll(x, 1, axis=1)
    for other in (flipped, swapped, shifted):
        assert int(block_digest(jnp.asarray(other), (0, 0), x.shape)) != base


def test_digest_of_a_sharded_array_equals_one_device():
    devices = jax.devices()
    x = np.arange(2 * 8 * 4, dtype=np.float32).reshape(2, 8, 4)
    whole = state_digest({"f": jnp.asarray(x)}, [(0, 0, 0)], [x.shape])
    mesh = jax.sharding.Mesh(np.array(devices[:1]).reshape(1, 1), ("x", "y"))
    spec = jax.sharding.PartitionSpec(None, "x", "y")
    sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))
    assert state_digest({"f": sharded}, [(0, 0, 0)], [x.shape]) == whole


def test_stop_requests_turn_signals_into_a_flag():
    with StopRequests() as stops:
        assert not stops.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stops.requested and stops.signal_name == "SIGUSR1"
        os.kill(os.getpid(), signal.SIGUSR1)  # a second one changes nothing
        assert stops.signal_name == "SIGUSR1"
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("checkpoint.keep=0", "checkpoint.keep"),
        ("checkpoint.every_steps=-5", "checkpoint.every_steps"),
        ("checkpoint.every_minutes=-1", "checkpoint.every_minutes"),
        ("checkpoint.stripe_size=4Q", "checkpoint.stripe_size"),
        ("checkpoint.stripe_count=0", "checkpoint.stripe_count"),
        ("checkpoint.file_size=0", "checkpoint.file_size"),
        ("checkpoint.async_save=maybe", "checkpoint.async_save"),
    ],
)
def test_bad_checkpoint_settings_are_one_line_errors(override, key):
    result = run_solver(["case=cavity", "steps=1", override])
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], result.stderr


def test_stop_requests_hand_the_signal_on_to_an_earlier_handler():
    """submitit installs a USR2 handler that requeues the job; it must still run, after the
    checkpoint (``hand_over``), not instead of it."""
    calls = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    try:
        with StopRequests() as stops:
            os.kill(os.getpid(), signal.SIGUSR2)
            assert stops.requested and calls == []
            stops.hand_over()
            assert calls == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_stop_requests_take_over_a_stop_an_earlier_handler_took():
    """A caller running runs in turn (the validation suite) that got SIGTERM between two runs:
    the next run stops at its first chunk end instead of running to its end."""

    class Suite:
        stop_requested = None

        def __call__(self, signum, frame):
            self.stop_requested = signal.Signals(signum).name

    suite = Suite()
    previous = signal.signal(signal.SIGTERM, suite)
    try:
        with StopRequests() as stops:
            assert not stops.requested
        os.kill(os.getpid(), signal.SIGTERM)
        with StopRequests() as stops:
            assert stops.requested and stops.signal_name == "SIGTERM"
            stops.hand_over()  # the earlier handler had it already: not called again
        assert signal.getsignal(signal.SIGTERM) is suite
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_store_saves_and_restores_zero_size_arrays(tmp_path):
    """Orbax refuses arrays of size zero (a body state's plane history when the fluid has no
    walls, e.g. the periodic sphere array); the store leaves them out and puts them back."""
    from solver.checkpoint.store import CheckpointStore

    state = {
        "f": jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3),
        "plane_history": jnp.zeros((4, 0, 3), jnp.float32),
        "nested": (jnp.ones(2, jnp.int32), jnp.zeros((0,), jnp.float32)),
    }
    store = CheckpointStore(tmp_path, keep=2, async_save=False, file_size=1 << 20, is_root=True)
    store.save(3, state, {"track": np.arange(3.0)}, {"note": "zero-size"})
    targets = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state)
    restored, host = store.restore(3, targets)
    store.close()
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.array_equal(np.asarray(got), np.asarray(want))
    assert np.array_equal(host["track"], np.arange(3.0))
