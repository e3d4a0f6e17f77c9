"""Structural checks of a graph: cycles, undefined values, broken use-def links."""

from __future__ import annotations

from engine.diagnostics import ERROR, Diagnostic
from engine.ir.graph import Graph, GraphError, Value


def _defined(v: Value, scope: Graph) -> bool:
    """True when ``v`` is produced, an input or an initializer of ``scope`` or an enclosing graph."""
    if v.producer() is not None or v.const is not None:
        return True
    g: Graph | None = scope
    while g is not None:
        if any(i is v for i in g.inputs) or v.name in g.overridable:
            return True
        g = g.parent
    return False


def _recorded_uses(v: Value, cache: dict[int, set[tuple[int, int]]]) -> set[tuple[int, int]]:
    """The (node id, input index) uses ``v`` records, as a set (built once per value)."""
    if len(v._uses) <= 8:  # small: a set is not worth building
        return {(id(n), k) for n, k in v._uses}
    uses = cache.get(id(v))
    if uses is None:
        uses = cache[id(v)] = {(id(n), k) for n, k in v._uses}
    return uses


def verify(graph: Graph) -> list[Diagnostic]:
    """All structural errors of the graph and its subgraphs (empty when healthy)."""
    out: list[Diagnostic] = []
    _verify(graph, out)
    return out


def _verify(g: Graph, out: list[Diagnostic]) -> None:
    try:
        g.toposort()
    except GraphError as exc:
        out.append(Diagnostic(ERROR, None, "cycle", str(exc)))
    recorded: dict[int, set[tuple[int, int]]] = {}  # value -> its recorded (node, index) uses
    for node in g.nodes:
        for i, v in enumerate(node.inputs):
            if v is None:
                continue
            if not _defined(v, g):
                out.append(Diagnostic(ERROR, node.name, "undefined-input",
                                      f"node {node.name!r} ({node.op_type}) reads {v.name!r}, which nothing produces"))
            elif (id(node), i) not in _recorded_uses(v, recorded):
                out.append(Diagnostic(ERROR, node.name, "use-def",
                                      f"value {v.name!r} does not record its use by {node.name!r}"))
        for k, v in enumerate(node.outputs):
            if v is not None and (v.producer() is not node or v.producer_index() != k):
                out.append(Diagnostic(ERROR, node.name, "use-def",
                                      f"output {v.name!r} of {node.name!r} names another producer"))
        for sg in node.subgraphs():
            _verify(sg, out)
    seen: set[str] = set()
    for v in g.outputs:
        if not _defined(v, g):
            out.append(Diagnostic(ERROR, None, "undefined-output", f"graph output {v.name!r} is never produced"))
        if v.name in seen and g.parent is None:
            out.append(Diagnostic(ERROR, None, "duplicate-output", f"graph output {v.name!r} is listed twice"))
        seen.add(v.name)


def check(graph: Graph) -> None:
    """Raise GraphError with the first structural error, if any."""
    errors = verify(graph)
    if errors:
        raise GraphError(errors[0].message)
