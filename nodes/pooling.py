"""Pooling ops: Max/Average/Lp pooling (windowed and global), MaxUnpool, MaxRoiPool, RoiAlign.

Windowed pools loop over the kernel taps and reduce strided views of the padded input (one
vectorized operation per tap); the window geometry is shared with Conv (nodes.conv).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from nodes import direct_conv
from nodes._util import prod
from nodes.conv import (
    AUTO_PADS,
    infer_window_shape,
    pad_spatial,
    tap_view,
    window_attrs,
    window_geometry,
)
from nodes.kernels import pool2d
from nodes.registry import register
from nodes.rules import WINDOW_RULES
from nodes.spec import (
    ELEMENTWISE_QUANT,
    REQUIRED,
    AttrSpec,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    RunContext,
    Work,
    ints,
)
from nodes.types import Dim, TensorType

_WINDOW_ATTRS = (
    AttrSpec("auto_pad", "string", "NOTSET", "Automatic padding (deprecated): NOTSET uses pads.",
             choices=AUTO_PADS),
    AttrSpec("ceil_mode", "int", 0, "Use ceil instead of floor to compute the output shape."),
    AttrSpec("dilations", "ints", None, "Dilation per spatial axis (default 1)."),
    AttrSpec("kernel_shape", "ints", REQUIRED, "Window size per spatial axis."),
    AttrSpec("pads", "ints", None, "Padding [x1_begin, x2_begin, ..., x1_end, x2_end, ...]."),
    AttrSpec("strides", "ints", None, "Stride per spatial axis (default 1)."),
)


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


class _WindowPool(OpSpec):
    """Shared inference and geometry of the windowed pools."""

    family = "pooling"
    rules = WINDOW_RULES
    inputs = (Port("X", doc="(N, C, D1, ...)"),)
    outputs = (Port("Y"),)
    attrs = _WINDOW_ATTRS

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, C, *out_spatial); the optional Indices output is int64."""
        xs = ctx.shape(0)
        kernel = ints(ctx.attrs["kernel_shape"])
        lead = (xs[0], xs[1]) if xs is not None else ()
        shape = infer_window_shape(ctx, kernel, lead, bool(ctx.attrs.get("ceil_mode", 0)))
        out = [TensorType(ctx.dtype(0), shape)]
        if len(ctx.node.outputs) > 1:
            out.append(TensorType(np.dtype(np.int64), shape))
        return out

    def _geometry(self, ctx: RunContext, x: np.ndarray) -> tuple[list[int], list[int], list[int], list[int],
                                                                  list[int], list[int]]:
        kernel = ints(ctx.attrs["kernel_shape"])
        n = x.ndim - 2
        if len(kernel) != n:
            raise OpError(f"{self.op_type}: kernel_shape {kernel} does not match {n} spatial dims")
        strides, dils = window_attrs(ctx.attrs, n)
        pb, pe, out = window_geometry(x.shape[2:], kernel, strides, dils, ctx.attrs,
                                      bool(ctx.attrs.get("ceil_mode", 0)), clamp_same=False)
        # extend the end padding so that every (ceil mode) window fits the padded buffer
        pe = [max(e, (o - 1) * s + (k - 1) * d + 1 - sz - b)
              for e, o, s, k, d, sz, b in zip(pe, out, strides, kernel, dils, x.shape[2:], pb)]
        return kernel, strides, dils, pb, pe, out

    # MaxPool compares (element ops); AveragePool and LpPool accumulate (MACs)
    accumulates = True

    def work(self, ctx: NodeContext) -> Work:
        """One accumulate (or compare, for MaxPool) per output element and window tap."""
        w = super().work(ctx)
        n = ctx.out_type(0).numel()
        if n is not None:
            taps = n * prod(ints(ctx.attrs["kernel_shape"]))
            if self.accumulates:
                w.macs = taps
            else:
                w.elem_ops = taps
        return w


def _taps(kernel: Sequence[int]):
    return itertools.product(*(range(k) for k in kernel))


def _direct(x: np.ndarray, pb: Sequence[int], out: Sequence[int]) -> bool:
    """Whether a 2-D max or average pool runs nodes.kernels.pool2d on ``x`` itself: a float32 or
    float64 NCHW input, no cropping begin pad, some output. Without the padded copy (np.full
    and a copy of the whole input) and, for an average, the division's extra pass. Measured (the
    op, CPU best): 64 x 112 x 112 3x3 s2 max pool 0.98 -> 0.54 ms, 192 x 56 x 56 s2 1.00 ->
    0.66, 256 x 28 x 28 3x3 s1 average 0.99 -> 0.67, 480 x 28 x 28 3x3 s1 max 1.52 -> 1.20."""
    return x.ndim == 4 and x.dtype in (np.float32, np.float64) and min(pb) >= 0 and min(out) > 0


