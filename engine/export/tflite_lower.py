"""Lowering a QDQ graph (built with the TFLite spec) to a full-integer int8 TFLite program.

Every QuantizeLinear output becomes an int8 tensor; DequantizeLinear outputs alias it; each
compute node between them becomes one TFLite operator writing the int8 tensor of the Q that
follows it. Feature maps are NHWC: 4-D activations are stored transposed, 4-D constants are
transposed at export time, and a flatten of an NHWC map feeding a FULLY_CONNECTED permutes the
weight's columns instead of transposing the activation. Weights keep the QDQ model's int8
values and per-channel scales (zero point 0); biases keep their int32 values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.errors import InputError
from engine.export.tflite_ir import TModel, TTensor
from engine.export.tflite_lower_ops import LoweringOps
from engine.export.tflite_lower_seq import FLOAT_FORMS, SeqOps
from engine.ir.fused import fused_activation
from engine.ir.graph import Graph, Node, Value

NCHW_TO_NHWC = (0, 2, 3, 1)
AXIS_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}
ELEMENTWISE = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Max": "MAXIMUM", "Min": "MINIMUM", "Sum": "ADD"}
UNARY = {"HardSwish": "HARD_SWISH", "Sigmoid": "LOGISTIC", "Tanh": "TANH", "Relu": "RELU",
         "LeakyRelu": "LEAKY_RELU"}
PASS_THROUGH = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
SPATIAL = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "Resize"})
"""ONNX ops whose presence makes 4-D activations NHWC feature maps."""
SUPPORTED = frozenset({"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
                       "Concat", "Softmax", "Clip", "Transpose", "Pad", "Slice", "Split", "Resize",
                       "ReduceMean", "PRelu", "ConvTranspose", "Gelu", "Pow", *ELEMENTWISE, *UNARY, *PASS_THROUGH})
"""ONNX ops (between Q/DQ) that have a TFLite int8 form here."""


class _Lowering(LoweringOps, SeqOps):
    def __init__(self, graph: Graph, allow_float_ops: bool = False) -> None:
        self.g = graph
        self.allow_float_ops = allow_float_ops
        # 4-D tensors are NHWC feature maps when the graph has spatial ops; otherwise (attention
        # heads, [batch, heads, seq, dim]) they keep ONNX's axis order
        self.m = TModel(nhwc=any(n.op_type in SPATIAL for n in graph.nodes))
        self.tensor: dict[str, int] = {}  # float value name -> int8 tensor index
        self.flat_perm: dict[int, np.ndarray] = {}  # tensor -> NCHW flat index of each element

    # -- tensors --------------------------------------------------------------------------------
    def tfl_shape(self, shape: Any) -> tuple[int, ...]:
        s = tuple(int(d) for d in shape)
        return tuple(s[i] for i in NCHW_TO_NHWC) if self.nhwc4(len(s)) else s

    def q_tensor(self, q: Node, shape: Any) -> int:
        """The int8 tensor of a QuantizeLinear's output."""
        scale, zp = q.inputs[1].const, q.inputs[2].const  # type: ignore[union-attr]
        if zp is None or scale is None or zp.dtype != np.int8 or np.ndim(scale) != 0:
            raise InputError(f"TFLite export: {q.name!r} is not per-tensor int8 (TFLite needs int8 activations)")
        return self.m.add(TTensor(q.outputs[0].name, self.tfl_shape(shape), "int8",  # type: ignore[union-attr]
                                  np.asarray([scale], np.float32), np.asarray([zp], np.int64)))

    def value(self, v: Value | None, node: Node) -> int:
        """The int8 tensor of an activation input."""
        if v is None or v.name not in self.tensor:
            raise InputError(f"TFLite export: input {getattr(v, 'name', None)!r} of {node.op_type} {node.name!r} "
                             "is not an int8 tensor (was it quantized?)")
        return self.tensor[v.name]

    @staticmethod
    def dq_const(v: Value | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
        """(int values, scale, zero point, axis) of a constant behind a DequantizeLinear."""
        p = v.producer() if v is not None else None
        if p is None or p.op_type != "DequantizeLinear" or p.inputs[0] is None or p.inputs[0].const is None:
            return None
        return (p.inputs[0].const, np.asarray(p.inputs[1].const, np.float32),  # type: ignore[union-attr]
                np.asarray(p.inputs[2].const), int(p.attrs.get("axis", 1)))

    def output_q(self, node: Node) -> tuple[Node | None, dict[str, Any] | None, Value]:
        """(QuantizeLinear after the node, activation record fused after it, last float value)."""
        out = node.outputs[0]
        assert out is not None
        act = None
        cons = out.consumers()
        if len(cons) == 1 and cons[0].op_type in ("Relu", "Clip") \
                and node.op_type in ("Conv", "Gemm", "MatMul", "ConvTranspose"):
            act_node = cons[0]
            act = _record(act_node)
            out = act_node.outputs[0]  # type: ignore[assignment]
            self.skip.add(act_node.name)
        qs = [c for c in out.consumers() if c.op_type == "QuantizeLinear"]  # type: ignore[union-attr]
        return (qs[0] if qs else None), act, out  # type: ignore[return-value]

    def out_tensor(self, node: Node, like: int | None = None) -> tuple[int, dict[str, Any] | None]:
        """The int8 output tensor of ``node`` (its Q's, or ``like``'s parameters for data movement)."""
        q, act, out = self.output_q(node)
        if q is not None:
            t = self.q_tensor(q, out.type.shape)
            self.tensor[q.outputs[0].name] = t  # type: ignore[union-attr]
            self.done_q.add(q.name)
        elif like is not None:
            src = self.m.tensors[like]
            t = self.m.add(TTensor(out.name, self.tfl_shape(out.type.shape), "int8", src.scale, src.zero_point))
        else:
            raise InputError(f"TFLite export: output of {node.op_type} {node.name!r} is not quantized "
                             "(TFLite int8 needs every tensor quantized)")
        self.tensor[out.name] = t
        return t, act

    # -- driver ---------------------------------------------------------------------------------
    def run(self) -> TModel:
        self.skip: set[str] = set()
        self.done_q: set[str] = set()
        self.pending: list[tuple[int, int, str]] = []  # (written, requantized into, node) after an op
        g = self.g
        for v in g.inputs:
            qs = [c for c in v.consumers() if c.op_type == "QuantizeLinear"]
            if len(qs) != 1 or len(v.consumers()) != 1:
                raise InputError(f"TFLite export: model input {v.name!r} is not quantized once")
            if v.type.shape is None or not all(isinstance(d, int) for d in v.type.shape):
                raise InputError(f"TFLite export: model input {v.name!r} has a dynamic shape {v.type.shape}")
            t = self.q_tensor(qs[0], v.type.shape)
            self.m.tensors[t].name = v.name
            self.tensor[qs[0].outputs[0].name] = t  # type: ignore[union-attr]
            self.done_q.add(qs[0].name)
            self.m.inputs.append(t)
        for node in g.toposort():
            if node.name in self.skip:
                continue
            if node.op_type == "QuantizeLinear":
                self.quantize(node)
            elif node.op_type == "DequantizeLinear":
                src = node.inputs[0]
                if src is not None and src.const is None:
                    self.tensor[node.outputs[0].name] = self.value(src, node)  # type: ignore[union-attr]
            elif node.op_type == "Shape" and self.shape_only(node):
                continue  # static shapes: the RESHAPE that reads it takes its shape from the IR
            elif node.op_type not in SUPPORTED or node.domain:
                if not (self.allow_float_ops and node.op_type in FLOAT_FORMS and not node.domain):
                    hint = " or --allow-float-ops keeps it float in model.tflite" \
                        if node.op_type in FLOAT_FORMS else ""
                    raise InputError(f"TFLite export: op {node.op_type} ({node.name!r}) has no TFLite int8 form "
                                     f"(compile --no-tflite writes the bundle without model.tflite{hint})")
                self.float_island(node)
            else:
                getattr(self, f"op_{node.op_type.lower()}", self.op_generic)(node)
                for t, y, name in self.pending:
                    self.m.op("QUANTIZE", [t], [y], name)
                    if t in self.flat_perm:
                        self.flat_perm[y] = self.flat_perm[t]
                self.pending.clear()
        for v in g.outputs:
            if v.name not in self.tensor:
                raise InputError(f"TFLite export: model output {v.name!r} is not an int8 tensor")
            t = self.tensor[v.name]
            self.m.tensors[t].name = v.name
            self.m.outputs.append(t)
        return self.m

    @staticmethod
    def shape_only(node: Node) -> bool:
        """True when a Shape node's value only feeds the shape input of Reshape nodes."""
        out = node.outputs[0]
        return out is not None and all(u.op_type == "Reshape" and k == 1 for u, k in out.uses()) \
            and not out.is_graph_output

    def quantize(self, q: Node) -> None:
        if q.name in self.done_q:
            return
        x = q.inputs[0]
        src = self.value(x, q)
        t = self.q_tensor(q, x.type.shape)  # type: ignore[union-attr]
        self.tensor[q.outputs[0].name] = t  # type: ignore[union-attr]
        a, b = self.m.tensors[src], self.m.tensors[t]
        if a.scalar_scale() == b.scalar_scale() and a.scalar_zp() == b.scalar_zp():
            self.tensor[q.outputs[0].name] = src  # type: ignore[union-attr]
            self.m.tensors.pop()
            return
        self.m.op("QUANTIZE", [src], [t], q.name)

    # -- ops --------------------------------------------------------------------------------------
    def _bias(self, node: Node, idx: int, n_out: int, in_t: int, w_scale: np.ndarray,
              fold: tuple[float, float] | None = None) -> int:
        b = self.dq_const(node.input(idx)) if node.input(idx) is not None else None
        s_in = self.m.tensors[in_t].scalar_scale()
        scale = (np.float64(s_in) * np.asarray(w_scale, np.float64)).astype(np.float32)
        scale = np.broadcast_to(scale, (n_out,)).copy()
        if b is not None:
            vals = b[0].astype(np.int64)
        elif node.input(idx) is not None and node.input(idx).const is not None:  # type: ignore[union-attr]
            vals = np.rint(node.input(idx).const.astype(np.float64) / scale).astype(np.int64)  # type: ignore[union-attr]
        else:
            vals = np.zeros(n_out, np.int64)
        if fold is not None:  # HardSigmoid folded: bias' = alpha * b + beta, in the new scale
            alpha, beta = fold
            real = vals.astype(np.float64) * np.asarray(scale, np.float64) * alpha + beta
            scale = (scale.astype(np.float64) * alpha).astype(np.float32)
            vals = np.rint(real / scale).astype(np.int64)
        vals = np.clip(vals, -(2**31), 2**31 - 1).astype(np.int32)
        return self.m.const(f"{node.name}_bias", vals, scale, np.zeros(n_out, np.int64))

    def _act(self, act: dict[str, Any] | None, node: Node) -> tuple[str, tuple[float, float] | None]:
        if act is None:
            return "NONE", None
        op, attrs = act["op_type"], act.get("attrs") or {}
        if op == "Relu":
            return "RELU", None
        if op == "Clip":
            lo, hi = attrs.get("min"), attrs.get("max")
            if lo == 0 and hi is None:
                return "RELU", None
            if lo == 0 and hi == 6:
                return "RELU6", None
            if lo == -1 and hi == 1:
                return "RELU_N1_TO_1", None
        if op == "HardSigmoid":
            return "RELU", (float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)))
        raise InputError(f"TFLite export: activation {op} fused into {node.name!r} has no TFLite fused form")

    def op_conv(self, node: Node) -> None:
        x = self.value(node.inputs[0], node)
        w = self.dq_const(node.inputs[1])
        if w is None or w[0].ndim != 4:
            raise InputError(f"TFLite export: Conv {node.name!r} needs constant int8 2-D weights")
        wq, ws, wz, _ = w
        if np.any(wz != 0) or wq.dtype != np.int8:
            raise InputError(f"TFLite export: Conv {node.name!r} weights are not symmetric int8")
        group = int(node.attrs.get("group", 1))
        in_shape = self.m.tensors[x].shape
        c_in, c_out = in_shape[3], wq.shape[0]
        y, act = self.out_tensor(node)
        fused, fold = self._act(act or _as_record(fused_activation(node)), node)
        ws = np.broadcast_to(np.asarray(ws, np.float32).reshape(-1), (c_out,)).astype(np.float32)
        ws_out = (ws.astype(np.float64) * fold[0]).astype(np.float32) if fold else ws
        b = self._bias(node, 2, c_out, x, ws, fold)
        strides = node.attrs.get("strides", [1, 1])
        dil = node.attrs.get("dilations", [1, 1])
        kh, kw = wq.shape[2], wq.shape[3]
        x, padding = self._padding(node, x, (kh, kw), strides, dil, y)
        if group == 1:
            wt = self.m.const(f"{node.name}_weights", wq.transpose(0, 2, 3, 1), ws_out, np.zeros(c_out, np.int64), 0)
            self.m.op("CONV_2D", [x, wt, b], [y], node.name, padding=padding, stride_w=strides[1],
                      stride_h=strides[0], dilation_w=dil[1], dilation_h=dil[0], activation=fused)
        elif group == c_in and wq.shape[1] == 1:
            wt = self.m.const(f"{node.name}_weights", wq.transpose(1, 2, 3, 0), ws_out, np.zeros(c_out, np.int64), 3)
            self.m.op("DEPTHWISE_CONV_2D", [x, wt, b], [y], node.name, padding=padding, stride_w=strides[1],
                      stride_h=strides[0], dilation_w=dil[1], dilation_h=dil[0], activation=fused,
                      depth_multiplier=c_out // c_in)
        else:
            raise InputError(f"TFLite export: grouped Conv {node.name!r} (group={group}) has no TFLite form")

    def _padding(self, node: Node, x: int, k: tuple[int, int], strides: list[int], dil: list[int],
                 y: int, pad_ok: bool = True) -> tuple[int, str]:
        """(input tensor, "SAME"|"VALID"): ONNX pads as TFLite padding, or an explicit PAD first."""
        pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
        in_shape, out_shape = self.m.tensors[x].shape, self.m.tensors[y].shape
        auto = node.attrs.get("auto_pad", "NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else str(auto)
        if auto == "SAME_UPPER":  # TFLite's SAME: the odd padding row/column at the end, as SAME_UPPER
            return x, "SAME"
        if auto == "VALID":
            return x, "VALID"
        if auto != "NOTSET":
            raise InputError(f"TFLite export: {node.name!r} uses auto_pad {auto!r} (TFLite SAME pads at the end)")
        if not any(pads):
            return x, "VALID"
        same = []
        for d in range(2):
            eff = (k[d] - 1) * dil[d] + 1
            out = -(-in_shape[1 + d] // strides[d])
            total = max((out - 1) * strides[d] + eff - in_shape[1 + d], 0)
            same.append((total // 2, total - total // 2, out))
        if all(pads[d] == same[d][0] and pads[d + 2] == same[d][1] and out_shape[1 + d] == same[d][2]
               for d in range(2)):
            return x, "SAME"
        if not pad_ok:
            raise InputError(f"TFLite export: {node.op_type} {node.name!r} pads {pads} are neither SAME nor VALID")
        src = self.m.tensors[x]
        padded = (in_shape[0], in_shape[1] + pads[0] + pads[2], in_shape[2] + pads[1] + pads[3], in_shape[3])
        p = self.m.add(TTensor(f"{node.name}_padded", padded, "int8", src.scale, src.zero_point))
        spec = np.array([[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]], np.int32)
        self.m.op("PAD", [x, self.m.const(f"{node.name}_pads", spec)], [p], node.name)
        return p, "VALID"

    def op_gemm(self, node: Node) -> None:
        if float(node.attrs.get("alpha", 1.0)) != 1.0 or float(node.attrs.get("beta", 1.0)) != 1.0 \
                or node.attrs.get("transA", 0):
            raise InputError(f"TFLite export: Gemm {node.name!r} with alpha/beta/transA has no FULLY_CONNECTED form")
        self._fc(node, transposed=bool(node.attrs.get("transB", 0)))

    def _fc(self, node: Node, transposed: bool) -> None:
        x = self.value(node.inputs[0], node)
        w = self.dq_const(node.inputs[1])
        if w is None or w[0].ndim != 2:
            raise InputError(f"TFLite export: {node.op_type} {node.name!r} needs a constant 2-D int8 weight")
        wq, ws, wz, _ = w
        if np.any(wz != 0):
            raise InputError(f"TFLite export: {node.op_type} {node.name!r} weights are not symmetric")
        wq = wq if transposed else wq.T  # [out, in]
        if x in self.flat_perm:
            wq = wq[:, self.flat_perm[x]]
        in_shape = self.m.tensors[x].shape
        if len(in_shape) > 2 and not self.nhwc4(len(in_shape)):  # rows of a sequence: RESHAPE to 2-D
            x = self._reshape_to(node, x, (int(np.prod(in_shape[:-1])), in_shape[-1]), "rows")
        if len(self.m.tensors[x].shape) != 2:
            raise InputError(f"TFLite export: {node.op_type} {node.name!r} input must be 2-D for FULLY_CONNECTED")
        c_out = wq.shape[0]
        y, act = self.out_tensor(node)
        y_full = None
        if len(self.m.tensors[y].shape) > 2:
            y_full, y = y, self._int8_like(f"{self.m.tensors[y].name}_rows",
                                           (self.m.tensors[x].shape[0], c_out), y)
        fused, fold = self._act(act or _as_record(fused_activation(node)), node)
        ws = np.broadcast_to(np.asarray(ws, np.float32).reshape(-1), (c_out,)).astype(np.float32)
        ws_out = (ws.astype(np.float64) * fold[0]).astype(np.float32) if fold else ws
        b = self._bias(node, 2, c_out, x, ws, fold)
        wt = self.m.const(f"{node.name}_weights", np.ascontiguousarray(wq), ws_out, np.zeros(c_out, np.int64), 0)
        self.m.op("FULLY_CONNECTED", [x, wt, b], [y], node.name, activation=fused)
        if y_full is not None:
            self._reshape_to(node, y, self.m.tensors[y_full].shape, "unrows", out=y_full)

    def _pool(self, node: Node, opcode: str) -> None:
        x = self.value(node.inputs[0], node)
        y, _ = self.out_tensor(node, like=x)
        y = self._same_params(node, x, y)
        k = list(node.attrs["kernel_shape"])
        strides = list(node.attrs.get("strides", [1, 1]))
        if opcode == "AVERAGE_POOL_2D" and node.attrs.get("count_include_pad", 0) and any(node.attrs.get("pads", [])):
            raise InputError(f"TFLite export: AveragePool {node.name!r} counts padding (count_include_pad=1)")
        _, padding = self._padding(node, x, tuple(k), strides, [1, 1], y, pad_ok=False)
        self.m.op(opcode, [x], [y], node.name, padding=padding, stride_w=strides[1], stride_h=strides[0],
                  filter_w=k[1], filter_h=k[0], activation="NONE")

    def _same_params(self, node: Node, x: int, y: int) -> int:
        """The tensor a data-movement op writes: ``y`` when it has ``x``'s (scale, zero point), else a
        tensor with ``x``'s, requantized into ``y`` by a QUANTIZE after the op (TFLite moves int8
        values unchanged)."""
        a, b = self.m.tensors[x], self.m.tensors[y]
        if a.scalar_scale() == b.scalar_scale() and a.scalar_zp() == b.scalar_zp():
            return y
        t = self.m.add(TTensor(f"{b.name}_before_requantize", b.shape, "int8", a.scale, a.zero_point))
        self.pending.append((t, y, node.name))
        return t

    def _strict_params(self, node: Node, x: int, y: int) -> None:
        a, b = self.m.tensors[x], self.m.tensors[y]
        if a.scalar_scale() != b.scalar_scale() or a.scalar_zp() != b.scalar_zp():
            raise InputError(f"TFLite export: {node.op_type} {node.name!r} needs equal input and output "
                             "quantization (quantize for a TFLite target)")

    def op_maxpool(self, node: Node) -> None:
        self._pool(node, "MAX_POOL_2D")

    def op_averagepool(self, node: Node) -> None:
        self._pool(node, "AVERAGE_POOL_2D")

    def op_globalaveragepool(self, node: Node) -> None:
        x = self.value(node.inputs[0], node)
        y, _ = self.out_tensor(node, like=x)
        y = self._same_params(node, x, y)
        _, h, w, _ = self.m.tensors[x].shape
        self.m.op("AVERAGE_POOL_2D", [x], [y], node.name, padding="VALID", stride_w=1, stride_h=1,
                  filter_w=w, filter_h=h, activation="NONE")

    def op_generic(self, node: Node) -> None:
        op = node.op_type
        if op in PASS_THROUGH:
            return self._reshape(node)
        if op in ELEMENTWISE:
            return self._binary(node, ELEMENTWISE[op])
        x = self.value(node.inputs[0], node)
        y, _ = self.out_tensor(node)
        if op == "Clip":
            lo = node.input(1).const if node.input(1) is not None else None  # type: ignore[union-attr]
            hi = node.input(2).const if node.input(2) is not None else None  # type: ignore[union-attr]
            bounds = (None if lo is None else float(lo), None if hi is None else float(hi))
            code = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, 1.0): "RELU_0_TO_1",  # type: ignore[call-overload]
                    (0.0, None): "RELU"}.get(bounds)
            if code is None:
                raise InputError(f"TFLite export: Clip {node.name!r} bounds {bounds} have no TFLite form")
            self.m.op(code, [x], [y], node.name)
        elif op == "Softmax":
            self._softmax(node, x, y)
        elif op == "LeakyRelu":
            self.m.op("LEAKY_RELU", [x], [y], node.name, alpha=float(node.attrs.get("alpha", 0.01)))
        else:
            self.m.op(UNARY[op], [x], [y], node.name)

    def _softmax(self, node: Node, x: int, y: int) -> None:
        """SOFTMAX over the last stored axis: an NHWC map's channels are ONNX axis 1; another
        axis of it is swapped to the end by a TRANSPOSE before and after."""
        rank = len(self.m.tensors[x].shape)
        raw = int(node.attrs.get("axis", -1))
        axis = raw % rank if -rank <= raw < rank else raw
        stored = AXIS_TO_NHWC[axis] if self.nhwc4(rank) and axis in AXIS_TO_NHWC else axis
        if stored == rank - 1:
            self.m.op("SOFTMAX", [x], [y], node.name, beta=1.0)
            return
        if not self.nhwc4(rank) or not 0 <= stored < rank:
            raise InputError(f"TFLite export: Softmax {node.name!r} over axis {raw} (TFLite: the last axis)")
        perm = list(range(rank))
        perm[stored], perm[-1] = perm[-1], perm[stored]
        t = self._transpose(node, x, tuple(perm), "softmax_axis_last")
        ys = self.m.tensors[y]
        s_out = self.m.add(TTensor(f"{ys.name}_axis_last", tuple(ys.shape[p] for p in perm), "int8",
                                   ys.scale, ys.zero_point))
        self.m.op("SOFTMAX", [t], [s_out], node.name, beta=1.0)
        self._transpose(node, s_out, tuple(perm), "", out=y)

    def op_concat(self, node: Node) -> None:
        xs = [self.value(v, node) for v in node.inputs if v is not None]
        y, _ = self.out_tensor(node)
        rank = len(self.m.tensors[y].shape)
        axis = int(node.attrs.get("axis", 1)) % rank
        if self.nhwc4(rank):
            axis = AXIS_TO_NHWC[axis]
        ins = []
        for k, x in enumerate(xs):  # LiteRT's int8 CONCATENATION needs one (scale, zero point)
            a, b = self.m.tensors[x], self.m.tensors[y]
            if a.scalar_scale() != b.scalar_scale() or a.scalar_zp() != b.scalar_zp():
                r = self.m.add(TTensor(f"{node.name}_in{k}_requantized", a.shape, "int8", b.scale, b.zero_point))
                self.m.op("QUANTIZE", [x], [r], node.name)
                x = r
            ins.append(x)
        self.m.op("CONCATENATION", ins, [y], node.name, axis=axis, activation="NONE")

    def _binary(self, node: Node, opcode: str) -> None:
        if len([v for v in node.inputs if v is not None]) != 2:
            raise InputError(f"TFLite export: {node.op_type} {node.name!r} with {len(node.inputs)} inputs "
                             "(TFLite's element-wise ops take two)")
        out = node.outputs[0]
        rank = len(out.type.shape)  # type: ignore[union-attr, arg-type]
        ins = []
        for v in node.inputs:
            c = self.dq_const(v)
            if c is not None:
                q, s, z, _ = c
                if np.ndim(s) != 0:
                    raise InputError(f"TFLite export: constant operand of {node.name!r} is per-channel")
                arr = q.reshape((1,) * (rank - q.ndim) + q.shape) if q.ndim < rank else q
                if self.nhwc4(rank):
                    arr = arr.transpose(NCHW_TO_NHWC)
                ins.append(self.m.const(f"{node.name}_{v.name}", np.ascontiguousarray(arr), [s], [z]))  # type: ignore[union-attr]
                continue
            t = self.value(v, node)
            if len(self.m.tensors[t].shape) != rank and self.nhwc4(rank):
                raise InputError(f"TFLite export: {node.op_type} {node.name!r} broadcasts a lower-rank activation")
            ins.append(t)
        y, _ = self.out_tensor(node)
        if opcode in ("MAXIMUM", "MINIMUM"):  # LiteRT compares raw int8 values: one (scale, zero point)
            for t in ins:
                self._strict_params(node, t, y)
        self.m.op(opcode, ins, [y], node.name, activation="NONE")

    def _reshape(self, node: Node) -> None:
        x = self.value(node.inputs[0], node)
        y, _ = self.out_tensor(node, like=x)
        src, dst = self.m.tensors[x], self.m.tensors[y]
        if src.shape == dst.shape and self._same_params(node, x, y) != y:
            self.pending.pop()
            self.m.tensors.pop()
            self.m.op("QUANTIZE", [x], [y], node.name)
            return
        y = self._same_params(node, x, y)
        dst = self.m.tensors[y]
        if src.shape == dst.shape:
            self.tensor[node.outputs[0].name] = x  # type: ignore[union-attr]
            self.m.tensors.pop()
            self._retarget(y, x)
            return
        perm = self.flat_perm.get(x)
        onnx_out = tuple(int(d) for d in node.outputs[0].type.shape)  # type: ignore[union-attr]
        if self.m.nhwc and _spread(src.shape):  # an NHWC map whose element order differs from ONNX's NCHW
            if len(dst.shape) == 2 and all(c.op_type in ("Gemm", "MatMul") for c in _users(node)):
                _n, h, w, c = src.shape  # fold the reordering into the fully-connected weights
                perm = np.arange(c * h * w).reshape(c, h, w).transpose(1, 2, 0).reshape(-1)
            else:
                x = self._transpose(node, x, (0, 3, 1, 2), "nchw")
                src = self.m.tensors[x]
        if self.m.nhwc and _spread(dst.shape):  # reshape in NCHW order, then store NHWC
            t = self.m.add(TTensor(f"{node.name}_nchw_out", onnx_out, "int8", src.scale, src.zero_point))
            shape = self.m.const(f"{node.name}_shape", np.asarray(onnx_out, np.int32))
            self.m.op("RESHAPE", [x, shape], [t], node.name, new_shape=list(onnx_out))
            self._transpose(node, t, (0, 2, 3, 1), "", out=y)
            return
        shape = self.m.const(f"{node.name}_shape", np.asarray(dst.shape, np.int32))
        self.m.op("RESHAPE", [x, shape], [y], node.name, new_shape=list(dst.shape))
        if perm is not None:
            self.flat_perm[y] = perm

    def _transpose(self, node: Node, x: int, perm: tuple[int, ...], suffix: str, out: int | None = None) -> int:
        """A TRANSPOSE of tensor ``x`` (same quantization), into ``out`` or a new tensor."""
        src = self.m.tensors[x]
        if out is None:
            out = self.m.add(TTensor(f"{node.name}_{suffix}", tuple(src.shape[p] for p in perm), "int8",
                                     src.scale, src.zero_point))
        self.m.op("TRANSPOSE", [x, self.m.const(f"{node.name}_perm{''.join(map(str, perm))}",
                                                np.asarray(perm, np.int32))], [out], node.name)
        return out

    def _retarget(self, old: int, new: int) -> None:
        for k, v in list(self.tensor.items()):
            if v == old:
                self.tensor[k] = new


def _as_record(act: Any) -> dict[str, Any] | None:
    """A fused activation as the ``{"op_type", "attrs"}`` record the lowering reads."""
    return None if act is None else {"op_type": act.op_type, "attrs": dict(act.attrs)}


def _spread(shape: tuple[int, ...]) -> bool:
    """True for a 4-D NHWC shape whose memory order differs from the NCHW one (H*W > 1 and C > 1)."""
    return len(shape) == 4 and shape[1] * shape[2] > 1 and shape[3] > 1


def _users(node: Node) -> list[Node]:
    """Compute nodes reading ``node``'s output, looking through Q/DQ pairs."""
    out: list[Node] = []
    stack = [node.outputs[0]]
    while stack:
        v = stack.pop()
        for c in v.consumers() if v is not None else []:
            if c.op_type in ("QuantizeLinear", "DequantizeLinear"):
                stack.append(c.outputs[0])
            else:
                out.append(c)
    return out


def _record(act: Node) -> dict[str, Any]:
    if act.op_type == "Relu":
        return {"op_type": "Relu", "attrs": {}}
    lo = act.input(1).const if act.input(1) is not None else None  # type: ignore[union-attr]
    hi = act.input(2).const if act.input(2) is not None else None  # type: ignore[union-attr]
    attrs = {k: float(v) for k, v in (("min", lo), ("max", hi)) if v is not None}
    return {"op_type": "Clip", "attrs": attrs}


def lower(graph: Graph, allow_float_ops: bool = False) -> TModel:
    """The TFLite program of a QDQ graph quantized with the TFLite spec; InputError names the
    first op or tensor without a TFLite int8 form (with ``allow_float_ops``: without any TFLite
    form; ops with a float one stay float between DEQUANTIZE and QUANTIZE)."""
    return _Lowering(graph, allow_float_ops).run()
