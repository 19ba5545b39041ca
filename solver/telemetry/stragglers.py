"""Straggler detection: a rank that stays slower than the others for several chunks.

In each timed chunk every rank's busy time per step (its chunk plus its host work, without the
wait for the others) is compared with the median of the other ranks' times (a straggler is not
part of its own reference: with two ranks it is compared with the other one, with many the
reference is close to the median of all). A rank whose time exceeds ``factor`` x that median,
and by more than ``min_excess_s`` over the whole chunk, is *slow* in that chunk; slow in
``chunks`` consecutive timed chunks, it is named a straggler. The floor keeps the jitter of
short chunks (process 0's output and CSV writes, a busy shared host: milliseconds) from naming a
rank whose delay costs the others nothing that matters.
One named episode lasts until the rank is no longer slow; a later streak is a new episode. Pure
host logic on numbers (no I/O).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Straggler:
    """One episode of a straggling rank.

    Attributes:
        rank: the process index.
        host: its host name.
        first_step: the step at the end of the first slow chunk of the episode.
        last_step: the step at the end of its latest slow chunk.
        chunks: consecutive slow chunks so far.
        worst_ratio: the largest busy time / median of the other ranks seen in the episode.
    """

    rank: int
    host: str
    first_step: int
    last_step: int
    chunks: int
    worst_ratio: float

    def as_dict(self) -> dict:
        return asdict(self)


class StragglerDetector:
    """Counts consecutive slow chunks per rank; names a rank once its streak reaches ``chunks``.

    Args:
        factor: slow means busy time > factor x the median of the other ranks (factor > 1).
        chunks: consecutive slow chunks before a rank is named (>= 1).
        hosts: host name per rank.
        min_excess_s: slow also means busy time above that median by more than this many
            seconds over the chunk (>= 0).
    """

    def __init__(
        self, factor: float, chunks: int, hosts: Sequence[str], min_excess_s: float = 0.0
    ) -> None:
        self.factor, self.chunks, self.hosts = factor, chunks, list(hosts)
        self.min_excess_s = min_excess_s
        self.streak = [0] * len(self.hosts)
        self.first = [0] * len(self.hosts)
        self.worst = [0.0] * len(self.hosts)
        self.episodes: list[Straggler] = []
        self._open: dict[int, Straggler] = {}  # rank -> its current named episode

    @property
    def current(self) -> set[int]:
        """Ranks named and still slow in the latest chunk."""
        return set(self._open)

    def update(self, step: int, busy_s: Sequence[float], steps: int = 1) -> list[Straggler]:
        """Take one timed chunk of ``steps`` steps ending at ``step``: ``busy_s[r]`` s per step
        of rank r.

        Returns:
            the episodes named by this chunk (each rank once per episode).
        """
        times = np.asarray(busy_s, dtype=float)
        if times.size != len(self.hosts):
            raise ValueError(f"{times.size} times for {len(self.hosts)} ranks")
        named = []
        for rank, t in enumerate(times):
            others = np.delete(times, rank)
            median = float(np.median(others)) if others.size else 0.0
            ratio = float(t / median) if median > 0 else 1.0
            excess_s = (t - median) * steps
            if not (ratio > self.factor and excess_s > self.min_excess_s):
                self.streak[rank] = 0
                self._open.pop(rank, None)
                continue
            if self.streak[rank] == 0:
                self.first[rank], self.worst[rank] = step, ratio
            self.streak[rank] += 1
            self.worst[rank] = max(self.worst[rank], ratio)
            episode = self._open.get(rank)
            if episode is not None:
                episode.last_step, episode.chunks = step, self.streak[rank]
                episode.worst_ratio = self.worst[rank]
            elif self.streak[rank] >= self.chunks:
                episode = Straggler(rank, self.hosts[rank], self.first[rank], step,
                                    self.streak[rank], self.worst[rank])  # fmt: skip
                self._open[rank] = episode
                self.episodes.append(episode)
                named.append(episode)
        return named
