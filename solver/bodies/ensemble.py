"""Ensembles of a rigid-body case: E independent members in one compiled, vmapped program.

Members share the case's static setup (radii, cell grid, dt, contact model) and differ in
    - swept material values, gravity or linear stiffness (``bodies.ensemble.sweep``: one value per
      member, applied to every sphere and plane or to those of ``sweep_material``); they are
      traced ``ContactParams``, so one compiled chunk serves every member;
    - Gaussian perturbations of each dynamic body's initial position, velocity and angular
      velocity (``bodies.ensemble.perturb``: standard deviations), drawn per member from
      ``numpy.random.default_rng([seed, member])``; member 0 is never perturbed (the nominal run).
The chunk of ``solver.bodies.step.make_body_chunk`` is vmapped over the leading member axis of the
states and params and jitted once per chunk length; the member axis is sharded over all devices
(``NamedSharding`` on a 1-D mesh). When E is not a multiple of the device count the batch is
padded with copies of the last member, which are dropped on the host.

Time step: members that differ in stiffness (young, poisson, stiffness) have different stable
steps; the run uses the smallest. With ``case.dt = null`` dt becomes DT_FRACTION of that smallest
step (the skin and grid of the case stay: a smaller step only moves bodies less per step), and the
step count follows ``duration`` at the new dt; an explicit ``case.dt`` above it is a config error
naming the member.

Outputs: run.json's "ensemble" section (per-member swept values, energy drift and case
diagnostics; their mean, std, min and max), ensemble.h5 (per-member energies of every step, states
at the output steps of the first ``saved_members`` members).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from kernels import rigid_body
from kernels.rigid_body import Bodies
from solver.bodies.cases import BodyCase, build_body_case
from solver.bodies.config import EnsembleConfig
from solver.bodies.scene import rotation_matrices
from solver.bodies.scene_case import bodies_outside
from solver.bodies.step import (
    BodySetup,
    ContactParams,
    diagnostics,
    initial_state,
    make_body_chunk,
    overflow_message,
    run_once,
    stable_time_step,
)
from solver.checkpoint.flat import flatten_leaves, unflatten_leaves
from solver.distributed.members import member_sharding
from solver.errors import BodyOverflowError, ConfigError
from solver.model import OutputSchedule, Problem

if TYPE_CHECKING:
    from solver.config import RunConfig

log = logging.getLogger("solver")

DT_FRACTION = 0.5  # dt = null: this fraction of the smallest stable step (as solver.bodies.cases)
HOST_BYTES_MAX = 8 << 30  # per-member series and output states kept on the host for diagnostics
SERIES = ("kinetic", "potential", "momentum", "angular_momentum", "contacts")
FRAME_FIELDS = ("position", "orientation", "velocity", "angular_velocity", "contact_count")
OUTPUTS_PER_RUN = 50  # states kept per member when the case's output_every is null
_SPHERE_FIELDS = {  # sweep name -> (ContactParams sphere field, plane field or None)
    "restitution": ("restitution", "plane_restitution"),
    "friction": ("friction", "plane_friction"),
    "rolling_friction": ("rolling_friction", "plane_rolling_friction"),
    "young": ("young", "plane_young"),
    "poisson": ("poisson", "plane_poisson"),
    "stiffness": ("stiffness", "plane_stiffness"),
}


@dataclass(frozen=True, eq=False)
class Members:
    """The E members of an ensemble, host-side.

    Attributes:
        setup: the shared static setup (dt possibly lowered for the stiffest member).
        params: ContactParams with a leading member axis (E, ...), NumPy float64.
        bodies: Bodies with a leading member axis (E, n, ...), NumPy.
        swept: per member, the swept values {name: value}.
        stable_dt: per member, s (inf without contacts).
    """

    setup: BodySetup
    params: ContactParams
    bodies: Bodies
    swept: list[dict]
    stable_dt: list[float]

    @property
    def size(self) -> int:
        return len(self.swept)


def _material_masks(case: BodyCase, material: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Which spheres (n_spheres,) and planes (p,) a swept value applies to."""
    setup = case.setup
    if material is None:
        return np.ones(setup.radius.size, bool), np.ones(setup.n_planes, bool)
    bodies, planes = case.scene.arrays()
    names = bodies.material_names
    if material not in names:
        raise ConfigError(
            "bodies.ensemble.sweep_material",
            material,
            f"a material of case {case.name}: " + ", ".join(names),
        )
    index = names.index(material)
    # a clump's contact spheres take the clump's material
    return (bodies.material == index)[bodies.member_body], planes.material == index


