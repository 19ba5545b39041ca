"""The built coupled case the coupled model runs: a fluid case plus bodies (``CoupledCase``),
and the diagnostics of a scene of spheres in the fluid (``SceneCase``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels.rigid_body import Bodies
from solver.bodies.scene import member_world_centres
from solver.bodies.step import BodySetup
from solver.coupling.step import PsmCoupling
from solver.fluid.cases.base import Case


@dataclass(frozen=True)
class CoupledCase:
    """A built coupled case.

    Attributes:
        name: case name.
        fluid: the fluid part (set-up, units, initial fields, origin, Re, Mach).
        bodies: the rigid-body set-up (dt = fluid dt / substeps).
        initial: the bodies at time 0 (float64).
        coupling: the static coupling parameters.
        default_steps: fluid steps when the config gives none.
        output_every: fluid steps between outputs, or None.
        info: scalars for run.json.
        given_orientation: (n, 4) the scene's orientations (a pose sensor's frame), or None:
            the initial state's.
    """

    name: str
    fluid: Case
    bodies: BodySetup
    initial: Bodies = field(repr=False)
    coupling: PsmCoupling = field(repr=False)
    default_steps: int = 1
    output_every: int | None = None
    info: dict = field(default_factory=dict)
    given_orientation: np.ndarray | None = field(default=None, repr=False)

    def diagnostics(self, times: np.ndarray, track: np.ndarray, fluid: dict) -> dict:
        """Case values for run.json from the tracked bodies' history (times (k,) s, track
        (k, tracked, 9) SI position, velocity, hydrodynamic force) and the fluid case's own
        diagnostics ``fluid``."""
        return {}

    def final(self, position: np.ndarray, velocity: np.ndarray, orientation: np.ndarray) -> dict:
        """Case values for run.json from all bodies at the end (position, velocity (n, 3) SI,
        orientation (n, 4) unit quaternions)."""
        return {}

    def sphere_centres(self, position: np.ndarray, orientation: np.ndarray) -> np.ndarray:
        """(s, 3) m, the centre of every sphere (clump members included) of bodies at
        ``position`` (n, 3) m with ``orientation`` (n, 4)."""
        return member_world_centres(
            position, np.asarray(orientation, np.float64), self.bodies.member_body,
            self.bodies.member_offset,
        )  # fmt: skip


class SceneCase(CoupledCase):
    """A scene of spheres in the fluid: how it ended (all bodies, at the end of the run).
    Heights and settling velocities are along ``info["vertical_axis"]``: z, or y on a 2D grid."""

    def final(self, position: np.ndarray, velocity: np.ndarray, orientation: np.ndarray) -> dict:
        up = int(self.info.get("vertical_axis", 2))
        centres = self.sphere_centres(position, orientation)
        radius = self.bodies.radius  # per sphere
        lower = np.asarray(self.info["domain_lower_m"])
        upper = np.asarray(self.info["domain_upper_m"])
        inside = np.all((position >= lower) & (position <= upper), axis=1)
        speed = np.linalg.norm(velocity, axis=1)
        return {
            "bed_height_m": float(np.max(centres[:, up] + radius)),
            "mean_height_m": float(np.mean(position[:, up])),
            "lowest_height_m": float(np.min(centres[:, up] - radius)),
            "max_speed_final_m_s": float(speed.max()),
            "mean_speed_final_m_s": float(speed.mean()),
            "outside_domain": int(np.sum(~inside)),
        }

    def diagnostics(self, times: np.ndarray, track: np.ndarray, fluid: dict) -> dict:
        if track.size == 0:
            return {}
        w = -track[:, :, 3 + int(self.info.get("vertical_axis", 2))]
        return {"max_settling_velocity_tracked_m_s": float(w.max())}


def scene_source_name(c) -> str:
    """Where a scene came from, for run.json: its file, the generator or "config"."""
    return c.file or (c.generate or {}).get("kind") or "config"
