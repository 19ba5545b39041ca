"""The layering of docs/architecture.md, checked on the source (``ast``, nothing imported).

- ``kernels`` imports nothing from ``solver`` (pure array functions);
- only ``solver/distributed`` uses ``shard_map``, ``jax.distributed``, cross-process collectives
  (``multihost_utils``), ``mpi4py`` or ``mpi4jax``; and there every ``shard_map`` of a solver
  state is ``solver.distributed.manual``'s (zero-size leaves kept out: JAX 0.11.2 crashes on
  them), JAX's own only in that module and the canaries (single non-empty arrays);
- no import cycles among the modules of ``solver`` and ``kernels``, counting imports inside
  functions too (a cycle hidden in a function is still a cycle); imports under
  ``if TYPE_CHECKING:`` never run and are left out;
- the packages below the application (fluid, bodies, twin, distributed, checkpoint, output,
  kernels) never import the config composer ``solver.config``, except for type annotations:
  each package validates its own section, and errors come from ``solver.errors``.

import-linter was considered: its contracts see modules, not attributes such as
``jax.shard_map``, and it has no contract for cycles inside one package; this test is short.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION_ONLY = ("shard_map", "jax.distributed", "multihost_utils", "mpi4py", "mpi4jax")
BELOW_THE_APP = (
    "kernels",
    "solver.fluid",
    "solver.bodies",
    "solver.twin",
    "solver.distributed",
    "solver.checkpoint",
    "solver.output",
)


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("solver", "kernels"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` blocks."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(modules of the tree that ``name`` imports, every dotted name it imports or uses)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inside, used = set(), set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                used.add(alias.name)
                if alias.name in modules:
                    inside.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            subs = {f"{base}.{a.name}" for a in node.names}
            used.add(base)
            used.update(subs)
            found = subs & set(modules)
            inside |= found
            if len(found) < len(subs) and base in modules:
                inside.add(base)
        elif isinstance(node, ast.Attribute):
            used.add(ast.unparse(node))
    inside.discard(name)
    return inside, used


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


GRAPH = _graph()


def test_kernels_import_nothing_from_solver():
    bad = {
        name: sorted(m for m in inside if m.startswith("solver"))
        for name, (inside, _) in GRAPH.items()
        if name.startswith("kernels")
    }
    assert not {k: v for k, v in bad.items() if v}, f"kernels importing solver: {bad}"


def test_only_the_distribution_package_knows_processes_and_meshes():
    offenders = {}
    for name, (_, used) in GRAPH.items():
        if name.startswith("solver.distributed"):
            continue
        hits = sorted({u for u in used for word in DISTRIBUTION_ONLY if word in u})
        if hits:
            offenders[name] = hits
    assert not offenders, f"only solver/distributed may use {DISTRIBUTION_ONLY}: {offenders}"


def test_shard_maps_of_states_keep_zero_size_arrays_out():
    direct_allowed = {"solver.distributed.manual", "solver.distributed.canaries"}
    offenders = sorted(
        name
        for name, (_, used) in GRAPH.items()
        if "jax.shard_map" in used and name not in direct_allowed
    )
    assert not offenders, f"use solver.distributed.manual.shard_map in {offenders}"
    assert "jax.shard_map" in GRAPH["solver.distributed.manual"][1]  # the check sees calls


def test_no_import_cycles():
    graph = {name: inside for name, (inside, _) in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_lower_layers_do_not_import_the_config_composer():
    offenders = sorted(
        name
        for name, (inside, _) in GRAPH.items()
        if name.startswith(BELOW_THE_APP) and "solver.config" in inside
    )
    assert not offenders, f"import their own package's config instead: {offenders}"


def test_the_checker_sees_what_it_should():
    """The checks above could pass by seeing nothing: make sure they see real imports."""
    assert "solver.distributed.runtime" in GRAPH["solver.run"][0]
    assert "kernels.lattices" in GRAPH["solver.fluid.step"][0] | GRAPH["solver.fluid.setup"][0]
    assert any("shard_map" in u for u in GRAPH["solver.distributed.distribution"][1])
