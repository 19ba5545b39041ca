"""Static description of a fluid problem in lattice units: what a case hands to the step factory.

Everything here is host-side (NumPy) and static: shapes, lattice, boundary kinds and geometry.
Arrays use the axis order (x, y[, z]) with x first; populations are (q, nx, ny[, nz]).

The grid fields of a setup (solid mask, wall velocity, link fractions, obstacle, sponge) and a
case's initial density and velocity are NumPy arrays or ``GridField``s (solver/fluid/grid_field.py:
computed per block on the distributed path, the whole grid where the host needs it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels.lattices import Lattice
from kernels.storage import SHIFTED, STORAGES
from solver.fluid.grid_field import GridField

COLLISIONS = ("bgk", "trt", "regularized", "kbc")
CURVED_WALL_RULES = ("linear", "quadratic")
# the operators that need the tensor-product lattices D2Q9 and D3Q27 (q = 3^d)
TENSOR_PRODUCT_COLLISIONS = ("kbc",)
LES_MODELS = ("none", "smagorinsky")
KERNELS = ("xla", "native", "pallas", "cuda")
# OpenBoundary.kind: the inlets prescribe a velocity, the outlets a density or an outflow
INLET_KINDS = ("velocity", "velocity_bounce_back")
OUTLET_KINDS = ("pressure", "pressure_anti_bounce_back", "convective", "characteristic")


@dataclass(frozen=True)
class InflowSchedule:
    """Time factor of an inlet's velocity, s(t) = ramp(t) * wave(t), t in steps.

    ramp(t) = (1 - cos(pi t / ramp_steps)) / 2 for t < ramp_steps, else 1 (a smooth start: the
    impulsive start's pressure wave is what makes the drag ripple); wave(t) = sin(2 pi t /
    period_steps) when period_steps > 0 (Schaefer-Turek 2D-3), else 1.
    """

    ramp_steps: float = 0.0
    period_steps: float = 0.0

    @property
    def steady(self) -> bool:
        return self.ramp_steps <= 0.0 and self.period_steps <= 0.0


@dataclass(frozen=True)
class OpenBoundary:
    """An inlet or an outlet covering one face of the box (docs/configuration.md, "Open
    boundaries").

    Attributes:
        axis: the face normal, 0..d-1.
        side: "low" (index 0) or "high" (index n-1).
        kind: one of INLET_KINDS or OUTLET_KINDS:
            "velocity": prescribed velocity on the face node, density and the regularized
                non-equilibrium part extrapolated (Latt et al. 2008);
            "velocity_bounce_back": link-wise, the velocity prescribed half a cell outside the
                face node by bounce-back with a moving-wall term (Ladd 1994);
            "pressure": prescribed density on the face node, velocity extrapolated;
            "pressure_anti_bounce_back": link-wise, the density prescribed half a cell outside
                the face node (anti-bounce-back, Kruger et al. 2017 sec. 5.3.4);
            "convective": the incoming populations carried out of the box with the local normal
                velocity, df/dt + U df/dn = 0 (Yang 2013; Lou, Guo & Shi 2013): vortices and
                pressure waves leave with little reflection;
            "characteristic": the normal velocity carried out at u_n + c_s and the density from
                the incoming acoustic invariant held (Thompson 1987; Poinsot & Lele 1992):
                sound leaves too.
        velocity: (d, *face_shape) lattice velocity on the face, for the inlet kinds. The face
            shape is the grid shape with ``axis`` removed.
        density: lattice density on the face, for the pressure kinds.
        schedule: the inlet velocity's time factor.
    """

    axis: int
    side: str
    kind: str
    velocity: np.ndarray | None = field(default=None, repr=False)
    density: float | None = None
    schedule: InflowSchedule = InflowSchedule()

    def __post_init__(self) -> None:
        if self.kind not in INLET_KINDS + OUTLET_KINDS:
            kinds = INLET_KINDS + OUTLET_KINDS
            raise ValueError(f"open boundary kind {self.kind!r} not in {kinds}")
        if self.is_inlet and self.velocity is None:
            raise ValueError(f"open boundary kind {self.kind!r} needs a velocity")
        if not self.is_inlet and self.density is None:
            raise ValueError(f"open boundary kind {self.kind!r} needs a density")

    @property
    def is_inlet(self) -> bool:
        """Whether the face prescribes a velocity (an inlet)."""
        return self.kind in INLET_KINDS


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

    The grid fields (solid, wall_velocity, wall_distance, obstacle, sponge) are NumPy arrays
    or ``GridField``s (built per block on the distributed path, see the module docstring).

    Attributes:
        lattice: the velocity set.
        shape: grid shape (nx, ny[, nz]).
        dtype: compute dtype of the step ("float32" or "float64"), and the storage dtype of
            the populations unless ``storage`` names another.
        storage: None (the populations are kept in ``dtype``) or the dtype they are kept in
            between steps (state, ghost-padded buffers, halo messages, checkpoints): "float16"
            or "bfloat16" with float32 compute, stored as (f - w) * s (kernels/storage.py);
            naming ``dtype`` itself is the same as None.
        omega: relaxation rate 1/tau of the viscous (symmetric) moments.
        collision: one of COLLISIONS: "bgk", "trt", "regularized" (recursive regularized BGK)
            or "kbc" (entropic multi-relaxation; D2Q9 and D3Q27 only, without les).
        trt_magic: TRT magic parameter Lambda (3/16 places half-way walls exactly mid-link).
        les: "none" or "smagorinsky": the even rate computed per cell from the local strain
            (kernels/collision.py), on BGK, TRT and regularized (TRT keeps Lambda, so its odd
            rate follows); not with KBC.
        les_cs: the Smagorinsky constant C_s (> 0), used with les = "smagorinsky".
        kernel: "xla" (the pure-JAX step, solver/fluid/step.py), "native" (the in-place CPU
            kernel on one buffer, solver/fluid/inplace_step.py), "pallas" (the in-place GPU
            kernel on one buffer, solver/fluid/pallas_step.py) or "cuda" (the CPU kernel's
            scheme for GPUs, kernels/native/lb_gpu.cu; one device).
        solid: (*shape) bool, True on solid nodes. Domain edges are periodic, so walls at the
            box edges are solid layers.
        wall_velocity: (d, *shape) lattice velocity of solid nodes (moving walls, Ladd's rule);
            None for resting walls.
        wall_distance: (q, *shape) for a link from fluid node x along c_i into a solid node,
            the fraction of the link between x and the wall, in (0, 1]; anything elsewhere.
            None means half-way (0.5) on every link. Used by interpolated bounce-back.
        obstacle: (*shape) bool, the solid nodes whose hydrodynamic force is measured; None for
            no force measurement.
        open_boundaries: inlets and outlets.
        body_force: None or a BodyForce.
        sponge: (*shape) added relaxation time dtau(x) >= 0 of an absorbing layer (the even
            rate there is 1/(tau + dtau)); None for no sponge.
        moment_center: (d,) index coordinates (node i at i) of the point about which the
            obstacle's moment is measured; None: force only. With it the step reports the force
            and then the moment, d + 3 values in 3D (M_x, M_y, M_z), d + 1 in 2D (M_z).
        mirror_axes: axes (not the first) whose two faces are symmetry planes instead of
            periodic edges: free-slip planes half a cell below the first and above the last
            node, where a population leaving the grid comes back with that axis's velocity
            component reversed (specular reflection; the ghosts mirror the edge planes). A
            flow and geometry symmetric about such a plane are computed on one side of it
            (a half or quarter model); a body may cross it (its other half is its mirror
            image). Not with moving walls; the xla kernel only.
        curved_walls: the interpolated bounce-back on the ``wall_distance`` links: "linear"
            (Bouzidi, Firdaouss & Lallemand 2001, two nodes) or "quadratic" (theirs over three
            nodes along the link; where the second or third node is solid or outside a
            non-periodic edge of the block, the linear rule). Quadratic on one device only:
            the third node lies two cells away, beyond the one-cell halo.
    """

    lattice: Lattice
    shape: tuple[int, ...]
    omega: float
    dtype: str = "float32"
    storage: str | None = None
    collision: str = "bgk"
    trt_magic: float = 3.0 / 16.0
    les: str = "none"
    les_cs: float = 0.1
    kernel: str = "xla"
    solid: np.ndarray | GridField | None = field(default=None, repr=False)
    wall_velocity: np.ndarray | GridField | None = field(default=None, repr=False)
    wall_distance: np.ndarray | GridField | None = field(default=None, repr=False)
    obstacle: np.ndarray | GridField | None = field(default=None, repr=False)
    open_boundaries: tuple[OpenBoundary, ...] = ()
    body_force: BodyForce | None = None
    sponge: np.ndarray | GridField | None = field(default=None, repr=False)
    moment_center: tuple[float, ...] | None = None
    mirror_axes: tuple[int, ...] = ()
    curved_walls: str = "linear"

    def __post_init__(self) -> None:
        d = self.lattice.d
        mirror = tuple(self.mirror_axes)
        if len(set(mirror)) != len(mirror) or not all(0 < a < d for a in mirror):
            raise ValueError(f"mirror_axes {mirror}: distinct axes among 1..{d - 1}")
        if mirror and self.wall_velocity is not None:
            raise ValueError("mirror_axes with moving walls (wall_velocity) are not supported")
        if len(self.shape) != d:
            raise ValueError(
                f"grid shape {self.shape} has {len(self.shape)} axes, {self.lattice.name} needs {d}"
            )
        if self.collision not in COLLISIONS:
            raise ValueError(f"collision {self.collision!r} not in {COLLISIONS}")
        if self.curved_walls not in CURVED_WALL_RULES:
            raise ValueError(f"curved_walls {self.curved_walls!r} not in {CURVED_WALL_RULES}")
        storage = self.storage_dtype
        if storage not in STORAGES:
            raise ValueError(f"storage {storage!r} not in {STORAGES}")
        if storage != self.dtype and not (storage in SHIFTED and self.dtype == "float32"):
            raise ValueError(
                f"storage {storage!r} with dtype {self.dtype!r}: the storage is the compute "
                f"dtype, or one of {SHIFTED} with float32"
            )
        if self.les not in LES_MODELS:
            raise ValueError(f"les {self.les!r} not in {LES_MODELS}")
        if self.collision in TENSOR_PRODUCT_COLLISIONS and self.lattice.q != 3**d:
            raise ValueError(
                f"collision {self.collision!r} needs D2Q9 or D3Q27, not {self.lattice.name}"
            )
        if self.collision == "kbc" and self.les != "none":
            raise ValueError(f"collision 'kbc' takes no subgrid model (les {self.les!r})")
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel {self.kernel!r} not in {KERNELS}")
        if not self.les_cs > 0.0:
            raise ValueError(f"les_cs={self.les_cs} must be > 0")
        if not 0.0 < self.omega < 2.0:
            raise ValueError(f"omega={self.omega} must lie in (0, 2) (tau > 0.5)")
        if self.moment_center is not None and len(self.moment_center) != d:
            raise ValueError(f"moment_center {self.moment_center} needs {d} coordinates")
        for name, arr, lead in (
            ("solid", self.solid, ()),
            ("obstacle", self.obstacle, ()),
            ("sponge", self.sponge, ()),
            ("wall_velocity", self.wall_velocity, (d,)),
            ("wall_distance", self.wall_distance, (self.lattice.q,)),
        ):
            if arr is not None and tuple(arr.shape) != lead + tuple(self.shape):
                raise ValueError(
                    f"{name} has shape {arr.shape}, expected {lead + tuple(self.shape)}"
                )

    @property
    def force_width(self) -> int:
        """Values the step reports per step: the force (d), then the moment if measured."""
        d = self.lattice.d
        return d if self.moment_center is None else d + (3 if d == 3 else 1)

    @property
    def storage_dtype(self) -> str:
        """The dtype the populations are kept in (``storage``, else ``dtype``)."""
        return self.dtype if self.storage is None else self.storage

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
