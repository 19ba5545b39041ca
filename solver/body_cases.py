"""Rigid-body cases: a Scene, its BodySetup and the initial Bodies, built from a case config.

Host-side NumPy and validation only; nothing here is traced. Every bad value raises
``solver.config.ConfigError`` (one line naming the key), also a time step above the stability limit
of the contact stiffness (``solver.body_step.stable_time_step``), with a suggested step.

Cases (spheres only for now):
    projectile: one sphere launched under gravity, no contacts; the diagnostics compare the centre
        with the exact parabola x(t) = x0 + v0 t + g t^2 / 2 at the output steps.
    bounce: one sphere dropped from rest on the plane z = 0; the diagnostics give the first
        rebound height h1 and h1 / h0 against e^2 (the ratio of a point mass with restitution e).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np

from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.body_step import BodySetup, stable_time_step
from solver.config import BounceConfig, ConfigError, ProjectileConfig, RunConfig
from solver.packings import check_overlaps
from solver.scene import BodyArrays, PlaneArrays, Scene, scene_from_dict

PROJECTILE_STEPS = 1500  # steps of a projectile run with dt = null
DT_FRACTION = 0.5  # dt = null: this fraction of the stable step
MAX_CELLS_PER_AXIS = 32  # a grid covering a long flight uses larger cells instead of more
GRID_CAPACITY = 4  # bodies per cell and partners per body (one-sphere cases)


@dataclass(frozen=True, eq=False)
class BodyCase:
    """A built rigid-body case.

    Attributes:
        name: the case name.
        scene: the bodies as given (materials, spheres, planes).
        setup: static parameters of the step (dt, grid, materials, planes).
        bodies: the initial state, float64.
        mass: (n,) kg.
        default_steps: steps of ``duration`` at ``setup.dt``.
        output_every: steps between bodies.h5 outputs; None: about 50 per run.
        stable_dt: s, the stability limit of the contact stiffness (None without contacts).
        diagnose: (times (T,) s, positions (T, n, 3) m at the output steps, per-step series
            {"time": (S,), "potential": (S,) J, "contacts": (S,)}, steps 0..S-1) -> case numbers.
        info: case parameters for run.json.
    """

    name: str
    scene: Scene
    setup: BodySetup
    bodies: Bodies
    mass: np.ndarray
    default_steps: int
    output_every: int | None
    stable_dt: float | None
    diagnose: Callable[[np.ndarray, np.ndarray, dict], dict] = field(repr=False)
    info: dict = field(default_factory=dict)


def build_body_case(config: RunConfig) -> BodyCase:
    """Build the rigid-body case of a validated config (before anything is traced)."""
    case = config.case
    if isinstance(case, ProjectileConfig):
        return _projectile(case)
    if isinstance(case, BounceConfig):
        return _bounce(case)
    raise ConfigError("case.name", case.name, "a rigid-body case: projectile | bounce")


def initial_bodies(bodies: BodyArrays) -> Bodies:
    """Bodies (float64) of the spheres of a scene. Spheres only: the inertia must be isotropic,
    so any frame is principal and the orientation is kept as given."""
    inertia = bodies.inertia
    moments = np.diagonal(inertia, axis1=1, axis2=2)
    if not np.allclose(inertia, moments[:, :, None] * np.eye(3), rtol=0, atol=0):
        raise ValueError("only spheres (diagonal inertia) are supported by the body cases yet")
    inverse_mass = np.where(bodies.fixed, 0.0, 1.0 / bodies.mass)
    inverse_inertia = np.where(bodies.fixed[:, None], 0.0, 1.0 / moments)
    angular_momentum = moments * bodies.angular_velocity  # isotropic: L = I omega
    return Bodies(
        position=jnp.asarray(bodies.position, jnp.float64),
        orientation=jnp.asarray(bodies.orientation, jnp.float64),
        velocity=jnp.asarray(bodies.velocity, jnp.float64),
        angular_momentum=jnp.asarray(angular_momentum, jnp.float64),
        prescribed_angular_velocity=jnp.asarray(bodies.angular_velocity, jnp.float64),
        inverse_mass=jnp.asarray(inverse_mass, jnp.float64),
        inverse_inertia=jnp.asarray(inverse_inertia, jnp.float64),
        kinematic=jnp.asarray(bodies.kinematic),
    )


def setup_from_scene(
    scene: Scene,
    grid: CellGrid,
    dt: float,
    skin: float,
    gravity: tuple[float, float, float],
    contact_model: str = "hertz",
    stiffness: float | None = None,
) -> BodySetup:
    """The BodySetup of a scene of spheres and planes; per-body and per-plane material values.

    ``stiffness`` (N/m) is the linear model's spring of every sphere; planes are given the same
    spring, so a sphere-plane pair gets k/2 (the series spring).
    """
    bodies, planes = scene.arrays()
    if bodies.member_body.size != bodies.position.shape[0]:
        raise ValueError("only spheres are supported by the body cases yet (no clumps)")
    names = bodies.material_names

    def column(arrays: BodyArrays | PlaneArrays, attr: str) -> np.ndarray:
        return np.array(
            [getattr(scene.materials[names[m]], attr) for m in arrays.material], dtype=float
        )

    linear = contact_model == "linear"
    return BodySetup(
        radius=bodies.member_radius,
        young=column(bodies, "young"),
        poisson=column(bodies, "poisson"),
        restitution=column(bodies, "restitution"),
        friction=column(bodies, "friction"),
        rolling_friction=column(bodies, "rolling_friction"),
        grid=grid,
        dt=dt,
        skin=skin,
        gravity=gravity,
        contact_model=contact_model,
        stiffness=np.full(bodies.mass.shape, stiffness) if linear else None,
        plane_point=planes.point,
        plane_normal=planes.normal,
        plane_young=column(planes, "young"),
        plane_poisson=column(planes, "poisson"),
        plane_restitution=column(planes, "restitution"),
        plane_friction=column(planes, "friction"),
        plane_rolling_friction=column(planes, "rolling_friction"),
        plane_stiffness=np.full(planes.material.shape, stiffness) if linear else None,
    )


def _grid(lower: np.ndarray, upper: np.ndarray, radius: float, skin: float) -> CellGrid:
    """Cells of at least 2 r + skin covering [lower, upper], at most MAX_CELLS_PER_AXIS per axis."""
    extent = float(np.max(upper - lower))
    size = max(2.0 * radius + skin, extent / MAX_CELLS_PER_AXIS)
    return CellGrid.covering(lower, upper, size, GRID_CAPACITY, GRID_CAPACITY)


def _steps(duration: float, dt: float) -> int:
    return max(1, round(duration / dt))


# --- projectile ----------------------------------------------------------------------------------


def _projectile(case: ProjectileConfig) -> BodyCase:
    dt = case.dt if case.dt is not None else case.duration / PROJECTILE_STEPS
    theta = math.radians(case.angle)
    x0 = np.array([0.0, 0.0, case.launch_height])
    v0 = case.speed * np.array([math.cos(theta), 0.0, math.sin(theta)])
    g = np.array([0.0, 0.0, -case.gravity])
    steps = _steps(case.duration, dt)
    material = {
        "young": 2.0e11,  # steel; unused, a lone sphere never touches anything
        "poisson": 0.3,
        "density": case.density,
        "restitution": 1.0,
        "friction": 0.0,
    }
    scene = scene_from_dict(
        {
            "materials": {"ball": material},
            "bodies": [
                {
                    "shape": "sphere",
                    "material": "ball",
                    "radius": case.radius,
                    "position": x0.tolist(),
                    "velocity": v0.tolist(),
                }
            ],
        },
        key_prefix="case",
    )
    t = np.linspace(0.0, steps * dt, 513)
    path = x0 + v0 * t[:, None] + 0.5 * g * t[:, None] ** 2
    skin = 2.0 * (case.speed + case.gravity * steps * dt) * dt
    margin = case.radius + skin
    grid = _grid(path.min(0) - margin, path.max(0) + margin, case.radius, skin)
    setup = setup_from_scene(scene, grid, dt, skin, tuple(g))
    arrays, _ = scene.arrays()

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        exact = x0 + v0 * times[:, None] + 0.5 * g * times[:, None] ** 2
        error = np.linalg.norm(positions[:, 0, :] - exact, axis=1)
        return {
            "position_error_max_m": float(error.max()),
            "position_error_max_relative": float(error.max() / max(np.ptp(exact, 0).max(), 1e-300)),
            "exact_final_position_m": exact[-1].tolist(),
        }

    return BodyCase(
        name=case.name,
        scene=scene,
        setup=setup,
        bodies=initial_bodies(arrays),
        mass=arrays.mass,
        default_steps=steps,
        output_every=case.output_every,
        stable_dt=None,
        diagnose=diagnose,
        info={"speed_m_s": case.speed, "angle_deg": case.angle, "gravity_m_s2": case.gravity},
    )


# --- bounce --------------------------------------------------------------------------------------


def _bounce(case: BounceConfig) -> BodyCase:
    m = case.material
    material = {
        "young": m.young,
        "poisson": m.poisson,
        "density": m.density,
        "restitution": m.restitution,
        "friction": m.friction,
    }
    r, h0 = case.radius, case.drop_height
    scene = scene_from_dict(
        {
            "materials": {"ball": material},
            "bodies": [
                {"shape": "plane", "material": "ball", "point": [0, 0, 0], "normal": [0, 0, 1]},
                {"shape": "sphere", "material": "ball", "radius": r, "position": [0, 0, r + h0]},
            ],
        },
        key_prefix="case",
    )
    check_overlaps(scene, key_prefix="case")
    gravity = (0.0, 0.0, -case.gravity)
    impact_speed = math.sqrt(2.0 * case.gravity * h0)
    arrays, _ = scene.arrays()

    def setup_for(dt: float) -> BodySetup:
        skin = 2.0 * impact_speed * dt
        span = r + skin
        lower = np.array([-span, -span, -span])
        upper = np.array([span, span, 2.0 * r + h0 + span])
        grid = _grid(lower, upper, r, skin)
        return setup_from_scene(scene, grid, dt, skin, gravity, case.contact_model, case.stiffness)

    stable = stable_time_step(setup_for(1e-300), arrays.mass)
    if case.dt is None:
        dt = DT_FRACTION * stable
    elif case.dt > stable:
        raise ConfigError(
            "case.dt",
            case.dt,
            f"<= {stable:.4g} s (the stable step of the {case.contact_model} contact)",
            hint=f"use case.dt={DT_FRACTION * stable:.3g} or case.dt=null",
        )
    else:
        dt = case.dt
    setup = setup_for(dt)
    e2 = m.restitution**2

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        mass = float(arrays.mass[0])
        gap = series["potential"] / (mass * case.gravity) - r  # lowest point above the plane
        touching = np.asarray(series["contacts"]) > 0
        out: dict = {"drop_height_m": h0, "restitution_squared": e2}
        hits = np.flatnonzero(touching)
        if hits.size == 0:
            return out | {"first_rebound_height_m": None, "note": "no contact within the run"}
        first = hits[0]
        contact_time = float(series["time"][first])
        leaves = np.flatnonzero(~touching[first:])
        if leaves.size == 0:
            return out | {"first_rebound_height_m": None, "note": "still in contact at the end"}
        start = first + leaves[0]
        again = np.flatnonzero(touching[start:])
        stop = start + again[0] if again.size else gap.size
        apex = start + int(np.argmax(gap[start:stop]))
        reached = apex < stop - 1  # the height fell again before the run (or flight) ended
        rebound = float(gap[apex])
        ratio = rebound / h0
        return out | {
            "first_contact_time_s": contact_time,
            "contact_duration_s": float(series["time"][start] - series["time"][first]),
            "first_rebound_height_m": rebound,
            "rebound_ratio": ratio,
            "rebound_ratio_error": ratio - e2,
            "rebound_apex_reached": bool(reached),
        }

    return BodyCase(
        name=case.name,
        scene=scene,
        setup=setup,
        bodies=initial_bodies(arrays),
        mass=arrays.mass,
        default_steps=_steps(case.duration, dt),
        output_every=case.output_every,
        stable_dt=stable,
        diagnose=diagnose,
        info={
            "drop_height_m": h0,
            "contact_model": case.contact_model,
            "restitution": m.restitution,
        },
    )
