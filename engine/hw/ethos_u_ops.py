"""Which Ethos-U operations an ONNX node becomes, as vela lowers the TFLite op we export for it.

``layer_queries`` turns one node of the placed graph into the ``LayerQuery`` records of
``engine.hw.ethos_u`` (shapes NHWC, kernel, bit widths, the activation fused into it, where each
tensor lives and in which format):

- Conv -> a convolution (depthwise when every group has one input channel), Gemm and MatMul with
  a constant right operand -> a vector product (vela's FullyConnected, its rows folded into the
  squarest H x W, as vela folds a batched FullyConnected: 32 rows are 4 x 8), a MatMul of two
  activations -> vela's compound MatMul (an elementwise Mul and a ReduceSum per output column,
  ``engine.hw.ethos_u._matmul``), a Transpose -> vela's compound transpose (costed on its memory
  traffic);
- 4-D tensors are NCHW feature maps stored NHWC when the graph has spatial ops (convolutions,
  pools, resizes), otherwise they keep ONNX's axis order, as the TFLite export writes them;
- pools -> pooling (GlobalAveragePool and ReduceMean over H, W: one window of the whole plane);
- Add, Sub, Mul, Max, Min and other element ops -> elementwise (a constant operand read from
  where the memory mode keeps constants);
- an activation whose producer is a MAC, pooling or elementwise op with no other reader is fused
  into it (vela's pass packing: it costs its output stage, a lookup-table activation also the
  table's DMA) and costs nothing itself; an activation that cannot fuse is a 1x1 pooling pass;
- Concat -> one 1x1 pooling pass per input writing its slice; Softmax -> vela's int8 softmax
  (a max reduction, a LUT exponent, a sum reduction and the 32-bit elementwise normalisation);
- views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) and QDQ ops cost nothing.
"""

from __future__ import annotations

import math
from typing import Any

from engine.export.tflite_lower import SPATIAL
from engine.hw.ethos_u import LayerQuery

FUSABLE_INTO = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Max", "Min", "MaxPool",
                "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean"}
"""Ops vela fuses a following activation into."""
LUT_ACTIVATIONS = {"Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "SiLU", "Gelu", "Elu", "Exp", "Log",
                   "Softplus", "Erf", "Reciprocal", "Sqrt"}
"""Activations vela computes with a lookup table."""
RELU_ACTIVATIONS = {"Relu", "Clip", "HardSigmoid"}
"""Activations vela computes in the output stage's clamp (HardSigmoid: scale folded, then clamp)."""
FREE = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "QuantizeLinear",
        "DequantizeLinear", "Constant", "Dropout"}
"""Ops vela removes (views, quantization folded into the integer kernels)."""
ELEMENTWISE_KIND = {"Add": "add", "Sub": "add", "Mul": "mul"}
BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Equal", "Greater", "Less", "And", "Or",
          "SquaredDifference"}
