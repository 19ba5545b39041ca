"""The validation cases, in the order they run: name -> function(Context) -> CaseResult."""

from __future__ import annotations

from collections.abc import Callable

from validation.cases import (
    bodies,
    cavity,
    channels,
    coupled,
    cylinder,
    geometry,
    kernels,
    operators,
    stability,
    storage,
    taylor_green,
    turbulence,
)
from validation.context import Context
from validation.report import CaseResult

CASES: dict[str, Callable[[Context], CaseResult]] = {
    "taylor_green": taylor_green.taylor_green,
    "taylor_green_3d": taylor_green.taylor_green_3d,
    "poiseuille": channels.poiseuille,
    "womersley": channels.womersley,
    "couette": channels.couette,
    "duct": channels.duct,
    "cavity_re100": cavity.cavity_re100,
    "cavity_re1000": cavity.cavity_re1000,
    "sphere_re100": geometry.sphere_re100,
    "schaefer_turek_2d1": cylinder.schaefer_turek_2d1,
    "schaefer_turek_2d2": cylinder.schaefer_turek_2d2,
    "schaefer_turek_2d3": cylinder.schaefer_turek_2d3,
    "taylor_green_re1600": turbulence.taylor_green_re1600,
    "stability": stability.stability,
    "operators": operators.operators,
    "storage": storage.storage,
    "kernels": kernels.kernels,
    "settling_sphere": coupled.settling_sphere,
    "sphere_array": coupled.sphere_array,
    "dkt": coupled.dkt,
    "dkt_2d": coupled.dkt_2d,
    "wet_bounce": coupled.wet_bounce,
    # rigid bodies last: they switch JAX to 64-bit mode for the rest of the process
    "projectile": bodies.projectile,
    "bounce": bodies.bounce,
    "incline": bodies.incline,
    "cradle": bodies.cradle,
    "tumbling": bodies.tumbling,
}

BODY_CASES = ("projectile", "bounce", "incline", "cradle", "tumbling")
# Too long for make test even in their fast variant (two resolved runs of a minute or more
# each): run by `python -m validation` and `make validate` only (dkt_2d too: two 2D runs of
# about a minute).
# 2D-3 needs its full 8 s at 20 cells per diameter or more (tau >= 0.535); the Re = 1600
# vortex compiles a D3Q27 KBC program (its energy series is tested in tests/test_cases_run.py).
# operators reruns seven fluid cases with three operators (its override rewriting is tested
# in tests/test_validation_fast.py; the operators themselves in test_kernels_collision_robust).
# storage reruns the same seven cases with three storage precisions (its override rewriting
# and the stored form are tested in tests/test_storage.py).
# kernels reruns six of them with the XLA step and the native kernel (the kernel's equality
# with the XLA step is tested in tests/test_native_kernel.py).
# sphere_re100's fast variant is two 3D tunnel runs of a minute each (tests/test_geometry.py
# checks the STL-vs-exact agreement on a small grid in make test).
FULL_ONLY = (
    "dkt",
    "dkt_2d",
    "wet_bounce",
    "schaefer_turek_2d3",
    "taylor_green_re1600",
    "sphere_re100",
    "stability",
    "operators",
    "storage",
    "kernels",
)

__all__ = ["BODY_CASES", "CASES", "FULL_ONLY"]