def build_members(case: BodyCase, config: RunConfig) -> Members:
    """Stack the members' params and initial bodies; choose the shared dt (see module doc)."""
    ensemble = config.bodies.ensemble
    size = ensemble.size
    setup = case.setup
    swept = [{name: values[m] for name, values in ensemble.sweep} for m in range(size)]
    names = [name for name, _ in ensemble.sweep]
    if "stiffness" in names and setup.contact_model != "linear":
        raise ConfigError(
            "bodies.ensemble.sweep.stiffness",
            list(dict(ensemble.sweep)["stiffness"]),
            "null with the hertz contact model (a linear-model spring)",
            hint="sweep young instead, or set case.contact_model=linear",
        )
    spheres, planes = _material_masks(case, ensemble.sweep_material)
    if "rolling_friction" in names:
        # rolling resistance is switched on statically by a nonzero value in the setup
        most = max(dict(ensemble.sweep)["rolling_friction"])
        rolling = np.where(spheres, most, setup.rolling_friction)
        setup = dataclasses.replace(setup, rolling_friction=rolling)
    base = jax.tree.map(np.asarray, setup.params(np.float64))
    member_params = []
    for values in swept:
        changes = {}
        for name, value in values.items():
            if name == "gravity":
                g = (0.0, 0.0, -value) if isinstance(value, float) else value
                changes["gravity"] = np.asarray(g, dtype=np.float64)
                continue
            sphere_field, plane_field = _SPHERE_FIELDS[name]
            changes[sphere_field] = np.where(spheres, value, getattr(base, sphere_field))
            changes[plane_field] = np.where(planes, value, getattr(base, plane_field))
        member_params.append(base.replace(**changes))
    if case.stable_dt is None:  # no contacts in this case: no stability limit
        stable = [math.inf] * size
    else:
        inverse = np.asarray(case.bodies.inverse_inertia)
        with np.errstate(divide="ignore"):
            moments = np.where(inverse > 0, 1.0 / inverse, np.inf)  # inf: does not turn
        stable = [_stable_dt(setup, p, case.mass, moments) for p in member_params]
        setup = _shared_dt(setup, stable, config)
    params = jax.tree.map(lambda *leaves: np.stack(leaves), *member_params)
    bodies = perturbed_bodies(case.bodies, ensemble, config.seed)
    return Members(setup, params, bodies, swept, stable)


def _stable_dt(
    setup: BodySetup, params: ContactParams, mass: np.ndarray, moments: np.ndarray
) -> float:
    """The stable step (s) of the setup with one member's stiffness values; mass (n,) kg,
    moments (n, 3) kg m^2 principal."""
    if setup.contact_model == "linear":
        trial = dataclasses.replace(setup, stiffness=params.stiffness)
    else:
        trial = dataclasses.replace(setup, young=params.young, poisson=params.poisson)
    return stable_time_step(trial, mass, moments)


def _shared_dt(setup: BodySetup, stable: list[float], config: RunConfig) -> BodySetup:
    smallest = min(stable)
    if setup.dt <= smallest:
        return setup
    member = int(np.argmin(stable))
    if config.case.dt is not None:
        raise ConfigError(
            "case.dt",
            config.case.dt,
            f"<= {smallest:.4g} s (the stable step of ensemble member {member})",
            hint=f"use case.dt={DT_FRACTION * smallest:.3g} or case.dt=null",
        )
    log.info(
        "ensemble: dt lowered to %.4g s for member %d's stiffness", DT_FRACTION * smallest, member
    )
    return dataclasses.replace(setup, dt=DT_FRACTION * smallest)


