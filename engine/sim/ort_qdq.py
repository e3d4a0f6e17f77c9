"""Run a QDQ model the way onnxruntime's CPU provider runs it, so its int8 values are the runtime's.

onnxruntime does not execute a QDQ model op by op. At its default optimization level its QDQ
transformer replaces node units (DequantizeLinear inputs -> op -> QuantizeLinear) by com.microsoft
integer kernels, and the integer kernel is what decides the int8 result. Measured with
onnxruntime 1.32 on x86-64 (the optimized model it writes with ``optimized_model_filepath``):

* int8 activations: Conv, MatMul stay float (``QDQIsInt8Allowed`` is false off ARM, so no
  QLinearConv/QLinearMatMul); DQ -> Conv -> Q runs as a float Conv through MlasConv (its weight
  is a DequantizeLinear output, not an initializer, so the NCHWc rewrite of level ALL leaves it)
  and QuantizeLinear. A float32 sum in another order lands on the other side of a rounding
  boundary for ~2 outputs in 10^7, and a deep network amplifies each such 1-LSB difference into
  thousands (PP-OCRv6 rec: 16 of 72 M conv outputs differed, 32 % of the deepest tensors' values
  followed), so ``runtime_executor`` runs these Convs, and MatMuls of dequantized operands, in
  MLAS's own order (nodes/mlas.py).
* fused at EXTENDED and ALL: Add, Mul -> QLinearAdd/QLinearMul, Sigmoid -> QLinearSigmoid,
  Concat -> QLinearConcat, AveragePool/GlobalAveragePool -> QLinearAveragePool/
  QLinearGlobalAveragePool, Gemm -> QGemm, Softmax -> QLinearSoftmax; MaxPool, Reshape,
  Transpose, Squeeze, Slice ... drop their DQ/Q pair when both carry the same parameters.

Five of these compute something the float unit does not, and ``runtime_graph`` rewrites their
units into our emulation of the kernel (nodes/contrib_quant.py): QLinearAveragePool (float32
window sums in row-major order, / count, round(y / y_scale + y_zp) with the zero point added
before the rounding), QLinearGlobalAveragePool (the integer sum times one float32 scale
x_scale / (y_scale * count): 0.1 % of outputs apart at calibration-like scales), QLinearSoftmax (a 256-entry exp table, a float32 row sum and the multiplier
floor(1 / y_scale), divided in double: 1 LSB apart on ~1% of values when y_scale is not 1/256), QLinearAdd (MLAS folds both zero points
into one float32 constant, zC - (rA zA + rB zB), and adds a rA + b rB to it) and QLinearMul
(the exact integer product times the float32 ratio sA sB / sC, plus zC). The last two round an
exact half the other way from the float unit: rarely on random data, but on up to 11 % of all
code pairs at some scales of bounded activations ([0, 1], [0, 6] ...). One such int8 of PP-OCRv6
rec (an Add of two swish outputs; a squeeze-excite Mul) put 42-125 of its 149 tensors under 99.9 %
equal.
The units are taken where onnxruntime's selectors take them (8-bit inputs and output of one type,
scalar scales and zero points, the op feeding only the Q, no graph output in between; a DQ shared
with other consumers is duplicated per unit first, as its EnsureUniqueDQForNodeUnit pass does).
QLinearSigmoid and QLinearConcat are left as float units (equal on
random data; not proven exact at every scale). Three float kernels also follow onnxruntime's
arithmetic: Sigmoid (MLAS's rational approximation, which is also QuickGelu's and
QLinearSigmoid's table), HardSwish (its function body) and LayerNormalization (float64
statistics, one rounding of the scale and bias; its inv_std is 1 ulp apart on some rows, see
_OrtLayerNorm).

A TFLite file is simulated by engine/sim/tflite_int.py with LiteRT's kernels instead: each
artifact is simulated as the runtime that executes it computes.
"""

from __future__ import annotations

import numpy as np

from engine.ir.clone import clone_graph
from engine.ir.graph import Graph, Node
from engine.sim.executor import Executor
from nodes import registry
from nodes.conv import ConvSpec, conv_geometry
from nodes.spec import RunContext

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


_FUSED = {"Softmax": ("QLinearSoftmax", 1), "Add": ("QLinearAdd", 2), "Mul": ("QLinearMul", 2),
          "AveragePool": ("QLinearAveragePool", 1), "GlobalAveragePool": ("QLinearGlobalAveragePool", 1)}
"""Float op -> (the com.microsoft kernel onnxruntime's QDQ transformer replaces its unit by, the
number of its DQ inputs), for the units whose kernel computes differently from the float unit."""


