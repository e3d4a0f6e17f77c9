"""Shape and type inference over the IR, driven by each OpSpec's ``infer``.

Small values that can be computed before running (initializers, Shape of a static tensor and
anything computed only from those) are evaluated on the way with the reference kernels, so
shape subgraphs (Shape -> Gather -> Concat -> Reshape) give static shapes.
"""

from __future__ import annotations

import numpy as np

from engine.diagnostics import WARNING, Diagnostic
from engine.ir.graph import Graph, Node
from nodes import registry
from nodes.spec import NodeContext, OpError, RunContext
from nodes.types import TensorType, is_tensor_type

# A value computed during inference is kept only when this small (elements).
KNOWN_VALUE_LIMIT = 4096


def _merge(declared: TensorType, inferred: TensorType) -> TensorType:
    """Combine a declared (file) type with an inferred one, preferring known facts."""
    if not is_tensor_type(inferred):  # a sequence or optional: the inferred one, else the declared
        return inferred if (inferred.elem.dtype is not None or is_tensor_type(declared)) else declared
    if not is_tensor_type(declared):
        return declared
    dtype = inferred.dtype if inferred.dtype is not None else declared.dtype
    if inferred.shape is None:
        shape = declared.shape
    elif declared.shape is None or len(declared.shape) != len(inferred.shape):
        shape = inferred.shape
    else:
        shape = tuple(i if isinstance(i, int) else (d if d is not None else i)
                      for d, i in zip(declared.shape, inferred.shape))
    return TensorType(dtype, shape)


def node_context(node: Node, known: dict[str, np.ndarray] | None = None, with_outputs: bool = True) -> NodeContext | None:
    """The NodeContext of a node (None when its op is not registered)."""
    spec = registry.get(node.op_type, node.domain)
    if spec is None:
        return None
    known = known or {}
    types = [v.type if v is not None else None for v in node.inputs]
    consts = [None if v is None else (v.const if v.const is not None else known.get(v.name)) for v in node.inputs]
    outs = [v.type if v is not None else None for v in node.outputs] if with_outputs else []
    return NodeContext(node, spec, types, consts, outs)


def infer_shapes(graph: Graph, known: dict[str, np.ndarray] | None = None) -> list[Diagnostic]:
    """Infer every value's type in place; returns diagnostics for nodes that could not be inferred."""
    diags: list[Diagnostic] = []
    known = dict(known or {})
    for v in graph.initializers.values():
        if v.const is not None and v.const.size <= KNOWN_VALUE_LIMIT:
            known[v.name] = v.const
    _infer_graph(graph, known, diags)
    return diags


def _infer_graph(graph: Graph, known: dict[str, np.ndarray], diags: list[Diagnostic]) -> None:
    try:
        order = graph.toposort()
    except ValueError:
        return  # verify() reports cycles
    # Output types by op signature (see _signature): a graph repeats few distinct ones, and an
    # op's rule is a function of its signature, so each is inferred once per graph.
    by_signature: dict[tuple, list[TensorType]] = {}
    for node in order:
        spec = registry.get(node.op_type, node.domain)
        if spec is None:
            diags.append(Diagnostic(WARNING, node.name, "unsupported-op",
                                    f"no definition for op {node.op_type!r}; its outputs have unknown shapes"))
            continue
        has_subgraphs = False
        for sg in node.subgraphs():
            has_subgraphs = True
            sub_known = dict(known)
            for v in sg.initializers.values():
                if v.const is not None and v.const.size <= KNOWN_VALUE_LIMIT:
                    sub_known[v.name] = v.const
            _infer_graph(sg, sub_known, diags)
        key = None if has_subgraphs else _signature(node, spec, known)
        cached = by_signature.get(key) if key is not None else None
        if cached is not None:
            _set_types(node, cached)
            continue
        try:
            ctx = node_context(node, known, with_outputs=False)
            assert ctx is not None
            inferred = spec.infer(ctx)
        except (OpError, ValueError, TypeError, IndexError, KeyError, ZeroDivisionError) as exc:
            diags.append(Diagnostic(WARNING, node.name, "shape-inference", f"{node.op_type}: {exc}"))
            continue
        _set_types(node, inferred)
        if not _maybe_evaluate(node, spec, ctx, known) and key is not None:
            by_signature[key] = inferred


def _set_types(node: Node, inferred: list[TensorType]) -> None:
    for out, t in zip(node.outputs, inferred):
        if out is not None and t is not None:
            out.type = _merge(out.type, t)


def _signature(node: Node, spec, known: dict[str, np.ndarray]) -> tuple | None:
    """What an op's inference reads of a node without known input values: the op and its
    opset, the attributes (each with its Python type, so 1 and 1.0 differ), which inputs and
    outputs are present and the input types. None when an input's value is known (the rule may
    read it) or an attribute is not hashable (a tensor)."""
    types = []
    for v in node.inputs:
        if v is None:
            types.append(None)
        elif v.const is not None or v.name in known:
            return None
        else:
            types.append(v.type)
    attrs = tuple((k, type(a), tuple(a) if isinstance(a, list) else a) for k, a in node.attrs.items())
    opset = node.graph.opset(spec.domain) if node.graph is not None else spec.since
    key = (spec, opset, tuple(v is None for v in node.outputs), attrs, tuple(types))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _maybe_evaluate(node: Node, spec, ctx: NodeContext, known: dict[str, np.ndarray]) -> bool:
    """Record the node's outputs as known values when they can be computed now; True when the
    node was evaluated (its outputs may then carry more than its signature says)."""
    if not spec.deterministic or any(True for _ in node.subgraphs()):
        return True
    static = spec.static_value(ctx)
    if static is None:
        if not node.inputs or any(v is not None and ctx.consts[i] is None for i, v in enumerate(node.inputs)):
            return False
        if any(out is not None and (out.type.numel() is None or out.type.numel() > KNOWN_VALUE_LIMIT)
               for out in node.outputs):
            return True
        try:
            res = spec.reference(RunContext(node, ctx.attrs, ctx.opset), *ctx.consts)
        except Exception:  # a kernel refusing odd constant inputs only means "not known"
            return True
        static = [np.asarray(res)] if isinstance(res, (np.ndarray, np.generic)) else list(res)
    for out, arr in zip(node.outputs, static):
        if out is not None and arr is not None:
            arr = np.asarray(arr)
            if arr.size <= KNOWN_VALUE_LIMIT:
                known[out.name] = arr
                out.type = _merge(out.type, TensorType.of(arr))
    return True

