"""Normalization ops: batch/instance/layer/group/RMS normalization, LRN, Lp and MVN.

Statistics are computed in float32 (float64 stays float64) and the output keeps the input
dtype. Inference-mode BatchNormalization is one fused multiply-add per element.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nodes._util import norm_axis
from nodes.kernels import compiled_float, lrn_base_
from nodes.registry import register
from nodes.spec import (
    AttrSpec,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    QuantSpec,
    RunContext,
    Work,
    ints,
)
from nodes.types import Dim, TensorType


def _acc(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _stash_dtype(stash_type: int, dtype: np.dtype) -> np.dtype:
    """Compute dtype from a stash_type code (1 float32, 11 float64, otherwise the input's)."""
    if stash_type == 11 or dtype == np.float64:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape broadcasting a per-channel vector over a (N, C, ...) tensor."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2) if x.ndim >= 2 else (-1,)


class _NormSpec(OpSpec):
    family = "normalization"

    def work(self, ctx: NodeContext) -> Work:
        """A few element ops per element (statistics, normalize, scale)."""
        w = super().work(ctx)
        n = ctx.type(0).numel()
        if n is not None:
            w.elem_ops = 4 * n
        return w


# -- BatchNormalization ----------------------------------------------------------------------------

@register("BatchNormalization", since=1)
class BatchNormalizationSpec(_NormSpec):
    """Normalize with per-channel statistics, then scale and shift."""

    doc = "Batch normalization: inference with running statistics, or training-mode statistics."
    inplace = True
    inputs = (Port("X", doc="(N, C, D1, ...)"), Port("scale"), Port("B"), Port("input_mean"), Port("input_var"))
    outputs = (Port("Y"), Port("running_mean", optional=True), Port("running_var", optional=True),
               Port("saved_mean", optional=True), Port("saved_var", optional=True))
    attrs = (AttrSpec("epsilon", "float", 1e-5, "Added to the variance for numerical stability."),
             AttrSpec("momentum", "float", 0.9, "Running statistics update factor (training)."),
             AttrSpec("training_mode", "int", 0, "Use batch statistics and output running ones (opset 14+)."),
             AttrSpec("spatial", "int", 1, "Per-channel (1) or per-activation (0) statistics (opset < 9)."),
             AttrSpec("is_test", "int", 0, "Inference mode flag (opset < 7)."))

    def training(self, opset: int, attrs: dict[str, Any], n_outputs: int) -> bool:
        """Whether a node with these attributes and outputs normalizes with batch statistics."""
        if opset >= 14:
            return bool(attrs.get("training_mode", 0))
        if opset < 7 and attrs.get("is_test", 0):
            return False
        return n_outputs > 1

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Y like X; statistics outputs like the mean input."""
        out = [ctx.type(0)]
        stat = TensorType(ctx.dtype(3) or ctx.dtype(0), ctx.shape(3) if ctx.has_input(3) else None)
        out.extend(stat for _ in ctx.node.outputs[1:])
        return out

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray, b: np.ndarray,
                  mean: np.ndarray, var: np.ndarray) -> Any:
        """y = (x - mean) / sqrt(var + eps) * scale + B, as one multiply-add per element."""
        key = (x.shape, x.dtype)
        hit = ctx.cache.get("affine")
        if (hit is not None and hit[0] == key and hit[1][0] is scale and hit[1][1] is b and hit[1][2] is mean
                and hit[1][3] is var):  # the same constant statistics as last run: inv and shift kept
            inv, shift = hit[2]
            y = np.multiply(x, inv, out=x) if ctx.donate == 0 and x.dtype == inv.dtype else x * inv
            y += shift
            return y.astype(x.dtype, copy=False)
        a = ctx.attrs
        eps = float(a.get("epsilon", 1e-5))
        acc = _acc(x.dtype)
        spatial = ctx.opset >= 9 or int(a.get("spatial", 1)) == 1
        pshape = _channel_shape(x) if spatial else (1, *x.shape[1:])
        want = int(np.prod(pshape)) if x.ndim >= 2 or not spatial else None
        for label, t in (("scale", scale), ("B", b), ("input_mean", mean), ("input_var", var)):
            if want is not None and np.size(t) != want:
                raise OpError(f"BatchNormalization: {label} has {np.size(t)} values, X of shape {list(x.shape)} "
                              f"needs {want} (one per channel)")
        if self.training(ctx.opset, a, len(ctx.node.outputs) if ctx.node is not None else 1):
            axes = (0, *range(2, x.ndim)) if spatial else (0,)
            xf = x.astype(acc, copy=False)
            cur_mean = xf.mean(axis=axes)
            cur_var = xf.var(axis=axes)
            inv = scale.astype(acc) / np.sqrt(cur_var + eps)
            y = (xf - cur_mean.reshape(pshape)) * inv.reshape(pshape) + b.astype(acc).reshape(pshape)
            mom = float(a.get("momentum", 0.9))
            run_mean = mean.astype(acc) * mom + cur_mean * (1 - mom)
            run_var = var.astype(acc) * mom + cur_var * (1 - mom)
            outs = [y.astype(x.dtype, copy=False), run_mean.astype(mean.dtype), run_var.astype(var.dtype)]
            if ctx.opset < 14:
                outs += [cur_mean.astype(mean.dtype), cur_var.astype(var.dtype)]
            return outs
        inv = scale.astype(acc, copy=False) / np.sqrt(var.astype(acc, copy=False) + acc.type(eps))
        shift = b.astype(acc, copy=False) - mean.astype(acc, copy=False) * inv
        inv, shift = inv.reshape(pshape), shift.reshape(pshape)
        ctx.cache["affine"] = (key, (scale, b, mean, var), (inv, shift))
        if ctx.donate == 0 and x.dtype == acc:  # x dies here: the output reuses its buffer
            y = np.multiply(x, inv, out=x)
        else:
            y = x * inv
        y += shift
        return y.astype(x.dtype, copy=False)


# -- InstanceNormalization -------------------------------------------------------------------------

@register("InstanceNormalization", since=1)
class InstanceNormalizationSpec(_NormSpec):
    """Normalize every (sample, channel) plane over its spatial positions."""

    doc = "Instance normalization: per (N, C) mean/variance over the spatial axes."
    inputs = (Port("input", doc="(N, C, D1, ...)"), Port("scale", doc="(C,)"), Port("B", doc="(C,)"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("epsilon", "float", 1e-5, "Added to the variance for numerical stability."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(x - mean) / sqrt(var + eps) * scale + B over the spatial axes."""
        acc = _acc(x.dtype)
        xf = x.astype(acc, copy=False)
        axes = tuple(range(2, x.ndim))
        mean = xf.mean(axis=axes, keepdims=True)
        var = xf.var(axis=axes, keepdims=True)
        cs = _channel_shape(x)
        y = (xf - mean) / np.sqrt(var + float(ctx.attrs.get("epsilon", 1e-5)))
        y = y * scale.astype(acc).reshape(cs) + b.astype(acc).reshape(cs)
        return y.astype(x.dtype, copy=False)


# -- LayerNormalization / RMSNormalization -----------------------------------------------------------

def _stat_shape(shape: tuple[Dim, ...] | None, axis: int) -> tuple[Dim, ...] | None:
    if shape is None:
        return None
    a = norm_axis(axis, len(shape))
    return (*shape[:a], *([1] * (len(shape) - a)))


@register("LayerNormalization", since=17)
class LayerNormalizationSpec(_NormSpec):
    """Normalize over the trailing axes from ``axis`` on, then scale and shift."""

    quant = QuantSpec("elementwise", float_inputs=frozenset({1, 2}))  # gamma and beta stay float

    doc = "Layer normalization over axes [axis, rank); optional Mean and InvStdDev outputs."
    inputs = (Port("X"), Port("Scale"), Port("B", optional=True))
    outputs = (Port("Y"), Port("Mean", optional=True), Port("InvStdDev", optional=True))
    attrs = (AttrSpec("axis", "int", -1, "First normalized axis."),
             AttrSpec("epsilon", "float", 1e-5, "Added to the variance for numerical stability."),
             AttrSpec("stash_type", "int", 1, "Element type of the statistics (1 = float32)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Y like X; Mean/InvStdDev keep the leading dims with 1 for normalized axes."""
        out = [ctx.type(0)]
        if len(ctx.node.outputs) > 1:
            dt = _stash_dtype(int(ctx.attrs["stash_type"]), ctx.dtype(0) or np.dtype(np.float32))
            st = TensorType(dt, _stat_shape(ctx.shape(0), int(ctx.attrs["axis"])))
            out.extend(st for _ in ctx.node.outputs[1:])
        return out

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray, b: np.ndarray | None = None) -> Any:
        """Mean and variance over the trailing axes in the stash type."""
        a = ctx.attrs
        axis = norm_axis(int(a["axis"]), x.ndim)
        dt = _stash_dtype(int(a["stash_type"]), x.dtype)
        xf = x.astype(dt, copy=False)
        axes = tuple(range(axis, x.ndim))
        mean = xf.mean(axis=axes, keepdims=True)
        d = xf - mean
        var = np.mean(d * d, axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + dt.type(float(a["epsilon"])))
        y = d * inv * scale.astype(dt, copy=False)
        if b is not None:
            y += b.astype(dt, copy=False)
        return [y.astype(x.dtype, copy=False), mean, inv]


@register("RMSNormalization", since=23)
class RMSNormalizationSpec(_NormSpec):
    """Divide by the root mean square over the trailing axes, then scale."""

    doc = "RMS normalization over axes [axis, rank): x / sqrt(mean(x^2) + eps) * scale."
    inputs = (Port("X"), Port("scale"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("axis", "int", -1, "First normalized axis."),
             AttrSpec("epsilon", "float", 1e-5, "Added to the mean square for numerical stability."),
             AttrSpec("stash_type", "int", 1, "Compute type (1 = float32)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as X."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """x / sqrt(mean(x^2) + eps) * scale in the stash type."""
        a = ctx.attrs
        axis = norm_axis(int(a["axis"]), x.ndim)
        dt = _stash_dtype(int(a["stash_type"]), x.dtype)
        xf = x.astype(dt, copy=False)
        ms = np.mean(xf * xf, axis=tuple(range(axis, x.ndim)), keepdims=True)
        y = xf / np.sqrt(ms + dt.type(float(a["epsilon"]))) * scale.astype(dt, copy=False)
        return y.astype(x.dtype, copy=False)


# -- GroupNormalization ---------------------------------------------------------------------------

@register("GroupNormalization", since=18)
class GroupNormalizationSpec(_NormSpec):
    """Normalize groups of channels per sample, then scale and shift per channel."""

    doc = "Group normalization (scale/bias per group before opset 21, per channel from 21)."
    inputs = (Port("X", doc="(N, C, D1, ...)"), Port("scale"), Port("bias"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("epsilon", "float", 1e-5, "Added to the variance for numerical stability."),
             AttrSpec("num_groups", "int", None, "Number of channel groups (required)."),
             AttrSpec("stash_type", "int", 1, "Compute type (1 = float32; opset 21+)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as X; checks that the groups divide the channels."""
        g = ctx.attrs.get("num_groups")
        if g is None:
            raise OpError("GroupNormalization needs the num_groups attribute")
        xs = ctx.shape(0)
        if xs is not None and len(xs) > 1 and isinstance(xs[1], int) and xs[1] % int(g):
            raise OpError(f"{xs[1]} channels are not divisible into {g} groups")
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """Statistics over (C/G, D1, ...) per (N, G)."""
        a = ctx.attrs
        if a.get("num_groups") is None:
            raise OpError("GroupNormalization needs the num_groups attribute")
        g = int(a["num_groups"])
        n, c = x.shape[:2]
        if c % g:
            raise OpError(f"{c} channels are not divisible into {g} groups")
        dt = _stash_dtype(int(a.get("stash_type", 1)), x.dtype)
        xg = x.astype(dt, copy=False).reshape(n, g, -1)
        mean = xg.mean(axis=2, keepdims=True)
        d = xg - mean
        var = np.mean(d * d, axis=2, keepdims=True)
        y = (d / np.sqrt(var + dt.type(float(a["epsilon"])))).reshape(x.shape)
        sc, bi = scale.astype(dt).reshape(-1), bias.astype(dt).reshape(-1)
        if sc.size == g and g != c:  # opset 18: one scale/bias per group
            sc, bi = np.repeat(sc, c // g), np.repeat(bi, c // g)
        cs = _channel_shape(x)
        return (y * sc.reshape(cs) + bi.reshape(cs)).astype(x.dtype, copy=False)


# -- LRN, LpNormalization, MeanVarianceNormalization ----------------------------------------------------

@register("LRN", since=1)
class LRNSpec(_NormSpec):
    """Local response normalization across neighbouring channels (AlexNet)."""

    doc = "LRN: x / (bias + alpha/size * sum of squares over `size` neighbouring channels)^beta."
    inputs = (Port("X", doc="(N, C, D1, ...)"),)
    outputs = (Port("Y"),)
    attrs = (AttrSpec("alpha", "float", 1e-4, "Scale of the sum of squares."),
             AttrSpec("beta", "float", 0.75, "Exponent."),
             AttrSpec("bias", "float", 1.0, "Added before the exponent."),
             AttrSpec("size", "int", None, "Number of channels summed (required)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as X."""
        if ctx.attrs.get("size") is None:
            raise OpError("LRN needs the size attribute")
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Channel-window sum of squares via a cumulative sum over the channel axis."""
        a = ctx.attrs
        if a.get("size") is None:
            raise OpError("LRN needs the size attribute")
        size = int(a["size"])
        if size < 1:
            raise OpError(f"LRN size must be >= 1, got {size}")
        acc = _acc(x.dtype)
        xf = x.astype(acc, copy=False)
        if xf.ndim >= 2 and xf.size and compiled_float(xf):  # the same values, the base in one compiled pass
            base = lrn_base_(xf, size, float(a["alpha"]), float(a["bias"]))
            np.power(base, base.dtype.type(float(a["beta"])), out=base)
            return np.divide(xf, base, out=base).astype(x.dtype, copy=False)
        c = x.shape[1]
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        sq = xf * xf
        csum = np.zeros((x.shape[0], c + 1, *x.shape[2:]), dtype=acc)
        np.cumsum(sq, axis=1, out=csum[:, 1:])
        idx = np.arange(c)
        upper = np.minimum(idx + hi, c - 1) + 1
        lower = np.maximum(idx - lo, 0)
        window = csum[:, upper] - csum[:, lower]
        base = float(a["bias"]) + float(a["alpha"]) / size * window
        y = xf / base ** float(a["beta"])
        return y.astype(x.dtype, copy=False)


@register("LpNormalization", since=1)
class LpNormalizationSpec(_NormSpec):
    """Divide by the L1 or L2 norm along one axis."""

    doc = "Lp normalization (p = 1 or 2) along an axis."
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", -1, "Axis of the norm."),
             AttrSpec("p", "int", 2, "Order of the norm: 1 or 2."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input."""
        if int(ctx.attrs["p"]) not in (1, 2):
            raise OpError(f"LpNormalization supports p = 1 or 2, got {ctx.attrs['p']}")
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """x / ||x||_p along the axis (0 where the norm is 0)."""
        p = int(ctx.attrs["p"])
        axis = norm_axis(int(ctx.attrs["axis"]), x.ndim)
        acc = _acc(x.dtype)
        xf = x.astype(acc, copy=False)
        if p == 1:
            norm = np.abs(xf).sum(axis=axis, keepdims=True)
        elif p == 2:
            norm = np.sqrt((xf * xf).sum(axis=axis, keepdims=True))
        else:
            raise OpError(f"LpNormalization supports p = 1 or 2, got {p}")
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(norm == 0, 0, xf / norm)
        return y.astype(x.dtype, copy=False)


@register("MeanVarianceNormalization", since=9)
class MeanVarianceNormalizationSpec(_NormSpec):
    """Zero mean, unit variance over the given axes."""

    doc = "(X - mean) / (std + 1e-9) over `axes` (default N, H, W)."
    inputs = (Port("X"),)
    outputs = (Port("Y"),)
    attrs = (AttrSpec("axes", "ints", [0, 2, 3], "Axes the statistics are taken over."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as X."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """ONNX's function body: std = sqrt(E[x^2] - E[x]^2), y = (x - E[x]) / (std + 1e-9)."""
        axes = tuple(norm_axis(v, x.ndim) for v in ints(ctx.attrs["axes"]))
        acc = _acc(x.dtype)
        xf = x.astype(acc, copy=False)
        mean = xf.mean(axis=axes, keepdims=True)
        var = (xf * xf).mean(axis=axes, keepdims=True) - mean * mean
        std = np.sqrt(np.maximum(var, 0))
        return ((xf - mean) / (std + acc.type(1e-9))).astype(x.dtype, copy=False)