def _unit(q: Node) -> tuple[list[Node], Node] | None:
    """(dqs, op) when ``q`` closes a DQ... -> op -> Q unit onnxruntime fuses (op in _FUSED), else None."""
    x = q.inputs[0] if q.inputs else None
    op = x.producer() if x is not None else None
    if op is None or op.op_type not in _FUSED or op.domain or _single_consumer(op) is not q:
        return None
    if len(op.inputs) != _FUSED[op.op_type][1] or any(v is None for v in op.inputs):
        return None
    dqs = [v.producer() for v in op.inputs]  # a shared DQ is duplicated by the runtime first
    if any(dq is None or dq.op_type != "DequantizeLinear" or dq.domain or len(dq.inputs) < 3 or dq.inputs[2] is None
           for dq in dqs) or len(q.inputs) < 3 or q.inputs[2] is None:
        return None
    t_out = _param_dtype(q.inputs[2])
    if t_out not in _EIGHT_BIT or any(_param_dtype(dq.inputs[2]) != t_out for dq in dqs):
        return None
    for p in (*(v for dq in dqs for v in dq.inputs[1:3]), q.inputs[1], q.inputs[2]):
        if p.const is None or np.asarray(p.const).size != 1:
            return None
    return dqs, op


def runtime_graph(graph: Graph) -> Graph:
    """A copy of a QDQ graph whose node units run onnxruntime's integer kernels where its CPU
    provider forms them and they compute differently from the float unit (QLinearSoftmax,
    QLinearAdd, QLinearMul, QLinearAveragePool, QLinearGlobalAveragePool). The quantized values
    keep their names; a graph without such units is copied unchanged."""
    g = clone_graph(graph)
    for q in [n for n in g.toposort() if n.op_type == "QuantizeLinear" and not n.domain]:
        unit = _unit(q)
        if unit is None:
            continue
        dqs, op = unit
        kernel = _FUSED[op.op_type][0]
        y = q.outputs[0]
        if kernel == "QLinearSoftmax":
            attrs = {"axis": int(op.attrs.get("axis", -1 if g.opset("") >= 13 else 1)), "opset": g.opset("")}
        elif kernel == "QLinearAveragePool":
            attrs = {k: v for k, v in op.attrs.items() if k != "dilations"}
        else:
            attrs = {}
        args = [v for dq in dqs for v in dq.inputs[:3]] + list(q.inputs[1:3])
        name = g.unique_name(op.name or op.op_type.lower())
        g.remove_node(q)
        g.remove_node(op)
        g.add_node(Node(kernel, args, [y], attrs, name=name, domain=_MS))
        for dq in dict.fromkeys(dqs):
            if not dq.outputs[0].consumers() and not dq.outputs[0].is_graph_output:
                g.remove_node(dq)
    if any(n.domain == _MS for n in g.nodes):
        g.opset_imports.setdefault(_MS, 1)
    g.sort_nodes()
    return g


class _MlasConvSpec(ConvSpec):
    """Conv as MlasConv computes it on one thread (2-D, float32); other ranks as ConvSpec."""

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """im2col, MLAS's SGEMM order per group, float32 bias."""
        if x.ndim != 4 or x.dtype != np.float32:
            return super().reference(ctx, x, w, b)
        from nodes import mlas

        strides, dils, pb, pe = conv_geometry(ctx.attrs, x.shape, w.shape)
        return mlas.conv2d(x, w, b, strides, dils, pb, pe, int(ctx.attrs["group"]))


_MLAS_CONV = _MlasConvSpec()


class _Override:
    """A registered spec with another reference kernel (everything else is the spec's)."""

    def __init__(self, base) -> None:
        self.base = base

    def __getattr__(self, name: str):
        return getattr(self.base, name)


class _MlasMatMul(_Override):
    """MatMul as onnxruntime's MatMul<float> computes it (one MLAS SGEMM per batch matrix)."""

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """MLAS's summation order for float32 operands of rank >= 2."""
        if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim < 2 or b.ndim < 2:
            return self.base.reference(ctx, a, b)
        from nodes import mlas

        return mlas.matmul(a, b)


def _from_dq(v) -> bool:
    p = v.producer() if v is not None else None
    return p is not None and p.op_type == "DequantizeLinear"


def mlas_gemms(graph: Graph) -> set[str]:
    """Names of the Convs and MatMuls onnxruntime runs through MLAS's SGEMM on dequantized
    operands (both inputs come out of DequantizeLinear)."""
    return {n.name for n in graph.nodes if n.op_type in ("Conv", "MatMul") and not n.domain
            and len(n.inputs) >= 2 and _from_dq(n.inputs[0]) and _from_dq(n.inputs[1])}


class _OrtHardSwish(_Override):
    """HardSwish as onnxruntime runs it: its ONNX function body, HardSigmoid(1/6, 1/2) then Mul,
    each float32 operation rounded on its own (our compiled kernel contracts x / 6 + 1/2 into
    one FMA, which rounds a few values of a tensor to the other side of a quantization step)."""

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """x * clip(x * float32(1/6) + 1/2, 0, 1)."""
        if x.dtype != np.float32:
            return self.base.reference(ctx, x)
        y = x * np.float32(1.0 / 6.0)
        y += np.float32(0.5)
        np.clip(y, 0, 1, out=y)
        return y * x


