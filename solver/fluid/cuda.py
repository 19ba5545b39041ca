"""The CUDA kernel (kernels/native/lb_gpu.cu, ``fluid.kernel=cuda``): built once per machine
with nvcc, registered with XLA as an FFI target of the CUDA platform.

One source, two builds. On a GPU the library is compiled by nvcc (``-O3 --fmad=false
--extended-lambda``, for the GPU's own architecture: ``sm_<major><minor>`` from JAX's device,
``SOLVER_CUDA_ARCH`` overrides, ``sm_90`` where no GPU is visible); the CUDA runtime is
linked statically (nvcc's default), so the library needs only the driver that JAX uses. On
the CPU back end the same source is compiled by g++ as the kernel's emulation (the per-cell
and per-link functions in loops instead of launches), registered for the CPU: the test suite
checks the GPU kernel's arithmetic, indexing and wall rules against the XLA step and the CPU
kernel without a GPU. Both builds land in ``build/native/<hash>/`` like the CPU kernel's
(solver/native_build.py: the hash covers the sources, the lattice tables, the flags, the
target architecture and the jax version; built under a file lock when first asked for).
"""

from __future__ import annotations

import os
import shutil
import sys
from functools import cache
from pathlib import Path

import jax
import numpy as np

from kernels.lattices import Lattice
from solver.fluid.native import TYPES, lattice_tables
from solver.native_build import FLAGS, NativeBuildError, build_directory, compile_library
from solver.native_build import register as register_target

__all__ = ["NativeBuildError", "build", "cuda_arch", "nvcc", "target_name"]

SOURCE = Path(__file__).resolve().parents[2] / "kernels" / "native" / "lb_gpu.cu"
INCLUDED = (SOURCE.parent / "lb_cell.h", SOURCE.parent / "lb_chunk_args.h")
# no contraction (the CPU kernel's -ffp-contract=off: both store the same bits); IEEE division
# and square root are nvcc's defaults; the FFI headers' harmless warnings silenced
NVCC_FLAGS = ("-O3", "-std=c++17", "--fmad=false", "--extended-lambda", "-shared",
              "-Xcompiler", "-fPIC", "-Xcompiler", "-Wno-return-type",
              "-diag-suppress", "940,2473")  # fmt: skip
# the emulation: the CPU kernel's flags, the .cu read as C++
EMULATION_FLAGS = (*FLAGS, "-x", "c++")
# threads per block along z: a first guess for a memory-bound stencil (gpu-check sweeps it)
BLOCK = 128


def nvcc() -> str | None:
    """The nvcc to build with ($NVCC, else on the PATH, else CUDA's default prefix), or None."""
    for name in (os.environ.get("NVCC"), "nvcc", "/usr/local/cuda/bin/nvcc"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def cuda_arch() -> str:
    """The architecture to compile for: $SOLVER_CUDA_ARCH, else the first GPU's compute
    capability as ``sm_XY``, else ``sm_90`` (Hopper: H100, H200)."""
    if os.environ.get("SOLVER_CUDA_ARCH"):
        return os.environ["SOLVER_CUDA_ARCH"]
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    capability = getattr(gpus[0], "compute_capability", None) if gpus else None
    return "sm_" + str(capability).replace(".", "") if capability else "sm_90"


def _flags(emulate: bool) -> tuple[str, ...]:
    return EMULATION_FLAGS if emulate else (*NVCC_FLAGS, f"-arch={cuda_arch()}")


def build(lattice: str, storage: str, emulate: bool, verbose: bool = False) -> Path:
    """Path of the library for ``lattice`` (a name) and the populations' ``storage`` dtype
    (float32, float64, or float16 with float32 compute): the CUDA build, or with ``emulate``
    its CPU emulation; built first when missing.

    Raises:
        NativeBuildError: no nvcc (CUDA build) or g++ (emulation), or a compile error.
    """
    storage = np.dtype(storage).name
    flags = _flags(emulate)
    directory = build_directory(
        SOURCE.read_bytes(), *(p.read_bytes() for p in INCLUDED), lattice_tables().encode(),
        flags=flags,
    )  # fmt: skip
    kind = "emulated" if emulate else "cuda"
    library = directory / f"liblb_gpu_{kind}_{lattice}_{storage}.so"
    defines = (f"LB_LATTICE={lattice}", f"LB_STORAGE={TYPES[storage][0]}",
               f"LB_TYPE={TYPES[storage][1]}")  # fmt: skip
    compiler = None if emulate else nvcc()
    if not emulate and compiler is None:
        raise NativeBuildError("no nvcc ($NVCC or on the PATH) to build the CUDA kernel")
    generated = {"lattices.inc": lattice_tables()}
    return compile_library(library, SOURCE, defines, generated, verbose, compiler, flags)


@cache
def target_name(lattice: Lattice, storage: np.dtype | str, emulate: bool | None = None) -> str:
    """Register the handler LbGpuChunk for ``lattice`` and the ``storage`` dtype once; its
    name. ``emulate`` None: the emulation on the CPU back end, the CUDA build otherwise."""
    storage = np.dtype(storage).name
    if emulate is None:
        emulate = jax.default_backend() == "cpu"
    kind = "emulated" if emulate else "cuda"
    name = f"solver_lb_gpu_{kind}_{lattice.name}_{storage}"
    library = build(lattice.name, storage, emulate)
    return register_target(name, library, "LbGpuChunk", "cpu" if emulate else "CUDA")


def build_all(names: list[str], emulate: bool = False) -> list[Path]:
    """The libraries named "LATTICE:STORAGE" (storage default float32), built on all cores."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(n.partition(":")[0], n.partition(":")[2] or "float32") for n in names]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(lambda job: build(*job, emulate, verbose=True), jobs))


if __name__ == "__main__":  # python -m solver.fluid.cuda [--emulate] LATTICE:STORAGE ...
    for path in build_all([a for a in sys.argv[1:] if a != "--emulate"] or ["D3Q19:float32"],
                          "--emulate" in sys.argv):  # fmt: skip
        print(path)
