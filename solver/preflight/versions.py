"""What one process runs on: host, Python, packages, MPI library, CUDA stack and devices.

``collect()`` is called on every process after the runtime started (the devices are known then);
the records are gathered on process 0 and checked by ``solver.preflight.compatibility``.
Nothing here reads environment variables or credentials: only versions, names and sizes.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess

import jax

from solver.distributed.runtime import mpi_library

# distribution names as pip knows them; the report uses them as keys
PACKAGES = ("jax", "jaxlib", "mpi4jax", "mpi4py", "orbax-checkpoint", "h5py", "numpy")
# pip packages that carry the CUDA libraries JAX uses (CUDA 12 and 13 wheels)
CUDA_WHEELS = {
    "cudnn": ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13"),
    "nccl": ("nvidia-nccl-cu12", "nvidia-nccl-cu13"),
    "cuda_runtime": ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13"),
}
NVIDIA_SMI_TIMEOUT_S = 10


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name``, None if it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _host_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _driver_version() -> str | None:
    """The NVIDIA driver version (nvidia-smi, else /proc/driver/nvidia/version)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False,
        )  # fmt: skip
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            words = f.readline().split()
        return next((w for w in words if w[:1].isdigit() and "." in w), None)
    except OSError:
        return None


def cuda_stack() -> dict[str, str | None]:
    """CUDA runtime, cuDNN, NCCL and driver versions (GPU processes only).

    From JAX's own CUDA query module where it offers the function, else from the pip wheels
    that carry the libraries. Not checked on a real GPU here (this machine has none).
    """
    out: dict[str, str | None] = {}
    try:
        from jax._src.lib import cuda_versions
    except ImportError:
        cuda_versions = None
    for key, function in (
        ("cuda_runtime", "cuda_runtime_get_version"),
        ("cudnn", "cudnn_get_version"),
    ):
        query = getattr(cuda_versions, function, None)
        try:
            out[key] = str(query()) if query is not None else None
        except Exception:  # a query that fails must not stop the report  # noqa: BLE001
            out[key] = None
    for key, wheels in CUDA_WHEELS.items():
        if out.get(key) is None:
            out[key] = next((v for v in map(package_version, wheels) if v), None)
    out["driver"] = _driver_version()
    return out


def collect(rank: int, jax_version_suffix: str = "") -> dict:
    """This process's record: host, Python, packages, MPI, devices (kind, count, memory).

    Args:
        rank: this process's index in the job.
        jax_version_suffix: test-only, appended to the jax version (inject.py).

    Memory is in bytes: ``device_memory_bytes`` from the device's allocator limit (GPU), None on
    CPUs; ``host_memory_bytes`` from /proc/meminfo.
    """
    packages = {name: package_version(name) for name in PACKAGES}
    if jax_version_suffix and packages["jax"]:
        packages["jax"] += jax_version_suffix
    local = jax.local_devices()
    device = local[0]
    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # CPU back ends may not implement it  # noqa: BLE001
        stats = None
    record = {
        "rank": rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "packages": packages,
        "mpi_library": mpi_library(),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "local_devices": len(local),
        "device_memory_bytes": (stats or {}).get("bytes_limit"),
        "host_memory_bytes": _host_memory_bytes(),
        "cuda": cuda_stack() if device.platform == "gpu" else None,
    }
    return record
