"""Activation ops: pointwise nonlinearities and the Softmax / LogSoftmax / Hardmax family.

Low-precision float inputs (float16, bfloat16) are computed in float32 and cast back, so the
output keeps the input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nodes._util import broadcast_shapes, norm_axis
from nodes.elementwise import erf, is_low_float
from nodes.kernels import compiled_float, gelu32_, hard_sigmoid_, hard_swish_, logistic32_, relu_
from nodes.registry import register, register_spec
from nodes.spec import (
    ELEMENTWISE_QUANT,
    AttrSpec,
    FnSpec,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    QuantSpec,
    RunContext,
)
from nodes.types import TensorType

Fn = Callable[[np.ndarray, dict[str, Any]], np.ndarray]


def _scalar(x: np.ndarray, v: float) -> Any:
    """``v`` as a scalar of x's dtype (keeps float32 math in float32)."""
    return x.dtype.type(v)


def sigmoid_chain(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) as numpy ops (negative, exp, + 1, reciprocal) into ``out`` (may be ``x``)."""
    np.negative(x, out=out)
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    out += 1
    return np.reciprocal(out, out=out)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function of a float32/float64 array, overflow-safe (C-contiguous float32: one
    compiled pass, nodes.kernels.logistic32_)."""
    if x.dtype == np.float32 and compiled_float(x):
        return logistic32_(x)
    return sigmoid_chain(x, np.empty_like(x))


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) computed without overflow."""
    return np.logaddexp(_scalar(x, 0.0), x)


def _relu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return relu_(x) if compiled_float(x) else np.maximum(x, _scalar(x, 0))


def _leaky_relu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    alpha = float(a["alpha"])
    y = x * _scalar(x, alpha)
    if 0.0 <= alpha <= 1.0:  # max(x, alpha*x) picks alpha*x exactly for x < 0
        return np.maximum(x, y, out=y)
    return np.where(x < 0, y, x)


def _hard_sigmoid(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if compiled_float(x):
        return hard_sigmoid_(x, a["alpha"], a["beta"])
    y = x * _scalar(x, a["alpha"])
    y += _scalar(x, a["beta"])
    return np.clip(y, 0, 1, out=y)


def _hard_swish(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if compiled_float(x):  # one compiled pass instead of four numpy ones
        return hard_swish_(x)
    y = x * _scalar(x, 1.0 / 6.0)
    y += _scalar(x, 0.5)
    np.clip(y, 0, 1, out=y)
    y *= x
    return y


def _elu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return np.where(x < 0, _scalar(x, a["alpha"]) * np.expm1(np.minimum(x, 0)), x)


def _selu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    alpha, gamma = _scalar(x, a["alpha"]), _scalar(x, a["gamma"])
    return gamma * np.where(x <= 0, alpha * np.expm1(np.minimum(x, 0)), x)


def _celu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    alpha = _scalar(x, a["alpha"])
    neg = alpha * np.expm1(np.minimum(x, 0) / alpha)
    return np.maximum(x, 0) + np.minimum(neg, 0)


def _softsign(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    d = np.abs(x)
    d += 1
    return x / d


def _gelu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    mode = str(a["approximate"])
    if mode == "tanh":
        inner = x * x
        inner *= _scalar(x, 0.044715)
        inner += 1
        inner *= x
        inner *= _scalar(x, math.sqrt(2.0 / math.pi))
        t = np.tanh(inner, out=inner)
    elif mode == "none":
        if x.dtype == np.float32 and x.flags.c_contiguous:
            return gelu32_(x)
        t = erf(x * _scalar(x, 1.0 / math.sqrt(2.0)))
    else:
        raise OpError(f"Gelu approximate must be 'none' or 'tanh', got {mode!r}")
    t += 1
    t *= x
    t *= _scalar(x, 0.5)
    return t


def _mish(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return x * np.tanh(softplus(x))


def _thresholded_relu(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return np.where(x > _scalar(x, a["alpha"]), x, _scalar(x, 0))


def _shrink(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    lambd, bias = float(a["lambd"]), float(a["bias"])
    if x.dtype.kind in "iu":
        xf = x.astype(np.float64)
        out = np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0.0))
        return out.astype(x.dtype)
    lam, b = _scalar(x, lambd), _scalar(x, bias)
    return np.where(x < -lam, x + b, np.where(x > lam, x - b, _scalar(x, 0)))


def _swish(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    return x * sigmoid(x * _scalar(x, a["alpha"]))


def _sigmoid_in_place(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if x.dtype == np.float32 and compiled_float(x):
        return logistic32_(x, out=x)
    return sigmoid_chain(x, x)


def _hard_sigmoid_in_place(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    if x.flags.c_contiguous:
        return hard_sigmoid_(x, a["alpha"], a["beta"], out=x)
    x *= _scalar(x, a["alpha"])
    x += _scalar(x, a["beta"])
    return np.clip(x, 0, 1, out=x)


_IN_PLACE: dict[str, Fn] = {
    "Relu": lambda x, a: relu_(x, out=x) if x.flags.c_contiguous else np.maximum(x, _scalar(x, 0), out=x),
    "Tanh": lambda x, a: np.tanh(x, out=x),
    "Sigmoid": _sigmoid_in_place,
    "HardSigmoid": _hard_sigmoid_in_place,
    "HardSwish": lambda x, a: hard_swish_(x, out=x) if x.flags.c_contiguous else _hard_swish(x, a),
}
"""Activations that write into their input when the executor donates it (same results as fn)."""

_COMPILED_IN_PLACE = {"Relu": None, "HardSwish": None, "HardSigmoid": None, "Sigmoid": np.dtype(np.float32)}
"""In-place activations that run a compiled kernel on a C-contiguous input (of this dtype where
one is named): no numpy warning to silence, so no np.errstate (~1.2 us a step)."""


class PointwiseSpec(FnSpec):
    """An activation applied elementwise: fn(x, attrs); the output has the input's type."""

    family = "activation"
    inputs = (Port("X"),)
    outputs = (Port("Y"),)

    def __init__(self, op_type: str, fn: Fn, since: int, attrs: tuple[AttrSpec, ...] = (), doc: str = "",
                 int_ok: bool = False) -> None:
        self.int_ok = int_ok
        self.in_place = _IN_PLACE.get(op_type)  # fn(x) writing into x, for a donated float input
        self.inplace = self.in_place is not None
        super().__init__(op_type, fn, since, doc, attrs)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input."""
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Apply the function; low floats (and ints for float-only ops) go through float32."""
        dt = x.dtype
        if ctx.donate == 0 and dt in (np.float32, np.float64) and x.ndim > 0:
            if self.op_type in _COMPILED_IN_PLACE and x.flags.c_contiguous and _COMPILED_IN_PLACE[self.op_type] in (None, dt):
                return self.in_place(x, ctx.attrs)  # type: ignore[misc]
            with np.errstate(all="ignore"):
                return self.in_place(x, ctx.attrs)  # type: ignore[misc]
        if is_low_float(dt) or (dt.kind in "biu" and not self.int_ok):
            xc = x.astype(np.float32)
        else:
            xc = x
        if xc.ndim == 0:  # numpy ufuncs turn 0-d arrays into scalars; work on a 1-element view
            xc = xc.reshape(1)
        with np.errstate(all="ignore"):
            out = np.asarray(self.fn(xc, ctx.attrs)).reshape(x.shape)
        return out if out.dtype == dt else out.astype(dt)


