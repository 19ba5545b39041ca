"""Field output: ``fields.h5`` plus a ``fields.xdmf`` index that ParaView opens as a time series.

Array layout. The solver holds fields as (x, y[, z]) with x first (velocity (d, x, y[, z])). XDMF
and VTK describe a uniform grid by its dimensions slowest-first, (z, y, x), with x varying
fastest in memory, and vectors with their components last. fields.h5 therefore stores every field
*transposed* into that layout, so that ParaView shows x as x without any axis swap; a 2D field gets
a leading z axis of length 1 (a one-layer 3D grid: VTK's XDMF reader maps a 2D mesh onto the y-z
plane, and a one-layer 3D mesh onto the x-y plane as wanted):

- ``density``: (nz, ny, nx), nz = 1 in 2D; ``density[k, j, i]`` is the value at (x_i, y_j, z_k).
- ``velocity``: (nz, ny, nx, d); the last axis holds (u_x, u_y[, u_z]) (d = 2 in 2D; ParaView
  pads the vector with u_z = 0).
- ``/solid``: (nz, ny, nx) uint8, 1 on solid nodes, written once.

``solver_layout`` turns a stored array back into (x, y[, z]) or (d, x, y[, z]). The file is opened,
written and closed for every output step, so a crash or a divergence leaves a complete, readable
file.

Several processes (``solver.output.field_parts``): each writes its own blocks into
``fields.h5.parts/process_NNNNN.h5``, and process 0's ``fields.h5`` holds, under the same names,
shapes and attributes, HDF5 *virtual* datasets that stitch those blocks together, so readers see
one file. Move or copy the folder together with ``fields.h5``.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import h5py
import numpy as np

GROUP_FORMAT = "step_{:08d}"
PARTS_SUFFIX = ".parts"  # fields.h5 -> fields.h5.parts/, the per-process files
PART_FORMAT = "process_{:05d}.h5"


def parts_dir(h5_path: Path) -> Path:
    """The folder of the per-process files that ``h5_path``'s virtual datasets read."""
    h5_path = Path(h5_path)
    return h5_path.with_name(h5_path.name + PARTS_SUFFIX)


def part_path(h5_path: Path, process: int) -> Path:
    """Process ``process``'s file of blocks for ``h5_path``."""
    return parts_dir(h5_path) / PART_FORMAT.format(process)


def part_files(h5_path: Path) -> dict[int, Path]:
    """The per-process files present for ``h5_path``, by process index."""
    found = {}
    for path in parts_dir(h5_path).glob("process_*.h5"):
        index = path.stem.removeprefix("process_")
        if index.isdigit():
            found[int(index)] = path
    return found


def file_layout(field: np.ndarray, vector: bool) -> np.ndarray:
    """(x, y[, z]) -> (nz, ny, nx) for a scalar; (d, x, y[, z]) -> (nz, ny, nx, d) for a vector.

    In 2D the leading z axis has length 1.
    """
    field = np.asarray(field)
    if vector:
        d = field.shape[0]
        out = np.transpose(field, tuple(range(d, 0, -1)) + (0,))
    else:
        d = field.ndim
        out = field.T
    if d == 2:
        out = out[None]
    return np.ascontiguousarray(out)


def solver_layout(field: np.ndarray, vector: bool, dimension: int) -> np.ndarray:
    """Inverse of ``file_layout``: back to (x, y[, z]) or (d, x, y[, z])."""
    field = np.asarray(field)
    if dimension == 2:
        field = field[0]
    if vector:
        return np.ascontiguousarray(
            np.transpose(field, (dimension,) + tuple(range(dimension - 1, -1, -1)))
        )
    return np.ascontiguousarray(field.T)


