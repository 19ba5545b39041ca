"""solver.distributed.manual.shard_map: zero-size arrays kept out of the manual computation
(JAX 0.11.2's Shardy crashes on them), with every result as ``jax.shard_map`` gives it.

Runs in a child process with two fake CPU devices (the test process has one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from solver_cli import ROOT

CHILD = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import PartitionSpec as P
from lowered_ir import manual_signatures, zero_size
from solver.distributed.manual import shard_map

mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 1), ("x", "y"))
a = jnp.arange(4.0)
tree = {"empty": jnp.zeros((0, 6), jnp.int32), "b": jnp.arange(3.0), "none": None}
cols = jnp.zeros((4, 0), jnp.float32)  # zero-size and sharded along x


def body(a, t, c):
    # an empty leaf passed through, one computed from it, one made; a sharded empty one
    out = {"empty": t["empty"], "plus": t["empty"] + 1, "b": t["b"] * 2,
           "made": jnp.zeros((2, 0))}
    return a * 2 + jax.lax.axis_index("x"), out, c + 1


specs = dict(in_specs=(P("x"), P(), P("x")), out_specs=(P("x"), P(), P("x")))
ours = jax.jit(shard_map(body, mesh=mesh, **specs))
plain = jax.jit(jax.shard_map(body, mesh=mesh, **specs))


def manual_types(fn):
    return manual_signatures(fn.lower(a, tree, cols).as_text())


got = ours(a, tree, cols)
ours_lines, plain_lines = manual_types(ours), manual_types(plain)
# the plain one compiled without Shardy (which JAX 0.11.2 crashes on here)
jax.config.update("jax_use_shardy_partitioner", False)
want = plain(a, tree, cols)
same_tree = jax.tree.structure(got) == jax.tree.structure(want)
values = [np.asarray(x).tolist() for x in jax.tree.leaves(got)]
meta = [(list(x.shape), str(x.dtype)) for x in jax.tree.leaves(got)]
meta_want = [(list(x.shape), str(x.dtype)) for x in jax.tree.leaves(want)]
equal = all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
print(json.dumps({
    "same_tree": same_tree, "equal": equal, "values": values, "meta": meta,
    "meta_want": meta_want, "ours_empty": zero_size(ours_lines),
    "plain_empty": zero_size(plain_lines), "manual": len(ours_lines), "jax": jax.__version__,
}))
"""


def test_zero_size_leaves_stay_out_and_come_back_as_jax_shard_map_gives_them() -> None:
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["same_tree"]
    assert out["meta"] == out["meta_want"]
    assert out["equal"], out["values"]
    # the shard index was added on each half: the body ran per shard
    assert out["values"][0] == [0.0, 2.0, 5.0, 7.0]
    # the plain shard_map passes the empty arrays in (the check can fail); ours does not
    assert out["plain_empty"], "the lowered plain shard_map no longer shows zero-size operands"
    assert out["manual"] >= 2  # the check read the manual computation's types (Shardy on)
    assert not out["ours_empty"]
