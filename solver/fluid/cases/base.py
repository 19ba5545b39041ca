"""What every case hands to the run loop, and the checks and helpers the cases share.

A case turns its typed physical config into lattice units: a ``FluidSetup``, the initial
density and velocity, the unit converter, a default number of steps, and a ``diagnostics`` hook
that computes case-specific values for ``run.json`` from the final fields (and, for bodies, the
force history). Node i along an axis sits at ``origin + (i + 0.5) dx``.

Grid fields (the initial density and velocity, the setup's solid mask, wall velocity, link
fractions, obstacle and sponge) are ``solver.fluid.setup.GridField``s: formulas evaluated on a
box of cells, so that each process of a distributed run builds only its own block
(``Distribution.put``); ``np.asarray`` gives the whole grid where the host needs it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from kernels.lattices import CS2, Lattice
from solver.errors import ConfigError
from solver.fluid.config import MAX_MACH, FluidConfig
from solver.fluid.grid_field import Box, GridField
from solver.fluid.setup import FluidSetup
from solver.fluid.units import UnitConverter, mach

log = logging.getLogger("solver")
TAU_WARNING = 0.505  # below this, runs are usually unstable except at very low velocity


class FieldsNotGatheredError(Exception):
    """A case's diagnostics asked for the final fields of a run too large to gather them."""


class NotGathered:
    """Stands for a final field that was not gathered (``output.gather_cells``): any use of it
    raises ``FieldsNotGatheredError``, so the run loop can tell the diagnostics that need whole
    fields from those that do not, without a list to keep in step with the cases."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self, *args, **kwargs):
        raise FieldsNotGatheredError(self._name)

    __array__ = __getitem__ = __iter__ = __len__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __pow__ = __neg__ = __abs__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = _refuse

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise FieldsNotGatheredError(self._name)


@dataclass(frozen=True)
class RunData:
    """What the run loop hands to ``Case.diagnostics`` (lattice units).

    Attributes:
        steps: steps done.
        density: (*shape) final lattice density (a ``NotGathered`` above
            ``output.gather_cells``: using it raises ``FieldsNotGatheredError``).
        velocity: (d, *shape) final lattice velocity (the same).
        forces: (steps, d) lattice force on the obstacle after each step (then the moment,
            (steps, setup.force_width), when the setup measures it), or None.
        energy: (chunks + 1, 2) step and mean kinetic energy <rho |u|^2 / 2> (lattice units)
            at the start and after every chunk, for cases with ``tracks_energy``; else None.
    """

    steps: int
    density: np.ndarray | NotGathered
    velocity: np.ndarray | NotGathered
    forces: np.ndarray | None = None
    energy: np.ndarray | None = None


@dataclass(frozen=True)
class Case:
    """A built case: the lattice-unit problem plus its physical meaning.

    Attributes:
        name: case name.
        setup: the static lattice-unit problem.
        units: the physical <-> lattice converter.
        density: (*shape) initial lattice density (a GridField or an array, float64).
        velocity: (d, *shape) initial lattice velocity (likewise).
        default_steps: steps when the config gives none.
        origin: (d,) m; node i along axis a sits at origin[a] + (i + 0.5) dx.
        mach: lattice Mach number of the characteristic (peak) velocity.
        reynolds: Reynolds number of the flow, with the case's reference length and velocity.
        png_field: "speed" or "vorticity", the field the final PNG shows by default.
        measures_forces: whether the run loop should keep the force history (obstacle present).
        tracks_energy: whether the run loop should record the mean kinetic energy after every
            chunk (turbulence cases: the dissipation rate is its slope).
        velocity_gradient: None or (d, d, *shape) lattice d u_b / d x_a of the initial field:
            the run then starts with its first-order non-equilibrium part (no initial layer).
        info: extra scalars for run.json (reference velocity, body force, ...).
    """

    name: str
    setup: FluidSetup
    units: UnitConverter
    density: np.ndarray | GridField = field(repr=False)
    velocity: np.ndarray | GridField = field(repr=False)
    default_steps: int
    origin: tuple[float, ...]
    mach: float
    reynolds: float
    png_field: str = "speed"
    measures_forces: bool = False
    tracks_energy: bool = False
    velocity_gradient: np.ndarray | GridField | None = field(default=None, repr=False)
    info: dict = field(default_factory=dict)

    @property
    def tau(self) -> float:
        return self.setup.tau

    def coordinates(self) -> list[np.ndarray]:
        """Node coordinates in m, one 1-D array per axis."""
        return [
            self.origin[a] + (np.arange(n) + 0.5) * self.units.dx
            for a, n in enumerate(self.setup.shape)
        ]

    def diagnostics(self, data: RunData) -> dict:
        """Case-specific values for run.json; plain JSON types only."""
        return {}

    def force_coefficients(self) -> list[tuple[str, int, float]]:
        """The coefficient columns of forces.csv: (name, index into a row of the force report,
        factor). Default: a 2D body's cd and cl, C = 2 F / (U^2 D) per unit depth in lattice
        units, with ``info["u_mean_lattice"]`` and ``info["d_cells"]``."""
        scale = 2.0 / (self.info["u_mean_lattice"] ** 2 * self.info["d_cells"])
        return [("cd", 0, scale), ("cl", 1, scale)]


def relaxation_rate(
    units: UnitConverter, viscosity: float, fluid: FluidConfig, viscosity_key: str
) -> float:
    """omega = 1/tau for the physical viscosity; ConfigError if tau <= 1/2.

    The message names the keys that set tau (viscosity, resolution, u_lattice).
    """
    tau = units.tau(viscosity)
    if not tau > 0.5 or not np.isfinite(tau):
        raise ConfigError(
            "tau",
            round(tau, 8),
            "> 0.5",
            hint=(
                f"tau = 1/2 + 3 nu dt/dx^2 is set by {viscosity_key}={viscosity:g}, "
                f"case.resolution and fluid.u_lattice={fluid.u_lattice:g} "
                "(raise the viscosity, the resolution or u_lattice)"
            ),
        )
    if tau < TAU_WARNING:
        log.warning(
            "tau = %.5f is close to 0.5: expect instability unless the flow is gentle "
            "(raise %s, case.resolution or fluid.u_lattice)",
            tau,
            viscosity_key,
        )
    return 1.0 / tau


def check_mach(u_peak_lattice: float, fluid: FluidConfig) -> float:
    """Lattice Mach number of the peak velocity; ConfigError above 0.3."""
    m = mach(u_peak_lattice)
    if m > MAX_MACH:
        limit = MAX_MACH * np.sqrt(CS2) * fluid.u_lattice / u_peak_lattice
        raise ConfigError(
            "fluid.u_lattice",
            fluid.u_lattice,
            f"<= {limit:.4g} (lattice Mach = u / c_s <= {MAX_MACH})",
            hint=f"Mach = {m:.3f}",
        )
    return m


def cells(key: str, value: float, length: float, dx: float, minimum: int) -> int:
    """Number of cells covering ``length``; ConfigError if fewer than ``minimum``."""
    n = int(round(length / dx))
    if n < minimum:
        raise ConfigError(
            key,
            value,
            f"a value giving >= {minimum} cells (gives {n} at dx = {dx:.4g} m)",
            hint="raise case.resolution",
        )
    return n


def box_indices(box: Box) -> list[np.ndarray]:
    """Global int64 node indices of a box, one open (broadcastable) grid per axis, as
    ``np.ogrid``: axis a's array has shape (1, .., n_a, .., 1)."""
    d = len(box)
    return [
        np.arange(s.start, s.stop).reshape([-1 if a == k else 1 for a in range(d)])
        for k, s in enumerate(box)
    ]


