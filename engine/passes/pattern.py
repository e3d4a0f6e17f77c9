"""Rewrite rules: a pattern, a check that says why a match does not apply, and a rewrite.

Patterns are small trees matched from a root node up through producers::

    Op("BatchNormalization", Op("Conv", name="conv"), Const("scale"), Const("bias"),
       Const("mean"), Const("var"), name="bn")

- ``Op(op_types, *inputs, name=..)`` matches a value produced by one of ``op_types`` whose
  inputs match ``inputs`` (a ``None`` entry matches anything; ``any_inputs=True`` skips the
  inputs, ``extra=True`` ignores inputs after the given ones). Add, Mul, Sum, Max and Min with
  two inputs match in either order. Two ``Op``s with the same name must be the same node.
- ``Var(name)`` matches any value; the same name twice means the same value.
- ``Const(name, value=..)`` matches a constant (initializer), optionally a scalar close to
  ``value`` or one accepted by ``pred``.
- ``Alt(p1, p2, ..)`` matches any alternative; ``Opt(p, name)`` is ``p`` or an absent input.

A ``Rule`` tries every match of its pattern at a node. Before the rule's own ``check`` the
matcher makes sure the match is self-contained: values computed inside the match are read
only by matched nodes (and are not graph outputs), because those nodes disappear. The first
match whose check returns None is rewritten; otherwise the first reason is reported as "matched
but did not fire" (an event in the trace and an info Diagnostic; a warning when the reason is
an opset that could not be raised). ``RulePass`` sweeps the graph with a set of rules until
nothing fires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.diagnostics import INFO, WARNING, Diagnostic
from engine.ir.graph import Graph, Node, Value
from engine.passes.base import Pass, PassResult, RuleEvent
from engine.passes.opset import is_opset_reason
from engine.passes.rewrite import const_value, is_scalar_close, provenance

COMMUTATIVE = frozenset({"Add", "Mul", "Sum", "Max", "Min"})

Bindings = dict[str, Any]


class Pattern:
    """Base class of pattern nodes."""

    def match(self, v: Value | None, b: Bindings) -> Iterator[Bindings]:
        """Every way this pattern matches value ``v`` extending bindings ``b``."""
        raise NotImplementedError


def _bind(b: Bindings, name: str, v: Value | None) -> Iterator[Bindings]:
    """``b`` extended with ``name`` -> ``v``; when ``name`` is already bound it must be ``v``."""
    if name in b:
        if b[name] is v:
            yield b
        return
    yield {**b, name: v}


@dataclass
class Var(Pattern):
    """Any value (``None`` for an absent optional input only with ``optional``)."""

    name: str
    optional: bool = False

    def match(self, v: Value | None, b: Bindings) -> Iterator[Bindings]:
        """Bind ``name`` to ``v`` (or require the same value when already bound)."""
        if v is None and not self.optional:
            return
        yield from _bind(b, self.name, v)


@dataclass
class Const(Pattern):
    """A constant value (initializer); ``value`` asks for a scalar close to it."""

    name: str
    value: float | None = None
    pred: Callable[[np.ndarray], bool] | None = None

    def match(self, v: Value | None, b: Bindings) -> Iterator[Bindings]:
        """Bind ``name`` to a constant value that satisfies the conditions."""
        arr = const_value(v)
        if arr is None:
            return
        if self.value is not None and not is_scalar_close(arr, self.value):
            return
        if self.pred is not None and not self.pred(arr):
            return
        yield from _bind(b, self.name, v)


@dataclass
class Op(Pattern):
    """A value produced by a node of one of ``op_types`` (a string or a tuple of strings)."""

    op_types: str | tuple[str, ...]
    inputs: tuple[Pattern | None, ...] | None
    name: str | None = None
    where: Callable[[Node], bool] | None = None
    output: int = 0

    def __init__(self, op_types: str | tuple[str, ...], *inputs: Pattern | None, name: str | None = None,
                 where: Callable[[Node], bool] | None = None, output: int = 0, any_inputs: bool = False,
                 extra: bool = False) -> None:
        self.op_types = (op_types,) if isinstance(op_types, str) else tuple(op_types)
        self.inputs = None if any_inputs else tuple(inputs)
        self.name = name
        self.where = where
        self.output = output
        self.extra = extra  # inputs after the given patterns are not looked at

    def match(self, v: Value | None, b: Bindings) -> Iterator[Bindings]:
        """Match the producer of ``v`` and then its inputs."""
        if v is None:
            return
        node = v.producer()
        if node is None or node.op_type not in self.op_types or node.domain != "":
            return
        if v.producer_index() != self.output:
            return
        if self.name is not None:
            bound = b.get(self.name)
            if bound is not None:
                if bound is node:
                    yield b
                return
            b = {**b, self.name: node}
        b = {**b, f"#node{id(node)}": node}
        if self.where is not None and not self.where(node):
            return
        if self.inputs is None:
            yield b
            return
        ins = list(node.inputs)
        if self.extra:
            ins = ins[:len(self.inputs)]
        while len(ins) > len(self.inputs) and ins[-1] is None:
            ins.pop()
        if len(ins) > len(self.inputs):
            return
        ins += [None] * (len(self.inputs) - len(ins))
        orders = [ins]
        if node.op_type in COMMUTATIVE and len(ins) == 2 and ins[0] is not ins[1]:
            orders.append([ins[1], ins[0]])
        for order in orders:
            yield from _match_seq(self.inputs, order, b)


def _match_seq(pats: Sequence[Pattern | None], values: Sequence[Value | None], b: Bindings) -> Iterator[Bindings]:
    if not pats:
        yield b
        return
    head, rest = pats[0], pats[1:]
    if head is None:
        yield from _match_seq(rest, values[1:], b)
        return
    for b2 in head.match(values[0], b):
        yield from _match_seq(rest, values[1:], b2)


@dataclass
class Alt(Pattern):
    """Any one of several patterns."""

    options: tuple[Pattern, ...]

    def __init__(self, *options: Pattern) -> None:
        self.options = options

    def match(self, v: Value | None, b: Bindings) -> Iterator[Bindings]:
        """Every match of every option."""
        for p in self.options:
            yield from p.match(v, b)


def Opt(p: Pattern, name: str) -> Pattern:
    """An optional input: ``p``, or an absent input (``name`` is then bound to None)."""
    return Alt(p, _Absent(name))


@dataclass
class _Absent(Pattern):
    name: str

    def match(self, v: Value | None, b: Bindings) -> Iterator[Bindings]:
        """Match an absent input only."""
        if v is None:
            yield {**b, self.name: None}


@dataclass
class Match:
    """A match of a rule's pattern: the root node, every matched node and the bindings."""

    root: Node
    nodes: list[Node]
    bindings: Bindings = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.bindings[name]

    def get(self, name: str, default: Any = None) -> Any:
        """A binding or ``default``."""
        return self.bindings.get(name, default)

    def const(self, name: str) -> np.ndarray | None:
        """The array of a bound constant value (None when absent)."""
        v = self.bindings.get(name)
        return None if v is None else v.const


