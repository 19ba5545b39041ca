"""Process start-up: how this run was launched and the runtime that connects the processes.

Launchers are recognised from their environment: Open MPI's ``mpirun`` (OMPI_COMM_WORLD_*) and
a Slurm job step started by ``srun`` (SLURM_STEP_ID with SLURM_STEP_NUM_TASKS; the batch
script itself is one process). One process owns one device: on GPUs the process keeps the GPU
of its local rank (or the one GPU Slurm left visible), set before JAX starts its backend.

- ``domain.halo=xla`` with several processes: ``jax.distributed.initialize()`` (it detects
  Slurm and Open MPI by itself), with gloo collectives on CPUs.
- ``domain.halo=mpi``: MPI (mpi4py) connects the processes for the halos and this run gets its
  own clone of COMM_WORLD, so its messages never mix with a caller's. JAX's runtime is started
  as well (coordinator address from rank 0 by MPI broadcast), only so that checkpoints can be
  written as one global array with every process writing its own block; no device collective
  goes through it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from solver.errors import ConfigError

log = logging.getLogger("solver")
HALOS = ("xla", "mpi")


@dataclass(frozen=True)
class LaunchEnvironment:
    """What the launcher told this process.

    Attributes:
        launcher: "mpirun", "srun" or "none".
        processes: processes in the job step.
        rank: this process's index among them.
        local_rank: its index among the processes on its node.
    """

    launcher: str
    processes: int
    rank: int
    local_rank: int


def launch_environment(env: dict | None = None) -> LaunchEnvironment:
    """Read the launcher's variables (``env`` defaults to os.environ)."""
    env = os.environ if env is None else env
    if "OMPI_COMM_WORLD_SIZE" in env:
        return LaunchEnvironment(
            "mpirun",
            int(env["OMPI_COMM_WORLD_SIZE"]),
            int(env.get("OMPI_COMM_WORLD_RANK", 0)),
            int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)),
        )
    if "SLURM_STEP_ID" in env and "SLURM_STEP_NUM_TASKS" in env:
        return LaunchEnvironment(
            "srun",
            int(env["SLURM_STEP_NUM_TASKS"]),
            int(env.get("SLURM_PROCID", 0)),
            int(env.get("SLURM_LOCALID", 0)),
        )
    return LaunchEnvironment("none", 1, 0, 0)


@dataclass
class Runtime:
    """The started runtime.

    Attributes:
        halo: "xla" or "mpi".
        launch: the launcher's view.
        comm: the run's MPI communicator (mpi back end), else None.
    """

    halo: str
    launch: LaunchEnvironment
    comm: Any = None

    @property
    def process_index(self) -> int:
        if self.comm is not None:
            return self.comm.Get_rank()
        import jax

        return jax.process_index()

    @property
    def process_count(self) -> int:
        if self.comm is not None:
            return self.comm.Get_size()
        import jax

        return jax.process_count()

    @property
    def is_root(self) -> bool:
        return self.process_index == 0

    def device_count(self) -> int:
        """Devices the mesh may use: all of them (xla) or one per MPI process (mpi)."""
        import jax

        if self.comm is not None:
            return self.comm.Get_size()
        return jax.device_count()

    def shutdown(self) -> None:
        """End the JAX distributed runtime this started (gloo/jax.distributed); nothing under
        MPI (mpi4py finalises at exit) or on a single process."""
        if self.comm is None and self.process_count > 1:
            import jax

            jax.distributed.shutdown()

    def broadcast_text(self, text: str) -> str:
        """Process 0's ``text`` on every process (e.g. the output folder)."""
        if self.process_count == 1:
            return text
        if self.comm is not None:
            return self.comm.bcast(text, root=0)
        import numpy as np
        from jax.experimental import multihost_utils

        data = np.frombuffer(text.encode().ljust(4096, b"\0"), dtype=np.uint8)
        out = np.asarray(multihost_utils.broadcast_one_to_all(data))
        return bytes(out).rstrip(b"\0").decode()


_STARTED: dict[str, Runtime] = {}


