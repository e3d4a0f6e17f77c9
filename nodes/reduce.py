"""Reduce ops: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare.

``axes`` is an attribute before opset 13 (ReduceSum) or 18 (the others) and an optional input
after. Without axes every axis is reduced, unless ``noop_with_empty_axes`` is set: then only the
element-wise part of the op runs (ReduceSumSquare squares, ReduceLogSum takes the log).
Reductions over an empty set give the op's identity: 0 for sums, 1 for products, -inf for max
and log-sums, +inf for min (the integer extremes for integer types), NaN for the mean.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nodes._util import norm_axis
from nodes.registry import register_spec
from nodes.rules import REDUCE_RULES
from nodes.shape_ops import axes_input, run_axes
from nodes.spec import AttrSpec, FnSpec, NodeContext, Port, RunContext, Work
from nodes.types import TensorType

Kernel = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def _extreme(dt: np.dtype, high: bool) -> object:
    if dt.kind == "b":
        return high
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return info.max if high else info.min
    return np.inf if high else -np.inf


def _is_empty(x: np.ndarray, axes: tuple[int, ...]) -> bool:
    return any(x.shape[a] == 0 for a in axes)


def _float(x: np.ndarray) -> np.ndarray:
    """The input in a float type for transcendental math (float32 for 16-bit and int inputs)."""
    if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
        return x
    return x.astype(np.float64 if x.dtype.kind in "iub" else np.float32)


def _sum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.sum(x, axis=axes, keepdims=keep)


def _mean(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if _is_empty(x, axes):  # 0 / 0, without numpy's "mean of empty slice" warning
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sum(x, axis=axes, keepdims=keep, dtype=np.float64) / 0.0
    if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
        return np.mean(x, axis=axes, keepdims=keep)
    return np.mean(x, axis=axes, keepdims=keep, dtype=np.float64)


def _max(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if _is_empty(x, axes):
        return np.max(x, axis=axes, keepdims=keep, initial=_extreme(x.dtype, False))
    return np.max(x, axis=axes, keepdims=keep)


def _min(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    if _is_empty(x, axes):
        return np.min(x, axis=axes, keepdims=keep, initial=_extreme(x.dtype, True))
    return np.min(x, axis=axes, keepdims=keep)


def _prod(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.prod(x, axis=axes, keepdims=keep)


def _l1(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.sum(np.abs(x), axis=axes, keepdims=keep)


def _l2(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    xf = _float(x)
    return np.sqrt(np.sum(xf * xf, axis=axes, keepdims=keep))


def _sum_square(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    return np.sum(x * x, axis=axes, keepdims=keep)


def _log_sum(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.sum(_float(x), axis=axes, keepdims=keep))


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    xf = _float(x)
    if not axes:
        return xf
    if _is_empty(x, axes):
        return np.full(tuple(1 if k in axes else d for k, d in enumerate(x.shape) if keep or k not in axes),
                       -np.inf, dtype=xf.dtype)
    m = np.max(xf, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0).astype(xf.dtype, copy=False)
    out = np.log(np.sum(np.exp(xf - m), axis=axes, keepdims=True)) + m
    return out if keep else np.squeeze(out, axis=axes)


class ReduceSpec(FnSpec):
    """A reduction over ``axes`` computed by ``fn(x, axes, keepdims)``."""

    family = "reduce"
    inputs = (Port("data"), Port("axes", optional=True, doc="int64 axes (input form)"))
    outputs = (Port("reduced"),)
    attrs = (AttrSpec("axes", "ints", None, "axes to reduce (attribute form, older opsets)"),
             AttrSpec("keepdims", "int", 1, "keep reduced axes as size 1"),
             AttrSpec("noop_with_empty_axes", "int", 0, "1: no axes means no reduction (input form)"))

    rules = REDUCE_RULES

    def __init__(self, op_type: str, kernel: Kernel, axes_input_since: int, doc: str) -> None:
        """One Reduce* op; ``axes_input_since`` is the opset where axes became an input."""
        self.axes_input_since = axes_input_since
        super().__init__(op_type, kernel, 1, doc)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Reduced axes become 1 (keepdims) or disappear; ranks only when axes are unknown."""
        shape, dt = ctx.shape(0), ctx.dtype(0)
        keep = bool(ctx.attrs["keepdims"])
        known, axes = axes_input(ctx, 1, "axes", self.axes_input_since)
        if shape is None:
            return [TensorType(dt)]
        r = len(shape)
        if not known:
            if keep:
                return [TensorType(dt, (None,) * r)]
            n = ctx.shape(1)
            if n is not None and len(n) == 1 and isinstance(n[0], int):
                return [TensorType(dt, (None,) * (r - n[0]))]
            return [TensorType(dt)]
        if not axes:
            if ctx.attrs["noop_with_empty_axes"]:
                return [TensorType(dt, tuple(shape))]
            red = set(range(r))
        else:
            red = {norm_axis(a, r) for a in axes}
        if keep:
            return [TensorType(dt, tuple(1 if k in red else d for k, d in enumerate(shape)))]
        return [TensorType(dt, tuple(d for k, d in enumerate(shape) if k not in red))]

    def reference(self, ctx: RunContext, data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
        """The kernel over the resolved axes, cast back to the input dtype."""
        ax = run_axes(ctx, axes, "axes")
        if not ax:
            red: tuple[int, ...] = () if ctx.attrs.get("noop_with_empty_axes", 0) else tuple(range(data.ndim))
        else:
            red = tuple(sorted({norm_axis(a, data.ndim) for a in ax}))
        out = self.fn(data, red, bool(ctx.attrs.get("keepdims", 1)))
        return np.asarray(out).astype(data.dtype, copy=False)

    def work(self, ctx: NodeContext) -> Work:
        """One element op per input element."""
        w = super().work(ctx)
        w.elem_ops = ctx.type(0).numel() or w.elem_ops
        return w


for _name, _kernel, _since, _doc in (
    ("ReduceSum", _sum, 13, "Sum over axes."),
    ("ReduceMean", _mean, 18, "Mean over axes."),
    ("ReduceMax", _max, 18, "Maximum over axes (-inf for an empty set)."),
    ("ReduceMin", _min, 18, "Minimum over axes (+inf for an empty set)."),
    ("ReduceProd", _prod, 18, "Product over axes."),
    ("ReduceL1", _l1, 18, "Sum of absolute values over axes."),
    ("ReduceL2", _l2, 18, "Square root of the sum of squares over axes."),
    ("ReduceLogSum", _log_sum, 18, "Log of the sum over axes."),
    ("ReduceLogSumExp", _log_sum_exp, 18, "Log of the sum of exponentials over axes (stable)."),
    ("ReduceSumSquare", _sum_square, 18, "Sum of squares over axes."),
):
    register_spec(ReduceSpec(_name, _kernel, _since, _doc))
