"""Support verdicts: can each node run on a target's NPU, and if not, why.

For every node the generic rules (``nodes.rules.COMMON``: op listed, static shapes, dtype,
rank, tensor size) run first, then the op's own ``OpSpec.rules`` (e.g. the window rules of
Conv and the pools). A node whose op NPU Studio does not define at all gets a verdict saying
so. The facts gathered on the way (context, work, verdict, tensor sizes) are kept per node in
a ``GraphFacts`` so placement, the cost model and the simulator compute them once.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.hw.target import DTYPE_BYTES, PRECISION_DTYPES, HardwareTarget
from engine.ir.graph import Graph, Node, Value
from engine.ir.infer import node_context
from nodes import rules as rules_mod
from nodes.spec import NodeContext, OpError, Verdict, Work
from nodes.types import dtype_name

COMPILE_TIME_OPS = frozenset({"Constant"})
"""Ops that only hold data: their outputs are weights of their consumers and cost nothing."""


@dataclass
class NodeFacts:
    """What the later steps need to know about one node on one target."""

    node: Node
    index: int
    work: Work
    verdict: Verdict
    key: Hashable | None = None
    name: str = ""
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    weight_values: list[Value] = field(default_factory=list)
    known: dict[str, np.ndarray] | None = field(default=None, repr=False)
    precision: str = ""  # what the node computes in on the NPU (the target's precision unless told)
    _ctx: Any = field(default=False, repr=False)

    @property
    def ctx(self) -> NodeContext | None:
        """The node's NodeContext (built on first use; None when the op is not defined)."""
        if self._ctx is False:
            self._ctx = node_context(self.node, self.known)
        return self._ctx

    @property
    def compile_time(self) -> bool:
        """True for data-only nodes (Constant) that cost nothing at run time."""
        return self.node.op_type in COMPILE_TIME_OPS


def _freeze(value: Any) -> Hashable:
    """A hashable stand-in of an attribute or constant (small arrays by content)."""
    if isinstance(value, np.ndarray):
        if value.size <= 64:
            return ("a", value.dtype.str, value.shape, value.tobytes())
        return ("A", value.dtype.str, value.shape)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (int, float, str, bytes, bool)) or value is None:
        return value
    raise TypeError("unhashable attribute")


def signature(node: Node, known: dict[str, np.ndarray]) -> Hashable | None:
    """What a node's work and verdict depend on: op, types, constants and attributes.

    Nodes with the same signature share work and verdict (repeated blocks of a network are
    checked once). None when something cannot be keyed (a subgraph attribute ...).
    """
    try:
        ins = []
        for v in node.inputs:
            if v is None:
                ins.append(None)
                continue
            c = v.const if v.const is not None else known.get(v.name)
            ins.append((v.type, None if c is None else _freeze(c)))
        outs = tuple(None if v is None else v.type for v in node.outputs)
        attrs = tuple(sorted((k, _freeze(a)) for k, a in node.attrs.items()))
        key = (node.op_type, node.domain, tuple(ins), outs, attrs)
        hash(key)
        return key
    except TypeError:
        return None


def rules_for(ctx: NodeContext) -> tuple:
    """The rules a node is checked against: COMMON, then its spec's own rules."""
    own = tuple(getattr(ctx.spec, "rules", ()) or ())
    return rules_mod.COMMON + tuple(r for r in own if r not in rules_mod.COMMON)


def verdict_for(ctx: NodeContext | None, node: Node, target: HardwareTarget) -> Verdict:
    """The verdict of one node (``ctx`` None means the op is not defined in NPU Studio)."""
    if ctx is None:
        dom = f" of domain {node.domain}" if node.domain else ""
        return Verdict(False, f"NPU Studio has no definition of op {node.op_type}{dom}, so no NPU "
                              "can be assumed to run it.", "op_defined")
    return rules_mod.evaluate(ctx, target.constraints_for(node.op_type), rules_for(ctx))


def node_verdict(node: Node, target: HardwareTarget) -> Verdict:
    """Verdict of a single node (the GUI's red/green node colouring)."""
    return verdict_for(node_context(node), node, target)


def _fallback_work(node: Node) -> Work:
    w = Work()
    for v in node.inputs:
        if v is not None:
            w.bytes_read += v.type.nbytes() or 0
    for v in node.outputs:
        if v is not None:
            w.bytes_written += v.type.nbytes() or 0
            w.elem_ops += v.type.numel() or 0
    return w


def _dep_names(node: Node, graph: Graph) -> set[str]:
    """Names of same-graph nodes a node depends on (outer-scope reads of subgraphs included)."""
    vals: list[Value] = [v for v in node.inputs if v is not None]
    for sg in node.subgraphs():
        for inner in sg.all_nodes():
            vals.extend(v for v in inner.inputs if v is not None)
    out = set()
    for v in vals:
        p = v.producer()
        if p is not None and p.graph is graph and p is not node:
            out.add(p.name)
    return out


def _constant_outputs(graph: Graph) -> dict[str, np.ndarray]:
    """Values of Constant nodes' outputs (they count as constants for the rules)."""
    out: dict[str, np.ndarray] = {}
    for n in graph.nodes:
        if n.op_type in COMPILE_TIME_OPS and n.outputs and n.outputs[0] is not None:
            value = n.attrs.get("value")
            if isinstance(value, np.ndarray):
                out[n.outputs[0].name] = value
    return out


