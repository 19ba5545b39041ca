"""Make the twin experiment's recording (data/twin/cylinder_recording.csv).

A "truth" run of ``case=cylinder`` whose inflow peak velocity varies in time,

    u_max(t) = U0 (1 + A sin(2 pi t / P)),   U0 = case.u_max, A = 0.25, P = 3 s,

is sampled every ``twin.every`` seconds at the sensors of configs/twin/replay.yaml (the probes'
streamwise and transverse velocity, the inflow's peak velocity), with Gaussian noise of each
sensor's ``noise_std``. The twin (``python -m solver case=cylinder twin=replay``) starts from the
case's constant inflow U0 and never sees A or P: it has only these readings. Three malformed
rows are appended on purpose (a NaN, an unknown sensor, a time that is not a number), so every
replay also shows the quarantine at work.

    python data/twin/make_cylinder_recording.py [--out PATH] [--seed N] [OVERRIDES ...]

OVERRIDES are Hydra overrides of the truth run (e.g. case.resolution=30); the default is the
case's own configuration at its default duration.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels import nudging  # noqa: E402
from solver.api import compose_config  # noqa: E402
from solver.app import enable_precision  # noqa: E402
from solver.run import simulate  # noqa: E402

AMPLITUDE = 0.25  # relative inflow variation
PERIOD_S = 3.0


class TruthHook:
    """Drives the truth run's inflow and samples its probes (a solver.model.ChunkHook)."""

    name = "truth"
    unbounded = False

    def __init__(
        self, twin, u0: float, seed: int, amplitude: float = AMPLITUDE, period: float = PERIOD_S
    ) -> None:
        self.twin, self.u0 = twin, u0
        self.amplitude, self.period = amplitude, period
        self.rng = np.random.default_rng(seed)
        self.rows: list[tuple[float, str, list[float], str]] = []
        self._nominal = None

    def start(self, model, output_dir, first_step):
        case = model.case
        self.units, self.setup = case.units, case.setup
        self.probes = [s for s in self.twin.sensors.values() if s.kind == "velocity_probe"]
        origin = np.asarray(case.origin)
        coords = np.array([(np.asarray(s.position) - origin) / self.units.dx - 0.5
                           for s in self.probes])  # fmt: skip
        stencils = nudging.probe_stencils(coords, self.setup.shape)
        import jax

        from solver.fluid.step import macroscopic

        self._sample = jax.jit(lambda st, g: nudging.sample(macroscopic(self.setup, st, g)[1],
                                                            stencils))  # fmt: skip
        self.every = max(1, round(self.twin.every / self.units.dt))
        self.inlet = next(k for k, b in enumerate(self.setup.open_boundaries)
                          if b.is_inlet)  # fmt: skip

    def steps_until(self, step):
        return self.every - step % self.every

    def u_max(self, t: float) -> float:
        return self.u0 * (1.0 + self.amplitude * math.sin(2.0 * math.pi * t / self.period))

    def after_chunk(self, step, model, state):
        geometry = model.geometry
        t = step * self.units.dt
        if self._nominal is None:
            self._nominal = geometry.open_velocity[self.inlet]
        u = np.asarray(self._sample(state, geometry), dtype=np.float64) * self.units.velocity_scale
        for sensor, value in zip(self.probes, u, strict=True):
            noisy = value + self.rng.normal(scale=sensor.noise_std, size=value.shape)
            self.rows.append((t, sensor.id, noisy.tolist(), "m/s"))
        u_max = self.u_max(t)  # applied from t on
        for sensor in self.twin.sensors.values():
            if sensor.kind == "inflow_velocity":
                noisy = u_max + self.rng.normal(scale=sensor.noise_std)
                self.rows.append((t, sensor.id, [noisy], "m/s"))
        velocities = list(geometry.open_velocity)
        velocities[self.inlet] = self._nominal * (u_max / self.u0)
        model.geometry = dataclasses.replace(geometry, open_velocity=tuple(velocities))
        return state

    def summary(self):
        return {"rows": len(self.rows), "amplitude": self.amplitude, "period_s": self.period}

    def close(self):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data/twin/cylinder_recording.csv")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sensor noise")
    parser.add_argument("--work", type=Path, default=Path("/tmp/cylinder_truth"))
    parser.add_argument("--amplitude", type=float, default=AMPLITUDE, help="relative, A")
    parser.add_argument("--period", type=float, default=PERIOD_S, help="s, P")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    config = compose_config(["case=cylinder", "twin=replay", "checkpoint=none", "output=none",
                             *args.overrides])  # fmt: skip
    enable_precision(config.fluid.precision)
    twin = config.twin
    config = dataclasses.replace(config, twin=None)
    hook = TruthHook(twin, config.case.u_max, args.seed, args.amplitude, args.period)
    simulate(config, args.work, interactive=False, hook=hook)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["time", "sensor", "value", "units"])
        for t, sid, value, units in hook.rows:
            writer.writerow([f"{t:.9g}", sid, ";".join(f"{v:.6g}" for v in value), units])
        t_end = hook.rows[-1][0]
        writer.writerow([f"{t_end / 3:.9g}", "u_38_20", "nan;0.1", "m/s"])  # non_finite
        writer.writerow([f"{t_end / 2:.9g}", "pitot_7", "1.0", "m/s"])  # unknown_sensor
        writer.writerow(["half past two", "inflow", "1.5", "m/s"])  # not a reading
    print(f"wrote {len(hook.rows) + 3} rows ({len(hook.rows)} readings) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
