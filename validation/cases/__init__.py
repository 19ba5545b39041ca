"""The validation cases, in the order they run: name -> function(Context) -> CaseResult."""

from __future__ import annotations

from collections.abc import Callable

from validation.cases import bodies, cavity, channels, coupled, taylor_green
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
    "settling_sphere": coupled.settling_sphere,
    "sphere_array": coupled.sphere_array,
    "dkt": coupled.dkt,
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
# each): run by `python -m validation` and `make validate` only.
FULL_ONLY = ("dkt", "wet_bounce")

__all__ = ["BODY_CASES", "CASES", "FULL_ONLY"]
