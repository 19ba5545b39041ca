"""The validation cases, in the order they run: name -> function(Context) -> CaseResult."""

from __future__ import annotations

from collections.abc import Callable

from validation.cases import cavity, channels, taylor_green
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
}

__all__ = ["CASES"]
