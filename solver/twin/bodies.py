"""The twin of a rigid-body scene: kinematic bodies follow their pose sensors.

A ``body_pose`` sensor reports a body's position (m) and orientation (unit quaternion w, x, y, z
of the frame the scene gave the body). At each chunk end the twin takes the due readings (the
same sources, checks and quarantine as the fluid twin) and, for every kinematic body with a
fresh reading, sets its pose to the reading and its prescribed velocity and angular velocity to
the change since the previous reading divided by the time between them (so the body moves on
smoothly until the next reading, and the contacts it makes see that velocity). Readings of
other kinds are ingested and counted but not used by a body case.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from kernels import quaternion
from kernels.rigid_body import Bodies
from solver.errors import ConfigError
from solver.twin.config import TwinConfig
from solver.twin.ingest import Ingestor
from solver.twin.quarantine import Quarantine
from solver.twin.replay import ReplaySource
from solver.twin.sources import take_due
from solver.twin.validate import Observation, Validator

log = logging.getLogger("solver.twin")


def _rotation_vector(q: np.ndarray) -> np.ndarray:
    """The rotation vector (3,) rad of a unit quaternion (the shorter way round)."""
    q = q if q[0] >= 0 else -q
    s = float(np.linalg.norm(q[1:]))
    if s < 1e-15:
        return 2.0 * q[1:]
    return 2.0 * math.atan2(s, q[0]) * q[1:] / s


class BodyTwin:
    """Attributes:
    updates: pose updates applied (all bodies together).
    """

    def __init__(self, config: TwinConfig, kinematic: np.ndarray, given: np.ndarray,
                 state_orientation: np.ndarray, dt: float, output_dir: Path,
                 planar: bool = False) -> None:  # fmt: skip
        self.config = config
        self.dt = dt
        self.pose = {s.id: s.body for s in config.sensors.values() if s.kind == "body_pose"}
        for sid, body in self.pose.items():
            if body >= kinematic.size or not kinematic[body]:
                allowed = f"a kinematic body of the scene (0..{kinematic.size - 1})"
                raise ConfigError(f"twin.sensors.{sid}.body", body, allowed)
        # the state's frame of a body may be its principal frame: pose readings give the scene's
        # frame, so keep the fixed rotation between the two
        self.offset = np.asarray(
            quaternion.multiply(quaternion.conjugate(jnp.asarray(given)), state_orientation)
        )
        self.previous: dict[int, tuple[float, np.ndarray, np.ndarray]] = {}
        self.updates = 0
        self.every_steps = max(1, round(config.every / dt)) if config.every else None
        self._now = 0.0
        self.latest: dict[str, Observation] = {}
        validator = Validator(config.sensors, config.time_origin or 0.0, config.max_age,
                              config.max_future, planar=planar)  # fmt: skip
        self.quarantine_path = Path(output_dir) / config.quarantine
        self.ingestor = Ingestor(validator, Quarantine(self.quarantine_path),
                                 config.max_message_bytes)  # fmt: skip
        if config.mode == "replay":
            try:
                self.source = ReplaySource(config.recording, config.time_origin or 0.0,
                                           config.pace)  # fmt: skip
            except (OSError, ValueError) as err:
                raise ConfigError("twin.recording", config.recording, "a readable recording",
                                  hint=str(err).splitlines()[0]) from None  # fmt: skip
        else:
            from solver.twin.mqtt import MqttSource

            self.source = MqttSource(config.mqtt)
            self.source.start()

    def steps_until(self, step: int) -> int | None:
        return None if self.every_steps is None else self.every_steps - step % self.every_steps

    def _ingest(self, now: float) -> list[Observation]:
        clock = None
        if self.config.mode == "mqtt":
            clock = time.time() - (self.config.time_origin or 0.0)
        accepted = take_due(self.source, self.ingestor, now, clock)
        for obs in accepted:
            self.latest[obs.sensor] = obs
        return accepted

    def after_chunk(self, step: int, bodies: Bodies) -> Bodies | None:
        """The bodies with the kinematic ones moved to their fresh readings (None: no change)."""
        now = step * self.dt
        self._now = now
        fresh = [o for o in self._ingest(now) if o.sensor in self.pose]
        if not fresh:
            return None
        position = np.array(bodies.position)
        orientation = np.array(bodies.orientation)
        velocity = np.array(bodies.velocity)
        omega = np.array(bodies.prescribed_angular_velocity)
        for obs in fresh:
            body = self.pose[obs.sensor]
            x, q = obs.value[:3], obs.value[3:] / np.linalg.norm(obs.value[3:])
            if body in self.previous:
                t0, x0, q0 = self.previous[body]
                if obs.time > t0:
                    velocity[body] = (x - x0) / (obs.time - t0)
                    turn = np.asarray(quaternion.multiply(q, quaternion.conjugate(q0)))
                    omega[body] = _rotation_vector(turn) / (obs.time - t0)
            self.previous[body] = (obs.time, x, q)
            position[body] = x
            orientation[body] = np.asarray(quaternion.multiply(q, self.offset[body]))
            self.updates += 1
        dtype = bodies.position.dtype
        return Bodies(
            position=jnp.asarray(position, dtype),
            orientation=jnp.asarray(orientation, dtype),
            velocity=jnp.asarray(velocity, dtype),
            angular_momentum=bodies.angular_momentum,
            prescribed_angular_velocity=jnp.asarray(omega, dtype),
            inverse_mass=bodies.inverse_mass,
            inverse_inertia=bodies.inverse_inertia,
            kinematic=bodies.kinematic,
        )

    def summary(self) -> dict:
        ing = self.ingestor
        return {
            "mode": self.config.mode,
            "messages": ing.counts.get("messages", 0),
            "accepted": ing.counts.get("accepted", 0),
            "rejected": ing.counts.get("rejected", 0),
            "duplicates": ing.counts.get("duplicates", 0) + ing.counts.get("duplicate_messages", 0),
            "rejected_by_reason": ing.rejected_by_reason,
            "quarantine": str(self.quarantine_path),
            "pose_updates": self.updates,
            "staleness_s": {sid: self._now - o.time for sid, o in sorted(self.latest.items())},
            "never_heard": sorted(set(self.config.sensors) - set(self.latest)),
        }

    def close(self) -> None:
        self.ingestor.quarantine.close()
        if self.config.mode == "mqtt":
            self.source.stop()


class BodyTwinHook:
    """The body twin as a chunk hook of the run loop (``solver.model.ChunkHook``): kinematic
    bodies of a rigid-body or coupled model follow their ``body_pose`` sensors between chunks.
    The model gives ``pose_frames()`` (kinematic flags (n,), the scene's orientations (n, 4),
    the state's (n, 4)), ``bodies(state)`` and ``with_bodies(state, bodies)``."""

    name = "twin"
    unbounded = False

    def __init__(self, config: TwinConfig) -> None:
        self.config = config
        self.twin: BodyTwin | None = None

    def start(self, model, output_dir: Path, first_step: int) -> None:
        if self.config.health.port is not None:
            raise ConfigError("twin.health.port", self.config.health.port,
                              "null for a body twin (not yet)")  # fmt: skip
        kinematic, given, state_orientation = model.pose_frames()
        planar = bool(getattr(model, "planar", False))  # disks of a 2D grid
        self.twin = BodyTwin(self.config, kinematic, given, state_orientation, model.dt,
                             output_dir, planar)  # fmt: skip

    def steps_until(self, step: int) -> int | None:
        return self.twin.steps_until(step)

    def after_chunk(self, step: int, model, state):
        moved = self.twin.after_chunk(step, model.bodies(state))
        return state if moved is None else model.with_bodies(state, moved)

    def summary(self) -> dict:
        return self.twin.summary() if self.twin is not None else {}

    def close(self) -> None:
        if self.twin is not None:
            self.twin.close()
