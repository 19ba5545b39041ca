"""Each process builds only its block: the cases' lazy grid fields (``GridField``) computed on a
box equal the whole grid's slice there, bit for bit, and the boundary plan's global questions
(``any_cells``, ``linked_directions``) answered slab by slab equal the whole-grid answers.

Two-process runs that use these blocks are compared with one process in
tests/test_distributed_app.py (the cavity, both halo back ends) and
tests/test_distributed_equality.py; ``test_processes_build_only_their_blocks`` checks that an
MPI process never evaluates a field's whole grid.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from solver.api import compose_config
from solver.bench.setup_memory import result_records
from solver.fluid import grid_field
from solver.fluid.cases import build_case
from solver.fluid.grid_field import GridField, any_cells, linked_directions

CASES = {
    "taylor_green_2d": ["case=taylor_green", "case.resolution=12"],
    "taylor_green_3d": ["case=taylor_green", "fluid=d3q19", "case.resolution=9"],
    "beltrami": ["case=taylor_green", "fluid=d3q19", "case.resolution=9",
                 "case.variant=beltrami"],
    "brachet": ["case=taylor_green", "fluid=d3q27", "case.resolution=9", "case.variant=brachet"],
    "cavity": ["case=cavity", "case.resolution=14"],
    "poiseuille": ["case=poiseuille", "case.resolution=10"],
    "couette": ["case=couette", "case.resolution=10"],
    "duct": ["case=duct", "fluid=d3q19", "case.resolution=8"],
    "cylinder": ["case=cylinder", "case.resolution=8"],
    "cylinder_sponge": ["case=cylinder", "case.resolution=8", "case.sponge_length=0.5",
                        "case.inflow_period=0.5"],
    "geometry": ["case=geometry", "fluid=d3q19", "case.resolution=6"],
    "geometry_walls": ["case=geometry", "fluid=d3q19", "case.resolution=6", "case.walls=no_slip",
                       "case.mesh=sphere"],
    "geometry_trefoil": ["case=geometry", "fluid=d3q27", "case.resolution=7",
                         "case.walls=no_slip", "case.mesh=data/meshes/trefoil.obj",
                         "case.scale=0.5", "case.rotation=[10,20,30]", "case.reference_area=null"],
}  # fmt: skip
# fields a case still builds on the whole grid (none since the geometry case is per block too)
WHOLE_GRID: dict[str, set[str]] = {}
SETUP_FIELDS = ("solid", "wall_velocity", "wall_distance", "obstacle", "sponge")


def _fields(case) -> dict[str, object]:
    fields = {
        "density": case.density,
        "velocity": case.velocity,
        "velocity_gradient": case.velocity_gradient,
    }
    fields.update({name: getattr(case.setup, name) for name in SETUP_FIELDS})
    return {name: f for name, f in fields.items() if f is not None}


def _boxes(shape: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """Blocks of uneven 2- and 3-way splits of every axis, and single cells at the corners."""
    cuts = []
    for n in shape:
        two = [slice(0, n // 2), slice(n // 2, n)]
        three = [slice(0, n // 3), slice(n // 3, n - 2), slice(n - 2, n)]
        cuts.append(two + three + [slice(0, 1), slice(n - 1, n)])
    boxes = list(itertools.product(*cuts))
    return boxes[:: max(1, len(boxes) // 60)]  # about 60 boxes of every kind


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request):
    """(the case's config, whole-grid arrays of a build of it); each test builds its own lazy
    case from the config."""
    config = compose_config(["checkpoint=none", *CASES[request.param]])
    whole = {name: np.asarray(f) for name, f in _fields(build_case(config)).items()}
    return config, whole


def test_blocks_equal_whole_grid_slices(built):
    config, whole = built
    case = build_case(config)
    fields = _fields(case)
    lazy = [name for name, f in fields.items() if isinstance(f, GridField)]
    # every grid field of these cases is built per block (face arrays stay whole: small)
    assert set(fields) - set(lazy) == WHOLE_GRID.get(case.name, set())
    for name in lazy:
        field = fields[name]
        lead = (slice(None),) * len(field.lead)
        assert field.shape == whole[name].shape and field.dtype == whole[name].dtype, name
        for box in _boxes(case.setup.shape):
            block = field[lead + box]
            expected = whole[name][lead + box]
            assert block.dtype == expected.dtype, name
            assert np.array_equal(block, expected), f"{name} on {box} differs"
    assert [name for name in lazy if fields[name].built] == [], "evaluated on the whole grid"
    for name in lazy:  # an integer index, a step: NumPy's meaning
        assert np.array_equal(fields[name][..., 0], whole[name][..., 0]), name
        assert np.array_equal(fields[name][::2], whole[name][::2]), name


def test_slab_reductions_equal_whole_grid(built, monkeypatch):
    config, whole = built
    case = build_case(config)
    setup = case.setup
    monkeypatch.setattr(grid_field, "SLAB_CELLS", 7)  # many slabs, ghost rows across them
    for name in ("solid", "obstacle", "wall_velocity"):
        field = getattr(setup, name)
        if field is not None:
            assert any_cells(field) == bool(whole[name].any()), name
    if setup.solid is None:
        return

    def fresh(name: str) -> GridField:  # an unbuilt lazy copy of a field
        field = getattr(setup, name)
        if isinstance(field, GridField):
            return GridField(setup.shape, bool, field.box)
        return GridField(setup.shape, bool, lambda box: whole[name][box].copy())

    solid = fresh("solid")
    c = setup.lattice.c
    for name in ("solid", "obstacle"):
        if getattr(setup, name) is None:
            continue
        mask = fresh(name)
        slabbed = linked_directions(c, mask, solid)
        assert slabbed == linked_directions(c, whole[name], whole["solid"]), name
        assert not mask.built and not solid.built


def test_grid_field_behaves_as_its_array():
    values = np.arange(24.0).reshape(2, 3, 4)
    field = GridField((3, 4), np.float64, lambda box: values[(slice(None), *box)].copy(), (2,))
    assert np.array_equal(field[1, 1:, -1], values[1, 1:, -1]) and not field.built
    assert np.array_equal(field[:, 2], values[:, 2]) and not field.built
    assert field.any() and field.count_nonzero() == 23 and not field.built
    assert np.array_equal(-field, -values) and field.built  # operators: the whole grid
    assert field.sum() == values.sum() and np.array_equal(np.asarray(field, np.float32), values)
    with pytest.raises(ValueError, match="expected"):
        GridField((3, 4), np.float64, lambda box: np.zeros(2)).whole()


def test_processes_build_only_their_blocks():
    """Two MPI processes (halo mpi) build their model, state and one step of the cylinder
    (every kind of geometry field: walls, obstacle, link fractions, sponge, a perturbed
    initial velocity) without evaluating any grid field on the whole grid."""

    records = _setup_worker_records(
        ["case=cylinder", "case.resolution=6", "case.sponge_length=0.5", "domain.halo=mpi"]
    )
    for r in records:
        assert r["whole_fields"] == [], r


def _setup_worker_records(overrides: list[str]) -> list[dict]:
    """The RESULT records of ``solver.bench.setup_memory --worker`` on 2 MPI processes."""
    from mpi import mpirun
    from solver_cli import FAST_COMPILE

    args = ["-m", "solver.bench.setup_memory", "--worker", "--", *overrides,
            "output.fields=false", "output.png=false"]  # fmt: skip
    # what is built is checked, not the step's arithmetic: compiled without LLVM optimisation
    result = mpirun(2, args, timeout=300, extra_env={"XLA_FLAGS": FAST_COMPILE})
    assert result.returncode == 0, result.stderr[-3000:]
    records = result_records(result.stdout)
    assert sorted(r["rank"] for r in records) == [0, 1], result.stdout[-3000:]
    return records


def test_geometry_processes_build_only_their_blocks():
    """Two MPI processes (halo mpi) build the STL tunnel (mesh crossings, link fractions, the
    body's facts), place it and step once without evaluating any grid field on the whole grid;
    the blocks are split along z, the voxeliser's ray axis, through the body."""
    records = _setup_worker_records(
        ["case=geometry", "fluid=d3q19", "case.resolution=4", "domain.halo=mpi",
         "domain.mesh=[1,1,2]"]
    )  # fmt: skip
    for r in records:
        assert r["whole_fields"] == [], r
        assert r["local_shape"][2] * 2 == r["shape"][2], r


def test_blocks_are_placed_a_slab_at_a_time(built, monkeypatch):
    """``Distribution.put``'s host side: a lazy field's block assembled slab by slab and cast
    equals the cast slice of the whole array."""
    from solver.distributed import distribution

    config, whole = built
    case = build_case(config)
    monkeypatch.setattr(distribution, "SLAB_CELLS", 5)
    for name, field in _fields(case).items():
        if not isinstance(field, GridField):
            continue
        lead = (slice(None),) * len(field.lead)
        for box in _boxes(case.setup.shape)[::7]:
            block = distribution._host_block(field, lead + box, np.float32)
            expected = np.asarray(whole[name][lead + box], dtype=np.float32)
            assert block.flags.c_contiguous and np.array_equal(block, expected), (name, box)


def test_host_estimate_is_per_process_block():
    from solver.fluid.cases import GRID_SHAPES
    from solver.fluid.memory import estimate

    config = compose_config(["case=taylor_green", "fluid=d3q19", "case.resolution=256"])
    shape = GRID_SHAPES["taylor_green"](config)
    one = estimate(config, shape, (2, 1, 1))
    two = estimate(config, shape, (2, 1, 1), processes=2)
    assert two.host_case * 2 == one.host_case
    assert two.host_scratch < one.host_scratch / 2
    assert two.host_output == one.host_output  # process 0 gathers the final fields
    assert two.device == one.device
