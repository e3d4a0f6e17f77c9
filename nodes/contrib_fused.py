"""onnxruntime's com.microsoft contrib ops that its transformer optimizer and graph fusions emit.

Fused kernels: FusedConv (Conv [+ Z] + activation), FusedMatMul (alpha * op(A) @ op(B) with
batch transposes), FusedGemm (Gemm + activation); activations Gelu (erf), FastGelu (tanh
approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), optional bias), BiasGelu
(Gelu(A + B)), QuickGelu (x * sigmoid(alpha x)); normalizations SkipLayerNormalization
(LayerNorm(input + skip + bias) * gamma + beta), SkipSimplifiedLayerNormalization and
SimplifiedLayerNormalization (RMS: x / sqrt(mean(x^2) + eps) * gamma); and the attention
blocks Attention (packed QKV projection, softmax(QK^T / sqrt(d) + mask) V per head) and
MultiHeadAttention (separate Q, K, V). Arithmetic runs in float32, as onnxruntime's CPU
kernels do; the fused ops' NPU rules are those of the ops they replace.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nodes.activation import _gelu
from nodes.conv import (
    _CONV_ATTRS,
    WINDOW_RULES,
    conv_gemm,
    conv_geometry,
    conv_macs,
    conv_nd,
    conv_out_shape,
)
from nodes.matmul import matmul_shape
from nodes.recurrent import _ACTIVATIONS
from nodes.registry import register
from nodes.spec import AttrSpec, Gemm, NodeContext, OpError, OpSpec, Port, RunContext, Work
from nodes.types import Dim, TensorType

MS = "com.microsoft"


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float32, copy=False)


def _activate(y: np.ndarray, name: str, params: list[float]) -> np.ndarray:
    """onnxruntime's fused activations (MLAS): Relu, Tanh, Sigmoid, LeakyRelu(alpha),
    Clip(min, max), HardSigmoid(alpha, beta); '' is the identity."""
    if not name:
        return y
    key = name.lower()
    if key == "clip":
        lo, hi = (params + [-np.inf, np.inf][len(params):])[:2] if params else (-np.inf, np.inf)
        return np.clip(y, y.dtype.type(lo), y.dtype.type(hi))
    entry = _ACTIVATIONS.get(key)
    if entry is None:
        raise OpError(f"unsupported fused activation {name!r}")
    fn, na, nb, da, db = entry
    a = params[0] if na and params else da
    b = params[1] if nb and len(params) > 1 else db
    with np.errstate(over="ignore"):
        return fn(y, a, b).astype(y.dtype, copy=False)


@register("FusedConv", since=1, domain=MS)
class FusedConvSpec(OpSpec):
    """Conv, plus an optional sum input Z, then an activation (onnxruntime's Conv fusion)."""

    family = "contrib"
    doc = "activation(conv(X, W) + B + Z); activation names Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid."
    rules = WINDOW_RULES
    inputs = (Port("X"), Port("W"), Port("B", optional=True), Port("Z", optional=True))
    attrs = (*_CONV_ATTRS,
             AttrSpec("activation", "string", "", "The fused activation ('' for none)."),
             AttrSpec("activation_params", "floats", None, "Its parameters (alpha, beta / min, max)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Conv's output shape and the dtype of X."""
        return [TensorType(ctx.dtype(0), conv_out_shape(ctx))]

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None,
                  z: np.ndarray | None = None) -> np.ndarray:
        """Conv, + Z, activation."""
        strides, dils, pb, pe = conv_geometry(ctx.attrs, x.shape, w.shape)
        y = conv_nd(x, w, b, strides, dils, pb, pe, int(ctx.attrs["group"])).astype(x.dtype, copy=False)
        if z is not None:
            y = y + z.astype(y.dtype, copy=False)
        return _activate(y, str(ctx.attrs["activation"] or ""), list(ctx.attrs["activation_params"] or []))

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """Conv's im2col products (the activation is its epilogue)."""
        return conv_gemm(ctx)

    def work(self, ctx: NodeContext) -> Work:
        """MACs as for Conv."""
        w = super().work(ctx)
        w.macs = conv_macs(ctx.out_type(0).shape, ctx.shape(1))
        return w


def _batch_t(shape: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """transBatch: (B1, ..., Bk, M, K) -> (B2, ..., Bk, M, B1, K) as onnxruntime defines it."""
    return (*shape[1:-1], shape[0], shape[-1])


def _fused_matmul_operand(x: Any, trans: int, trans_batch: int, is_shape: bool) -> Any:
    if is_shape:
        s = tuple(x)
        if trans_batch and len(s) > 2:
            s = _batch_t(s)
        if trans:
            s = (*s[:-2], s[-1], s[-2]) if len(s) >= 2 else s
        return s
    a = np.asarray(x)
    if trans_batch and a.ndim > 2:
        a = np.moveaxis(a, 0, -2)
    if trans and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    return a


@register("FusedMatMul", since=1, domain=MS)
class FusedMatMulSpec(OpSpec):
    """alpha * op(A) @ op(B): MatMul with transposes and a scale folded in."""

    family = "contrib"
    doc = "alpha * op(A) @ op(B); transA/transB swap the last two axes, transBatchA/B move the first axis next to them."
    inputs = (Port("A"), Port("B"))
    attrs = (AttrSpec("alpha", "float", 1.0, "Scale of the product."),
             AttrSpec("transA", "int", 0, "Transpose the last two axes of A."),
             AttrSpec("transB", "int", 0, "Transpose the last two axes of B."),
             AttrSpec("transBatchA", "int", 0, "Move A's first axis before its last."),
             AttrSpec("transBatchB", "int", 0, "Move B's first axis before its last."))

    def _shapes(self, ctx: NodeContext) -> tuple[Any, Any]:
        a, b = ctx.shape(0), ctx.shape(1)
        at = ctx.attrs
        sa = _fused_matmul_operand(a, int(at["transA"]), int(at["transBatchA"]), True) if a is not None else None
        sb = _fused_matmul_operand(b, int(at["transB"]), int(at["transBatchB"]), True) if b is not None else None
        return sa, sb

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """MatMul's shape of the transposed operands."""
        sa, sb = self._shapes(ctx)
        return [TensorType(ctx.dtype(0), matmul_shape(sa, sb))]

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Transpose, multiply, scale."""
        at = ctx.attrs
        aa = _fused_matmul_operand(a, int(at["transA"]), int(at["transBatchA"]), False)
        bb = _fused_matmul_operand(b, int(at["transB"]), int(at["transBatchB"]), False)
        y = np.matmul(aa, bb)
        alpha = float(at["alpha"])
        if alpha != 1.0:
            y = y * y.dtype.type(alpha)
        return y.astype(a.dtype, copy=False)

    def work(self, ctx: NodeContext) -> Work:
        """MACs = prod(output) * K."""
        w = super().work(ctx)
        sa, _ = self._shapes(ctx)
        n = ctx.out_type(0).numel()
        if n is not None and sa and isinstance(sa[-1], int):
            w.macs = int(n) * int(sa[-1])
            w.elem_ops = 0
        return w


@register("FusedGemm", since=1, domain=MS)
class FusedGemmSpec(OpSpec):
    """Gemm followed by an activation."""

    family = "contrib"
    doc = "activation(alpha * op(A) @ op(B) + beta * C)."
    inputs = (Port("A"), Port("B"), Port("C", optional=True))
    attrs = (AttrSpec("alpha", "float", 1.0, "Scale of A @ B."),
             AttrSpec("beta", "float", 1.0, "Scale of C."),
             AttrSpec("transA", "int", 0, "Transpose A."),
             AttrSpec("transB", "int", 0, "Transpose B."),
             AttrSpec("activation", "string", "", "The fused activation."),
             AttrSpec("activation_alpha", "float", None, "Its first parameter."),
             AttrSpec("activation_beta", "float", None, "Its second parameter."),
             AttrSpec("activation_gamma", "float", None, "Its third parameter."))

    def _mkn(self, ctx: NodeContext) -> tuple[Dim, Dim, Dim]:
        sa, sb = ctx.shape(0), ctx.shape(1)
        m = k = n = None
        if sa is not None and len(sa) == 2:
            m, k = (sa[1], sa[0]) if ctx.attrs["transA"] else (sa[0], sa[1])
        if sb is not None and len(sb) == 2:
            n = sb[0] if ctx.attrs["transB"] else sb[1]
        return m, k, n

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(M, N)."""
        m, _, n = self._mkn(ctx)
        return [TensorType(ctx.dtype(0), (m, n))]

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        """Gemm, activation."""
        at = ctx.attrs
        aa = a.T if at["transA"] else a
        bb = b.T if at["transB"] else b
        y = np.matmul(aa, bb) * a.dtype.type(float(at["alpha"]))
        if c is not None:
            y = y + c.astype(y.dtype) * y.dtype.type(float(at["beta"]))
        params = [float(at[k]) for k in ("activation_alpha", "activation_beta") if at.get(k) is not None]
        return _activate(y.astype(a.dtype, copy=False), str(at["activation"] or ""), params)

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """op(A) (M x K) @ op(B) (K x N)."""
        m, k, n = self._mkn(ctx)
        return [Gemm(m, k, n)] if all(isinstance(d, int) for d in (m, k, n)) else None

    def work(self, ctx: NodeContext) -> Work:
        """MACs = M * K * N."""
        w = super().work(ctx)
        m, k, n = self._mkn(ctx)
        if all(isinstance(d, int) for d in (m, k, n)):
            w.macs = int(m) * int(k) * int(n)
        return w


class _UnarySpec(OpSpec):
    """Elementwise contrib activation: the output has the type of the first input."""

    family = "contrib"
    inputs = (Port("X"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as X (a bias broadcasts over the last axis)."""
        return [ctx.type(0)]

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """The function in float32."""
        raise NotImplementedError

    def reference(self, ctx: RunContext, x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        """Compute in float32, return in the input's dtype."""
        xf = _f32(x)
        if bias is not None:
            xf = xf + _f32(bias)
        with np.errstate(over="ignore"):
            return self.fn(xf, ctx.attrs).astype(x.dtype, copy=False)


@register("Gelu", since=1, domain=MS)
class GeluSpec(_UnarySpec):
    """Exact (erf) Gelu."""

    doc = "0.5 * x * (1 + erf(x / sqrt(2)))."

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """erf Gelu."""
        return _gelu(x, {"approximate": "none"})


@register("BiasGelu", since=1, domain=MS)
class BiasGeluSpec(_UnarySpec):
    """Gelu of A plus a bias broadcast over the last axis."""

    doc = "Gelu(A + B), B of shape (hidden,)."
    inputs = (Port("A"), Port("B"))

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """erf Gelu."""
        return _gelu(x, {"approximate": "none"})


@register("FastGelu", since=1, domain=MS)
class FastGeluSpec(_UnarySpec):
    """The tanh approximation of Gelu, with an optional bias."""

    doc = "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), x = X + bias."
    inputs = (Port("X"), Port("bias", optional=True))

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """tanh Gelu."""
        return _gelu(x, {"approximate": "tanh"})


@register("QuickGelu", since=1, domain=MS)
class QuickGeluSpec(_UnarySpec):
    """x * sigmoid(alpha * x) (the CLIP approximation of Gelu)."""

    doc = "x * sigmoid(alpha * x), alpha = 1.702 by default."
    attrs = (AttrSpec("alpha", "float", 1.702, "Scale inside the sigmoid."),)

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """x * sigmoid(alpha x)."""
        return x / (np.float32(1) + np.exp(-np.float32(float(attrs["alpha"])) * x))


def _stat(shape: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    return None if shape is None else (*shape[:-1], 1)


class _SkipNormSpec(OpSpec):
    """(input + skip + bias), normalized over the last axis; outputs output, mean,
    inv_std_var and the pre-normalization sum."""

    family = "contrib"
    outputs = (Port("output"), Port("mean", optional=True), Port("inv_std_var", optional=True),
               Port("input_skip_bias_sum", optional=True))
    attrs = (AttrSpec("epsilon", "float", 1e-12, "Added to the variance."),)
    simplified = False

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Output and sum like the input; statistics float32 with a trailing 1."""
        out = [ctx.type(0)]
        st = TensorType(np.dtype(np.float32), _stat(ctx.shape(0)))
        for k in range(1, len(ctx.node.outputs)):
            out.append(ctx.type(0) if k == 3 else st)
        return out

    def reference(self, ctx: RunContext, x: np.ndarray, skip: np.ndarray, gamma: np.ndarray,
                  *rest: np.ndarray | None) -> list[np.ndarray]:
        """Sum in float32, statistics over the last axis."""
        beta, bias = (None, rest[0] if rest else None) if self.simplified else (
            rest[0] if rest else None, rest[1] if len(rest) > 1 else None)
        s = _f32(x) + _f32(skip)
        if bias is not None:
            s = s + _f32(bias)
        eps = np.float32(float(ctx.attrs["epsilon"]))
        if self.simplified:
            mean = np.zeros((*s.shape[:-1], 1), np.float32)
            inv = 1.0 / np.sqrt(np.mean(s * s, axis=-1, keepdims=True) + eps)
            y = s * inv * _f32(gamma)
        else:
            mean = s.mean(axis=-1, keepdims=True)
            d = s - mean
            inv = 1.0 / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + eps)
            y = d * inv * _f32(gamma)
            if beta is not None:
                y = y + _f32(beta)
        return [y.astype(x.dtype), mean.astype(np.float32), inv.astype(np.float32), s.astype(x.dtype)]


@register("SkipLayerNormalization", since=1, domain=MS)
class SkipLayerNormalizationSpec(_SkipNormSpec):
    """LayerNorm of a residual sum (BERT's Add + LayerNormalization fused)."""

    doc = "LayerNorm(input + skip + bias) * gamma + beta over the last axis."
    inputs = (Port("input"), Port("skip"), Port("gamma"), Port("beta", optional=True),
              Port("bias", optional=True))


@register("SkipSimplifiedLayerNormalization", since=1, domain=MS)
class SkipSimplifiedLayerNormalizationSpec(_SkipNormSpec):
    """RMS normalization of a residual sum (T5/LLaMA's Add + RMSNorm fused)."""

    doc = "(input + skip + bias) / sqrt(mean(square) + epsilon) * gamma over the last axis."
    inputs = (Port("input"), Port("skip"), Port("gamma"), Port("bias", optional=True))
    simplified = True


@register("SimplifiedLayerNormalization", since=1, domain=MS)
class SimplifiedLayerNormalizationSpec(OpSpec):
    """RMS normalization over the axes from ``axis`` on."""

    family = "contrib"
    doc = "X / sqrt(mean(X^2 over axes >= axis) + epsilon) * scale."
    inputs = (Port("X"), Port("scale"))
    outputs = (Port("Y"), Port("inv_std_var", optional=True))
    attrs = (AttrSpec("axis", "int", -1, "First normalized axis."),
             AttrSpec("epsilon", "float", 1e-5, "Added to the mean square."),
             AttrSpec("stash_type", "int", 1, "Element type of the statistics (1 = float32)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Y like X; inv_std_var float32 with 1 for the normalized axes."""
        out = [ctx.type(0)]
        if len(ctx.node.outputs) > 1:
            s = ctx.shape(0)
            if s is not None:
                a = int(ctx.attrs["axis"]) % len(s) if s else 0
                s = (*s[:a], *([1] * (len(s) - a)))
            out.append(TensorType(np.dtype(np.float32), s))
        return out

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray) -> list[np.ndarray]:
        """Mean square in float32."""
        axis = int(ctx.attrs["axis"]) % max(x.ndim, 1)
        xf = _f32(x)
        axes = tuple(range(axis, x.ndim))
        inv = 1.0 / np.sqrt(np.mean(xf * xf, axis=axes, keepdims=True) + np.float32(float(ctx.attrs["epsilon"])))
        return [(xf * inv * _f32(scale)).astype(x.dtype), inv.astype(np.float32)]


# -- attention -----------------------------------------------------------------------------------

def _softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    """(B, S, N*H) -> (B, N, S, H)."""
    b, s, d = x.shape
    return x.reshape(b, s, n, d // n).transpose(0, 2, 1, 3)


def _key_mask(mask: np.ndarray | None, b: int, s_q: int, s_kv: int, fill: float) -> np.ndarray | None:
    """An additive (B, 1, S_q, S_kv) mask from onnxruntime's mask_index forms: (B, S_kv) of 0/1,
    (B,) valid lengths, or (B, S_q, S_kv) of 0/1."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.ndim == 1 and m.shape[0] == b:
        keep = np.arange(s_kv)[None, :] < m[:, None]
        keep = keep[:, None, None, :]
    elif m.ndim == 2:
        keep = (m != 0)[:, None, None, :]
    elif m.ndim == 3:
        keep = (m != 0)[:, None, :, :]
    else:
        raise OpError(f"mask_index of shape {m.shape} is not supported")
    return np.where(keep, np.float32(0), np.float32(fill))


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, add: np.ndarray | None,
           causal: bool) -> np.ndarray:
    """softmax(Q K^T * scale + add) V over (B, N, S, H) heads; returns (B, S, N*H)."""
    logits = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
    if add is not None:
        logits = logits + add
    if causal:
        s_q, s_kv = logits.shape[-2:]
        future = np.triu(np.ones((s_q, s_kv), bool), k=1 + s_kv - s_q)
        logits = np.where(future, np.float32(-np.inf), logits)
    out = np.matmul(_softmax(logits.astype(np.float32)), v)
    b, n, s, h = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, s, n * h)


@register("Attention", since=1, domain=MS)
class AttentionSpec(OpSpec):
    """Multi-head self-attention with the Q, K, V projections packed into one weight."""

    family = "contrib"
    doc = ("input @ weights + bias split into Q, K, V (qkv_hidden_sizes), softmax(Q K^T / sqrt(d) "
           "+ mask) V per head; mask_index is (B, S) 0/1, (B,) lengths or (B, S, S).")
    inputs = (Port("input"), Port("weights"), Port("bias", optional=True), Port("mask_index", optional=True),
              Port("past", optional=True), Port("attention_bias", optional=True),
              Port("past_sequence_length", optional=True))
    outputs = (Port("output"), Port("present", optional=True))
    attrs = (AttrSpec("num_heads", "int", None, "Number of heads (required)."),
             AttrSpec("qkv_hidden_sizes", "ints", None, "Hidden sizes of Q, K and V (default equal)."),
             AttrSpec("unidirectional", "int", 0, "Causal mask."),
             AttrSpec("mask_filter_value", "float", -10000.0, "Logit of masked positions."),
             AttrSpec("scale", "float", 0.0, "Logit scale (0: 1 / sqrt(head size))."),
             AttrSpec("do_rotary", "int", 0, "Rotary embedding (not supported)."),
             AttrSpec("past_present_share_buffer", "int", 0, "Decoding buffer sharing."))

    def _sizes(self, ctx_attrs: dict[str, Any], w_cols: Dim) -> tuple[Dim, Dim, Dim]:
        qkv = ctx_attrs.get("qkv_hidden_sizes")
        if qkv:
            return int(qkv[0]), int(qkv[1]), int(qkv[2])
        d = w_cols // 3 if isinstance(w_cols, int) else None
        return d, d, d

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(B, S, v_hidden)."""
        if not ctx.attrs.get("num_heads"):
            raise OpError("Attention needs the num_heads attribute")
        xs, ws = ctx.shape(0), ctx.shape(1)
        _, _, dv = self._sizes(ctx.attrs, ws[1] if ws is not None else None)
        shape = (xs[0], xs[1], dv) if xs is not None and len(xs) == 3 else None
        return [TensorType(ctx.dtype(0), shape)] + [TensorType(ctx.dtype(0)) for _ in ctx.node.outputs[1:]]

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                  mask: np.ndarray | None = None, past: np.ndarray | None = None,
                  attn_bias: np.ndarray | None = None, past_len: np.ndarray | None = None) -> Any:
        """Project, split heads, attend."""
        at = ctx.attrs
        if past is not None or int(at["do_rotary"]):
            raise OpError("Attention with past state or rotary embedding is not supported")
        n = int(at["num_heads"])
        dq, dk, dv = self._sizes(at, w.shape[1])
        proj = np.matmul(_f32(x), _f32(w))
        if bias is not None:
            proj = proj + _f32(bias)
        q, k, v = proj[..., :dq], proj[..., dq:dq + dk], proj[..., dq + dk:dq + dk + dv]
        b, s, _ = x.shape
        scale = float(at["scale"]) or 1.0 / math.sqrt(dq // n)
        add = _key_mask(mask, b, s, s, float(at["mask_filter_value"]))
        if attn_bias is not None:
            add = _f32(attn_bias) if add is None else add + _f32(attn_bias)
        y = attend(_heads(q, n), _heads(k, n), _heads(v, n), scale, add, bool(int(at["unidirectional"])))
        present = np.stack([_heads(k, n), _heads(v, n)]).astype(x.dtype)
        return [y.astype(x.dtype), present]

    def work(self, ctx: NodeContext) -> Work:
        """MACs of the projection plus the two attention products."""
        w = super().work(ctx)
        xs, ws = ctx.shape(0), ctx.shape(1)
        if xs is not None and ws is not None and all(isinstance(d, int) for d in (*xs, *ws)):
            b, s, d_in = xs
            dq, _, dv = self._sizes(ctx.attrs, ws[1])
            w.macs = b * s * d_in * ws[1] + b * s * s * (dq + dv)
        return w


@register("MultiHeadAttention", since=1, domain=MS)
class MultiHeadAttentionSpec(OpSpec):
    """Multi-head attention over already projected Q, K and V."""

    family = "contrib"
    doc = "softmax(Q K^T * scale + mask) V per head; Q (B, S, D), K (B, L, D), V (B, L, Dv), bias (D + D + Dv)."
    inputs = (Port("query"), Port("key", optional=True), Port("value", optional=True), Port("bias", optional=True),
              Port("key_padding_mask", optional=True), Port("attention_bias", optional=True),
              Port("past_key", optional=True), Port("past_value", optional=True))
    outputs = (Port("output"), Port("present_key", optional=True), Port("present_value", optional=True))
    attrs = (AttrSpec("num_heads", "int", None, "Number of heads (required)."),
             AttrSpec("unidirectional", "int", 0, "Causal mask."),
             AttrSpec("mask_filter_value", "float", -10000.0, "Logit of masked positions."),
             AttrSpec("scale", "float", 0.0, "Logit scale (0: 1 / sqrt(head size))."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(B, S, Dv)."""
        if not ctx.attrs.get("num_heads"):
            raise OpError("MultiHeadAttention needs the num_heads attribute")
        qs = ctx.shape(0)
        vs = ctx.shape(2) if ctx.has_input(2) else None
        shape = None
        if qs is not None and len(qs) == 3:
            shape = (qs[0], qs[1], vs[-1] if vs is not None and len(vs) == 3 else qs[2])
        return [TensorType(ctx.dtype(0), shape)] + [TensorType(ctx.dtype(0)) for _ in ctx.node.outputs[1:]]

    def reference(self, ctx: RunContext, q: np.ndarray, k: np.ndarray | None = None, v: np.ndarray | None = None,
                  bias: np.ndarray | None = None, kpm: np.ndarray | None = None,
                  attn_bias: np.ndarray | None = None, past_k: np.ndarray | None = None,
                  past_v: np.ndarray | None = None) -> Any:
        """Bias, split heads, attend."""
        at = ctx.attrs
        if k is None or v is None or k.ndim != 3 or v.ndim != 3 or past_k is not None:
            raise OpError("MultiHeadAttention needs 3-D key and value (packed or past forms are not supported)")
        n = int(at["num_heads"])
        qf, kf, vf = _f32(q), _f32(k), _f32(v)
        if bias is not None:
            d, dv = q.shape[-1], v.shape[-1]
            bb = _f32(bias)
            qf, kf, vf = qf + bb[:d], kf + bb[d:2 * d], vf + bb[2 * d:2 * d + dv]
        b, s, d = q.shape
        scale = float(at["scale"]) or 1.0 / math.sqrt(d // n)
        add = _key_mask(kpm, b, s, k.shape[1], float(at["mask_filter_value"]))
        if attn_bias is not None:
            add = _f32(attn_bias) if add is None else add + _f32(attn_bias)
        kh, vh = _heads(kf, n), _heads(vf, n)
        y = attend(_heads(qf, n), kh, vh, scale, add, bool(int(at["unidirectional"])))
        return [y.astype(q.dtype), kh.astype(q.dtype), vh.astype(q.dtype)]

    def work(self, ctx: NodeContext) -> Work:
        """MACs of the two attention products."""
        w = super().work(ctx)
        qs, ks = ctx.shape(0), ctx.shape(1) if ctx.has_input(1) else None
        vs = ctx.shape(2) if ctx.has_input(2) else None
        if qs and ks and vs and all(isinstance(d, int) for d in (*qs, *ks, *vs)):
            w.macs = qs[0] * qs[1] * ks[1] * (qs[2] + vs[2])
        return w


@register("SimplifiedLayerNormalization", since=1, domain="")
class SimplifiedLayerNormalizationOnnxSpec(SimplifiedLayerNormalizationSpec):
    """onnxruntime registers SimplifiedLayerNormalization in the default domain, and its
    transformer optimizer writes it there; the com.microsoft spelling is the same op."""
