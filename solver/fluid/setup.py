"""Static description of a fluid problem in lattice units: what a case hands to the step factory.

Everything here is host-side (NumPy) and static: shapes, lattice, boundary kinds and geometry.
Arrays use the axis order (x, y[, z]) with x first; populations are (q, nx, ny[, nz]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels.lattices import Lattice

COLLISIONS = ("bgk", "trt")
LES_MODELS = ("none", "smagorinsky")


@dataclass(frozen=True)
class OpenBoundary:
    """A velocity inlet or a pressure outlet covering one face of the box.

    Attributes:
        axis: the face normal, 0..d-1.
        side: "low" (index 0) or "high" (index n-1).
        kind: "velocity" (prescribed velocity, density extrapolated) or
            "pressure" (prescribed density, velocity extrapolated).
        velocity: (d, *face_shape) lattice velocity on the face, for kind "velocity". The face
            shape is the grid shape with ``axis`` removed.
        density: lattice density on the face, for kind "pressure".
    """

    axis: int
    side: str
    kind: str
    velocity: np.ndarray | None = field(default=None, repr=False)
    density: float | None = None


@dataclass(frozen=True)
class BodyForce:
    """Body force density in lattice units: F(t) = constant + amplitude * sin(omega * t + phase).

    Attributes:
        constant: (d,) constant part.
        amplitude: (d,) amplitude of the periodic part (zeros for none).
        angular_frequency: omega in radians per time step.
        phase: phase in radians.
    """

    constant: tuple[float, ...]
    amplitude: tuple[float, ...] | None = None
    angular_frequency: float = 0.0
    phase: float = 0.0


@dataclass(frozen=True)
class FluidSetup:
    """Everything static about one fluid problem, in lattice units.

    Attributes:
        lattice: the velocity set.
        shape: grid shape (nx, ny[, nz]).
        dtype: storage and compute dtype of the populations ("float32" or "float64").
        omega: relaxation rate 1/tau of the viscous (symmetric) moments.
        collision: "bgk" or "trt".
        trt_magic: TRT magic parameter Lambda (3/16 places half-way walls exactly mid-link).
        les: "none" or "smagorinsky": the even rate computed per cell from the local strain
            (kernels/collision.py), on BGK and TRT (TRT keeps Lambda, so its odd rate follows).
        les_cs: the Smagorinsky constant C_s (> 0), used with les = "smagorinsky".
        solid: (*shape) bool, True on solid nodes. Domain edges are periodic, so walls at the
            box edges are solid layers.
        wall_velocity: (d, *shape) lattice velocity of solid nodes (moving walls, Ladd's rule);
            None for resting walls.
        wall_distance: (q, *shape) for a link from fluid node x along c_i into a solid node,
            the fraction of the link between x and the wall, in (0, 1]; anything elsewhere.
            None means half-way (0.5) on every link. Used by interpolated bounce-back.
        obstacle: (*shape) bool, the solid nodes whose hydrodynamic force is measured; None for
            no force measurement.
        open_boundaries: velocity inlets and pressure outlets.
        body_force: None or a BodyForce.
    """

    lattice: Lattice
    shape: tuple[int, ...]
    omega: float
    dtype: str = "float32"
    collision: str = "bgk"
    trt_magic: float = 3.0 / 16.0
    les: str = "none"
    les_cs: float = 0.1
    solid: np.ndarray | None = field(default=None, repr=False)
    wall_velocity: np.ndarray | None = field(default=None, repr=False)
    wall_distance: np.ndarray | None = field(default=None, repr=False)
    obstacle: np.ndarray | None = field(default=None, repr=False)
    open_boundaries: tuple[OpenBoundary, ...] = ()
    body_force: BodyForce | None = None

    def __post_init__(self) -> None:
        d = self.lattice.d
        if len(self.shape) != d:
            raise ValueError(
                f"grid shape {self.shape} has {len(self.shape)} axes, {self.lattice.name} needs {d}"
            )
        if self.collision not in COLLISIONS:
            raise ValueError(f"collision {self.collision!r} not in {COLLISIONS}")
        if self.les not in LES_MODELS:
            raise ValueError(f"les {self.les!r} not in {LES_MODELS}")
        if not self.les_cs > 0.0:
            raise ValueError(f"les_cs={self.les_cs} must be > 0")
        if not 0.0 < self.omega < 2.0:
            raise ValueError(f"omega={self.omega} must lie in (0, 2) (tau > 0.5)")
        for name, arr, lead in (
            ("solid", self.solid, ()),
            ("obstacle", self.obstacle, ()),
            ("wall_velocity", self.wall_velocity, (d,)),
            ("wall_distance", self.wall_distance, (self.lattice.q,)),
        ):
            if arr is not None and tuple(arr.shape) != lead + tuple(self.shape):
                raise ValueError(
                    f"{name} has shape {arr.shape}, expected {lead + tuple(self.shape)}"
                )

    @property
    def tau(self) -> float:
        return 1.0 / self.omega

    @property
    def viscosity(self) -> float:
        """Lattice kinematic viscosity nu = c_s^2 (tau - 1/2)."""
        return (self.tau - 0.5) / 3.0

    @property
    def cells(self) -> int:
        return int(np.prod(self.shape))
