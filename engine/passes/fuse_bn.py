"""BatchNormalization folded into the Conv, ConvTranspose or Gemm that produces its input.

At inference BatchNormalization is a per-channel affine map of its input y::

    BN(y)[c] = gamma[c] * (y[c] - mean[c]) / sqrt(var[c] + eps) + beta[c]
             = s[c] * y[c] + (beta[c] - s[c] * mean[c]),      s = gamma / sqrt(var + eps)

Conv (weights W[m, i, k..], output channel m, bias b):
    y[m] = sum W[m] * x + b[m]  =>  BN(y)[m] = sum (s[m] W[m]) * x + s[m] (b[m] - mean[m]) + beta[m]
    W'[m, ...] = W[m, ...] * s[m]          b'[m] = (b[m] - mean[m]) * s[m] + beta[m]

ConvTranspose (weights W[i, j, k..] with groups g: input channel i belongs to group
i // (C/g), output channel m = group * (M/g) + j):
    W'[i, j, ...] = W[i, j, ...] * s[(i // (C/g)) * (M/g) + j]      b' as for Conv

Gemm (Y = alpha * A' B' + beta_g * C, output columns n are the BN channels):
    B'[:, n] = B[:, n] * s[n]  (rows of B when transB)     C' = (beta_g * C - mean) * s + beta,  beta_g' = 1

The arithmetic runs in float64 and is stored in the weights' dtype. The rule does not fire when
the producer's output has another reader (it would then need the un-normalized value too), when
weights or BN statistics are not constants, or in training mode.
"""

from __future__ import annotations

import numpy as np

from engine.ir.graph import Graph, Node
from engine.passes.pattern import Match, Op, Rule, RulePass, Var
from engine.passes.rewrite import absorb, add_constant, const_value

_FLOATS = "f"


def bn_scale_shift(bn: Node) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """(s, beta, mean) in float64 for a BatchNormalization, or the reason it cannot be folded."""
    if int(bn.attrs.get("training_mode", 0)):
        return "BatchNormalization is in training mode"
    if int(bn.attrs.get("spatial", 1)) != 1:
        return "BatchNormalization has spatial=0 (per-activation statistics)"
    for out in bn.outputs[1:]:
        if out is not None and (out.uses() or out.is_graph_output):
            return f"its running-statistics output {out.name!r} is read"
    arrays = []
    for i, what in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "var")):
        arr = const_value(bn.input(i))
        if arr is None:
            return f"BatchNormalization {what} is not a constant"
        if arr.dtype.kind != _FLOATS:
            return f"BatchNormalization {what} is not floating point"
        arrays.append(arr)
    return bn_affine(float(bn.attrs.get("epsilon", 1e-5)), *arrays)


