"""The fluid chunk on one population buffer on the GPU: the Pallas kernel (``fluid.kernel=pallas``).

kernels/pallas_lb.py advances the populations in place with the AA access pattern (an even,
local sweep and an odd sweep that pulls from and pushes to the neighbours), one fused
stream-collide pass per step written in JAX Pallas and compiled by Triton; the chunk holds the
state's one (q, *shape) buffer and nothing else: every sweep aliases its input with its output,
and XLA aliases the state it is given (donated by the run loop) with the result, so the peak
device memory is the state itself plus the geometry (docs/performance.md, "The fused GPU kernel
(Pallas)"). Between chunks the state is the one the pure-JAX step keeps (pre-collision
populations at the chunk's time, solid nodes at rest), so outputs, checkpoints and the health
check see no difference; the pure-JAX chunk (solver/fluid/step.py) is the reference the kernel
must equal to round-off (tests/test_pallas_kernel.py).

What it covers is what the native CPU kernel covers (solver/fluid/inplace_step.py, whose
``unsupported`` and ``require_kernel`` check both): D2Q9, D3Q19, D3Q27; BGK and TRT; float32
and float64 stored as computed, float16 and bfloat16 storage with float32 compute; periodic
edges, half-way bounce-back on resting and moving (Ladd) walls; a body force, constant or
periodic in time (Guo). One device, or slabs along x (solver/fluid/pallas_split.py). On the
CPU back end the sweeps run in Pallas's interpret mode: correct but slow, for tests.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from kernels.collision import trt_omega_minus
from kernels.pallas_lb import SweepSpec, finish, sweep
from solver.fluid.collide import body_force_at
from solver.fluid.inplace_step import unsupported
from solver.fluid.setup import FluidSetup
from solver.fluid.step import FluidGeometry, FluidState

# cells per program and warps per program: a first guess for a memory-bound stencil (two cells
# per thread; no GPU has tuned it yet: solver/bench/gpu_check.py reports it)
BLOCK = 256
NUM_WARPS = 4


def sweep_spec(setup: FluidSetup, block: int = BLOCK, interpret: bool | None = None) -> SweepSpec:
    """The static parameters of the setup's sweeps; ``interpret`` None: on the CPU back end."""
    has_solid = setup.solid is not None and bool(np.any(setup.solid))
    moving = has_solid and setup.wall_velocity is not None and bool(np.any(setup.wall_velocity))
    omega_minus = setup.omega
    if setup.collision == "trt":
        omega_minus = trt_omega_minus(setup.omega, setup.trt_magic)
    spec = SweepSpec(
        lattice=setup.lattice,
        shape=tuple(int(n) for n in setup.shape),
        compute=str(jnp.dtype(setup.dtype)),
        storage=str(jnp.dtype(setup.storage_dtype)),
        omega_plus=float(setup.omega),
        omega_minus=float(omega_minus),
        trt=setup.collision == "trt",
        les_cs=float(setup.les_cs) if setup.les == "smagorinsky" else 0.0,
        trt_magic=float(setup.trt_magic),
        walls=has_solid,
        moving=moving,
        block=block,
        num_warps=NUM_WARPS,
        interpret=jax.default_backend() == "cpu" if interpret is None else interpret,
    )
    spec.check()
    return spec


def force_at_step(setup: FluidSetup, dtype) -> Callable:
    """force_at(time): the body force at step ``time`` as the sweeps take it: None, constants
    (compiled in), or a (d,) array in ``dtype``."""

    def force_at(time: Array):
        force = body_force_at(setup, time)
        if force is None or all(isinstance(c, float) for c in force):
            return force
        return jnp.stack([jnp.asarray(c, dtype) for c in force])

    return force_at


def make_pallas_chunk(
    setup: FluidSetup, block: int = BLOCK, interpret: bool | None = None
) -> Callable[[FluidState, FluidGeometry, int], tuple[FluidState, Array]]:
    """chunk(state, geometry, n) -> (state after n steps, forces (n, force_width) of zeros),
    the signature of ``solver.fluid.step.make_chunk`` on one device.

    ``block`` cells per Triton program (a power of two); ``interpret`` forces Pallas's
    interpret mode on or off (None: on the CPU back end only).

    Raises:
        ValueError: the kernel does not cover the setup (``unsupported``).
    """
    reason = unsupported(setup, "pallas")
    if reason is not None:
        raise ValueError(f"fluid.kernel=pallas does not support {reason}")
    spec = sweep_spec(setup, block, interpret)
    lat, dtype = setup.lattice, jnp.dtype(setup.dtype)
    cells = spec.cells
    force_at = force_at_step(setup, dtype)

    def chunk(state: FluidState, geometry: FluidGeometry, n: int):
        t0 = state.time
        # (q, *shape) -> (q, cells): row-major, a bitcast (no copy)
        populations = state.populations.reshape(lat.q, cells)
        solid = geometry.solid.reshape(cells) if spec.walls else None
        wall_u = geometry.wall_velocity.reshape(lat.d, cells) if spec.moving else None

        def two_steps(k, a):
            t = t0 + 2 * k
            a = sweep(spec, a, False, force_at(t), solid, wall_u)
            return sweep(spec, a, True, force_at(t + 1), solid, wall_u)

        populations = lax.fori_loop(0, n // 2, two_steps, populations)
        if n % 2:
            populations = sweep(spec, populations, False, force_at(t0 + n - 1), solid, wall_u)
        if n % 2 or spec.walls:
            populations = finish(spec, populations, bool(n % 2), solid)
        new_state = FluidState(populations=populations.reshape(state.populations.shape),
                               time=t0 + n)  # fmt: skip
        return new_state, jnp.zeros((n, setup.force_width), dtype)

    return chunk
