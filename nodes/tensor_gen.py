"""Shape-family ops that create or re-lay tensors: Pad, Constant, ConstantOfShape, Range, Dropout,
EyeLike, Trilu, CenterCropPad and ReverseSequence (family ``shape_ops``)."""

from __future__ import annotations

import numpy as np

from nodes._util import norm_axis, prod
from nodes.registry import register
from nodes.shape_ops import shape_value
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, ints
from nodes.types import Dim, TensorType, np_dtype, tensor_to_array

FAMILY = "shape_ops"
BOOL = np.dtype(bool)


# -- Pad -----------------------------------------------------------------------------------------
def _pad_lists(pads: list[int], axes: list[int] | None, rank: int) -> tuple[list[int], list[int]]:
    ax = list(range(rank)) if axes is None else [norm_axis(a, rank) for a in axes]
    if len(pads) != 2 * len(ax):
        raise OpError(f"Pad: {len(pads)} pads for {len(ax)} axes (need {2 * len(ax)})")
    before, after = [0] * rank, [0] * rank
    for k, a in enumerate(ax):
        before[a], after[a] = pads[k], pads[k + len(ax)]
    return before, after


def _pad_attr(attrs: dict) -> list[int] | None:
    for key in ("pads", "paddings"):
        if attrs.get(key) is not None:
            return ints(attrs[key])
    return None