class FieldWriter:
    """Writes one HDF5 group per output step and keeps the XDMF index in step with it.

    Args:
        directory: output directory.
        shape: grid shape (nx, ny[, nz]).
        dx: cell size in m; origin: (d,) m, node i at origin + (i + 0.5) dx.
        solid: (*shape) bool mask.
        attrs: extra root attributes (lattice, case, dt, ...).
        resume_step: a run resumed from a checkpoint at this step: an existing fields.h5 of
            the same grid is kept up to this step (later outputs, written after the checkpoint
            by the interrupted run, are dropped because the resumed run writes them again).
    """

    def __init__(
        self,
        directory: Path,
        shape: tuple[int, ...],
        dx: float,
        origin: tuple[float, ...],
        solid: np.ndarray | None,
        attrs: dict,
        resume_step: int | None = None,
    ) -> None:
        self.h5_path = Path(directory) / "fields.h5"
        self.xdmf_path = Path(directory) / "fields.xdmf"
        self.shape = tuple(shape)
        self.dx = dx
        self.origin = tuple(origin)
        self.steps: list[tuple[int, float]] = []
        if resume_step is not None and self._reopen(resume_step):
            return
        if solid is None:
            solid = np.zeros(self.shape, dtype=bool)
        with h5py.File(self.h5_path, "w") as f:
            f.attrs["shape"] = np.asarray(self.shape)
            f.attrs["dx"] = dx
            f.attrs["origin"] = np.asarray(self.origin)
            f.attrs["node_coordinates"] = "x_i = origin + (i + 0.5) * dx along each axis"
            f.attrs["layout"] = (
                "fields stored as (z, y, x) / (y, x), x fastest; vectors (z, y, x, d)"
            )
            for key, value in attrs.items():
                f.attrs[key] = value
            ds = f.create_dataset("solid", data=file_layout(solid.astype(np.uint8), False))
            ds.attrs["units"] = "1"
            ds.attrs["description"] = "1 on solid nodes, 0 on fluid nodes"
        self._write_xdmf()

    def write(self, step: int, time: float, density: np.ndarray, velocity: np.ndarray) -> str:
        """Append one output step.

        Args:
            step: time step number; time: physical time in s.
            density: (*shape) kg/m^3; velocity: (d, *shape) m/s.

        Returns:
            the HDF5 group name.
        """
        d = velocity.shape[0]
        with h5py.File(self.h5_path, "a") as f:
            g = new_step_group(f, step, time)
            ds = g.create_dataset("density", data=file_layout(np.asarray(density), False))
            label_field(ds, "density", d)
            ds = g.create_dataset("velocity", data=file_layout(np.asarray(velocity), True))
            label_field(ds, "velocity", d)
        return self._indexed(step, time)

    def _indexed(self, step: int, time: float) -> str:
        """Record a written step in fields.xdmf; its group name."""
        self.steps = [s for s in self.steps if s[0] != step] + [(int(step), float(time))]
        self._write_xdmf()
        return GROUP_FORMAT.format(step)

    def _reopen(self, resume_step: int) -> bool:
        """Keep an existing file of this grid up to ``resume_step``; False if there is none."""
        if not self.h5_path.is_file():
            return False
        with h5py.File(self.h5_path, "r") as f:
            if tuple(int(n) for n in f.attrs.get("shape", ())) != self.shape:
                return False
        self.steps = truncate_steps(self.h5_path, resume_step)
        self._truncate_parts(resume_step)
        self._write_xdmf()
        return True

    def _truncate_parts(self, resume_step: int) -> None:
        """Drop later steps from per-process files left by an earlier run of several processes
        (this process alone writes here; none of them is in use)."""
        for path in part_files(self.h5_path).values():
            truncate_steps(path, resume_step)

    # -- XDMF ---------------------------------------------------------------------------------

    def _write_xdmf(self) -> None:
        """Rewrite fields.xdmf (atomically: temp file + rename) for the steps written so far."""
        text = xdmf_document(self.h5_path.name, self.shape, self.dx, self.origin, self.steps)
        tmp = self.xdmf_path.with_suffix(".xdmf.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.xdmf_path)


def new_step_group(f: h5py.File, step: int, time: float) -> h5py.Group:
    """A fresh group for ``step`` (replacing one of that name) with its step and time (s)."""
    name = GROUP_FORMAT.format(step)
    if name in f:
        del f[name]
    g = f.create_group(name)
    g.attrs["step"] = int(step)
    g.attrs["time"] = float(time)
    g.attrs["time_units"] = "s"
    return g


def label_field(ds: h5py.Dataset, name: str, d: int) -> None:
    """The attributes of a ``density`` or ``velocity`` dataset; d: spatial dimension."""
    if name == "density":
        ds.attrs["units"] = "kg/m^3"
    else:
        ds.attrs["units"] = "m/s"
        ds.attrs["components"] = "xyz"[:d]


def truncate_steps(path: Path, resume_step: int) -> list[tuple[int, float]]:
    """Delete the step groups after ``resume_step`` from an HDF5 file; the kept (step, time)s,
    sorted."""
    kept = []
    with h5py.File(path, "a") as f:
        for name in [n for n in f if n.startswith("step_")]:
            step = int(f[name].attrs["step"])
            if step > resume_step:
                del f[name]
            else:
                kept.append((step, float(f[name].attrs["time"])))
    return sorted(kept)


def xdmf_document(
    h5_name: str,
    shape: tuple[int, ...],
    dx: float,
    origin: tuple[float, ...],
    steps: list[tuple[int, float]],
) -> str:
    """XDMF 3 text: a temporal collection of uniform grids, one per (step, time).

    Dimensions, origin and spacing are listed slowest-first (z, y, x), matching the HDF5 layout;
    the origin is that of the first node, origin + dx / 2 (z = 0 for a 2D grid).
    """
    d = len(shape)
    # always a 3D grid, one z layer in 2D (see the module docstring)
    grid_shape = tuple(shape) + (1,) * (3 - d)
    dims = " ".join(str(n) for n in reversed(grid_shape))
    node0 = [o + 0.5 * dx for o in origin] + [0.0] * (3 - d)
    root = ET.Element("Xdmf", Version="3.0")
    domain = ET.SubElement(root, "Domain")
    series = ET.SubElement(
        domain, "Grid", Name="fields", GridType="Collection", CollectionType="Temporal"
    )
    for step, time in steps:
        grid = ET.SubElement(series, "Grid", Name=GROUP_FORMAT.format(step), GridType="Uniform")
        ET.SubElement(grid, "Time", Value=repr(float(time)))
        ET.SubElement(grid, "Topology", TopologyType="3DCoRectMesh", Dimensions=dims)
        geometry = ET.SubElement(grid, "Geometry", GeometryType="ORIGIN_DXDYDZ")
        _data_item(geometry, " ".join(repr(v) for v in reversed(node0)), "3", "XML")
        _data_item(geometry, " ".join([repr(dx)] * 3), "3", "XML")
        group = GROUP_FORMAT.format(step)
        for name, kind, extra in (
            ("density", "Scalar", ""),
            ("velocity", "Vector", f" {d}"),
        ):
            attr = ET.SubElement(grid, "Attribute", Name=name, AttributeType=kind, Center="Node")
            _data_item(attr, f"{h5_name}:/{group}/{name}", dims + extra, "HDF")
        attr = ET.SubElement(grid, "Attribute", Name="solid", AttributeType="Scalar", Center="Node")
        _data_item(attr, f"{h5_name}:/solid", dims, "HDF", number_type="UChar", precision="1")
    ET.indent(root)
    return '<?xml version="1.0" ?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _data_item(
    parent: ET.Element,
    text: str,
    dims: str,
    fmt: str,
    number_type: str = "Float",
    precision: str = "8",
) -> None:
    item = ET.SubElement(
        parent,
        "DataItem",
        Dimensions=dims,
        NumberType=number_type,
        Precision=precision,
        Format=fmt,
    )
    item.text = text


def check_xdmf(xdmf_path: Path) -> list[str]:
    """Parse an XDMF file and check every HDF reference: the dataset exists and its shape equals
    the DataItem's Dimensions. Returns a list of problems (empty when consistent)."""
    problems = []
    xdmf_path = Path(xdmf_path)
    tree = ET.parse(xdmf_path)
    for item in tree.iter("DataItem"):
        if item.get("Format") != "HDF":
            continue
        file_name, _, dataset = (item.text or "").strip().partition(":")
        dims = tuple(int(v) for v in item.get("Dimensions", "").split())
        path = xdmf_path.parent / file_name
        if not path.exists():
            problems.append(f"{file_name}: missing file")
            continue
        with h5py.File(path, "r") as f:
            if dataset not in f:
                problems.append(f"{dataset}: missing dataset")
            elif tuple(f[dataset].shape) != dims:
                problems.append(f"{dataset}: shape {f[dataset].shape} != Dimensions {dims}")
    for topo in tree.iter("Topology"):
        grid_dims = tuple(int(v) for v in topo.get("Dimensions", "").split())
        if not grid_dims:
            problems.append("Topology without Dimensions")
    return problems
