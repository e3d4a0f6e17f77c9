"""Constant folding: compute at compile time whatever does not depend on the model's inputs.

A node is folded when every input it reads is a constant (an initializer): its outputs are
computed with the op registry's reference kernel, the exact code the executor runs, and
become initializers under the same value names, so readers need no rewiring. ``Constant``
nodes are the zero-input case and simply become initializers.

Shape subgraphs fold too once input shapes are static: ``Shape(x)`` (and ``Size(x)``) of a
value whose type is fully known is its type's shape, a constant, so a chain such as
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` collapses to one ``Reshape`` with a
constant target shape. Give dynamic inputs a shape with ``--shape NAME=D0,D1,..`` first.

Never folded: ops that are not deterministic (RandomNormal, ...), ops with subgraphs, ops
without a reference kernel, Quantize/DequantizeLinear (a QDQ model keeps its integer weights:
that is what makes it a quantized model), and any output larger than ``max_bytes`` that would
also be larger than the inputs it comes from (a ``ConstantOfShape`` that expands a 16-byte
shape into a 400 MB weight stays as it is; the cap never lets folding blow up a model file or
memory).

Initializers that an older model also lists as graph inputs (IR version < 4 requires that)
are treated as constants and leave the input list (``freeze_initializer_inputs``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.diagnostics import INFO, Diagnostic
from engine.ir.fused import run_activation
from engine.ir.graph import Graph, Node
from engine.ir.infer import node_context
from engine.passes.base import Pass, PassResult, RuleEvent
from engine.passes.rewrite import contiguous, value_to_initializer
from nodes import registry
from nodes.spec import OpError, RunContext
from nodes.types import TensorType

DEFAULT_MAX_BYTES = 16 * 1024 * 1024

_IMPURE = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "Multinomial", "Bernoulli"})
# Quantization structure is kept: folding DequantizeLinear(int8 weights) would turn a QDQ model's
# integer weights back into float ones (the same numbers, but no longer a quantized model).
_KEEP = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


# Ops whose outputs can be known from input *types* alone (their spec's static_value).
_STATIC_OPS = frozenset({"Shape", "Size"})


def _is_const(v: Any) -> bool:
    return v is None or (v.const is not None and v.producer() is None)


class FoldConstants(Pass):
    """Fold nodes whose inputs are all constant (and Shape/Size of static tensors)."""

    name = "fold_constants"
    description = "Constant nodes and computations on constants become initializers"

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, freeze_initializer_inputs: bool = True) -> None:
        self.max_bytes = int(max_bytes)
        self.freeze_initializer_inputs = freeze_initializer_inputs

    def call(self, graph: Graph) -> PassResult:
        """Fold everything foldable in one topological sweep."""
        events: list[RuleEvent] = []
        diags: list[Diagnostic] = []
        modified = self._freeze(graph, diags)
        for node in graph.toposort():
            if node.graph is not graph:
                continue
            ev = self._fold(graph, node)
            if ev is not None:
                events.append(ev)
                modified |= ev.fired
        return PassResult(graph, modified, diags, events)

    def _freeze(self, graph: Graph, diags: list[Diagnostic]) -> bool:
        over = graph.overridable
        if not self.freeze_initializer_inputs or not over:
            return False
        n = len(over)
        graph.overridable = []
        graph._touch()
        diags.append(Diagnostic(INFO, None, "frozen-initializers",
                                f"{n} initializers that the model also lists as inputs are treated as constants "
                                "and no longer listed as inputs"))
        return True

    def _fold(self, graph: Graph, node: Node) -> RuleEvent | None:
        all_const = all(_is_const(v) for v in node.inputs)
        if not all_const and node.op_type not in _STATIC_OPS:
            return None
        spec = registry.get(node.op_type, node.domain)
        if spec is None or not spec.deterministic or node.op_type in _IMPURE or node.op_type in _KEEP \
                or any(True for _ in node.subgraphs()):
            return None
        outs = [v for v in node.outputs if v is not None]
        if not outs or not any(v.uses() or v.is_graph_output for v in outs):
            return None  # dead code: left for eliminate_dead_code
        ctx = node_context(node, with_outputs=True)
        if ctx is None:
            return None
        arrays: list[np.ndarray | None] | None = None
        if not all_const:
            try:
                static = spec.static_value(ctx)
            except (OpError, ValueError, TypeError, IndexError, KeyError):
                static = None
            if static is None or any(a is None for a, v in zip(static, node.outputs) if v is not None):
                return None
            arrays = [None if a is None else np.asarray(a) for a in static]
            rule = "fold_constants.static_shape"
        else:
            rule = "fold_constants.constant" if node.op_type == "Constant" else "fold_constants.fold"
            reason = self._too_big(node, ctx, spec)
            if reason is not None:
                return RuleEvent(rule, node.name, False, reason=reason)
            try:
                res = spec.reference(RunContext(node, ctx.attrs, ctx.opset), *[v.const if v is not None else None
                                                                                for v in node.inputs])
            except Exception as exc:  # a kernel refusing these constants: keep the node, say why
                return RuleEvent(rule, node.name, False, reason=f"reference kernel failed: {type(exc).__name__}: {exc}")
            arrays = [res] if isinstance(res, np.ndarray) else [None if a is None else np.asarray(a) for a in res]
            if node.activation and arrays:
                arrays[0] = run_activation(node, arrays[0], ctx.opset)
        name = node.name
        outputs = list(node.outputs)
        graph.remove_node(node)
        for v, arr in zip(outputs, arrays):
            if v is None or arr is None or (not v.uses() and not v.is_graph_output):
                continue
            dtype = v.type.dtype
            if dtype is not None and dtype != np.dtype(object) and arr.dtype != dtype:
                arr = arr.astype(dtype)
            value_to_initializer(graph, v, contiguous(arr))
        first = next((v for v in outputs if v is not None), None)
        return RuleEvent(rule, name, True, result=first.name if first is not None else name,
                         op_type="initializer", nodes=[name])

    def _too_big(self, node: Node, ctx: Any, spec: Any) -> str | None:
        in_bytes = sum(int(v.const.nbytes) for v in node.inputs if v is not None and v.const is not None)
        if node.op_type == "Constant":
            return None  # already materialized in the file
        try:
            types = spec.infer(ctx)
        except Exception:  # inference refusing odd constants: judge by running size below
            types = []
        total = 0
        for t in types:
            if not isinstance(t, TensorType) or t.nbytes() is None:
                if in_bytes > self.max_bytes:
                    return "output size unknown before running and the inputs are large"
                return None if in_bytes <= self.max_bytes // 64 else "output size unknown before running"
            total += int(t.nbytes())  # type: ignore[arg-type]
        if total > self.max_bytes and total > in_bytes:
            return (f"result would take {total / 2**20:.1f} MiB, over the folding cap of "
                    f"{self.max_bytes / 2**20:.0f} MiB")
        return None
