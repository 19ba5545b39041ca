"""Native kernels: compiled once per machine with its own g++ (or nvcc), registered with XLA as
FFI targets (the fluid's kernels/native/lb_inplace.cc and, for GPUs, lb_gpu.cu; the bodies'
kernels/native/dem_spheres.cc).

A kernel is a C++ source compiled against the XLA FFI headers that ship with jaxlib, with the
machine's g++ (``-O3 -march=native -ffp-contract=off -fopenmp``), into a directory
``build/native/<hash>/`` under the repository (``SOLVER_NATIVE_DIR`` overrides the base). The
hash covers what the caller names (the source and anything generated into the build), the flags
and the jax and jaxlib versions, so a change to any of them builds a new library and a stale one
is never loaded. A library is built when first asked for, under a file lock of its own, so that
concurrent processes (pytest workers, MPI ranks) build it once while different libraries build
at the same time (one lock for all of them made `make native` one compiler at a time: 2:04
against 1:11 on two cores); it and the files generated beside it appear by atomic renames, so a
reader sees a whole file or none.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

import jax

REPOSITORY = Path(__file__).resolve().parents[1]
# -ffp-contract=off: no fused multiply-adds, so a formula rounds alike wherever it appears (the
# fluid's even and odd sweeps, vectorised and scalar loops) and chunks of any length compose;
# -fno-math-errno: sqrt without the errno branch that stops GCC vectorising a loop (same values)
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fopenmp", "-shared",
         "-fPIC", "-std=c++17")  # fmt: skip


class NativeBuildError(RuntimeError):
    """A native kernel could not be built (no compiler, or a compile error)."""


def build_directory(*parts: bytes, flags: Sequence[str] = FLAGS) -> Path:
    """The directory of the libraries built from ``parts`` (the source and what is generated
    for it) with ``flags`` and this jax/jaxlib: ``<base>/<16 hex digits>``."""
    root = os.environ.get("SOLVER_NATIVE_DIR")
    base = Path(root) if root else REPOSITORY / "build" / "native"
    digest = hashlib.sha256()
    for part in (*parts, " ".join(flags).encode(),
                 jax.lib.__version__.encode() if hasattr(jax.lib, "__version__") else b"",
                 jax.__version__.encode()):  # fmt: skip
        digest.update(part)
    return base / digest.hexdigest()[:16]


def compile_library(
    library: Path,
    source: Path,
    defines: Sequence[str] = (),
    generated: Mapping[str, str] | None = None,
    verbose: bool = False,
    compiler: str | None = None,
    flags: Sequence[str] = FLAGS,
) -> Path:
    """``library`` (a path inside a ``build_directory``), compiled from ``source`` with the
    macros ``defines`` ("NAME=VALUE") when missing; ``generated`` files (name -> text) are
    written beside it first and are on the include path. ``compiler`` (a name or path; None:
    $CXX or g++) is called with ``flags``."""
    if library.exists():
        return library
    name = compiler or os.environ.get("CXX", "g++")
    compiler = shutil.which(name)
    if compiler is None:
        raise NativeBuildError(f"no compiler {name!r} to build {source.name}")
    target_dir = library.parent
    target_dir.mkdir(parents=True, exist_ok=True)
    with open(library.with_name(library.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same library
        if library.exists():
            return library
        for name, text in (generated or {}).items():
            # the directory's hash covers these files, so any copy there is this text; another
            # library of the directory may be writing it now, hence a rename, not a rewrite
            path = target_dir / name
            if not path.exists():
                partial = path.with_name(f".{name}.{os.getpid()}.{threading.get_ident()}")
                partial.write_text(text)
                partial.replace(path)
        partial = library.with_suffix(".partial")
        command = [compiler, *flags, f"-I{jax.ffi.include_dir()}", f"-I{target_dir}",
                   *(f"-D{d}" for d in defines), str(source), "-o", str(partial)]  # fmt: skip
        if verbose:
            print(" ".join(command), file=sys.stderr)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeBuildError(f"building {source.name} failed:\n{done.stderr[-4000:]}")
        partial.rename(library)  # atomic: a reader sees the whole library or none
    return library


# OpenMP threads that wait at a barrier sleep instead of spinning, unless the environment says
# otherwise (libgomp reads it when it is first loaded, with the first native library): on a
# machine shared with other jobs a spinning thread holds the core that its late partner needs.
# Measured with the body kernel at 10^4 spheres under a load of 3 on 2 cores: 24 ms per step
# spinning, 1.9 ms sleeping (1.7 ms on one thread).
WAIT_POLICY = "passive"


@cache
def load(library: Path) -> ctypes.CDLL:
    """The loaded library (once per process)."""
    os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)
    return ctypes.CDLL(str(library))


@cache
def register(name: str, library: Path, symbol: str, platform: str = "cpu") -> str:
    """Register ``symbol`` of ``library`` as the FFI target ``name`` of ``platform`` ("cpu",
    or "CUDA" for a GPU kernel) once; the name."""
    handler = getattr(load(library), symbol)
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler), platform=platform)
    return name
