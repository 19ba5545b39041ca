"""The preflight's findings: checks with a status, the JSON report and the human table."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from solver.preflight import EXIT_CODES, EXIT_OK

STATUSES = ("pass", "warn", "fail", "skip")


@dataclass
class Check:
    """One line of the table.

    Attributes:
        name: what was checked ("versions", "all-reduce", "link 0<->1", ...).
        kind: which exit code a failure maps to: "versions", "canary" or "slow".
        status: one of STATUSES.
        summary: one line of numbers for the table.
        problems: why it failed, one line each (naming ranks, hosts, links).
        warnings: what to know although it passed.
    """

    name: str
    kind: str
    status: str = "pass"
    summary: str = ""
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def settle(self) -> Check:
        """Status from the problems and warnings (a skipped check stays skipped)."""
        if self.status != "skip":
            self.status = "fail" if self.problems else "warn" if self.warnings else "pass"
        return self


def exit_code(checks: list[Check]) -> int:
    """The code of the first failing kind in the order versions, canary, slow; else 0."""
    failed = {c.kind for c in checks if c.status == "fail"}
    return next((code for kind, code in EXIT_CODES.items() if kind in failed), EXIT_OK)


def build(job: dict, ranks: list[dict], checks: list[Check], details: dict, elapsed_s: float):
    """The JSON report (a dict). Keys: status, exit_code, elapsed_s, job, ranks, checks,
    problems, warnings, and the details (collectives, links, numerical, storage)."""
    code = exit_code(checks)
    return {
        "status": "pass" if code == EXIT_OK else "fail",
        "exit_code": code,
        "elapsed_s": round(elapsed_s, 3),
        "job": job,
        "ranks": ranks,
        "checks": [asdict(c) for c in checks],
        "problems": [p for c in checks for p in c.problems],
        "warnings": [w for c in checks for w in c.warnings],
        **details,
    }


def _memory(record: dict) -> str:
    size = record.get("device_memory_bytes") or record.get("host_memory_bytes")
    where = "dev" if record.get("device_memory_bytes") else "host"
    return f"{size / 2**30:.1f} GiB {where}" if size else "?"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(header, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return lines


def format_table(report: dict) -> str:
    """The human-readable report: job line, one row per rank, one row per check, the problems
    and warnings, and the result with its exit code."""
    job = report["job"]
    lines = [
        f"preflight: {job['processes']} process(es), {job['devices']} {job['platform']} "
        f"device(s), mesh {job['mesh']} (halo {job['halo']}), launcher {job['launcher']}",
        "",
    ]
    header = ["rank", "host", "python", "jax", "jaxlib", "mpi4jax", "mpi4py", "orbax", "h5py",
              "MPI", "device", "memory"]  # fmt: skip
    rows = []
    for r in report["ranks"]:
        p = r["packages"]
        rows.append([
            str(r["rank"]), r["host"], r["python"], p.get("jax") or "-", p.get("jaxlib") or "-",
            p.get("mpi4jax") or "-", p.get("mpi4py") or "-", p.get("orbax-checkpoint") or "-",
            p.get("h5py") or "-", r.get("mpi_library") or "-",
            f"{r['local_devices']}x {r['device_kind']}", _memory(r),
        ])  # fmt: skip
        if r.get("cuda"):
            cuda = r["cuda"]
            rows[-1][10] += " (" + ", ".join(f"{k} {v}" for k, v in cuda.items() if v) + ")"
    lines += _table(header, rows) + [""]
    checks = [[c["name"], c["status"].upper(), c["summary"]] for c in report["checks"]]
    lines += _table(["check", "status", "detail"], checks)
    if report["problems"]:
        lines += ["", "problems:"] + [f"  - {p}" for p in report["problems"]]
    if report["warnings"]:
        lines += ["", "warnings:"] + [f"  - {w}" for w in report["warnings"]]
    lines += ["", f"result: {report['status'].upper()} (exit code {report['exit_code']}, "
              f"{report['elapsed_s']:.1f} s)"]  # fmt: skip
    return "\n".join(lines)


def write(report: dict, directory: Path) -> tuple[Path, Path]:
    """preflight.json and preflight.txt in ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, text_path = directory / "preflight.json", directory / "preflight.txt"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    text_path.write_text(format_table(report) + "\n")
    return json_path, text_path
