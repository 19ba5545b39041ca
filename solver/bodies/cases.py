"""Rigid-body cases: a Scene, its BodySetup and the initial Bodies, built from a case config.

Host-side NumPy and validation only; nothing here is traced. Every bad value raises
``solver.errors.ConfigError`` (one line naming the key), also a time step above the stability limit
of the contact stiffness (``solver.bodies.step.stable_time_step``), with a suggested step.

Cases:
    projectile: one sphere launched under gravity, no contacts; the diagnostics compare the centre
        with the exact parabola x(t) = x0 + v0 t + g t^2 / 2 at the output steps.
    bounce: one sphere dropped from rest on the plane z = 0; the diagnostics give the first
        rebound height h1 and h1 / h0 against e^2 (the ratio of a point mass with restitution e).
    tumbling: a torque-free asymmetric body spun near its intermediate axis.
    incline: a sphere or a two-sphere clump released on an inclined plane with friction; rolling
        or sliding acceleration against the rigid-body value.
    cradle: a row of spheres hit by the first one (momentum transfer).
    box_fill: spheres poured into an open box; settling, packing fraction, overlaps, escapes.
Scenes with clumps become bodies in their principal frame plus sphere offsets in that frame
(``initial_bodies``, ``principal_offsets``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from kernels import clump, quaternion, rigid_body
from kernels.neighbor_search import CellGrid
from kernels.rigid_body import Bodies
from solver.bodies.config import (
    BounceConfig,
    BoxFillConfig,
    CradleConfig,
    InclineConfig,
    MaterialConfig,
    ProjectileConfig,
    TumblingConfig,
)
from solver.bodies.packings import check_overlaps, overlapping_pairs, random_spheres_in_box
from solver.bodies.scene import (
    BodyArrays,
    BodySpec,
    Material,
    Scene,
    rotation_matrices,
    scene_from_dict,
)
from solver.bodies.step import BodySetup, stable_time_step
from solver.errors import ConfigError

if TYPE_CHECKING:
    from solver.config import RunConfig

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
            "contacts" (S,), optionally "elastic" (S,) J in the normal contact springs) and the
            state's "orientation" (T, n, 4) and "velocity" (T, n, 3) at the output steps.
        info: case parameters for run.json.
        series_every_step: its ``diagnose`` reads the per-step series (contact times, energy
            balances): the totals are then computed every step unless
            ``bodies.diagnostics_every`` says otherwise.
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
    series_every_step: bool = True


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
    if isinstance(case, BoxFillConfig):
        return _box_fill(case, config.seed)
    if case.name == "scene":  # solver.bodies.scene_case imports this module, hence imported here
        return __import__("solver.bodies.scene_case", fromlist=["_"]).build_scene_case(case)
    raise ConfigError(
        "case.name",
        case.name,
        "a rigid-body case: projectile | bounce | tumbling | incline | cradle | box_fill",
    )


def _principal_rotation(bodies: BodyArrays) -> tuple[np.ndarray, jnp.ndarray | None]:
    """Principal moments (n, 3) kg m^2 and the rotation (n, 4) principal frame -> body frame;
    None when every inertia is isotropic (then the given frames are kept)."""
    inertia = bodies.inertia
    moments = np.diagonal(inertia, axis1=1, axis2=2)
    isotropic = np.allclose(inertia, moments[:, :, None] * np.eye(3), rtol=0, atol=0) and np.all(
        moments == moments[:, :1]
    )
    if isotropic:
        return moments, None
    principal, rotation = rigid_body.principal_frame(jnp.asarray(inertia, jnp.float64))
    return np.asarray(principal), rotation


def principal_offsets(bodies: BodyArrays) -> np.ndarray:
    """(m, 3) m, the member spheres' offsets in their body's principal frame (the frame of
    ``initial_bodies``): R^T d with R the rotation principal frame -> body frame."""
    _, rotation = _principal_rotation(bodies)
    if rotation is None:
        return np.array(bodies.member_offset, dtype=float)
    turned = quaternion.rotate_inverse(
        rotation[bodies.member_body], jnp.asarray(bodies.member_offset, jnp.float64)
    )
    return np.asarray(turned, dtype=float)


def initial_bodies(bodies: BodyArrays) -> Bodies:
    """Bodies (float64) of the spheres and clumps of a scene.

    An isotropic inertia keeps the orientation as given (any frame is principal). A full tensor
    (given in the body's own frame) is diagonalised by ``kernels.rigid_body.principal_frame``: the
    state's orientation becomes orientation * rotation and its inverse_inertia the inverse
    principal moments (ascending), so axis 1 of the state's frame is the intermediate axis. The
    world angular momentum is L = R I R^T omega with R the given orientation. Clump member offsets
    in that frame: ``principal_offsets``.
    """
    orientation = np.asarray(bodies.orientation, dtype=float)
    moments, rotation = _principal_rotation(bodies)
    if rotation is not None:
        orientation = np.asarray(
            quaternion.multiply(jnp.asarray(orientation), rotation), dtype=float
        )
    world = rotation_matrices(np.asarray(bodies.orientation, dtype=float))
    world_inertia = world @ bodies.inertia @ np.swapaxes(world, 1, 2)
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
    pair_margin: float = 0.0,
) -> BodySetup:
    """The BodySetup of a scene of spheres, clumps and planes (``scene.arrays()``).

    Material values per contact sphere (a clump's members take the clump's material) and per
    plane; clump members get their offsets in the body's principal frame (``principal_offsets``),
    matching ``initial_bodies``. ``stiffness`` (N/m) is the linear model's spring of every sphere;
    planes are given the same spring, so a sphere-plane pair gets k/2 (the series spring).
    """
    bodies, planes = scene.arrays()
    names = bodies.material_names
    sphere_material = bodies.material[bodies.member_body]

    def column(materials: np.ndarray, attr: str) -> np.ndarray:
        return np.array([getattr(scene.materials[names[m]], attr) for m in materials], dtype=float)

    linear = contact_model == "linear"
    return BodySetup(
        radius=bodies.member_radius,
        young=column(sphere_material, "young"),
        poisson=column(sphere_material, "poisson"),
        restitution=column(sphere_material, "restitution"),
        friction=column(sphere_material, "friction"),
        rolling_friction=column(sphere_material, "rolling_friction"),
        grid=grid,
        dt=dt,
        skin=skin,
        pair_margin=pair_margin,
        gravity=gravity,
        contact_model=contact_model,
        stiffness=np.full(bodies.member_radius.shape, stiffness) if linear else None,
        plane_point=planes.point,
        plane_normal=planes.normal,
        plane_young=column(planes.material, "young"),
        plane_poisson=column(planes.material, "poisson"),
        plane_restitution=column(planes.material, "restitution"),
        plane_friction=column(planes.material, "friction"),
        plane_rolling_friction=column(planes.material, "rolling_friction"),
        plane_stiffness=np.full(planes.material.shape, stiffness) if linear else None,
        member_body=bodies.member_body,
        member_offset=principal_offsets(bodies),
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


def contact_dt(dt: float | None, stable: float, contact_model: str) -> float:
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


def _moments(bodies: Bodies) -> np.ndarray:
    """(n, 3) kg m^2, principal moments of the bodies (inf where a body does not turn)."""
    inverse = np.asarray(bodies.inverse_inertia)
    with np.errstate(divide="ignore"):
        return np.where(inverse > 0, 1.0 / inverse, np.inf)


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
    dt = contact_dt(case.dt, stable, case.contact_model)
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


def incline_acceleration(
    angle_deg: float, friction: float, gravity: float, inertia_ratio: float = 0.4
) -> tuple[float, str]:
    """Analytic acceleration (m/s^2) of a rigid body released on an incline, and the regime.

    For a body rolling on circles of radius r about a horizontal axis through its centre of mass,
    with moment I about that axis and k = I / (m r^2) (2/5 for a solid sphere):
    g sin a / (1 + k) while tan a <= mu (1 + 1/k) (rolling: the friction needed,
    m g sin a / (1 + 1/k), stays within mu m g cos a), else g (sin a - mu cos a) (sliding).
    """
    a = math.radians(angle_deg)
    if math.tan(a) <= friction * (1.0 + 1.0 / inertia_ratio):
        return gravity * math.sin(a) / (1.0 + inertia_ratio), "rolling"
    return gravity * (math.sin(a) - friction * math.cos(a)), "sliding"


def _incline_body(case: InclineConfig) -> tuple[dict, float, float, int]:
    """The body mapping (without position), its mass (kg), I about the rolling axis y (kg m^2)
    and the number of spheres that touch the plane."""
    m, r = case.material, case.radius
    if case.shape == "sphere":
        mass = m.density * 4.0 / 3.0 * math.pi * r**3
        return {"shape": "sphere", "material": "ball", "radius": r}, mass, 0.4 * mass * r**2, 1
    half = case.clump_separation * r  # centres 2 r * separation apart, along y
    offsets = np.array([[0.0, -half, 0.0], [0.0, half, 0.0]])
    mass, centre, inertia = clump.clump_mass_properties([r, r], offsets, m.density)
    offsets = offsets - centre  # zero up to round-off (symmetric), exact for the scene's check
    body = {
        "shape": "clump",
        "material": "ball",
        "spheres": [{"radius": r, "offset": o.tolist()} for o in offsets],
        "mass": mass,
        "inertia": inertia.tolist(),
    }
    return body, mass, float(inertia[1, 1]), 2


def _incline(case: InclineConfig) -> BodyCase:
    m, r = case.material, case.radius
    a = math.radians(case.angle)
    normal = np.array([math.sin(a), 0.0, math.cos(a)])
    downhill = np.array([math.cos(a), 0.0, -math.sin(a)])
    body, mass, rolling_moment, touching = _incline_body(case)
    load = mass * case.gravity * math.cos(a) / touching  # N on each sphere at rest
    if case.contact_model == "hertz":
        e_star = m.young / (2.0 * (1.0 - m.poisson**2))  # sphere on a plane of the same material
        overlap = (load / (4.0 / 3.0 * e_star * math.sqrt(r))) ** (2.0 / 3.0)
    else:  # sphere and plane springs in series
        overlap = load / (0.5 * case.stiffness)
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
                body | {"position": x0.tolist()},
            ],
        },
        key_prefix="case",
    )
    check_overlaps(scene, tolerance=1.01 * overlap / r, key_prefix="case")
    gravity = (0.0, 0.0, -case.gravity)
    inertia_ratio = rolling_moment / (mass * r**2)
    expected, regime = incline_acceleration(case.angle, m.friction, case.gravity, inertia_ratio)
    arrays, _ = scene.arrays()
    bodies = initial_bodies(arrays)
    top_speed = case.gravity * math.sin(a) * case.duration  # bounds the speed along the slope
    width = float(np.max(np.abs(arrays.member_offset[:, 1])))  # a clump's reach along y

    def setup_for(dt: float) -> BodySetup:
        skin = 2.0 * top_speed * dt
        travel = 0.5 * top_speed * case.duration
        ends = np.array([x0, x0 + travel * downhill])
        margin = 2.0 * r + skin + width
        grid = _grid(ends.min(0) - margin, ends.max(0) + margin, r, skin)
        return setup_from_scene(scene, grid, dt, skin, gravity, case.contact_model, case.stiffness)

    stable = stable_time_step(setup_for(1e-300), arrays.mass, _moments(bodies))
    dt = contact_dt(case.dt, stable, case.contact_model)
    setup = setup_for(dt)

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        along = (positions[:, 0, :] - x0) @ downhill
        late = times >= 0.5 * times[-1]
        out: dict = {
            "shape": case.shape,
            "regime": regime,
            "analytic_acceleration_m_s2": expected,
            "inertia_ratio": inertia_ratio,
        }
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
            "lateral_offset_max_m": float(np.max(np.abs(positions[:, 0, 1] - x0[1]))),
            "distance_m": float(along[-1]),
            "initial_overlap_m": overlap,
        }

    return BodyCase(
        name=case.name,
        scene=scene,
        setup=setup,
        bodies=bodies,
        mass=arrays.mass,
        default_steps=_steps(case.duration, dt),
        output_every=case.output_every,
        stable_dt=stable,
        diagnose=diagnose,
        info={
            "angle_deg": case.angle,
            "friction": m.friction,
            "regime": regime,
            "shape": case.shape,
            "clump_separation": case.clump_separation if case.shape == "clump" else None,
        },
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
    dt = contact_dt(case.dt, stable, case.contact_model)
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


# --- box_fill ------------------------------------------------------------------------------------

KEPLER_DENSITY = math.pi / math.sqrt(18.0)  # densest packing of equal spheres (Hales 2005)
OVERLAP_ALLOWANCE = 0.1  # overlap (fraction of the radius) the buffers are sized to tolerate


def packing_buffers(cell: float, reach: float, r_min: float) -> tuple[int, int]:
    """Cell capacity and partners per sphere for a bed of spheres of radius >= r_min (host side).

    At the densest packing (KEPLER_DENSITY) spheres of diameter d = 2 r_min (1 -
    OVERLAP_ALLOWANCE) put on average KEPLER_DENSITY V / (pi d^3 / 6) centres in a volume V.
    Capacity: twice that for a cell of edge ``cell`` (m), for the fluctuations of a random bed,
    and at least (floor(cell / d) + 1)^3, the centres of a simple cubic lattice of spacing d in
    the cell. Partners: every centre within ``reach`` (m, 2 r_max + skin) of a sphere's, the ball
    of that radius, less the sphere itself, and at least 12, the kissing number of equal spheres
    (Schuette & van der Waerden 1953); the table holds only partners j > i, about half of them.
    The default box_fill (200 spheres) gets 8 and 16 and needs at most 4 and 9 (measured with 300
    spheres); a denser or more polydisperse bed that needs more is reported by the step (never
    dropped silently) and stops the run.
    """
    d = 2.0 * r_min * (1.0 - OVERLAP_ALLOWANCE)
    per_volume = KEPLER_DENSITY / (math.pi / 6.0 * d**3)
    capacity = max(math.ceil(2.0 * per_volume * cell**3), (math.floor(cell / d) + 1) ** 3)
    partners = max(math.ceil(per_volume * 4.0 / 3.0 * math.pi * reach**3) - 1, 12)
    return capacity, partners


def _packing_fraction(centres: np.ndarray, radii: np.ndarray, area: float) -> float | None:
    """Solid fraction of the bed between z = 2 r_max and its top minus 2 r_max (m^3 / m^3).

    The slab leaves out the layering at the floor and the loose surface; each sphere counts with
    its exact volume inside the slab (spherical caps: pi h^2 (3 r - h) / 3 below a height h above
    its lowest point). None when the bed is thinner than 4 r_max.
    """
    r_max = float(radii.max())
    low, high = 2.0 * r_max, float(np.max(centres[:, 2] + radii)) - 2.0 * r_max
    if high <= low:
        return None

    def below(z: float) -> np.ndarray:
        h = np.clip(z - (centres[:, 2] - radii), 0.0, 2.0 * radii)
        return math.pi * h**2 * (3.0 * radii - h) / 3.0

    return float(np.sum(below(high) - below(low)) / (area * (high - low)))


def _box_fill(case: BoxFillConfig, seed: int) -> BodyCase:
    m, r = case.material, case.radius
    r_min, r_max = r * (1.0 - case.radius_spread), r * (1.0 + case.radius_spread)
    size = np.asarray(case.box, dtype=float)
    material = Material("grain", m.young, m.poisson, m.density, m.restitution, m.friction)
    keys = {"n": "case.count", "radius": "case.radius", "box_upper": "case.box"}
    try:
        packing = random_spheres_in_box(
            case.count,
            r if r_min == r_max else (r_min, r_max),
            (0.0, 0.0, case.fill_from * size[2]),
            size,
            material,
            seed=seed,
            key_prefix="case",
        )
    except ConfigError as error:  # name this case's keys, not the generator's
        key = keys.get(error.key.rsplit(".", 1)[-1], error.key)
        hint = error.hint or ""
        if key == "case.box":
            hint = f"the fill region is box[2] * (1 - fill_from) tall; {hint}".rstrip("; ")
        raise ConfigError(key, getattr(case, key[5:]), error.allowed, hint) from None
    walls = [
        ((0.0, 0.0, 0.0), (0.0, 0.0, 1.0)),  # floor
        ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0)),
        ((size[0], 0.0, 0.0), (-1.0, 0.0, 0.0)),
        ((0.0, 0.0, 0.0), (0.0, 1.0, 0.0)),
        ((0.0, size[1], 0.0), (0.0, -1.0, 0.0)),
    ]
    planes = [
        BodySpec("plane", material.name, point=np.array(p), normal=np.array(nrm))
        for p, nrm in walls
    ]
    scene = Scene(packing.materials, planes + packing.bodies)
    check_overlaps(scene, key_prefix="case")
    arrays, _ = scene.arrays()
    bodies = initial_bodies(arrays)
    radii = arrays.member_radius
    total_mass = float(arrays.mass.sum())
    # energy bound: no sphere falls further than the box is tall; x2 for momentum passed on in
    # collisions, x2 for a pair approaching head-on
    top_speed = math.sqrt(2.0 * case.gravity * size[2])

    def setup_for(dt: float) -> BodySetup:
        skin = 4.0 * top_speed * dt
        margin = 2.0 * r_max + skin
        reach = 2.0 * r_max + skin
        cell = max(reach, float(size.max() + 2.0 * margin) / MAX_CELLS_PER_AXIS)
        capacity, partners = packing_buffers(cell, reach, r_min)
        grid = CellGrid.covering(-margin * np.ones(3), size + margin, cell, capacity, partners)
        return setup_from_scene(
            scene, grid, dt, skin, (0.0, 0.0, -case.gravity), case.contact_model, case.stiffness
        )

    stable = stable_time_step(setup_for(1e-300), arrays.mass, _moments(bodies))
    dt = contact_dt(case.dt, stable, case.contact_model)
    setup = setup_for(dt)
    area = float(size[0] * size[1])

    def diagnose(times: np.ndarray, positions: np.ndarray, series: dict) -> dict:
        final = positions[-1]
        inside = np.all((positions >= 0.0) & (positions <= size), axis=2)  # (T, n)
        kinetic = np.asarray(series["kinetic"])
        potential = np.asarray(series["potential"])
        elastic = series.get("elastic")
        total = kinetic + potential + (0.0 if elastic is None else np.asarray(elastic))
        released = float(potential[0] - potential[-1])
        i, j, overlap = overlapping_pairs(final, radii, np.arange(radii.size))
        pair_overlap = overlap / np.minimum(radii[i], radii[j]) if overlap.size else np.zeros(1)
        wall_overlap = [
            (radii - (final - np.asarray(p)) @ np.asarray(nrm)) / radii for p, nrm in walls
        ]
        rise = np.diff(total)
        regained = total - np.minimum.accumulate(total)  # energy back above its lowest so far
        return {
            "spheres": int(radii.size),
            "escaped": int(np.count_nonzero(~inside[-1])),
            "escaped_any_output": int(np.count_nonzero(~np.all(inside, axis=0))),
            "kinetic_final_J": float(kinetic[-1]),
            "potential_released_J": released,
            "kinetic_over_released": float(kinetic[-1] / released) if released > 0 else None,
            "kinetic_over_mgr": float(kinetic[-1] / (total_mass * case.gravity * r)),
            "packing_fraction": _packing_fraction(final[inside[-1]], radii[inside[-1]], area),
            "bed_height_m": float(np.max(final[:, 2] + radii)),
            "overlap_max_relative": float(max(pair_overlap.max(), np.max(wall_overlap), 0.0)),
            "contacts_per_body": float(np.asarray(series["contacts"])[-1] / radii.size),
            "energy_series": "kinetic+potential" + ("" if elastic is None else "+elastic"),
            "energy_rise_max_J": float(max(rise.max(), 0.0)) if rise.size else 0.0,
            "energy_rise_max_over_released": float(max(rise.max(), 0.0) / released)
            if rise.size and released > 0
            else None,
            "energy_regained_max_over_released": float(regained.max() / released)
            if released > 0
            else None,
        }

    return BodyCase(
        name=case.name,
        scene=scene,
        setup=setup,
        bodies=bodies,
        mass=arrays.mass,
        default_steps=_steps(case.duration, dt),
        output_every=case.output_every,
        stable_dt=stable,
        diagnose=diagnose,
        info={
            "count": case.count,
            "radius_m": [r_min, r_max],
            "box_m": size.tolist(),
            "grid_capacity": setup.grid.capacity,
            "grid_max_neighbors": setup.grid.max_neighbors,
            "seed": seed,
        },
    )
