"""Rigid-body output files: bodies.h5 + bodies.xdmf (states at output steps) and energies.csv.

    bodies.h5      radius and mass at the root; one group ``step_<8 digits>`` per output step with
                   position (n, 3), orientation (n, 4), velocity (n, 3), angular_velocity (n, 3),
                   contact_count (n,); SI units in each dataset's ``units`` attribute.
    bodies.xdmf    a temporal collection of Polyvertex grids over bodies.h5 (ParaView: points with
                   radius, velocity, angular velocity and contact count).
    energies.csv   one row per step: step, time_s, kinetic_J, potential_J, total_J,
                   momentum_{x,y,z}, angular_momentum_{x,y,z} (about the origin), contacts,
                   elastic_J.

A resumed run keeps what the interrupted run wrote up to its checkpoint and drops the rest
(groups of later steps; energies.csv is rewritten from the rows saved with the checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

ENERGY_COLUMNS = (
    "step",
    "time_s",
    "kinetic_J",
    "potential_J",
    "total_J",
    "momentum_x",
    "momentum_y",
    "momentum_z",
    "angular_momentum_x",
    "angular_momentum_y",
    "angular_momentum_z",
    "contacts",
    "elastic_J",
)


class BodyWriter:
    """Writes bodies.h5 (one group per output step) and keeps bodies.xdmf in step with it."""

    def __init__(
        self,
        output_dir: Path,
        radius: np.ndarray,
        mass: np.ndarray,
        attrs: dict,
        resume_step: int | None = None,
    ) -> None:
        """``resume_step``: continue the files of an interrupted run that resumes at that step
        (groups of later steps are dropped); a new file when there is none."""
        import h5py

        self.h5_path = Path(output_dir) / "bodies.h5"
        self.xdmf_path = Path(output_dir) / "bodies.xdmf"
        self.n = int(radius.size)
        self.frames: list[tuple[str, float]] = []
        if resume_step is not None and self.h5_path.is_file():
            with h5py.File(self.h5_path, "a") as f:
                for name in sorted(k for k in f if k.startswith("step_")):
                    if f[name].attrs["step"] > resume_step:
                        del f[name]
                    else:
                        self.frames.append((name, float(f[name].attrs["time_s"])))
            self._write_xdmf()
            return
        with h5py.File(self.h5_path, "w") as f:
            f.attrs.update(attrs)
            f.attrs["length_unit"] = "m"
            f.attrs["time_unit"] = "s"
            f.create_dataset("radius", data=radius).attrs["units"] = "m"
            f.create_dataset("mass", data=mass).attrs["units"] = "kg"

    def write(self, step: int, time_s: float, fields: dict[str, np.ndarray]) -> None:
        """Append one output step; fields: position, orientation, velocity, angular_velocity,
        contact_count (host arrays)."""
        import h5py

        units = {
            "position": "m",
            "orientation": "1 (unit quaternion w, x, y, z)",
            "velocity": "m/s",
            "angular_velocity": "rad/s",
            "contact_count": "1",
        }
        name = f"step_{step:08d}"
        with h5py.File(self.h5_path, "a") as f:
            if name in f:  # a resumed run writes its first step again
                del f[name]
            group = f.create_group(name)
            group.attrs["step"] = step
            group.attrs["time_s"] = time_s
            for key, unit in units.items():
                group.create_dataset(key, data=fields[key]).attrs["units"] = unit
        self.frames = [frame for frame in self.frames if frame[0] != name]
        self.frames.append((name, time_s))
        self._write_xdmf()

    def _write_xdmf(self) -> None:
        h5, n = self.h5_path.name, self.n

        def item(path: str, dims: str, number: str = "Float", precision: int = 8) -> str:
            return (
                f'<DataItem Dimensions="{dims}" NumberType="{number}" Precision="{precision}" '
                f'Format="HDF">{h5}:{path}</DataItem>'
            )

        grids = []
        for name, t in self.frames:
            grids.append(
                f'   <Grid Name="{name}" GridType="Uniform">\n'
                f'    <Time Value="{t:.12g}"/>\n'
                f'    <Topology TopologyType="Polyvertex" NumberOfElements="{n}" '
                f'NodesPerElement="1"/>\n'
                f'    <Geometry GeometryType="XYZ">{item(f"/{name}/position", f"{n} 3")}'
                f"</Geometry>\n"
                f'    <Attribute Name="radius" AttributeType="Scalar" Center="Node">'
                f"{item('/radius', str(n))}</Attribute>\n"
                f'    <Attribute Name="velocity" AttributeType="Vector" Center="Node">'
                f"{item(f'/{name}/velocity', f'{n} 3')}</Attribute>\n"
                f'    <Attribute Name="angular_velocity" AttributeType="Vector" Center="Node">'
                f"{item(f'/{name}/angular_velocity', f'{n} 3')}</Attribute>\n"
                f'    <Attribute Name="contact_count" AttributeType="Scalar" Center="Node">'
                f"{item(f'/{name}/contact_count', str(n), 'Int', 4)}</Attribute>\n"
                f"   </Grid>"
            )
        text = (
            '<?xml version="1.0" ?>\n<Xdmf Version="3.0">\n <Domain>\n'
            '  <Grid Name="bodies" GridType="Collection" CollectionType="Temporal">\n'
            + "\n".join(grids)
            + "\n  </Grid>\n </Domain>\n</Xdmf>\n"
        )
        tmp = self.xdmf_path.with_suffix(".xdmf.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.xdmf_path)


def energy_rows(first_step: int, dt: float, diag) -> np.ndarray:
    """(S, 13) rows of energies.csv for S consecutive steps starting at first_step; ``diag``:
    the body step's per-step diagnostics (kinetic_energy, potential_energy, momentum,
    angular_momentum, contacts[, elastic_energy]) with leading axis S (or none for S = 1)."""
    kinetic = np.atleast_1d(np.asarray(diag.kinetic_energy, dtype=np.float64))
    potential = np.atleast_1d(np.asarray(diag.potential_energy, dtype=np.float64))
    steps = first_step + np.arange(kinetic.size)
    return np.column_stack(
        [
            steps,
            steps * dt,
            kinetic,
            potential,
            kinetic + potential,
            np.asarray(diag.momentum, dtype=np.float64).reshape(-1, 3),
            np.asarray(diag.angular_momentum, dtype=np.float64).reshape(-1, 3),
            np.atleast_1d(np.asarray(diag.contacts, dtype=np.float64)),
            # the decomposed step does not sum the spring energy (0 there)
            np.broadcast_to(
                np.asarray(getattr(diag, "elastic_energy", 0.0), dtype=np.float64), kinetic.shape
            ),
        ]
    )


class EnergyLog:
    """energies.csv: a header, then the rows of every sampled step (every step unless
    bodies.diagnostics_every says otherwise), appended after each chunk."""

    def __init__(self, path: Path, rows: np.ndarray | None = None) -> None:
        """``rows``: (S, 13) rows a resumed run had written up to its checkpoint."""
        self.path = Path(path)
        self.path.write_text(",".join(ENERGY_COLUMNS) + "\n")
        if rows is not None:
            self.append(rows)

    def append(self, block: np.ndarray) -> None:
        with self.path.open("a") as f:
            for row in block:
                f.write(f"{int(row[0])},{row[1]:.12g},")
                f.write(",".join(f"{v:.12g}" for v in row[2:11]))
                f.write(f",{int(row[11])},{row[12]:.12g}\n")
