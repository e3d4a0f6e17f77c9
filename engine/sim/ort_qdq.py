"""Run a QDQ model the way onnxruntime's CPU provider runs it, so its int8 values are the runtime's.

onnxruntime does not execute a QDQ model op by op. At its default optimization level its QDQ
transformer replaces node units (DequantizeLinear inputs -> op -> QuantizeLinear) by com.microsoft
integer kernels, and the integer kernel is what decides the int8 result. Measured with
onnxruntime 1.32 on x86-64 (the optimized model it writes with ``optimized_model_filepath``):

* int8 activations: Conv, MatMul stay float (``QDQIsInt8Allowed`` is false off ARM, so no
  QLinearConv/QLinearMatMul); DQ -> Conv -> Q runs as float Conv (NCHWc kernels at level ALL)
  and QuantizeLinear, which our float path follows up to float32 summation order.
* fused at EXTENDED and ALL: Add, Mul -> QLinearAdd/QLinearMul, Sigmoid -> QLinearSigmoid,
  Concat -> QLinearConcat, AveragePool/GlobalAveragePool -> QLinearAveragePool/
  QLinearGlobalAveragePool, Gemm -> QGemm, Softmax -> QLinearSoftmax; MaxPool, Reshape,
  Transpose, Squeeze, Slice ... drop their DQ/Q pair when both carry the same parameters.

Of these, only QLinearSoftmax computes something the float unit does not: a 256-entry exp table,
a float32 row sum and the multiplier floor(1 / y_scale) (nodes/contrib_quant.py), 1 LSB apart
on ~1% of values when y_scale is not 1/256. The other kernels equal the float unit on random
int8 data (tests/engine/test_ort_exactness.py), so ``runtime_graph`` rewrites only the Softmax
units, where onnxruntime's selector takes them (8-bit input and output of the same type, the DQ
feeding only the Softmax, the Softmax feeding only the Q, no graph output in between).

A TFLite file is simulated by engine/sim/tflite_int.py with LiteRT's kernels instead: each
artifact is simulated as the runtime that executes it computes.
"""

from __future__ import annotations

import numpy as np

from engine.ir.clone import clone_graph
from engine.ir.graph import Graph, Node

_MS = "com.microsoft"
_EIGHT_BIT = (np.dtype(np.int8), np.dtype(np.uint8))


def _single_consumer(node: Node) -> Node | None:
    out = node.outputs[0] if node.outputs else None
    if out is None or out.is_graph_output:
        return None
    users = out.consumers()
    return users[0] if len(users) == 1 else None


def _param_dtype(v) -> np.dtype | None:
    if v is None:
        return None
    if v.const is not None:
        return np.asarray(v.const).dtype
    return v.type.dtype if v.type is not None else None


def _softmax_unit(q: Node) -> tuple[Node, Node] | None:
    """(dq, softmax) when ``q`` closes a DQ -> Softmax -> Q unit onnxruntime fuses, else None."""
    x = q.inputs[0] if q.inputs else None
    sm = x.producer() if x is not None else None
    if sm is None or sm.op_type != "Softmax" or sm.domain or _single_consumer(sm) is not q:
        return None
    dq = sm.inputs[0].producer() if sm.inputs and sm.inputs[0] is not None else None
    if dq is None or dq.op_type != "DequantizeLinear" or _single_consumer(dq) is not sm:
        return None
    if len(dq.inputs) < 3 or len(q.inputs) < 3 or dq.inputs[2] is None or q.inputs[2] is None:
        return None
    t_in, t_out = _param_dtype(dq.inputs[2]), _param_dtype(q.inputs[2])
    if t_in is None or t_in != t_out or t_in not in _EIGHT_BIT:
        return None
    for p in (dq.inputs[1], dq.inputs[2], q.inputs[1], q.inputs[2]):
        if p.const is None or np.asarray(p.const).size != 1:
            return None
    return dq, sm


def runtime_graph(graph: Graph) -> Graph:
    """A copy of a QDQ graph whose node units run onnxruntime's integer kernels where its CPU
    provider forms them and they compute differently from the float unit (QLinearSoftmax).
    The quantized values keep their names; a graph without such units is copied unchanged."""
    g = clone_graph(graph)
    for q in [n for n in g.toposort() if n.op_type == "QuantizeLinear" and not n.domain]:
        unit = _softmax_unit(q)
        if unit is None:
            continue
        dq, sm = unit
        axis = int(sm.attrs.get("axis", -1 if g.opset("") >= 13 else 1))
        y, args = q.outputs[0], [*dq.inputs[:3], *q.inputs[1:3]]
        name = g.unique_name(sm.name or "softmax")
        g.remove_node(q)
        g.remove_node(sm)
        g.add_node(Node("QLinearSoftmax", args, [y], {"axis": axis, "opset": g.opset("")}, name=name, domain=_MS))
        if not dq.outputs[0].consumers() and not dq.outputs[0].is_graph_output:
            g.remove_node(dq)
    if any(n.domain == _MS for n in g.nodes):
        g.opset_imports.setdefault(_MS, 1)
    g.sort_nodes()
    return g
