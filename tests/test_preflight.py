"""`python -m solver.preflight` on one process and on fake devices, and its checks as units.

The one-process run without a GPU is what a laptop or a CI machine sees: it must pass within
PASS_WITHIN_S. Four fake CPU devices in one process run the same collectives, links and
numerical canary over a [2, 2] mesh as four MPI ranks would, cheaply, and catch an injected
corrupted shard and an injected slow link (SOLVER_PREFLIGHT_INJECT). The MPI and Slurm runs are
in tests/test_preflight_processes.py. Lustre cannot exist here: its striping display is checked
with a mounts file and a fake `lfs`, as tests/test_checkpoint_striping.py does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solver.preflight import EXIT_CANARY, EXIT_VERSIONS, inject
from solver.preflight.baseline import load_baseline, slow_links, slow_storage
from solver.preflight.compatibility import MATRIX, load_matrix, matrix_problems, mismatches
from solver.preflight.storage import striping

ROOT = Path(__file__).resolve().parent.parent
PASS_WITHIN_S = 30  # the limit for one process without a GPU
REPORT_KEYS = {"status", "exit_code", "elapsed_s", "job", "ranks", "checks", "problems",
               "warnings", "collectives", "links", "numerical", "storage"}  # fmt: skip


def _preflight(args: list[str], env_extra: dict | None = None, devices: int = 1):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env.pop(inject.ENV, None)
    env["JAX_PLATFORMS"] = "cpu"
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env.update(env_extra or {})
    command = [sys.executable, "-m", "solver.preflight", "--storage-mib", "8",
               "--message-mib", "0.25", "--repeats", "3", *args]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_one_process_without_gpu_passes_quickly(tmp_path: Path) -> None:
    start = time.monotonic()
    done = _preflight(["--out", str(tmp_path / "report"), f"checkpoint.dir={tmp_path}/ckpt"])
    wall = time.monotonic() - start
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert wall <= PASS_WITHIN_S, f"{wall:.1f} s > {PASS_WITHIN_S} s\n{output}"
    report = json.loads((tmp_path / "report" / "preflight.json").read_text())
    assert set(report) >= REPORT_KEYS, set(report)
    names = {c["name"]: c["status"] for c in report["checks"]}
    assert names == {"versions": "pass", "all-reduce": "pass", "numerical canary": "pass",
                     "storage": "pass"}, names  # fmt: skip
    # the stored checksum of this platform matched: a device computing wrong would not
    assert report["numerical"]["reference"]["stored"] == "match", report["numerical"]
    assert report["storage"]["ranks"][0]["ok"] and report["storage"]["ranks"][0]["write_mbps"] > 0
    assert re.search(r"result: PASS \(exit code 0", done.stdout), done.stdout
    assert not list((tmp_path / "ckpt").iterdir()), "the speed test left its file behind"


def test_fake_devices_catch_a_corrupted_shard_and_a_slow_link(tmp_path: Path) -> None:
    """Shard 2 flips one bit; the owner of shard 3 sleeps 0.3 s before each of its exchanges."""
    faults = {inject.ENV: "corrupt@2,delay@3=0.3"}
    done = _preflight(["--out", str(tmp_path), "domain.mesh=[2,2]", f"checkpoint.dir={tmp_path}"],
                      faults, devices=4)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_CANARY, output  # canary before slow
    report = json.loads((tmp_path / "preflight.json").read_text())
    shards = {s["shard"]: s["ok"] for s in report["numerical"]["shards"]}
    assert shards == {0: True, 1: True, 2: False, 3: True}, shards
    assert "computed shard 2 (cells [24:48) x [0:24))" in output, output
    slow = {(link["a"], link["b"]) for link in report["links"] if link["latency_us"] > 250_000}
    assert slow == {(1, 3), (2, 3)}, report["links"]
    assert "slow link 1<->3 (along x" in output and "slow link 2<->3 (along y" in output, output
    assert "slow link 0<->" not in output, output
    ring = {c["name"]: c for c in report["collectives"]}
    assert ring["all-reduce"]["ok"] and ring["ppermute ring"]["ok"], report["collectives"]


def test_bad_override_is_a_config_error(tmp_path: Path) -> None:
    done = _preflight(["--out", str(tmp_path), "domain.halo=carrier-pigeon"])
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: bad configuration: domain.halo")


# ------------------------------------------------------------------------- the matrix


def _pins_from_pyproject() -> dict[str, str]:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["mpi"]
    pins = {"python": project["requires-python"]}
    for requirement in requirements:
        name, spec = re.match(r"([A-Za-z0-9_.-]+)(.*)", requirement).groups()
        pins[name.lower()] = spec.strip()
    return pins


def test_matrix_pins_equal_pyproject() -> None:
    pins = _pins_from_pyproject()
    matrix = load_matrix()
    for name, pin in matrix["pins"].items():
        assert pins.get(name) == pin, f"{MATRIX.name}: {name} {pin} but pyproject.toml {pins}"
    tested = matrix["tested"][0]
    assert set(matrix["combination"]) <= set(tested), tested


def _record(rank: int = 0, **packages: str) -> dict:
    base = {"jax": "0.10.2", "jaxlib": "0.10.2", "mpi4jax": "0.9.1.post2", "mpi4py": "4.1.2",
            "orbax-checkpoint": "0.12.8", "h5py": "3.16.0", "numpy": "2.4.6"}  # fmt: skip
    return {"rank": rank, "host": f"node{rank // 2}", "python": "3.11.7",
            "packages": {**base, **packages}, "mpi_library": "Open MPI v4.1.4", "platform": "cpu",
            "device_kind": "cpu", "local_devices": 1, "cuda": None}  # fmt: skip


def test_matrix_accepts_the_tested_combination() -> None:
    assert matrix_problems(_record(), load_matrix()) == ([], None, "ci-cpu-debian12")


def test_matrix_rejects_pins_pairs_and_untested_combinations() -> None:
    matrix = load_matrix()
    problems, untested, entry = matrix_problems(_record(jax="0.9.0", jaxlib="0.9.0"), matrix)
    assert "jax 0.9.0 outside the pin >=0.10.0,<0.12" in problems, problems
    assert entry is None and untested.startswith("untested combination: platform cpu"), untested
    problems, _, _ = matrix_problems(_record(jaxlib="0.10.1"), matrix)
    assert problems == ["jax 0.10.2 with jaxlib 0.10.1 (they must be equal)"], problems
    problems, untested, _ = matrix_problems(_record(jax="0.10.1", jaxlib="0.10.1"), matrix)
    assert problems == [] and "jax 0.10.1, jaxlib 0.10.1" in untested, untested
    problems, _, _ = matrix_problems(_record(jax="0.12.1", jaxlib="0.12.1"), matrix)
    assert problems == ["jax 0.12.1 outside the pin >=0.10.0,<0.12",
                        "jaxlib 0.12.1 outside the pin >=0.10.0,<0.12"], problems  # fmt: skip


def test_mismatch_names_ranks_and_hosts() -> None:
    records = [_record(r) for r in range(4)]
    records[3]["packages"]["h5py"] = "3.11.0"
    records[2]["device_kind"] = "NVIDIA H100"
    lines = mismatches(records)
    assert lines == [
        "device_kind differs across ranks: 'cpu' on ranks 0,1,3 (node0, node1) but "
        "'NVIDIA H100' on rank 2 (node1)",
        "h5py differs across ranks: '3.16.0' on ranks 0,1,2 (node0, node1) but '3.11.0' on "
        "rank 3 (node1)",
    ], lines
    assert mismatches([_record(r) for r in range(3)]) == []


# ------------------------------------------------------------------------- limits, faults


def test_baseline_names_the_slow_link_and_storage() -> None:
    baseline = load_baseline()
    fast = {"a": 0, "b": 1, "axis": "x", "latency_us": 100.0, "bandwidth_mbps": 500.0,
            "hosts": "n0 - n0", "ok": True}  # fmt: skip
    slow = {**fast, "a": 1, "b": 3, "axis": "y", "latency_us": 2e5, "hosts": "n0 - n1"}
    problems, warnings = slow_links([fast, slow], "cpu", baseline)
    assert problems == ["slow link 1<->3 (along y, n0 - n1): latency 200000 us > 50000 us"]
    assert warnings == []
    problems, warnings = slow_links([slow], "tpu", baseline)
    assert problems == [] and "no link baseline for platform tpu" in warnings[0]
    storage = [{"rank": 2, "host": "n1", "write_mbps": 5.0, "read_mbps": 900.0, "path": "/x"}]
    assert slow_storage(storage, baseline) == [
        "slow storage on rank 2 (n1): write 5 MB/s < 20 MB/s in /x"
    ]


def test_fault_injection_parsing() -> None:
    assert inject.parse("") == inject.Faults()
    faults = inject.parse("version@1, corrupt@2,delay@3=0.5")
    assert (faults.version, faults.corrupt, faults.delay, faults.delay_s) == (1, 2, 3, 0.5)
    assert inject.parse("delay@0").delay_s == inject.DEFAULT_DELAY_S
    for bad in ("slow@1", "corrupt@x", "version@1=2", "corrupt"):
        with pytest.raises(ValueError, match=inject.ENV):
            inject.parse(bad)


def test_striping_shown_on_lustre(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mounts file declares tmp_path/lus Lustre; a fake `lfs` prints a layout."""
    lustre = tmp_path / "lus"
    lustre.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nmds@o2ib:/fs {os.path.realpath(lustre)} "
                      "lustre rw 0 0\n")  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lfs").write_text(
        '#!/bin/sh\n[ "$1 $2" = "getstripe -d" ] || exit 3\n'
        'echo "stripe_count:  4 stripe_size:   4194304 pattern:       raid0 stripe_offset: -1"\n'
    )
    (bin_dir / "lfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    shown = striping(lustre / "ckpt", mounts=mounts)
    assert shown["fstype"] == "lustre"
    assert shown["layout"].startswith("stripe_count: 4 stripe_size: 4194304"), shown
    other = striping(tmp_path / "plain", mounts=mounts)
    assert other == {"fstype": "ext4", "mount_point": "/", "layout": "not Lustre (ext4): no "
                     "striping"}  # fmt: skip


def test_exit_codes_are_distinct() -> None:
    from solver import app

    solver_codes = {app.EXIT_CONFIG, app.EXIT_DIVERGED, app.EXIT_OVERFLOW, app.EXIT_PREEMPTED,
                    app.EXIT_STOPPED}  # fmt: skip
    assert {EXIT_VERSIONS, EXIT_CANARY, 22}.isdisjoint(solver_codes | {0, 1})
