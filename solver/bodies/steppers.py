"""How a single rigid-body run advances: on one device, or split over a device mesh.

Both steppers offer the same four operations to the run loop (``solver.bodies.simulation``):
``advance(n)`` -> per-step diagnostics (host), ``snapshot()`` -> (bodies, contact counts) on the
host in body order, ``overflow()`` -> a message or None, and ``initial`` (the diagnostics at
step 0). The spatial stepper (``bodies.mesh``) uses ``solver.distributed.bodies``; its step-0
diagnostics come from the single-device evaluation of the same state, which is the reference
the decomposition is checked against.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from kernels.rigid_body import Bodies
from solver.bodies.step import (
    BodySetup,
    diagnostics,
    initial_state,
    make_body_chunk,
    overflow_message,
)
from solver.errors import ConfigError


class SingleStepper:
    def __init__(self, setup: BodySetup, bodies: Bodies) -> None:
        self.setup = setup
        self.state = initial_state(setup, bodies)
        self._chunk = jax.jit(make_body_chunk(setup), static_argnums=1)
        self.initial = jax.device_get(jax.jit(lambda s: diagnostics(setup, s))(self.state))

    def advance(self, n: int) -> Any:
        self.state, diag = self._chunk(self.state, n)
        return jax.device_get(diag)

    def snapshot(self) -> tuple[Bodies, np.ndarray]:
        return self.state.bodies, np.asarray(self.state.contact_count)

    def set_bodies(self, bodies: Bodies) -> None:
        """Continue from ``bodies`` (the twin moves kinematic bodies between chunks)."""
        self.state = self.state.replace(bodies=bodies)

    def overflow(self) -> str | None:
        return overflow_message(self.setup, self.state)


class SpatialStepper:
    """The scene split over ``mesh`` subdomains (spheres and planes)."""

    def __init__(
        self, setup: BodySetup, bodies: Bodies, mesh: tuple[int, int, int], capacities: dict
    ) -> None:
        from solver.distributed import bodies as bd

        if not setup.spheres_only:
            raise ConfigError("bodies.mesh", list(mesh), "null for a scene with clumps (not yet "
                              "decomposed)")  # fmt: skip
        try:
            self.layout = bd.plan_layout(setup, mesh, devices=jax.device_count(), **capacities)
        except NotImplementedError as err:
            raise ConfigError("bodies.mesh", list(mesh), "null", hint=str(err)) from None
        self.setup, self._bd = setup, bd
        reference = initial_state(setup, bodies)
        self.initial = jax.device_get(jax.jit(lambda s: diagnostics(setup, s))(reference))
        self._grid = bd.device_mesh(self.layout)
        self.state = bd.place(setup, self.layout, self._grid, bodies)
        self._chunk = bd.compile_chunk(setup, self.layout, self._grid, setup.params())
        self._first = True
        self.traffic = {"migrated": 0, "ghosts_max": 0, "ghost_contacts_max": 0}

    def advance(self, n: int) -> Any:
        self.state, diag = self._chunk(self.state, n, self._first)
        self._first = False
        diag = jax.device_get(diag)
        self.traffic["migrated"] += int(np.sum(diag.migrated))
        self.traffic["ghosts_max"] = max(self.traffic["ghosts_max"], int(np.max(diag.ghosts)))
        self.traffic["ghost_contacts_max"] = max(
            self.traffic["ghost_contacts_max"], int(np.max(diag.ghost_contacts))
        )
        return diag

    def snapshot(self) -> tuple[Bodies, np.ndarray]:
        bodies, _, _, count = self._bd.gather(self.setup, self.layout, self.state)
        return bodies, count

    def overflow(self) -> str | None:
        table = self._bd.overflow_table(self.layout, self.state)
        return self._bd.overflow_message(self.layout, table)
