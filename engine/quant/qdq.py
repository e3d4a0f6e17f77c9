"""Building the quantized model in QDQ form: QuantizeLinear/DequantizeLinear around quantizable ops.

Activation tensor t with parameters (s, z) becomes  t -> QuantizeLinear(s, z) -> DequantizeLinear(s, z)
for the consumers that run at that precision. Weights are stored quantized (int8/int16, symmetric,
per output channel with ``per_channel``) behind a DequantizeLinear; biases of Conv/Gemm are stored
as int32 with scale = input_scale * weight_scale, zero point 0. FP16/BF16 layers get Cast pairs
(float -> fp16 -> float) on their inputs, which rounds exactly as the lower precision would.
Running this graph in our executor is the simulation; running it in onnxruntime is the check.

Ops inside If/Loop/Scan bodies are quantized like the main graph's: an activation's Q/DQ pair
goes into the graph that defines the tensor (so a value captured from the outer scope is
quantized once, outside, for every reader), weights and biases beside the op that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from onnx import TensorProto

from engine.diagnostics import INFO, WARNING, Diagnostic
from engine.ir.clone import clone_graph
from engine.ir.graph import Graph, Node, Value
from engine.passes.base import subgraphs
from engine.quant.calibrate import (
    Calibration,
    fused_into_producer,
    is_float_activation,
    is_float_dtype,
    quantizable_nodes,
)
from engine.quant.config import QuantConfig, quant_spec
from engine.quant.observers import HistogramObserver, Observer
from engine.quant.params import (
    FLOAT_PRECISIONS,
    QuantParams,
    bias_params,
    params_from_range,
    quantize_array,
    type_limits,
    weight_params,
)
from engine.quant.tflite_spec import CONST_OPERAND_OPS, const_operand_params, plan_params
from nodes.types import TensorType

CAST_TO = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}


@dataclass
class QuantizedModel:
    """The QDQ graph and every parameter chosen, by tensor name."""

    graph: Graph
    activations: dict[str, QuantParams] = field(default_factory=dict)
    weights: dict[str, QuantParams] = field(default_factory=dict)
    biases: dict[str, QuantParams] = field(default_factory=dict)
    node_precision: dict[str, str] = field(default_factory=dict)
    node_params: dict[str, dict[str, QuantParams]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def params_json(self) -> dict:
        """Quantization parameters for plan.json."""
        return {
            "activations": {k: v.to_json() for k, v in sorted(self.activations.items())},
            "weights": {k: v.to_json() for k, v in sorted(self.weights.items())},
            "biases": {k: v.to_json() for k, v in sorted(self.biases.items())},
            "precision": dict(sorted(self.node_precision.items())),
        }


_INT_PRECISION = {"int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "int16"}


def read_precisions(graph: Graph) -> dict[str, str]:
    """The precision each quantizable node of a QDQ model computes in, read from the graph: the
    integer type of the DequantizeLinear feeding its data inputs (the widest wins), fp16/bf16
    when they come through a Cast pair, its producer's when it reads a quantized op's output
    directly (an epilogue such as Relu after Conv), fp32 when they are plain float. Empty for a model with
    no QuantizeLinear/DequantizeLinear (nothing to read: it is not a QDQ model)."""
    if not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.nodes):
        return {}
    out: dict[str, str] = {}
    for node in graph.toposort():
        q = quant_spec(node)
        if q is None:
            continue
        found: list[str] = []
        for i, v in enumerate(node.inputs):
            if v is None or i == q.bias_input or i in q.float_inputs:
                continue
            p = v.producer()
            if p is None and v.const is not None:
                continue  # a float constant (a weight left in float is judged by the activations)
            if p is not None and p.name in out:
                found.append(out[p.name])  # an epilogue (Relu after Conv) runs in its producer
            elif p is not None and p.op_type == "DequantizeLinear" and p.inputs and p.inputs[0] is not None:
                dt = p.inputs[0].type.dtype
                found.append(_INT_PRECISION.get(np.dtype(dt).name, "int8") if dt is not None else "int8")
            elif p is not None and p.op_type == "Cast" and p.inputs and p.inputs[0] is not None \
                    and p.inputs[0].type.dtype is not None and np.dtype(p.inputs[0].type.dtype).name in ("float16", "bfloat16"):
                found.append("fp16" if np.dtype(p.inputs[0].type.dtype).name == "float16" else "bf16")
            else:
                found.append("fp32")
        if found:
            order = ["int8", "uint8", "int16", "fp16", "bf16", "fp32"]
            out[node.name] = max(found, key=order.index) if "fp32" not in found else "fp32"
    return out


def activation_params(calib: Calibration, tensor: str, dtype: str, config: QuantConfig) -> QuantParams:
    """Parameters of an activation tensor from its calibration statistics."""
    obs = calib.stats.get(tensor)
    if obs is None:
        raise KeyError(f"tensor {tensor!r} was not calibrated")
    _, qmin, qmax = type_limits(dtype)
    nlevels = qmax - qmin + 1
    method = config.method_overrides.get(tensor, config.method)
    if isinstance(obs, HistogramObserver):
        lo, hi = obs.range_for(method, min(nlevels, 256) if dtype != "int16" else nlevels,
                               config.tensor_percentile(tensor))
    else:
        lo, hi = obs.range(nlevels)
    symmetric = config.symmetric or dtype == "int16"
    return params_from_range(lo, hi, dtype, symmetric)


def converted_to_opset(graph: Graph, version: int) -> tuple[Graph, list[Diagnostic]]:
    """The graph at default-domain opset >= ``version`` (onnx's version converter when raising)."""
    if graph.opset("") >= version:
        return graph, []
    import onnx.version_converter

    from engine.ir.infer import infer_shapes
    from engine.ir.onnx_io import from_onnx, to_onnx

    old = graph.opset("")
    try:
        model = onnx.version_converter.convert_version(to_onnx(graph), version)
    except Exception as exc:  # the converter raises many types for adapters it lacks
        return graph, [Diagnostic(WARNING, None, "opset-raise-failed",
                                  f"could not raise opset {old} to {version}: {str(exc).splitlines()[0][:160]}")]
    g = from_onnx(model)
    infer_shapes(g)
    g = refuse_activations(graph, g)
    return g, [Diagnostic(INFO, None, "opset-raised", f"opset raised from {old} to {version} for QDQ")]


# Ops that move values without changing them: a tensor on either side has the same value set.
_VALUE_PRESERVING = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"})


def with_layout_aliases(g: Graph, calib: Calibration) -> Calibration:
    """``calib`` with statistics for tensors the opset raise created around a value-preserving op.

    onnx's version converter rewrites an opset < 13 Softmax/LogSoftmax/Hardmax on a 4-D tensor
    as Flatten -> Softmax -> Reshape with a new ``<output>_intermediate`` value that calibration
    (run on the graph before the raise) never saw. Such a value holds exactly the values of the
    calibrated tensor on the other side of the Reshape/Flatten/..., so it shares its observer.
    """
    stats = calib.stats
    added: dict[str, Observer] = {}
    changed = True
    while changed:
        changed = False
        for node in g.nodes:
            if node.op_type not in _VALUE_PRESERVING or not node.inputs or node.inputs[0] is None \
                    or not node.outputs or node.outputs[0] is None:
                continue
            a, b = node.inputs[0].name, node.outputs[0].name
            known = lambda n: n in stats or n in added  # noqa: E731
            if known(a) and not known(b):
                added[b] = added.get(a) or stats[a]
                changed = True
            elif known(b) and not known(a) and node.inputs[0].const is None:
                added[a] = added.get(b) or stats[b]
                changed = True
    return replace(calib, stats={**stats, **added}) if added else calib


def refuse_activations(src: Graph, g: Graph) -> Graph:
    """``g`` (``src`` written to ONNX and read back) with ``src``'s fused activations fused again
    and every node's metadata copied by name.

    The ONNX writer writes a fused activation out as its own nodes after a ``<output>_preact``
    value; without fusing them back, an opset raise (int16 needs opset 21) would leave those
    activations as separate, uncalibrated ops. Only the activation types ``src`` carries fused
    are fused again: ``src`` is at the fixed point of the fuse_activation pass for those, and a
    type it keeps apart (TFLite mode keeps HardSwish, Sigmoid ... as ops of their own) stays
    apart, so no value the analysis compares disappears.
    """
    fused = {n.activation.op_type for n in src.all_nodes() if n.activation}
    if fused:
        from engine.ir.fused import FUSABLE_ACTIVATIONS
        from engine.passes.fuse_activation import activation_pass

        kept_apart = tuple(f"fuse_activation.{a.lower()}" for a in FUSABLE_ACTIVATIONS if a not in fused)
        g = activation_pass(kept_apart).run(g).graph
    metas = {n.name: n.meta for n in src.all_nodes()}
    for dst in g.all_nodes():
        if dst.name in metas:
            dst.meta = dict(metas[dst.name])
    return g


class _Builder:
    def __init__(self, graph: Graph, calib: Calibration, config: QuantConfig, result: QuantizedModel) -> None:
        self.g = graph
        self.calib = calib
        self.config = config
        self.res = result
        self.qdq_cache: dict[tuple[str, str], Value] = {}
        self.spec: dict[str, QuantParams] = {}

    def params(self, tensor: str, precision: str) -> QuantParams:
        """A tensor's parameters: the TFLite spec's where it imposes them, else calibrated."""
        qp = self.spec.get(tensor) if precision == "int8" else None
        return qp if qp is not None else activation_params(self.calib, tensor, precision, self.config)

    def const_operand(self, node: Node, idx: int) -> None:
        """Store a float constant operand of an element-wise op as int8 behind a DequantizeLinear."""
        c = node.inputs[idx]
        if c is None or c.const is None or c.const.dtype.kind != "f":
            return
        qp = const_operand_params(c.const)
        g = node.graph or self.g
        qc = self.const(g, f"{c.name}_quantized", quantize_array(c.const, qp))
        scale = self.const(g, f"{c.name}_scale", np.asarray(qp.scale, np.float32))
        zp = self.const(g, f"{c.name}_zero_point", np.asarray(qp.zero_point))
        dq = g.make_node("DequantizeLinear", [qc, scale, zp], name=f"{c.name}_DequantizeLinear",
                              output_names=[f"{c.name}_dequantized"])
        dq.outputs[0].type = TensorType(np.dtype(np.float32), c.type.shape)
        node.set_input(idx, dq.outputs[0])
        self.res.weights[c.name] = qp

    def const(self, g: Graph, base: str, array: np.ndarray) -> Value:
        return g.add_initializer(base, np.asarray(array))

    def scope_of(self, v: Value) -> Graph:
        """The graph a tensor is defined in: its Q/DQ go there, visible to every reader (readers
        inside If/Loop/Scan bodies included)."""
        return v.graph if v.graph is not None else self.g

    def qdq(self, v: Value, qp: QuantParams, key: str) -> Value:
        """Q -> DQ after ``v`` (in ``v``'s graph); cached per (tensor, precision)."""
        cached = self.qdq_cache.get((v.name, key))
        if cached is not None:
            return cached
        g = self.scope_of(v)
        scale = self.const(g, f"{v.name}_scale", np.asarray(qp.scale, np.float32))
        zp = self.const(g, f"{v.name}_zero_point", np.asarray(qp.zero_point))
        src = self.to_float32(v)
        q = g.make_node("QuantizeLinear", [src, scale, zp], name=f"{v.name}_QuantizeLinear",
                             output_names=[f"{v.name}_quantized"])
        q.outputs[0].type = TensorType(np.asarray(qp.zero_point).dtype, v.type.shape)
        dq = g.make_node("DequantizeLinear", [q.outputs[0], scale, zp], name=f"{v.name}_DequantizeLinear",
                              output_names=[f"{v.name}_dequantized"])
        dq.outputs[0].type = TensorType(np.dtype(np.float32), v.type.shape)
        out = self.from_float32(dq.outputs[0], v.type.dtype)
        self.qdq_cache[(v.name, key)] = out
        return out

    def to_float32(self, v: Value) -> Value:
        """``v`` itself when float32 (or unknown), else a Cast of it to float32: QuantizeLinear
        takes float16/bfloat16 only from opset 19, and the model keeps its own opset."""
        dt = v.type.dtype
        if dt is None or np.dtype(dt) == np.float32:
            return v
        c = self.scope_of(v).make_node("Cast", [v], attrs={"to": TensorProto.FLOAT}, name=f"{v.name}_to_float32",
                             output_names=[f"{v.name}_float32"])
        c.outputs[0].type = TensorType(np.dtype(np.float32), v.type.shape)
        return c.outputs[0]

    def from_float32(self, v: Value, dtype) -> Value:
        """A float32 dequantized value cast back to the model's float type (float16/bfloat16)."""
        if dtype is None or np.dtype(dtype) == np.float32:
            return v
        from nodes.types import onnx_elem_type

        c = self.scope_of(v).make_node("Cast", [v], attrs={"to": onnx_elem_type(np.dtype(dtype))},
                                       name=f"{v.name}_to_model_type",
                             output_names=[f"{v.name}_{np.dtype(dtype).name}"])
        c.outputs[0].type = TensorType(np.dtype(dtype), v.type.shape)
        return c.outputs[0]

    def cast_pair(self, v: Value, precision: str) -> Value:
        cached = self.qdq_cache.get((v.name, precision))
        if cached is not None:
            return cached
        g = self.scope_of(v)
        down = g.make_node("Cast", [v], attrs={"to": CAST_TO[precision]}, name=f"{v.name}_to_{precision}",
                                output_names=[f"{v.name}_{precision}"])
        down.outputs[0].type = TensorType(None, v.type.shape)
        up = g.make_node("Cast", [down.outputs[0]], attrs={"to": TensorProto.FLOAT},
                              name=f"{v.name}_from_{precision}", output_names=[f"{v.name}_{precision}_f32"])
        up.outputs[0].type = TensorType(np.dtype(np.float32), v.type.shape)
        self.qdq_cache[(v.name, precision)] = up.outputs[0]
        return up.outputs[0]

    def weight(self, node: Node, idx: int, precision: str) -> QuantParams | None:
        w = node.inputs[idx]
        if w is None or w.const is None or not is_float_dtype(w.const.dtype):
            return None
        if precision in FLOAT_PRECISIONS:
            if precision != "fp32":
                node.set_input(idx, self.cast_pair(w, precision))
            return None
        wdt = "int16" if precision == "int16" else "int8"
        g = node.graph or self.g
        q = quant_spec(node)
        axis = q.weight_axis(node) if q is not None and q.weight_axis is not None else 0
        per_channel = (self.config.per_channel or self.config.tflite) and w.const.ndim >= 2
        qp = weight_params(w.const, wdt, True, per_channel, axis,
                           self.config.reduce_range)
        qw = self.const(g, f"{w.name}_quantized", quantize_array(w.const.astype(np.float32), qp))
        scale = self.const(g, f"{w.name}_scale", np.asarray(qp.scale, np.float32))
        zp = self.const(g, f"{w.name}_zero_point", np.asarray(qp.zero_point))
        attrs = {"axis": axis} if qp.per_channel else {}
        dq = g.make_node("DequantizeLinear", [qw, scale, zp], attrs=attrs, name=f"{w.name}_DequantizeLinear",
                              output_names=[f"{w.name}_dequantized"])
        dq.outputs[0].type = TensorType(np.dtype(np.float32), w.type.shape)
        node.set_input(idx, self.from_float32(dq.outputs[0], w.const.dtype))
        self.res.weights[w.name] = qp
        return qp

    def bias(self, node: Node, in_qp: QuantParams | None, w_qp: QuantParams | None, precision: str) -> None:
        """Store a Conv/Gemm bias as int32 behind a DequantizeLinear (scale input x weight).

        A bias left float beside a dequantized input is not a safe form: onnxruntime's
        WeightBiasQuantization (ORT_ENABLE_BASIC and up) quantizes it to int32 at input x weight
        scale without a range check, and a 16-bit layer's bias above ~2 comes back as -2^31
        (PP-OCRv6 rec with int16 raises: 34.4 dB without optimizations, 3.6 dB with). So a
        16-bit layer's bias that int32 cannot hold at that scale gets a wider scale instead
        (bias_params). An 8-bit layer's stays float as before: onnxruntime fuses a uint8 Conv into
        QLinearConv, which reads an int32 bias as if at input x weight scale whatever its
        DequantizeLinear says, so no stored form is right there (8-bit biases fit in practice).
        """
        q = quant_spec(node)
        idx = q.bias_input if q is not None else None
        b = node.input(idx) if idx is not None else None
        if b is None or b.const is None or in_qp is None or w_qp is None or b.const.ndim != 1:
            return
        if np.ndim(in_qp.scale) != 0:
            return
        bias = b.const.astype(np.float32).astype(np.float64)
        bqp = bias_params(in_qp, w_qp, bias if precision == "int16" else None)
        if np.ndim(bqp.scale) == 1 and bqp.scale.shape[0] != b.const.shape[0]:
            return
        qb = np.rint(bias / bqp.scale)
        if not np.all(np.abs(qb) <= 2**31 - 1):  # an 8-bit layer whose bias int32 cannot hold: left float
            return
        qb = qb.astype(np.int32)
        g = node.graph or self.g
        qv = self.const(g, f"{b.name}_quantized", qb)
        scale = self.const(g, f"{b.name}_scale", np.asarray(bqp.scale, np.float32))
        zp = self.const(g, f"{b.name}_zero_point", np.zeros(np.shape(bqp.scale), np.int32))
        attrs = {"axis": 0} if bqp.per_channel else {}
        dq = g.make_node("DequantizeLinear", [qv, scale, zp], attrs=attrs, name=f"{b.name}_DequantizeLinear",
                              output_names=[f"{b.name}_dequantized"])
        dq.outputs[0].type = TensorType(np.dtype(np.float32), b.type.shape)
        node.set_input(idx, self.from_float32(dq.outputs[0], b.const.dtype))  # type: ignore[arg-type]
        self.res.biases[b.name] = bqp


def _output_through_qdq(g: Graph, v: Value, dq: Value) -> None:
    """Make the model output ``v`` the quantized-then-dequantized value, under ``v``'s name
    (an integer runtime hands out the int8 tensor; the name stays what users know)."""
    name = v.name
    idx = [k for k, o in enumerate(g.outputs) if o is v]
    del g.values[v.name]
    del g.values[dq.name]
    v.name = g.unique_name(f"{name}_float")
    g.values[v.name] = v
    dq.name = name
    g.values[name] = dq
    for k in idx:
        g.set_output(k, dq)


def _never_ran(calib: Calibration, node: Node) -> bool:
    """True when calibration observed the node's output but saw no value: the node sits in an
    If branch (or a Loop/Scan body) that none of the samples executed."""
    obs = calib.stats.get(node.outputs[0].name) if node.outputs and node.outputs[0] is not None else None
    return obs is not None and obs.count == 0 and node.graph is not None and node.graph.parent is not None


def build_qdq(graph: Graph, calib: Calibration, config: QuantConfig) -> QuantizedModel:
    """The QDQ model of ``graph`` (the input graph is not modified)."""
    needs_int16 = config.dtype == "int16" or "int16" in config.precision.values()
    g, diags = converted_to_opset(clone_graph(graph), 21 if needs_int16 else 13)
    calib = with_layout_aliases(g, calib)
    res = QuantizedModel(g, diagnostics=list(diags))
    b = _Builder(g, calib, config, res)
    if config.tflite:
        def calibrated(name: str) -> QuantParams | None:
            try:
                return activation_params(calib, name, "int8", config)
            except KeyError:
                return None

        b.spec = plan_params(g, calibrated)
    nodes = quantizable_nodes(g, config)
    if not nodes:
        raise ValueError("model has no quantizable op (Conv, Gemm, MatMul, ...): nothing to quantize")
    quantized_outputs: dict[str, tuple[Value, str]] = {}
    for node in nodes:
        precision = config.node_precision(node.name)
        if precision not in FLOAT_PRECISIONS and _never_ran(calib, node):
            where = f"it is in body {node.graph.name!r}, which"
            res.diagnostics.append(Diagnostic(WARNING, node.name, "not-calibrated",
                                              f"{node.op_type} {node.name!r} never ran on the calibration data "
                                              f"({where} did not execute); left in float"))
            continue
        res.node_precision[node.name] = precision
        params: dict[str, QuantParams] = {}
        in_qp: QuantParams | None = None
        q = quant_spec(node)
        widx = q.weight_input if q is not None else None
        for i, v in enumerate(node.inputs):
            if i == widx and v is not None and v.const is not None:
                continue
            if (q is not None and i == q.bias_input) or not is_float_activation(v):
                continue
            if q is not None and i in q.float_inputs:
                continue  # bounds, scales/sizes and LayerNorm's gamma stay float
            if precision in FLOAT_PRECISIONS:
                if precision != "fp32":
                    node.set_input(i, b.cast_pair(v, precision))
                continue
            if fused_into_producer(node, config):
                continue  # the epilogue of the producing compute op: no requantization between
            try:
                qp = b.params(v.name, precision)
            except KeyError:
                res.diagnostics.append(Diagnostic(WARNING, node.name, "not-calibrated",
                                                  f"input {v.name!r} was not calibrated; left in float"))
                continue
            res.activations.setdefault(v.name, qp)
            params[v.name] = qp
            node.set_input(i, b.qdq(v, qp, precision))  # type: ignore[arg-type]
            if i == 0:
                in_qp = qp
        if config.tflite and node.op_type in CONST_OPERAND_OPS and precision == "int8":
            for i in range(len(node.inputs)):
                b.const_operand(node, i)
        w_qp = b.weight(node, widx, precision) if widx is not None else None
        if w_qp is not None and in_qp is not None and precision not in FLOAT_PRECISIONS:
            b.bias(node, in_qp, w_qp, precision)
        out = node.outputs[0]
        if precision not in FLOAT_PRECISIONS and out is not None and (config.tflite or not out.is_graph_output):
            consumers = out.consumers()
            if out.is_graph_output or (consumers and not (len(consumers) == 1
                                                          and fused_into_producer(consumers[0], config))):
                quantized_outputs[out.name] = (out, precision)
        res.node_params[node.name] = params
    # Outputs of quantized ops are requantized for all their consumers (the NPU stores them as integers).
    for name, (v, precision) in quantized_outputs.items():
        qp = b.params(name, precision)
        res.activations.setdefault(name, qp)
        dq = b.qdq(v, qp, precision)
        for user, idx in v.uses():
            if user.op_type != "QuantizeLinear" and not (user.outputs and user.outputs[0] is dq):
                user.set_input(idx, dq)
        if v.is_graph_output:
            _output_through_qdq(v.graph or g, v, dq)
    if config.tflite:  # model inputs read by ops that do not quantize them (Slice, Reshape, ...)
        for v in g.inputs:
            if not is_float_activation(v) or all(u.op_type == "QuantizeLinear" for u, _ in v.uses()):
                continue
            try:
                qp = b.params(v.name, "int8")
            except KeyError:
                continue
            res.activations.setdefault(v.name, qp)
            dq = b.qdq(v, qp, "int8")
            for user, idx in v.uses():
                if user.op_type != "QuantizeLinear":
                    user.set_input(idx, dq)
    # Float weights replaced by their quantized copies are dropped (in bodies too).
    for scope in (g, *subgraphs(g)):
        for name, v in list(scope.initializers.items()):
            if not v.uses() and not v.is_graph_output and name not in scope.overridable:
                scope.remove_initializer(name)
    return res
