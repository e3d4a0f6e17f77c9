"""Graph editing helpers shared by the passes: provenance, name-keeping replacement, constants.

Two conventions keep rewritten models readable and their interface stable:

- A node that replaces others takes over the *Value objects* of the node it replaces, so the
  values (and the graph outputs among them) keep their names.
- Every rewritten node records ``meta["provenance"]``: the names of the original nodes it
  stands for (transitively: a Conv that absorbed a BatchNormalization and then a Relu lists
  all three).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from engine.ir.events import GraphIOChanged
from engine.ir.graph import Graph, Node, Value
from nodes.types import TensorType


def contiguous(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous array of the same shape (``np.ascontiguousarray`` turns 0-d into 1-d)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def provenance(node: Node) -> list[str]:
    """The original node names ``node`` stands for (its own name when never rewritten)."""
    prov = node.meta.get("provenance")
    return list(prov) if prov else [node.name]


def merge_provenance(nodes: Iterable[Node]) -> list[str]:
    """The provenance of several nodes, in order, without repeats."""
    out: list[str] = []
    seen: set[str] = set()
    for n in nodes:
        for name in provenance(n):
            if name not in seen:
                seen.add(name)
                out.append(name)
    return out


def const_value(v: Value | None) -> np.ndarray | None:
    """The array of a constant value (an initializer), else None."""
    if v is None or v.producer() is not None:
        return None
    return v.const


def is_scalar_close(arr: np.ndarray | None, target: float, rtol: float = 1e-3) -> bool:
    """True when ``arr`` holds one number (any shape of size 1) close to ``target``."""
    if arr is None or arr.size != 1 or arr.dtype.kind not in "fiu":
        return False
    x = float(arr.reshape(-1)[0])
    return abs(x - target) <= rtol * max(abs(target), 1e-12)



def add_constant(graph: Graph, base: str, array: np.ndarray) -> Value:
    """A new initializer named after ``base`` (made unique)."""
    return graph.add_initializer(base, contiguous(array))


def rename_value(graph: Graph, v: Value, name: str) -> None:
    """Give ``v`` a new (free) name, keeping initializer and overridable bookkeeping right."""
    old = v.name
    if old == name:
        return
    g = v.graph or graph
    if g.values.get(old) is v:
        del g.values[old]
    v.name = name
    g.values[name] = v
    if g.initializers.get(old) is v:
        del g.initializers[old]
        g.initializers[name] = v
    over = g.overridable
    if old in over:
        over[over.index(old)] = name
    g._touch()


def redirect_reason(old: Value, new: Value | None) -> str | None:
    """Why readers of ``old`` cannot be switched to ``new`` keeping names (None when they can).

    A graph output keeps its name by renaming ``new``, which is impossible when ``new`` is a
    graph input or already a graph output (or lives in another graph)."""
    if new is None:
        return "the replacement input is absent"
    if old is new or not old.is_graph_output:
        return None
    if new.graph is not old.graph:
        return f"{new.name!r} belongs to an enclosing graph"
    if new.is_graph_input or (new.graph is not None and new.name in new.graph.overridable):
        return f"{new.name!r} is a graph input and {old.name!r} a graph output; a node must stay between them"
    if new.is_graph_output:
        return f"{new.name!r} and {old.name!r} are both graph outputs"
    return None


def redirect(graph: Graph, old: Value, new: Value) -> str | None:
    """Make every reader of ``old`` read ``new``; a graph output ``old`` keeps its name by
    renaming ``new`` to it. Returns the reason (and changes nothing) when that is impossible
    (see ``redirect_reason``). ``old``'s producer is removed by the caller."""
    if old is new:
        return None
    reason = redirect_reason(old, new)
    if reason is not None:
        return reason
    old.replace_all_uses_with(new, include_outputs=False)
    if old.is_graph_output:
        g = old.graph or graph
        for i, out in enumerate(g.outputs):
            if out is old:
                g.set_output(i, new)
        name = old.name
        if g.values.get(name) is old:
            del g.values[name]
        old.graph = None
        if new.type.shape is None and old.type.shape is not None:
            new.type = TensorType(new.type.dtype or old.type.dtype, old.type.shape)
        rename_value(graph, new, name)
    return None