def separable_reduce(xp: np.ndarray, kernel: Sequence[int], out: Sequence[int], strides: Sequence[int],
                     dils: Sequence[int], op: np.ufunc) -> np.ndarray:
    """Reduce every window of the padded ``xp`` with ``op`` (maximum or add), one axis at a time.

    Rectangular windows are separable for max and sum: reducing the rows first and then the
    columns does k_h + k_w strided passes instead of k_h * k_w (about 1.6x faster measured).
    Always returns a new array.
    """
    if xp.ndim == 4 and xp.dtype in (np.float32, np.float64) and op in (np.maximum, np.add) and min(out) > 0:
        return pool2d(xp, kernel, out, strides, dils, op is np.maximum)
    r = xp
    fresh = False
    for a, (k, o, st, d) in enumerate(zip(kernel, out, strides, dils)):
        lead = (slice(None),) * (2 + a)
        first = r[(*lead, slice(0, (o - 1) * st + 1, st))]
        if k == 1:
            r = first
            continue
        acc = first.copy()
        for t in range(1, k):
            op(acc, r[(*lead, slice(t * d, t * d + (o - 1) * st + 1, st))], out=acc)
        r, fresh = acc, True
    return np.ascontiguousarray(r) if fresh else r.copy()


@register("MaxPool", since=1)
class MaxPoolSpec(_WindowPool):
    """Max over sliding windows, optionally returning the flat index of each maximum."""

    quant = ELEMENTWISE_QUANT

    doc = "Max pooling (ceil_mode, dilations, auto_pad; optional Indices output)."
    accumulates = False
    outputs = (Port("Y"), Port("Indices", optional=True, doc="flat index of each maximum (int64)"))
    attrs = (*_WINDOW_ATTRS,
             AttrSpec("storage_order", "int", 0, "Indices order: 0 row major, 1 column major."))

    def reference(self, ctx: RunContext, x: np.ndarray) -> Any:
        """Running maximum over the kernel taps; indices track the first maximum."""
        geom = ctx.cache.get(("max", x.shape))
        if geom is None:
            geom = ctx.cache[("max", x.shape)] = self._geometry(ctx, x)
        kernel, strides, dils, pb, pe, out = geom
        if x.dtype.kind not in "fiu":
            raise OpError(f"{self.op_type} takes a numeric input, got {x.dtype}")
        fill: Any = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        want_idx = len(ctx.node.outputs) > 1 and ctx.node.outputs[1] is not None
        if not want_idx and _direct(x, pb, out):  # the padding never built
            return pool2d(x, kernel, out, strides, dils, True, pb)
        xp = pad_spatial(x, pb, pe, fill)
        y: np.ndarray | None = None
        idx: np.ndarray | None = None
        if want_idx:
            spatial = x.shape[2:]
            if int(ctx.attrs.get("storage_order", 0)):
                sstrides = [prod(spatial[:i]) for i in range(len(spatial))]
            else:
                sstrides = [prod(spatial[i + 1:]) for i in range(len(spatial))]
            base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * prod(spatial)).reshape(
                x.shape[0], x.shape[1], *([1] * len(out)))
        if not want_idx:
            return separable_reduce(xp, kernel, out, strides, dils, np.maximum)
        for tap in _taps(kernel):
            v = tap_view(xp, tap, out, strides, dils)
            if y is None:
                y = v.copy()
                if want_idx:
                    idx = np.broadcast_to(self._flat(tap, out, strides, dils, pb, sstrides), y.shape).copy()
                continue
            if want_idx:
                better = v > y
                if better.any():
                    flat = np.broadcast_to(self._flat(tap, out, strides, dils, pb, sstrides), y.shape)
                    np.copyto(idx, flat, where=better)
            np.maximum(y, v, out=y)
        assert y is not None
        if want_idx:
            return y, idx + base
        return y

    @staticmethod
    def _flat(tap: Sequence[int], out: Sequence[int], strides: Sequence[int], dils: Sequence[int],
              pb: Sequence[int], sstrides: Sequence[int]) -> np.ndarray:
        """Flat spatial input index read by ``tap`` for every output position."""
        n = len(out)
        acc = np.zeros([1] * n, dtype=np.int64)
        for i in range(n):
            pos = np.arange(out[i], dtype=np.int64) * strides[i] + tap[i] * dils[i] - pb[i]
            acc = acc + (pos * sstrides[i]).reshape([-1 if j == i else 1 for j in range(n)])
        return acc