def box_shape(box: Box) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in box)


def mask_field(shape: tuple[int, ...], mask) -> GridField:
    """A bool GridField from ``mask(*box_indices(box))`` (a broadcastable bool expression)."""

    def compute(box: Box) -> np.ndarray:
        values = mask(*box_indices(box))
        return np.ascontiguousarray(np.broadcast_to(values, box_shape(box)), dtype=bool)

    return GridField(shape, bool, compute)


def zeros_field(shape: tuple[int, ...], lead: tuple[int, ...] = ()) -> GridField:
    """float64 zeros (*lead, *shape), as ``np.zeros``."""
    return GridField.constant(shape, 0.0, np.float64, lead)


def ones_field(shape: tuple[int, ...]) -> GridField:
    """float64 ones (*shape), as ``np.ones``: the resting initial density."""
    return GridField.constant(shape, 1.0, np.float64)


def relative_l2(measured: np.ndarray, reference: np.ndarray) -> float:
    """sqrt(sum |measured - reference|^2 / sum |reference|^2)."""
    num = float(np.sum((np.asarray(measured) - reference) ** 2))
    den = float(np.sum(np.asarray(reference) ** 2))
    return float(np.sqrt(num / den)) if den > 0 else float(np.sqrt(num))


def fluid_setup(
    fluid: FluidConfig, lattice: Lattice, shape: tuple[int, ...], omega: float, **geometry
) -> FluidSetup:
    """A FluidSetup with the collision and precision chosen in the ``fluid`` config group;
    ``geometry`` holds the case's solid mask, walls, obstacle, open boundaries and force."""
    return FluidSetup(
        lattice=lattice,
        shape=shape,
        omega=omega,
        dtype=fluid.precision,
        storage=fluid.storage,
        collision=fluid.collision,
        trt_magic=fluid.trt_magic,
        les=fluid.les,
        les_cs=fluid.les_cs,
        kernel=fluid.kernel,
        curved_walls=fluid.curved_walls,
        **geometry,
    )


@dataclass(frozen=True)
class LatticeScales:
    """What every case derives from its physical scales: units, omega and lattice Mach."""

    units: UnitConverter
    omega: float
    mach: float


def lattice_scales(
    fluid: FluidConfig,
    length: float,
    resolution: int,
    velocity: float,
    viscosity: float,
    density: float,
    viscosity_key: str = "case.viscosity",
) -> LatticeScales:
    """dx from ``length / resolution``, dt from mapping ``velocity`` (m/s) to fluid.u_lattice;
    tau and Mach checked (ConfigError naming the keys)."""
    units = UnitConverter.from_scales(length, resolution, velocity, fluid.u_lattice, density)
    omega = relaxation_rate(units, viscosity, fluid, viscosity_key)
    return LatticeScales(units, omega, check_mach(fluid.u_lattice, fluid))
