"""Rigid-body scenes: materials and bodies from the config, a YAML file or an HDF5 file.

A scene is host-side data (NumPy), validated before anything is traced: every bad value raises
``solver.errors.ConfigError`` naming the key path (``bodies.scene.bodies[3].radius``), the value and
the allowed range. Overlap checks and packing generators live in ``solver.bodies.packings``.

Mapping form (the Hydra config's ``bodies.scene`` and YAML files; YAML is read with
``yaml.safe_load`` only, so tags such as ``!!python/object`` are rejected; YAML 1.1 reads ``2.0e11``
as a string, write ``2.0e+11``)::

    materials:
      steel: {young: 2.0e+11, poisson: 0.3, density: 7800, restitution: 0.9, friction: 0.3,
              rolling_friction: 0.0}          # rolling_friction is optional (default 0)
    bodies:
      - {shape: plane, material: steel, point: [0, 0, 0], normal: [0, 0, 1]}
      - {shape: sphere, material: steel, radius: 0.01, position: [0, 0, 0.1],
         velocity: [1, 0, 0]}                 # density: the material's
      - shape: clump
        material: steel
        mass: 0.05                            # or density (kg/m^3), never both
        spheres: [{radius: 0.01, offset: [-0.01, 0, 0]}, {radius: 0.01, offset: [0.01, 0, 0]}]
        position: [0.1, 0, 0.1]
        orientation: [1, 0, 0, 0]             # w, x, y, z; normalised on load
        inertia: [[1e-6, 0, 0], [0, 2e-6, 0], [0, 0, 2e-6]]   # optional, body frame, kg m^2

Optional body keys (spheres and clumps): ``mass`` | ``density``, ``inertia``, ``orientation``
(identity), ``velocity`` and ``angular_velocity`` (zero; m/s, rad/s in the world frame), ``fixed``
and ``kinematic`` (false). A clump's body origin is its centre of mass: without an explicit
``inertia`` the volume-weighted centre of its member spheres must lie at the origin (member masses
are taken proportional to member volumes; overlaps between members are not subtracted). A plane
is the half-space ``(x - point) . normal >= 0``; ``normal`` is normalised on load.

HDF5 layout (``save_scene`` writes it; NaN in a float column means "not given")::

    /materials/<name>            group; attrs young, poisson, density, restitution, friction,
                                 rolling_friction
    /bodies/shape, /bodies/material            (n,) strings
    /bodies/radius, /bodies/mass, /bodies/density                (n,) float
    /bodies/position, velocity, angular_velocity, point, normal  (n, 3) float
    /bodies/orientation (n, 4), /bodies/inertia (n, 3, 3)        float
    /bodies/fixed, /bodies/kinematic                             (n,) bool
    /clump_spheres/body (m,) int, /clump_spheres/radius (m,), /clump_spheres/offset (m, 3)

Every column but ``shape`` and ``material`` may be left out (all "not given").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from solver.errors import ConfigError

SHAPES = ("sphere", "clump", "plane")
_MISSING = object()
_VEC = ("position", "velocity", "angular_velocity", "point", "normal")


@dataclass(frozen=True)
class Material:
    """Contact material: ``young`` (Pa), ``poisson``, ``density`` (kg/m^3), ``restitution``,
    ``friction`` (Coulomb) and ``rolling_friction`` (dimensionless coefficients)."""

    name: str
    young: float
    poisson: float
    density: float
    restitution: float
    friction: float
    rolling_friction: float = 0.0


@dataclass(frozen=True, eq=False)
class BodySpec:
    """One body as given. Vectors are float64 arrays: position, velocity, angular_velocity,
    point, normal (3,); orientation (4,) unit quaternion (w, x, y, z); inertia (3, 3) kg m^2 in the
    body frame or None (computed); spheres: ((radius, offset (3,)), ...) for clumps."""

    shape: str
    material: str
    radius: float | None = None
    spheres: tuple[tuple[float, np.ndarray], ...] = ()
    point: np.ndarray | None = None
    normal: np.ndarray | None = None
    mass: float | None = None
    density: float | None = None
    inertia: np.ndarray | None = None
    position: np.ndarray = field(default_factory=lambda: np.zeros(3))
    orientation: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.0, 0.0, 0.0]))
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    angular_velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    fixed: bool = False
    kinematic: bool = False

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BodySpec):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    __hash__ = None  # type: ignore[assignment]

    def members(self) -> tuple[tuple[float, np.ndarray], ...]:
        """The body's spheres as ((radius, body-frame offset (3,)), ...); a sphere is one member."""
        return ((self.radius, np.zeros(3)),) if self.shape == "sphere" else self.spheres

    def to_dict(self) -> dict[str, Any]:
        """The mapping form of this body (plain Python values), as ``scene_from_dict`` reads it."""
        out: dict[str, Any] = {"shape": self.shape, "material": self.material}
        if self.shape == "plane":
            return out | {"point": self.point.tolist(), "normal": self.normal.tolist()}
        if self.shape == "sphere":
            out["radius"] = self.radius
        else:
            out["spheres"] = [{"radius": r, "offset": o.tolist()} for r, o in self.spheres]
        for name in ("mass", "density"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.inertia is not None:
            out["inertia"] = self.inertia.tolist()
        for name in ("position", "orientation", "velocity", "angular_velocity"):
            out[name] = getattr(self, name).tolist()
        return out | {"fixed": self.fixed, "kinematic": self.kinematic}


@dataclass(frozen=True)
class BodyArrays:
    """Struct of arrays for the n spheres and clumps and their m member spheres.

    position, velocity, angular_velocity (n, 3); orientation (n, 4); mass (n,) kg; inertia (n, 3, 3)
    body frame, kg m^2; fixed, kinematic (n,) bool; material (n,) index into ``material_names``;
    body_index (n,) index into ``Scene.bodies``; member_body (m,) index into these n bodies;
    member_radius (m,) m; member_offset (m, 3) body frame, m.
    """

    position: np.ndarray
    orientation: np.ndarray
    velocity: np.ndarray
    angular_velocity: np.ndarray
    mass: np.ndarray
    inertia: np.ndarray
    fixed: np.ndarray
    kinematic: np.ndarray
    material: np.ndarray
    body_index: np.ndarray
    member_body: np.ndarray
    member_radius: np.ndarray
    member_offset: np.ndarray
    material_names: tuple[str, ...]


@dataclass(frozen=True)
class PlaneArrays:
    """point, normal (p, 3) (unit normals); material (p,) index; body_index (p,) into bodies."""

    point: np.ndarray
    normal: np.ndarray
    material: np.ndarray
    body_index: np.ndarray


@dataclass(frozen=True)
class Scene:
    materials: dict[str, Material]
    bodies: list[BodySpec]

    def arrays(self) -> tuple[BodyArrays, PlaneArrays]:
        """Struct-of-arrays for the spheres and clumps, and separately for the planes."""
        names = tuple(self.materials)
        solid = [(i, b) for i, b in enumerate(self.bodies) if b.shape != "plane"]
        planes = [(i, b) for i, b in enumerate(self.bodies) if b.shape == "plane"]
        mass, inertia = (
            zip(*(body_mass(b, self.materials) for _, b in solid), strict=True)
            if solid
            else ((), ())
        )
        members = [(k, r, o) for k, (_, b) in enumerate(solid) for r, o in b.members()]

        def stack(items: list, name: str, width: int) -> np.ndarray:
            rows = [getattr(b, name) for _, b in items]
            return np.array(rows, dtype=float).reshape(len(rows), width)

        bodies = BodyArrays(
            position=stack(solid, "position", 3),
            orientation=stack(solid, "orientation", 4),
            velocity=stack(solid, "velocity", 3),
            angular_velocity=stack(solid, "angular_velocity", 3),
            mass=np.array(mass, dtype=float),
            inertia=np.array(inertia, dtype=float).reshape(len(solid), 3, 3),
            fixed=np.array([b.fixed for _, b in solid], dtype=bool),
            kinematic=np.array([b.kinematic for _, b in solid], dtype=bool),
            material=np.array([names.index(b.material) for _, b in solid], dtype=np.int32),
            body_index=np.array([i for i, _ in solid], dtype=np.int64),
            member_body=np.array([k for k, _, _ in members], dtype=np.int64),
            member_radius=np.array([r for _, r, _ in members], dtype=float),
            member_offset=np.array([o for _, _, o in members], dtype=float).reshape(-1, 3),
            material_names=names,
        )
        plane_arrays = PlaneArrays(
            point=stack(planes, "point", 3),
            normal=stack(planes, "normal", 3),
            material=np.array([names.index(b.material) for _, b in planes], dtype=np.int32),
            body_index=np.array([i for i, _ in planes], dtype=np.int64),
        )
        return bodies, plane_arrays

    def to_dict(self) -> dict[str, Any]:
        """The mapping form (plain Python values) that ``scene_from_dict`` reads back equal."""
        mats = {
            n: {f.name: getattr(m, f.name) for f in fields(m)[1:]}
            for n, m in self.materials.items()
        }
        return {"materials": mats, "bodies": [b.to_dict() for b in self.bodies]}


def body_mass(body: BodySpec, materials: dict[str, Material]) -> tuple[float, np.ndarray]:
    """Mass (kg) and body-frame inertia tensor (3, 3) (kg m^2) of a sphere or clump.

    Solid spheres: I = 2/5 m r^2. Clumps: member masses in proportion to member volumes, each member
    moved by the parallel-axis theorem, I += m_k (|d|^2 1 - d d^T). A given mass or inertia wins.
    """
    volumes = np.array([4.0 / 3.0 * math.pi * r**3 for r, _ in body.members()])
    density = body.density if body.density is not None else materials[body.material].density
    mass = body.mass if body.mass is not None else density * volumes.sum()
    if body.inertia is not None:
        return mass, body.inertia
    inertia = np.zeros((3, 3))
    for (r, d), m in zip(body.members(), mass * volumes / volumes.sum(), strict=True):
        inertia += m * (0.4 * r**2 * np.eye(3) + d @ d * np.eye(3) - np.outer(d, d))
    return mass, inertia


def member_world_centres(
    position: np.ndarray, orientation: np.ndarray, member_body: np.ndarray, offset: np.ndarray
) -> np.ndarray:
    """(m, 3) m, the world centres of m member spheres: X_b + R_b d_k, b = member_body[k], for
    bodies at position (n, 3) with orientation (n, 4) and body-frame offsets (m, 3)."""
    rotation = rotation_matrices(orientation)[member_body]
    return position[member_body] + np.einsum("mij,mj->mi", rotation, offset)


def rotation_matrices(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (n, 3, 3) of unit quaternions q (n, 4), (w, x, y, z): body to world."""
    w, x, y, z = np.moveaxis(np.asarray(q, dtype=float), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is not None and b is not None and np.array_equal(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# --- validation ----------------------------------------------------------------------------------


class _Fields:
    """Typed reads of one mapping; every error names the full key path."""

    def __init__(self, prefix: str, data: Any, allowed_keys: tuple[str, ...] = ()) -> None:
        if not isinstance(data, dict):
            raise ConfigError(prefix, data, "a mapping of keys")
        self.prefix, self.data = prefix, data
        extra = sorted(str(k) for k in data if k not in allowed_keys) if allowed_keys else []
        if extra:
            raise ConfigError(self.key(extra[0]), data[extra[0]], "keys " + ", ".join(allowed_keys))

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        if name in self.data:
            return self.data[name]
        if default is _MISSING:
            raise ConfigError(self.key(name), None, "a value (the key is missing)")
        return default

    def number(
        self,
        name: str,
        low: float | None = None,
        high: float | None = None,
        *,
        low_open: bool = True,
        high_open: bool = False,
        default: Any = _MISSING,
    ) -> float | None:
        value = self.raw(name, default)
        if value is None and default is None:
            return None
        parts = [f"{'>' if low_open else '>='} {low:g}"] if low is not None else []
        parts += [f"{'<' if high_open else '<='} {high:g}"] if high is not None else []
        allowed = "a finite number" + (" " + " and ".join(parts) if parts else "")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(self.key(name), value, allowed)
        value = float(value)
        if (
            not math.isfinite(value)
            or (low is not None and (value <= low if low_open else value < low))
            or (high is not None and (value >= high if high_open else value > high))
        ):
            raise ConfigError(self.key(name), value, allowed)
        return value

    def vector(self, name: str, length: int, default: Any = _MISSING) -> np.ndarray:
        value = self.raw(name, default)
        if value is default and default is not _MISSING:
            return np.array(default, dtype=float)
        ok = isinstance(value, (list, tuple)) and len(value) == length
        ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        if not ok or not all(math.isfinite(v) for v in value):
            raise ConfigError(self.key(name), value, f"a list of {length} finite numbers")
        return np.array(value, dtype=float)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name, default)
        if not isinstance(value, bool):
            raise ConfigError(self.key(name), value, "true | false")
        return value


_MATERIAL_KEYS = ("young", "poisson", "density", "restitution", "friction", "rolling_friction")
_BODY_KEYS = (
    "shape",
    "material",
    "radius",
    "spheres",
    "mass",
    "density",
    "inertia",
    "position",
    "orientation",
    "velocity",
    "angular_velocity",
    "fixed",
    "kinematic",
)


def _material(name: str, s: _Fields) -> Material:
    return Material(
        name=name,
        young=s.number("young", 0.0),
        poisson=s.number("poisson", -1.0, 0.5, high_open=True),
        density=s.number("density", 0.0),
        restitution=s.number("restitution", 0.0, 1.0),
        friction=s.number("friction", 0.0, low_open=False),
        rolling_friction=s.number("rolling_friction", 0.0, low_open=False, default=0.0),
    )


def _body(s: _Fields, materials: dict[str, Material]) -> BodySpec:
    shape = s.raw("shape")
    if shape not in SHAPES:
        raise ConfigError(s.key("shape"), shape, "one of " + " | ".join(SHAPES))
    material = s.raw("material")
    if not isinstance(material, str) or material not in materials:
        raise ConfigError(s.key("material"), material, "a material of " + ", ".join(materials))
    if shape == "plane":
        _Fields(s.prefix, s.data, ("shape", "material", "point", "normal"))
        normal = s.vector("normal", 3)
        if not np.linalg.norm(normal) > 0:
            raise ConfigError(s.key("normal"), normal.tolist(), "a non-zero vector")
        return BodySpec(shape, material, point=s.vector("point", 3), normal=_unit(normal))
    _Fields(
        s.prefix,
        s.data,
        tuple(k for k in _BODY_KEYS if k != ("spheres", "radius")[shape == "clump"]),
    )
    if "mass" in s.data and "density" in s.data:
        raise ConfigError(
            s.key("mass"), s.data["mass"], "only one of mass, density (density also given)"
        )
    radius, spheres = None, ()
    if shape == "sphere":
        radius = s.number("radius", 0.0)
    else:
        spheres = _clump_spheres(s)
    orientation = s.vector("orientation", 4, default=(1.0, 0.0, 0.0, 0.0))
    if not np.linalg.norm(orientation) > 0:
        raise ConfigError(
            s.key("orientation"), orientation.tolist(), "a non-zero quaternion (w, x, y, z)"
        )
    body = BodySpec(
        shape,
        material,
        radius=radius,
        spheres=spheres,
        mass=s.number("mass", 0.0, default=None),
        density=s.number("density", 0.0, default=None),
        inertia=_inertia(s),
        position=s.vector("position", 3),
        orientation=_unit(orientation),
        velocity=s.vector("velocity", 3, default=(0.0, 0.0, 0.0)),
        angular_velocity=s.vector("angular_velocity", 3, default=(0.0, 0.0, 0.0)),
        fixed=s.boolean("fixed", False),
        kinematic=s.boolean("kinematic", False),
    )
    if body.fixed and body.kinematic:
        raise ConfigError(s.key("kinematic"), True, "false when fixed is true (one of the two)")
    if shape == "clump" and body.inertia is None:
        volumes = np.array([r**3 for r, _ in spheres])
        centre = volumes @ np.array([o for _, o in spheres]) / volumes.sum()
        if np.linalg.norm(centre) > 1e-9 * max(r for r, _ in spheres):
            raise ConfigError(
                s.key("spheres"),
                f"centre of mass at {centre.tolist()}",
                "centre at [0, 0, 0]",
                hint="shift every offset by minus that centre, or give inertia explicitly",
            )
    return body


def _clump_spheres(s: _Fields) -> tuple[tuple[float, np.ndarray], ...]:
    items = s.raw("spheres")
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(s.key("spheres"), items, "a non-empty list of {radius, offset}")
    out = []
    for k, item in enumerate(items):
        m = _Fields(f"{s.key('spheres')}[{k}]", item, ("radius", "offset"))
        out.append((m.number("radius", 0.0), m.vector("offset", 3)))
    return tuple(out)


def _inertia(s: _Fields) -> np.ndarray | None:
    value = s.raw("inertia", None)
    if value is None:
        return None
    allowed = "a symmetric positive definite 3x3 matrix of finite numbers (kg m^2)"
    try:
        matrix = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(s.key("inertia"), value, allowed) from None
    if matrix.shape != (3, 3) or not np.isfinite(matrix).all():
        raise ConfigError(s.key("inertia"), value, allowed)
    if not np.allclose(matrix, matrix.T, rtol=0.0, atol=1e-9 * np.abs(matrix).max()):
        raise ConfigError(s.key("inertia"), value, allowed, hint=f"{s.prefix}: not symmetric")
    smallest = np.linalg.eigvalsh(matrix).min()
    if not smallest > 0:
        raise ConfigError(
            s.key("inertia"), value, allowed, hint=f"{s.prefix}: eigenvalue {smallest:g}"
        )
    return matrix


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


# --- loaders -------------------------------------------------------------------------------------


def scene_from_dict(data: Any, key_prefix: str = "bodies.scene") -> Scene:
    """Validate the mapping form (see the module docstring) and build a ``Scene``."""
    top = _Fields(key_prefix, data, ("materials", "bodies"))
    mats = top.raw("materials")
    if not isinstance(mats, dict) or not mats:
        raise ConfigError(top.key("materials"), mats, "a non-empty mapping of name: {properties}")
    materials = {
        str(name): _material(
            str(name), _Fields(f"{top.key('materials')}.{name}", m, _MATERIAL_KEYS)
        )
        for name, m in mats.items()
    }
    items = top.raw("bodies")
    if not isinstance(items, (list, tuple)):
        raise ConfigError(top.key("bodies"), items, "a list of bodies")
    bodies = [
        _body(_Fields(f"{top.key('bodies')}[{i}]", b), materials) for i, b in enumerate(items)
    ]
    return Scene(materials, bodies)


YAML_SUFFIXES = (".yaml", ".yml")
HDF5_SUFFIXES = (".h5", ".hdf5")
SCENE_FILE = "a readable scene file: a YAML mapping (.yaml, .yml) or HDF5 (.h5, .hdf5)"


def load_scene(path: str | Path, key: str = "case.file") -> Scene:
    """Read a scene from ``.yaml``/``.yml`` (``yaml.safe_load``) or ``.h5``/``.hdf5``.

    Raises:
        ConfigError: naming ``key`` (the config key that gave the path) and the path, with the
            reason, when the file is no scene: missing, a directory, unreadable, another
            suffix, YAML that does not parse (with the line), a top level that is not a
            mapping, not HDF5, or HDF5 without the scene's groups. A bad value inside a file
            names its place there instead (``PATH.bodies[2].radius``).
    """
    path = Path(path)

    def refuse(reason: str) -> ConfigError:
        return ConfigError(key, str(path), SCENE_FILE, hint=reason)

    suffix = path.suffix.lower()
    if path.is_dir():
        raise refuse("it is a directory")
    if not path.exists():
        raise refuse("no such file")
    if suffix not in YAML_SUFFIXES + HDF5_SUFFIXES:
        raise refuse(
            f"its name ends in {suffix!r}, not .yaml, .yml, .h5 or .hdf5"
            if suffix
            else "its name has no .yaml, .yml, .h5 or .hdf5 suffix"
        )
    try:
        with path.open("rb"):
            pass
    except OSError as error:
        raise refuse(f"cannot read it: {error.strerror or error}") from None
    if suffix in HDF5_SUFFIXES:
        import h5py

        if not h5py.is_hdf5(path):
            raise refuse("not an HDF5 file (no HDF5 signature)")
        return scene_from_dict(_read_h5(path, refuse), key_prefix=str(path))
    return scene_from_dict(_read_yaml(path, refuse), key_prefix=str(path))


def _read_yaml(path: Path, refuse) -> Any:
    import yaml

    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise refuse(f"not a text file (byte {error.start} is not UTF-8)") from None
    except OSError as error:
        raise refuse(f"cannot read it: {error.strerror or error}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = "a YAML tag, which is not read (plain YAML only)" if "tag" in problem else "not YAML"
        raise refuse(f"{what}: {problem}{where}") from None
    if data is None:
        raise refuse("the file is empty")
    if not isinstance(data, dict):
        raise refuse(
            f"not a YAML mapping of materials and bodies (the top level is a "
            f"{type(data).__name__}: {str(data)[:40]!r})"
        )
    return data


def save_scene(scene: Scene, path: str | Path) -> None:
    """Write a scene as YAML or HDF5 (by suffix) in the layout ``load_scene`` reads back equal."""
    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        path.write_text(yaml.safe_dump(scene.to_dict(), sort_keys=False))
        return
    import h5py

    n, nan = len(scene.bodies), np.nan
    cols: dict[str, np.ndarray] = {
        "radius": np.full(n, nan),
        "mass": np.full(n, nan),
        "density": np.full(n, nan),
        "inertia": np.full((n, 3, 3), nan),
        "orientation": np.full((n, 4), nan),
        "fixed": np.zeros(n, bool),
        "kinematic": np.zeros(n, bool),
    } | {name: np.full((n, 3), nan) for name in _VEC}
    member_body, member_radius, member_offset = [], [], []
    for i, body in enumerate(scene.bodies):
        for name, value in body.to_dict().items():
            if name == "spheres":
                member_body += [i] * len(value)
                member_radius += [m["radius"] for m in value]
                member_offset += [m["offset"] for m in value]
            elif name in cols:
                cols[name][i] = value
    with h5py.File(path, "w") as f:
        for name, m in scene.materials.items():
            f.create_group(f"materials/{name}").attrs.update(
                {k: getattr(m, k) for k in _MATERIAL_KEYS}
            )
        g = f.create_group("bodies")
        g["shape"] = np.array([b.shape for b in scene.bodies], dtype=h5py.string_dtype())
        g["material"] = np.array([b.material for b in scene.bodies], dtype=h5py.string_dtype())
        for name, column in cols.items():
            g[name] = column
        c = f.create_group("clump_spheres")
        c["body"] = np.array(member_body, dtype=np.int64)
        c["radius"] = np.array(member_radius, dtype=float)
        c["offset"] = np.array(member_offset, dtype=float).reshape(-1, 3)


def _read_h5(path: Path, refuse) -> dict[str, Any]:
    try:
        return _read_h5_scene(path)
    except KeyError as error:
        raise refuse(
            f"an HDF5 file without the scene layout (groups materials, bodies; {error})"
        ) from None
    except OSError as error:
        raise refuse(f"cannot read it as HDF5: {error}") from None


def _read_h5_scene(path: Path) -> dict[str, Any]:
    import h5py

    with h5py.File(path, "r") as f:
        materials = {
            name: {k: getattr(v, "item", lambda v=v: v)() for k, v in group.attrs.items()}
            for name, group in f["materials"].items()
        }
        g = f["bodies"]
        shapes = [s.decode() if isinstance(s, bytes) else s for s in g["shape"][()]]
        columns = {name: g[name][()] for name in g if name != "shape"}
        clump = (
            {name: f["clump_spheres"][name][()] for name in ("body", "radius", "offset")}
            if ("clump_spheres" in f)
            else None
        )
    bodies: list[dict[str, Any]] = []
    for i, shape in enumerate(shapes):
        body: dict[str, Any] = {"shape": shape}
        for name, column in columns.items():
            if (name in ("point", "normal")) != (shape == "plane") and name != "material":
                continue
            value = column[i]
            if isinstance(value, bytes):
                value = value.decode()
            elif value.dtype.kind == "f" and np.isnan(value).all():
                continue
            body[name] = value.tolist() if isinstance(value, np.ndarray | np.generic) else value
        if shape == "clump" and clump is not None:
            rows = np.flatnonzero(clump["body"] == i)
            body["spheres"] = [
                {"radius": float(clump["radius"][k]), "offset": clump["offset"][k].tolist()}
                for k in rows
            ]
        bodies.append(body)
    return {"materials": materials, "bodies": bodies}
