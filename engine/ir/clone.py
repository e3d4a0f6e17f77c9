"""Copying a graph: an independent IR clone (same names, same structure, fresh objects).

Constant arrays are shared between the original and the clone: the IR treats arrays held in
initializers and attributes as immutable (passes build new arrays instead of writing into
old ones), so sharing them is safe and keeps a clone cheap. Node metadata is copied one
level deep (``meta["provenance"]`` lists and ``meta["activation"]`` dicts are copied).
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
    g.doc_string = src.doc_string
    for attr in ("opset_imports", "metadata_props"):
        setattr(g, attr, dict(getattr(src, attr)))
    for attr in ("ir_version", "producer_name", "producer_version", "model_version", "model_doc_string"):
        setattr(g, attr, getattr(src, attr))
    g.functions = list(src.functions)
    g.sparse_initializers = list(src.sparse_initializers)
    if hasattr(src, "overridable"):
        g.overridable = list(src.overridable)  # type: ignore[attr-defined]

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
    for src_node in src.nodes:
        node = Node(src_node.op_type,
                    [value(v) if v is not None else None for v in src_node.inputs],
                    [value(v) if v is not None else None for v in src_node.outputs],
                    name=src_node.name, domain=src_node.domain)
        node.attr_types = dict(src_node.attr_types)
        node.doc_string = src_node.doc_string
        node.meta = _copy_meta(src_node.meta)
        g.add_node(node)
        # Subgraphs read outer values through vmap, so they are built after the node exists.
        node.attrs = {k: _copy_attr(v, g, vmap) for k, v in src_node.attrs.items()}
    g.outputs = [value(v) for v in src.outputs]
    g._taken |= src._taken
    g.version = 0
    return g


def clone_graph(graph: Graph) -> Graph:
    """An independent copy of ``graph`` (and its subgraphs) with the same names.

    Extra attributes a loader attached (``diagnostics``, ``source_path``) are copied too.
    Event listeners are not: the clone starts with no observers.
    """
    vmap: dict[int, Value] = {}
    # Outer-scope values of a subgraph clone map to themselves when cloning a subgraph alone.
    g = _clone(graph, graph.parent, vmap)
    for attr in ("diagnostics", "source_path"):
        if hasattr(graph, attr):
            setattr(g, attr, copy.copy(getattr(graph, attr)))
    return g
