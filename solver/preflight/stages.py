"""The preflight's stages on every process, and process 0's judgement of each.

Every stage is collective: every process calls it in the same order. Process 0 turns what it
gathered into ``Check`` rows; the others return None.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax

from solver.distributed.canaries import allreduce_canary, link_canary, ring_canary
from solver.distributed.decomposition import choose_mesh
from solver.distributed.host_collectives import allgather_json, barrier
from solver.distributed.runtime import Runtime
from solver.preflight import report as reports
from solver.preflight.baseline import BASELINE, load_baseline, slow_links, slow_storage
from solver.preflight.compatibility import load_matrix, matrix_problems, mismatches
from solver.preflight.inject import Faults
from solver.preflight.numerical import canary_grid, run_canary
from solver.preflight.report import Check
from solver.preflight.storage import speed_test, striping
from solver.preflight.versions import collect

MIB = 1024 * 1024


def run_stages(runtime: Runtime, config, args, faults: Faults, checkpoint_dir: Path,
               started: float) -> dict | None:  # fmt: skip
    """Every stage; the report dict on process 0, None on the others."""
    rank = runtime.process_index
    root = runtime.is_root
    suffix = "+injected" if faults.version == rank else ""
    records = allgather_json(runtime, collect(rank, suffix))
    checks: list[Check] = []
    details: dict = {}
    mesh_spec = config.domain.mesh
    job = {
        "processes": runtime.process_count,
        "devices": runtime.device_count(),
        "platform": jax.devices()[0].platform,
        "halo": config.domain.halo,
        "mesh": mesh_spec if isinstance(mesh_spec, str) else list(mesh_spec),
        "launcher": runtime.launch.launcher,
        "lattice": config.fluid.lattice,
        "checkpoint_dir": str(checkpoint_dir),
    }
    if root:
        checks.append(_versions_check(records, args.allow_untested))
    go = runtime.broadcast_text("stop" if root and checks[0].status == "fail" else "go")
    if go == "stop":
        if not root:
            return None
        for name in ("collectives", "numerical canary", "storage"):
            checks.append(Check(name, "canary", "skip", "not run: versions differ"))
        return reports.build(job, records, checks, details, time.perf_counter() - started)

    baseline = load_baseline(args.baseline or BASELINE)
    message_bytes = int(args.message_mib * MIB)
    lattice_d = 3 if config.fluid.lattice.upper().startswith("D3") else 2
    shape = canary_grid(mesh_spec, lattice_d, runtime.device_count())
    decomposition = choose_mesh(mesh_spec, shape, runtime.device_count())
    seconds = {"versions": time.perf_counter() - started}
    mark = time.perf_counter()
    collectives = [allreduce_canary(runtime)]
    if runtime.device_count() > 1:
        collectives.append(ring_canary(runtime, message_bytes, args.repeats))
    links = link_canary(runtime, decomposition, message_bytes, args.repeats, faults.delay,
                        faults.delay_s)  # fmt: skip
    seconds["collectives_and_links"] = time.perf_counter() - mark
    mark = time.perf_counter()
    numerical = run_canary(runtime, mesh_spec, config.fluid.lattice, faults.corrupt)
    seconds["numerical"] = time.perf_counter() - mark
    mark = time.perf_counter()
    storage_records, layout = [], None
    if args.storage_mib > 0:
        barrier(runtime)
        mine = speed_test(checkpoint_dir, rank, args.storage_mib)
        storage_records = allgather_json(runtime, mine)
        layout = striping(checkpoint_dir) if root else None
    seconds["storage"] = time.perf_counter() - mark
    if not root:
        return None
    job["stage_seconds"] = {k: round(v, 2) for k, v in seconds.items()}

    hosts = _hosts_of_shards(records, decomposition.shards)
    link_dicts = [{**link.as_dict(), "hosts": f"{hosts[link.a]} - {hosts[link.b]}"}
                  for link in links]  # fmt: skip
    for c in collectives:
        summary = f"{c.devices} device(s), {c.time_us:.0f} us"
        if c.bandwidth_mbps is not None:
            summary += f", {c.bandwidth_mbps:.0f} MB/s per device"
        problems = [f"{c.name}: {c.detail}"] if not c.ok else []
        checks.append(Check(c.name, "canary", summary=summary, problems=problems).settle())
    checks += _link_checks(link_dicts, job["platform"], baseline)
    checks.append(_numerical_check(numerical))
    if args.storage_mib > 0:
        checks.append(_storage_check(storage_records, layout, baseline))
    details = {
        "collectives": [c.__dict__ for c in collectives],
        "links": link_dicts,
        "numerical": numerical,
        "storage": {
            "directory": str(checkpoint_dir),
            "striping": layout,
            "ranks": storage_records,
        },  # fmt: skip
    }
    return reports.build(job, records, checks, details, time.perf_counter() - started)


def _hosts_of_shards(records: list[dict], shards: int) -> dict[int, str]:
    """Shard -> host: one shard per process, or every shard on the one process."""
    if len(records) == 1:
        return dict.fromkeys(range(shards), records[0]["host"])
    return {r["rank"]: r["host"] for r in records}


def _versions_check(records: list[dict], allow_untested: bool) -> Check:
    matrix = load_matrix()
    check = Check("versions", "versions")
    check.problems += mismatches(records)
    entries = set()
    for record in records:
        problems, untested, entry = matrix_problems(record, matrix)
        where = f"rank {record['rank']} ({record['host']})"
        check.problems += [f"{where}: {p}" for p in problems]
        if untested:
            (check.warnings if allow_untested else check.problems).append(f"{where}: {untested}")
        entries.add(entry)
    check.problems = list(dict.fromkeys(check.problems))
    tested = ", ".join(sorted(e for e in entries if e)) or "none"
    check.summary = f"{len(records)} rank(s); tested combination: {tested}"
    if len(records) > 1 and not mismatches(records):
        check.summary = f"{len(records)} ranks equal; tested combination: {tested}"
    return check.settle()


def _link_checks(links: list[dict], platform: str, baseline: dict) -> list[Check]:
    problems, warnings = slow_links(links, platform, baseline)
    out = []
    for link in links:
        name = f"link {link['a']}<->{link['b']} ({link['axis']})"
        check = Check(name, "slow", summary=f"latency {link['latency_us']:.0f} us, bandwidth "
                      f"{link['bandwidth_mbps']:.0f} MB/s, {link['hosts']}")  # fmt: skip
        tag = f"slow link {link['a']}<->{link['b']} "
        check.problems = [p for p in problems if p.startswith(tag)]
        if not link["ok"]:
            check.kind = "canary"
            check.problems.insert(0, f"{name}: the data received differs from the data sent")
        check.warnings = list(warnings)
        out.append(check.settle())
    return out


def _numerical_check(result: dict) -> Check:
    shards = result["shards"]
    equal = sum(1 for s in shards if s["ok"])
    summary = (
        f"{result['lattice']} {'x'.join(map(str, result['shape']))}, {result['steps']} steps on "
        f"mesh {result['mesh']} ({result['backend']}): {equal}/{len(shards)} shard(s) equal the "
        f"1-device reference; stored checksum: {result['reference']['stored']}"
    )
    return Check("numerical canary", "canary", summary=summary, problems=result["problems"],
                 warnings=result["warnings"]).settle()  # fmt: skip


def _storage_check(records: list[dict], layout: dict | None, baseline: dict) -> Check:
    write = min(r["write_mbps"] for r in records)
    read = min(r["read_mbps"] for r in records)
    fs = layout["fstype"] if layout else "?"
    check = Check(
        "storage", "slow",
        summary=f"{len(records)} rank(s) x {records[0]['bytes'] // MIB} MiB: write >= "
        f"{write:.0f} MB/s, read >= {read:.0f} MB/s; {fs}",
    )  # fmt: skip
    check.problems = slow_storage(records, baseline)
    bad = [r for r in records if not r["ok"]]
    if bad:
        check.kind = "canary"
        check.problems += [f"storage on rank {r['rank']} ({r['host']}) read back other bytes "
                           f"than it wrote in {r['path']}" for r in bad]  # fmt: skip
    if layout and layout["fstype"] == "lustre":
        check.summary += f" ({layout['layout']})"
    return check.settle()
