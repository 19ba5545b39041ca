"""The digital twin inside the fluid run loop (a ``solver.model.ChunkHook``).

At every chunk end (and only there) the twin takes the messages that are due (replay: up to
the simulation time; MQTT: whatever arrived), ingests them (parse, validate, quarantine),
samples the model at the probes, and, when assimilating:

- boundary forcing: the velocity inlet's profile is scaled so that its peak equals the latest
  inflow_velocity reading (a new geometry array, no recompilation);
- nudging: the velocity near each probe that is not held out relaxes toward its reading
  (``kernels.nudging``), with the configured gain and radius.

Held-out probes are never assimilated: the model's values there against their readings give
the twin's error (``held_out_rms``). Probe positions are in m; the grid node (i, j[, k]) sits at
origin + (index + 1/2) dx. Single process for now (the probe sampling gathers from one device).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels import nudging
from solver.errors import ConfigError
from solver.fluid.step import macroscopic
from solver.twin.config import TwinConfig
from solver.twin.ingest import Ingestor
from solver.twin.quarantine import Quarantine
from solver.twin.replay import ReplaySource
from solver.twin.sources import take_due
from solver.twin.validate import Observation, Validator

log = logging.getLogger("solver.twin")


class TwinHook:
    """Attributes:
    assimilate: apply the observations (False: a free run that only measures its error).
    held_out: [(sensor, time_s, observed (d,), model (d,))] m/s, every held-out reading.
    """

    name = "twin"

    def __init__(self, config: TwinConfig, assimilate: bool, extra_summary: dict | None = None):
        self.config = config
        self.unbounded = config.service  # service mode: until SIGTERM
        self.assimilate = assimilate
        self.extra_summary = dict(extra_summary or {})
        self.held_out: list[tuple[str, float, np.ndarray, np.ndarray]] = []
        self.innovation_rms: list[tuple[float, float]] = []  # (time_s, m/s)
        self.latest: dict[str, Observation] = {}
        self.inflow_updates = 0
        self.nudges = 0
        self.source: Any = None
        self.ingestor: Ingestor | None = None
        self.metrics = None
        self.forecaster = None
        self.forecast_steps: int | None = None
        self._probe_log = None
        self._now = 0.0
        self._lag_s = 0.0
        self._rate = 0.0
        self._last_wall: tuple[float, int] | None = None

    # --- ChunkHook ---

    def start(self, model, output_dir: Path, first_step: int) -> None:
        case, dist = model.case, model.dist
        cfg = self.config
        if dist.runtime.process_count > 1:
            raise ConfigError("twin.mode", cfg.mode, "a single-process run (for now)")
        setup, units = case.setup, case.units
        self.setup, self.units, self.case = setup, units, case
        self.dt = units.dt
        d = setup.lattice.d
        shape = np.asarray(setup.shape)
        origin = np.asarray(case.origin, dtype=np.float64)
        self.probes = [s for s in cfg.sensors.values() if s.kind == "velocity_probe"]
        coords = []
        for sensor in self.probes:
            if len(sensor.position) != d:
                raise ConfigError(f"twin.sensors.{sensor.id}.position", list(sensor.position),
                                  f"a {d}D point for case {case.name}")  # fmt: skip
            x = (np.asarray(sensor.position) - origin) / units.dx - 0.5
            if np.any(x < 0) or np.any(x > shape - 1):
                low = origin + 0.5 * units.dx
                high = origin + (shape - 0.5) * units.dx
                raise ConfigError(
                    f"twin.sensors.{sensor.id}.position", list(sensor.position),
                    f"inside the grid's node range {low.round(6).tolist()} .. "
                    f"{high.round(6).tolist()} m",
                )  # fmt: skip
            coords.append(x)
        coords = np.asarray(coords).reshape(-1, d)
        self.stencils = nudging.probe_stencils(coords, setup.shape) if self.probes else None
        self.assimilated = [k for k, s in enumerate(self.probes) if not s.held_out]
        self.inflow_sensor = next(
            (s.id for s in cfg.sensors.values() if s.kind == "inflow_velocity"), None
        )
        self.inlet = next(
            (k for k, b in enumerate(setup.open_boundaries) if b.kind == "velocity"), None
        )
        if cfg.inflow and self.inlet is None:
            raise ConfigError("twin.inflow", True, f"a case with a velocity inlet, not {case.name}")
        if cfg.inflow and self.inflow_sensor is None:
            raise ConfigError("twin.inflow", True, "an inflow_velocity sensor in twin.sensors")
        self._nominal = None
        self.weights = None
        if cfg.nudging.enabled and self.assimilated:
            radius = cfg.nudging.radius / units.dx
            weights = nudging.spreading_weights(coords[self.assimilated], setup.shape, radius)
            self.weights = jnp.asarray(weights, setup.dtype)
            self.fluid = None if setup.solid is None else jnp.asarray(~setup.solid)
        stencils = self.stencils

        def sample(state, geometry):
            _, u = macroscopic(setup, state, geometry)
            return nudging.sample(u, stencils)

        def nudge(state, innovation):
            du = nudging.velocity_correction(self.weights, innovation, cfg.nudging.gain)
            f = nudging.nudge_populations(setup.lattice, state.populations, du, self.fluid)
            return state.replace(populations=f.astype(state.populations.dtype))

        self._sample = jax.jit(sample) if stencils is not None else None
        self._nudge = jax.jit(nudge)
        self.every_steps = None
        if cfg.every is not None:
            self.every_steps = max(1, round(cfg.every / units.dt))
        if cfg.forecast.enabled and self.assimilate:
            from solver.twin.forecast import Forecaster

            if stencils is None:
                raise ConfigError("twin.forecast.enabled", True, "velocity probes to forecast")
            fc = cfg.forecast
            self.forecaster = Forecaster(
                setup, units, stencils, [s.id for s in self.probes], self.inlet, fc.scenarios,
                fc.horizon, fc.output_every, Path(output_dir) / "forecast.h5",
            )  # fmt: skip
            self.forecast_steps = max(1, round(fc.every / units.dt))
        origin = cfg.time_origin
        if origin is None:  # live: simulation time 0 is the wall clock now (minus a resume)
            origin = time.time() - first_step * units.dt
            log.info("twin: time origin %.3f s (UNIX time of simulation time 0)", origin)
        self.time_origin = origin
        self._pace_start: tuple[float, float] | None = None
        validator = Validator(cfg.sensors, origin, cfg.max_age, cfg.max_future)
        self.quarantine_path = Path(output_dir) / cfg.quarantine
        if self.probes:
            self.probes_path = Path(output_dir) / "probes.csv"
            fresh_file = first_step == 0 or not self.probes_path.exists()
            self._probe_log = self.probes_path.open("w" if fresh_file else "a")
            if fresh_file:
                self._probe_log.write("time_s,sensor,model_m_s\n")
        self.ingestor = Ingestor(validator, Quarantine(self.quarantine_path),
                                 cfg.max_message_bytes)  # fmt: skip
        if cfg.mode == "replay":
            try:
                self.source = ReplaySource(cfg.recording, cfg.time_origin, cfg.pace)
            except (OSError, ValueError) as err:
                raise ConfigError(
                    "twin.recording", cfg.recording, "a readable CSV or HDF5 recording",
                    hint=str(err).splitlines()[0],
                ) from None  # fmt: skip
        else:
            from solver.twin.mqtt import MqttSource

            try:
                self.source = MqttSource(cfg.mqtt)
            except ValueError as err:
                raise ConfigError("twin.mqtt", "...", "usable credentials", hint=str(err)) from None
            self.source.start()
        if cfg.metrics_port is not None:
            from solver.twin.metrics import TwinMetrics

            try:
                self.metrics = TwinMetrics(cfg.metrics_port, cfg.metrics_address)
            except OSError as err:
                raise ConfigError("twin.metrics_port", cfg.metrics_port, "a free port",
                                  hint=str(err)) from None  # fmt: skip
            log.info("twin: Prometheus metrics on http://%s:%d/metrics", cfg.metrics_address,
                     self.metrics.port)  # fmt: skip
        log.info(
            "twin: %s, %d sensor(s), %s", cfg.mode, len(cfg.sensors),
            "assimilating" if self.assimilate else "free run (no assimilation)",
        )  # fmt: skip

    def steps_until(self, step: int) -> int | None:
        periods = [p for p in (self.every_steps, self.forecast_steps) if p is not None]
        if not periods:
            return None
        return min(p - step % p for p in periods)

    def after_chunk(self, step: int, model, state):
        """Assimilate what came due by ``step``; a new inflow replaces ``model.geometry``."""
        state, model.geometry = self._after_chunk(step, state, model.geometry)
        return state

    def _after_chunk(self, step: int, state, geometry):
        now = step * self.dt
        self._now = now
        wall = time.monotonic()
        if self._last_wall is not None and wall > self._last_wall[0]:
            self._rate = (step - self._last_wall[1]) / (wall - self._last_wall[0])
        self._last_wall = (wall, step)
        fresh = self._ingest(now)
        if self.metrics is not None:
            self._publish_metrics()
        if self._nominal is None and self.inlet is not None:
            self._nominal = geometry.open_velocity[self.inlet]
        model = None
        if self._sample is not None:
            model_lat = np.asarray(self._sample(state, geometry), dtype=np.float64)
            model = model_lat * self.units.velocity_scale
            for sensor, value in zip(self.probes, model, strict=True):
                self._probe_log.write(f"{now:.9g},{sensor.id},"
                                      f"{';'.join(f'{v:.7g}' for v in value)}\n")  # fmt: skip
            self._probe_log.flush()
        innovations = np.zeros((len(self.probes), self.setup.lattice.d))
        have = np.zeros(len(self.probes), bool)
        for obs in fresh:
            sensor = self.config.sensors[obs.sensor]
            if sensor.kind == "velocity_probe" and model is not None:
                k = next(i for i, s in enumerate(self.probes) if s.id == obs.sensor)
                if sensor.held_out:
                    self.held_out.append((obs.sensor, obs.time, obs.value, model[k].copy()))
                else:
                    innovations[k] = obs.value - model[k]
                    have[k] = True
        if have.any():
            rms = float(np.sqrt(np.mean(innovations[have] ** 2)))
            self.innovation_rms.append((now, rms))
        if not self.assimilate:
            return state, geometry
        state, geometry = self._assimilate(state, geometry, fresh, innovations, have)
        if self.forecaster is not None and step % self.forecast_steps == 0:
            self._forecast(step, state, geometry)
        return state, geometry

    def _forecast(self, step: int, state, geometry) -> None:
        from solver.twin.forecast import forecast_message

        forecast = self.forecaster.run(step, state, geometry)
        topic = self.config.forecast.topic
        if topic and self.config.mode == "mqtt":
            self.source.publish(topic, forecast_message(forecast))
        log.info(
            "twin: forecast at t = %.4g s, %d scenario(s), %.3g s ahead",
            forecast["issued_s"], len(forecast["scenarios"]), forecast["horizon_s"],
        )  # fmt: skip

    def _assimilate(self, state, geometry, fresh, innovations, have):
        inflow = [o for o in fresh if o.sensor == self.inflow_sensor]
        if self.config.inflow and inflow and self._nominal is not None:
            latest = inflow[-1]
            peak = float(jnp.max(jnp.abs(self._nominal))) * self.units.velocity_scale
            scale = float(latest.value[0]) / peak if peak > 0 else 0.0
            velocities = list(geometry.open_velocity)
            velocities[self.inlet] = (self._nominal * scale).astype(self._nominal.dtype)
            geometry = dataclasses.replace(geometry, open_velocity=tuple(velocities))
            self.inflow_updates += 1
        if self.weights is not None:
            selected = [k for k in self.assimilated if have[k]]
            if selected:
                gate = np.zeros((len(self.assimilated), self.setup.lattice.d))
                for row, k in enumerate(self.assimilated):
                    if have[k]:
                        gate[row] = innovations[k] / self.units.velocity_scale
                state = self._nudge(state, jnp.asarray(gate, self.setup.dtype))
                self.nudges += 1
        return state, geometry

    def _ingest(self, now: float) -> list[Observation]:
        clock = None
        if self.config.mode == "mqtt":
            self._pace(now)
            # on a live clock, a reading's age is judged against the wall clock: a run that lags
            # (compiling, slower than real time) must not call the present "the future"
            if self.config.time_origin is None:
                clock = time.time() - self.time_origin
            waiting = self.source.oldest_arrival()
        accepted = take_due(self.source, self.ingestor, now, clock)
        if self.config.mode == "replay":
            self._lag_s = self.source.lag_s
        elif not self.config.pace:
            self._lag_s = 0.0 if waiting is None else time.time() - waiting
        for obs in accepted:
            self.latest[obs.sensor] = obs
        return accepted

    def _pace(self, now: float) -> None:
        """Live with ``pace`` p: keep the simulation at most p simulated seconds per wall second
        (1.0: real time); ``_lag_s`` says how far (wall s) it is behind that schedule."""
        pace = self.config.pace
        if pace is None:
            return
        wall = time.time()
        if self._pace_start is None:
            # a live clock (time_origin null) is absolute: simulation time t belongs to the
            # wall-clock time origin + t / pace, so time spent compiling is caught up; otherwise
            # the pace counts from the first chunk end
            live = self.config.time_origin is None
            self._pace_start = (self.time_origin, 0.0) if live else (wall, now)
        target = self._pace_start[0] + (now - self._pace_start[1]) / pace
        if target > wall:
            time.sleep(target - wall)
            wall = target
        self._lag_s = wall - target

    def _publish_metrics(self) -> None:
        ing = self.ingestor
        self.metrics.update(
            counts=dict(ing.counts),
            rejected_by_reason=ing.rejected_by_reason,
            lag_s=self._lag_s,
            steps_per_s=self._rate,
            time_s=self._now,
            innovation_rms=self.innovation_rms[-1][1] if self.innovation_rms else None,
            staleness_s={sid: self._now - obs.time for sid, obs in self.latest.items()},
        )

    def held_out_rms(self) -> float | None:
        if not self.held_out:
            return None
        errors = np.concatenate([obs - model for _, _, obs, model in self.held_out])
        return float(np.sqrt(np.mean(errors**2)))

    def summary(self) -> dict:
        ing = self.ingestor
        counts = dict(ing.counts) if ing is not None else {}
        staleness = {
            sid: (self._now - obs.time) for sid, obs in sorted(self.latest.items())
        }  # s since each sensor's last accepted reading
        never = sorted(set(self.config.sensors) - set(self.latest))
        out = {
            "mode": self.config.mode,
            "assimilating": self.assimilate,
            "messages": counts.get("messages", 0),
            "readings": counts.get("readings", 0),
            "accepted": counts.get("accepted", 0),
            "rejected": counts.get("rejected", 0),
            "duplicates": counts.get("duplicates", 0) + counts.get("duplicate_messages", 0),
            "rejected_by_reason": ing.rejected_by_reason if ing is not None else {},
            "quarantine": str(self.quarantine_path) if ing is not None else None,
            "staleness_s": staleness,
            "never_heard": never,
            "held_out_rms": self.held_out_rms(),
            "held_out_samples": len(self.held_out),
            "innovation_rms_last": self.innovation_rms[-1][1] if self.innovation_rms else None,
            "inflow_updates": self.inflow_updates,
            "nudges": self.nudges,
            "probes_csv": str(self.probes_path) if self._probe_log is not None else None,
            "time_origin_s": getattr(self, "time_origin", None),
            "lag_s": self._lag_s,
        }
        if self.forecaster is not None:
            out["forecasts"] = len(self.forecaster.issued)
            out["forecast_h5"] = str(self.forecaster.path)
        out |= self.extra_summary
        if self.assimilate:
            out["assimilated_rms"] = out["held_out_rms"]
            free, assimilated = out.get("free_rms"), out["assimilated_rms"]
            if free is not None and assimilated:
                out["error_reduction"] = free / assimilated
        return out

    def close(self) -> None:
        if self._probe_log is not None:
            self._probe_log.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.ingestor is not None:
            self.ingestor.quarantine.close()
        if self.config.mode == "mqtt" and self.source is not None:
            self.source.stop()
