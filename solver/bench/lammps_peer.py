"""LAMMPS as the peer of the rigid-body bench: the same packing, the same contact law, its rate.

``python -m solver.bench bodies --peer lammps`` writes each packing of the bench as a LAMMPS
data file and input deck (``write_deck``), runs Debian's ``lmp`` on as many MPI ranks as the
machine has cores (``run``), and prints LAMMPS's particle-steps/s beside the solver's. Without
``lmp`` on the PATH the peer is skipped with a message. docs/lammps/in.bodies is the deck of
the 10^4-sphere packing (``python -m solver.bench bodies --sizes 10000 --peer lammps
--peer-dir DIR`` writes it with its data file).

The scene as LAMMPS sees it (LAMMPS 2022, GRANULAR package; units SI):
    - spheres: ``atom_style sphere``, diameter 2 r and density as in the bench, at rest at the
      bench's jittered lattice sites; walls of the box as ``fix wall/gran`` planes;
    - contacts: ``pair_style granular`` with ``hertz/material E e nu`` (Hertz, the effective
      modulus of two equal materials as the solver mixes it), ``damping tsuji`` (LAMMPS then
      reads the second normal coefficient as the restitution e, the same Tsuji-type damping for
      a restitution that the solver uses), ``tangential mindlin NULL 1.0 mu`` (Mindlin's
      tangential spring 8 G* a with history, its damping the normal one, the Coulomb limit mu);
      no rolling friction (none in the bench);
    - time: ``fix nve/sphere`` with the bench's dt, gravity ``fix gravity``;
    - neighbour list: bins with the bench's skin, rebuilt when an atom has moved more than half
      the skin (``neigh_modify delay 0 every 1 check yes``, the solver's Verlet rule) or every
      step (``check no``, the solver before it kept its table).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

POLICIES = {"lazy": "check yes", "every": "check no"}  # rebuild when moved > skin/2, or always
_LOOP = re.compile(r"Loop time of ([0-9.eE+-]+) on (\d+) procs for (\d+) steps with (\d+) atoms")


@dataclass(frozen=True)
class PeerRun:
    """One LAMMPS run: its loop time and the particle-steps/s it gives."""

    policy: str  # key of POLICIES
    atoms: int
    steps: int
    ranks: int
    loop_s: float

    @property
    def body_steps_per_s(self) -> float:
        return self.atoms * self.steps / self.loop_s


def executable() -> str | None:
    """Path of LAMMPS's ``lmp`` (Debian's package), or None when it is not installed."""
    return shutil.which("lmp")


def write_deck(
    out: Path,
    setup,
    position: np.ndarray,
    density: float,
    steps: int,
    policy: str = "lazy",
    final: bool = False,
    velocity: np.ndarray | None = None,
) -> Path:
    """Write spheres.data and in.bodies for the packing ``position`` (n, 3) m of ``setup``
    (``solver.bodies.step.BodySetup`` of equal spheres in an axis-aligned walled box); returns
    the input deck's path. ``final``: the deck also writes the end state to final.data;
    ``velocity``: (n, 3) m/s initial velocities (default at rest)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} not in {sorted(POLICIES)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    radius = float(np.max(setup.radius))
    if not np.allclose(setup.radius, radius):
        raise ValueError("the LAMMPS peer deck is written for equal spheres")
    lower, upper = _box(setup)
    n = position.shape[0]
    lines = [
        f"solver.bench bodies: {n} spheres of radius {radius:g} m",
        "",
        f"{n} atoms",
        "1 atom types",
        "",
        *(f"{lower[a]:.17g} {upper[a]:.17g} {ax}lo {ax}hi" for a, ax in enumerate("xyz")),
        "",
        "Atoms # sphere",
        "",
        *(
            f"{k + 1} 1 {2 * radius:.17g} {density:.17g} {p[0]:.17g} {p[1]:.17g} {p[2]:.17g}"
            for k, p in enumerate(np.asarray(position, float))
        ),
        "",
    ]
    if velocity is not None:  # (n, 3) m/s; angular velocities zero
        lines += ["Velocities", ""]
        lines += [f"{k + 1} {u[0]:.17g} {u[1]:.17g} {u[2]:.17g} 0 0 0"
                  for k, u in enumerate(np.asarray(velocity, float))]  # fmt: skip
        lines += [""]
    (out / "spheres.data").write_text("\n".join(lines))
    young, poisson = float(setup.young[0]), float(setup.poisson[0])
    restitution, friction = float(setup.restitution[0]), float(setup.friction[0])
    for name in ("young", "poisson", "restitution", "friction"):
        if not np.allclose(getattr(setup, name), getattr(setup, name)[0]):
            raise ValueError(f"the LAMMPS peer deck is written for one material ({name} varies)")
    tsuji = tsuji_restitution(restitution)
    # the solver's tangential damper is the normal one with k_t = 8 G* a for S_n = 2 E* a
    gamma_t = np.sqrt(2.0 * (1.0 - poisson) / (2.0 - poisson))

    def model(e_modulus: float) -> str:
        return (
            f"hertz/material {e_modulus:.17g} {tsuji:.17g} {poisson:.17g} tangential mindlin "
            f"NULL {gamma_t:.17g} {friction:.17g} damping tsuji limit_damping"
        )

    wall_young = _wall_modulus(setup, young, poisson)
    gravity = np.asarray(setup.gravity, float)
    g = float(np.linalg.norm(gravity))
    walls = [
        f"fix             wall_{ax} all wall/gran granular {model(wall_young)} {ax}plane "
        f"{lower[a]:.17g} {upper[a]:.17g}"
        for a, ax in enumerate("xyz")
    ]
    deck = [
        "# The packing of `python -m solver.bench bodies` for LAMMPS (solver/bench/lammps_peer.py)",
        "units           si",
        "atom_style      sphere",
        "dimension       3",
        "boundary        f f f",
        "newton          off",
        "comm_modify     vel yes",
        "read_data       spheres.data",
        "pair_style      granular",
        f"pair_coeff      * * {model(young)}",
        f"neighbor        {float(setup.skin):.17g} bin",
        f"neigh_modify    delay 0 every 1 {POLICIES[policy]}",
        *(
            [
                f"fix             gravity all gravity {g:.17g} vector "
                + " ".join(f"{c / g:.17g}" for c in gravity)
            ]
            if g > 0
            else []
        ),  # fmt: skip
        "fix             integrate all nve/sphere",
        *walls,
        f"timestep        {float(setup.dt):.17g}",
        "thermo          0",
        f"run             {steps}",
        *(["write_data      final.data"] if final else []),
        "",
    ]
    path = out / "in.bodies"
    path.write_text("\n".join(deck))
    return path


def run(deck: Path, policy: str, ranks: int | None = None, timeout: float = 900.0) -> PeerRun:
    """Run ``lmp`` on ``deck`` in its directory under ``mpirun -n ranks`` (default: the
    cores); the loop time is read from LAMMPS's log."""
    lmp = executable()
    if lmp is None:
        raise FileNotFoundError("lmp (Debian's lammps package) is not installed")
    ranks = ranks or os.cpu_count() or 1
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1")  # fmt: skip
    command = ["mpirun", "-n", str(ranks), "--oversubscribe", lmp, "-in", deck.name,
               "-log", "log.lammps", "-screen", "none"]  # fmt: skip
    done = subprocess.run(command, cwd=deck.parent, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    log = deck.parent / "log.lammps"
    text = log.read_text() if log.exists() else ""
    match = _LOOP.search(text)
    if done.returncode != 0 or match is None:
        tail = (text or done.stdout + done.stderr).strip().splitlines()[-5:]
        raise RuntimeError(f"LAMMPS failed (exit {done.returncode}): " + " | ".join(tail))
    loop_s, procs, steps, atoms = match.groups()
    return PeerRun(policy, int(atoms), int(steps), int(procs), float(loop_s))


def read_final(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities (n, 3) in atom-id order from the final.data of a ``final``
    deck."""
    lines = (Path(directory) / "final.data").read_text().splitlines()

    def section(name: str) -> dict[int, list[float]]:
        start = next(k for k, line in enumerate(lines) if line.startswith(name))
        rows = {}
        for line in lines[start + 2 :]:
            if not line.strip():
                break
            fields = line.split()
            rows[int(fields[0])] = [float(x) for x in fields[1:]]
        return rows

    atoms, velocities = section("Atoms"), section("Velocities")
    ids = sorted(atoms)
    # Atoms # sphere: id type diameter density x y z (then image flags)
    position = np.array([atoms[k][3:6] for k in ids])
    velocity = np.array([velocities[k][:3] for k in ids])
    return position, velocity


def tsuji_alpha(e: np.ndarray | float) -> np.ndarray:
    """LAMMPS's ``damping tsuji`` prefactor alpha(e): its normal damper is
    alpha sqrt(m* k_n) with k_n = (4/3) E* a (Tsuji et al. 1992's polynomial fit, as in
    LAMMPS's pair_style granular documentation)."""
    e = np.asarray(e, float)
    coefficients = (1.2728, -4.2783, 11.087, -22.348, 27.467, -18.022, 4.8218)
    return sum(c * e**k for k, c in enumerate(coefficients))


def tsuji_restitution(restitution: float) -> float:
    """The e to give LAMMPS's tsuji damping so that its normal damper equals the solver's.

    The solver's damper is 2 sqrt(5/6) |beta(e)| sqrt(m* S_n), S_n = 2 E* a
    (kernels.contact_models.hertz_damping); with k_n = (4/3) E* a that is
    sqrt(5) |beta(e)| sqrt(m* k_n), so alpha(e') = sqrt(5) |beta(e)|, solved by bisection on
    [0, 1] where alpha decreases."""
    from kernels.contact_models import restitution_beta

    target = float(np.sqrt(5.0) * -restitution_beta(np.float64(restitution)))
    lo, hi = 0.0, 1.0
    if not tsuji_alpha(hi) <= target <= tsuji_alpha(lo):
        raise ValueError(f"restitution {restitution} has no LAMMPS tsuji equivalent")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tsuji_alpha(mid) > target else (lo, mid)
    return 0.5 * (lo + hi)


def _wall_modulus(setup, young: float, poisson: float) -> float:
    """The E to give LAMMPS's walls so that they are the solver's rigid planes
    (E* = E / (1 - nu^2)): LAMMPS 2022's ``fix wall/gran`` takes E* = E / (2 (1 - nu)) for
    hertz/material (measured here: a sphere resting on the floor feels (1 + nu) times the force
    of the pair formula), so E' = 2 E / (1 + nu)."""
    if not np.all(np.isinf(np.asarray(setup.plane_young, float))):
        raise ValueError("the LAMMPS peer deck needs rigid walls (the solver's default planes)")
    return 2.0 * young / (1.0 + poisson)


def _box(setup) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper corners of the box that ``setup``'s six walls bound (axis-aligned)."""
    points = np.asarray(setup.plane_point, float)
    normals = np.asarray(setup.plane_normal, float)
    lower, upper = np.full(3, np.nan), np.full(3, np.nan)
    for point, normal in zip(points, normals, strict=True):
        axis = int(np.argmax(np.abs(normal)))
        if not np.isclose(abs(normal[axis]), 1.0):
            raise ValueError("the LAMMPS peer deck needs axis-aligned walls")
        (lower if normal[axis] > 0 else upper)[axis] = point[axis]
    if np.isnan(lower).any() or np.isnan(upper).any():
        raise ValueError("the LAMMPS peer deck needs six walls bounding a box")
    return lower, upper
