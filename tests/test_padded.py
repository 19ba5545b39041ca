"""Ghost-padded population buffers (solver/fluid/padded.py) on one device: what a pull reads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.lattices import LATTICES
from solver.fluid.padded import upstream, write_padded

SHAPES = {"D2Q9": (5, 4), "D3Q19": (5, 4, 3), "D3Q27": (5, 4, 3)}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_pull_from_the_written_buffers_is_the_periodic_stream(name):
    """After ``write_padded`` every direction's pull, f_i(x) = f_i*(x - c_i), equals the
    periodic shift of its interior (np.roll), edges and corners of diagonal directions
    included; the ghosts are written once per direction and axis it moves along (D3Q27's
    corner directions in three writes, not seven), besides the interiors' q writes."""
    lattice = LATTICES[name]
    shape = SHAPES[name]
    rng = np.random.default_rng(1)
    interiors = [jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(lattice.q)]
    # NaN buffers: a ghost cell a pull reads and nothing wrote would show
    buffers = [jnp.full(tuple(n + 2 for n in shape), jnp.nan, jnp.float32)] * lattice.q

    def write(buffers, interiors):
        return write_padded(buffers, interiors, lattice.c)

    written = write(buffers, interiors)
    for i, offset in enumerate(lattice.c):
        pulled = np.asarray(upstream(written[i], offset))
        expected = np.roll(
            np.asarray(interiors[i]), tuple(int(o) for o in offset), axis=range(len(shape))
        )
        np.testing.assert_array_equal(pulled, expected, err_msg=f"direction {i}, c = {offset}")
    writes = str(jax.make_jaxpr(write)(buffers, interiors)).count("dynamic_update_slice")
    moving_axes = sum(int(np.count_nonzero(c)) for c in lattice.c)
    assert writes == lattice.q + moving_axes
