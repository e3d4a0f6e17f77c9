"""Hoisting what both branches of an If compute out of the If.

A node of then_branch and a node of else_branch with the same op, attributes and inputs,
where every input comes from outside the branches (a value of an enclosing graph, or a branch
constant whose array equals the other branch's), compute the same value whichever branch runs.
One copy before the If computes it once; both branches read that copy (an outer-scope value).
Exact: the hoisted op runs on the same inputs, once instead of in the taken branch. A node
whose output is a branch output stays (a branch must produce its outputs itself). Repeats
until nothing more comes out, so chains of such nodes (Gather -> Unsqueeze ...) move together.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.ir.graph import Graph, Node, Value
from engine.passes.base import Pass, PassResult, RuleEvent
from engine.passes.eliminate import _IMPURE, _attr_key
from engine.passes.rewrite import merge_provenance


def _input_key(v: Value | None, branch: Graph) -> Any:
    """What an input is, for matching across branches: the outer value itself, or the bytes of
    a branch constant (equal constants in both branches match). None when it is neither."""
    if v is None:
        return ("none",)
    if v.graph is not branch:
        return ("outer", id(v))
    if v.producer() is None and v.const is not None and v.const.dtype != np.dtype(object) and v.const.size <= 4096:
        return ("const", v.const.dtype.str, v.const.shape, v.const.tobytes())
    return None


def _node_key(n: Node, branch: Graph) -> Any:
    if (n.op_type in _IMPURE and n.domain == "") or any(True for _ in n.subgraphs()) or n.activation is not None:
        return None
    keys = [_input_key(v, branch) for v in n.inputs]
    if any(k is None for k in keys):
        return None
    if any(v is not None and v.is_graph_output for v in n.outputs):
        return None
    try:
        key = (n.op_type, n.domain, tuple(keys), _attr_key(n.attrs), len(n.outputs))
        hash(key)
    except TypeError:
        return None
    return key


class HoistCommonBranchNodes(Pass):
    """Compute once, before an If, what both of its branches compute from outer values."""

    name = "hoist_if_common"
    description = "Nodes both If branches compute from the same outer values move out of the If"
    scoped = True

    def call(self, graph: Graph) -> PassResult:
        """Hoist per If node of ``graph`` until nothing more moves."""
        events: list[RuleEvent] = []
        for node in list(graph.nodes):
            if node.op_type != "If" or node.domain or node.graph is not graph:
                continue
            then_g, else_g = node.attrs.get("then_branch"), node.attrs.get("else_branch")
            if not isinstance(then_g, Graph) or not isinstance(else_g, Graph):
                continue
            while self._hoist_one(graph, node, then_g, else_g, events):
                pass
        return PassResult(graph, bool(events), [], events)

    def _hoist_one(self, graph: Graph, if_node: Node, then_g: Graph, else_g: Graph,
                   events: list[RuleEvent]) -> bool:
        others: dict[Any, Node] = {}
        for m in else_g.toposort():
            k = _node_key(m, else_g)
            if k is not None:
                others.setdefault(k, m)
        for n in then_g.toposort():
            k = _node_key(n, then_g)
            m = others.get(k) if k is not None else None
            if m is None:
                continue
            inputs = [self._outer_input(graph, v, then_g) for v in n.inputs]
            new = graph.make_node(n.op_type, inputs, len(n.outputs), attrs=dict(n.attrs),
                                  name=f"{n.name or n.op_type.lower()}_hoisted", domain=n.domain)
            new.attr_types = dict(n.attr_types)
            new.meta["provenance"] = merge_provenance([n, m])
            for a, b, out in zip(n.outputs, m.outputs, new.outputs):
                if out is None:
                    continue
                out.type = a.type if a is not None else (b.type if b is not None else out.type)
                for old in (a, b):
                    if old is not None:
                        old.replace_all_uses_with(out, include_outputs=False)
            then_g.remove_node(n)
            else_g.remove_node(m)
            for branch in (then_g, else_g):
                branch.prune_values()
                for name, v in list(branch.initializers.items()):
                    if not v.uses() and not v.is_graph_output:
                        branch.remove_initializer(name)
            events.append(RuleEvent("hoist_if_common.node", if_node.name, True, result=new.name,
                                    op_type=new.op_type, nodes=[n.name, m.name]))
            return True
        return False

    @staticmethod
    def _outer_input(graph: Graph, v: Value | None, branch: Graph) -> Value | None:
        """The value the hoisted node reads: the outer value, or a copy of the branch constant."""
        if v is None or v.graph is not branch:
            return v
        return graph.add_initializer(v.name, v.const)  # type: ignore[arg-type]
