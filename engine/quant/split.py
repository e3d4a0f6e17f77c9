"""Which calibration samples a search decides on and which it holds out: spread over the set.

A calibration set is often ordered: crops of one picture after another, or the pictures in turn
(sample i from picture i % m). Evenly spaced indices alias with such an order: PP-OCRv6 det's 16
photo crops (5 pictures in turn) gave check samples 1, 6, 10, 15, i.e. two pictures of five, and
a fixed stride of 4 would take one page of PP-OCRv6 rec's alternating text()/page() crops only.

- When the samples' pictures are known (an image folder: the file name without its digits and
  separators names the picture, so 00_astronaut.png and 10_astronaut.png, or astronaut_1.png and
  astronaut_2.png, are one picture), the picks go round the pictures: every picture gets one
  before any gets two (pictures spread over the set when there are more than picks), and a
  picture's own picks are spread over its samples.
- Otherwise (an .npz, .npy files, a folder whose names tell nothing): strided, one pick in each of
  k equal strata of the set, so consecutive crops of a picture are covered; within its stratum
  each pick sits where the picks together fall on the most residues modulo 2..8 (of 256 seeded
  draws and the strata's centres), so pictures taken in turn are covered too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_PERIODS = range(2, 9)
_DRAWS = 256


def picture_key(path: str | Path) -> str:
    """The picture an image file shows, by its name: the stem lowercased without digits and
    separators (``00_astronaut.png`` and ``astronaut-3.jpg`` are ``astronaut``)."""
    return re.sub(r"[\d_\-\s.]+", "", Path(path).stem.lower())


def informative(groups: Sequence[str] | None) -> bool:
    """True when ``groups`` tells samples apart and puts some together (neither one group nor
    each sample its own)."""
    return groups is not None and 1 < len(set(groups)) < len(groups)


def _strided(idx: list[int], k: int) -> list[int]:
    n = len(idx)
    bounds = [((j * n) // k, ((j + 1) * n) // k) for j in range(k)]
    centre = [(lo + hi - 1) // 2 for lo, hi in bounds]
    rng = np.random.default_rng(0)
    draws = [centre, *([int(rng.integers(lo, hi)) for lo, hi in bounds] for _ in range(_DRAWS))]
    periods = [m for m in _PERIODS if m <= n // 2]

    def score(pos: list[int]) -> tuple[float, float, int]:
        cover = [len({idx[p] % m for p in pos}) / min(k, m) for m in periods]
        return (min(cover, default=1.0), sum(cover), -sum(abs(p - c) for p, c in zip(pos, centre)))

    return sorted(idx[p] for p in max(draws, key=score))


def _by_group(idx: list[int], k: int, groups: Sequence[str]) -> list[int]:
    members: dict[str, list[int]] = {}
    for i in idx:
        members.setdefault(groups[i], []).append(i)
    keys = list(members)
    if k < len(keys):  # more pictures than picks: pictures spread over the set, one sample each
        chosen = [keys[p] for p in _strided(list(range(len(keys))), k)]
        return sorted(members[g][(len(members[g]) - 1) // 2] for g in chosen)
    quota = dict.fromkeys(keys, 1)
    for _ in range(k - len(keys)):  # the rest by size: the picture with the most samples per pick next
        g = max(keys, key=lambda g: (len(members[g]) / (quota[g] + 1), -keys.index(g)))
        quota[g] += 1
    picked: list[int] = []
    for g in keys:
        m = members[g]
        picked += m if quota[g] >= len(m) else _strided(m, quota[g])
    return sorted(picked)


def spread(idx: Sequence[int], k: int, groups: Sequence[str] | None = None) -> list[int]:
    """``k`` of the sample indices ``idx`` (all when fewer), spread over the set: by picture when
    ``groups`` (sample index -> picture) is informative, else strided (module docstring)."""
    idx = list(idx)
    if k >= len(idx):
        return idx
    if k <= 0:
        return []
    if groups is not None and informative([groups[i] for i in idx]):
        return _by_group(idx, k, groups)
    return _strided(idx, k)