_F = "float"
_POINTWISE: tuple[tuple[str, Fn, int, tuple[AttrSpec, ...], str, bool], ...] = (
    ("Relu", _relu, 14, (), "max(x, 0).", True),
    ("LeakyRelu", _leaky_relu, 16, (AttrSpec("alpha", _F, 0.01, "slope for x < 0"),),
     "x for x >= 0, alpha * x otherwise.", False),
    ("Sigmoid", lambda x, a: sigmoid(x), 13, (), "1 / (1 + exp(-x)).", False),
    ("HardSigmoid", _hard_sigmoid, 22, (AttrSpec("alpha", _F, 0.2, "slope"), AttrSpec("beta", _F, 0.5, "offset")),
     "max(0, min(1, alpha * x + beta)).", False),
    ("HardSwish", _hard_swish, 22, (), "x * max(0, min(1, x / 6 + 0.5)).", False),
    ("Tanh", lambda x, a: np.tanh(x), 13, (), "Hyperbolic tangent.", False),
    ("Elu", _elu, 22, (AttrSpec("alpha", _F, 1.0, "scale of the negative part"),),
     "x for x >= 0, alpha * (exp(x) - 1) otherwise.", False),
    ("Selu", _selu, 22, (AttrSpec("alpha", _F, 1.67326319217681884765625, "negative-part scale"),
                         AttrSpec("gamma", _F, 1.05070102519989013671875, "output scale")),
     "gamma * (x for x > 0, alpha * (exp(x) - 1) otherwise).", False),
    ("Celu", _celu, 12, (AttrSpec("alpha", _F, 1.0, "shape of the negative part"),),
     "max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).", False),
    ("Softplus", lambda x, a: softplus(x), 22, (), "log(1 + exp(x)).", False),
    ("Softsign", _softsign, 22, (), "x / (1 + |x|).", False),
    ("Gelu", _gelu, 20, (AttrSpec("approximate", "string", "none", "none (erf) or tanh", ("none", "tanh")),),
     "Gaussian error linear unit: x * Phi(x), exact (erf) or tanh approximation.", False),
    ("Mish", _mish, 22, (), "x * tanh(softplus(x)).", False),
    ("ThresholdedRelu", _thresholded_relu, 22, (AttrSpec("alpha", _F, 1.0, "threshold"),),
     "x for x > alpha, 0 otherwise.", False),
    ("Shrink", _shrink, 9, (AttrSpec("bias", _F, 0.0, "shift toward zero"), AttrSpec("lambd", _F, 0.5, "dead zone")),
     "x + bias for x < -lambd, x - bias for x > lambd, 0 otherwise.", True),
    ("Swish", _swish, 24, (AttrSpec("alpha", _F, 1.0, "sigmoid input scale"),), "x * sigmoid(alpha * x).", False),
)