class _OrtSigmoid(_Override):
    """Sigmoid as MlasComputeLogistic computes it (nodes/mlas.py logistic): onnxruntime's Sigmoid,
    the QuickGelu it fuses x * Sigmoid(x) into, and QLinearSigmoid's table (each code dequantized,
    then the same function, then quantized: what the float unit computes with this kernel)."""

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """The FMA3 kernel's rational polynomial for float32 input."""
        if x.dtype != np.float32:
            return self.base.reference(ctx, x)
        from nodes import mlas

        return mlas.logistic(x)


class _OrtLayerNorm(_Override):
    """LayerNormalization closer to onnxruntime 1.32's float32 CPU kernel. Measured against it
    (its Mean and InvStdDev outputs exposed, PP-OCRv6 rec's 40x120 rows): its mean is the float64
    mean rounded to float32 (40 of 40 rows; float32 sums in index order: 34 differ), and its output
    is fma((x - mean) * inv_std, scale, bias) from those two (0 of 4,800 differ). Its inv_std is
    not reproduced: 1 / sqrt(float64 variance + epsilon) is 1 ulp off on 13 of 40 rows (an
    approximate reciprocal square root?), so 1,297 of 4,800 outputs differ by an ulp, against
    3,067 with the registered kernel's float32 pairwise order."""

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray, b: np.ndarray | None = None):
        """Float64 statistics, float32 (x - mean) * inv_std, then one rounding of * scale + bias."""
        if x.dtype != np.float32 or scale.dtype != np.float32 or (b is not None and b.dtype != np.float32):
            return self.base.reference(ctx, x, scale, b)
        from nodes._util import norm_axis

        axis = norm_axis(int(ctx.attrs["axis"]), x.ndim)
        n = int(np.prod(x.shape[axis:], dtype=np.int64))
        if n == 0:
            return self.base.reference(ctx, x, scale, b)
        rows = x.reshape(-1, n)
        wide = rows.astype(np.float64)
        mean = wide.mean(axis=1, keepdims=True)
        var = (wide * wide).mean(axis=1, keepdims=True) - mean * mean
        mean32 = mean.astype(np.float32)
        inv = (1.0 / np.sqrt(var + np.float64(np.float32(ctx.attrs["epsilon"])))).astype(np.float32)
        y = ((rows - mean32) * inv).astype(np.float64) * scale.reshape(1, -1)
        if b is not None:
            y += b.reshape(1, -1)
        stat_shape = (*x.shape[:axis], *([1] * (x.ndim - axis)))
        return [y.astype(np.float32).reshape(x.shape), mean32.reshape(stat_shape), inv.reshape(stat_shape)]


class RuntimeExecutor(Executor):
    """An Executor of ``runtime_graph(graph)`` whose QDQ Convs follow MLAS's float order and whose
    HardSwish is onnxruntime's function body."""

    def __init__(self, graph: Graph, max_bytes: int | None = None) -> None:
        super().__init__(runtime_graph(graph), max_bytes)
        self._mlas = mlas_gemms(self.graph)

    def _plan(self, graph: Graph, fused: bool = False, keep: frozenset[str] = frozenset(),
              overridden: frozenset[str] = frozenset()):
        # Always the unfused plan: the fused one folds BatchNormalization and runs epilogues in
        # place, which is our order, not onnxruntime's.
        plan = super()._plan(graph, False, keep, overridden)
        conv, mm, hswish = registry.get("Conv"), registry.get("MatMul"), registry.get("HardSwish")
        lnorm, sigmoid = registry.get("LayerNormalization"), registry.get("Sigmoid")
        for step in (*plan.steps, *plan.const_steps):
            if step.spec is conv and step.node.name in self._mlas:
                step.spec = _MLAS_CONV
            elif step.spec is mm and step.node.name in self._mlas:
                step.spec = _MlasMatMul(mm)
            elif step.spec is hswish:
                step.spec = _OrtHardSwish(hswish)
            elif step.spec is lnorm:
                step.spec = _OrtLayerNorm(lnorm)
            elif step.spec is sigmoid:
                step.spec = _OrtSigmoid(sigmoid)
            if step.fn is not None:  # the plan binds each kernel once
                step.fn = step.spec.reference
        return plan


def runtime_executor(graph: Graph) -> Executor:
    """An executor that computes what onnxruntime's CPU provider (one thread, default graph
    optimizations, x86-64) computes for a QDQ graph: its integer kernels where it fuses node
    units, MLAS's float order in the Convs it runs in float."""
    return RuntimeExecutor(graph)