def precision_verdict(precision: str, target: HardwareTarget) -> Verdict | None:
    """Why the NPU cannot run a node at ``precision`` (None when it can)."""
    if precision in target.npu.precisions:
        return None
    what = "float (left unquantized)" if precision == "fp32" else precision
    return Verdict(False, f"The node runs in {what}; the {target.name} NPU computes only in "
                          f"{', '.join(target.npu.precisions)}.", "precision_supported")


class GraphFacts:
    """Per-node facts of a graph on a target, in a topological order, plus tensor sizes.

    ``precisions`` names the precision of single nodes (a mixed-precision model: int16, fp16,
    or fp32 for a node left in float); every other node computes in the target's precision.
    A precision the NPU has no MAC mode for sends the node to the CPU, with that reason.
    """

    def __init__(self, graph: Graph, target: HardwareTarget, precisions: dict[str, str] | None = None) -> None:
        self.graph = graph
        self.target = target
        self.precisions = dict(precisions or {})
        self.order: list[NodeFacts] = []
        self.by_name: dict[str, NodeFacts] = {}
        self._host_bytes: dict[str, int] = {}
        self._npu_bytes: dict[str, int] = {}
        self._consumers: dict[str, list[NodeFacts]] | None = None
        self._npu_itemsize = DTYPE_BYTES[PRECISION_DTYPES[target.npu.precision]]
        self.output_names = {v.name for v in graph.outputs}
        self.input_names = {v.name for v in graph.inputs}
        known = _constant_outputs(graph)
        cache: dict[Hashable, tuple[Work, Verdict]] = {}
        for k, node in enumerate(graph.toposort()):
            precision = self.precisions.get(node.name, target.npu.precision)
            key = signature(node, known)
            if key is not None:
                key = (key, precision)
            facts = NodeFacts(node, k, Work(), Verdict(False), key, node.name, known=known, precision=precision)
            hit = cache.get(key) if key is not None else None
            if hit is None:
                ctx = facts.ctx
                work: Work | None = None
                if ctx is not None:
                    try:
                        work = ctx.spec.work(ctx)
                    except (OpError, ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
                        work = None
                hit = (work or _fallback_work(node),
                       precision_verdict(precision, target) or verdict_for(ctx, node, target))
                if key is not None:
                    cache[key] = hit
            facts.work, facts.verdict = hit
            for v in node.inputs:
                if v is None:
                    continue
                p = v.producer()
                if (v.const is not None and p is None) or (p is not None and p.op_type in COMPILE_TIME_OPS):
                    facts.weight_values.append(v)
                else:
                    facts.inputs.append(v)
            facts.outputs = [v for v in node.outputs if v is not None]
            self.order.append(facts)
            self.by_name[node.name] = facts
        self.succ: list[list[int]] = [[] for _ in self.order]
        self.n_deps: list[int] = [0] * len(self.order)
        for f in self.order:
            deps = {self.by_name[p].index for p in _dep_names(f.node, graph) if p in self.by_name}
            self.n_deps[f.index] = len(deps)
            for d in deps:
                self.succ[d].append(f.index)

    def __len__(self) -> int:
        return len(self.order)

    @property
    def weight_bytes_total(self) -> int:
        """Bytes of all distinct weights as the model stores them."""
        seen: dict[str, int] = {}
        for f in self.order:
            for v in f.weight_values:
                if v.name not in seen:
                    seen[v.name] = self.host_bytes(v)
        return sum(seen.values())

    def host_bytes(self, v: Value) -> int:
        """Bytes of a tensor as the model stores it (the CPU's view)."""
        b = self._host_bytes.get(v.name)
        if b is None:
            b = int(v.type.nbytes() or 0)
            self._host_bytes[v.name] = b
        return b

    def npu_bytes(self, v: Value) -> int:
        """Bytes of a tensor on the NPU: float tensors take the element size of the precision of
        the node that writes them (the target's precision for inputs and weights)."""
        b = self._npu_bytes.get(v.name)
        if b is None:
            t = v.type
            n = t.numel()
            if n is None:
                b = self.host_bytes(v)
            elif t.dtype is not None and (np.dtype(t.dtype).kind == "f" or dtype_name(t.dtype) == "bfloat16"):
                p = v.producer()
                prec = self.precisions.get(p.name) if p is not None else None
                size = DTYPE_BYTES[PRECISION_DTYPES[prec]] if prec in PRECISION_DTYPES else self._npu_itemsize
                b = int(n) * size
            else:
                b = self.host_bytes(v)
            self._npu_bytes[v.name] = b
        return b

    def consumers(self, v: Value) -> list[NodeFacts]:
        """Facts of the nodes reading a value (in this graph), in schedule-independent order."""
        cmap = self._consumers
        if cmap is None:
            cmap = {}
            for f in self.order:
                for x in f.inputs:
                    lst = cmap.setdefault(x.name, [])
                    if not lst or lst[-1] is not f:
                        lst.append(f)
                for x in f.weight_values:  # Constant outputs count as weights of their readers
                    lst = cmap.setdefault(x.name, [])
                    if not lst or lst[-1] is not f:
                        lst.append(f)
            self._consumers = cmap
        return cmap.get(v.name, [])