# Activations an integer NPU runs on quantized tensors (a LUT or a fixed-point kernel); Relu
# also runs as the epilogue of the compute op before it.
_INT8_ACTIVATIONS = {"Relu": QuantSpec("elementwise", epilogue=True), "LeakyRelu": ELEMENTWISE_QUANT,
                     "Sigmoid": ELEMENTWISE_QUANT, "HardSigmoid": ELEMENTWISE_QUANT,
                     "HardSwish": ELEMENTWISE_QUANT, "Tanh": ELEMENTWISE_QUANT, "Gelu": ELEMENTWISE_QUANT}

for _name, _fn, _since, _attrs, _doc, _int_ok in _POINTWISE:
    _spec = register_spec(PointwiseSpec(_name, _fn, _since, _attrs, _doc, _int_ok))
    _spec.quant = _INT8_ACTIVATIONS.get(_name)


@register("PRelu", since=16)
class PReluSpec(OpSpec):
    """Leaky ReLU with a learned slope tensor broadcast to X (unidirectional)."""

    family = "activation"
    doc = "x for x >= 0, slope * x otherwise; slope broadcasts to the shape of X."
    inputs = (Port("X"), Port("slope"))
    outputs = (Port("Y"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Type of X; slope must broadcast to X's shape."""
        xs, ss = ctx.shape(0), ctx.shape(1)
        if xs is not None and ss is not None:
            if len(ss) > len(xs) or broadcast_shapes(xs, ss) is None:
                raise OpError(f"PRelu slope shape {ss} does not broadcast to X shape {xs}")
            out = broadcast_shapes(xs, ss)
            for d_x, d_o in zip(xs, out or ()):
                if isinstance(d_x, int) and isinstance(d_o, int) and d_x != d_o:
                    raise OpError(f"PRelu slope shape {ss} does not broadcast to X shape {xs}")
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
        """Negative elements times slope."""
        dt = x.dtype
        if x.ndim >= 2 and slope.ndim == 1 and slope.shape[0] not in (1, x.shape[-1]) and slope.shape[0] == x.shape[1]:
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))  # old models: per-channel slope of shape [C]
        low = is_low_float(dt)
        xc = x.astype(np.float32) if low else x
        sc = slope.astype(xc.dtype) if slope.dtype != xc.dtype else slope
        out = np.asarray(np.where(xc < 0, xc * sc, xc))
        return out if out.dtype == dt else out.astype(dt)