def value_to_initializer(graph: Graph, v: Value, array: np.ndarray) -> None:
    """Turn a value whose producer was removed into an initializer holding ``array``."""
    array = np.asarray(array)
    v.const = array
    v.type = TensorType.of(array)
    if v.graph is None:
        graph.add_value(v)
    v.graph.initializers[v.name] = v  # type: ignore[union-attr]
    v.graph._touch()  # type: ignore[union-attr]
    v.graph.events.emit(GraphIOChanged("initializers"))  # type: ignore[union-attr]


def remove_nodes(graph: Graph, nodes: Sequence[Node]) -> None:
    """Remove ``nodes``, readers before producers, so no orphan values stay behind."""
    pending = [n for n in nodes if n.graph is not None]
    ids = {id(n) for n in pending}
    while pending:
        progressed = False
        for n in list(pending):
            feeds_pending = any(id(u) in ids for out in n.outputs if out is not None for u, _ in out.uses())
            if not feeds_pending:
                n.graph.remove_node(n)  # type: ignore[union-attr]
                pending.remove(n)
                ids.discard(id(n))
                progressed = True
        if not progressed:  # a cycle among them: remove the rest as they are
            for n in pending:
                n.graph.remove_node(n)  # type: ignore[union-attr]
            break


def replace_with(graph: Graph, removed: Sequence[Node], root: Node, op_type: str,
                 inputs: Sequence[Value | None], attrs: dict[str, Any] | None = None, name: str | None = None,
                 domain: str = "", meta: dict[str, Any] | None = None,
                 attr_types: dict[str, int] | None = None) -> Node:
    """Replace the nodes ``removed`` (``root`` among them: the one whose outputs survive) by one
    new node that writes ``root``'s output values and records the merged provenance.

    ``name`` may be the name of one of the removed nodes (names are reused only then); the
    default is a fresh name derived from ``op_type``.
    """
    removed = list(removed)
    prov = merge_provenance(removed)
    outputs = list(root.outputs)
    free_names = {n.name for n in removed}
    remove_nodes(graph, removed)
    if name is None or name not in free_names:
        name = graph.unique_name(name or op_type.lower())
    node = Node(op_type, inputs, outputs, attrs, name=name, domain=domain)
    if attr_types:
        node.attr_types.update(attr_types)
    node.meta.update(meta or {})
    node.meta["provenance"] = prov
    graph.add_node(node)
    return node


def absorb(graph: Graph, keep: Node, absorbed: Sequence[Node], outputs_from: Node,
           inputs: Sequence[Value | None] | None = None, attrs: dict[str, Any] | None = None) -> Node:
    """Let ``keep`` (same object, same name) take over ``outputs_from``'s outputs, with new
    ``inputs``/``attrs`` when given, and remove ``absorbed``. Provenance is merged in order
    ``keep`` first."""
    prov = merge_provenance([keep, *absorbed])
    outputs = list(outputs_from.outputs)
    new_inputs = list(inputs) if inputs is not None else list(keep.inputs)
    remove_nodes(graph, [keep, *absorbed])
    keep._inputs = new_inputs
    keep.outputs = outputs
    if attrs is not None:
        keep.attrs = dict(attrs)
        keep.attr_types = {k: t for k, t in keep.attr_types.items() if k in keep.attrs}
    keep.meta["provenance"] = prov
    graph.add_node(keep)
    return keep


def _common_prefix(names: Sequence[str]) -> str:
    first, last = min(names), max(names)
    k = 0
    while k < min(len(first), len(last)) and first[k] == last[k]:
        k += 1
    return first[:k]


def fused_name(graph: Graph, op_type: str, nodes: Sequence[Node]) -> str:
    """A fresh name for a node replacing ``nodes``: ``<common prefix><op_type>`` when the names
    share a path-like prefix (exporter names such as ``/enc/ln/ReduceMean``), else ``op_type``."""
    names = [n.name for n in nodes if n.name]
    prefix = _common_prefix(names) if len(names) > 1 else ""
    cut = max((prefix.rfind(c) for c in "/."), default=-1)
    base = prefix[:cut + 1] + op_type if cut >= 1 else op_type
    return graph.unique_name(base)