def match_pattern(pattern: Pattern, node: Node) -> Iterator[Match]:
    """Every distinct match of ``pattern`` whose root is ``node`` (its first output)."""
    if not node.outputs or node.outputs[0] is None:
        return
    seen: set[tuple[int, ...]] = set()
    for b in pattern.match(node.outputs[0], {}):
        nodes = [x for k, x in b.items() if k.startswith("#node")]
        key = tuple(sorted(id(v) for v in b.values()))
        if key in seen:
            continue
        seen.add(key)
        named = {k: x for k, x in b.items() if not k.startswith("#")}
        yield Match(node, [node, *[n for n in nodes if n is not node]], named)


class Rule:
    """A rewrite rule: subclasses set ``name``, ``pattern`` and implement ``check``/``rewrite``.

    A rule without a pattern overrides ``matches``. ``contained = False`` lets matched inner
    nodes have readers outside the match (the rule then keeps them).
    """

    name: str = ""
    pattern: Pattern | None = None
    anchors: tuple[str, ...] = ()
    contained: bool = True

    def __init__(self) -> None:
        if not self.anchors and isinstance(self.pattern, Op):
            self.anchors = self.pattern.op_types

    def matches(self, node: Node) -> Iterator[Match]:
        """Every match of the pattern with ``node`` as its root."""
        if self.pattern is not None:
            yield from match_pattern(self.pattern, node)

    def check(self, graph: Graph, m: Match) -> str | None:
        """Why this match must not be rewritten, or None when it may be."""
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node | None:
        """Rewrite the match; returns the node that now computes the root's outputs (None when
        the match was simply removed)."""
        raise NotImplementedError


