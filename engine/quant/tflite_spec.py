"""The TFLite int8 quantization spec, for targets that export TFLite.

LiteRT's int8 kernels accept only some parameter choices (its "quantization spec"):

* weights: int8, symmetric (zero point 0), per output channel; bias int32 with
  scale = input_scale * weight_scale[c] and zero point 0;
* ops that move values without arithmetic keep the input's (scale, zero point) on their output:
  MAX_POOL_2D, AVERAGE_POOL_2D, RESHAPE, TRANSPOSE, SLICE, SPLIT, PAD, ..., and
  CONCATENATION shares one (scale, zero point) between all its inputs and its output;
* fixed output parameters: LOGISTIC and SOFTMAX (1/256, -128): [0, 1); TANH (1/128, 0): [-1, 1);
* every tensor between two ops is int8, including the model's inputs and outputs.

``plan_params`` walks the float graph once and returns the parameters these rules impose,
tensor by tensor; the QDQ builder uses them instead of the calibrated ones, so the QDQ model
onnxruntime runs and the TFLite file LiteRT runs quantize the same tensors the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.ir.graph import Graph
from engine.quant.params import QuantParams, params_from_range

SAME_SCALE_OPS = frozenset({
    "MaxPool", "AveragePool", "GlobalAveragePool", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Transpose", "Slice", "Split", "Pad", "Identity", "Dropout", "Resize", "ReduceMean",
})
"""ONNX ops whose TFLite form requires output parameters equal to the input's."""

FIXED_OUTPUT = {"Sigmoid": (1.0 / 256.0, -128), "Softmax": (1.0 / 256.0, -128), "Tanh": (1.0 / 128.0, 0)}
"""ONNX op -> the (scale, zero point) LiteRT requires of its int8 output."""

CONST_OPERAND_OPS = frozenset({"Add", "Sub", "Mul", "Max", "Min"})
"""Element-wise ops whose constant operands are stored as int8 tensors in TFLite."""

NON_FUSABLE = ("hardswish", "sigmoid", "tanh", "leakyrelu", "silu")
"""Activations TFLite cannot fuse into CONV_2D/FULLY_CONNECTED (it fuses RELU, RELU6, RELU_N1_TO_1)."""


def disabled_fusions(float_layernorm: bool = False) -> tuple[str, ...]:
    """Optimizer rules to switch off so the activations above stay separate, calibrated ops, and
    a decomposed LayerNorm stays decomposed: each of its steps is then calibrated and becomes an
    int8 TFLite op vela runs (MEAN, SUB, MUL, ADD, RSQRT), where a fused LayerNormalization has
    no int8 TFLite form at all. ``float_layernorm`` (--allow-float-ops) keeps the fusion: the
    LayerNormalization then stays a float island, more accurate, on the CPU."""
    acts = tuple(f"fuse_activation.{a}" for a in NON_FUSABLE)
    return acts if float_layernorm else (*acts, "fuse_layernorm")


def fixed_params(op_type: str) -> QuantParams | None:
    """The int8 parameters LiteRT requires of ``op_type``'s output, if fixed."""
    fixed = FIXED_OUTPUT.get(op_type)
    if fixed is None:
        return None
    s, z = fixed
    return QuantParams(scale=np.asarray(s, np.float32), zero_point=np.asarray(z, np.int8), dtype="int8")


def plan_params(graph: Graph, calibrated: Callable[[str], QuantParams | None]) -> dict[str, QuantParams]:
    """Tensor name -> the parameters the TFLite spec imposes (tensors not listed: calibrated).

    ``calibrated(name)`` gives a tensor's calibrated parameters, or None when it was not observed.
    """
    out: dict[str, QuantParams] = {}

    def params(name: str) -> QuantParams | None:
        return out.get(name) or calibrated(name)

    for node in graph.toposort():
        if node.domain or not node.outputs or node.outputs[0] is None:
            continue
        fixed = fixed_params(node.op_type)
        if fixed is not None:
            out[node.outputs[0].name] = fixed
            continue
        data = [v for v in node.inputs if v is not None and v.const is None]
        if node.op_type in SAME_SCALE_OPS and data:
            qp = params(data[0].name)
            if qp is not None:
                for o in node.outputs:
                    if o is not None:
                        out[o.name] = qp
            continue
        if node.op_type == "Concat" and data:
            ranges = [params(v.name) for v in data] + [calibrated(node.outputs[0].name)]
            known = [r for r in ranges if r is not None and r.range is not None]
            if not known:
                continue
            lo = min(float(np.min(r.range[0])) for r in known)  # type: ignore[index]
            hi = max(float(np.max(r.range[1])) for r in known)  # type: ignore[index]
            qp = params_from_range(lo, hi, "int8", False)
            out[node.outputs[0].name] = qp
            for v in data:
                # an input read by another op too keeps its own parameters; the exporter requantizes
                p = v.producer()
                fixed_in = p is not None and p.op_type in FIXED_OUTPUT
                if len(v.uses()) == 1 and not v.is_graph_input and not fixed_in:
                    out[v.name] = qp
    return out


def const_operand_params(array: np.ndarray) -> QuantParams:
    """Per-tensor int8 parameters of a constant operand (its own min/max, zero included)."""
    a = np.asarray(array, np.float64)
    return params_from_range(float(a.min()) if a.size else 0.0, float(a.max()) if a.size else 0.0,
                             "int8", False)


def sqrt_divisions_to_rsqrt(graph: Graph) -> int:
    """Rewrite Div(x, Sqrt(v)) as Mul(x, Pow(v, -0.5)) in place (a decomposed LayerNorm's
    normalization; TFLite has an int8 RSQRT that vela runs, no int8 SQRT or DIV); returns how
    many were rewritten. The Pow stands for the Sqrt and the Mul for the Div (provenance), so
    the editor maps each original node onto the op it became."""
    from engine.passes.rewrite import merge_provenance
    count = 0
    for node in list(graph.toposort()):
        if node.op_type != "Div" or node.domain or len(node.inputs) != 2 or node.outputs[0] is None:
            continue
        sq = node.inputs[1].producer() if node.inputs[1] is not None else None
        if sq is None or sq.op_type != "Sqrt" or sq.domain or len(node.inputs[1].uses()) != 1 \
                or node.inputs[1].is_graph_output:
            continue
        v = sq.inputs[0]
        half = graph.add_initializer(f"{sq.name}_minus_half", np.asarray(-0.5, np.float32))
        pw = graph.make_node("Pow", [v, half], name=graph.unique_name(f"{sq.name}_as_rsqrt"),
                             output_names=[f"{sq.outputs[0].name}_rsqrt"])
        pw.outputs[0].type = sq.outputs[0].type
        pw.meta["provenance"] = merge_provenance([sq])
        mul = graph.make_node("Mul", [node.inputs[0], pw.outputs[0]], name=graph.unique_name(f"{node.name}_as_Mul"),
                              output_names=[f"{node.outputs[0].name}_mul"])
        mul.outputs[0].type = node.outputs[0].type
        mul.meta["provenance"] = merge_provenance([node])
        node.outputs[0].replace_all_uses_with(mul.outputs[0])
        graph.remove_node(node)
        graph.remove_node(sq)
        count += 1
    return count
