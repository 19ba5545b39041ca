"""Versions checked across processes and against the compatibility matrix.

The matrix (data/compatibility.json) holds the pins of pyproject.toml and the combinations the
test suite passed on. Two checks, both on process 0 over every process's record
(``solver.preflight.versions.collect``):

- ``mismatches``: every process must run the same Python, packages, MPI library, CUDA stack and
  device kind and count (a node with another image breaks collectives in obscure ways);
- ``matrix_problems``: each version inside its pin, and the combination (platform, Python
  major.minor and the matrix's ``combination`` keys) equal to one tested entry.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

MATRIX = Path(__file__).resolve().parents[2] / "data" / "compatibility.json"
# fields of a process record that must be equal on every process
MUST_MATCH = ("python", "mpi_library", "platform", "device_kind", "local_devices", "cuda")


def load_matrix(path: Path = MATRIX) -> dict:
    """The matrix as plain data: {"combination": [...], "pins": {...}, "tested": [...]}."""
    return json.loads(path.read_text())


def _flatten(record: dict) -> dict[str, object]:
    out = {key: record.get(key) for key in MUST_MATCH}
    out.update({f"packages.{k}": v for k, v in record["packages"].items()})
    return out


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in ranks)


def mismatches(records: list[dict]) -> list[str]:
    """One line per field that differs across processes, naming each value's ranks and hosts,
    the majority value first."""
    lines = []
    flat = [_flatten(r) for r in records]
    for key in flat[0]:
        groups: dict[str, list[int]] = defaultdict(list)
        for record, values in zip(records, flat, strict=True):
            groups[repr(values[key])].append(record["rank"])
        if len(groups) == 1:
            continue
        hosts = {r["rank"]: r["host"] for r in records}
        ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[1]))
        parts = [
            f"{value} on {_ranks_text(ranks)} ({', '.join(sorted({hosts[r] for r in ranks}))})"
            for value, ranks in ordered
        ]
        lines.append(
            f"{key.removeprefix('packages.')} differs across ranks: " + " but ".join(parts)
        )
    return lines


def _inside(version: str, pin: str) -> bool:
    try:
        return SpecifierSet(pin).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def matrix_problems(record: dict, matrix: dict) -> tuple[list[str], str | None, str | None]:
    """(problems, untested, entry) for one process's record.

    problems: versions outside their pin (``jax 0.9.0 outside the pin >=0.10.0,<0.12``), and jax
    and jaxlib that differ. untested: a line saying which combination (platform, Python
    major.minor, the matrix's ``combination`` keys) equals no tested entry, else None. entry:
    the name of the tested entry it equals, else None.
    """
    versions = {"python": record["python"], **record["packages"]}
    problems = []
    for name, pin in matrix.get("pins", {}).items():
        version = versions.get(name)
        if version is not None and not _inside(version, pin):
            problems.append(f"{name} {version} outside the pin {pin}")
    jax_version, jaxlib_version = versions.get("jax"), versions.get("jaxlib")
    if jax_version and jaxlib_version and jax_version != jaxlib_version:
        problems.append(f"jax {jax_version} with jaxlib {jaxlib_version} (they must be equal)")
    keys = matrix.get("combination", [])
    python = ".".join(record["python"].split(".")[:2])
    for entry in matrix.get("tested", []):
        same = entry.get("platform") == record["platform"] and entry.get("python") == python
        if same and all(
            versions.get(k) is None or str(entry.get(k)) == versions.get(k) for k in keys
        ):
            return problems, None, entry.get("name", "?")
    combo = ", ".join(
        [f"platform {record['platform']}", f"python {python}"]
        + [f"{k} {versions.get(k)}" for k in keys if versions.get(k) is not None]
    )
    return problems, f"untested combination: {combo} (no [[tested]] entry in {MATRIX.name})", None
