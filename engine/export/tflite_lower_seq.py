"""Sequence-model ops of the TFLite lowering (a mixin of tflite_lower._Lowering), and float islands.

MatMul with a constant weight on a rank-3 activation is FULLY_CONNECTED between two RESHAPEs;
MatMul of two activations (attention's Q.K^T and P.V) is an int8 BATCH_MATMUL; Gelu is TFLite's
GELU builtin (an int8 lookup table in LiteRT); a ReduceMean that AVERAGE_POOL_2D cannot express
is MEAN. Slice with unit steps is SLICE.

Pow by 2 is MUL of a tensor by itself and Pow by -0.5 is RSQRT: a decomposed LayerNorm (which
TFLite targets keep decomposed, see engine/quant/tflite_spec.py) is all int8.

Float islands (``--allow-float-ops``): an op with no int8 TFLite form is written as TFLite float
builtins between a DEQUANTIZE of its int8 inputs and a QUANTIZE into its int8 output. Only ops
with a float decomposition here qualify (LayerNormalization: MEAN, SQUARED_DIFFERENCE, ADD,
RSQRT, SUB, MUL); each island is recorded in ``TModel.float_ops`` with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.errors import InputError
from engine.export.tflite_ir import TTensor
from engine.ir.graph import Node

FLOAT_FORMS = frozenset({"LayerNormalization"})
"""ONNX ops without an int8 TFLite form that --allow-float-ops writes as float TFLite builtins."""

FLOAT_REASON = {
    "LayerNormalization": "TFLite has no LayerNormalization op: kept fused and float by --allow-float-ops "
                          "(written as float MEAN, SQUARED_DIFFERENCE, ADD, RSQRT, SUB, MUL; without the "
                          "flag a decomposed LayerNorm compiles to int8 ops)",
}


class SeqOps:
    """Ops added to the lowering; ``self`` is a tflite_lower._Lowering."""

    m: Any

    def _int8_like(self, name: str, shape: tuple[int, ...], like: int) -> int:
        src = self.m.tensors[like]
        return self.m.add(TTensor(name, tuple(int(d) for d in shape), "int8", src.scale, src.zero_point))

    def _reshape_to(self, node: Node, x: int, shape: tuple[int, ...], suffix: str, out: int | None = None) -> int:
        if out is None:
            out = self._int8_like(f"{node.name}_{suffix}", shape, x)
        shp = tuple(int(d) for d in self.m.tensors[out].shape)
        self.m.op("RESHAPE", [x, self.m.const(f"{node.name}_shape_{'x'.join(map(str, shp))}",
                                              np.asarray(shp, np.int32))], [out], node.name, new_shape=list(shp))
        return out

    def op_matmul(self, node: Node) -> None:
        if self.dq_const(node.inputs[1]) is not None:  # type: ignore[attr-defined]
            return self._fc(node, transposed=False)  # type: ignore[attr-defined]
        a = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        b = self.value(node.inputs[1], node)  # type: ignore[attr-defined]
        ra, rb = len(self.m.tensors[a].shape), len(self.m.tensors[b].shape)
        if ra != rb or ra not in (3, 4) or self.nhwc4(ra):  # type: ignore[attr-defined]
            raise InputError(f"TFLite export: MatMul {node.name!r} of two activations needs rank-3/4 operands "
                             "of equal rank (BATCH_MATMUL)")
        y, act = self.out_tensor(node)  # type: ignore[attr-defined]
        if act is not None:
            raise InputError(f"TFLite export: MatMul {node.name!r} with a fused activation (BATCH_MATMUL has none)")
        self.m.op("BATCH_MATMUL", [a, b], [y], node.name, adj_x=False, adj_y=False)

    def op_pow(self, node: Node) -> None:
        """Pow by a constant 2 (MUL of the tensor by itself) or -0.5 (RSQRT), as a decomposed
        LayerNorm uses them."""
        e = node.input(1)
        exp = None if e is None else e.const
        if exp is None:
            dq = self.dq_const(e)  # type: ignore[attr-defined]
            exp = None if dq is None else (dq[0].astype(np.float32) - dq[2].astype(np.float32)) * dq[1]
        value = None if exp is None or np.size(exp) != 1 else float(np.ravel(exp)[0])
        x = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        if value == 2.0:
            y, _ = self.out_tensor(node)  # type: ignore[attr-defined]
            self.m.op("MUL", [x, x], [y], node.name, activation="NONE")
        elif value is not None and abs(value + 0.5) < 1e-6:
            y, _ = self.out_tensor(node)  # type: ignore[attr-defined]
            self.m.op("RSQRT", [x], [y], node.name)
        else:
            raise InputError(f"TFLite export: Pow {node.name!r} by {value} (TFLite int8: squares and "
                             "reciprocal square roots)")

    def op_gelu(self, node: Node) -> None:
        approx = node.attrs.get("approximate", "none")
        approx = approx.decode() if isinstance(approx, bytes) else str(approx)
        x = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        y, _ = self.out_tensor(node)  # type: ignore[attr-defined]
        self.m.op("GELU", [x], [y], node.name, approximate=approx == "tanh")

    def mean(self, node: Node, axes: list[int]) -> None:
        """MEAN of an int8 tensor over ``axes`` (ONNX axes; its input and output share parameters)."""
        x, y = self._move(node)  # type: ignore[attr-defined]
        rank = len(node.inputs[0].type.shape)  # type: ignore[union-attr]
        if self.nhwc4(rank):  # type: ignore[attr-defined]
            from engine.export.tflite_lower_ops import nhwc_axis

            axes = [nhwc_axis(a, rank) for a in axes]
        keep = bool(node.attrs.get("keepdims", 1))
        ax = self.m.const(f"{node.name}_axes", np.asarray(sorted(a % rank for a in axes), np.int32))
        self.m.op("MEAN", [x, ax], [y], node.name, keep_dims=keep)

    # -- float islands ------------------------------------------------------------------------
    def float_island(self, node: Node) -> None:
        """``node`` in float32 between DEQUANTIZE and QUANTIZE (``--allow-float-ops``)."""
        if node.op_type not in FLOAT_FORMS:
            raise InputError(f"TFLite export: op {node.op_type} ({node.name!r}) has no TFLite form, int8 or float")
        x = self.value(node.inputs[0], node)  # type: ignore[attr-defined]
        src = self.m.tensors[x]
        xf = self.m.add(TTensor(f"{node.name}_float_in", src.shape, "float32"))
        self.m.op("DEQUANTIZE", [x], [xf], node.name)
        yf = getattr(self, f"float_{node.op_type.lower()}")(node, xf)
        y, _ = self.out_tensor(node)  # type: ignore[attr-defined]
        self.m.op("QUANTIZE", [yf], [y], node.name)
        self.m.float_ops.append({"node": node.name, "op": node.op_type, "reason": FLOAT_REASON[node.op_type]})

    def _f(self, node: Node, suffix: str, shape: tuple[int, ...]) -> int:
        return self.m.add(TTensor(f"{node.name}_{suffix}", tuple(int(d) for d in shape), "float32"))

    def float_layernormalization(self, node: Node, xf: int) -> int:
        shape = self.m.tensors[xf].shape
        rank = len(shape)
        axis = int(node.attrs.get("axis", -1)) % rank
        if self.nhwc4(rank) or axis != rank - 1:  # type: ignore[attr-defined]
            raise InputError(f"TFLite export: LayerNormalization {node.name!r} over axis {axis} "
                             "(the last axis of a sequence tensor is supported)")
        eps = np.float32(node.attrs.get("epsilon", 1e-5))
        red = (*shape[:-1], 1)
        ax = self.m.const(f"{node.name}_axis", np.asarray([rank - 1], np.int32))
        mean = self._f(node, "mean", red)
        self.m.op("MEAN", [xf, ax], [mean], node.name, keep_dims=True)
        sq = self._f(node, "sqdiff", shape)
        self.m.op("SQUARED_DIFFERENCE", [xf, mean], [sq], node.name)
        var = self._f(node, "var", red)
        self.m.op("MEAN", [sq, ax], [var], node.name, keep_dims=True)
        ve = self._f(node, "var_eps", red)
        self.m.op("ADD", [var, self.m.const(f"{node.name}_eps", np.asarray([eps], np.float32))], [ve], node.name,
                  activation="NONE")
        inv = self._f(node, "rsqrt", red)
        self.m.op("RSQRT", [ve], [inv], node.name)
        cen = self._f(node, "centered", shape)
        self.m.op("SUB", [xf, mean], [cen], node.name, activation="NONE")
        nrm = self._f(node, "normalized", shape)
        self.m.op("MUL", [cen, inv], [nrm], node.name, activation="NONE")
        out = nrm
        for k, (opcode, suffix) in enumerate((("MUL", "scaled"), ("ADD", "shifted")), start=1):
            v = node.input(k)
            if v is None:
                continue
            c = v.const
            if c is None:
                dq = self.dq_const(v)  # type: ignore[attr-defined]
                if dq is None:
                    raise InputError(f"TFLite export: LayerNormalization {node.name!r} needs constant scale/bias")
                q, s, z, _ = dq
                c = (q.astype(np.float32) - z.astype(np.float32)) * s
            nxt = self._f(node, suffix, shape)
            self.m.op(opcode, [out, self.m.const(f"{node.name}_{suffix}_c", np.asarray(c, np.float32).reshape(-1))],
                      [nxt], node.name, activation="NONE")
            out = nxt
        return out
