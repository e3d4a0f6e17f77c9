"""Linear chains collapsed for the layout of a large graph (app/canvas/layout.py).

A run of nodes where each has one successor, that successor has no other predecessor and sits
one layer lower (Relu -> Sigmoid -> Relu between two Adds), is laid out as one tall box: the
crossing sweeps and the coordinate placement then visit one row instead of one per node, and
a long edge beside the run needs one dummy instead of one per layer. The run's nodes are then
stacked inside its box, centred, ``gap`` apart, so they line up as the full layout would put
them (a straight column); the edges between them are straight and have no bend points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Collapsed:
    """The graph with its chains as single nodes: per collapsed node its members (top first),
    its size, the edges between collapsed nodes with their ports (also as arrays, ``du -> dv``),
    and for each such edge the original edge it stands for."""

    members: list[list[int]]
    rep: list[int]  # original node -> collapsed node
    sizes: list[tuple[float, float]]
    dag: list[tuple[int, int]]
    ports: list[tuple[float, float]]
    du: np.ndarray
    dv: np.ndarray
    pinned_mask: np.ndarray
    original_edge: dict[tuple[int, int], tuple[int, int]]


def collapse_chains(order: np.ndarray, du: np.ndarray, dv: np.ndarray, ports: np.ndarray, layer: np.ndarray,
                    live: np.ndarray, sizes: Sequence[tuple[float, float]], pinned: np.ndarray, gap: float
                    ) -> Collapsed | None:
    """Collapse the chains of the layered DAG ``du -> dv`` (nodes in topological ``order``; see the
    module docstring); None when it has none."""
    n = len(order)
    size = np.asarray(sizes, dtype=float).reshape(n, 2)
    out_deg, in_deg = np.bincount(du, minlength=n), np.bincount(dv, minlength=n)
    succ = np.full(n, -1, dtype=np.int64)
    succ[du[::-1]] = dv[::-1]  # a node's first successor (its only one where it matters)
    w = np.where(out_deg == 1, succ, 0)
    linked = ((out_deg == 1) & ~pinned & (in_deg[w] == 1) & ~pinned[w] & (layer[w] == layer + 1)
              & (live[w] == live) & (size[w, 0] == size[:, 0]))
    if not linked.any():
        return None
    nxt = np.where(linked, w, -1).tolist()
    inner = np.zeros(n, dtype=np.bool_)  # a chain member other than its head
    inner[w[linked]] = True
    rep = [-1] * n
    members: list[list[int]] = []
    for v in order[~inner[order]].tolist():  # heads in topological order: the collapsed order is topological too
        run = [v]
        while nxt[run[-1]] >= 0:
            run.append(nxt[run[-1]])
        s = len(members)
        for u in run:
            rep[u] = s
        members.append(run)
    rep_a = np.asarray(rep, dtype=np.int64)
    count = np.bincount(rep_a, minlength=len(members))
    width = np.zeros(len(members))
    np.maximum.at(width, rep_a, size[:, 0])
    height = np.bincount(rep_a, weights=size[:, 1], minlength=len(members)) + gap * (count - 1)
    a, b = rep_a[du], rep_a[dv]
    between = a != b  # not inside a chain
    ca, cb, cp = a[between], b[between], ports[between]
    pairs = list(zip(ca.tolist(), cb.tolist()))
    mask = np.zeros(len(members), dtype=np.bool_)
    mask[rep_a[pinned]] = True
    return Collapsed(members, rep, list(zip(width.tolist(), height.tolist())), pairs,
                     list(zip(cp[:, 0].tolist(), cp[:, 1].tolist())), ca, cb, mask,
                     dict(zip(pairs, zip(du[between].tolist(), dv[between].tolist()))))


def expand_positions(c: Collapsed, positions: list[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                     gap: float) -> list[tuple[float, float]]:
    """Top-left corners of the original nodes from those of the collapsed ones."""
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(sizes)
    for s, run in enumerate(c.members):
        x, y = positions[s]
        width = c.sizes[s][0]
        for u in run:
            w, h = sizes[u]
            out[u] = (x + (width - w) / 2, y)
            y += h + gap
    return out
