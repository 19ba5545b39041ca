"""``jax.shard_map`` with the zero-size arrays kept out of the manual computation.

JAX 0.11.2 with its default Shardy partitioner crashes the process (a segmentation fault in
Shardy's ``ManualComputationUnusedInputsPattern``, while compiling) whenever a zero-size
array enters a ``shard_map`` body that uses it: an argument returned as it is or computed
with, or a closed-over one. Four lines show it (docs/performance.md, "JAX 0.11"):

    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    f = jax.jit(jax.shard_map(lambda a, z: (a * 2, z), mesh=mesh,
                              in_specs=(P("x"), P()), out_specs=(P("x"), P())))
    f(jnp.ones(4), jnp.zeros((0, 6), jnp.int32))   # exit 139 on 0.11.2; fine on 0.10.2

The solver carries such arrays on purpose (the coupled bodies' ``overflow`` is (0, 6) when
the bodies are replicated, so that checkpoints keep one tree structure). A zero-size array
holds no values, so nothing is lost by leaving it out: ``shard_map`` here passes the others
through ``jax.shard_map`` and makes the empty ones again, with the same shape and dtype,
inside the body (each shard's shape) and after it (the global shape). Closed-over zero-size
constants are not caught here; the solver's bodies close over none, which
tests/test_coupling_native.py checks on the lowered modules of a coupled run on two slabs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P


def shard_map(
    f: Callable, *, mesh: Mesh, in_specs: Any, out_specs: Any, check_vma: bool = True
) -> Callable:
    """``jax.shard_map(f, mesh=..., in_specs=..., out_specs=..., check_vma=...)``, the
    arguments and results a pytree as there (``in_specs``/``out_specs`` prefixes of them), with
    every zero-size leaf kept out of the manual computation (see the module docstring)."""

    def mapped(*args):
        leaves, treedef = jax.tree.flatten(args)
        empty = [np.size(leaf) == 0 for leaf in leaves]
        if not any(empty):
            return _plain(f, mesh, in_specs, out_specs, check_vma)(*args)
        specs = leaf_specs(in_specs, args)
        kept_leaves = [None if e else x for e, x in zip(empty, leaves, strict=True)]
        kept = jax.tree.unflatten(treedef, kept_leaves)
        local_empty = [
            _local_shape(mesh, s, x.shape) if e else None
            for e, s, x in zip(empty, specs, leaves, strict=True)
        ]
        dtypes = [x.dtype for x in leaves]
        made: list = []  # the results' layout, known once the body has been traced

        def body(*kept_args):
            values = iter(jax.tree.leaves(kept_args))
            full = [
                _empty(shape, dtype, spec, check_vma) if shape is not None else next(values)
                for shape, dtype, spec in zip(local_empty, dtypes, specs, strict=True)
            ]
            result = f(*jax.tree.unflatten(treedef, full))
            out_leaves, out_tree = jax.tree.flatten(result)
            out_leaves = [jnp.asarray(x) for x in out_leaves]
            out_specs_flat = leaf_specs(out_specs, result)
            made.append((out_tree, [(x.shape, x.dtype) for x in out_leaves], out_specs_flat))
            return jax.tree.unflatten(out_tree, [None if x.size == 0 else x for x in out_leaves])

        out = _plain(body, mesh, in_specs, out_specs, check_vma)(*kept)
        out_tree, shapes, out_specs_flat = made[-1]
        values = iter(jax.tree.leaves(out))
        full = [
            jnp.zeros(_global_shape(mesh, spec, shape), dtype)
            if math.prod(shape) == 0
            else next(values)
            for (shape, dtype), spec in zip(shapes, out_specs_flat, strict=True)
        ]
        return jax.tree.unflatten(out_tree, full)

    return mapped


def _plain(f: Callable, mesh: Mesh, in_specs, out_specs, check_vma: bool) -> Callable:
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_vma)


def leaf_specs(specs: Any, tree: Any) -> list[P]:
    """The ``PartitionSpec`` of each leaf of ``tree`` (in ``jax.tree.leaves`` order), from
    ``specs``: a prefix of ``tree`` whose leaves are specs, as ``shard_map`` takes them."""
    out: list[P] = []

    def expand(spec, sub) -> None:
        out.extend([spec] * len(jax.tree.leaves(sub)))

    jax.tree.map(expand, specs, tree, is_leaf=lambda x: isinstance(x, P))
    return out


def _axes(entry) -> Sequence[str]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _split(mesh: Mesh, spec: P, rank: int) -> list[int]:
    """Per dimension, the number of shards ``spec`` splits it into on ``mesh``."""
    entries = list(spec) + [None] * (rank - len(spec))
    return [math.prod(mesh.shape[a] for a in _axes(e)) for e in entries]


def _local_shape(mesh: Mesh, spec: P, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n // k for n, k in zip(shape, _split(mesh, spec, len(shape)), strict=True))


def _global_shape(mesh: Mesh, spec: P, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n * k for n, k in zip(shape, _split(mesh, spec, len(shape)), strict=True))


def _empty(shape: tuple[int, ...], dtype, spec: P, check_vma: bool):
    """A zero-size array inside the body; varying over the axes ``spec`` splits it along
    (what the argument it stands for would be under ``check_vma``)."""
    zero = jnp.zeros(shape, dtype)
    axes = tuple(a for e in spec for a in _axes(e))
    return lax.pcast(zero, axes, to="varying") if check_vma and axes else zero
