"""Resize, Upsample and spatial rearrangement ops (DepthToSpace, SpaceToDepth).

Resize is separable: for every resized axis a small table of input indices and weights
(1 tap for nearest, 2 for linear, 4 for cubic, more with antialiasing) is built from the
coordinate transformation, and the axis is resampled with one gather and multiply-add per
tap over the whole tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nodes._util import norm_axis, repeat_last
from nodes.registry import register
from nodes.rules import resize_factor_limit
from nodes.spec import (
    REQUIRED,
    AttrSpec,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    QuantSpec,
    RunContext,
    ints,
)
from nodes.types import Dim, TensorType

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


# -- 1-D sampling tables -------------------------------------------------------------------------

def source_coords(in_len: int, out_len: int, scale: float, mode: str, roi: tuple[float, float] = (0.0, 1.0)
                  ) -> np.ndarray:
    """Input coordinate of every output position along one axis (``coordinate_transformation_mode``).

    The resized length in the formulas is ``in_len * scale``, which is fractional when the
    output size came from a scale that does not divide evenly (as in ONNX's definition).
    """
    i = np.arange(out_len, dtype=np.float64)
    length = in_len * scale
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (in_len * scale)
        offset = in_len / 2 * (1 - adjustment)
        return offset + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if length > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return i * (in_len - 1) / (length - 1) if length > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return i / scale
    if mode == "tf_half_pixel_for_nn":
        return (i + 0.5) / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if length > 1:
            return start * (in_len - 1) + i * (end - start) * (in_len - 1) / (length - 1)
        return np.full(out_len, 0.5 * (start + end) * (in_len - 1))
    raise OpError(f"unknown coordinate_transformation_mode {mode!r}")


def _nearest_index(x: np.ndarray, mode: str, scale: float) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    if mode == "simple":  # Resize-10 / Upsample: floor when enlarging, ceil when shrinking
        return np.floor(x) if scale >= 1 else np.ceil(x)
    raise OpError(f"unknown nearest_mode {mode!r}")


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def sampling_table(in_len: int, coords: np.ndarray, scale: float, mode: str, nearest_mode: str,
                   cubic_a: float, exclude_outside: bool, antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (out_len, taps): output j = sum_t w[j, t] * x[idx[j, t]]."""
    if mode == "nearest":
        idx = np.clip(_nearest_index(coords, nearest_mode, scale), 0, in_len - 1).astype(np.int64)
        return idx[:, None], np.ones((coords.size, 1))
    if mode not in ("linear", "cubic"):
        raise OpError(f"unknown Resize mode {mode!r}")
    support = 1.0 if mode == "linear" else 2.0
    stretch = min(scale, 1.0) if antialias else 1.0
    if stretch == 1.0 and mode == "linear":
        base = np.floor(coords)
        t = coords - base
        idx = base.astype(np.int64)[:, None] + np.arange(2)[None, :]
        w = np.stack([1 - t, t], axis=1)
        return np.clip(idx, 0, in_len - 1), w
    radius = support / stretch
    lo = np.floor(coords - radius).astype(np.int64)
    taps = int(np.ceil(2 * radius)) + 2
    if stretch == 1.0:  # plain cubic: the 4 taps around floor(x)
        lo = np.floor(coords).astype(np.int64) - 1
        taps = 4
    idx = lo[:, None] + np.arange(taps)[None, :]
    dist = (idx - coords[:, None]) * stretch
    w = 1 - np.abs(dist) if mode == "linear" else _cubic(dist, cubic_a)
    w = np.where(np.abs(dist) < support, w, 0.0)
    if exclude_outside:
        w = np.where((idx >= 0) & (idx < in_len), w, 0.0)
    if antialias or exclude_outside:
        total = w.sum(axis=1, keepdims=True)
        w = np.divide(w, total, out=np.zeros_like(w), where=total != 0)
    return np.clip(idx, 0, in_len - 1), w


def resample_axis(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Apply a sampling table along ``axis`` of ``x``."""
    if idx.shape[1] == 1 and np.all(w == 1):
        return np.take(x, idx[:, 0], axis=axis)
    shape = [1] * x.ndim
    shape[axis] = idx.shape[0]
    out = None
    for t in range(idx.shape[1]):
        wt = w[:, t]
        if not np.any(wt):
            continue
        term = np.take(x, idx[:, t], axis=axis)
        term *= wt.astype(x.dtype).reshape(shape)
        if out is None:
            out = term
        else:
            out += term
    if out is None:
        shape_out = list(x.shape)
        shape_out[axis] = idx.shape[0]
        return np.zeros(shape_out, dtype=x.dtype)
    return out


def _repeat_factors(shape: Sequence[int], out_sizes: Sequence[int], scales: Sequence[float], mode: str,
                    coord_mode: str, nearest_mode: str) -> list[int] | None:
    """Per axis the integer factor when nearest/asymmetric/floor resizing by whole scales is
    plain repetition (source index floor(o / s) = o // s; asymmetric coordinates ignore the
    roi), else None."""
    if mode != "nearest" or coord_mode != "asymmetric" or nearest_mode != "floor":
        return None
    out = []
    for n_in, n_out, sc in zip(shape, out_sizes, scales):
        f = int(sc)
        if f < 1 or f != sc or n_out != n_in * f:
            return None
        out.append(f)
    return out


def repeat_nearest(x: np.ndarray, factors: Sequence[int]) -> np.ndarray:
    """Every element repeated ``factors[axis]`` times along each axis: the nearest upsampling
    of feature pyramids. The last axis by np.repeat, the others in one copy of a broadcast view
    (whose inner loops are then whole rows: a broadcast repeat of the last axis copies runs of
    2 or 4 floats. (1, 96, 20, 20) by 4: 903 -> 223 us with np.repeat, 141 with repeat_last)."""
    if x.ndim and factors[-1] > 1:
        x = repeat_last(x, factors[-1])
        factors = [*factors[:-1], 1]
        if all(f == 1 for f in factors):
            return x
    view_shape: list[int] = []
    full_shape: list[int] = []
    for n, f in zip(x.shape, factors):
        view_shape += [n, 1]
        full_shape += [n, f]
    out = np.broadcast_to(x.reshape(view_shape), full_shape).reshape([n * f for n, f in zip(x.shape, factors)])
    return np.array(out, copy=True) if np.shares_memory(out, x) else out


def resize_nd(x: np.ndarray, out_sizes: Sequence[int], scales: Sequence[float], mode: str = "nearest",
              coord_mode: str = "half_pixel", nearest_mode: str = "round_prefer_floor", cubic_a: float = -0.75,
              exclude_outside: bool = False, extrapolation: float = 0.0, antialias: bool = False,
              roi: Sequence[tuple[float, float]] | None = None) -> np.ndarray:
    """Resize every axis of ``x`` to ``out_sizes`` (separable resampling)."""
    factors = _repeat_factors(x.shape, out_sizes, scales, mode, coord_mode, nearest_mode)
    if factors is not None:
        return repeat_nearest(x, factors)
    if mode == "nearest" or x.dtype in (np.float32, np.float64):
        y = x
    else:  # interpolate narrow floats and integers in float32
        y = x.astype(np.float32)
    outside = []
    crop = coord_mode == "tf_crop_and_resize"
    for ax, (n_in, n_out, sc) in enumerate(zip(x.shape, out_sizes, scales)):
        r = roi[ax] if roi is not None else (0.0, 1.0)
        if n_in == n_out and sc == 1.0 and (not crop or tuple(r) == (0.0, 1.0)):
            continue
        coords = source_coords(n_in, n_out, sc, coord_mode, r)
        idx, w = sampling_table(n_in, coords, sc, mode, nearest_mode, cubic_a, exclude_outside, antialias)
        y = resample_axis(y, ax, idx, w)
        if crop:
            bad = (coords < 0) | (coords > n_in - 1)
            if bad.any():
                shape = [1] * x.ndim
                shape[ax] = n_out
                outside.append(bad.reshape(shape))
    if outside:
        mask = np.logical_or.reduce(np.broadcast_arrays(*outside)) if len(outside) > 1 else outside[0]
        y = np.where(mask, np.asarray(extrapolation, dtype=y.dtype), y)
    if y is x:
        return x.copy()
    if y.dtype != x.dtype:
        if x.dtype.kind in "iu":  # like onnxruntime: truncate toward zero, saturate
            info = np.iinfo(x.dtype)
            y = np.clip(y, info.min, info.max)
        y = y.astype(x.dtype)
    return y


# -- Resize ---------------------------------------------------------------------------------------

def _round_half_up(v: float) -> int:
    return int(np.floor(v + 0.5))


class _ResizeParams:
    """Output sizes and per-axis scales/roi of one Resize node for a concrete input shape."""

    def __init__(self, shape: Sequence[int], attrs: dict[str, Any], opset: int, roi: np.ndarray | None,
                 scales: np.ndarray | None, sizes: np.ndarray | None) -> None:
        rank = len(shape)
        axes = [norm_axis(a, rank) for a in ints(attrs.get("axes"))] if opset >= 18 and attrs.get("axes") else \
            list(range(rank))
        coord = attrs.get("coordinate_transformation_mode", "half_pixel") if opset >= 11 else "asymmetric"
        self.coord = coord
        self.roi: list[tuple[float, float]] = [(0.0, 1.0)] * rank
        if roi is not None and roi.size and coord == "tf_crop_and_resize":
            r = np.asarray(roi, dtype=np.float64).reshape(-1)
            if r.size != 2 * len(axes):
                raise OpError(f"Resize: roi has {r.size} values, expected {2 * len(axes)}")
            for k, a in enumerate(axes):
                self.roi[a] = (float(r[k]), float(r[len(axes) + k]))
        self.scales = [1.0] * rank
        self.sizes = list(shape)
        if sizes is not None and sizes.size:
            sz = ints(sizes)
            if len(sz) != len(axes):
                raise OpError(f"Resize: sizes has {len(sz)} values for {len(axes)} axes")
            policy = attrs.get("keep_aspect_ratio_policy", "stretch") if opset >= 18 else "stretch"
            if policy == "stretch":
                for a, s in zip(axes, sz):
                    self.sizes[a] = s
                    self.scales[a] = s / shape[a]
            elif policy in ("not_larger", "not_smaller"):
                ratios = [s / shape[a] for a, s in zip(axes, sz)]
                common = min(ratios) if policy == "not_larger" else max(ratios)
                for a in axes:
                    self.sizes[a] = _round_half_up(common * shape[a])
                    self.scales[a] = common
            else:
                raise OpError(f"unknown keep_aspect_ratio_policy {policy!r}")
        elif scales is not None and scales.size:
            sc = [float(v) for v in np.asarray(scales, dtype=np.float32).reshape(-1)]
            if len(sc) != len(axes):
                raise OpError(f"Resize: scales has {len(sc)} values for {len(axes)} axes")
            for a, s in zip(axes, sc):
                if s <= 0:
                    raise OpError(f"Resize: scales must be positive, got {sc}")
                self.scales[a] = s
                # like onnxruntime and onnx's reference: the roi does not change the size
                self.sizes[a] = int(np.floor(shape[a] * s + 1e-9))
        else:
            raise OpError("Resize needs either scales or sizes")


@register("Resize", since=10)
class ResizeSpec(OpSpec):
    """Resample a tensor with nearest, (multi-)linear or cubic interpolation."""

    quant = QuantSpec("elementwise", float_inputs=frozenset({1, 2, 3}))  # roi, scales, sizes
    rules = (resize_factor_limit,)

    doc = "Resize by scales or to sizes (nearest/linear/cubic, every coordinate mode, antialias)."
    inputs = (Port("X"), Port("roi", optional=True, doc="crop box for tf_crop_and_resize (opset 11+)"),
              Port("scales", optional=True, doc="per-axis scale (the 2nd input in opset 10)"),
              Port("sizes", optional=True, doc="per-axis output size"))
    outputs = (Port("Y"),)
    attrs = (
        AttrSpec("antialias", "int", 0, "Antialiasing filter when downscaling (linear/cubic)."),
        AttrSpec("axes", "ints", None, "Axes that roi/scales/sizes refer to (default: all)."),
        AttrSpec("coordinate_transformation_mode", "string", "half_pixel",
                 "How output coordinates map to input coordinates.", choices=COORD_MODES),
        AttrSpec("cubic_coeff_a", "float", -0.75, "Coefficient of the cubic kernel."),
        AttrSpec("exclude_outside", "int", 0, "Zero the weights of samples outside the input."),
        AttrSpec("extrapolation_value", "float", 0.0, "Value outside the input (tf_crop_and_resize)."),
        AttrSpec("keep_aspect_ratio_policy", "string", "stretch", "How `sizes` keeps the aspect ratio.",
                 choices=("stretch", "not_larger", "not_smaller")),
        AttrSpec("mode", "string", "nearest", "Interpolation: nearest, linear or cubic.",
                 choices=("nearest", "linear", "cubic")),
        AttrSpec("nearest_mode", "string", "round_prefer_floor", "Rounding of nearest mode.",
                 choices=NEAREST_MODES),
    )

    @staticmethod
    def _split(opset: int, inputs: Sequence[Any]) -> tuple[Any, Any, Any]:
        """(roi, scales, sizes) from the op's inputs after X for the given opset."""
        rest = list(inputs) + [None] * 3
        if opset < 11:
            return None, rest[0], None
        return rest[0], rest[1], rest[2]

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Output sizes when scales/sizes are constant; otherwise the rank with unknown dims."""
        xs = ctx.shape(0)
        consts = [ctx.const(i) for i in range(1, ctx.n_inputs)]
        roi, scales, sizes = self._split(ctx.opset, consts)
        if xs is None:
            return [TensorType(ctx.dtype(0), None)]
        rank = len(xs)
        axes = set(range(rank))
        if ctx.opset >= 18 and ctx.attrs.get("axes"):
            axes = {norm_axis(a, rank) for a in ints(ctx.attrs["axes"])}
        has_scales = scales is not None and scales.size > 0
        has_sizes = sizes is not None and sizes.size > 0
        idx = self._split(ctx.opset, list(range(1, ctx.n_inputs)))
        pending = [i for i, c in zip(idx, (roi, scales, sizes)) if i is not None and ctx.has_input(i) and c is None]
        if not (has_scales or has_sizes) or pending:
            # sizes known only at run time: the axes outside ``axes`` keep their dims
            return [TensorType(ctx.dtype(0), tuple(None if i in axes else d for i, d in enumerate(xs)))]
        p = _ResizeParams([d if isinstance(d, int) else 1 for d in xs], ctx.attrs, ctx.opset, roi, scales, sizes)
        policy = ctx.attrs.get("keep_aspect_ratio_policy", "stretch") if ctx.opset >= 18 else "stretch"
        symbolic_resized = any(not isinstance(xs[i], int) for i in axes)
        out: list[Dim] = []
        for i, d in enumerate(xs):
            if i not in axes:
                out.append(d)
            elif has_sizes and policy != "stretch" and symbolic_resized:
                out.append(None)  # the common ratio depends on an unknown dim
            elif isinstance(d, int) or has_sizes:
                out.append(p.sizes[i])
            else:
                out.append(d if p.scales[i] == 1.0 else None)
        return [TensorType(ctx.dtype(0), tuple(out))]

    def reference(self, ctx: RunContext, x: np.ndarray, *rest: np.ndarray | None) -> np.ndarray:
        """Separable resampling of every resized axis."""
        a = ctx.attrs
        roi, scales, sizes = self._split(ctx.opset, rest)
        p = _ResizeParams(x.shape, a, ctx.opset, roi, scales, sizes)
        if ctx.opset < 11:
            mode = a.get("mode", "nearest")
            return resize_nd(x, p.sizes, p.scales, mode, "asymmetric", "simple")
        return resize_nd(
            x, p.sizes, p.scales, a.get("mode", "nearest"), p.coord, a.get("nearest_mode", "round_prefer_floor"),
            float(a.get("cubic_coeff_a", -0.75)), bool(a.get("exclude_outside", 0)),
            float(a.get("extrapolation_value", 0.0)), bool(a.get("antialias", 0)) and ctx.opset >= 18, p.roi)


@register("Upsample", since=7)
class UpsampleSpec(OpSpec):
    """Upsample by per-axis scales (deprecated predecessor of Resize)."""

    doc = "Upsample by scales with nearest or (bi)linear interpolation (asymmetric coordinates)."
    inputs = (Port("X"), Port("scales", optional=True, doc="per-axis scale (opset 9+)"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("mode", "string", "nearest", "nearest, linear or bilinear.",
                      choices=("nearest", "linear", "bilinear")),
             AttrSpec("scales", "floats", None, "Per-axis scale (opset 7-8)."))

    def _scales(self, ctx: NodeContext | RunContext, value: np.ndarray | None) -> list[float] | None:
        if value is not None:
            return [float(v) for v in np.asarray(value, dtype=np.float32).reshape(-1)]
        s = ctx.attrs.get("scales")
        return [float(v) for v in s] if s else None

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """floor(in * scale) per axis when the scales are known."""
        xs = ctx.shape(0)
        sc = self._scales(ctx, ctx.const(1) if ctx.has_input(1) else None)
        if xs is None:
            return [TensorType(ctx.dtype(0), None)]
        if sc is None or (ctx.has_input(1) and ctx.const(1) is None):
            return [TensorType(ctx.dtype(0), tuple(None for _ in xs))]
        if len(sc) != len(xs):
            raise OpError(f"Upsample: {len(sc)} scales for rank {len(xs)}")
        return [TensorType(ctx.dtype(0), tuple(int(np.floor(d * s + 1e-9)) if isinstance(d, int) else
                                               (d if s == 1 else None) for d, s in zip(xs, sc)))]

    def reference(self, ctx: RunContext, x: np.ndarray, scales: np.ndarray | None = None) -> np.ndarray:
        """Nearest (floor) or linear interpolation with asymmetric coordinates."""
        sc = self._scales(ctx, scales)
        if sc is None or len(sc) != x.ndim:
            raise OpError(f"Upsample needs one scale per axis, got {sc}")
        sizes = [int(np.floor(d * s + 1e-9)) for d, s in zip(x.shape, sc)]
        mode = ctx.attrs.get("mode", "nearest")
        return resize_nd(x, sizes, sc, "linear" if mode == "bilinear" else mode, "asymmetric", "simple")


# -- DepthToSpace / SpaceToDepth ----------------------------------------------------------------------

def _block_infer(ctx: NodeContext, to_space: bool) -> list[TensorType]:
    xs = ctx.shape(0)
    b = int(ctx.attrs["blocksize"])
    if b < 1:
        raise OpError(f"blocksize must be >= 1, got {b}")
    if xs is None:
        return [TensorType(ctx.dtype(0), None)]
    if len(xs) != 4:
        raise OpError(f"{ctx.spec.op_type} needs a rank-4 (N, C, H, W) input, got rank {len(xs)}")
    n, c, h, w = xs

    def mul(d: Dim, f: int) -> Dim:
        return d * f if isinstance(d, int) else (d if f == 1 else None)

    def div(d: Dim, f: int, what: str) -> Dim:
        if isinstance(d, int):
            if d % f:
                raise OpError(f"{what} {d} is not divisible by {f}")
            return d // f
        return d if f == 1 else None

    if to_space:
        return [TensorType(ctx.dtype(0), (n, div(c, b * b, "channels"), mul(h, b), mul(w, b)))]
    return [TensorType(ctx.dtype(0), (n, mul(c, b * b), div(h, b, "height"), div(w, b, "width")))]


_BLOCK_ATTRS = (AttrSpec("blocksize", "int", REQUIRED, "Block edge length."),
                AttrSpec("mode", "string", "DCR", "DCR (depth-column-row) or CRD.", choices=("DCR", "CRD")))


@register("DepthToSpace", since=1)
class DepthToSpaceSpec(OpSpec):
    """Move channel blocks into spatial blocks (pixel shuffle)."""

    doc = "Rearrange (N, C*b*b, H, W) into (N, C, H*b, W*b); DCR or CRD ordering."
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = _BLOCK_ATTRS

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, C / b^2, H * b, W * b)."""
        return _block_infer(ctx, True)

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Reshape, transpose, reshape."""
        b = int(ctx.attrs["blocksize"])
        n, c, h, w = x.shape
        if c % (b * b):
            raise OpError(f"DepthToSpace: {c} channels are not divisible by {b * b}")
        if ctx.attrs.get("mode", "DCR") == "CRD":
            t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        return t.reshape(n, c // (b * b), h * b, w * b)


@register("SpaceToDepth", since=1)
class SpaceToDepthSpec(OpSpec):
    """Move spatial blocks into channels (inverse of DepthToSpace)."""

    doc = "Rearrange (N, C, H, W) into (N, C*b*b, H/b, W/b); DCR or CRD ordering (mode: opset 28)."
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = _BLOCK_ATTRS

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, C * b^2, H / b, W / b)."""
        return _block_infer(ctx, False)

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Reshape, transpose, reshape."""
        b = int(ctx.attrs["blocksize"])
        n, c, h, w = x.shape
        if h % b or w % b:
            raise OpError(f"SpaceToDepth: spatial size {h}x{w} is not divisible by {b}")
        t = x.reshape(n, c, h // b, b, w // b, b)
        if ctx.attrs.get("mode", "DCR") == "CRD":
            t = t.transpose(0, 1, 3, 5, 2, 4)
        else:
            t = t.transpose(0, 3, 5, 1, 2, 4)
        return t.reshape(n, c * b * b, h // b, w // b)
