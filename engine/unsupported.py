"""Ops and domains NPU Studio does not know, named once with how many nodes use them.

A model may load and be inspected with such ops (``inspect`` lists them); every command that
has to run or rewrite the graph stops with ``unsupported_message``, one line naming the op, its
domain and its node count, or, when no op of that domain is known at all, the unknown domain.
"""

from __future__ import annotations

from collections import Counter

from engine.ir.graph import Graph
from nodes import registry


def _dom(domain: str) -> str:
    return domain or "ai.onnx"


def known_domains() -> set[str]:
    """The operator domains NPU Studio has specs for ("ai.onnx" for the default domain)."""
    return {_dom(s.domain) for s in registry.all_specs()}


def unknown_ops(graph: Graph) -> Counter[tuple[str, str]]:
    """(domain, op_type) -> node count of every op without a spec, bodies included."""
    root = graph
    while getattr(root, "parent", None) is not None:
        root = root.parent
    return Counter((_dom(n.domain), n.op_type) for n in root.all_nodes()
                   if registry.get(n.op_type, n.domain) is None)


def unsupported_message(graph: Graph, op_type: str, domain: str) -> str:
    """One line: the unknown domain, or the unknown op with its domain and node count."""
    counts = unknown_ops(graph)
    dom = _dom(domain)
    known = known_domains()
    if dom not in known:
        ops = sorted((op, n) for (d, op), n in counts.items() if d == dom) or [(op_type, 1)]
        total = sum(n for _, n in ops)
        listed = ", ".join(f"{op} x{n}" for op, n in ops)
        return (f"operator domain {dom!r} is unknown to NPU Studio (it knows {', '.join(sorted(known))}); "
                f"{total} node{'s' if total != 1 else ''} use it: {listed}")
    n = counts.get((dom, op_type), 1)
    others = len(counts) - 1
    tail = f"; {others} other unsupported op type{'s' if others != 1 else ''} (see `inspect`)" if others > 0 else ""
    return (f"op {op_type!r} of domain {dom!r} is not supported ({n} node{'s' if n != 1 else ''} "
            f"use{'s' if n == 1 else ''} it){tail}")
