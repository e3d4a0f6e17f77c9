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


@dataclass
class Collapsed:
    """The graph with its chains as single nodes: per collapsed node its members (top first),
    its size, the edges between collapsed nodes with their ports, and for each such edge the
    original edge it stands for."""

    members: list[list[int]]
    rep: list[int]  # original node -> collapsed node
    order: list[int]
    sizes: list[tuple[float, float]]
    dag: list[tuple[int, int]]
    ports: list[tuple[float, float]]
    pinned: set[int]
    original_edge: dict[tuple[int, int], tuple[int, int]]


def collapse_chains(n: int, order: list[int], dag: list[tuple[int, int]], ports: list[tuple[float, float]],
                    succ: list[list[int]], pred: list[list[int]], layer: list[int], live: list[bool],
                    sizes: Sequence[tuple[float, float]], pinned: set[int], gap: float) -> Collapsed | None:
    """Collapse the chains of the layered DAG (see the module docstring); None when it has none."""
    nxt = [-1] * n
    linked = False
    for v in range(n):
        if len(succ[v]) == 1 and v not in pinned:
            w = succ[v][0]
            if (len(pred[w]) == 1 and w not in pinned and layer[w] == layer[v] + 1 and live[w] == live[v]
                    and sizes[w][0] == sizes[v][0]):
                nxt[v] = w
                linked = True
    if not linked:
        return None
    inner = [False] * n  # a chain member other than its head
    for v in range(n):
        if nxt[v] >= 0:
            inner[nxt[v]] = True
    rep = [-1] * n
    members: list[list[int]] = []
    new_sizes: list[tuple[float, float]] = []
    for v in order:  # heads in topological order: the collapsed order is topological too
        if inner[v]:
            continue
        run = [v]
        while nxt[run[-1]] >= 0:
            run.append(nxt[run[-1]])
        s = len(members)
        for u in run:
            rep[u] = s
        members.append(run)
        new_sizes.append((max(sizes[u][0] for u in run), sum(sizes[u][1] for u in run) + gap * (len(run) - 1)))
    new_dag, new_ports, original = [], [], {}
    for (u, v), p in zip(dag, ports):
        a, b = rep[u], rep[v]
        if a == b:
            continue  # inside a chain
        new_dag.append((a, b))
        new_ports.append(p)
        original[(a, b)] = (u, v)
    return Collapsed(members, rep, list(range(len(members))), new_sizes, new_dag, new_ports,
                     {rep[v] for v in pinned}, original)


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
