"""A plain snapshot of a graph's drawing structure, taken on the GUI thread (or before the
graph is shown) and handed to the layout worker: keys, sizes and edges, nothing live."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app import style
from app.canvas.group_item import CHIP_GAP, CHIP_H, CHIP_W, MARGIN, TITLE, provenance_of
from app.canvas.layout import LayoutInput, LayoutResult
from app.canvas.node_item import input_port_xs, node_port_counts
from app.canvas.port_item import port_x
from engine.ir.graph import Graph


@dataclass
class GraphSnapshot:
    """Layout keys (``id(node)``, ``("in", name)``, ``("out", k)``) and the layout input."""

    keys: list[Any]
    data: LayoutInput
    # Offset of the node's own rectangle inside its layout box (fused groups reserve a frame).
    offsets: dict[Any, tuple[float, float]]
    # Per edge of ``data.edges``: the input slot it feeds, (id(node), index) or (("out", k), 0).
    slots: list[tuple[Any, int]] = field(default_factory=list)
    # Per key: the node it stands for (None for graph inputs and outputs), so the GUI thread
    # finds a key's node without a pass over the graph (items made on demand).
    nodes: list[Any] = field(default_factory=list)
    index: dict[Any, int] = field(default_factory=dict)  # key -> its position in ``keys``


def routes_by_key(snapshot: GraphSnapshot, result: LayoutResult) -> dict[tuple[Any, Any], list[tuple[float, float]]]:
    """The bend points of each long edge of ``result`` keyed by its ends' layout keys."""
    keys = snapshot.keys
    return {(keys[u], keys[v]): pts for (u, v), pts in result.routes.items()}


def node_box(node: Any, expanded: bool) -> tuple[float, float, float, float]:
    """(width, height, dx, dy): the layout box of a node and where the node sits in it."""
    w, h = style.NODE_WIDTH, style.NODE_HEIGHT
    prov = provenance_of(node)
    if not prov:
        return w, h, 0.0, 0.0
    bw, bh = w + 2 * MARGIN, h + MARGIN + TITLE
    if expanded:
        chips = len(prov) * (CHIP_H + CHIP_GAP) - CHIP_GAP + TITLE + 2 * MARGIN
        bw += CHIP_W + 3 * MARGIN
        bh = max(bh, chips)
    return bw, bh, MARGIN, TITLE


def take_snapshot(graph: Graph, expanded: Iterable[int] = ()) -> GraphSnapshot:
    """Snapshot ``graph`` for layout; ``expanded`` holds keys of expanded fused groups."""
    expanded = set(expanded)
    keys: list[Any] = []
    sizes: list[tuple[float, float]] = []
    offsets: dict[Any, tuple[float, float]] = {}
    index: dict[Any, int] = {}
    for v in graph.inputs:
        key = ("in", v.name)
        index[key] = len(keys)
        keys.append(key)
        sizes.append((style.IO_WIDTH, style.IO_HEIGHT))
    for n in graph.nodes:
        key = id(n)
        index[key] = len(keys)
        keys.append(key)
        w, h, dx, dy = node_box(n, key in expanded)
        sizes.append((w, h))
        if dx or dy:
            offsets[key] = (dx, dy)
    edges: list[tuple[int, int]] = []
    slots: list[tuple[Any, int]] = []
    ports: list[tuple[float, float]] = []  # port x relative to the node centres (see LayoutInput)
    w, half = style.NODE_WIDTH, style.NODE_WIDTH / 2
    n_outs: dict[int, int] = {}
    # Port counts and input x by what they depend on: op, domain, output count and per input slot
    # absent / weight / data (a large graph has few such shapes: 10,000 nodes, a handful of keys).
    shapes: dict[tuple, tuple[tuple[int, int], list[float]]] = {}
    for n in graph.nodes:
        dst = index[id(n)]
        ins = n._inputs
        key = (n.op_type, n.domain, len(n.outputs),
               tuple(0 if v is None else 1 if v.const is not None and v._producer is None else 2 for v in ins))
        shape = shapes.get(key)
        if shape is None:
            counts = node_port_counts(n)
            shape = shapes[key] = (counts, input_port_xs(n, w, max(counts[0], len(ins))))
        counts, in_xs = shape
        n_outs[id(n)] = counts[1]
        for i, v in enumerate(ins):
            if v is None:
                continue
            src = _source_index(v, index)
            if src is not None:
                edges.append((src, dst))
                slots.append((id(n), i))
                ports.append((_out_dx(v, n_outs, graph), in_xs[i] - half))
    for k, v in enumerate(graph.outputs):
        key = ("out", k)
        index[key] = len(keys)
        keys.append(key)
        sizes.append((style.IO_WIDTH, style.IO_HEIGHT))
        src = _source_index(v, index)
        if src is not None:
            edges.append((src, index[key]))
            slots.append((key, 0))
            ports.append((_out_dx(v, n_outs, graph), 0.0))
    top = {i for i, k in enumerate(keys) if isinstance(k, tuple) and k[0] == "in"}
    nodes = [None] * len(graph.inputs) + list(graph.nodes) + [None] * len(graph.outputs)
    return GraphSnapshot(keys, LayoutInput(sizes, edges, top, ports), offsets, slots, nodes, index)


def _out_dx(v: Any, n_outs: dict[int, int], graph: Graph) -> float:
    """x of the output port that produces ``v``, relative to its node's centre."""
    p = v.producer()
    if p is None:
        return 0.0
    n_out = n_outs.get(id(p))
    if n_out is None:
        n_out = n_outs[id(p)] = node_port_counts(p)[1]
    return port_x(style.NODE_WIDTH, n_out, v.producer_index()) - style.NODE_WIDTH / 2


def _source_index(v: Any, index: dict[Any, int]) -> int | None:
    p = v.producer()
    if p is not None:
        return index.get(id(p))
    return index.get(("in", v.name))
