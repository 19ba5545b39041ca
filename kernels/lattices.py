"""Discrete velocity sets (DdQq) for lattice-Boltzmann.

Velocities, weights and opposite directions follow Qian, d'Humieres & Lallemand (1992),
Europhys. Lett. 17, 479. The lattice speed of sound is c_s^2 = 1/3 for all three sets.
Directions are ordered rest first, then each velocity followed by its opposite, so that
``opposite[i] == i + 1`` for odd ``i``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

CS2 = 1.0 / 3.0  # lattice speed of sound squared, (lattice units)^2


@dataclass(frozen=True)
class Lattice:
    """A velocity set.

    Attributes:
        name: "D2Q9", "D3Q19" or "D3Q27".
        c: (q, d) integer velocities in cells per step.
        w: (q,) weights, summing to 1.
        opposite: (q,) index of the velocity -c_i.
    """

    name: str
    c: np.ndarray = field(repr=False)
    w: np.ndarray = field(repr=False)
    opposite: np.ndarray = field(repr=False)

    @property
    def d(self) -> int:
        return int(self.c.shape[1])

    @property
    def q(self) -> int:
        return int(self.c.shape[0])

    def __hash__(self) -> int:  # usable as a static jit argument
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lattice) and other.name == self.name


def _build(name: str, d: int, weight_by_norm2: dict[int, float]) -> Lattice:
    vectors = [(0,) * d]
    seen = {vectors[0]}
    for v in itertools.product((-1, 0, 1), repeat=d):
        n2 = sum(x * x for x in v)
        if n2 == 0 or n2 not in weight_by_norm2 or v in seen:
            continue
        # (+v, -v) pairs, positive first by the first non-zero component
        first = next(x for x in v if x != 0)
        pos = v if first > 0 else tuple(-x for x in v)
        neg = tuple(-x for x in pos)
        vectors += [pos, neg]
        seen.update({pos, neg})
    # stable, readable order: by speed, then lexicographically descending
    rest, pairs = vectors[0], [(vectors[i], vectors[i + 1]) for i in range(1, len(vectors), 2)]
    pairs.sort(key=lambda p: (sum(x * x for x in p[0]), [-x for x in p[0]]))
    ordered = [rest] + [v for p in pairs for v in p]
    c = np.array(ordered, dtype=np.int32)
    w = np.array([weight_by_norm2[int((v * v).sum())] for v in c])
    opposite = np.array([ordered.index(tuple(-x for x in v)) for v in ordered], dtype=np.int32)
    if not np.isclose(w.sum(), 1.0):
        raise AssertionError(f"{name} weights sum to {w.sum()}")
    return Lattice(name=name, c=c, w=w, opposite=opposite)


D2Q9 = _build("D2Q9", 2, {0: 4 / 9, 1: 1 / 9, 2: 1 / 36})
D3Q19 = _build("D3Q19", 3, {0: 1 / 3, 1: 1 / 18, 2: 1 / 36})
D3Q27 = _build("D3Q27", 3, {0: 8 / 27, 1: 2 / 27, 2: 1 / 54, 3: 1 / 216})

LATTICES: dict[str, Lattice] = {lat.name: lat for lat in (D2Q9, D3Q19, D3Q27)}


def lattice_by_name(name: str) -> Lattice:
    """Look a lattice up by name (case-insensitive); ValueError names the allowed ones."""
    key = name.upper()
    if key not in LATTICES:
        raise ValueError(f"unknown lattice {name!r}; allowed: {', '.join(LATTICES)}")
    return LATTICES[key]
