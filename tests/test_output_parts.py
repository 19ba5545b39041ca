"""Per-process field output: blocks in fields.h5.parts/, stitched by fields.h5's virtual datasets.

The blocks of known NumPy fields are written as the processes of a run would write them, and
fields.h5 must then read exactly as the single-process file of the same fields: the same
groups, arrays, attributes and fields.xdmf.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from solver.output.field_parts import PartWriter, VirtualFieldWriter, consolidate
from solver.output.fields import FieldWriter, check_xdmf, part_path, parts_dir

ATTRS = {"case": "test", "lattice": "D3Q19", "dt": 0.01, "rho0": 1000.0, "dimension": 3}


def split(shape: tuple[int, ...], mesh: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """The blocks of ``shape`` over ``mesh`` (row-major, x slowest)."""
    local = [n // m for n, m in zip(shape, mesh, strict=True)]
    return [
        tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, local, strict=True))
        for coords in itertools.product(*(range(m) for m in mesh))
    ]


def fields_at(step: int, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct float32 density (*shape) and velocity (d, *shape) for ``step``."""
    rng = np.random.default_rng(step)
    d = len(shape)
    density = rng.standard_normal(shape).astype(np.float32)
    return density, rng.standard_normal((d, *shape)).astype(np.float32)


class Run:
    """Writers as a run of ``processes`` processes holds them; ``owners[p]``: p's blocks."""

    def __init__(self, directory: Path, shape, owners: dict, resume_step: int | None = None):
        self.shape, self.owners = shape, owners
        solid = np.zeros(shape, dtype=bool)
        solid[0] = True
        origin = (0.0,) * len(shape)
        h5 = directory / "fields.h5"
        self.parts = {p: PartWriter(h5, p, resume_step) for p in owners}
        self.root = VirtualFieldWriter(
            directory, shape, 0.1, origin, solid, ATTRS, len(owners), resume_step=resume_step
        )

    def write(self, step: int) -> None:
        density, velocity = fields_at(step, self.shape)
        for process, blocks in self.owners.items():
            mine = [(b, density[b], velocity[(slice(None), *b)]) for b in blocks]
            self.parts[process].write(step, step * 0.01, mine[::-1])  # any order
        self.root.write_virtual(
            step, step * 0.01, self.owners, np.dtype(np.float32), len(self.shape)
        )


def single_file(directory: Path, shape, steps) -> Path:
    directory.mkdir()
    solid = np.zeros(shape, dtype=bool)
    solid[0] = True
    writer = FieldWriter(directory, shape, 0.1, (0.0,) * len(shape), solid, ATTRS)
    for step in steps:
        writer.write(step, step * 0.01, *fields_at(step, shape))
    return directory


def assert_same_file(ours: Path, reference: Path) -> None:
    """Every group, dataset (bitwise) and attribute of reference/fields.h5 in ours/fields.h5,
    and the same fields.xdmf."""
    with h5py.File(ours / "fields.h5", "r") as a, h5py.File(reference / "fields.h5", "r") as b:
        assert sorted(a) == sorted(b)
        assert dict(a.attrs).keys() == dict(b.attrs).keys()
        for key, value in b.attrs.items():
            assert np.array_equal(a.attrs[key], value), key

        def compare(name, item):
            other = a[name]
            for key, value in item.attrs.items():
                assert np.array_equal(other.attrs[key], value), f"{name}: attribute {key}"
            assert set(other.attrs) == set(item.attrs), name
            if isinstance(item, h5py.Dataset):
                assert other.shape == item.shape and other.dtype == item.dtype, name
                assert np.array_equal(other[...], item[...]), f"{name} differs"

        b.visititems(compare)
    assert (ours / "fields.xdmf").read_text() == (reference / "fields.xdmf").read_text()
    assert check_xdmf(ours / "fields.xdmf") == []


