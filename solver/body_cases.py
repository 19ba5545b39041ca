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

from kernels import quaternion, rigid_body
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.body_step import BodySetup, stable_time_step
from solver.config import (
    BounceConfig,
    ConfigError,
    CradleConfig,
    InclineConfig,
    MaterialConfig,
    ProjectileConfig,
    RunConfig,
    TumblingConfig,
)
from solver.packings import check_overlaps
from solver.scene import BodyArrays, PlaneArrays, Scene, rotation_matrices, scene_from_dict

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
        diagnose: (times (T,) s, positions (T, n, 3) m at the output steps, series) -> case
            numbers; series holds per-step totals of steps 0..S-1 ("time" (S,) s, "kinetic",
            "potential" (S,) J, "momentum" (S, 3), "angular_momentum" (S, 3) about the origin,
            "contacts" (S,)) and the state's "orientation" (T, n, 4) and "velocity" (T, n, 3) at
            the output steps.
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
    if isinstance(case, TumblingConfig):
        return _tumbling(case)
    if isinstance(case, InclineConfig):
        return _incline(case)
    if isinstance(case, CradleConfig):
        return _cradle(case)
    raise ConfigError(
        "case.name",
        case.name,
        "a rigid-body case: projectile | bounce | tumbling | incline | cradle",
    )


