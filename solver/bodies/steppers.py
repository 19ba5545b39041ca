"""How one rigid-body scene advances: on one device, or split over a device mesh.

Both steppers offer the body model (``solver.bodies.model``) the same operations on a state that
the run loop carries: ``initial_state()``, ``advance(state, n)`` -> (state, per-step diagnostics
on the host), ``snapshot(state)`` -> (bodies, contact counts) on the host in body order,
``overflow(state)`` -> a message or None, ``view(state)``/``from_view(view, host)`` for
checkpoints, and ``initial`` (the diagnostics at step 0). The spatial stepper (``bodies.mesh``)
uses ``solver.distributed.bodies``; its step-0 diagnostics come from the single-device
evaluation of the same state, which is the reference the decomposition is checked against.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels.rigid_body import Bodies
from solver.bodies.step import (
    BodySetup,
    BodyState,
    diagnostics,
    initial_state,
    make_body_chunk,
    overflow_message,
    run_once,
)
from solver.checkpoint.flat import flatten_leaves, unflatten_leaves
from solver.errors import ConfigError


class SingleStepper:
    """The whole scene on one device; the checkpoint view is the ``BodyState`` on the host.
    ``kernel``: "xla" (``make_body_chunk``) or "native" (``native_step.make_native_chunk``),
    which keep the same state."""

    spatial = False

    def __init__(
        self, setup: BodySetup, bodies: Bodies, diagnostics_every: int = 1, kernel: str = "xla"
    ) -> None:
        self.setup = setup
        # one compiled program: eagerly, its few hundred small operations compile one by one (~7 s)
        self._state0 = run_once(functools.partial(initial_state, setup), bodies)
        if kernel == "native":  # the same state, n steps in one C++ call (bodies.kernel)
            from solver.bodies.native_step import make_native_chunk

            chunk = make_native_chunk(setup, diagnostics_every)
        else:
            chunk = make_body_chunk(setup, diagnostics_every)
        self._chunk = jax.jit(chunk, static_argnums=1)
        self.initial = jax.device_get(jax.jit(lambda s: diagnostics(setup, s))(self._state0))
        self.traffic = None

    def initial_state(self) -> BodyState:
        return self._state0

    def advance(self, state: BodyState, n: int) -> tuple[BodyState, Any]:
        state, diag = self._chunk(state, n)
        return state, jax.device_get(diag)

    def snapshot(self, state: BodyState) -> tuple[Bodies, np.ndarray]:
        return state.bodies, np.asarray(state.contact_count)

    def with_bodies(self, state: BodyState, bodies: Bodies) -> BodyState:
        """Continue from ``bodies`` (the twin moves kinematic bodies between chunks)."""
        return state.replace(bodies=bodies)

    def overflow(self, state: BodyState) -> str | None:
        return overflow_message(self.setup, state)

    def view(self, state: BodyState) -> BodyState:
        return jax.device_get(state)

    def extras(self, state: BodyState) -> dict:
        return {}

    def from_view(self, view: BodyState, host: dict) -> BodyState:
        return jax.tree.map(jnp.asarray, view)


class SpatialStepper:
    """The scene split over ``mesh`` subdomains (spheres and planes). The checkpoint view is the
    canonical state (global id order, any mesh); the raw slots ride along as host arrays so
    that a resume on the same mesh and capacities is bit for bit."""

    spatial = True

    def __init__(
        self, setup: BodySetup, bodies: Bodies, mesh: tuple[int, int, int], capacities: dict
    ) -> None:
        from solver.distributed import bodies as bd

        try:
            self.layout = bd.plan_layout(setup, mesh, devices=jax.device_count(), **capacities)
        except NotImplementedError as err:
            raise ConfigError("bodies.mesh", list(mesh), "null", hint=str(err)) from None
        self.setup, self._bd, self._bodies0 = setup, bd, bodies
        reference = run_once(functools.partial(initial_state, setup), bodies)
        self.initial = jax.device_get(jax.jit(lambda s: diagnostics(setup, s))(reference))
        self._grid = bd.device_mesh(self.layout)
        self._chunk = bd.compile_chunk(setup, self.layout, self._grid, setup.params())
        self._first = True
        self.traffic = {"migrated": 0, "ghosts_max": 0, "ghost_contacts_max": 0}
        self.rebuilds = 0  # steps at which some subdomain rebuilt its pair table

    def initial_state(self):
        self._first = True  # the first chunk computes the forces at time 0
        return self._bd.place(self.setup, self.layout, self._grid, self._bodies0)

    def advance(self, state, n: int):
        state, diag = self._chunk(state, n, self._first)
        self._first = False
        diag = jax.tree.map(self._bd.host_array, diag)
        self.traffic["migrated"] += int(np.sum(diag.migrated))
        self.traffic["ghosts_max"] = max(self.traffic["ghosts_max"], int(np.max(diag.ghosts)))
        self.traffic["ghost_contacts_max"] = max(
            self.traffic["ghost_contacts_max"], int(np.max(diag.ghost_contacts))
        )
        self.rebuilds += int(np.sum(np.asarray(diag.rebuilt) > 0))
        return state, diag

    def snapshot(self, state) -> tuple[Bodies, np.ndarray]:
        bodies, _, _, count = self._bd.gather(self.setup, self.layout, state)
        return bodies, count

    def with_bodies(self, state, bodies: Bodies):
        raise NotImplementedError("moving bodies of a decomposed scene by hand")

    def overflow(self, state) -> str | None:
        table = self._bd.overflow_table(self.layout, state)
        return self._bd.overflow_message(self.layout, table)

    def view(self, state) -> dict:
        # before the first chunk (the template a checkpoint restores into) the forces at time 0
        # are not computed yet; no save happens then
        return self._bd.canonical_state(self.setup, self.layout, state)

    def extras(self, state) -> dict:
        """The raw slots, ``raw.<field>``, and the layout they belong to."""
        out = flatten_leaves(self._bd.raw_state(state), prefix="raw.")
        out["raw.layout"] = np.asarray(
            [*self.layout.mesh, self.layout.capacity, self.layout.max_partners], np.int64
        )
        return out

    def from_view(self, view: dict, host: dict):
        layout = np.asarray(
            [*self.layout.mesh, self.layout.capacity, self.layout.max_partners], np.int64
        )
        saved = host.get("raw.layout")
        if saved is not None and np.array_equal(saved, layout):
            template = self._bd.raw_state(self.initial_state())
            raw = unflatten_leaves(host, template, prefix="raw.")
            state = self._bd.place_raw(self._grid, raw)
        else:
            state = self._bd.place_canonical(self.setup, self.layout, self._grid, view)
        self._first = False  # the forces come with the checkpoint
        return state