class _AxisSoftSpec(OpSpec):
    """Shared axis handling of Softmax / LogSoftmax / Hardmax.

    Opset < 13 coerces the input to 2-D [prod(shape[:axis]), prod(shape[axis:])] and works
    along the second dimension (default axis 1); opset >= 13 works along ``axis`` (default -1).
    """

    family = "activation"
    inputs = (Port("input"),)
    outputs = (Port("output"),)
    attrs = (AttrSpec("axis", "int", None, "axis (default 1 before opset 13, -1 from 13)"),)

    half_steps = False
    """float16 input is rounded to float16 after each step (subtract, exp, divide) instead of
    computed in float32 and rounded once."""

    def _axis(self, attrs: dict[str, Any], opset: int) -> int:
        axis = attrs.get("axis")
        if axis is None:
            axis = 1 if opset < 13 else -1
        return int(axis)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input; the axis must be in range."""
        rank = ctx.type(0).rank
        if rank is not None:
            norm_axis(self._axis(ctx.attrs, ctx.opset), max(rank, 1))
        return [ctx.type(0)]

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        """Compute along one axis (float32/float64 input)."""
        raise NotImplementedError

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Apply along the axis, flattening to 2-D first for opset < 13."""
        dt = x.dtype
        # float16 computes in float32 unless the op rounds per step (``half_steps``); bfloat16
        # keeps its own per-step rounding (ml_dtypes ufuncs), which is what bfloat16 hardware and
        # the ONNX reference results do.
        widen = dt.kind in "biu" or (dt == np.float16 and not self.half_steps)
        xc = x.astype(np.float32) if widen else x
        if xc.ndim == 0:
            xc = xc.reshape(1)
        axis = norm_axis(self._axis(ctx.attrs, ctx.opset), xc.ndim)
        with np.errstate(all="ignore"):
            if ctx.opset < 13:
                n = math.prod(xc.shape[:axis])
                out = self._along(xc.reshape(n, -1), 1).reshape(xc.shape)
            else:
                out = self._along(xc, axis)
        out = out.reshape(x.shape)
        return out if out.dtype == dt else out.astype(dt)


@register("Softmax", since=13)
class SoftmaxSpec(_AxisSoftSpec):
    """exp(x) / sum(exp(x)) along an axis."""

    quant = ELEMENTWISE_QUANT

    doc = "Normalized exponential along an axis (opset < 13: over the trailing dims from axis)."
    # float16 rounds per step like the ONNX reference (whose results the conformance cases hold):
    # x - max and exp round to float16, the sum accumulates in float32 and rounds once, the
    # division rounds to float16. A sum beyond float16's range divides in float32 instead.
    half_steps = True

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        # np.maximum/np.add.reduce are the ufunc reductions ndarray.max/sum call, minus their
        # Python wrappers (same bits; a few us less on the tiny tensors of a classifier's head)
        e = x - np.maximum.reduce(x, axis=axis, keepdims=True)
        np.exp(e, out=e)
        total = np.add.reduce(e, axis=axis, keepdims=True, dtype=np.float32 if e.dtype == np.float16 else None)
        if e.dtype == np.float16:
            if total.size and float(np.nanmax(total)) > float(np.finfo(np.float16).max):
                return (e.astype(np.float32) / total).astype(np.float16)
            total = total.astype(np.float16)
        e /= total
        return e


@register("LogSoftmax", since=13)
class LogSoftmaxSpec(_AxisSoftSpec):
    """log(softmax(x)) along an axis."""

    doc = "Log of the normalized exponential along an axis (opset < 13: over the trailing dims from axis)."

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        s = x - x.max(axis=axis, keepdims=True)
        lse = np.log(np.exp(s).sum(axis=axis, keepdims=True))
        s -= lse
        return s


@register("Hardmax", since=13)
class HardmaxSpec(_AxisSoftSpec):
    """One-hot of the first maximum along an axis."""

    doc = "1 at the first maximum along an axis, 0 elsewhere (opset < 13: over the trailing dims from axis)."

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        idx = np.expand_dims(np.argmax(x, axis=axis), axis)
        out = np.zeros_like(x)
        np.put_along_axis(out, idx, 1, axis=axis)
        return out
