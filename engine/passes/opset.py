"""Raising a model's default-domain opset when that cannot change what any of its nodes mean.

Fusions into newer ops need newer opsets: LayerNormalization is opset 17, Gelu opset 20,
HardSwish opset 14. Raising the opset import re-interprets *every* node of the model under
the newer definitions, so it is only allowed when, for every op type in the graph (subgraphs
included) and every version step between the current and the target opset, the newer
definition is a compatible extension of the older one, judged from ONNX's own schemas:

- the op still exists and is not deprecated;
- every input, output and attribute of the old signature is still there, under the same name,
  in the same position, no more required than before, with the same default value;
- anything added is optional (an optional trailing input or output, a non-required
  attribute), so nodes written for the old version mean the same thing.

Steps that are not extensions are refused (Softmax 11 -> 13 changed its default axis and what
``axis`` means), unless a node *adapter* rewrites the node mechanically into the newer form
with the same meaning: ReduceMean & co. at 18 and ReduceSum, Squeeze, Unsqueeze, Split at 13
(an ``axes``/``split`` attribute becomes a constant input), Clip at 11 (min/max attributes
become inputs), Softmax/LogSoftmax/Hardmax at 13 (same result when every dimension after the
axis is 1), BatchNormalization at 7/9/14 (inference nodes, spatial=1). When raising is refused
the fusion keeps the decomposed form and reports the reason, naming the node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

import numpy as np
from onnx import defs, helper

from engine.ir.graph import Graph, Node


def _sig(schema: defs.OpSchema) -> tuple:
    attrs = {}
    for name, a in schema.attributes.items():
        default = a.default_value.SerializeToString() if a.default_value is not None else b""
        attrs[name] = (bool(a.required), default)
    ins = [(i.name, int(i.option)) for i in schema.inputs]
    outs = [(o.name, int(o.option)) for o in schema.outputs]
    return attrs, ins, outs


_RAISE_PREFIX = "raising the opset"
_SINGLE, _OPTIONAL = int(defs.OpSchema.FormalParameterOption.Single), int(defs.OpSchema.FormalParameterOption.Optional)


def _compatible_step(old: defs.OpSchema, new: defs.OpSchema) -> str | None:
    if new.deprecated:
        return "is deprecated"
    (oa, oi, oo), (na, ni, no) = _sig(old), _sig(new)
    for name, (req, default) in oa.items():
        if name not in na:
            return f"lost attribute {name!r}"
        nreq, ndefault = na[name]
        if nreq and not req:
            return f"made attribute {name!r} required"
        if ndefault != default:
            return f"changed the default of attribute {name!r}"
    for name, (req, _) in na.items():
        if name not in oa and req:
            return f"added required attribute {name!r}"
    for kind, old_ports, new_ports in (("input", oi, ni), ("output", oo, no)):
        if len(new_ports) < len(old_ports):
            return f"dropped {kind}s"
        for (oname, oopt), (nname, nopt) in zip(old_ports, new_ports):
            if oname != nname:
                return f"renamed {kind} {oname!r}"
            if oopt != nopt and not (oopt == _SINGLE and nopt == _OPTIONAL):
                return f"changed {kind} {oname!r}"
        if any(opt != _OPTIONAL for _, opt in new_ports[len(old_ports):]):
            return f"added a required {kind}"
    return None


@lru_cache(maxsize=512)
def incompatible_steps(op_type: str, current: int, target: int) -> tuple[tuple[int, str], ...]:
    """The versions between ``current`` and ``target`` at which ``op_type`` changed in a way old
    nodes would notice, each with what changed (empty when the op keeps its meaning)."""
    try:
        old = defs.get_schema(op_type, current)
    except Exception:  # unknown op at the current opset: nothing to compare
        return ((current, f"{op_type} has no definition at opset {current}"),)
    steps = []
    for v in range(current + 1, target + 1):
        try:
            new = defs.get_schema(op_type, v)
        except Exception:
            return (*steps, (v, f"{op_type} does not exist at opset {v}"))
        if new.since_version != old.since_version:
            why = _compatible_step(old, new)
            if why is not None:
                steps.append((new.since_version, f"{op_type} {why} at opset {new.since_version}"))
            old = new
    return tuple(steps)


def op_raise_reason(op_type: str, current: int, target: int) -> str | None:
    """Why ``op_type`` means something else at opset ``target`` than at ``current`` (None if not),
    before any node adapter is considered."""
    steps = incompatible_steps(op_type, current, target)
    return steps[0][1] if steps else None


# -- node adapters: mechanical upgrades of a node across one incompatible version step ----------------
# An adapter (node, apply) -> reason: with apply=False it only says whether it can convert the
# node (None) or why not; with apply=True it converts it.
Adapter = Callable[[Node, bool], "str | None"]


def _attr_to_input(attr: str, index: int, dtype: type = np.int64) -> Adapter:
    def adapt(node: Node, apply: bool) -> str | None:
        if attr not in node.attrs:
            return None
        if node.input(index) is not None:
            return f"{node.op_type} {node.name!r} has both an {attr!r} attribute and input"
        if apply:
            g = node.graph
            value = g.add_initializer(f"{node.name}_{attr}", np.asarray(node.attrs[attr], dtype=dtype))  # type: ignore[union-attr]
            node.set_attr(attr, None)
            node.set_input(index, value)
        return None

    return adapt


def _softmax_axis(node: Node, apply: bool) -> str | None:
    """Softmax-13 normalizes one axis; older versions flatten [axis:] into one. Same thing when
    every dimension after the axis is 1 (or the axis is the last one)."""
    x = node.inputs[0]
    rank = x.type.rank if x is not None else None
    if rank is None:
        return f"{node.op_type} {node.name!r}: input rank unknown"
    axis = int(node.attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    tail = x.type.shape[axis + 1:]  # type: ignore[union-attr, index]
    if any(d != 1 for d in tail):
        return f"{node.op_type} {node.name!r} normalizes axes {axis}.. together (old semantics)"
    if apply:
        node.set_attr("axis", axis)
    return None


def _clip_to_inputs(node: Node, apply: bool) -> str | None:
    x = node.inputs[0]
    dtype = x.type.dtype if x is not None else None
    if dtype is None:
        return f"Clip {node.name!r}: input type unknown"
    if apply:
        g = node.graph
        for k, key in ((1, "min"), (2, "max")):
            if key in node.attrs:
                node.set_input(k, g.add_initializer(f"{node.name}_{key}", np.asarray(node.attrs[key], dtype=dtype)))  # type: ignore[union-attr]
                node.set_attr(key, None)
    return None


def _batchnorm_inference(node: Node, apply: bool) -> str | None:
    if int(node.attrs.get("spatial", 1)) != 1:
        return f"BatchNormalization {node.name!r} has spatial=0"
    if any(o is not None and (o.uses() or o.is_graph_output) for o in node.outputs[1:]):
        return f"BatchNormalization {node.name!r} exports its statistics"
    if apply:
        for key in ("spatial", "is_test", "consumed_inputs", "momentum"):
            if key in node.attrs and key != "momentum":
                node.set_attr(key, None)
    return None


_REDUCE_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
              "ReduceLogSumExp", "ReduceSumSquare")
ADAPTERS: dict[tuple[str, int], Adapter] = {
    **{(op, 18): _attr_to_input("axes", 1) for op in _REDUCE_18},
    ("ReduceSum", 13): _attr_to_input("axes", 1),
    ("Squeeze", 13): _attr_to_input("axes", 1),
    ("Unsqueeze", 13): _attr_to_input("axes", 1),
    ("Split", 13): _attr_to_input("split", 1),
    **{(op, 13): _softmax_axis for op in ("Softmax", "LogSoftmax", "Hardmax")},
    ("Clip", 11): _clip_to_inputs,
    **{("BatchNormalization", v): _batchnorm_inference for v in (7, 9, 14)},
}


def _node_reason(node: Node, current: int, target: int, apply: bool = False) -> str | None:
    for version, why in incompatible_steps(node.op_type, current, target):
        adapter = ADAPTERS.get((node.op_type, version))
        if adapter is None:
            return why
        detail = adapter(node, apply)
        if detail is not None:
            return f"{why} ({detail})"
    return None


def raise_reason(graph: Graph, target: int, ignore: Iterable[Node] = ()) -> str | None:
    """Why the default-domain opset of ``graph`` cannot be raised to ``target`` (None: it can).

    Nodes in ``ignore`` (those a rewrite is about to replace) are not considered; nodes with an
    adapter (ReduceMean axes attribute -> input, ...) count as convertible."""
    root = graph.root
    current = root.opset("")
    if current >= target:
        return None
    if target > defs.onnx_opset_version():
        return f"opset {target} is newer than this onnx knows"
    skip = {id(n) for n in ignore}
    for n in root.all_nodes():
        if n.domain != "" or id(n) in skip or not incompatible_steps(n.op_type, current, target):
            continue
        why = _node_reason(n, current, target)
        if why is not None:
            return f"{_RAISE_PREFIX} from {current} to {target} would change {n.op_type} node {n.name!r}: {why}"
    return None


def is_opset_reason(reason: str | None) -> bool:
    """True for a reason given because the opset could not be raised (a rewrite kept the
    decomposed form): those are reported as warnings."""
    return bool(reason) and (reason.startswith(_RAISE_PREFIX) or "raising the opset is switched off" in reason)


def min_ir_version(opset: int) -> int:
    """The lowest IR version that can carry this default-domain opset."""
    best = None
    for _release, ir, op, *_ in helper.VERSION_TABLE:
        if op >= opset and (best is None or ir < best):
            best = ir
    return best or 3


def ensure_opset(graph: Graph, target: int, allow_raise: bool = True, ignore: Iterable[Node] = ()) -> str | None:
    """Make sure the model imports the default domain at ``target`` or later, raising it when
    that is safe; returns the reason when it is not (the graph is then unchanged)."""
    root = graph.root
    current = root.opset("")
    if current >= target:
        return None
    if not allow_raise:
        return f"the model is opset {current}; this needs opset {target} and raising the opset is switched off"
    why = raise_reason(root, target, ignore)
    if why is not None:
        return why
    skip = {id(n) for n in ignore}
    for n in list(root.all_nodes()):
        if n.domain == "" and id(n) not in skip and incompatible_steps(n.op_type, current, target):
            _node_reason(n, current, target, apply=True)
    root.opset_imports[""] = target
    root.ir_version = max(int(root.ir_version or 0), min_ir_version(target))
    root._touch()
    return None
