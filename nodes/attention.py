"""Transformer and state-space building blocks: Attention (opsets 23-25), RotaryEmbedding,
SwiGLU, TensorScatter (KV-cache writes), CausalConvWithState and LinearAttention. Attention:

Q (B, Hq, S, D), K (B, Hkv, L, D), V (B, Hkv, L, Dv); 3-D inputs (B, S, H*D) are split into
heads with q_num_heads / kv_num_heads and merged back on the way out. With a cache,
K' = concat(past_key, K) and V' = concat(past_value, V) along the sequence axis (the present_*
outputs). With s = scale (default 1/sqrt(D)), both operands are scaled by sqrt(s) first (as
the reference function does, so float16 rounds the same way):

    QK = (Q sqrt(s)) (K' sqrt(s))^T              one (S, L') score matrix per batch and head
    QK = softcap * tanh(QK / softcap)            when softcap > 0
    P  = softmax(QK + bias)                      along the key axis
    Y  = P V'

bias adds attn_mask (a bool mask becomes 0 / -inf, a float mask is added; a mask shorter than
L' is padded with -inf), the causal mask (query i sees key j iff j <= i + offset, offset = the
past length, or nonpad_kv_seqlen[b] - S with an external cache), the sliding window
(offset + i - left <= j <= offset + i + right) and the padding mask j < nonpad_kv_seqlen[b].
A query row whose bias is -inf everywhere attends nothing: its probabilities are 0. GQA: when
Hq is a multiple of Hkv, each K/V head serves Hq/Hkv consecutive query heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nodes.matmul import matmul
from nodes.registry import register
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, Work
from nodes.types import Dim, TensorType, np_dtype


def _split_heads(x: np.ndarray, heads: int, what: str) -> np.ndarray:
    b, s, hidden = x.shape
    if heads <= 0 or hidden % heads:
        raise OpError(f"Attention: {what} hidden size {hidden} is not a multiple of {heads} heads")
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _softmax_rows(x: np.ndarray) -> np.ndarray:
    """Softmax along the last axis; a row that is -inf everywhere gives zeros, not NaN.
    float16 rounds per step (sum accumulated in float32), like the Softmax op."""
    top = x.max(axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), x.dtype.type(0), top)
    e = np.exp(x - top)
    total = e.sum(axis=-1, keepdims=True, dtype=np.float32 if e.dtype == np.float16 else None)
    total = np.where(total == 0, 1, total).astype(e.dtype)
    return e / total


def _causal_allowed(s: int, length: int, offset: Any) -> np.ndarray:
    """allowed[i, j] = j <= i + offset ((S, L), or (B, 1, S, L) for per-batch offsets)."""
    i = np.arange(s).reshape(s, 1)
    j = np.arange(length).reshape(1, length)
    if np.ndim(offset):
        return (j <= i + np.reshape(offset, (-1, 1, 1)))[:, None]
    return j <= i + int(offset)


def _window_allowed(s: int, length: int, offset: Any, left: int, right: int) -> np.ndarray:
    i = np.arange(s).reshape(s, 1)
    j = np.arange(length).reshape(1, length)
    diff = (i + np.reshape(offset, (-1, 1, 1)) - j)[:, None] if np.ndim(offset) else i + int(offset) - j
    ok = np.ones(diff.shape, bool)
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok


@register("Attention", since=23)
class AttentionSpec(OpSpec):
    """softmax(Q K^T * scale + mask) V with optional KV cache, causal/window masks and GQA."""

    family = "attention"
    doc = ("Scaled dot-product attention: softmax(Q K^T * scale + bias) V, with 3-D or 4-D inputs, "
           "a bool or additive mask, causal and sliding-window masks, a past K/V cache, grouped-query "
           "heads, softcap, and optionally the QK scores as a fourth output.")
    inputs = (Port("Q"), Port("K"), Port("V"), Port("attn_mask", optional=True),
              Port("past_key", optional=True), Port("past_value", optional=True),
              Port("nonpad_kv_seqlen", optional=True))
    outputs = (Port("Y"), Port("present_key", optional=True), Port("present_value", optional=True),
               Port("qk_matmul_output", optional=True))
    attrs = (
        AttrSpec("is_causal", "int", 0, "1: query i attends keys j <= i + past length only."),
        AttrSpec("q_num_heads", "int", None, "Query heads (3-D inputs only)."),
        AttrSpec("kv_num_heads", "int", None, "Key/value heads (3-D inputs only)."),
        AttrSpec("scale", "float", None, "Score scale (default 1/sqrt(head size))."),
        AttrSpec("softcap", "float", 0.0, "> 0: scores become softcap * tanh(scores / softcap)."),
        AttrSpec("softmax_precision", "int", None, "Element type the softmax is computed in."),
        AttrSpec("qk_matmul_output_mode", "int", 0,
                 "Fourth output: 0/1 the (softcapped) scores, 2 scores + bias, 3 the probabilities."),
        AttrSpec("left_window_size", "int", -1, "Keys further back than this are masked (-1: none)."),
        AttrSpec("right_window_size", "int", -1, "Keys further ahead than this are masked (-1: none)."),
    )

    def _heads(self, ctx_attrs: dict, rank: int | None) -> tuple[int | None, int | None]:
        qh, kh = ctx_attrs.get("q_num_heads"), ctx_attrs.get("kv_num_heads")
        if rank == 4 and (qh is not None or kh is not None):
            raise OpError("Attention: q_num_heads and kv_num_heads are for 3-D inputs only")
        return (None if qh is None else int(qh)), (None if kh is None else int(kh))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Y like Q (3-D: hidden = q heads x V head size); present_* with past + new length."""
        q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        dt = ctx.dtype(0)
        if q is None or k is None or v is None:
            return [TensorType(dt)] + [TensorType(dt)] * (len(ctx.node.outputs) - 1)
        if not (len(q) == len(k) == len(v)) or len(q) not in (3, 4):
            raise OpError(f"Attention: Q, K, V must all be 3-D or all 4-D, got ranks {len(q)}, {len(k)}, {len(v)}")
        qh, kh = self._heads(ctx.attrs, len(q))
        past: Dim = 0
        if ctx.has_input(4):
            ps = ctx.shape(4)
            past = ps[2] if ps is not None else None
        if len(q) == 3:
            if qh is None or kh is None:
                raise OpError("Attention with 3-D inputs needs q_num_heads and kv_num_heads")
            b, s = q[0], q[1]
            dv = v[2] // kh if isinstance(v[2], int) else None
            y = (b, s, qh * dv if dv is not None else None)
            kvh, length, dk = kh, k[1], (k[2] // kh if isinstance(k[2], int) else None)
            hq = qh
        else:
            b, hq, s = q[0], q[1], q[2]
            dv = v[3]
            y = (b, hq, s, dv)
            kvh, length, dk = k[1], k[2], k[3]
        total = past + length if isinstance(past, int) and isinstance(length, int) else None
        types = [TensorType(dt, y), TensorType(dt, (b, kvh, total, dk)), TensorType(dt, (b, kvh, total, dv)),
                 TensorType(dt, (b, hq, s, total))]
        return types[:max(len(ctx.node.outputs), 1)]

    def reference(self, ctx: RunContext, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  attn_mask: np.ndarray | None = None, past_key: np.ndarray | None = None,
                  past_value: np.ndarray | None = None,
                  nonpad_kv_seqlen: np.ndarray | None = None) -> list[np.ndarray]:
        """Compute Y, present_key, present_value and the optional QK output."""
        a = ctx.attrs
        if (past_key is None) != (past_value is None):
            raise OpError("Attention: past_key and past_value come together")
        if nonpad_kv_seqlen is not None and past_key is not None:
            raise OpError("Attention: nonpad_kv_seqlen cannot be combined with a past cache")
        if not (q.ndim == k.ndim == v.ndim) or q.ndim not in (3, 4):
            raise OpError(f"Attention: Q, K, V must all be 3-D or all 4-D, got {q.shape}, {k.shape}, {v.shape}")
        qh, kh = self._heads(a, q.ndim)
        three_d = q.ndim == 3
        if three_d:
            if qh is None or kh is None:
                raise OpError("Attention with 3-D inputs needs q_num_heads and kv_num_heads")
            q, k, v = _split_heads(q, qh, "Q"), _split_heads(k, kh, "K"), _split_heads(v, kh, "V")
        dt = q.dtype
        s, d = q.shape[2], q.shape[3]
        scale = a.get("scale")
        scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
        root = dt.type(np.sqrt(scale))
        if past_key is not None:
            k = np.concatenate([past_key, k], axis=2)
            v = np.concatenate([past_value, v], axis=2)
        present_k, present_v = k, v
        length = k.shape[2]
        bias = np.zeros((s, length), dt)
        mask = attn_mask
        if mask is not None and mask.shape[-1] < length:
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, length - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=False if mask.dtype == bool else -np.inf)
        if mask is not None:
            mask = np.where(mask, dt.type(0), dt.type(-np.inf)) if mask.dtype == bool else mask.astype(dt)
        left, right = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
        if past_key is None and nonpad_kv_seqlen is not None:
            offset: Any = np.asarray(nonpad_kv_seqlen).reshape(-1).astype(np.int64) - s
        else:
            offset = past_key.shape[2] if past_key is not None else 0
        if int(a.get("is_causal", 0)):
            base = bias if mask is None else bias + mask
            bias = base + np.where(_causal_allowed(s, length, offset), dt.type(0), dt.type(-np.inf))
        elif mask is not None:
            bias = bias + mask
        if left >= 0 or right >= 0:
            bias = bias + np.where(_window_allowed(s, length, offset, left, right), dt.type(0), dt.type(-np.inf))
        if nonpad_kv_seqlen is not None:
            keep = np.arange(length) < np.asarray(nonpad_kv_seqlen).reshape(-1, 1)
            bias = bias + np.where(keep, dt.type(0), dt.type(-np.inf)).reshape(-1, 1, 1, length)
        hq, hk = q.shape[1], k.shape[1]
        if hq != hk:
            if hq % hk or hk != v.shape[1]:
                raise OpError(f"Attention: {hq} query heads cannot share {hk} key/value heads")
            k = np.repeat(k, hq // hk, axis=1)
            v = np.repeat(v, hq // hk, axis=1)
        scores = matmul(q * root, np.swapaxes(k * root, -1, -2))
        softcap = float(a.get("softcap") or 0.0)
        if softcap > 0:
            scores = (np.tanh(scores / dt.type(softcap)) * dt.type(softcap)).astype(dt)
        with_bias = scores + bias
        mode = int(a.get("qk_matmul_output_mode") or 0)
        qk_out = with_bias if mode == 2 else scores
        prec = a.get("softmax_precision")
        probs = _softmax_rows(with_bias.astype(np_dtype(int(prec))) if prec is not None else with_bias)
        dead = np.isneginf(bias.max(axis=-1, keepdims=True))
        probs = np.where(dead, probs.dtype.type(0), probs)
        if mode == 3:
            qk_out = probs
        y = matmul(probs.astype(dt), v)
        if three_d:
            y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
        return [y, present_k, present_v, np.asarray(qk_out).astype(dt)]

    def work(self, ctx: NodeContext) -> Work:
        """MACs = B * Hq * S * L' * (D + Dv): the score product and the output product."""
        w = super().work(ctx)
        q, k, v = ctx.type(0), ctx.type(1), ctx.type(2)
        if not (q.is_static and k.is_static and v.is_static) or q.rank not in (3, 4):
            return w
        past = ctx.shape(4)[2] if ctx.has_input(4) and ctx.type(4).is_static else 0
        if q.rank == 4:
            b, hq, s, d = q.shape  # type: ignore[misc]
            length, dv = k.shape[2], v.shape[3]  # type: ignore[index]
        else:
            hq, hk = int(ctx.attrs.get("q_num_heads") or 1), int(ctx.attrs.get("kv_num_heads") or 1)
            b, s, d = q.shape[0], q.shape[1], q.shape[2] // hq  # type: ignore[index,operator]
            length, dv = k.shape[1], v.shape[2] // hk  # type: ignore[index,operator]
        w.macs = int(b) * int(hq) * int(s) * (int(length) + int(past)) * (int(d) + int(dv))
        return w


@register("RotaryEmbedding", since=23)
class RotaryEmbeddingSpec(OpSpec):
    """Rotary position embedding of the first rotary_embedding_dim features of each head."""

    family = "attention"
    doc = ("Rotates feature pairs (x1, x2) of each head by the position's angle: (x1 cos - x2 sin, "
           "x1 sin + x2 cos); pairs are the two halves of the rotated part, or neighbours when "
           "interleaved. Input (B, H, S, D) or (B, S, H*D) with num_heads.")
    inputs = (Port("X"), Port("cos_cache"), Port("sin_cache"), Port("position_ids", optional=True))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("interleaved", "int", 0, "1: pairs are (x[2i], x[2i+1]); 0: the two halves."),
             AttrSpec("rotary_embedding_dim", "int", 0, "Features rotated per head (0: all)."),
             AttrSpec("num_heads", "int", 0, "Heads of a 3-D input."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as X."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                  position_ids: np.ndarray | None = None) -> np.ndarray:
        """Gather cos/sin per position, rotate the pairs, keep the rest."""
        a = ctx.attrs
        if x.ndim == 4:
            h = x.transpose(0, 2, 1, 3)  # (B, S, H, D)
        elif x.ndim == 3:
            heads = int(a.get("num_heads") or 0)
            if heads <= 0 or x.shape[2] % heads:
                raise OpError(f"RotaryEmbedding: a 3-D input needs num_heads dividing {x.shape[2]}")
            h = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
        else:
            raise OpError(f"RotaryEmbedding: input must be 3-D or 4-D, got {x.shape}")
        rot = int(a.get("rotary_embedding_dim") or 0) or h.shape[3]
        if rot % 2 or rot > h.shape[3]:
            raise OpError(f"RotaryEmbedding: rotary_embedding_dim {rot} must be even and <= {h.shape[3]}")
        if position_ids is not None:
            cos, sin = cos[position_ids], sin[position_ids]
        if cos.shape[-1] != rot // 2 or sin.shape[-1] != rot // 2:
            raise OpError(f"RotaryEmbedding: caches end in {cos.shape[-1]}, expected rotary_embedding_dim/2 = {rot // 2}")
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        part, rest = h[..., :rot], h[..., rot:]
        if int(a.get("interleaved") or 0):
            x1, x2 = part[..., 0::2], part[..., 1::2]
        else:
            x1, x2 = part[..., :rot // 2], part[..., rot // 2:]
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if int(a.get("interleaved") or 0):
            turned = np.stack([real, imag], axis=-1).reshape(part.shape)
        else:
            turned = np.concatenate([real, imag], axis=-1)
        out = np.concatenate([turned, rest], axis=-1).astype(x.dtype)
        return out.reshape(x.shape) if x.ndim == 3 else out.transpose(0, 2, 1, 3)


@register("SwiGLU", since=26)
class SwiGLUSpec(OpSpec):
    """The gated feed-forward activation: A * sigmoid(alpha * A) * B."""

    family = "attention"
    doc = "A * sigmoid(alpha * A) * B for A and B of one shape and dtype (no broadcasting)."
    inputs = (Port("A"), Port("B"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("alpha", "float", 1.0, "Scale inside the sigmoid."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """A's type; A and B must agree."""
        a, b = ctx.shape(0), ctx.shape(1)
        if a is not None and b is not None and len(a) == len(b) and any(
                isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b)):
            raise OpError(f"SwiGLU: A {tuple(a)} and B {tuple(b)} must have one shape")
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Swish gate in the input dtype."""
        if a.shape != b.shape or a.dtype != b.dtype:
            raise OpError(f"SwiGLU: A {a.shape} {a.dtype} and B {b.shape} {b.dtype} must match")
        alpha = a.dtype.type(float(ctx.attrs.get("alpha", 1.0)))
        gate = (1 / (1 + np.exp(-alpha * a))).astype(a.dtype)
        return (a * gate * b).astype(a.dtype)


@register("TensorScatter", since=24)
class TensorScatterSpec(OpSpec):
    """Writes an update into a KV cache at per-batch positions along the sequence axis."""

    family = "attention"
    doc = ("present = past with update written at write_indices[b] (+ k) along axis for every batch "
           "b; circular mode wraps the positions around the cache length.")
    inputs = (Port("past_cache"), Port("update"), Port("write_indices", optional=True))
    outputs = (Port("present_cache"),)
    attrs = (AttrSpec("axis", "int", -2, "The sequence axis (not the batch axis 0)."),
             AttrSpec("mode", "string", "linear", "linear or circular.", choices=("linear", "circular")))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The cache's type."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, past: np.ndarray, update: np.ndarray,
                  write_indices: np.ndarray | None = None) -> np.ndarray:
        """Fancy-indexed write of every update slice."""
        mode = ctx.attrs.get("mode") or "linear"
        if mode not in ("linear", "circular"):
            raise OpError(f"TensorScatter: unknown mode {mode!r}")
        if past.ndim != update.ndim:
            raise OpError(f"TensorScatter: cache {past.shape} and update {update.shape} differ in rank")
        axis = int(ctx.attrs.get("axis", -2)) % past.ndim
        if axis == 0:
            raise OpError("TensorScatter: axis must not be the batch axis")
        for i, (p, u) in enumerate(zip(past.shape, update.shape)):
            if (i != axis and p != u) or (i == axis and u > p):
                raise OpError(f"TensorScatter: update {update.shape} does not fit cache {past.shape}")
        batch, length, steps = past.shape[0], past.shape[axis], update.shape[axis]
        start = np.zeros(batch, np.int64) if write_indices is None else np.asarray(write_indices, np.int64).reshape(-1)
        pos = start[:, None] + np.arange(steps)[None, :]  # (batch, steps)
        if mode == "circular":
            pos = pos % length
        elif pos.size and (pos.min() < 0 or pos.max() >= length):
            raise OpError(f"TensorScatter: positions {int(pos.min())}..{int(pos.max())} leave a cache of {length}")
        out = past.copy()
        p = np.moveaxis(out, axis, 1)  # a view: (batch, length, ...)
        u = np.moveaxis(update, axis, 1)
        p[np.arange(batch)[:, None], pos] = u
        return out


@register("CausalConvWithState", since=26)
class CausalConvWithStateSpec(OpSpec):
    """Depthwise causal 1-D convolution that carries its last k - 1 inputs as state."""

    family = "attention"
    doc = ("Depthwise Conv1d over [past_state (or zeros), input] with kernel k and no padding, so "
           "output t sees inputs up to t; optional SiLU; present_state is the last k - 1 padded inputs.")
    inputs = (Port("input"), Port("weight"), Port("bias", optional=True), Port("past_state", optional=True))
    outputs = (Port("output"), Port("present_state", optional=True))
    attrs = (AttrSpec("activation", "string", "none", "none, silu or swish.", choices=("none", "silu", "swish")),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """output like input; present_state (B, C, k - 1)."""
        x, w = ctx.shape(0), ctx.shape(1)
        k = w[2] if w is not None and len(w) == 3 else None
        state = None if x is None else (x[0], x[1], k - 1 if isinstance(k, int) else None)
        return [ctx.type(0), TensorType(ctx.dtype(0), state)][:max(len(ctx.node.outputs), 1)]

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                  past: np.ndarray | None = None) -> list[np.ndarray]:
        """Sliding windows times the per-channel kernels."""
        act = ctx.attrs.get("activation") or "none"
        if act not in ("none", "silu", "swish"):
            raise OpError(f"CausalConvWithState: unknown activation {act!r}")
        if x.ndim != 3 or w.ndim != 3 or w.shape[0] != x.shape[1] or w.shape[1] != 1:
            raise OpError(f"CausalConvWithState: input {x.shape} (B, C, L) and weight {w.shape} (C, 1, k) do not fit")
        b, c, _ = x.shape
        k = w.shape[2]
        pad = np.zeros((b, c, k - 1), x.dtype) if past is None else past.astype(x.dtype)
        if pad.shape != (b, c, k - 1):
            raise OpError(f"CausalConvWithState: past_state {pad.shape} must be {(b, c, k - 1)}")
        padded = np.concatenate([pad, x], axis=2)
        windows = np.lib.stride_tricks.sliding_window_view(padded, k, axis=2)  # (B, C, L, k)
        calc = np.float32 if x.dtype in (np.float16,) else x.dtype
        out = np.einsum("bclk,ck->bcl", windows.astype(calc), w[:, 0, :].astype(calc))
        if bias is not None:
            out = out + bias.astype(calc)[None, :, None]
        out = out.astype(x.dtype)
        if act in ("silu", "swish"):
            f = out.astype(np.float32)
            out = (f / (1.0 + np.exp(-f))).astype(x.dtype)
        return [out, padded[:, :, padded.shape[2] - (k - 1):]]


_LINEAR_RULES = ("linear", "gated", "delta", "gated_delta")


@register("LinearAttention", since=26)
class LinearAttentionSpec(OpSpec):
    """Recurrent (linear) attention: a (d_k x d_v) state per head updated token by token."""

    family = "attention"
    doc = ("Per token t and key/value head: S <- S * exp(decay_t) (gated rules); v <- beta_t (v - S^T k) "
           "(delta rules); S <- S + k v^T; the output is scale * q^T S (query heads share their KV "
           "head's state). Inputs (B, T, H*D); past_state/present_state (B, Hkv, d_k, d_v).")
    inputs = (Port("query"), Port("key"), Port("value"), Port("past_state", optional=True),
              Port("decay", optional=True), Port("beta", optional=True))
    outputs = (Port("output"), Port("present_state", optional=True))
    attrs = (AttrSpec("q_num_heads", "int", None, "Query heads."),
             AttrSpec("kv_num_heads", "int", None, "Key/value heads (divides q_num_heads)."),
             AttrSpec("scale", "float", None, "Output scale (default 1/sqrt(d_k))."),
             AttrSpec("update_rule", "string", "gated_delta", "linear, gated, delta or gated_delta.",
                      choices=_LINEAR_RULES),
             AttrSpec("chunk_size", "int", None, "A tuning hint for chunked kernels (no effect on results)."))

    def _heads(self, a: dict) -> tuple[int, int]:
        hq, hk = a.get("q_num_heads"), a.get("kv_num_heads")
        if hq is None or hk is None or int(hq) <= 0 or int(hk) <= 0 or int(hq) % int(hk):
            raise OpError(f"LinearAttention: q_num_heads {hq} must be a positive multiple of kv_num_heads {hk}")
        return int(hq), int(hk)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """output (B, T, Hq * d_v); present_state (B, Hkv, d_k, d_v)."""
        hq, hk = self._heads(ctx.attrs)
        q, v = ctx.shape(0), ctx.shape(2)
        if q is None or v is None or len(q) != 3 or len(v) != 3:
            return [TensorType(ctx.dtype(0)), TensorType(ctx.dtype(0))][:max(len(ctx.node.outputs), 1)]
        dk = q[2] // hq if isinstance(q[2], int) else None
        dv = v[2] // hk if isinstance(v[2], int) else None
        out = TensorType(ctx.dtype(0), (q[0], q[1], hq * dv if dv is not None else None))
        state_dt = ctx.dtype(3) if ctx.has_input(3) else ctx.dtype(0)
        return [out, TensorType(state_dt, (q[0], hk, dk, dv))][:max(len(ctx.node.outputs), 1)]

    def reference(self, ctx: RunContext, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  past: np.ndarray | None = None, decay: np.ndarray | None = None,
                  beta: np.ndarray | None = None) -> list[np.ndarray]:
        """The token-by-token recurrence in float32."""
        a = ctx.attrs
        rule = a.get("update_rule") or "gated_delta"
        if rule not in _LINEAR_RULES:
            raise OpError(f"LinearAttention: unknown update_rule {rule!r}")
        gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        if gated != (decay is not None) or delta != (beta is not None):
            raise OpError(f"LinearAttention: update_rule {rule!r} needs {'decay ' if gated else ''}"
                          f"{'beta' if delta else ''} and no other of decay/beta")
        hq, hk = self._heads(a)
        if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
            raise OpError("LinearAttention: query, key and value must be (B, T, H*D)")
        b, t, _ = q.shape
        qh = _split_heads(q, hq, "query").astype(np.float32)  # (B, Hq, T, dk)
        kh = _split_heads(k, hk, "key").astype(np.float32)
        vh = _split_heads(v, hk, "value").astype(np.float32)
        dk, dv = qh.shape[3], vh.shape[3]
        if decay is not None:
            g = decay.astype(np.float32)
            if g.shape[-1] == hk:
                g = g.reshape(b, t, hk, 1).transpose(0, 2, 1, 3)
            elif g.shape[-1] == hk * dk:
                g = _split_heads(g, hk, "decay")
            else:
                raise OpError(f"LinearAttention: decay's last dim {g.shape[-1]} must be {hk} or {hk * dk}")
        if beta is not None:
            if beta.shape[-1] not in (hk, 1):
                raise OpError(f"LinearAttention: beta's last dim {beta.shape[-1]} must be {hk} or 1")
            be = beta.astype(np.float32).reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3)
        if past is not None and past.shape != (b, hk, dk, dv):
            raise OpError(f"LinearAttention: past_state {past.shape} must be {(b, hk, dk, dv)}")
        state = np.zeros((b, hk, dk, dv), np.float32) if past is None else past.astype(np.float32)
        scale = a.get("scale")
        scale = 1.0 / np.sqrt(dk) if not scale else float(scale)
        out = np.empty((b, hq, t, dv), np.float32)
        group = hq // hk
        for i in range(t):
            kt, vt = kh[:, :, i], vh[:, :, i]
            if gated:
                state = state * np.exp(g[:, :, i])[..., None]
            if delta:
                vt = be[:, :, i] * (vt - np.einsum("bhkv,bhk->bhv", state, kt))
            state = state + kt[..., :, None] * vt[..., None, :]
            read = state if group == 1 else np.repeat(state, group, axis=1)
            out[:, :, i] = scale * np.einsum("bhk,bhkv->bhv", qh[:, :, i], read)
        y = out.transpose(0, 2, 1, 3).reshape(b, t, hq * dv).astype(q.dtype)
        return [y, state.astype(past.dtype if past is not None else q.dtype)]