def perturbed_bodies(bodies: Bodies, ensemble: EnsembleConfig, seed: int) -> Bodies:
    """The members' initial bodies (E, n, ...) as NumPy arrays; member 0 unperturbed.

    Member m > 0 adds N(0, std^2) per component to each dynamic body's (finite mass, not
    kinematic) position (m), velocity (m/s) and angular velocity (rad/s, world frame; added to the
    angular momentum as I_world d_omega, I_world = R diag(I) R^T), drawn by
    ``numpy.random.default_rng([seed, m])`` in that order: reproducible for a seed, independent
    of E.
    """
    host = jax.tree.map(np.asarray, bodies)
    n = host.position.shape[0]
    dynamic = (~host.kinematic) & (host.inverse_mass > 0)
    inverse = host.inverse_inertia
    moments = np.where(inverse > 0, 1.0 / np.where(inverse > 0, inverse, 1.0), 0.0)
    rotation = rotation_matrices(host.orientation)
    world_inertia = rotation @ (moments[:, :, None] * np.swapaxes(rotation, 1, 2))
    stds = (ensemble.perturb_position, ensemble.perturb_velocity, ensemble.perturb_angular_velocity)
    members = []
    for m in range(ensemble.size):
        position, velocity = host.position.copy(), host.velocity.copy()
        momentum = host.angular_momentum.copy()
        if m > 0 and any(stds):
            rng = np.random.default_rng([seed, m])
            dx, dv, dw = (std * rng.standard_normal((n, 3)) for std in stds)
            mask = dynamic[:, None]
            position += np.where(mask, dx, 0.0)
            velocity += np.where(mask, dv, 0.0)
            momentum += np.where(mask, np.einsum("nij,nj->ni", world_inertia, dw), 0.0)
        members.append(
            dataclasses.replace(
                host, position=position, velocity=velocity, angular_momentum=momentum
            )
        )
    return jax.tree.map(lambda *leaves: np.stack(leaves), *members)


