"""What-if forecasts from the twin's current state: K scenarios H seconds ahead, in one program.

Each scenario scales the current inflow by a factor (``twin.forecast.scenarios``; 1.0 is "as
now"). The K copies of the state advance together (``jax.vmap`` of the fluid chunk) for
``horizon`` seconds, sampled at the probes every ``output_every`` seconds. A forecast holds every
scenario's probe velocities and, across the scenarios, their mean and spread; it is appended to
``forecast.h5`` and, when an MQTT connection exists, published as JSON to ``twin.forecast.topic``.

forecast.h5: one group ``issued_<step 10 digits>`` per forecast with attributes ``issued_s``,
``horizon_s`` and datasets ``time_s`` (T,), ``scenarios`` (K,), ``velocity`` (K, T, P, d) m/s,
``mean`` and ``spread`` (T, P, d) m/s (spread: the standard deviation over the scenarios), and
``probes`` (P,) their ids.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from kernels import nudging
from solver.fluid.step import macroscopic, make_chunk

log = logging.getLogger("solver.twin")


class Forecaster:
    """Attributes:
    issued: [(step, path in forecast.h5)] of every forecast so far.
    """

    def __init__(self, setup, units, stencils, probe_ids: list[str], inlet: int | None,
                 scenarios: tuple[float, ...], horizon_s: float, output_every_s: float,
                 path: Path) -> None:  # fmt: skip
        self.setup, self.units = setup, units
        self.probe_ids = probe_ids
        self.inlet = inlet
        self.scenarios = np.asarray(scenarios, dtype=np.float64)
        self.every = max(1, round(output_every_s / units.dt))
        self.outputs = max(1, round(horizon_s / units.dt / self.every))
        self.horizon_s = self.outputs * self.every * units.dt
        self.path = Path(path)
        self.issued: list[tuple[int, str]] = []
        chunk = make_chunk(setup)
        every = self.every

        def with_inflow(geometry, factor):
            if inlet is None:
                return geometry
            velocities = list(geometry.open_velocity)
            velocities[inlet] = (velocities[inlet] * factor).astype(velocities[inlet].dtype)
            return dataclasses.replace(geometry, open_velocity=tuple(velocities))

        def advance(states, geometry, factors):
            def one(state, factor):
                g = with_inflow(geometry, factor)
                state, _ = chunk(state, g, every)
                _, u = macroscopic(setup, state, g)
                return state, nudging.sample(u, stencils)

            return jax.vmap(one)(states, factors)

        self._advance = jax.jit(advance)

    def run(self, step: int, state, geometry) -> dict:
        """A forecast from ``state`` at ``step``; returns it as plain data (and stores it)."""
        k = len(self.scenarios)
        factors = jnp.asarray(self.scenarios, self.setup.dtype)
        states = jax.tree.map(lambda a: jnp.broadcast_to(a, (k, *a.shape)), state)
        samples = []
        for _ in range(self.outputs):
            states, probes = self._advance(states, geometry, factors)
            samples.append(np.asarray(probes, dtype=np.float64) * self.units.velocity_scale)
        velocity = np.stack(samples, axis=1)  # (K, T, P, d)
        issued_s = step * self.units.dt
        times = issued_s + self.every * self.units.dt * np.arange(1, self.outputs + 1)
        spread = velocity.std(axis=0, ddof=1) if k > 1 else np.zeros_like(velocity[0])
        forecast = {
            "issued_s": issued_s,
            "horizon_s": self.horizon_s,
            "time_s": times,
            "scenarios": self.scenarios,
            "probes": self.probe_ids,
            "velocity": velocity,
            "mean": velocity.mean(axis=0),
            "spread": spread,
        }
        self._store(step, forecast)
        return forecast

    def _store(self, step: int, forecast: dict) -> None:
        import h5py

        name = f"issued_{step:010d}"
        with h5py.File(self.path, "a") as f:
            if name in f:  # a resumed run issues the same forecast again
                del f[name]
            group = f.create_group(name)
            group.attrs["issued_s"] = forecast["issued_s"]
            group.attrs["horizon_s"] = forecast["horizon_s"]
            group.create_dataset("time_s", data=forecast["time_s"]).attrs["units"] = "s"
            group.create_dataset("scenarios", data=forecast["scenarios"]).attrs["units"] = (
                "inflow factor"
            )
            for key in ("velocity", "mean", "spread"):
                group.create_dataset(key, data=forecast[key]).attrs["units"] = "m/s"
            group.create_dataset("probes", data=np.array(forecast["probes"], dtype="S64"))
        self.issued.append((step, name))


def forecast_message(forecast: dict) -> bytes:
    """The JSON published for a forecast: per probe, the mean and spread over the scenarios at
    each forecast time, and every scenario's values."""
    probes = {}
    for p, pid in enumerate(forecast["probes"]):
        probes[pid] = {
            "mean": np.round(forecast["mean"][:, p, :], 6).tolist(),
            "spread": np.round(forecast["spread"][:, p, :], 6).tolist(),
            "scenarios": np.round(forecast["velocity"][:, :, p, :], 6).tolist(),
        }
    return json.dumps(
        {
            "issued_s": forecast["issued_s"],
            "horizon_s": forecast["horizon_s"],
            "time_s": np.round(forecast["time_s"], 9).tolist(),
            "scenario_inflow_factors": forecast["scenarios"].tolist(),
            "units": "m/s",
            "probes": probes,
        }
    ).encode()
