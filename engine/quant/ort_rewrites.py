"""The nodes of a QDQ model that onnxruntime's default session does not run as written.

onnxruntime (1.32, every optimization level from ORT_ENABLE_BASIC, the default being ALL) runs
WeightBiasQuantization before its QDQ fusions: a Conv/ConvTranspose/Gemm that reads a
DequantizeLinear with a per-tensor scale and whose output reaches a QuantizeLinear with nothing
but Relu/Clip between gets its float weight initializer quantized to int8 per tensor
(symmetric), and its float 1-D bias initializer quantized to int32 at input scale x weight
scale, Cast(Round(b / s)) with no range check: a bias beyond 2^31 steps comes back as -2^31.
A bias that is a DequantizeLinear output stops the rewrite for the whole node.

Our QDQ models store every weight of a quantized layer behind a DequantizeLinear and every bias
that int32 can hold as int32 (16-bit layers at a wider scale where input x weight is too fine:
engine/quant/qdq.py), so the rewrite finds nothing there. What is left: a layer kept in float
(fp32 on the CPU) between quantized neighbours, which reads a dequantized input and feeds a
quantized output, and an 8-bit layer whose bias int32 cannot hold. ``rewritten_nodes`` finds
them, so the one warning says which nodes and how to run the model as exported
(``disabled_optimizers=["WeightBiasQuantization"]`` or ORT_DISABLE_ALL).
"""

from __future__ import annotations

import numpy as np

from engine.diagnostics import WARNING, Diagnostic
from engine.ir.graph import Graph, Node, Value

CODE = "ort-rewrites"
_OPS = ("Conv", "ConvTranspose", "Gemm")
_PASS_THROUGH = ("Relu", "Clip")


def _producer(v: Value | None, op_type: str) -> Node | None:
    p = v.producer() if v is not None else None
    return p if p is not None and p.op_type == op_type and not p.domain else None


def _scalar(v: Value | None) -> bool:
    return v is not None and v.const is not None and np.size(v.const) == 1


def _reaches_quantize(node: Node) -> bool:
    """The node's output path reaches a QuantizeLinear through Relu/Clip only, without branching."""
    cur = node
    while True:
        if cur.activation is not None and cur.activation.op_type not in _PASS_THROUGH:
            return False  # written out as its own node, which is neither Relu nor Clip
        if len(cur.outputs) != 1 or cur.outputs[0] is None:
            return False
        users = cur.outputs[0].consumers()
        if len(users) != 1:
            return False
        nxt = users[0]
        if nxt.op_type == "QuantizeLinear" and not nxt.domain:
            return True
        if nxt.op_type not in _PASS_THROUGH or nxt.domain:
            return False
        cur = nxt


def _rewrite(node: Node) -> str | None:
    """What WeightBiasQuantization does to ``node`` that changes its result, or None."""
    if node.op_type not in _OPS or node.domain or len(node.inputs) < 2:
        return None
    dq_in = _producer(node.inputs[0], "DequantizeLinear")
    if dq_in is None or not _scalar(dq_in.input(1)) or not _reaches_quantize(node):
        return None
    w, b = node.inputs[1], node.input(2) if len(node.inputs) > 2 else None
    dq_w = _producer(w, "DequantizeLinear")
    if dq_w is None and (w is None or w.const is None or w.const.dtype != np.float32):
        return None
    if b is not None and (b.const is None or b.const.ndim != 1):
        return None  # a bias that is not an initializer (a DequantizeLinear output) stops it
    if dq_w is None:
        return "float weights to int8 per tensor"
    if b is None:
        return None
    ws = dq_w.input(1)
    if ws is None or ws.const is None:
        return None
    if np.size(ws.const) != 1 and np.size(ws.const) != b.const.shape[0]:
        return None
    scale = np.float64(np.asarray(dq_in.input(1).const).ravel()[0]) * np.asarray(ws.const, np.float64).ravel()
    if np.all(np.abs(b.const.astype(np.float64)) / np.maximum(scale, 1e-45) <= 2**31 - 1):
        return None  # rounded to int32 at input x weight scale: within half a step of the float bias
    return "float bias overflows int32 at input x weight scale"


def rewritten_nodes(graph: Graph) -> dict[str, str]:
    """Node name -> what onnxruntime's default session changes in it (module docstring)."""
    out = {}
    for node in graph.toposort():
        what = _rewrite(node)
        if what is not None:
            out[node.name] = what
    return out


def rewrite_warning(graph: Graph, shown: int = 4) -> Diagnostic | None:
    """One warning naming the nodes onnxruntime's default session would not run as written."""
    found = rewritten_nodes(graph)
    if not found:
        return None
    names = ", ".join(f"{n} ({w})" for n, w in list(found.items())[:shown])
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    return Diagnostic(WARNING, None, CODE,
                      f"onnxruntime's default session changes {len(found)} node(s) of this QDQ model: {names}{more} "
                      "(its WeightBiasQuantization, ORT_ENABLE_BASIC and up); to run the model as written, create "
                      "the session with disabled_optimizers=['WeightBiasQuantization'] or ORT_DISABLE_ALL")
