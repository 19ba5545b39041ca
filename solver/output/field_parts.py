"""Field output of several processes: each writes its own blocks, process 0 writes the index.

No process ever holds the whole field. At every output step:

1. every process writes its blocks into ``fields.h5.parts/process_NNNNN.h5`` (``PartWriter``):
   ``/step_NNNNNNNN/block_K/density`` (bz, by, bx) and ``.../velocity`` (bz, by, bx, d), in
   fields.h5's layout (``solver.output.fields``), with the block's ``start`` (z, y, x) in the
   global grid;
2. once all of them are on disk (the caller's barrier), process 0 adds to ``fields.h5`` the
   step's group with *virtual* datasets ``density`` (nz, ny, nx) and ``velocity``
   (nz, ny, nx, d) that map every block into place (``VirtualFieldWriter``), and the step to
   ``fields.xdmf``.

HDF5 resolves the virtual datasets' relative source paths from the folder of ``fields.h5``, so
``fields.xdmf``, ParaView (any HDF5 >= 1.10) and h5py read the step as one array; a part that
is missing reads as NaN. Each file is opened, written and closed at every step, so a crash
leaves readable files, and fields.h5 never names a step before all its blocks are written.
``consolidate`` copies such a fields.h5 into one self-contained file.

A block is a tuple of global index ranges (slices) over the grid axes (x, y[, z]); block K of a
process is the K-th of its blocks in the order of their first cell, on the writing process and
on process 0 alike.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from solver.output.fields import (
    GROUP_FORMAT,
    FieldWriter,
    file_layout,
    label_field,
    new_step_group,
    part_files,
    part_path,
    truncate_steps,
)

Block = tuple[slice, ...]


def file_block(block: Block) -> tuple[slice, ...]:
    """A block's index ranges (x, y[, z]) -> its ranges in fields.h5's (z, y, x) layout (2D:
    the one z layer 0:1)."""
    out = tuple(reversed(block))
    return (slice(0, 1),) + out if len(block) == 2 else out


def _block_key(block: Block) -> tuple[int, ...]:
    return tuple(s.start for s in block)


class PartWriter:
    """One process's blocks of every output step, in ``fields.h5.parts/process_NNNNN.h5``.

    Args:
        h5_path: the run's fields.h5 (written by process 0).
        process: this process's index.
        resume_step: a resumed run: keep this process's file up to this step (drop the later
            steps, which the resumed run writes again); None: a new file.
    """

    def __init__(self, h5_path: Path, process: int, resume_step: int | None = None) -> None:
        self.path = part_path(h5_path, process)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.is_file():
            truncate_steps(self.path, resume_step)
            return
        with h5py.File(self.path, "w") as f:
            f.attrs["process"] = int(process)
            f.attrs["layout"] = (
                "step_N/block_K/{density (z, y, x), velocity (z, y, x, d)}: blocks of fields.h5, "
                "attribute start = (z, y, x) of the block's first node"
            )

    def write(
        self,
        step: int,
        time: float,
        blocks: Sequence[tuple[Block, np.ndarray, np.ndarray]],
    ) -> None:
        """Write one output step.

        Args:
            step: time step number; time: physical time in s.
            blocks: (block, density (*block shape) kg/m^3, velocity (d, *block shape) m/s) for
                each of this process's blocks, in the order of their first cell.
        """
        with h5py.File(self.path, "a") as f:
            g = new_step_group(f, step, time)
            for k, (block, density, velocity) in enumerate(
                sorted(blocks, key=lambda item: _block_key(item[0]))
            ):
                b = g.create_group(f"block_{k}")
                b.attrs["start"] = np.asarray([s.start for s in file_block(block)])
                d = velocity.shape[0]
                ds = b.create_dataset("density", data=file_layout(density, False))
                label_field(ds, "density", d)
                ds = b.create_dataset("velocity", data=file_layout(velocity, True))
                label_field(ds, "velocity", d)


class VirtualFieldWriter(FieldWriter):
    """Process 0's ``fields.h5`` and ``fields.xdmf`` over the blocks of every process.

    Args: those of ``FieldWriter``, and
        processes: the number of processes that write blocks (indices 0 .. processes - 1).
    """

    def __init__(
        self,
        directory: Path,
        shape: tuple[int, ...],
        dx: float,
        origin: tuple[float, ...],
        solid: np.ndarray | None,
        attrs: dict,
        processes: int,
        resume_step: int | None = None,
    ) -> None:
        self.processes = processes
        super().__init__(directory, shape, dx, origin, solid, attrs, resume_step)
        if resume_step is None:
            # files of processes this run has not (a larger earlier run here): no longer read
            for process, path in part_files(self.h5_path).items():
                if process >= processes:
                    path.unlink()

    def _truncate_parts(self, resume_step: int) -> None:
        # the live processes truncate their own files (PartWriter); only the files of processes
        # that this run has not are left to process 0
        for process, path in part_files(self.h5_path).items():
            if process >= self.processes:
                truncate_steps(path, resume_step)

    def write_virtual(
        self,
        step: int,
        time: float,
        layout: dict[int, list[Block]],
        dtype: np.dtype,
        d: int,
    ) -> str:
        """Add ``step``'s virtual datasets, once every process's ``PartWriter`` wrote it.

        Args:
            step: time step number; time: physical time in s.
            layout: every process's blocks, by process index (``Distribution.block_owners``).
            dtype: the blocks' dtype (density and velocity); d: spatial dimension.

        Returns:
            the HDF5 group name.
        """
        group = GROUP_FORMAT.format(step)
        grid = (1,) * (3 - len(self.shape)) + tuple(reversed(self.shape))  # (nz, ny, nx)
        with h5py.File(self.h5_path, "a") as f:
            g = new_step_group(f, step, time)
            for name, components in (("density", ()), ("velocity", (d,))):
                virtual = h5py.VirtualLayout(grid + components, dtype)
                for process, blocks in layout.items():
                    # relative to fields.h5's folder: the run directory may move
                    source = os.path.relpath(part_path(self.h5_path, process), self.h5_path.parent)
                    for k, block in enumerate(sorted(blocks, key=_block_key)):
                        where = file_block(block)
                        shape = tuple(s.stop - s.start for s in where) + components
                        virtual[where] = h5py.VirtualSource(
                            source, f"{group}/block_{k}/{name}", shape
                        )
                # a block that is not there reads as NaN, not as a plausible 0
                ds = g.create_virtual_dataset(name, virtual, fillvalue=np.nan)
                label_field(ds, name, d)
        return self._indexed(step, time)


def consolidate(h5_path: Path, out_path: Path) -> None:
    """A self-contained copy of ``h5_path`` at ``out_path``: every virtual dataset's data
    copied in (one dataset at a time in memory), every other object and attribute as it is.
    fields.xdmf names its file, so put the copy's name there (or name the copy fields.h5 in
    another folder) to open it in ParaView."""
    with h5py.File(h5_path, "r") as src, h5py.File(out_path, "w") as dst:
        for key, value in src.attrs.items():
            dst.attrs[key] = value

        def copy(name: str, item) -> None:
            if isinstance(item, h5py.Group):
                group = dst.require_group(name)
                for key, value in item.attrs.items():
                    group.attrs[key] = value
                return
            ds = dst.create_dataset(name, data=item[...])
            for key, value in item.attrs.items():
                ds.attrs[key] = value

        src.visititems(copy)