def start(halo: str, env: dict | None = None) -> Runtime:
    """Start (once per process) the runtime that ``halo`` needs and check the set-up.

    Raises:
        ConfigError: an unknown back end, a launcher and MPI that disagree on the process count
            (e.g. ``srun`` without ``--mpi=pmix``), or a process that owns more than one device
            or none.
    """
    if halo not in HALOS:
        raise ConfigError("domain.halo", halo, " or ".join(HALOS))
    if halo in _STARTED:
        return _STARTED[halo]
    if _STARTED:
        other = next(iter(_STARTED))
        raise ConfigError(
            "domain.halo", halo, f"{other} (this process already started the {other} runtime)"
        )
    launch = launch_environment(env)
    gpu = _gpu_index(launch)
    comm = None
    if halo == "mpi":
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        if launch.processes > 1 and world.Get_size() != launch.processes:
            raise ConfigError(
                "domain.halo",
                "mpi",
                f"an MPI job of {launch.processes} processes",
                hint=f"{launch.launcher} started {launch.processes} processes but MPI sees "
                f"{world.Get_size()} (under Slurm use srun --mpi=pmix)",
            )
        comm = world.Clone()
        import jax

        if gpu is not None:
            jax.config.update("jax_cuda_visible_devices", str(gpu))
        if comm.Get_size() > 1:
            _initialize_jax_over_mpi(comm, gpu)
    elif launch.processes > 1:
        import jax

        if gpu is None:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # without local_device_ids JAX would pick the local rank's GPU itself, which is wrong
        # when Slurm already left a single GPU visible
        jax.distributed.initialize(local_device_ids=None if gpu is None else [gpu])
    runtime = Runtime(halo, launch, comm)
    import jax

    check_granted_gpus(os.environ if env is None else env, jax.default_backend())
    if runtime.process_count > 1:
        _check_one_device_per_process(runtime)
    _STARTED[halo] = runtime
    log.debug("runtime %s: process %d of %d", halo, runtime.process_index, runtime.process_count)
    return runtime


def _initialize_jax_over_mpi(comm, gpu: int | None) -> None:
    """``jax.distributed.initialize`` with rank 0's host and a free port sent over MPI, so it
    works under any MPI launcher (JAX's own detection knows only some)."""
    import socket

    import jax

    address = None
    if comm.Get_rank() == 0:
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        address = f"{socket.gethostname()}:{port}"
    address = comm.bcast(address, root=0)
    if gpu is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=comm.Get_size(),
        process_id=comm.Get_rank(),
        local_device_ids=None if gpu is None else [gpu],
    )


def _gpu_plugin_present() -> bool:
    if os.environ.get("JAX_PLATFORMS", "").strip() == "cpu":
        return False
    return any(
        importlib.util.find_spec(name) is not None
        for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin")
    )


def _gpu_index(launch: LaunchEnvironment) -> int | None:
    """The GPU this process keeps, as an index into the GPUs it can see; None on CPUs or alone.

    Slurm's --gpus-per-task=1 already leaves one visible GPU (index 0); with a node-wide list
    the process takes the one at its local rank.
    """
    if launch.processes == 1 or not _gpu_plugin_present():
        return None
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if len(visible) == 1:
        return 0
    if visible and launch.local_rank >= len(visible):
        raise ConfigError(
            "processes per node",
            launch.local_rank + 1,
            f"<= {len(visible)} (the GPUs visible on this node)",
            hint="launch one task per GPU",
        )
    return launch.local_rank


def granted_gpus(env: dict) -> int:
    """GPUs Slurm granted this job on this node (0 outside Slurm or without GPUs)."""
    if "SLURM_JOB_ID" not in env:
        return 0
    on_node = env.get("SLURM_GPUS_ON_NODE", "").strip()
    if on_node.isdigit():
        return int(on_node)
    listed = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS") or ""
    return len([g for g in listed.split(",") if g.strip()])


def check_granted_gpus(env: dict, backend: str) -> None:
    """Stop when Slurm granted GPUs but JAX runs on another back end.

    Without a CUDA jaxlib JAX silently falls back to the CPUs (and, with several processes, to
    gloo collectives): a GPU job would run hundreds of times slower and never say why.
    ``JAX_PLATFORMS=cpu`` (what the launch templates set for ``SOLVER_GPUS_PER_NODE=0``) asks
    for the CPUs on purpose and is respected.

    Raises:
        ConfigError: GPUs granted, ``backend`` (``jax.default_backend()``) not ``gpu``.
    """
    gpus = granted_gpus(env)
    if gpus == 0 or backend in ("gpu", "cuda", "rocm"):
        return
    if env.get("JAX_PLATFORMS", "").strip().lower() == "cpu":
        return
    raise ConfigError(
        "JAX back end",
        backend,
        f"gpu (Slurm granted {gpus} GPU(s) on this node)",
        hint="install a CUDA jaxlib (make gpu-install, i.e. pip install -e '.[gpu]'), or set "
        "JAX_PLATFORMS=cpu to run on the CPUs on purpose",
    )


def _check_one_device_per_process(runtime: Runtime) -> None:
    import jax

    local = jax.local_device_count()
    if local != 1:
        raise ConfigError(
            "devices per process",
            local,
            "1 in a multi-process run (one process per device)",
            hint="launch one task per device; on CPUs do not force a host device count "
            "(XLA_FLAGS --xla_force_host_platform_device_count) with several processes",
        )


def mpi_library() -> str | None:
    """The MPI library mpi4py is built on (first part of MPI_Get_library_version), None if
    mpi4py is absent. MPI is not initialised for this: the call is allowed before MPI_Init."""
    if "mpi4py.MPI" not in sys.modules:
        try:
            import mpi4py
        except ImportError:
            return None
        mpi4py.rc.initialize = False  # nothing else in this process uses MPI (halo=xla)
        mpi4py.rc.finalize = False
    from mpi4py import MPI

    text = MPI.Get_library_version().strip().splitlines()[0]
    return text.split(", package")[0].strip()
