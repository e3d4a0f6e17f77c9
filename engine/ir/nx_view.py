"""A derived, read-only networkx view of a graph for algorithms (never the source of truth)."""

from __future__ import annotations

import networkx as nx

from engine.ir.graph import Graph


def to_networkx(graph: Graph) -> nx.DiGraph:
    """A DiGraph whose nodes are node names (attribute ``node`` holds the IR Node) and whose
    edges carry the value name and its byte size when known."""
    dg = nx.DiGraph()
    for n in graph.nodes:
        dg.add_node(n.name, node=n, op_type=n.op_type)
    for n in graph.nodes:
        for v in n.inputs:
            if v is None:
                continue
            p = v.producer()
            if p is not None and p.graph is graph:
                dg.add_edge(p.name, n.name, value=v.name, nbytes=v.type.nbytes() or 0)
    return dg
