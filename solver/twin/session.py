"""The digital twin inside the fluid run loop (a ``solver.model.ChunkHook``).

At every chunk end (and only there) the twin takes the messages that are due (replay: up to
the simulation time; MQTT: whatever arrived), ingests them (parse, validate, quarantine),
samples the model at the probes, and, when assimilating:

- boundary forcing: the velocity inlet's profile is scaled so that its peak equals the latest
  inflow_velocity reading (a new geometry array, no recompilation);
- nudging: the velocity near each probe that is not held out relaxes toward its reading
  (``kernels.nudging``), with the configured gain and radius.

A twin with a pace, or on a live clock, keeps a schedule (``solver.twin.realtime``): it waits when
ahead, measures its real-time factor and lag, warns when it cannot keep pace, and with
``twin.realtime.behind=skip_ahead`` jumps its clock to the present when it falls more than
``max_lag`` behind (the readings it jumped over are quarantined as ``stale``). Before the first
chunk a short timed run (``ready``) says whether the case can keep pace on this hardware; the
service is ready after it (the ``solver_twin_ready`` metric, ``twin_ready.json``).

Held-out probes are never assimilated: the model's values there against their readings give
the twin's error (``held_out_rms``). Probe positions are in m; the grid node (i, j[, k]) sits at
origin + (index + 1/2) dx. Single process for now (the probe sampling gathers from one device).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels import nudging
from solver.errors import ConfigError
from solver.fluid.config import MAX_MACH
from solver.fluid.step import decode_populations, encode_populations, macroscopic
from solver.twin.config import TwinConfig
from solver.twin.ingest import Ingestor
from solver.twin.quarantine import Quarantine
from solver.twin.realtime import RealTimeMonitor, Schedule, SpeedAdvice
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

    def __init__(
        self,
        config: TwinConfig,
        assimilate: bool,
        extra_summary: dict | None = None,
        tunables: dict | None = None,
    ):
        """``tunables``: the run config's ``resolution`` (case.resolution, None if the case has
        none) and ``u_lattice`` (fluid.u_lattice), for the advice of the real-time warning."""
        self.config = config
        self.tunables = dict(tunables or {})
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
        self.live = config.mode == "mqtt" and config.time_origin is None
        # the rate to keep: the pace, or real time for a live clock
        self.rate = config.pace if config.pace is not None else (1.0 if self.live else None)
        self.schedule: Schedule | None = None
        self.monitor = RealTimeMonitor(config.realtime, self.rate)
        self.ready_path: Path | None = None
        self.health = None
        self.health_server = None

    # --- ChunkHook ---

    def start(self, model, output_dir: Path, first_step: int) -> None:
        case, dist = model.case, model.dist
        cfg = self.config
        if dist.runtime.process_count > 1:
            raise ConfigError("twin.mode", cfg.mode, "a single-process run (for now)")
        setup, units = case.setup, case.units
        self.setup, self.units, self.case = setup, units, case
        u_lattice = self.tunables.get("u_lattice")
        if u_lattice:
            self.monitor.advice = SpeedAdvice(
                dimension=setup.lattice.d,
                resolution=self.tunables.get("resolution"),
                u_lattice=u_lattice,
                u_lattice_max=u_lattice * MAX_MACH / case.mach if case.mach > 0 else u_lattice,
                devices=dist.decomposition.shards,
            )
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
        self.inlet = next((k for k, b in enumerate(setup.open_boundaries) if b.is_inlet), None)
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
            f = decode_populations(setup, state.populations)  # fluid.storage: f itself or coded
            f = nudging.nudge_populations(setup.lattice, f, du, self.fluid)
            return state.replace(populations=encode_populations(setup, f.astype(setup.dtype)))

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
        if origin is None:  # live: simulation time 0 is the wall clock now (minus a resume);
            origin = time.time() - first_step * units.dt  # set again once ready
        self.time_origin = origin
        self.ready_path = Path(output_dir) / "twin_ready.json"
        self.ready_path.unlink(missing_ok=True)  # a previous run's: not ready yet
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
                self.source = ReplaySource(cfg.recording, cfg.time_origin)
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
        if cfg.health.port is not None:
            self._serve_health()
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

    def _serve_health(self) -> None:
        """Start ``/livez`` and ``/readyz`` (``solver.twin.health``); MQTT: ready only while
        the broker is connected (subscribed)."""
        from solver.twin.health import Health, HealthServer

        cfg = self.config.health
        connected = self.source.connected.is_set if self.config.mode == "mqtt" else None
        self.health = Health(cfg.deadline, cfg.startup_deadline, connected)
        try:
            self.health_server = HealthServer(self.health, cfg.port, cfg.address)
        except OSError as err:
            raise ConfigError("twin.health.port", cfg.port, "a free port on twin.health.address",
                              hint=str(err)) from None  # fmt: skip
        log.info("twin: health endpoints on http://%s:%d/livez and /readyz", cfg.address,
                 self.health_server.port)  # fmt: skip

    def ready(self, model, state, first_step: int, chunk: int) -> float:
        """Before the first chunk: with a rate to keep, time ``chunk``-step chunks on a copy of
        ``state`` for ``twin.realtime.startup_check`` s and log whether the case can keep pace;
        then start the live clock and report ready. Returns the seconds spent compiling."""
        compile_s = 0.0
        check_s = self.config.realtime.startup_check
        if self.rate is not None and check_s > 0:
            steps_per_s, compile_s = _timed_rate(model, state, chunk, check_s)
            factor = steps_per_s * self.dt
            keeps = factor >= self.rate
            self.monitor.startup = {
                "factor": factor,
                "steps_per_s": steps_per_s,
                "pace": self.rate,
                "can_keep_pace": keeps,
                "seconds": check_s,
                "compile_s": compile_s,
            }
            if keeps:
                log.info("twin: start-up check: %.3g simulated s per wall s (%.4g steps/s) "
                         "against pace %g: can keep pace (%.2gx margin)", factor, steps_per_s,
                         self.rate, factor / self.rate)  # fmt: skip
            else:
                advice = ""
                if self.monitor.advice is not None and factor > 0:
                    advice = "; to keep it: " + self.monitor.advice.text(1.1 * self.rate / factor)
                log.warning("twin: start-up check: %.3g simulated s per wall s (%.4g steps/s) "
                            "against pace %g: this case cannot keep pace on this hardware%s",
                            factor, steps_per_s, self.rate, advice)  # fmt: skip
        if self.live:  # simulation time `first_step * dt` is now: compiling is not lag
            self.time_origin = time.time() - first_step * self.dt
            self.ingestor.validator.time_origin = self.time_origin
            self.schedule = Schedule(self.rate, self.time_origin)
            log.info("twin: time origin %.3f s (UNIX time of simulation time 0)", self.time_origin)
        if self.metrics is not None:
            self.metrics.ready.set(1)
        self.ready_path.write_text(json.dumps({"ready": True, "startup_check": self.monitor.startup,
                                               "time_origin_s": self.time_origin}))  # fmt: skip
        log.info("twin: ready")
        return compile_s

    def steps_until(self, step: int) -> int | None:
        periods = [p for p in (self.every_steps, self.forecast_steps) if p is not None]
        if not periods:
            return None
        return min(p - step % p for p in periods)

    def after_chunk(self, step: int, model, state):
        """Assimilate what came due by ``step``; a new inflow replaces ``model.geometry``."""
        if self.health is not None:  # the loop advanced: a chunk ended
            self.health.advanced(step)
        state, model.geometry = self._after_chunk(step, state, model.geometry)
        return state

    def _after_chunk(self, step: int, state, geometry):
        now = step * self.dt
        self._now = now
        wall = time.monotonic()
        if self._last_wall is not None and wall > self._last_wall[0]:
            self._rate = (step - self._last_wall[1]) / (wall - self._last_wall[0])
        self._last_wall = (wall, step)
        fresh = self._ingest(step, now)
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

    def _ingest(self, step: int, now: float) -> list[Observation]:
        behind = self._keep_schedule(now)
        skip = None
        if behind is not None and self.monitor.should_skip(behind):
            skip = self._skip_ahead(step, now, behind)
            behind = 0.0
        stale_before = self.ingestor.quarantine.counts.get("stale", 0)
        clock = None
        if self.config.mode == "mqtt":
            # on a live clock, a reading's age is judged against the wall clock: a run that lags
            # (compiling, slower than real time) must not call the present "the future"
            if self.live:
                clock = time.time() - self.time_origin
            waiting = self.source.oldest_arrival()
        accepted = take_due(self.source, self.ingestor, now, clock)
        if self.config.mode == "mqtt" and self.config.pace is None:
            self._lag_s = 0.0 if waiting is None else time.time() - waiting
        elif behind is not None:
            self._lag_s = behind
        stale = self.ingestor.quarantine.counts.get("stale", 0) - stale_before
        if stale and self.monitor.skips:  # backlog that arrives later counts to its skip
            self.monitor.skips[-1]["stale"] += stale
        if skip is not None:
            log.warning(
                "twin: %.3g s behind real time (> twin.realtime.max_lag = %g s): skipped ahead to "
                "the present at t = %.4g s (step %d); readings more than %g s older than that go "
                "to the quarantine as stale (%d so far)", skip["skipped_s"],
                self.config.realtime.max_lag, now, step, self.config.realtime.max_lag, stale,
            )  # fmt: skip
        if self.schedule is not None:
            self.monitor.observe(time.time(), now, behind or 0.0)
        for obs in accepted:
            self.latest[obs.sensor] = obs
        return accepted

    def _keep_schedule(self, now: float) -> float | None:
        """Wait while ahead of the schedule (with a pace); wall s behind it (None: no schedule).
        A live clock is absolute (simulation time t belongs to the wall-clock time origin + t /
        rate, set when the twin became ready); otherwise the schedule counts from the first
        chunk end."""
        if self.rate is None:
            return None
        wall = time.time()
        if self.schedule is None:  # live: set when ready; else from the first chunk end
            live = (self.time_origin, 0.0)
            self.schedule = Schedule(self.rate, *(live if self.live else (wall, now)))
        target = self.schedule.target(now)
        if self.config.pace is not None and target > wall:
            time.sleep(target - wall)
            wall = target
        return self.schedule.behind(now, wall)

    def _skip_ahead(self, step: int, now: float, behind: float) -> dict:
        """Re-synchronise to the present: simulation time ``now`` becomes the present (the
        schedule and the source clock move by ``behind`` wall s), and readings older than
        ``max_lag`` before it will be quarantined as stale."""
        seconds = behind * self.rate  # simulated seconds jumped over
        self.schedule.shift(behind)
        if self.live:
            self.time_origin += seconds
        if isinstance(self.source, ReplaySource):
            self.source.time_origin += seconds
        self.ingestor.validator.shift(seconds, now - self.config.realtime.max_lag * self.rate)
        return self.monitor.skipped(step, now, seconds)

    def staleness(self) -> dict[str, float]:
        """s since each sensor's newest accepted reading, on the twin's clock (the wall clock
        for a live twin, else simulation time); never negative."""
        present = time.time() - self.time_origin if self.live else self._now
        return {sid: max(0.0, present - obs.time) for sid, obs in sorted(self.latest.items())}

    def _publish_metrics(self) -> None:
        ing = self.ingestor
        self.metrics.update(
            counts=dict(ing.counts),
            rejected_by_reason=ing.rejected_by_reason,
            lag_s=self._lag_s,
            steps_per_s=self._rate,
            time_s=self._now,
            innovation_rms=self.innovation_rms[-1][1] if self.innovation_rms else None,
            staleness_s=self.staleness(),
            realtime_factor=self.monitor.factor,
            behind_s=self.monitor.behind if self.schedule is not None else None,
            skips=len(self.monitor.skips),
        )

    def held_out_rms(self) -> float | None:
        if not self.held_out:
            return None
        errors = np.concatenate([obs - model for _, _, obs, model in self.held_out])
        return float(np.sqrt(np.mean(errors**2)))

    def summary(self) -> dict:
        ing = self.ingestor
        counts = dict(ing.counts) if ing is not None else {}
        staleness = self.staleness()
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
            "realtime": self.monitor.summary(),
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
        if self.ready_path is not None:
            self.ready_path.unlink(missing_ok=True)
        if self._probe_log is not None:
            self._probe_log.close()
        if self.health_server is not None:
            self.health_server.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.ingestor is not None:
            self.ingestor.quarantine.close()
        if self.config.mode == "mqtt" and self.source is not None:
            self.source.stop()


def _timed_rate(model, state, chunk: int, seconds: float) -> tuple[float, float]:
    """Steps per wall second of ``model`` in ``chunk``-step chunks, timed for about ``seconds``
    on a copy of ``state`` (the chunk donates its input); and the seconds the first chunk took
    (compiling: the run loop then finds that chunk compiled)."""
    start = time.perf_counter()
    trial, _ = model.advance(jax.tree.map(jnp.copy, state), chunk)
    jax.block_until_ready(trial)
    compile_s = time.perf_counter() - start
    steps, start = 0, time.perf_counter()
    while True:
        trial, _ = model.advance(trial, chunk)
        jax.block_until_ready(trial)
        steps += chunk
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed, compile_s