def _pad(tree, padded: int):
    """Pad the leading member axis of every leaf to ``padded`` with copies of the last member."""

    def pad(leaf):
        extra = padded - leaf.shape[0]
        if extra == 0:
            return leaf
        return np.concatenate([leaf, np.repeat(leaf[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


def make_ensemble_chunk(setup: BodySetup, kernel: str = "xla"):
    """chunk(states, params, n) -> (states after n steps, diagnostics (E, n, ...)) over a leading
    member axis; jitted with n static and the states donated. ``kernel`` "native": the members
    in one call of the C++ chunk (bodies.kernel)."""
    if kernel == "native":
        from solver.bodies.native_step import make_native_chunk

        chunk = make_native_chunk(setup, batched=True)
    else:
        chunk = make_body_chunk(setup, batched=True)

    def run(states, params, n: int):
        return jax.vmap(lambda s, p: chunk(s, n, p))(states, params)

    return jax.jit(run, static_argnums=2, donate_argnums=0)


def aggregate(values: list) -> dict | None:
    """mean, std, min, max of the finite numbers among ``values`` (None when there are none)."""
    numbers = np.array(
        [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    )
    numbers = numbers[np.isfinite(numbers)]
    if numbers.size == 0:
        return None
    return {
        "mean": float(numbers.mean()),
        "std": float(numbers.std()),
        "min": float(numbers.min()),
        "max": float(numbers.max()),
        "count": int(numbers.size),
    }


def member_overflow(setup: BodySetup, overflow, size: int) -> tuple[list[int], str] | None:
    """Members (< size) whose neighbour-search buffers overflowed and the first one's report.

    overflow: the states' Overflow record on the host, leading member axis.
    """
    flags = np.asarray(overflow.overflowed)[:size]
    bad = [int(m) for m in np.flatnonzero(flags)]
    if not bad:
        return None
    one = SimpleNamespace(overflow=jax.tree.map(lambda a: np.asarray(a)[bad[0]], overflow))
    return bad, f"member {bad[0]}: {overflow_message(setup, one)}"


def check_host_memory(size: int, steps: int, outputs: int, n: int) -> None:
    """Refuse an ensemble whose host-side series would exceed HOST_BYTES_MAX (before running)."""
    needed = 8 * size * ((steps + 1) * 12 + outputs * n * 10)
    if needed > HOST_BYTES_MAX:
        raise ConfigError(
            "bodies.ensemble.size",
            size,
            f"a size whose per-step series fit in {HOST_BYTES_MAX / 2**30:.0f} GiB of host memory",
            hint=f"{size} members x {steps} steps x {n} bodies need {needed / 2**30:.1f} GiB; "
            "run fewer members or steps, or fewer outputs (case.output_every)",
        )


class EnsembleModel:
    """``bodies.ensemble.size`` members of a body case as one model of the run loop.

    State: the members' ``BodyState`` with a leading member axis, padded to a multiple of the
    device count and sharded over all devices. Checkpoints hold the unpadded members on the host
    (``HostLayout``), so a run resumes on another number of devices. Writes run.json's
    "ensemble" section and ensemble.h5; a member's buffer overflow stops the run naming it
    (``BodyOverflowError``, after run.json and ensemble.h5).
    """

    def __init__(self, config: RunConfig, runtime, output_dir: Path) -> None:
        from solver.distributed.distribution import HostLayout

        self.config = config
        self.output_dir = Path(output_dir)
        self.runtime = runtime
        self.ensemble = config.bodies.ensemble
        self.case = case = build_body_case(config)
        self.members = members = build_members(case, config)
        self.setup = setup = members.setup
        self.size = size = members.size
        self.dt = dt = setup.dt
        if config.steps is not None:
            self.total = config.steps
        else:
            self.total = max(1, round(case.default_steps * case.setup.dt / dt))
        self.schedule = OutputSchedule.of(
            self.total, case.output_every, False, OUTPUTS_PER_RUN, config.chunk
        )
        outputs = len(range(0, self.total, self.schedule.every)) + 1
        check_host_memory(size, self.total, outputs, setup.n_bodies)
        self.padded, self.sharding = member_sharding(size)
        self.devices = len(self.sharding.mesh.devices.flat)
        self.name = case.name
        self.label = f"{case.name} x{size}"
        self.work = setup.n_bodies * size
        self.layout = HostLayout(runtime, {"members": size, "devices": self.devices})
        self.identity = {
            "case": case.name,
            "bodies": setup.n_bodies,
            "spheres": setup.n_spheres,
            "members": size,
            "precision": "float64",
        }
        log.info(
            "%s ensemble: %d members (%d device(s)%s), %d sphere(s), %d plane(s), dt = %.4g s, "
            "%d steps",
            case.name,
            size,
            self.devices,
            f", padded to {self.padded}" if self.padded != size else "",
            setup.n_bodies,
            setup.n_planes,
            dt,
            self.total,
        )
        self.params = self._put(members.params)
        if config.bodies.kernel == "native":  # before anything is traced: exit 2 with the reason
            from solver.bodies.native_step import require_native

            require_native(setup, devices=self.devices)
        self._chunk = make_ensemble_chunk(setup, config.bodies.kernel)
        self._diag = jax.jit(jax.vmap(lambda s, p: diagnostics(setup, s, p)))
        self._omega = jax.jit(jax.vmap(rigid_body.angular_velocity))
        self.series: dict[str, list] = {}
        self.frames: dict[str, list] = {k: [] for k in FRAME_FIELDS}
        self.times: list[float] = []
        self.left_grid: dict | None = None
        self._template = None

    def _put(self, tree):
        return jax.device_put(jax.tree.map(jnp.asarray, _pad(tree, self.padded)), self.sharding)

    def _host_series(self, diag) -> dict:
        d = jax.device_get(diag)
        return {
            "kinetic": np.asarray(d.kinetic_energy)[: self.size],
            "potential": np.asarray(d.potential_energy)[: self.size],
            "momentum": np.asarray(d.momentum)[: self.size],
            "angular_momentum": np.asarray(d.angular_momentum)[: self.size],
            "contacts": np.asarray(d.contacts)[: self.size],
        }

    # ------------------------------------------------------------------ state

    def initial_state(self):
        setup = self.setup
        bodies = self._put(self.members.bodies)
        states = run_once(jax.vmap(lambda b, p: initial_state(setup, b, p)), bodies, self.params)
        first = self._host_series(self._diag(states, self.params))
        self.series = {k: [v[:, None]] for k, v in first.items()}  # blocks of (E, S, ...)
        return states

    def checkpoint_view(self, states):
        view = jax.tree.map(lambda leaf: np.asarray(leaf)[: self.size], jax.device_get(states))
        if self._template is None:  # the first view is of the initial state (resume's template)
            self._template = view
        return flatten_leaves(view)

    def checkpoint_host(self, step: int, states) -> tuple[dict, dict]:
        host = {
            "step": np.asarray([step], np.int64),
            "frame_times": np.asarray(self.times, np.float64),
            **{f"series.{k}": np.concatenate(v, axis=1) for k, v in self.series.items()},
            **{f"frame.{k}": np.stack(v, axis=1) for k, v in self.frames.items()},
        }
        return host, {"time_s": step * self.dt}

    def restored(self, view, host: dict, step: int):
        self.series = {k: [np.asarray(host[f"series.{k}"])] for k in SERIES}
        self.times = [float(t) for t in host["frame_times"]]
        self.frames = {
            k: list(np.moveaxis(np.asarray(host[f"frame.{k}"]), 1, 0)) for k in FRAME_FIELDS
        }
        return self._put(unflatten_leaves(view, self._template))

    # ------------------------------------------------------------------ outputs

    def open_outputs(self, step: int, resumed: bool, states) -> dict[str, str]:
        if not resumed or step in self.schedule:
            self.write(step, states)
        return {"ensemble_h5": str(self.output_dir / "ensemble.h5")}

    def write(self, step: int, states) -> None:
        if self.times and self.times[-1] == step * self.dt:  # written again on resume
            return
        host = jax.device_get(
            {
                "position": states.bodies.position,
                "orientation": states.bodies.orientation,
                "velocity": states.bodies.velocity,
                "angular_velocity": self._omega(states.bodies),
                "contact_count": states.contact_count,
            }
        )
        for key, value in host.items():
            self.frames[key].append(np.asarray(value)[: self.size])
        self.times.append(step * self.dt)

    # ------------------------------------------------------------------ stepping

    def advance(self, states, n: int):
        return self._chunk(states, self.params, n)

    def check(self, states, done: int) -> Problem | None:
        overflow = member_overflow(self.setup, jax.device_get(states.overflow), self.size)
        if overflow is None:
            return None
        bad, message = overflow
        self._overflowed = bad
        return Problem(
            "overflow",
            f"neighbour-search overflow by step {done} in {len(bad)} member(s) {bad[:10]}; "
            f"{message}",
            BodyOverflowError,
        )

    def record(self, first: int, n: int, states, report) -> None:
        for key, value in self._host_series(report).items():
            self.series[key].append(value)
        self._check_grid(first + n, np.asarray(jax.device_get(states.bodies.position))[: self.size])

    def _check_grid(self, step: int, positions: np.ndarray) -> None:
        if self.left_grid is not None:
            return
        for m in range(self.size):
            outside = bodies_outside(self.setup.grid, positions[m])
            if outside.size:
                self.left_grid = {
                    "step": step,
                    "member": m,
                    "bodies": outside[:10].tolist(),
                    "count": int(outside.size),
                }
                log.warning(
                    "member %d: %d body(ies) left the cell grid by step %d (first %s); they are "
                    "clamped into its edge cells",
                    m,
                    outside.size,
                    step,
                    outside[:10].tolist(),
                )
                return

    # ------------------------------------------------------------------ the end

    def conclude(self, status: str, done: int, states, timing: dict) -> dict:
        overflowed = getattr(self, "_overflowed", []) if status == "overflow" else []
        if status == "overflow":
            self.write(done, states)
        table = {k: np.concatenate(v, axis=1) for k, v in self.series.items()}
        stacked = {k: np.stack(v, axis=1) for k, v in self.frames.items()}  # (E, T, ...)
        if self.runtime.is_root:
            _write_h5(
                self.output_dir / "ensemble.h5",
                self.case,
                self.setup,
                self.members,
                table,
                stacked,
                self.times,
                self.ensemble.saved_members,
            )
        self.final_fields = {
            k: stacked[k][:, -1]
            for k in ("position", "orientation", "velocity", "angular_velocity")
        }
        return _summary(
            self.config,
            self.case,
            self.members,
            table,
            stacked,
            np.array(self.times),
            overflowed,
            self.left_grid,
            timing,
            self.padded,
            self.devices,
        )

    def summary_lines(self, summary: dict) -> list[str]:
        return summary_lines(summary)


def _member_diagnostics(
    case: BodyCase, m: int, swept: dict, table: dict, stacked: dict, times: np.ndarray, dt: float
) -> dict:
    steps = table["kinetic"].shape[1]
    series = {key: table[key][m] for key in SERIES} | {
        "time": np.arange(steps) * dt,
        "orientation": stacked["orientation"][m],
        "velocity": stacked["velocity"][m],
    }
    diag = dict(case.diagnose(times, stacked["position"][m], series))
    if "restitution" in swept and "restitution_squared" in diag:
        # the bounce case reports against its nominal restitution: use the member's
        e2 = swept["restitution"] ** 2
        diag["restitution_squared"] = e2
        if diag.get("rebound_ratio") is not None:
            diag["rebound_ratio_error"] = diag["rebound_ratio"] - e2
    return diag


def _summary(
    config, case, members, table, stacked, times, overflowed, left_grid, timing, padded, devices
) -> dict:
    """The ensemble's part of run.json (the run loop adds status, steps, times and outputs)."""
    setup, size = members.setup, members.size
    ensemble = config.bodies.ensemble
    total = table["kinetic"] + table["potential"]  # (E, S)
    first, last = total[:, 0], total[:, -1]
    drift = np.where(first != 0, (last - first) / np.where(first != 0, np.abs(first), 1.0), np.nan)
    per_member = []
    for m in range(size):
        diag = _member_diagnostics(case, m, members.swept[m], table, stacked, times, setup.dt)
        per_member.append(
            {
                "member": m,
                "swept": members.swept[m],
                "stable_dt_s": members.stable_dt[m],
                "energy": {
                    "total_first_J": first[m],
                    "total_last_J": last[m],
                    "relative_drift": drift[m],
                },
                "overflow": m in overflowed,
                "diagnostics": diag,
            }
        )
    keys = [
        k
        for k, v in per_member[0]["diagnostics"].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    stats = {k: aggregate([p["diagnostics"].get(k) for p in per_member]) for k in keys}
    stats["energy_relative_drift"] = aggregate(list(drift))
    stats["energy_total_last_J"] = aggregate(list(last))
    return {
        "kind": "bodies",
        "dt_s": setup.dt,
        "stable_dt_s": min(members.stable_dt),
        "body_steps_per_s": timing["rate"] if timing["run"] > 0 else None,
        "bodies": setup.n_bodies,
        "planes": setup.n_planes,
        "contact_model": setup.contact_model,
        "precision": "float64",
        "kernel": config.bodies.kernel,
        "ensemble": {
            "size": size,
            "devices": devices,
            "padded_size": padded,
            "seed": config.seed,
            "perturb": {
                "position_m": ensemble.perturb_position,
                "velocity_m_s": ensemble.perturb_velocity,
                "angular_velocity_rad_s": ensemble.perturb_angular_velocity,
            },
            "sweep": {name: list(values) for name, values in ensemble.sweep},
            "sweep_material": ensemble.sweep_material,
            "overflowed_members": overflowed,
            "left_grid": left_grid,
            "aggregate": stats,
            "members": per_member,
        },
        "info": case.info,
    }


def _write_h5(
    path: Path,
    case: BodyCase,
    setup: BodySetup,
    members: Members,
    table: dict,
    stacked: dict,
    times: list[float],
    saved: int | None,
) -> None:
    """ensemble.h5: /energy/{kinetic,potential,contacts} (E, S) per step, /swept/<name> (E, ...),
    /states/<field> (K, T, n, ...) of the first K = saved_members members at /states/time_s (T,)."""
    import h5py

    keep = members.size if saved is None else min(saved, members.size)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            {
                "case": case.name,
                "dt_s": setup.dt,
                "members": members.size,
                "length_unit": "m",
                "time_unit": "s",
            }
        )
        # per body, like the states: a clump's bounding radius
        f.create_dataset("radius", data=setup.bounding_radius).attrs["units"] = "m"
        f.create_dataset("mass", data=case.mass).attrs["units"] = "kg"
        energy = f.create_group("energy")
        steps = table["kinetic"].shape[1]
        energy.create_dataset("time_s", data=np.arange(steps) * setup.dt).attrs["units"] = "s"
        for key, unit in (("kinetic", "J"), ("potential", "J"), ("contacts", "1")):
            energy.create_dataset(key, data=table[key], chunks=True, compression="gzip").attrs[
                "units"
            ] = unit
        swept = f.create_group("swept")
        for name in members.swept[0] if members.swept else ():
            swept.create_dataset(name, data=np.array([s[name] for s in members.swept]))
        states = f.create_group("states")
        states.create_dataset("time_s", data=np.asarray(times)).attrs["units"] = "s"
        units = {
            "position": "m",
            "orientation": "1 (w, x, y, z)",
            "velocity": "m/s",
            "angular_velocity": "rad/s",
            "contact_count": "1",
        }
        for key, unit in units.items():
            states.create_dataset(key, data=stacked[key][:keep]).attrs["units"] = unit


def summary_lines(summary: dict) -> list[str]:
    """The short end-of-run summary of an ensemble."""
    ens = summary["ensemble"]
    lines = [
        f"case {summary['case']} ensemble: {ens['size']} members on {ens['devices']} device(s), "
        f"{summary['bodies']} sphere(s), {summary['planes']} plane(s), "
        f"dt = {summary['dt_s']:.4g} s",
        f"steps = {summary['steps']}   simulated time = {summary['time_s']:.4g} s   "
        f"wall time = {summary['wall_time_s']:.1f} s",
    ]
    for key, stats in ens["aggregate"].items():
        if stats is not None:
            lines.append(
                f"{key}: mean {stats['mean']:.4g}  std {stats['std']:.3g}  "
                f"min {stats['min']:.4g}  max {stats['max']:.4g}"
            )
    for name, path in summary.get("outputs", {}).items():
        lines.append(f"{name:>12}: {path}")
    return lines