@register("Pad", since=1, family=FAMILY)
class Pad(OpSpec):
    """Pad with a constant, by reflection, by repeating the edge or by wrapping; negative pads crop.

    ``pads`` (begin values of every axis, then end values) is an attribute before opset 11 and an
    input after; ``axes`` (opset 18) restricts the axes the pads refer to.
    """

    doc = "Pad a tensor (constant, reflect, edge or wrap mode)."
    inputs = (Port("data"), Port("pads", optional=True), Port("constant_value", optional=True),
              Port("axes", optional=True))
    outputs = (Port("output"),)
    attrs = (AttrSpec("mode", "string", "constant", "", ("constant", "reflect", "edge", "wrap")),
             AttrSpec("pads", "ints", None, "opset < 11"),
             AttrSpec("value", "float", 0.0, "constant value (opset < 11)"),
             AttrSpec("paddings", "ints", None, "opset 1 name of pads"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Each dim grows by its pads."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        if shape is None:
            return [TensorType(dt)]
        if ctx.has_input(1):
            pads = ctx.const(1)
            axes = ctx.const(3)
            if pads is None or (ctx.has_input(3) and axes is None):
                return [TensorType(dt, (None,) * len(shape))]
            before, after = _pad_lists(ints(pads), ints(axes) if axes is not None else None, len(shape))
        else:
            p = _pad_attr(ctx.attrs)
            if p is None:
                raise OpError("Pad has no pads")
            before, after = _pad_lists(p, None, len(shape))
        out: list[Dim] = []
        for d, b, a in zip(shape, before, after):
            out.append(d + b + a if isinstance(d, int) else (d if b == a == 0 else None))
        return [TensorType(dt, tuple(out))]

    def reference(self, ctx: RunContext, data: np.ndarray, pads: np.ndarray | None = None,
                  constant_value: np.ndarray | None = None, axes: np.ndarray | None = None) -> np.ndarray:
        """Crop negative pads, then fill (constant) or use numpy pad modes."""
        if pads is None:
            p = _pad_attr(ctx.attrs)
            if p is None:
                raise OpError("Pad has no pads")
            value = ctx.attrs.get("value", 0.0)
        else:
            p = ints(pads)
            value = constant_value.reshape(-1)[0] if constant_value is not None and constant_value.size else 0
        before, after = _pad_lists(p, ints(axes) if axes is not None else None, data.ndim)
        if any(b < 0 for b in before) or any(a < 0 for a in after):
            data = data[tuple(slice(max(-b, 0), d - max(-a, 0)) for d, b, a in zip(data.shape, before, after))]
            before = [max(b, 0) for b in before]
            after = [max(a, 0) for a in after]
        mode = ctx.attrs.get("mode", "constant")
        if mode == "constant":
            shape = tuple(d + b + a for d, b, a in zip(data.shape, before, after))
            out = np.full(shape, value, dtype=data.dtype)
            out[tuple(slice(b, b + d) for b, d in zip(before, data.shape))] = data
            return out
        if mode not in ("reflect", "edge", "wrap"):
            raise OpError(f"Pad: unknown mode {mode!r}")
        return np.pad(data, list(zip(before, after)), mode=mode)


# -- Constant / ConstantOfShape ------------------------------------------------------------------
def _densify(sp: object) -> np.ndarray:
    values = tensor_to_array(sp.values)  # type: ignore[attr-defined]
    indices = tensor_to_array(sp.indices)  # type: ignore[attr-defined]
    dims = [int(d) for d in sp.dims]  # type: ignore[attr-defined]
    out = np.zeros(prod(dims), dtype=values.dtype)
    flat = indices if indices.ndim == 1 else np.ravel_multi_index(tuple(indices.T), dims)
    out[flat] = values.ravel()
    return out.reshape(dims)


def constant_value(attrs: dict) -> np.ndarray:
    """The tensor a Constant node holds, from whichever ``value*`` attribute is set."""
    if attrs.get("value") is not None:
        return np.asarray(attrs["value"])
    if attrs.get("sparse_value") is not None:
        return _densify(attrs["sparse_value"])
    if attrs.get("value_float") is not None:
        return np.array(attrs["value_float"], dtype=np.float32)
    if attrs.get("value_floats") is not None:
        return np.array(attrs["value_floats"], dtype=np.float32).reshape(-1)
    if attrs.get("value_int") is not None:
        return np.array(attrs["value_int"], dtype=np.int64)
    if attrs.get("value_ints") is not None:
        return np.array(attrs["value_ints"], dtype=np.int64).reshape(-1)
    if attrs.get("value_string") is not None:
        return np.array(attrs["value_string"], dtype=object)
    if attrs.get("value_strings") is not None:
        return np.array(list(attrs["value_strings"]), dtype=object).reshape(-1)
    raise OpError("Constant has no value attribute")


@register("Constant", since=1, family=FAMILY)
class Constant(OpSpec):
    """A constant tensor from one of the ``value*`` attributes."""

    doc = "A constant tensor."
    inputs = ()
    outputs = (Port("output"),)
    attrs = (AttrSpec("value", "tensor", None, "the tensor"),
             AttrSpec("sparse_value", "tensor", None, "a sparse tensor (opset >= 11)"),
             AttrSpec("value_float", "float", None, "a float32 scalar (opset >= 12)"),
             AttrSpec("value_floats", "floats", None, "a 1-D float32 tensor (opset >= 12)"),
             AttrSpec("value_int", "int", None, "an int64 scalar (opset >= 12)"),
             AttrSpec("value_ints", "ints", None, "a 1-D int64 tensor (opset >= 12)"),
             AttrSpec("value_string", "string", None, "a string scalar (opset >= 12)"),
             AttrSpec("value_strings", "strings", None, "a 1-D string tensor (opset >= 12)"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """The type of the held tensor."""
        return [TensorType.of(constant_value(ctx.attrs))]

    def static_value(self, ctx: NodeContext) -> list[np.ndarray | None] | None:
        """The held tensor (known before running)."""
        return [constant_value(ctx.attrs)]

    def reference(self, ctx: RunContext) -> np.ndarray:
        """The held tensor."""
        return constant_value(ctx.attrs)


def _fill_value(attrs: dict) -> np.ndarray:
    v = attrs.get("value")
    if v is None:
        return np.zeros((), dtype=np.float32)
    v = np.asarray(v)
    if v.size != 1:
        raise OpError(f"ConstantOfShape: value must hold one element, got {v.size}")
    return v.reshape(())


@register("ConstantOfShape", since=9, family=FAMILY)
class ConstantOfShape(OpSpec):
    """A tensor of the shape given by the input, filled with ``value`` (float32 0 by default)."""

    doc = "A tensor of a given shape filled with one value."
    inputs = (Port("input", doc="int64 shape"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("value", "tensor", None, "one-element tensor: fill value and dtype"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Shape from the (possibly symbolic) input value; dtype of value."""
        dt = _fill_value(ctx.attrs).dtype
        dims = shape_value(ctx, 0)
        if dims is not None:
            return [TensorType(dt, tuple(dims))]
        s = ctx.shape(0)
        if s is not None and len(s) == 1 and isinstance(s[0], int):
            return [TensorType(dt, (None,) * s[0])]
        return [TensorType(dt)]

    def reference(self, ctx: RunContext, shape: np.ndarray) -> np.ndarray:
        """numpy full."""
        v = _fill_value(ctx.attrs)
        return np.full(tuple(ints(shape)), v, dtype=v.dtype)


# -- Range ---------------------------------------------------------------------------------------
def _range_len(start: object, limit: object, delta: object) -> int:
    s, lim, d = (np.asarray(x).reshape(()) for x in (start, limit, delta))
    if s.dtype.kind in "iu":
        if int(d) == 0:
            raise OpError("Range: delta is 0")
        return max(0, -((int(s) - int(lim)) // int(d)))
    if float(d) == 0.0:
        raise OpError("Range: delta is 0")
    return max(0, int(np.ceil((float(lim) - float(s)) / float(d))))


@register("Range", since=11, family=FAMILY)
class Range(OpSpec):
    """``start + i * delta`` for i in [0, max(ceil((limit - start) / delta), 0))."""

    doc = "A 1-D sequence of evenly spaced numbers."
    inputs = (Port("start"), Port("limit"), Port("delta"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("stash_type", "int", 1, "float16/bfloat16 compute in float32 (opset >= 27)"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Length from known inputs (or a traced symbolic limit for 0..dim), else unknown."""
        vals = [ctx.const(i) for i in range(3)]
        n: Dim = None if any(v is None for v in vals) else _range_len(*vals)
        if n is None and vals[0] is not None and vals[2] is not None and float(vals[0]) == 0 and float(vals[2]) == 1:
            lim = shape_value(ctx, 1)  # Range(0, dim, 1) of a traced symbolic dim has that many entries
            n = lim[0] if lim is not None and len(lim) == 1 else None
        return [TensorType(ctx.dtype(0), (n,))]

    def reference(self, ctx: RunContext, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Computed as start + arange(n) * delta in the input dtype (float32 for 16-bit floats)."""
        n = _range_len(start, limit, delta)
        dt = np.asarray(start).dtype
        if dt.kind in "iu":
            return (int(start) + np.arange(n, dtype=np.int64) * int(delta)).astype(dt)
        work = np.dtype(np.float32) if dt.itemsize < 4 else dt
        s, d = np.asarray(start).astype(work), np.asarray(delta).astype(work)
        return (s + np.arange(n, dtype=work) * d).astype(dt)


# -- Dropout -------------------------------------------------------------------------------------
@register("Dropout", since=1, family=FAMILY)
class Dropout(OpSpec):
    """Identity in inference; in training mode (opset >= 12 input) zeroes a random ``ratio`` of
    the elements and scales the rest by 1 / (1 - ratio). Opsets < 7 are run as inference."""

    doc = "Dropout (an identity unless training_mode is set)."
    inputs = (Port("data"), Port("ratio", optional=True), Port("training_mode", optional=True))
    outputs = (Port("output"), Port("mask", optional=True))
    attrs = (AttrSpec("ratio", "float", 0.5, "drop probability (opset < 12)"),
             AttrSpec("is_test", "int", 0, "opset < 7"),
             AttrSpec("seed", "int", None, "random seed of training mode"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Output like the input; mask bool (input dtype before opset 10)."""
        t = ctx.type(0)
        mask_dt = BOOL if ctx.opset >= 10 else t.dtype
        return [t, TensorType(mask_dt, t.shape)][:len(ctx.node.outputs)]

    def reference(self, ctx: RunContext, x: np.ndarray, ratio: np.ndarray | None = None,
                  training_mode: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Identity plus an all-true mask, or a seeded random mask in training mode."""
        r = float(ratio) if ratio is not None else float(ctx.attrs.get("ratio", 0.5))
        training = bool(training_mode) if training_mode is not None else False
        mask_dt = BOOL if ctx.opset >= 10 else x.dtype
        if not training or r == 0.0:
            return x, np.ones(x.shape, dtype=mask_dt)
        seed = ctx.attrs.get("seed")
        rng = np.random.RandomState(int(seed)) if seed is not None else np.random.RandomState()
        mask = rng.uniform(0.0, 1.0, x.shape) >= r
        if r >= 1.0:
            return np.zeros_like(x), mask.astype(mask_dt)
        return (x * mask * np.asarray(1.0 / (1.0 - r), dtype=x.dtype)).astype(x.dtype), mask.astype(mask_dt)


# -- EyeLike / Trilu -----------------------------------------------------------------------------
@register("EyeLike", since=9, family=FAMILY)
class EyeLike(OpSpec):
    """A 2-D tensor shaped like the input with ones on the k-th diagonal."""

    doc = "Identity-like matrix of the input's shape."
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("dtype", "int", None, "ONNX element type of the output (default: input's)"),
             AttrSpec("k", "int", 0, "diagonal offset (positive: above the main diagonal)"))

    def _dtype(self, attrs: dict, default: np.dtype | None) -> np.dtype | None:
        return np_dtype(int(attrs["dtype"])) if attrs.get("dtype") is not None else default

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Input shape, chosen dtype."""
        shape = ctx.shape(0)
        if shape is not None and len(shape) != 2:
            raise OpError(f"EyeLike needs a 2-D input, got rank {len(shape)}")
        return [TensorType(self._dtype(ctx.attrs, ctx.dtype(0)), shape)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """numpy eye."""
        return np.eye(x.shape[0], x.shape[1], int(ctx.attrs.get("k", 0)), dtype=self._dtype(ctx.attrs, x.dtype))


@register("Trilu", since=14, family=FAMILY)
class Trilu(OpSpec):
    """Keep the upper (or lower) triangle of the last two dims from diagonal k; zero the rest."""

    doc = "Upper or lower triangular part of (batched) matrices."
    inputs = (Port("input"), Port("k", optional=True))
    outputs = (Port("output"),)
    attrs = (AttrSpec("upper", "int", 1, "1: upper triangle, 0: lower"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same as the input."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
        """numpy triu / tril."""
        kk = int(k) if k is not None else 0
        lim = x.shape[-1] + x.shape[-2] + 1 if x.ndim >= 2 else 1
        kk = min(max(kk, -lim), lim)
        return np.triu(x, kk) if ctx.attrs.get("upper", 1) else np.tril(x, kk)


# -- CenterCropPad / ReverseSequence -------------------------------------------------------------
@register("CenterCropPad", since=18, family=FAMILY)
class CenterCropPad(OpSpec):
    """Crop (window start rounded down) or zero-pad (extra pixel on the right) to a centred shape."""

    doc = "Center crop or pad the input to a shape."
    inputs = (Port("input_data"), Port("shape"))
    outputs = (Port("output_data"),)
    attrs = (AttrSpec("axes", "ints", None, "axes that shape refers to (default: all)"),)

    def _axes(self, attrs: dict, rank: int, n: int) -> list[int]:
        ax = attrs.get("axes")
        axes = list(range(rank)) if ax is None else [norm_axis(a, rank) for a in ints(ax)]
        if len(axes) != n:
            raise OpError(f"CenterCropPad: {n} sizes for {len(axes)} axes")
        return axes

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Target sizes on the chosen axes."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        if shape is None:
            return [TensorType(dt)]
        target = shape_value(ctx, 1)
        if target is None:
            return [TensorType(dt, (None,) * len(shape))]
        out = list(shape)
        for a, t in zip(self._axes(ctx.attrs, len(shape), len(target)), target):
            out[a] = t
        return [TensorType(dt, tuple(out))]

    def reference(self, ctx: RunContext, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        """Copy the overlapping centred window into a zero tensor."""
        target = ints(shape)
        out_shape = list(x.shape)
        src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        for a, t in zip(self._axes(ctx.attrs, x.ndim, len(target)), target):
            d = x.shape[a]
            out_shape[a] = t
            if t < d:
                s = (d - t) // 2
                src[a] = slice(s, s + t)
            elif t > d:
                s = (t - d) // 2
                dst[a] = slice(s, s + d)
        out = np.zeros(out_shape, dtype=x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return out


@register("ReverseSequence", since=10, family=FAMILY)
class ReverseSequence(OpSpec):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of each batch entry b."""

    doc = "Reverse variable-length sequences in a batch."
    inputs = (Port("input"), Port("sequence_lens"))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("batch_axis", "int", 1, "0 or 1"), AttrSpec("time_axis", "int", 0, "0 or 1"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same as the input."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """A gather along the time axis with per-batch reversed indices."""
        ta, ba = int(ctx.attrs.get("time_axis", 0)), int(ctx.attrs.get("batch_axis", 1))
        if {ta, ba} != {0, 1}:
            raise OpError(f"ReverseSequence: time_axis {ta} and batch_axis {ba} must be 0 and 1")
        t = np.arange(x.shape[ta])[:, None]
        ln = np.asarray(lens, dtype=np.int64).reshape(1, -1)
        src = np.where(t < ln, ln - 1 - t, t)  # (time, batch)
        if ta > ba:
            src = src.T
        idx = src.reshape(src.shape + (1,) * (x.ndim - 2))
        return np.take_along_axis(x, np.broadcast_to(idx, x.shape), axis=ta)