"""Element ops with a second tensor operand (the others' extra inputs are indices or shapes)."""
COPIES = {"Slice", "Split", "Gather", "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "Resize"}
"""Ops vela runs as a copy of the tensor through the NPU (a 1x1 pooling pass, vela's MemoryCopy)."""


def nhwc(shape: tuple[Any, ...] | None, channels_first: bool = True) -> tuple[int, int, int, int]:
    """A tensor shape as vela's 4-D NHWC: 4-D NCHW transposed, lower ranks padded in front,
    higher ranks folded into N."""
    s = [int(d) for d in (shape or ())]
    if len(s) == 4 and channels_first:
        return (s[0], s[2], s[3], s[1])
    if len(s) > 4:
        s = [math.prod(s[:-3]), *s[-3:]]
    s = [1] * (4 - len(s)) + s
    return (s[0], s[1], s[2], s[3])


def _fc_shape(rows: int, depth: int) -> tuple[int, int, int, int]:
    """vela's batched FullyConnected: its rows folded into H x W with H the largest divisor of the
    row count not above its square root (4 rows: 2 x 2, 8: 2 x 4, 32: 4 x 8; a prime: 1 x rows)."""
    h = max(d for d in range(1, math.isqrt(max(1, rows)) + 1) if rows % d == 0)
    return (1, h, rows // h, depth)


def _ints(v: Any, n: int, default: int) -> tuple[int, ...]:
    if v is None:
        return (default,) * n
    return tuple(int(x) for x in v)


class LayerMapper:
    """Builds the layer queries of the nodes of one placed graph (``facts``: GraphFacts)."""

    def __init__(self, facts: Any, feature_maps: str, constants: str, graph_io: str,
                 fm_bytes: float | None = None, spill: str | None = None) -> None:
        self.facts = facts
        self.fm = feature_maps
        self.const = constants
        self.io = graph_io
        self.fm_bytes = fm_bytes
        self.spill = spill
        self.spatial = any(f.node.op_type in SPATIAL for f in facts.order)

    def _nhwc(self, shape: tuple[Any, ...] | None, channels_first: bool = True) -> tuple[int, int, int, int]:
        """``nhwc`` of a tensor of this graph: 4-D transposed from NCHW only in a spatial graph."""
        return nhwc(shape, channels_first and self.spatial)

    def _area(self, v: Any) -> str:
        """Where a feature map lives: graph inputs and outputs in ``graph_io``; the others where
        the memory mode keeps feature maps, unless that memory is a cache (``spill`` names the
        arena behind it) and the tensor takes more than half of it."""
        if v is None:
            return self.fm
        if v.name in self.facts.input_names or v.name in self.facts.output_names:
            return self.io
        if self.spill and self.fm_bytes is not None and self.facts.npu_bytes(v) > self.fm_bytes / 2:
            return self.spill
        return self.fm

    def smallest_layer(self) -> tuple[str, int] | None:
        """(node, IFM + OFM bytes) of the node with the smallest feature maps that costs NPU time."""
        best: tuple[str, int] | None = None
        for f in self.facts.order:
            if f.node.op_type in FREE or f.compile_time or not f.outputs:
                continue
            n = sum(int(self.facts.npu_bytes(v)) for v in (*f.inputs, *f.outputs))
            if best is None or n < best[1]:
                best = (f.name, n)
        return best

    # -- tensors ------------------------------------------------------------------------------
    def _bits(self, v: Any) -> int:
        n = v.type.numel() if v is not None and v.type is not None else None
        if not n:
            return 8
        return max(8, min(32, 8 * int(self.facts.npu_bytes(v)) // int(n)))

    def _brick(self, v: Any) -> bool:
        """vela keeps tensors between NPU ops in its brick format NHCWB16, graph inputs and outputs
        in NHWC."""
        names = self.facts
        return v.name not in names.input_names and v.name not in names.output_names

    def fused_into_producer(self, f: Any) -> bool:
        """True for an activation vela fuses into the op that produces its input."""
        op = f.node.op_type
        if (op not in LUT_ACTIVATIONS and op not in RELU_ACTIVATIONS) or not f.inputs:
            return False
        p = f.inputs[0].producer()
        if p is None or p.op_type not in FUSABLE_INTO or p.activation is not None:
            return False
        return len(self.facts.consumers(f.inputs[0])) == 1 and f.inputs[0].name not in self.facts.output_names

    def _activation(self, f: Any) -> str:
        """The activation kind fused into this node: its own (``node.activation``) or a following
        activation node that vela fuses into it."""
        act = f.node.activation.op_type if f.node.activation is not None else None
        if act is None and f.outputs:
            cons = self.facts.consumers(f.outputs[0])
            if len(cons) == 1 and f.outputs[0].name not in self.facts.output_names and self.fused_into_producer(cons[0]):
                act = cons[0].node.op_type
        if act in LUT_ACTIVATIONS:
            return "lut"
        return "relu" if act in RELU_ACTIVATIONS else "none"

    def _base(self, f: Any, block_type: str, ifm: tuple[int, int, int, int], ofm: tuple[int, int, int, int],
              **kw: Any) -> LayerQuery:
        x = f.inputs[0] if f.inputs else None
        y = f.outputs[0]
        return LayerQuery(block_type, ifm, ofm, ifm_bits=self._bits(x), ofm_bits=self._bits(y),
                          activation=self._activation(f), ifm_brick=x is not None and self._brick(x),
                          ofm_brick=self._brick(y), ifm_area=self._area(x), ofm_area=self._area(y),
                          ifm2_area=self.fm, **kw)

    # -- ops ----------------------------------------------------------------------------------
    def queries(self, f: Any) -> list[LayerQuery]:
        """The Ethos-U operations of one node (empty: it costs nothing on the NPU)."""
        op = f.node.op_type
        if op in FREE or f.compile_time or not f.outputs or f.outputs[0].type is None:
            return []
        if self.fused_into_producer(f):
            return []
        try:
            handler = getattr(self, f"_q_{op}", None)
            return handler(f) if handler is not None else self._elementwise(f)
        except (TypeError, ValueError, IndexError, AttributeError):
            return self._elementwise(f)

    def _shape(self, v: Any) -> tuple[int, int, int, int]:
        return self._nhwc(v.type.shape)

    def _q_Conv(self, f: Any) -> list[LayerQuery]:
        w = f.weight_values[0] if f.weight_values else f.node.inputs[1]
        x, y = f.inputs[0], f.outputs[0]
        if len(x.type.shape) != 4:
            return self._elementwise(f)
        attrs = f.node.attrs
        groups = int(attrs.get("group", 1))
        kh, kw = (int(d) for d in w.type.shape[2:4])
        ifm, ofm = self._shape(x), self._shape(y)
        depthwise = groups > 1 and groups == ifm[3]
        kind = "depthwise" if depthwise else "conv"
        q = self._base(f, kind, ifm if groups == 1 or depthwise else (*ifm[:3], ifm[3] // groups), ofm,
                       kernel=(kh, kw), stride=_ints(attrs.get("strides"), 2, 1)[:2],
                       dilation=_ints(attrs.get("dilations"), 2, 1)[:2], has_bias=True,
                       weight_bytes=int(self.facts.npu_bytes(w)))
        return [q]

    _q_ConvTranspose = _q_Conv

    def _q_Gemm(self, f: Any) -> list[LayerQuery]:
        y = f.outputs[0]
        ys = [int(d) for d in y.type.shape]
        if not f.weight_values:  # two activations: vela's compound MatMul, 1 x batches x M x K by N columns
            a = [int(d) for d in f.inputs[0].type.shape]
            k = a[-1]
            batches = math.prod(ys[:-2]) if len(ys) > 2 else 1
            m = ys[-2] if len(ys) >= 2 else 1
            q = self._base(f, "matmul", (1, batches, m, k), (1, batches, m, ys[-1]))
            q.ifm2, q.ifm2_area = (1, batches, ys[-1], k), self._area(f.inputs[1])
            return [q]
        w = f.weight_values[0]
        k = int(w.type.shape[0]) if f.node.op_type == "MatMul" or not f.node.attrs.get("transB") \
            else int(w.type.shape[-1])
        rows = math.prod(ys[:-1]) if len(ys) > 1 else 1
        return [self._base(f, "vector", _fc_shape(rows, k), _fc_shape(rows, ys[-1]), has_bias=True,
                           weight_bytes=int(self.facts.npu_bytes(w)))]

    _q_MatMul = _q_Gemm

    def _q_Transpose(self, f: Any) -> list[LayerQuery]:
        x, y = f.inputs[0], f.outputs[0]
        q = self._base(f, "transpose", self._nhwc(x.type.shape), self._nhwc(y.type.shape))
        q.activation = "none"
        return [q]

    def _pool(self, f: Any, kernel: tuple[int, int], stride: tuple[int, int], kind: str) -> list[LayerQuery]:
        ifm, ofm = self._shape(f.inputs[0]), self._shape(f.outputs[0])
        return [self._base(f, "pooling", ifm, ofm, kernel=kernel, stride=stride, output_kind=kind)]

    def _q_MaxPool(self, f: Any) -> list[LayerQuery]:
        a = f.node.attrs
        k = _ints(a.get("kernel_shape"), 2, 1)
        return self._pool(f, (k[0], k[1]), _ints(a.get("strides"), 2, 1)[:2], "maxpool")

    def _q_AveragePool(self, f: Any) -> list[LayerQuery]:
        a = f.node.attrs
        k = _ints(a.get("kernel_shape"), 2, 1)
        return self._pool(f, (k[0], k[1]), _ints(a.get("strides"), 2, 1)[:2], "other")

    def _q_GlobalAveragePool(self, f: Any) -> list[LayerQuery]:
        ifm = self._shape(f.inputs[0])
        return self._pool(f, (ifm[1], ifm[2]), (1, 1), "other")

    def _q_GlobalMaxPool(self, f: Any) -> list[LayerQuery]:
        ifm = self._shape(f.inputs[0])
        return self._pool(f, (ifm[1], ifm[2]), (1, 1), "maxpool")

    def _q_ReduceMean(self, f: Any) -> list[LayerQuery]:
        """vela's MEAN: a depthwise convolution (or average pool) whose window is the reduced extent."""
        xs = [int(d) for d in f.inputs[0].type.shape]
        ys = [int(d) for d in f.outputs[0].type.shape]
        reduced = math.prod(xs) // max(1, math.prod(ys))
        inner = xs[-1] if len(xs) else 1
        if len(xs) == 4 and xs[1] == ys[1] if len(ys) == 4 else False:  # over H, W of NCHW
            ifm = self._shape(f.inputs[0])
            return self._pool(f, (ifm[1], ifm[2]), (1, 1), "other")
        # over the last axis: vela reshapes so the reduced axis is W and the rest is H
        rows = max(1, math.prod(xs) // max(1, inner))
        ifm = (1, rows, reduced if reduced == inner else inner, 1)
        ofm = (1, rows, 1, 1)
        q = self._base(f, "depthwise", ifm, ofm, kernel=(1, ifm[2]), has_bias=True)
        q.ifm_brick = q.ofm_brick = False  # a reshaped tensor is NHWC (vela's brick format keeps the shape)
        q.ofm_bits = 32  # the sum, rescaled by a Mul of its own
        return [q]

    def _elementwise(self, f: Any) -> list[LayerQuery]:
        y = f.outputs[0]
        ofm = self._shape(y) if y.type.rank == 4 else self._nhwc(y.type.shape)
        ins = [v for v in f.node.inputs if v is not None]
        if not ins:
            return []
        x = f.inputs[0] if f.inputs else ins[0]
        ifm = self._nhwc(x.type.shape, y.type.rank == 4 and x.type.rank == 4)
        op = f.node.op_type
        if op in COPIES:  # a data movement: one 1x1 pooling pass that reads the input and writes the output
            q = self._base(f, "pooling", ofm, ofm,
                           output_kind="maxpool" if op == "Transpose" else "other")
            q.activation = "none"
            return [q]
        q = self._base(f, "elementwise", ifm, ofm, output_kind=ELEMENTWISE_KIND.get(op, "other"))
        if len(ins) > 1 and op in BINARY:
            other = next((v for v in ins if v is not x), None)
            if other is not None and other.type is not None and other.type.shape is not None:
                q.ifm2 = self._nhwc(other.type.shape, y.type.rank == 4 and other.type.rank == 4)
                if other in f.weight_values or other.const is not None:
                    q.ifm2_area, q.ifm2_brick = self.const, False
                    # measured: the slow path is a per-channel constant narrower than a micro-block
                    q.ifm2_const_mul = f.node.op_type == "Mul" and 1 < q.ifm2[3] < 8
                else:
                    q.ifm2_brick, q.ifm2_area = self._brick(other), self._area(other)
        if f.node.op_type in LUT_ACTIVATIONS or f.node.op_type in RELU_ACTIVATIONS:  # an activation alone
            q.block_type, q.ifm2, q.kernel = "pooling", None, (1, 1)
            q.activation = "lut" if f.node.op_type in LUT_ACTIVATIONS else "relu"
            q.lut_pass = q.activation == "lut"
        return [q]

    def _q_Concat(self, f: Any) -> list[LayerQuery]:
        out = []
        y = f.outputs[0]
        for v in f.inputs:
            s = self._nhwc(v.type.shape, y.type.rank == 4)
            q = self._base(f, "pooling", s, s)
            q.ifm_brick = self._brick(v)
            out.append(q)
        return out

    def _q_Softmax(self, f: Any) -> list[LayerQuery]:
        """vela's int8 softmax over the last axis, in the shapes and formats its C++ core writes
        (x as 1 x H x W x depth): a max pool along each row (the rows in H, the depth in W), x - max
        through a LUT exponent into 32-bit bricks (NHCWB16), a shift by a 32-bit scalar constant, a
        sum over each row, sixteen 32-bit steps per row for the reciprocal (Newton-Raphson), then a
        32-bit multiply of every element by its row's reciprocal, an add of a rounding constant that
        vela materializes at the full shape in constant memory (32 bits per element: on a U55 it
        streams from flash), and the final shift into int8."""
        s = nhwc(f.outputs[0].type.shape, False)
        rows, depth = s[0] * s[1] * s[2], s[3]
        x = (1, s[0] * s[1], s[2], depth)
        per_row = (1, x[1], x[2], 1)
        row = (1, rows, 1, 1)

        def ew(ifm: tuple[int, int, int, int], ifm2: tuple[int, int, int, int], kind: str, bits: int = 32,
               ofm_bits: int = 32) -> LayerQuery:
            q = self._base(f, "elementwise", ifm, x if ifm2 != row else row, output_kind=kind)
            q.ifm2, q.ifm_bits, q.ofm_bits = ifm2, bits, ofm_bits
            q.ifm_brick = q.ifm2_brick = q.ofm_brick = False
            q.activation = "none"
            return q

        peak = self._base(f, "pooling", (1, rows, depth, 1), row, kernel=(1, depth), output_kind="maxpool")
        peak.ifm_brick = peak.ofm_brick = False
        peak.activation = "none"
        exp = ew(x, per_row, "add", bits=8)
        exp.activation, exp.ofm_brick = "lut", True
        shift = ew(x, (1, 1, 1, 1), "other")
        shift.ifm_brick, shift.ifm2_area = True, self.const
        total = self._base(f, "reduce_sum", x, per_row)
        total.ifm_bits, total.ofm_bits, total.activation = 32, 32, "none"
        total.ifm_brick = total.ofm_brick = False
        out = [peak, exp, shift, total]
        out += [ew(row, row, kind) for kind in ("other", "add", "add", "other") + ("mul", "add", "mul", "add") * 3]
        mul = ew(x, per_row, "mul")
        mul.ifm_brick = mul.ofm_brick = True
        rounding = ew(x, x, "add")  # the constant is vela's IFM, the products its IFM2
        rounding.ifm_area, rounding.ifm2_brick, rounding.ofm_brick = self.const, True, True
        final = ew(x, per_row, "other", ofm_bits=8)
        final.ifm_brick = True
        return [*out, mul, rounding, final]

    def _q_Pad(self, f: Any) -> list[LayerQuery]:
        cons = self.facts.consumers(f.outputs[0])
        if cons and all(c.node.op_type in ("Conv", "MaxPool", "AveragePool") for c in cons):
            return []  # vela folds the padding into the window op
        s = self._shape(f.outputs[0])
        return [self._base(f, "pooling", self._shape(f.inputs[0]), s)]
