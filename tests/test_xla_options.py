"""solver.xla_options: compile options passed only where the installed XLA knows them (jaxlib
0.11 dropped ``xla_cpu_use_fusion_emitters``; an unknown option fails a compilation, and in
XLA_FLAGS aborts the process)."""

from __future__ import annotations

import jax
import numpy as np

from solver import xla_options


def test_known_keeps_the_options_xla_has_and_drops_the_others():
    options = {"xla_backend_optimization_level": 0, "xla_no_such_option_here": True}
    assert xla_options.known(options) == {"xla_backend_optimization_level": 0}
    # what is kept compiles
    compiled = (
        jax.jit(lambda x: x * 3)
        .lower(np.float32(2))
        .compile(compiler_options=xla_options.known(options))
    )
    assert float(compiled(np.float32(2))) == 6.0


def test_as_flags_writes_xla_flags_text():
    flags = xla_options.as_flags({"xla_backend_optimization_level": 0, "xla_cpu_x": False})
    assert flags == "--xla_backend_optimization_level=0 --xla_cpu_x=false"
