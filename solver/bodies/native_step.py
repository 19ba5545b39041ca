"""The rigid-body chunk of a scene of plain spheres in C++ (``bodies.kernel=native``).

kernels/native/dem_spheres.cc advances a ``BodyState`` by n steps in one FFI call: the step of
``solver.bodies.step.body_step`` (kick, DLM drift, the Verlet table kept or rebuilt from the cell
list, Hertz-Mindlin or linear contacts with tangential springs and rolling resistance against
spheres and planes, gravity, kick), operation for operation, with OpenMP threads over the pairs
and spheres of a scene, or over the members of a vmapped ensemble (``vmap_method=
"broadcast_all"``: a leading batch axis on every array). The state between chunks is the one
the XLA chunk keeps, leaf for leaf (pair table, springs, slot lists, reference positions,
rebuild count, sticky overflow record), so checkpoints, outputs, diagnostics and the rebuild
decision see no difference, and a run may switch kernels between chunks. The per-step totals
(``BodyDiagnostics``, sampled every ``every`` steps as ``make_body_chunk`` samples them) are
summed in the kernel.

The XLA chunk stays the reference and the differentiable path (an FFI call has no JVP rule):
tests/test_native_bodies.py holds the two equal to round-off in float64. The library is built
on first use (solver/native_build.py: build/native/<hash>/libdem_spheres_<dtype>.so, float32
and float64, under a file lock; ``python -m solver.bodies.native_step`` builds both now).

Covered: spheres that are their own bodies (fixed, kinematic and free ones), planes (moving,
rigid or elastic), Hertz and linear contact models, rolling resistance, ``neighbor_list`` cells
or all pairs, float32 and float64, one device, ensembles. Refused with a one-line ConfigError
on bodies.kernel: clumps, an ensemble over several devices, any back end but the CPU
(``require_native``), ``bodies.mesh`` (parse_bodies), bodies in the fluid (the coupled model).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from kernels import contact_models as cm
from solver.bodies.step import (
    ActiveSlots,
    BodyDiagnostics,
    BodySetup,
    BodyState,
    ContactParams,
    Overflow,
    _merge_overflow,
)
from solver.errors import ConfigError
from solver.native_build import build_directory, compile_library, register

SOURCE = Path(__file__).resolve().parents[2] / "kernels" / "native" / "dem_spheres.cc"
TYPES = {"float32": "float", "float64": "double"}  # state dtype -> C++ type of the library
PARALLEL_SPHERES = 4096
"""A scene of fewer spheres runs on one thread: its step takes tens of microseconds, and on a
machine shared with other jobs each phase's barrier may wait for a thread that lost its core
(the bench's 1,000 spheres: 0.14 ms per step on one thread, 30 ms on two under load). A batch
(ensemble) always runs one scene per thread."""
# argument index -> result index of the state leaves the kernel updates in place (the order of
# enum Arg and enum Ret in dem_spheres.cc)
ALIASES = {0: 0, 1: 1, 2: 2, 3: 3, 8: 4, 9: 5, 10: 6, 11: 7, 12: 8, 13: 9, 14: 10, 15: 11,
           16: 12, 17: 13, 19: 14, 20: 15}  # fmt: skip
DIAGNOSTICS = 9  # kinetic, potential, momentum (3), angular momentum (3), elastic


def build(dtype: str, verbose: bool = False) -> Path:
    """Path of the library for the body state's ``dtype`` (float32 or float64), built first
    when missing."""
    dtype = np.dtype(dtype).name
    if dtype not in TYPES:
        raise ValueError(f"the native body kernel is built for {' and '.join(TYPES)}, not {dtype}")
    library = build_directory(SOURCE.read_bytes()) / f"libdem_spheres_{dtype}.so"
    return compile_library(library, SOURCE, (f"DEM_REAL={TYPES[dtype]}",), verbose=verbose)


def target_name(dtype: np.dtype | str) -> str:
    """Register the handler for the state's ``dtype`` once; its FFI target name."""
    dtype = np.dtype(dtype).name
    return register(f"solver_dem_spheres_{dtype}", build(dtype), "DemSpheres")


def unsupported(setup: BodySetup) -> str | None:
    """Why the native kernel cannot step ``setup`` (one line), or None when it can."""
    if not setup.spheres_only:
        return (f"clumps ({setup.n_spheres} spheres on {setup.n_bodies} bodies; the native "
                "kernel steps plain spheres)")  # fmt: skip
    return None


def require_native(setup: BodySetup, devices: int = 1) -> None:
    """Raise a ConfigError on bodies.kernel when the native kernel cannot run this scene
    (``devices``: those the ensemble's members are spread over). ``bodies.mesh`` is refused
    where the bodies section is read (solver/bodies/config.py), bodies in the fluid by the
    coupled model."""
    reason = unsupported(setup)
    if reason is None and jax.default_backend() != "cpu":
        reason = f"the {jax.default_backend()} back end (the native kernel is a CPU kernel)"
    if reason is None and devices > 1:
        reason = f"an ensemble over {devices} devices (the native kernel runs on one)"
    if reason is not None:
        raise ConfigError("bodies.kernel", "native", f"xla for {reason}")


def _materials(setup: BodySetup, params: ContactParams, dtype) -> tuple[jax.Array, jax.Array]:
    """The kernel's sphere table (s, 7): radius, young, poisson, beta, friction, rolling,
    stiffness, and plane table (p, 15): point, normal, velocity, then those of a sphere less
    the radius; beta = `cm.restitution_beta` of the restitution, as the XLA step takes it."""
    spheres = jnp.stack(
        [jnp.asarray(setup.radius, dtype), params.young, params.poisson,
         cm.restitution_beta(params.restitution), params.friction, params.rolling_friction,
         params.stiffness], axis=-1,
    )  # fmt: skip
    plane_columns = [params.plane_young, params.plane_poisson,
                     cm.restitution_beta(params.plane_restitution), params.plane_friction,
                     params.plane_rolling_friction, params.plane_stiffness]  # fmt: skip
    planes = jnp.concatenate(
        [params.plane_point, params.plane_normal, params.plane_velocity,
         jnp.stack(plane_columns, axis=-1).reshape(-1, 6)], axis=-1,
    )  # fmt: skip
    return spheres.astype(dtype), planes.astype(dtype)


def make_native_chunk(
    setup: BodySetup, every: int = 1, batched: bool = False
) -> Callable[..., tuple[BodyState, BodyDiagnostics]]:
    """chunk(state, n, params=None) -> (state after n steps, BodyDiagnostics per step with
    leading axis n): ``solver.bodies.step.make_body_chunk``'s contract, in C++.

    ``n`` is static; ``params`` defaults to ``setup.params()``. Under ``vmap`` (ensembles) the
    kernel receives the whole batch in one call. ``batched`` is accepted for the signature's
    sake: the kernel needs no switch over list lengths, batched or not.

    Raises:
        ValueError: the kernel does not cover the setup (``unsupported``) or every < 1.
    """
    del batched  # the kernel evaluates the listed pairs only, batched or not
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    reason = unsupported(setup)
    if reason is not None:
        raise ValueError(f"bodies.kernel=native does not support {reason}")
    s = setup.n_spheres
    grid = setup.grid
    attributes = dict(
        every=np.int64(every),
        hertz=np.int64(setup.contact_model == "hertz"),
        rolling=np.int64(bool(np.any(setup.rolling_friction > 0))),
        all_pairs=np.int64(setup.all_pairs),
        dt=np.float64(setup.dt),
        skin=np.float64(setup.skin),
        rebuild2=np.float64(setup.rebuild_distance**2),
        lower=np.asarray(grid.lower, np.float64),
        cell_size=np.float64(grid.cell_size),
        shape=np.asarray(grid.shape, np.int64),
        capacity=np.int64(grid.capacity),
        parallel_spheres=np.int64(PARALLEL_SPHERES),
    )

    def chunk(
        state: BodyState, n: int, params: ContactParams | None = None
    ) -> tuple[BodyState, BodyDiagnostics]:
        bodies = state.bodies
        dtype = bodies.position.dtype
        if params is None:
            params = setup.params(dtype)
        if state.reference is None or state.slots is None:  # as the XLA chunk's scan
            raise ValueError("the state has no pair table: start from initial_state()")
        reference, slots = state.reference, state.slots
        spheres, planes = _materials(setup, params, dtype)
        seen = state.overflow
        overflow = jnp.stack([seen.overflowed.astype(jnp.int32), *seen[1:]])
        args = (
            bodies.position, bodies.orientation, bodies.velocity, bodies.angular_momentum,
            bodies.prescribed_angular_velocity, bodies.inverse_mass, bodies.inverse_inertia,
            bodies.kinematic, state.force, state.torque, state.partners, state.history,
            state.plane_history, reference, slots.pairs, slots.pair_count, slots.planes,
            slots.plane_count, state.time, state.rebuilds, overflow.astype(jnp.int32), spheres,
            planes, params.gravity.astype(dtype),
        )  # fmt: skip
        results = [jax.ShapeDtypeStruct(args[k].shape, args[k].dtype) for k in ALIASES]
        results += [
            jax.ShapeDtypeStruct((s,), jnp.int32),  # contact count
            jax.ShapeDtypeStruct((), dtype),  # elastic energy
            jax.ShapeDtypeStruct((n, DIAGNOSTICS), dtype),
            jax.ShapeDtypeStruct((n,), jnp.int32),  # contacts per step
            jax.ShapeDtypeStruct((n,), jnp.bool_),  # sampled
        ]
        call = jax.ffi.ffi_call(
            target_name(dtype), results, input_output_aliases=ALIASES,
            vmap_method="broadcast_all",
        )  # fmt: skip
        out = call(*args, steps=np.int64(n), **attributes)
        (position, orientation, velocity, momentum, force, torque, partners, history,
         plane_history, reference, pair_slots, pair_count, plane_slots, plane_count, rebuilds,
         overflow, count, elastic, totals, contacts, sampled) = out  # fmt: skip
        record = Overflow(overflow[0] > 0, overflow[1], overflow[2], overflow[3], overflow[4])
        new_state = BodyState(
            bodies=bodies.replace(
                position=position,
                orientation=orientation,
                velocity=velocity,
                angular_momentum=momentum,
            ),  # fmt: skip
            force=force,
            torque=torque,
            partners=partners,
            history=history,
            plane_history=plane_history,
            contact_count=count,
            time=state.time + n,
            # the kernel merged its rebuilds' records into the sticky one; merging again with
            # the input's is a no-op that keeps the XLA chunk's dtypes
            overflow=_merge_overflow(seen, record),
            elastic_energy=elastic,
            reference=reference,
            rebuilds=rebuilds,
            slots=ActiveSlots(pair_slots, pair_count, plane_slots, plane_count),
        )
        report = BodyDiagnostics(
            kinetic_energy=totals[:, 0],
            potential_energy=totals[:, 1],
            momentum=totals[:, 2:5],
            angular_momentum=totals[:, 5:8],
            contacts=contacts.astype(jax.eval_shape(jnp.sum, state.contact_count).dtype),
            elastic_energy=totals[:, 8],
            sampled=sampled,
        )
        return new_state, report

    return chunk


if __name__ == "__main__":  # build both libraries now rather than at the first run
    for name in sys.argv[1:] or list(TYPES):
        print(build(name, verbose=True))
