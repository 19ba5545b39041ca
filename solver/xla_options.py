"""XLA options that only some jaxlib releases of the supported window know.

XLA drops debug options between releases: jaxlib 0.11 removed ``xla_cpu_use_fusion_emitters``
(the switch to XLA:CPU's older fusion emitter) together with that emitter; 0.10 has it. Given as
a compile option, a name XLA does not know fails the compilation ("No such compile option");
in ``XLA_FLAGS`` it aborts the process at start-up ("Unknown flag in XLA_FLAGS"). Options that
only make a compilation faster are therefore passed only where the installed jaxlib knows them.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

OptionValue = bool | int | float | str


@functools.cache
def _known(name: str, value: OptionValue) -> bool:
    # one compilation of a one-operation program on the default backend, once per process; an
    # option this backend rejects in any way ("No such compile option" for a removed one) is
    # left out: these options only ever make a compilation faster
    lowered = jax.jit(lambda x: x + 1).lower(np.float32(0))
    try:
        lowered.compile(compiler_options={name: value})
    except jax.errors.JaxRuntimeError:
        return False
    return True


def known(options: dict[str, OptionValue]) -> dict[str, OptionValue]:
    """The entries of ``options`` (XLA option name -> value) that the installed XLA accepts on
    the default backend, in their order; the others are left out."""
    return {name: value for name, value in options.items() if _known(name, value)}


def as_flags(options: dict[str, OptionValue]) -> str:
    """``options`` as ``XLA_FLAGS`` text: ``--name=value`` each (booleans as true/false)."""

    def text(value: OptionValue) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return " ".join(f"--{name}={text(value)}" for name, value in options.items())