@pytest.mark.parametrize(
    ("shape", "mesh", "processes"),
    [((6, 4, 5), (2, 2, 1), 3), ((8, 6), (2, 1), 2)],
    ids=["3d", "2d"],
)
def test_parts_read_as_the_single_file(tmp_path, shape, mesh, processes):
    blocks = split(shape, mesh)
    # process 0 holds two blocks (several devices in one process), the others one each
    owners = {0: blocks[: len(blocks) - processes + 1]}
    owners.update({p: [blocks[len(blocks) - processes + p]] for p in range(1, processes)})
    run = Run(tmp_path / "run", shape, owners)
    for step in (0, 10):
        run.write(step)
    reference = single_file(tmp_path / "single", shape, (0, 10))
    assert_same_file(tmp_path / "run", reference)
    with h5py.File(tmp_path / "run" / "fields.h5", "r") as f:
        assert f["step_00000010/velocity"].is_virtual
    assert sorted(p.name for p in parts_dir(run.root.h5_path).iterdir()) == [
        f"process_{p:05d}.h5" for p in range(processes)
    ]
    # a self-contained copy holds the same data, no virtual dataset
    (tmp_path / "whole").mkdir()
    consolidate(tmp_path / "run" / "fields.h5", tmp_path / "whole" / "fields.h5")
    shutil.copy(tmp_path / "run" / "fields.xdmf", tmp_path / "whole")
    assert_same_file(tmp_path / "whole", reference)
    with h5py.File(tmp_path / "whole" / "fields.h5", "r") as f:
        assert not f["step_00000010/velocity"].is_virtual
    # the sources are relative to fields.h5: a moved run directory, read from elsewhere
    moved = shutil.copytree(tmp_path / "run", tmp_path / "elsewhere" / "moved")
    shutil.rmtree(tmp_path / "run")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert_same_file(moved, reference)
    finally:
        os.chdir(cwd)


def test_missing_block_reads_as_nan(tmp_path):
    shape = (4, 4, 2)
    owners = {p: [b] for p, b in enumerate(split(shape, (2, 1, 1)))}
    run = Run(tmp_path, shape, owners)
    run.write(0)
    part_path(run.root.h5_path, 1).unlink()
    with h5py.File(tmp_path / "fields.h5", "r") as f:
        density = f["step_00000000/density"][...]  # (z, y, x): process 1 has x >= 2
    assert np.isnan(density[..., 2:]).all() and np.isfinite(density[..., :2]).all()


def test_resume_truncates_every_file(tmp_path):
    shape = (4, 4, 2)
    owners = {p: [b] for p, b in enumerate(split(shape, (2, 1, 1)))}
    run = Run(tmp_path / "run", shape, owners)
    for step in (0, 10, 20):
        run.write(step)
    # an earlier run of 3 processes left a file the next runs do not write
    stale = part_path(run.root.h5_path, 2)
    shutil.copy(part_path(run.root.h5_path, 1), stale)

    resumed = Run(tmp_path / "run", shape, owners, resume_step=10)
    assert resumed.root.steps == [(0, 0.0), (10, 0.1)]
    for path in [*(part_path(run.root.h5_path, p) for p in owners), stale]:
        with h5py.File(path, "r") as f:
            assert sorted(f) == ["step_00000000", "step_00000010"], path
    assert check_xdmf(tmp_path / "run" / "fields.xdmf") == []
    resumed.write(20)
    reference = single_file(tmp_path / "single", shape, (0, 10, 20))
    assert_same_file(tmp_path / "run", reference)

    # one process resuming the output of several keeps their blocks, drops their later steps
    FieldWriter(tmp_path / "run", shape, 0.1, (0.0,) * 3, None, ATTRS, resume_step=0)
    with h5py.File(part_path(run.root.h5_path, 1), "r") as f:
        assert sorted(f) == ["step_00000000"]
    with (
        h5py.File(tmp_path / "run" / "fields.h5", "r") as f,
        h5py.File(reference / "fields.h5", "r") as g,
    ):
        assert sorted(k for k in f if k.startswith("step")) == ["step_00000000"]
        assert np.array_equal(f["step_00000000/velocity"][...], g["step_00000000/velocity"][...])

    # a new run of 2 processes in the same folder removes the stale file
    Run(tmp_path / "run", shape, owners)
    assert not stale.exists()


def test_vtk_xdmf_reader_sees_the_stitched_field(tmp_path):
    """ParaView's XDMF reader is VTK's (its own HDF5 library); run where vtk is installed."""
    xdmf = pytest.importorskip("vtkmodules.vtkIOXdmf2")
    from vtkmodules.util.numpy_support import vtk_to_numpy

    shape = (6, 4, 5)
    owners = {p: [b] for p, b in enumerate(split(shape, (2, 2, 1)))}
    Run(tmp_path, shape, owners).write(0)
    reader = xdmf.vtkXdmfReader()
    reader.SetFileName(str(tmp_path / "fields.xdmf"))
    reader.Update()
    image = reader.GetOutputDataObject(0)
    assert image.GetDimensions() == shape
    density, velocity = fields_at(0, shape)
    # VTK's point order is x fastest: the file layout (z, y, x) flattened
    ours = vtk_to_numpy(image.GetPointData().GetArray("density"))
    assert np.array_equal(ours, density.T.ravel())
    ours = vtk_to_numpy(image.GetPointData().GetArray("velocity"))
    assert np.array_equal(ours, velocity.T.reshape(-1, 3))
