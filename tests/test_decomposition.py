"""Mesh choice and launcher detection: pure functions, no devices."""

from __future__ import annotations

import pytest

from solver.distributed.decomposition import Decomposition, choose_mesh
from solver.distributed.runtime import launch_environment
from solver.errors import ConfigError


@pytest.mark.parametrize(
    ("spec", "shape", "devices", "mesh"),
    [
        ("auto", (440, 84), 1, (1, 1)),
        ("auto", (64, 64, 64), 8, (4, 2, 1)),  # same cut area as [2,2,2], fewer neighbours
        ("auto", (64, 64, 64), 64, (4, 4, 4)),
        ("auto", (512, 16), 4, (4, 1)),  # a long channel: slabs across the short side
        ("slab", (64, 64, 64), 8, (8, 1, 1)),
        ("pencil", (64, 64, 64), 8, (4, 2, 1)),
        ("block", (64, 64, 64), 8, (2, 2, 2)),
        ("single", (64, 64), 8, (1, 1)),
        ((2, 1), (16, 1), 8, (2, 1)),  # an unsplit axis may hold a single cell
        ("auto", (1, 10), 2, (1, 2)),
    ],
)
def test_choose_mesh(spec, shape, devices, mesh):
    assert choose_mesh(spec, shape, devices).mesh == mesh


def test_auto_minimises_halo_surface():
    shape = (96, 48, 24)
    chosen = choose_mesh("auto", shape, 8)
    for m in [(8, 1, 1), (4, 2, 1), (2, 2, 2), (2, 4, 1), (1, 2, 4)]:
        assert chosen.halo_cells() <= Decomposition(shape, m).halo_cells()


@pytest.mark.parametrize(
    ("spec", "shape", "devices", "words"),
    [
        ((3, 1), (16, 16), 8, ["16 cells along x do not divide into 3 shards"]),
        ((4, 4), (16, 16), 8, ["needs 16 devices but 8 are available"]),
        ((8, 1), (8, 8), 8, ["blocks of 1 cell"]),
        ((2, 2, 2), (16, 16), 8, ["2 integers"]),
        ("cubes", (16, 16), 8, ["auto, single, slab, pencil, block"]),
        ("auto", (7, 7), 4, ["no split of 4 devices"]),
    ],
)
def test_bad_mesh(spec, shape, devices, words):
    with pytest.raises(ConfigError) as err:
        choose_mesh(spec, shape, devices)
    message = str(err.value)
    assert message.startswith("domain.mesh") and "\n" not in message
    for word in words:
        assert word in message


def test_blocks_tile_the_grid():
    dec = Decomposition((12, 8, 6), (3, 2, 1))
    covered = set()
    for rank in range(dec.shards):
        assert dec.rank(dec.coords(rank)) == rank
        block = dec.block(rank)
        cells = {
            (i, j, k) for i in range(12)[block[0]] for j in range(8)[block[1]] for k in range(6)
        }
        assert not covered & cells
        covered |= cells
    assert len(covered) == 12 * 8 * 6


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ("none", 1, 0, 0)),
        (
            {
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            },
            ("mpirun", 4, 3, 1),
        ),
        (
            {
                "SLURM_STEP_ID": "0",
                "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_PROCID": "1",
                "SLURM_LOCALID": "1",
            },
            ("srun", 2, 1, 1),
        ),
        # the batch script of a 2-task job is one process (no job step)
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_PROCID": "0"}, ("none", 1, 0, 0)),
    ],
)
def test_launch_environment(env, expected):
    got = launch_environment(env)
    assert (got.launcher, got.processes, got.rank, got.local_rank) == expected
