"""A decomposed scene's state on the host, for checkpoints: raw (slot by slot) and canonical.

*Raw*: every ``SubdomainState`` leaf whole on every process (an all-gather). Placed back on the
same mesh with the same capacities it gives the state bit for bit, slot order included, so a
resumed run continues exactly as the interrupted one would have.

*Canonical*: the bodies in global id order (n, ...), with their forces, torques, contact counts
and tangential spring histories keyed by the partners' global ids: independent of the mesh, so a
checkpoint restores onto another ``bodies.mesh`` or number of devices (the summation order of
the forces then differs: equal to round-off, not bitwise).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from kernels.rigid_body import Bodies
from solver.bodies.step import BodySetup
from solver.distributed.bodies import records
from solver.distributed.bodies.layout import BodyLayout
from solver.distributed.bodies.records import SubdomainState
from solver.distributed.bodies.run import _spec, gather, host_array, host_subdomains

PER_BODY = ("force", "torque", "partners", "history", "plane_history", "contact_count")


def raw_state(state: SubdomainState) -> SubdomainState:
    """Every leaf of a placed state as a NumPy array on this host (every process calls)."""
    return jax.tree.map(host_array, state)


def place_raw(mesh: Mesh, raw: SubdomainState) -> SubdomainState:
    """A raw state (``raw_state``) back onto the devices of ``mesh``."""
    sharding = NamedSharding(mesh, _spec())

    def put(array):
        array = np.asarray(array)
        return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])

    return jax.tree.map(put, raw)


def canonical_state(setup: BodySetup, layout: BodyLayout, state: SubdomainState) -> dict:
    """The scene in global id order: ``bodies`` (Bodies of NumPy arrays), force (n, 3),
    torque (n, 3), partners (n, K) global ids, history (n, K, 3), plane_history (n, p, 3),
    contact_count (n,), time (1,). Every process calls it (all-gathers)."""
    bodies, force, torque, count = gather(setup, layout, state)
    gid = host_array(state.gid)
    held = gid >= 0
    order = np.argsort(gid[held])

    def pick(array):
        return host_array(array)[held][order]

    return {
        "bodies": bodies,
        "force": force,
        "torque": torque,
        "partners": pick(state.partners),
        "history": pick(state.history),
        "plane_history": pick(state.plane_history),
        "contact_count": count,
        "time": np.asarray(host_array(state.time)[:1], np.int32),
    }


def place_canonical(
    setup: BodySetup, layout: BodyLayout, mesh: Mesh, canonical: dict
) -> SubdomainState:
    """A canonical state (``canonical_state``, perhaps of another mesh) on ``layout``: each body
    in the subdomain that holds its centre, with its forces and spring histories."""
    bodies = Bodies(**{name: np.asarray(getattr(canonical["bodies"], name))
                       for name in records.BODY_FIELDS})  # fmt: skip
    host = host_subdomains(setup, layout, bodies)
    gid = host["gid"]
    slots = np.flatnonzero(gid >= 0)
    for name in PER_BODY:
        values = np.asarray(canonical[name])
        target = np.array(host[name])
        if values.shape[1:] != target.shape[1:]:
            raise ValueError(
                f"checkpoint field {name} has shape {values.shape[1:]} per body, the layout "
                f"{target.shape[1:]} (bodies.max_partners changed?)"
            )
        target[slots] = values[gid[slots]]
        host[name] = target
    host["time"] = np.full(layout.shards, int(np.asarray(canonical["time"]).ravel()[0]), np.int32)
    return place_raw(mesh, SubdomainState(**host))