def _window_counts(size: int, out: int, k: int, s: int, d: int, lo: int, hi: int) -> np.ndarray:
    """Per output position, how many taps land in padded coordinates [lo, hi)."""
    pos = np.arange(out)[:, None] * s + np.arange(k)[None, :] * d
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


@register("AveragePool", since=1)
class AveragePoolSpec(_WindowPool):
    """Mean over sliding windows, with or without the padding in the divisor."""

    quant = ELEMENTWISE_QUANT

    doc = "Average pooling (count_include_pad, ceil_mode, dilations, auto_pad)."
    attrs = (*_WINDOW_ATTRS,
             AttrSpec("count_include_pad", "int", 0, "Count padded positions in the divisor."))

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Sum over the kernel taps divided by the number of counted positions."""
        acc = _acc_dtype(x.dtype)
        key = ("avg", x.shape, acc)
        plan = ctx.cache.get(key)
        if plan is None:  # geometry and divisors depend on the shape only: once per shape
            kernel, strides, dils, pb, pe, out = self._geometry(ctx, x)
            _, pe_declared, _ = window_geometry(x.shape[2:], kernel, strides, dils, ctx.attrs,
                                                bool(ctx.attrs.get("ceil_mode", 0)), clamp_same=False)
            include = bool(ctx.attrs.get("count_include_pad", 0))
            div = np.ones([1] * len(out), dtype=acc)
            for i, size in enumerate(x.shape[2:]):
                lo, hi = (0, size + pb[i] + pe_declared[i]) if include else (pb[i], pb[i] + size)
                c = _window_counts(size, out[i], kernel[i], strides[i], dils[i], lo, hi)
                div = div * c.reshape([-1 if j == i else 1 for j in range(len(out))])
            plan = ctx.cache[key] = (kernel, strides, dils, pb, pe, out, div)
        kernel, strides, dils, pb, pe, out, div = plan
        xa = x.astype(acc, copy=False)
        if _direct(xa, pb, out):  # the padding never built, the division in the same pass
            return pool2d(xa, kernel, out, strides, dils, False, pb, div).astype(x.dtype, copy=False)
        xp = pad_spatial(xa, pb, pe, 0)
        y = separable_reduce(xp, kernel, out, strides, dils, np.add)
        with np.errstate(divide="ignore", invalid="ignore"):
            y /= div
        return y.astype(x.dtype, copy=False)


@register("LpPool", since=1)
class LpPoolSpec(_WindowPool):
    """Lp norm over sliding windows: (sum |x|^p)^(1/p)."""

    doc = "Lp pooling (p-norm over each window)."
    attrs = (*_WINDOW_ATTRS, AttrSpec("p", "int", 2, "Exponent of the norm."))

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Sum of |x|^p over the kernel taps, then the p-th root."""
        kernel, strides, dils, pb, pe, out = self._geometry(ctx, x)
        p = float(ctx.attrs.get("p", 2))
        acc = _acc_dtype(x.dtype)
        xa = np.abs(x.astype(acc, copy=False))
        xp = pad_spatial(xa * xa if p == 2 else xa ** p, pb, pe, 0)
        y = separable_reduce(xp, kernel, out, strides, dils, np.add)
        y = np.sqrt(y) if p == 2 else y ** (1.0 / p)
        return y.astype(x.dtype, copy=False)


# -- global pools --------------------------------------------------------------------------------

