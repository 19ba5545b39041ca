"""Typed, validated run configuration built from Hydra's composed config.

This is the only module that reads Hydra/OmegaConf objects. ``load(cfg)`` turns the composed
``DictConfig`` into frozen dataclasses before anything is traced; each package validates its own
section (``solver.fluid.config``, ``solver.bodies.config``, ``solver.output.config``,
``solver.distributed.config``, ``solver.checkpoint.config``, ``solver.twin.config``,
``solver.telemetry.config``) and this module composes them and checks what crosses sections. A
bad value raises ``ConfigError`` whose message is one line naming the key, the value and the
allowed range. Checks that need the unit conversion (tau, Mach, cells per diameter) happen when
a case is built (``solver.fluid.cases``), still before tracing, and raise the same error.

The sections' types are re-exported here (``from solver.config import CylinderConfig`` works).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solver.bodies.config import (
    BODY_CAPACITIES,
    BODY_CASES,
    CONTACT_MODELS,
    ENSEMBLE_SWEEP,
    INCLINE_SHAPES,
    BodiesConfig,
    BodyCaseConfig,
    BounceConfig,
    BoxFillConfig,
    CradleConfig,
    EnsembleConfig,
    InclineConfig,
    MaterialConfig,
    ProjectileConfig,
    SceneCaseConfig,
    TumblingConfig,
    parse_bodies,
)
from solver.checkpoint.config import CheckpointConfig, parse_checkpoint
from solver.coupling.config import (
    COUPLED_CASES,
    COUPLING_METHODS,
    CoupledCaseConfig,
    CouplingConfig,
    SettlingSphereConfig,
    SphereArrayConfig,
    parse_coupling,
)
from solver.distributed.config import DomainConfig, parse_domain
from solver.errors import ConfigError
from solver.fluid.config import (
    COLLISIONS,
    FLUID_CASES,
    INFLOWS,
    MAX_MACH,
    PRECISIONS,
    TG_VARIANTS,
    CavityConfig,
    CouetteConfig,
    CylinderConfig,
    DuctConfig,
    FluidCaseConfig,
    FluidConfig,
    GeometryConfig,
    PoiseuilleConfig,
    TaylorGreenConfig,
    parse_fluid,
)
from solver.output.config import PNG_FIELDS, OutputConfig, parse_output
from solver.sections import Section
from solver.telemetry.config import TelemetryConfig, parse_telemetry
from solver.twin.config import TwinConfig, parse_twin

__all__ = [
    "BODY_CAPACITIES",
    "BODY_CASES",
    "CASE_PARSERS",
    "COLLISIONS",
    "CONTACT_MODELS",
    "COUPLED_CASES",
    "COUPLING_METHODS",
    "ENSEMBLE_SWEEP",
    "FLUID_CASES",
    "INCLINE_SHAPES",
    "INFLOWS",
    "MAX_MACH",
    "PNG_FIELDS",
    "PRECISIONS",
    "TG_VARIANTS",
    "BodiesConfig",
    "BounceConfig",
    "BoxFillConfig",
    "CaseConfig",
    "CavityConfig",
    "CheckpointConfig",
    "ConfigError",
    "CouetteConfig",
    "CoupledCaseConfig",
    "CouplingConfig",
    "CradleConfig",
    "CylinderConfig",
    "DomainConfig",
    "DuctConfig",
    "EnsembleConfig",
    "FluidConfig",
    "GeometryConfig",
    "InclineConfig",
    "MaterialConfig",
    "OutputConfig",
    "PoiseuilleConfig",
    "ProjectileConfig",
    "RunConfig",
    "SceneCaseConfig",
    "SettlingSphereConfig",
    "SphereArrayConfig",
    "TaylorGreenConfig",
    "TelemetryConfig",
    "TumblingConfig",
    "from_dict",
    "load",
]

CaseConfig = FluidCaseConfig | BodyCaseConfig | CoupledCaseConfig


@dataclass(frozen=True)
class RunConfig:
    case: CaseConfig
    fluid: FluidConfig
    output: OutputConfig
    domain: DomainConfig
    checkpoint: CheckpointConfig
    steps: int | None  # None: the case's default
    chunk: int
    seed: int
    resolved: dict  # the whole composed config as plain data, for run.json
    bodies: BodiesConfig = BodiesConfig.default()  # rigid-body ensembles
    twin: TwinConfig | None = None  # digital twin (solver.twin.config); None: off
    coupling: CouplingConfig = CouplingConfig()  # bodies in the fluid (solver.coupling)
    telemetry: TelemetryConfig = TelemetryConfig()  # per-rank timings (solver.telemetry)


CASE_PARSERS = {
    **FLUID_CASES,
    **BODY_CASES,
    **COUPLED_CASES,
}  # case.name -> parser of the ``case`` section


def from_dict(data: dict) -> RunConfig:
    """Validate a plain-data config (the resolved Hydra config) and build the typed one."""
    root = Section("", data)
    case_section = Section("case", root.raw("case"))
    name = case_section.choice("name", tuple(CASE_PARSERS))
    case = CASE_PARSERS[name](case_section)
    fluid = parse_fluid(Section("fluid", root.raw("fluid")))
    if case.dimension is not None and case.dimension != fluid.dimension:
        raise ConfigError(
            "fluid.lattice",
            fluid.lattice,
            f"a {case.dimension}D lattice for case {name}",
            hint=f"use fluid={'d2q9' if case.dimension == 2 else 'd3q19'}"
            + (" (case=dkt_2d: disks on D2Q9)" if name == "dkt" and case.dimension == 3 else ""),
        )
    if name == "taylor_green" and case.variant != "vortex" and fluid.dimension != 3:
        raise ConfigError(
            "case.variant", case.variant, "vortex on a 2D lattice", hint="use fluid=d3q19"
        )
    bodies = (
        parse_bodies(Section("bodies", data["bodies"]))
        if "bodies" in data
        else BodiesConfig.default()
    )
    coupling = (
        parse_coupling(Section("coupling", data["coupling"]))
        if "coupling" in data
        else CouplingConfig()
    )
    _check_coupling(name, case, coupling)
    return RunConfig(
        case=case,
        fluid=fluid,
        output=parse_output(Section("output", root.raw("output"))),
        domain=parse_domain(Section("domain", root.raw("domain"))),
        checkpoint=(
            parse_checkpoint(Section("checkpoint", data["checkpoint"]))
            if "checkpoint" in data
            else CheckpointConfig.disabled()
        ),
        steps=root.integer("steps", allow_none=True),
        chunk=root.integer("chunk"),
        seed=root.integer("seed", low=0),
        resolved=data,
        bodies=bodies,
        twin=_twin(data.get("twin"), case, bodies, coupling),
        coupling=coupling,
        telemetry=(
            parse_telemetry(Section("telemetry", data["telemetry"]))
            if "telemetry" in data
            else TelemetryConfig()
        ),
    )


def _check_coupling(name: str, case: Any, coupling: CouplingConfig) -> None:
    """A case with bodies in the fluid needs a coupling method, and only such a case takes one:
    a coupled case, or a fluid case with bodies in ``coupling.scene`` (disks on a 2D lattice)."""
    kind = getattr(case, "kind", "fluid")
    coupled = kind == "coupled"
    scene = coupling.scene is not None
    if coupled and not coupling.enabled:
        raise ConfigError(
            "coupling.method", coupling.method, f"psm for case {name} (bodies in the fluid)",
            hint="add coupling=psm",
        )  # fmt: skip
    if scene and kind != "fluid":
        raise ConfigError(
            "coupling.scene", "bodies",
            f"empty for case {name} (it places its own bodies; coupling.scene is for fluid cases)",
        )  # fmt: skip
    if scene and not coupling.enabled:
        raise ConfigError(
            "coupling.method", coupling.method, "psm when coupling.scene has bodies",
            hint="add coupling=psm",
        )  # fmt: skip
    if coupling.enabled and not coupled and not scene:
        raise ConfigError(
            "coupling.method", coupling.method, f"none for case {name} (no bodies in the fluid)",
            hint=f"coupled cases: {', '.join(COUPLED_CASES)}; or bodies in coupling.scene",
        )  # fmt: skip


def _twin(
    data: Any, case: Any, bodies: BodiesConfig | None = None, coupling: CouplingConfig | None = None
) -> TwinConfig | None:
    """The twin section (solver.twin.config); None when absent or ``mode: none``."""
    twin = parse_twin(data)
    if not twin.enabled:
        return None
    in_fluid = getattr(case, "kind", "fluid") == "coupled" or (
        coupling is not None and coupling.scene is not None
    )
    if getattr(case, "kind", "fluid") != "fluid" or in_fluid:
        # a rigid-body case, or bodies in the fluid: kinematic bodies follow body_pose sensors
        # (solver.twin.bodies)
        what = "bodies in the fluid" if in_fluid else "a rigid-body case"
        if twin.enkf.enabled or twin.forecast.enabled:
            key = "twin.enkf.enabled" if twin.enkf.enabled else "twin.forecast.enabled"
            raise ConfigError(key, True, f"false for {what}")
        if bodies is not None and bodies.ensemble.size > 1:
            raise ConfigError("twin.mode", twin.mode, "none with bodies.ensemble.size > 1")
        if not any(s.kind == "body_pose" for s in twin.sensors.values()):
            raise ConfigError("twin.sensors", sorted(twin.sensors),
                              f"a body_pose sensor for {what}")  # fmt: skip
    return twin


def load(cfg: Any) -> RunConfig:
    """Resolve a Hydra ``DictConfig`` (interpolations included) and validate it.

    Raises:
        ConfigError: for the first bad value, also for interpolations that do not resolve.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        raise ConfigError(str(key), None, "a resolvable value", hint=_one_line(err)) from None
    data.pop("hydra", None)
    return from_dict(data)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