def initial_bodies(bodies: BodyArrays) -> Bodies:
    """Bodies (float64) of the spheres of a scene.

    An isotropic inertia keeps the orientation as given (any frame is principal). A full tensor
    (given in the body's own frame) is diagonalised by ``kernels.rigid_body.principal_frame``: the
    state's orientation becomes orientation * rotation and its inverse_inertia the inverse
    principal moments (ascending), so axis 1 of the state's frame is the intermediate axis. The
    world angular momentum is L = R I R^T omega with R the given orientation.
    """
    inertia = bodies.inertia
    moments = np.diagonal(inertia, axis1=1, axis2=2)
    orientation = np.asarray(bodies.orientation, dtype=float)
    isotropic = np.allclose(inertia, moments[:, :, None] * np.eye(3), rtol=0, atol=0) and np.all(
        moments == moments[:, :1]
    )
    if not isotropic:
        principal, rotation = rigid_body.principal_frame(jnp.asarray(inertia, jnp.float64))
        moments = np.asarray(principal)
        orientation = np.asarray(
            quaternion.multiply(jnp.asarray(orientation), rotation), dtype=float
        )
    world = rotation_matrices(np.asarray(bodies.orientation, dtype=float))
    world_inertia = world @ inertia @ np.swapaxes(world, 1, 2)
    angular_momentum = np.einsum("nij,nj->ni", world_inertia, bodies.angular_velocity)
    inverse_mass = np.where(bodies.fixed, 0.0, 1.0 / bodies.mass)
    inverse_inertia = np.where(bodies.fixed[:, None], 0.0, 1.0 / moments)
    return Bodies(
        position=jnp.asarray(bodies.position, jnp.float64),
        orientation=jnp.asarray(orientation, jnp.float64),
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


def _grid(
    lower: np.ndarray, upper: np.ndarray, radius: float, skin: float, capacity: int = GRID_CAPACITY
) -> CellGrid:
    """Cells of at least 2 r + skin covering [lower, upper], at most MAX_CELLS_PER_AXIS per axis."""
    extent = float(np.max(upper - lower))
    size = max(2.0 * radius + skin, extent / MAX_CELLS_PER_AXIS)
    return CellGrid.covering(lower, upper, size, capacity, capacity)


def _material_dict(m: MaterialConfig) -> dict:
    return {
        "young": m.young,
        "poisson": m.poisson,
        "density": m.density,
        "restitution": m.restitution,
        "friction": m.friction,
    }


def _contact_dt(dt: float | None, stable: float, contact_model: str) -> float:
    """The case's dt: DT_FRACTION of the stable step for None; above the stable step an error."""
    if dt is None:
        return DT_FRACTION * stable
    if dt > stable:
        raise ConfigError(
            "case.dt",
            dt,
            f"<= {stable:.4g} s (the stable step of the {contact_model} contact)",
            hint=f"use case.dt={DT_FRACTION * stable:.3g} or case.dt=null",
        )
    return dt


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


# --- tumbling ------------------------------------------------------------------------------------

TUMBLING_STEPS = 100_000  # steps of a tumbling run with dt = null


def _axis_rotation(axis: tuple[float, float, float], angle_deg: float) -> np.ndarray:
    """Rotation matrix (3, 3) by angle_deg about axis (Rodrigues)."""
    k = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    a = math.radians(angle_deg)
    cross = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(a) * cross + (1.0 - math.cos(a)) * cross @ cross


def _tumbling(case: TumblingConfig) -> BodyCase:
    dt = case.dt if case.dt is not None else case.duration / TUMBLING_STEPS
    moments = np.asarray(case.moments, dtype=float)
    axes = _axis_rotation(case.frame_axis, case.frame_angle)  # columns: principal axes
    inertia = axes @ np.diag(moments) @ axes.T  # full tensor in the body frame
    low, mid, high = np.argsort(moments)
    omega = case.spin * (axes[:, mid] + case.perturbation * (axes[:, low] + axes[:, high]))
    scene = scene_from_dict(
        {
            "materials": {
                "body": {
                    "young": 1.0e9,  # unused: a lone body without planes never touches anything
                    "poisson": 0.3,
                    "density": 1000.0,
                    "restitution": 1.0,
                    "friction": 0.0,
                }
            },
            "bodies": [
                {
                    "shape": "sphere",
                    "material": "body",
                    "radius": case.radius,
                    "mass": case.mass,
                    "inertia": inertia.tolist(),
                    "position": [0.0, 0.0, 0.0],
                    "angular_velocity": omega.tolist(),
                }
            ],
        },
        key_prefix="case",
    )
    span = np.full(3, 2.0 * case.radius)
    grid = _grid(-span, span, case.radius, 0.0)
    setup = setup_from_scene(scene, grid, dt, 0.0, (0.0, 0.0, 0.0))
    arrays, _ = scene.arrays()
    i1, i2, i3 = np.sort(moments)
    # linearised about a steady spin w about the intermediate axis: perturbations grow as e^(s t)
    rate = case.spin * math.sqrt((i2 - i1) * (i3 - i2) / (i1 * i3))

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        kinetic = np.asarray(series["kinetic"])
        momentum = np.asarray(series["angular_momentum"])
        size = np.linalg.norm(momentum, axis=1)
        steps = np.clip(np.rint(times / dt).astype(int), 0, size.size - 1)
        rotation = rotation_matrices(series["orientation"][:, 0])  # principal frame -> world
        body = np.einsum("tji,tj->ti", rotation, momentum[steps])  # R^T L
        pi_mid = body[:, 1]  # the state's principal moments are ascending
        sign = np.sign(pi_mid)
        changes = np.flatnonzero(sign[1:] * sign[:-1] < 0)
        first = None
        if changes.size:
            k = int(changes[0])
            t0, t1, p0, p1 = times[k], times[k + 1], pi_mid[k], pi_mid[k + 1]
            first = float(t0 + (t1 - t0) * p0 / (p0 - p1))
        return {
            "kinetic_energy_drift_max": float(np.max(np.abs(kinetic - kinetic[0])) / kinetic[0]),
            "kinetic_energy_drift_final": float((kinetic[-1] - kinetic[0]) / kinetic[0]),
            "angular_momentum_drift_max": float(np.max(np.abs(size - size[0])) / size[0]),
            "intermediate_axis_flipped": bool(changes.size),
            "first_flip_time_s": first,
            "flips": int(changes.size),
            "intermediate_momentum_first": float(pi_mid[0]),
            "instability_rate_1_s": rate,
            "steps_run": int(size.size - 1),
        }

    return BodyCase(
        name=case.name,
        scene=scene,
        setup=setup,
        bodies=initial_bodies(arrays),
        mass=arrays.mass,
        default_steps=_steps(case.duration, dt),
        output_every=case.output_every,
        stable_dt=None,
        diagnose=diagnose,
        info={
            "moments_kg_m2": moments.tolist(),
            "spin_rad_s": case.spin,
            "perturbation": case.perturbation,
        },
    )


# --- incline -------------------------------------------------------------------------------------


def incline_acceleration(angle_deg: float, friction: float, gravity: float) -> tuple[float, str]:
    """Analytic acceleration (m/s^2) of a solid sphere released on an incline, and the regime:
    (5/7) g sin a while tan a <= (7/2) mu (rolling), else g (sin a - mu cos a) (sliding)."""
    a = math.radians(angle_deg)
    if math.tan(a) <= 3.5 * friction:
        return 5.0 / 7.0 * gravity * math.sin(a), "rolling"
    return gravity * (math.sin(a) - friction * math.cos(a)), "sliding"


def _incline(case: InclineConfig) -> BodyCase:
    m, r = case.material, case.radius
    a = math.radians(case.angle)
    normal = np.array([math.sin(a), 0.0, math.cos(a)])
    downhill = np.array([math.cos(a), 0.0, -math.sin(a)])
    mass = m.density * 4.0 / 3.0 * math.pi * r**3
    if case.contact_model == "hertz":
        e_star = m.young / (2.0 * (1.0 - m.poisson**2))  # sphere on a plane of the same material
        overlap = (mass * case.gravity * math.cos(a) / (4.0 / 3.0 * e_star * math.sqrt(r))) ** (
            2.0 / 3.0
        )
    else:  # sphere and plane springs in series
        overlap = mass * case.gravity * math.cos(a) / (0.5 * case.stiffness)
    x0 = (r - overlap) * normal
    scene = scene_from_dict(
        {
            "materials": {"ball": _material_dict(m)},
            "bodies": [
                {
                    "shape": "plane",
                    "material": "ball",
                    "point": [0, 0, 0],
                    "normal": normal.tolist(),
                },
                {"shape": "sphere", "material": "ball", "radius": r, "position": x0.tolist()},
            ],
        },
        key_prefix="case",
    )
    check_overlaps(scene, tolerance=1.01 * overlap / r, key_prefix="case")
    gravity = (0.0, 0.0, -case.gravity)
    expected, regime = incline_acceleration(case.angle, m.friction, case.gravity)
    arrays, _ = scene.arrays()
    top_speed = case.gravity * math.sin(a) * case.duration  # bounds the speed along the slope

    def setup_for(dt: float) -> BodySetup:
        skin = 2.0 * top_speed * dt
        travel = 0.5 * top_speed * case.duration
        ends = np.array([x0, x0 + travel * downhill])
        margin = 2.0 * r + skin
        grid = _grid(ends.min(0) - margin, ends.max(0) + margin, r, skin)
        return setup_from_scene(scene, grid, dt, skin, gravity, case.contact_model, case.stiffness)

    stable = stable_time_step(setup_for(1e-300), arrays.mass)
    dt = _contact_dt(case.dt, stable, case.contact_model)
    setup = setup_for(dt)

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        along = (positions[:, 0, :] - x0) @ downhill
        late = times >= 0.5 * times[-1]
        out: dict = {"regime": regime, "analytic_acceleration_m_s2": expected}
        if np.count_nonzero(late) < 3:
            return out | {"measured_acceleration_m_s2": None, "note": "too few outputs"}
        measured = 2.0 * float(np.polyfit(times[late], along[late], 2)[0])
        height = (positions[:, 0, :] - x0) @ normal
        return out | {
            "measured_acceleration_m_s2": measured,
            "acceleration_relative_error": (measured - expected) / expected
            if expected
            else measured,
            "normal_offset_max_m": float(np.max(np.abs(height))),
            "distance_m": float(along[-1]),
            "initial_overlap_m": overlap,
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
        info={"angle_deg": case.angle, "friction": m.friction, "regime": regime},
    )


# --- cradle --------------------------------------------------------------------------------------


def _cradle(case: CradleConfig) -> BodyCase:
    m, r, n, v0 = case.material, case.radius, case.count, case.speed
    x = np.array([0.0] + [2.0 * r + case.gap + 2.0 * r * k for k in range(n - 1)])
    spheres = [
        {
            "shape": "sphere",
            "material": "ball",
            "radius": r,
            "position": [float(xk), 0.0, 0.0],
            "velocity": [v0 if k == 0 else 0.0, 0.0, 0.0],
        }
        for k, xk in enumerate(x)
    ]
    scene = scene_from_dict(
        {"materials": {"ball": _material_dict(m)}, "bodies": spheres}, key_prefix="case"
    )
    check_overlaps(scene, tolerance=1e-9, key_prefix="case")
    arrays, _ = scene.arrays()

    def setup_for(dt: float) -> BodySetup:
        skin = 4.0 * v0 * dt  # relative speeds stay below 2 v0
        travel = v0 * case.duration
        margin = 2.0 * r + skin
        lower = np.array([x[0] - travel - margin, -margin, -margin])
        upper = np.array([x[-1] + travel + margin, margin, margin])
        grid = _grid(lower, upper, r, skin, capacity=max(GRID_CAPACITY, 8))
        return setup_from_scene(scene, grid, dt, skin, (0.0, 0.0, 0.0), case.contact_model,
                                case.stiffness)  # fmt: skip

    stable = stable_time_step(setup_for(1e-300), arrays.mass)
    dt = _contact_dt(case.dt, stable, case.contact_model)
    setup = setup_for(dt)
    p0 = float(arrays.mass[0] * v0)

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        momentum = np.asarray(series["momentum"])
        error = np.linalg.norm(momentum - momentum[0], axis=1).max() / p0
        final = np.asarray(series["velocity"])[-1, :, 0] / v0
        kinetic = np.asarray(series["kinetic"])
        touching = np.asarray(series["contacts"]) > 0
        return {
            "last_velocity_ratio": float(final[-1]),
            "final_velocity_ratios": final.tolist(),
            "momentum_error_relative_max": float(error),
            "kinetic_energy_ratio": float(kinetic[-1] / kinetic[0]),
            "collisions_over": bool(not touching[-1]),
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
        info={"count": n, "speed_m_s": v0, "restitution": m.restitution},
    )
