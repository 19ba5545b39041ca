"""The ensemble Kalman filter twin: E members in one vmapped program, analysed at every update.

Members differ by their inflow: each starts with the nominal inlet profile scaled by
s_e ~ N(1, ``inflow_spread``), and s is estimated by state augmentation (the analysed state is
the members' populations and their s). Between updates the members advance together
(``jax.vmap`` of the fluid chunk; with several devices the member axis is sharded over them). At
an update (every ``twin.every`` seconds) the fresh readings of the probes that are not held out
and of the inflow sensor are assimilated by ``kernels.enkf.analysis``:

- observation operator: the members' velocity at the probes (multilinear interpolation) and
  s_e U0 for the inflow sensor (U0 the nominal peak inflow);
- localisation: Gaspari-Cohn in the distance between a node and a probe, with half-width
  ``localisation`` (m); the inflow reading updates only s (the probes too when there is no
  inflow sensor), the probes update the nodes;
- multiplicative inflation of the anomalies before each analysis;
- the analysis is made on the velocity; each member's increment (at most MAX_INCREMENT lattice
  velocity per node) enters its populations as an equilibrium shift (``kernels.nudging``).

Between analyses s follows a random walk of relative step ``inflow_walk`` (a persistence model
that lets the estimate follow a changing inflow). The ensemble mean at the held-out probes
against their readings is the twin's error; the mean and spread at every probe and the inflow
estimate are written to ``ensemble.csv``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from kernels import enkf, nudging
from solver.distributed.members import member_sharding
from solver.errors import ConfigError
from solver.fluid.cases import build_case
from solver.fluid.model import summary_lines as fluid_summary_lines
from solver.fluid.step import (
    decode_populations,
    encode_populations,
    initial_state,
    macroscopic,
    make_chunk,
    make_geometry,
)
from solver.output.progress import Progress
from solver.output.summary import write_run_json
from solver.run import Outcome
from solver.twin.ingest import Ingestor
from solver.twin.quarantine import Quarantine
from solver.twin.replay import ReplaySource
from solver.twin.sources import take_due
from solver.twin.validate import Validator

if TYPE_CHECKING:
    from solver.config import RunConfig

log = logging.getLogger("solver.twin")

MIN_SIGMA = 1e-6  # m/s: a noiseless sensor still gets a finite observation error
MAX_INCREMENT = 0.02  # lattice velocity: the largest analysis increment at a node


def run_ensemble(config: RunConfig, output_dir: Path, extra: dict | None = None) -> Outcome:
    """The assimilated run of ``twin.enkf`` (replay only); writes run.json and ensemble.csv."""
    t_start = time.perf_counter()
    twin, settings = config.twin, config.twin.enkf
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    case = build_case(config)
    setup, units = case.setup, case.units
    if setup.open_boundaries is None or not any(b.is_inlet for b in setup.open_boundaries):
        raise ConfigError(
            "twin.enkf.enabled", True, f"a case with a velocity inlet, not {case.name}"
        )
    lat, d = setup.lattice, setup.lattice.d
    members = settings.members
    total = config.steps if config.steps is not None else case.default_steps
    every = max(1, round(twin.every / units.dt)) if twin.every else config.chunk
    origin = np.asarray(case.origin)
    probes = [s for s in twin.sensors.values() if s.kind == "velocity_probe"]
    coords = np.array([(np.asarray(s.position) - origin) / units.dx - 0.5 for s in probes])
    stencils = nudging.probe_stencils(coords.reshape(-1, d), setup.shape)
    assimilated = [k for k, s in enumerate(probes) if not s.held_out]
    inflow_id = next((s.id for s in twin.sensors.values() if s.kind == "inflow_velocity"), None)
    inlet = next(k for k, b in enumerate(setup.open_boundaries) if b.is_inlet)

    # localisation of node k with probe p, tiled over the d velocity components of both
    nodes = np.stack(np.meshgrid(*[np.arange(n) for n in setup.shape], indexing="ij"), -1)
    nodes = nodes.reshape(-1, d).astype(np.float64)
    half = settings.localisation / units.dx
    dist = np.linalg.norm(nodes[:, None, :] - coords[None, assimilated, :], axis=-1)
    loc_cells = np.asarray(enkf.gaspari_cohn(jnp.asarray(dist), half))  # (cells, Pa)
    loc_cells = np.repeat(loc_cells, d, axis=1)  # (cells, Pa d)
    loc_x = np.tile(loc_cells, (d, 1))  # (d cells, Pa d): the state is u (d, *shape)
    n_probe_obs = loc_x.shape[1]
    # the augmented state's last entry is s; the observations end with the inflow reading
    state_loc = np.zeros((loc_x.shape[0] + 1, n_probe_obs + 1), np.float32)
    state_loc[:-1, :-1] = loc_x
    # with an inflow sensor, s is observed directly; the probes' correlations with s, from a
    # small ensemble, were seen to drive it away (and the members unstable) within 0.1 s
    state_loc[-1, :-1] = 0.0 if inflow_id is not None else 1.0
    state_loc[-1, -1] = 1.0
    pd = np.repeat(coords[assimilated], d, axis=0)
    obs_loc = np.zeros((n_probe_obs + 1, n_probe_obs + 1), np.float32)
    obs_loc[:-1, :-1] = np.asarray(
        enkf.gaspari_cohn(jnp.asarray(np.linalg.norm(pd[:, None] - pd[None], axis=-1)), half)
    )
    obs_loc[-1, -1] = 1.0
    state_loc, obs_loc = jnp.asarray(state_loc), jnp.asarray(obs_loc)
    fluid = None if setup.solid is None else jnp.asarray(~setup.solid)

    chunk = make_chunk(setup)
    geometry = make_geometry(setup)
    nominal = geometry.open_velocity[inlet]
    u0 = float(jnp.max(jnp.abs(nominal))) * units.velocity_scale
    rng = np.random.default_rng(config.seed + 7919)
    scale = jnp.asarray(1.0 + settings.inflow_spread * rng.standard_normal(members), setup.dtype)
    state0 = initial_state(setup, case.density, case.velocity)
    states = jax.tree.map(lambda a: jnp.broadcast_to(a, (members, *a.shape)), state0)
    devices = jax.devices()
    padded, sharding = member_sharding(members)
    if padded != members:
        raise ConfigError("twin.enkf.members", members,
                          f"a multiple of the {len(devices)} devices")  # fmt: skip
    if len(devices) > 1:
        states = jax.device_put(states, sharding)
        scale = jax.device_put(scale, sharding)

    def with_inflow(s: jax.Array):
        velocities = list(geometry.open_velocity)
        velocities[inlet] = (nominal * s).astype(nominal.dtype)
        return dataclasses.replace(geometry, open_velocity=tuple(velocities))

    @jax.jit
    def sample(states, scale):
        def one(state, s):
            _, u = macroscopic(setup, state, with_inflow(s))
            return nudging.sample(u, stencils)

        return jax.vmap(one)(states, scale) * units.velocity_scale  # (E, P, d) m/s

    def advance(states, scale, n):
        return jax.vmap(lambda st, s: chunk(st, with_inflow(s), n)[0])(states, scale)

    advance_jit = jax.jit(advance, static_argnums=2)

    @jax.jit
    def analyse(states, scale, y, sigma, noise, mask):
        """Analysis in velocity space; the increments enter the populations as an equilibrium
        shift (kernels.nudging), which keeps density and the non-equilibrium part."""
        dtype = jnp.dtype(setup.dtype)  # the compute dtype (fluid.storage may be narrower)
        u = jax.vmap(lambda st, sc: macroscopic(setup, st, with_inflow(sc))[1])(states, scale)
        x = jnp.concatenate([u.reshape(members, -1) * units.velocity_scale,
                             scale[:, None].astype(dtype)], axis=1)  # fmt: skip
        prior = enkf.inflate(x, settings.inflation)
        probe_u = jax.vmap(lambda v: nudging.sample(v, stencils))(u) * units.velocity_scale
        predicted = jnp.concatenate(
            [probe_u[:, assimilated, :].reshape(members, -1), (scale * u0)[:, None]], axis=1
        ).astype(dtype)
        centre = jnp.mean(predicted, axis=0)
        # readings that did not arrive take no part: no anomaly, no innovation, no noise
        predicted = jnp.where(mask, centre + settings.inflation * (predicted - centre), centre)
        y = jnp.where(mask, y, centre).astype(dtype)
        noise = jnp.where(mask, noise, 0.0).astype(dtype)
        sigma = jnp.where(mask, sigma, 1.0).astype(dtype)
        xa = enkf.analysis(prior, predicted, y, sigma, noise, state_loc, obs_loc)
        du = (xa[:, :-1] - x[:, :-1]).reshape(u.shape) / units.velocity_scale
        # an increment of more than MAX_INCREMENT lattice velocity in one analysis is limited:
        # it would push the lattice Mach number toward instability
        size = jnp.sqrt(jnp.sum(du * du, axis=1, keepdims=True))
        du = du * jnp.minimum(1.0, MAX_INCREMENT / jnp.maximum(size, 1e-30))

        def shift(state, du_e):
            f = nudging.nudge_populations(lat, decode_populations(setup, state.populations),
                                          du_e, fluid)  # fmt: skip
            return state.replace(populations=encode_populations(setup, f.astype(dtype)))

        return jax.vmap(shift)(states, du), jnp.clip(xa[:, -1], 0.2, 3.0).astype(scale.dtype)

    validator = Validator(twin.sensors, twin.time_origin, twin.max_age, twin.max_future)
    ingestor = Ingestor(validator, Quarantine(output_dir / twin.quarantine), twin.max_message_bytes)
    try:
        source = ReplaySource(twin.recording, twin.time_origin, twin.pace)
    except (OSError, ValueError) as err:
        raise ConfigError("twin.recording", twin.recording, "a readable CSV or HDF5 recording",
                          hint=str(err).splitlines()[0]) from None  # fmt: skip
    sigma_probe = np.concatenate([np.full(d, max(probes[k].noise_std, MIN_SIGMA))
                                  for k in assimilated])  # fmt: skip
    sigma_inflow = max(twin.sensors[inflow_id].noise_std, MIN_SIGMA) if inflow_id else 1.0
    sigma = jnp.asarray(np.append(sigma_probe, sigma_inflow))
    held_out: list[tuple[str, float, np.ndarray, np.ndarray]] = []
    rows: list[str] = []
    analyses = 0
    done = 0
    placement = f"sharded over {len(devices)} devices" if len(devices) > 1 else "one device"
    log.info("twin: ensemble Kalman filter, %d members, every %d steps, %s", members, every,
             placement)  # fmt: skip
    t_run = None
    with Progress(total, units.dt, setup.cells * members, None, config.output.log_interval,
                  f"{case.name} EnKF x{members}") as bar:  # fmt: skip
        while done < total:
            n = min(every - done % every, total - done)
            states = advance_jit(states, scale, n)
            done += n
            now = done * units.dt
            fresh = take_due(source, ingestor, now)
            u = np.asarray(sample(states, scale), dtype=np.float64)  # (E, P, d)
            mean, spread = u.mean(0), u.std(0, ddof=1)
            y = np.zeros(n_probe_obs + 1)
            mask = np.zeros(n_probe_obs + 1, bool)
            for obs in fresh:
                sensor = twin.sensors[obs.sensor]
                if sensor.kind == "velocity_probe":
                    k = next(i for i, s in enumerate(probes) if s.id == obs.sensor)
                    if sensor.held_out:
                        held_out.append((obs.sensor, obs.time, obs.value, mean[k].copy()))
                    else:
                        row = assimilated.index(k)
                        y[row * d : (row + 1) * d] = obs.value
                        mask[row * d : (row + 1) * d] = True
                elif obs.sensor == inflow_id:
                    y[-1], mask[-1] = obs.value[0], True
            for k, sensor in enumerate(probes):
                rows.append(f"{now:.9g},{sensor.id},{';'.join(f'{v:.6g}' for v in mean[k])},"
                            f"{';'.join(f'{v:.6g}' for v in spread[k])}")  # fmt: skip
            s_host = np.asarray(scale)
            rows.append(f"{now:.9g},inflow_estimate,{s_host.mean() * u0:.6g},"
                        f"{s_host.std(ddof=1) * u0:.6g}")  # fmt: skip
            if mask.any():
                # the inflow may change: a random walk keeps the members' spread of s from
                # collapsing, so the estimate can follow (a persistence model of s)
                walk = settings.inflow_walk * rng.standard_normal(members)
                scale = scale + jnp.asarray(walk, scale.dtype)
                noise = jnp.asarray(rng.standard_normal((members, n_probe_obs + 1)))
                states, scale = analyse(states, scale, jnp.asarray(y), sigma, noise,
                                        jnp.asarray(mask))  # fmt: skip
                analyses += 1
            if t_run is None:
                t_run = time.perf_counter()
                first_done = done
            bar.update(done, 0.0)
    ingestor.quarantine.close()
    (output_dir / "ensemble.csv").write_text("time_s,sensor,mean_m_s,spread_m_s\n"
                                             + "\n".join(rows) + "\n")  # fmt: skip
    errors = np.concatenate([o - m for _, _, o, m in held_out]) if held_out else np.array([])
    rms = float(np.sqrt(np.mean(errors**2))) if errors.size else None
    elapsed = time.perf_counter() - (t_run or t_start)
    rate = setup.cells * members * (done - first_done) / elapsed / 1e6 if elapsed > 0 else 0.0
    s_host = np.asarray(scale)
    twin_summary = {
        "mode": twin.mode,
        "assimilation": "enkf",
        "members": members,
        "analyses": analyses,
        "messages": ingestor.counts.get("messages", 0),
        "accepted": ingestor.counts.get("accepted", 0),
        "rejected": ingestor.counts.get("rejected", 0),
        "duplicates": ingestor.counts.get("duplicates", 0)
        + ingestor.counts.get("duplicate_messages", 0),
        "rejected_by_reason": ingestor.rejected_by_reason,
        "quarantine": str(output_dir / twin.quarantine),
        "held_out_rms": rms,
        "held_out_samples": len(held_out),
        "assimilated_rms": rms,
        "inflow_estimate_m_s": float(s_host.mean() * u0),
        "inflow_estimate_spread_m_s": float(s_host.std(ddof=1) * u0),
        "ensemble_csv": str(output_dir / "ensemble.csv"),
    } | dict(extra or {})
    if twin_summary.get("free_rms") is not None and rms:
        twin_summary["error_reduction"] = twin_summary["free_rms"] / rms
    final = jax.tree.map(lambda a: a[0], states)
    rho, u = macroscopic(setup, final, with_inflow(scale[0]))
    summary = {
        "status": "completed",
        "case": case.name,
        "steps": done,
        "time_s": units.to_physical_time(done),
        "wall_time_s": time.perf_counter() - t_start,
        "mlups": rate,
        "compile_time_s": None,
        "tau": case.tau,
        "mach": case.mach,
        "reynolds": case.reynolds,
        "lattice": lat.name,
        "collision": setup.collision,
        "precision": setup.dtype,
        "shape": list(setup.shape),
        "cells": setup.cells,
        "devices": [str(dv) for dv in devices],
        "config": config.resolved,
        "units": units.as_dict(),
        "diagnostics": {},
        "outputs": {
            "ensemble_csv": str(output_dir / "ensemble.csv"),
            "run_json": str(output_dir / "run.json"),
        },  # fmt: skip
        "twin": twin_summary,
    }
    summary = write_run_json(output_dir / "run.json", summary)
    fields = {
        "density": units.to_physical_density(np.asarray(rho, np.float64)),
        "velocity": units.to_physical_velocity(np.asarray(u, np.float64)),
    }
    # the EnKF keeps its own loop over members (no checkpoints yet): its "model" is the case
    model = SimpleNamespace(case=case, summary_lines=fluid_summary_lines)
    return Outcome(model, summary, output_dir, True, fields)