class _GlobalPool(OpSpec):
    """Reduce every spatial axis to size 1."""

    family = "pooling"
    inputs = (Port("X", doc="(N, C, D1, ...)"),)
    outputs = (Port("Y", doc="(N, C, 1, ...)"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, C, 1, 1, ...)."""
        xs = ctx.shape(0)
        if xs is None:
            return [TensorType(ctx.dtype(0), None)]
        if len(xs) < 2:
            raise OpError(f"{self.op_type} needs an input of rank >= 2, got {len(xs)}")
        return [TensorType(ctx.dtype(0), (xs[0], xs[1], *([1] * (len(xs) - 2))))]

    def work(self, ctx: NodeContext) -> Work:
        """One accumulate (compare for GlobalMaxPool) per input element."""
        w = super().work(ctx)
        n = ctx.type(0).numel() or 0
        if self.op_type == "GlobalMaxPool":
            w.elem_ops = n
        else:
            w.macs = n
        return w


@register("GlobalAveragePool", since=1)
class GlobalAveragePoolSpec(_GlobalPool):
    """Mean over all spatial positions."""

    quant = ELEMENTWISE_QUANT

    doc = "Average over all spatial axes (keeps them as size 1)."

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Mean over the axes after the channel axis. Float32 planes are summed in float64, so
        the mean of a large plane rounds once, at the end (a float32 sum drifts with the plane's
        size; onnxruntime's integer QLinearGlobalAveragePool sums exactly): one compiled pass
        (nodes.direct_conv.plane_means_for) where this build has it, else numpy's float64 sum,
        the same bits. Measured in the fused plan of ppocr_cls (five 2 x 96 pools of 88-200
        planes): 0.20 -> about 0.10 ms per run (noisy in the model)."""
        # the two ufunc calls ndarray.mean makes (sum, then an in-place divide by the count as
        # np.intp), without its Python wrapper: ~1-2 us less per call, most of a small pool's cost
        axes = tuple(range(2, x.ndim))
        count = np.intp(prod(x.shape[2:]))
        if count == 0:
            return x.mean(axis=axes, keepdims=True, dtype=_acc_dtype(x.dtype)).astype(x.dtype, copy=False)
        if x.dtype == np.float32:
            key = ("gap", x.shape)
            means = ctx.cache.get(key, False)
            if means is False:  # worked out once per shape
                means = ctx.cache[key] = direct_conv.plane_means_for(x.shape, x.dtype)
            if means is not None and x.flags.c_contiguous:
                return means(x)
            s = np.add.reduce(x, axis=axes, dtype=np.float64, keepdims=True)
        else:
            s = np.add.reduce(x, axis=axes, dtype=_acc_dtype(x.dtype), keepdims=True)
        np.true_divide(s, count, out=s, casting="unsafe")
        return s.astype(x.dtype, copy=False)


@register("GlobalMaxPool", since=1)
class GlobalMaxPoolSpec(_GlobalPool):
    """Max over all spatial positions."""

    doc = "Max over all spatial axes (keeps them as size 1)."

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Max over the axes after the channel axis."""
        return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


@register("GlobalLpPool", since=1)
class GlobalLpPoolSpec(_GlobalPool):
    """Lp norm over all spatial positions."""

    doc = "Lp norm over all spatial axes (keeps them as size 1)."
    attrs = (AttrSpec("p", "int", 2, "Exponent of the norm."),)

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """(sum |x|^p)^(1/p) over the axes after the channel axis."""
        p = float(ctx.attrs.get("p", 2))
        xa = np.abs(x.astype(_acc_dtype(x.dtype), copy=False))
        s = (xa ** p).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
        return (s ** (1.0 / p)).astype(x.dtype, copy=False)


# -- MaxUnpool -----------------------------------------------------------------------------------

@register("MaxUnpool", since=9)
class MaxUnpoolSpec(OpSpec):
    """Scatter pooled maxima back to the positions MaxPool's Indices name; zeros elsewhere."""

    doc = "Partial inverse of MaxPool: values scattered to their Indices in a zero tensor."
    inputs = (Port("X"), Port("I", doc="int64 indices from MaxPool"),
              Port("output_shape", optional=True, doc="explicit output shape"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("kernel_shape", "ints", REQUIRED, "Window size of the original pool."),
             AttrSpec("pads", "ints", None, "Padding of the original pool."),
             AttrSpec("strides", "ints", None, "Strides of the original pool (default 1)."))

    def _default_shape(self, xs: Sequence[Dim], attrs: dict[str, Any]) -> list[Dim]:
        kernel = ints(attrs["kernel_shape"])
        n = len(xs) - 2
        strides = ints(attrs.get("strides")) or [1] * n
        pads = ints(attrs.get("pads")) or [0] * (2 * n)
        out: list[Dim] = [xs[0], xs[1]]
        for i in range(n):
            d = xs[2 + i]
            out.append((d - 1) * strides[i] + kernel[i] - pads[i] - pads[n + i] if isinstance(d, int) else None)
        return out

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """output_shape when known, else (in - 1) * stride + kernel - pads."""
        if ctx.has_input(2):
            c = ctx.const(2)
            if c is not None:
                return [TensorType(ctx.dtype(0), tuple(ints(c)))]
            s = ctx.shape(2)
            rank = s[0] if s is not None and isinstance(s[0], int) else None
            return [TensorType(ctx.dtype(0), None if rank is None else tuple([None] * rank))]
        xs = ctx.shape(0)
        if xs is None:
            return [TensorType(ctx.dtype(0), None)]
        return [TensorType(ctx.dtype(0), tuple(self._default_shape(xs, ctx.attrs)))]

    def reference(self, ctx: RunContext, x: np.ndarray, idx: np.ndarray,
                  output_shape: np.ndarray | None = None) -> np.ndarray:
        """Zero tensor of the output shape with X written at the flat Indices."""
        default = [int(d) for d in self._default_shape(x.shape, ctx.attrs)]  # type: ignore[arg-type]
        shape = ints(output_shape) if output_shape is not None else default
        flat = idx.reshape(-1).astype(np.int64)
        if shape != default:
            # indices address the tensor MaxPool saw (the default shape): re-address them
            try:
                coords = np.unravel_index(flat, default)
                flat = np.ravel_multi_index(coords, shape)
            except ValueError as exc:
                raise OpError(f"MaxUnpool: indices do not fit output_shape {shape}: {exc}") from None
        out = np.zeros(prod(shape), dtype=x.dtype)
        out[flat] = x.reshape(-1)
        return out.reshape(shape)


# -- region of interest pools -----------------------------------------------------------------------

@register("MaxRoiPool", since=1)
class MaxRoiPoolSpec(OpSpec):
    """Max over a grid of bins inside each region of interest (Fast R-CNN)."""

    doc = "ROI max pooling: (num_rois, C, pooled_h, pooled_w) from rois [batch, x1, y1, x2, y2]."
    inputs = (Port("X"), Port("rois", doc="(num_rois, 5): batch index, x1, y1, x2, y2"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("pooled_shape", "ints", REQUIRED, "Output bins (height, width)."),
             AttrSpec("spatial_scale", "float", 1.0, "Scale from roi coordinates to X's grid."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(num_rois, C, pooled_h, pooled_w)."""
        xs, rs = ctx.shape(0), ctx.shape(1)
        ph, pw = ints(ctx.attrs["pooled_shape"])
        return [TensorType(ctx.dtype(0), (rs[0] if rs is not None else None,
                                          xs[1] if xs is not None else None, ph, pw))]

    def reference(self, ctx: RunContext, x: np.ndarray, rois: np.ndarray) -> np.ndarray:
        """Per roi: row-bin maxima, then column-bin maxima (empty bins are 0)."""
        ph, pw = ints(ctx.attrs["pooled_shape"])
        scale = float(ctx.attrs.get("spatial_scale", 1.0))
        _, c, h, w = x.shape
        y = np.zeros((rois.shape[0], c, ph, pw), dtype=x.dtype)

        def rnd(v: float) -> int:
            return int(np.floor(v + 0.5)) if v >= 0 else -int(np.floor(-v + 0.5))

        for r, roi in enumerate(rois.astype(np.float64)):
            b = int(roi[0])
            x1, y1, x2, y2 = (rnd(v * scale) for v in roi[1:5])
            rh, rw = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
            bh, bw = rh / ph, rw / pw
            hs = [min(max(int(np.floor(i * bh)) + y1, 0), h) for i in range(ph)]
            he = [min(max(int(np.ceil((i + 1) * bh)) + y1, 0), h) for i in range(ph)]
            ws = [min(max(int(np.floor(j * bw)) + x1, 0), w) for j in range(pw)]
            we = [min(max(int(np.ceil((j + 1) * bw)) + x1, 0), w) for j in range(pw)]
            rows = np.full((c, ph, w), -np.inf, dtype=np.float64)
            for i in range(ph):
                if he[i] > hs[i]:
                    rows[:, i] = x[b, :, hs[i]:he[i]].max(axis=1)
            for j in range(pw):
                if we[j] > ws[j]:
                    y[r, :, :, j] = rows[:, :, ws[j]:we[j]].max(axis=2)
            empty = (np.array(he) <= np.array(hs))[:, None] | (np.array(we) <= np.array(ws))[None, :]
            y[r][:, empty] = 0
        return y


def _roi_axis_weights(start: float, bin_size: float, n_out: int, grid: int, size: int,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear corner indices and weights of every sample along one axis (RoiAlign rules)."""
    t = np.arange(n_out)[:, None] * bin_size + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    pos = (start + t).reshape(-1)
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.clip(pos, 0.0, None)
    low = np.floor(pos).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    pos = np.where(edge, low.astype(np.float64), pos)
    frac = pos - low
    w_low = np.where(valid, 1.0 - frac, 0.0)
    w_high = np.where(valid, frac, 0.0)
    return low, high, w_low, w_high


@register("RoiAlign", since=10)
class RoiAlignSpec(OpSpec):
    """Bilinearly sampled average/max pooling inside each region of interest (Mask R-CNN)."""

    doc = "ROI Align: (num_rois, C, output_height, output_width) from rois [x1, y1, x2, y2]."
    inputs = (Port("X"), Port("rois", doc="(num_rois, 4): x1, y1, x2, y2"),
              Port("batch_indices", doc="(num_rois,) int64"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("coordinate_transformation_mode", "string", "half_pixel",
                      "half_pixel shifts sample coordinates by -0.5; output_half_pixel does not.",
                      choices=("half_pixel", "output_half_pixel")),
             AttrSpec("mode", "string", "avg", "Pooling: avg or max.", choices=("avg", "max")),
             AttrSpec("output_height", "int", 1, "Output bins along height."),
             AttrSpec("output_width", "int", 1, "Output bins along width."),
             AttrSpec("sampling_ratio", "int", 0, "Samples per bin and axis (0: adaptive)."),
             AttrSpec("spatial_scale", "float", 1.0, "Scale from roi coordinates to X's grid."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(num_rois, C, output_height, output_width)."""
        xs, rs = ctx.shape(0), ctx.shape(1)
        return [TensorType(ctx.dtype(0), (rs[0] if rs is not None else None, xs[1] if xs is not None else None,
                                          int(ctx.attrs["output_height"]), int(ctx.attrs["output_width"])))]

    def reference(self, ctx: RunContext, x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray) -> np.ndarray:
        """Per roi: separable bilinear sampling on a grid of samples, then mean or max per bin."""
        a = ctx.attrs
        # opset 10 has no coordinate_transformation_mode: it behaves like output_half_pixel
        mode_attr = a.get("coordinate_transformation_mode", "half_pixel")
        half = mode_attr == "half_pixel" and ctx.opset >= 16
        oh, ow = int(a["output_height"]), int(a["output_width"])
        ratio, scale = int(a["sampling_ratio"]), float(a["spatial_scale"])
        is_max = a.get("mode", "avg") == "max"
        _, c, h, w = x.shape
        acc = _acc_dtype(x.dtype)
        y = np.zeros((rois.shape[0], c, oh, ow), dtype=acc)
        off = 0.5 if half else 0.0
        for r in range(rois.shape[0]):
            x1, y1, x2, y2 = (float(v) * scale - off for v in rois[r])
            rw, rh = x2 - x1, y2 - y1
            if not half:
                rw, rh = max(rw, 1.0), max(rh, 1.0)
            bh, bw = rh / oh, rw / ow
            gh = ratio if ratio > 0 else int(np.ceil(rh / oh))
            gw = ratio if ratio > 0 else int(np.ceil(rw / ow))
            gh, gw = max(gh, 1), max(gw, 1)
            yl, yh, wyl, wyh = _roi_axis_weights(y1, bh, oh, gh, h)
            xl, xh, wxl, wxh = _roi_axis_weights(x1, bw, ow, gw, w)
            img = x[int(batch_indices[r])].astype(acc, copy=False)
            if not is_max:
                ay = np.zeros((oh * gh, h), dtype=acc)
                np.add.at(ay, (np.arange(oh * gh), yl), wyl)
                np.add.at(ay, (np.arange(oh * gh), yh), wyh)
                ax = np.zeros((ow * gw, w), dtype=acc)
                np.add.at(ax, (np.arange(ow * gw), xl), wxl)
                np.add.at(ax, (np.arange(ow * gw), xh), wxh)
                s = ay @ img @ ax.T  # (C, oh*gh, ow*gw)
                y[r] = s.reshape(c, oh, gh, ow, gw).mean(axis=(2, 4))
            else:
                best = None
                for yi, wy in ((yl, wyl), (yh, wyh)):
                    for xi, wx in ((xl, wxl), (xh, wxh)):
                        v = img[:, yi[:, None], xi[None, :]] * (wy[:, None] * wx[None, :]).astype(acc)
                        best = v if best is None else np.maximum(best, v)
                y[r] = best.reshape(c, oh, gh, ow, gw).max(axis=(2, 4))  # type: ignore[union-attr]
        return y.astype(x.dtype, copy=False)
