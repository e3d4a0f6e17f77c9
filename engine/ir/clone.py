"""Copying a graph: an independent IR clone (same names, same structure, fresh objects).

Constant arrays are shared between the original and the clone: the IR treats arrays held in
initializers and attributes as immutable (passes build new arrays instead of writing into
old ones), so sharing them is safe and keeps a clone cheap. Node metadata is copied one
level deep (``meta["provenance"]`` lists are copied); a fused ``activation`` is immutable and shared.
"""

from __future__ import annotations

import copy
from typing import Any

from engine.ir.graph import Graph, Node, Value


def _copy_meta(meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in meta.items():
        if isinstance(v, (list, dict, set)):
            out[k] = copy.deepcopy(v)
        else:
            out[k] = v
    return out


def _copy_attr(value: Any, new_parent: Graph, vmap: dict[int, Value]) -> Any:
    if isinstance(value, Graph):
        return _clone(value, new_parent, vmap)
    if isinstance(value, list):
        return [_copy_attr(v, new_parent, vmap) for v in value]
    return value  # ints, floats, strings, arrays (immutable by convention), protos


def _clone(src: Graph, parent: Graph | None, vmap: dict[int, Value]) -> Graph:
    g = Graph(src.name, parent)
    for attr in Graph.COPIED_FIELDS:
        setattr(g, attr, copy.copy(getattr(src, attr)))

    def value(v: Value) -> Value:
        nv = vmap.get(id(v))
        if nv is None:
            nv = Value(v.name, v.type, v.const)
            nv.doc_string = v.doc_string
            vmap[id(v)] = nv
        return nv

    # Values owned by this graph, registered up front so names resolve the same way.
    for name, v in src.values.items():
        nv = value(v)
        nv.graph = g
        g.values[name] = nv
    for name, v in src.initializers.items():
        g.initializers[name] = value(v)
    g.inputs = [value(v) for v in src.inputs]
    for src_node in tuple(src._nodes.values()):  # never fills the source's cache (worker threads)
        node = Node(src_node.op_type, [value(v) if v is not None else None for v in src_node.inputs],
                    [value(v) if v is not None else None for v in src_node.outputs],
                    name=src_node.name, domain=src_node.domain)
        node.attr_types = dict(src_node.attr_types)
        node.doc_string = src_node.doc_string
        node.meta = _copy_meta(src_node.meta) if src_node.meta else {}
        node.activation = src_node.activation
        node.graph = g
        # Use-def links directly (add_node would emit an event and bump the version per node).
        for i, v in enumerate(node._inputs):
            if v is not None:
                if v.graph is None:
                    g.add_value(v)
                v._uses.append((node, i))
        for k, out in enumerate(node.outputs):
            if out is not None:
                if out.graph is None:
                    g.add_value(out)
                out._producer, out._producer_index = node, k
        g._nodes[id(node)] = node
        # Subgraphs read outer values through vmap, so they are built after the node exists.
        node.attrs = {k: _copy_attr(v, g, vmap) for k, v in src_node.attrs.items()} if src_node.attrs else {}
        g._taken.add(node.name)
    g.outputs = [value(v) for v in src.outputs]
    g._taken |= src._taken
    g.version = 0
    return g


def clone_graph(graph: Graph) -> Graph:
    """An independent copy of ``graph`` (and its subgraphs) with the same names.

    Every field in ``Graph.COPIED_FIELDS`` is copied (the loader's ``diagnostics`` and
    ``source_path`` among them). Event listeners are not: the clone starts with no observers.
    """
    vmap: dict[int, Value] = {}
    # Outer-scope values of a subgraph clone map to themselves when cloning a subgraph alone.
    return _clone(graph, graph.parent, vmap)


class Checkpoint:
    """A cheap record of a graph's state that ``restore()`` puts back on the same objects.

    Much cheaper than a clone: it copies the lists and dicts that edits replace (node inputs,
    outputs, attributes, metadata; the graph's node, value and initializer tables; value names,
    types and constants) and rebuilds use-def links on restore. It relies on the IR convention
    that attribute values, metadata entries and arrays are replaced, never changed in place.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._graphs: list[tuple] = []
        stack = [graph]
        while stack:
            g = stack.pop()
            nodes = [(n, n._inputs[:], n.outputs[:], n.attrs.copy(), n.attr_types.copy(), n.meta.copy(),
                      n.activation, n.op_type, n.name, n.domain) for n in g._nodes.values()]
            for n in g._nodes.values():
                for a in n.attrs.values():
                    if isinstance(a, (Graph, list)):
                        stack.extend(n.subgraphs())
                        break
            values = [(v, v.name, v.type, v.const) for v in g.values.values()]
            self._graphs.append((g, nodes, values, dict(g._nodes), dict(g.values), dict(g.initializers),
                                 list(g.inputs), list(g.outputs), dict(g.opset_imports), g.ir_version,
                                 list(g.overridable)))

    def restore(self) -> Graph:
        """Put every recorded field back; returns the graph."""
        for (g, nodes, values, node_table, value_table, inits, inputs, outputs, opsets, ir_version,
             overridable) in self._graphs:
            # Fresh copies again: the checkpoint may be restored more than once.
            for n, inputs_, outputs_, attrs, attr_types, meta, activation, op_type, name, domain in nodes:
                n._inputs, n.outputs, n.attrs = list(inputs_), list(outputs_), dict(attrs)
                n.attr_types, n.meta, n.activation = dict(attr_types), dict(meta), activation
                n.op_type, n.name, n.domain, n.graph = op_type, name, domain, g
            for v, name, type_, const in values:
                v.name, v.type, v.const, v.graph = name, type_, const, g
                v._producer, v._producer_index, v._uses = None, -1, []
            g._nodes, g.values, g.initializers = dict(node_table), dict(value_table), dict(inits)
            g.inputs, g.outputs, g.opset_imports, g.ir_version = list(inputs), list(outputs), dict(opsets), ir_version
            g.overridable = list(overridable)
        for _g, nodes, *_ in self._graphs:  # values read but registered nowhere (dangling)
            for n, *_rest in nodes:
                for v in n._inputs:
                    if v is not None:
                        v._uses = []
        for g, nodes, *_ in self._graphs:
            for n, *_rest in nodes:
                for i, v in enumerate(n._inputs):
                    if v is not None:
                        v._uses.append((n, i))
                for k, v in enumerate(n.outputs):
                    if v is not None:
                        v._producer, v._producer_index = n, k
            g._node_cache = None
            g._touch()
        return self.graph