def bn_affine(eps: float, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray,
              var: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """(s, beta, mean) in float64 from BatchNormalization's parameter arrays, or why they do
    not fit (the executor's fused plan folds with this too)."""
    gamma, beta, mean, var = (np.asarray(a).astype(np.float64).reshape(-1) for a in (gamma, beta, mean, var))
    if not (gamma.size == beta.size == mean.size == var.size):
        return "BatchNormalization parameters differ in length"
    return gamma / np.sqrt(var + eps), beta, mean


def _weights(node: Node, what: str = "weight") -> np.ndarray | str:
    w = const_value(node.input(1))
    if w is None:
        return f"{node.op_type} {what} {node.input(1).name if node.input(1) else ''!r} is not a constant"
    if w.dtype.kind != _FLOATS:
        return f"{node.op_type} {what} is not floating point"
    return w


def _bias(node: Node, index: int, channels: int) -> np.ndarray | str:
    v = node.input(index)
    if v is None:
        return np.zeros(channels, dtype=np.float64)
    b = const_value(v)
    if b is None:
        return f"{node.op_type} bias {v.name!r} is not a constant"
    return b.astype(np.float64).reshape(-1)


class _BNRule(Rule):
    """Shared check of the three BN rules."""

    producer = ""

    def __init__(self) -> None:
        self.pattern = Op("BatchNormalization", Op(self.producer, name="prod", any_inputs=True),
                          Var("scale"), Var("bias"), Var("mean"), Var("var"), name="bn")
        super().__init__()

    def check(self, graph: Graph, m: Match) -> str | None:
        """Constant weights and statistics with matching channel counts."""
        bn, prod = m["bn"], m["prod"]
        st = bn_scale_shift(bn)
        if isinstance(st, str):
            return st
        w = _weights(prod)
        if isinstance(w, str):
            return w
        channels = self.channels(prod, w)
        if isinstance(channels, str):
            return channels
        if st[0].size != channels:
            return f"BatchNormalization has {st[0].size} channels, {prod.op_type} produces {channels}"
        b = _bias(prod, 2, channels)
        if isinstance(b, str):
            return b
        return None

    def channels(self, prod: Node, w: np.ndarray) -> int | str:
        """Output channels of the producer."""
        return int(w.shape[0])


class _BNIntoConvRule(_BNRule):
    """Shared rewrite of the Conv and ConvTranspose rules: W scaled per output channel
    (``scaled_weights``), b' = (b - mean) * s + beta."""

    def scaled_weights(self, conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
        """W (float64) with every output channel m multiplied by s[m]."""
        raise NotImplementedError

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """Scale the output channels of W, shift b."""
        bn, conv = m["bn"], m["prod"]
        s, beta, mean = bn_scale_shift(bn)  # type: ignore[misc]
        w = const_value(conv.input(1))
        b = _bias(conv, 2, self.channels(conv, w))  # type: ignore[arg-type]
        w2 = self.scaled_weights(conv, w, s).astype(w.dtype)  # type: ignore[arg-type, union-attr]
        b2 = ((b - mean) * s + beta).astype(w.dtype)  # type: ignore[union-attr, operator]
        inputs = [conv.inputs[0], add_constant(graph, f"{conv.name}_W", w2), add_constant(graph, f"{conv.name}_B", b2)]
        return absorb(graph, conv, [bn], bn, inputs)


class BatchNormIntoConv(_BNIntoConvRule):
    """BatchNormalization(Conv(x, W, b)) -> Conv(x, W', b')."""

    name = "fuse_batchnorm.conv"
    producer = "Conv"

    def scaled_weights(self, conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Output channels sit on axis 0."""
        return w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))


class BatchNormIntoConvTranspose(_BNIntoConvRule):
    """BatchNormalization(ConvTranspose(x, W, b)) -> ConvTranspose(x, W', b')."""

    name = "fuse_batchnorm.conv_transpose"
    producer = "ConvTranspose"

    def channels(self, prod: Node, w: np.ndarray) -> int | str:
        """M = W.shape[1] * group."""
        return int(w.shape[1]) * int(prod.attrs.get("group", 1))

    def scaled_weights(self, conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Output channels sit on axis 1, per group: W viewed as (group, C/group, M/group, k...)."""
        g = int(conv.attrs.get("group", 1))
        cin, mg = w.shape[0], w.shape[1]
        wg = w.astype(np.float64).reshape((g, cin // g, mg, *w.shape[2:]))
        wg = wg * s.reshape((g, 1, mg, *(1,) * (w.ndim - 2)))
        return wg.reshape(w.shape)


class BatchNormIntoGemm(_BNRule):
    """BatchNormalization(Gemm(A, B, C)) -> Gemm(A, B', C') with beta = 1."""

    name = "fuse_batchnorm.gemm"
    producer = "Gemm"

    def channels(self, prod: Node, w: np.ndarray) -> int | str:
        """N: columns of op(B)."""
        if w.ndim != 2:
            return "Gemm weight is not 2-D"
        return int(w.shape[0] if int(prod.attrs.get("transB", 0)) else w.shape[1])

    def check(self, graph: Graph, m: Match) -> str | None:
        """Also: a constant C, broadcastable per column."""
        reason = super().check(graph, m)
        if reason is not None:
            return reason
        gemm = m["prod"]
        c = gemm.input(2)
        if c is not None and const_value(c) is None:
            return f"Gemm C {c.name!r} is not a constant"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """Scale the columns of op(B); fold the shift into C."""
        bn, gemm = m["bn"], m["prod"]
        s, beta, mean = bn_scale_shift(bn)  # type: ignore[misc]
        w = const_value(gemm.input(1))
        trans_b = int(gemm.attrs.get("transB", 0))
        w2 = w.astype(np.float64) * (s[:, None] if trans_b else s[None, :])  # type: ignore[union-attr]
        c = const_value(gemm.input(2))
        beta_g = float(gemm.attrs.get("beta", 1.0))
        c64 = np.zeros_like(s) if c is None else c.astype(np.float64) * beta_g
        c2 = (c64 - mean) * s + beta
        attrs = dict(gemm.attrs)
        attrs["beta"] = 1.0
        inputs = [gemm.inputs[0], add_constant(graph, f"{gemm.name}_B", w2.astype(w.dtype)),  # type: ignore[union-attr]
                  add_constant(graph, f"{gemm.name}_C", c2.astype(w.dtype))]  # type: ignore[union-attr]
        return absorb(graph, gemm, [bn], bn, inputs, attrs)


def batchnorm_pass(disabled: tuple[str, ...] = ()) -> RulePass:
    """The fuse_batchnorm rule set."""
    return RulePass("fuse_batchnorm", [BatchNormIntoConv(), BatchNormIntoConvTranspose(), BatchNormIntoGemm()],
                    "BatchNormalization folded into the Conv/ConvTranspose/Gemm before it", disabled=disabled)