def containment_reason(m: Match) -> str | None:
    """Why the matched nodes cannot all be removed: an inner value escapes the match."""
    ids = {id(n) for n in m.nodes}
    for n in m.nodes:
        if n is m.root:
            continue
        for out in n.outputs:
            if out is None:
                continue
            if out.is_graph_output:
                return f"{out.name!r} (output of {n.name!r}) is a graph output"
            for user, _ in out.uses():
                if id(user) not in ids:
                    return (f"{out.name!r} (output of {n.name!r}, {n.op_type}) is also read by "
                            f"{user.name!r} ({user.op_type}) outside the pattern")
    for n in m.nodes:
        if n is not m.root and n.activation:
            return f"{n.name!r} already carries a fused {n.activation.op_type}"
    return None


class RulePass(Pass):
    """A pass that applies a set of rules until none fires (each rule may be switched off by
    name). A sweep visits the nodes in insertion order; sweeps repeat while rules fire."""

    def __init__(self, name: str, rules: Sequence[Rule], description: str = "", max_sweeps: int = 8,
                 disabled: Sequence[str] = ()) -> None:
        self.name = name
        self.description = description
        self.rules = [r for r in rules if r.name not in set(disabled)]
        self.all_rules = list(rules)
        self.max_sweeps = max_sweeps
        self._by_anchor: dict[str, list[Rule]] = {}
        for r in self.rules:
            for op in r.anchors:
                self._by_anchor.setdefault(op, []).append(r)

    def names(self) -> set[str]:
        """The pass name and every rule name."""
        return {self.name, *(r.name for r in self.all_rules)}

    def call(self, graph: Graph) -> PassResult:
        """Sweep the graph in topological order, rewriting where a rule fires."""
        events: list[RuleEvent] = []
        refused: dict[tuple[str, str], tuple[RuleEvent, Node]] = {}
        modified = False
        for _ in range(self.max_sweeps):
            fired = False
            # Insertion order: producers come first for loaded models, and a node that a rewrite
            # re-inserts is met again later in the sweep (no toposort needed per sweep).
            for node in list(graph.nodes):
                if node.graph is not graph:
                    continue
                for rule in self._by_anchor.get(node.op_type, ()):
                    if node.graph is not graph:
                        break
                    ev = self._try(graph, rule, node)
                    if ev is None:
                        continue
                    if ev.fired:
                        events.append(ev)
                        fired = modified = True
                        refused.pop((rule.name, ev.node), None)
                        break
                    refused.setdefault((rule.name, ev.node), (ev, node))
            if not fired:
                break
        # A refusal at a node that a later rewrite absorbed anyway is not worth reporting.
        kept = [ev for ev, n in refused.values() if n.graph is graph]
        events.extend(kept)
        diags = [Diagnostic(WARNING if is_opset_reason(ev.reason) else INFO, ev.node, "rule-not-fired",
                            f"{ev.rule}: {ev.reason}") for ev in kept]
        return PassResult(graph, modified, diags, events)

    def _try(self, graph: Graph, rule: Rule, node: Node) -> RuleEvent | None:
        first_reason: str | None = None
        for m in rule.matches(node):
            reason = containment_reason(m) if rule.contained else None
            if reason is None:
                reason = rule.check(graph, m)
            if reason is None:
                anchor, gone = node.name, [n.name for n in m.nodes]
                new = rule.rewrite(graph, m)
                if new is None:  # an elimination: nothing replaces the matched nodes
                    return RuleEvent(rule.name, anchor, True, result=None, op_type=None, nodes=gone)
                return RuleEvent(rule.name, anchor, True, result=new.name, op_type=new.op_type,
                                 nodes=provenance(new))
            if first_reason is None:
                first_reason = reason
        if first_reason is None:
            return None
        return RuleEvent(rule.name, node.name, False, reason=first_reason)
