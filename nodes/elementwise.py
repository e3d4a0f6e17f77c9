"""Elementwise arithmetic and math ops (numpy broadcasting semantics).

Comparison, logic, bitwise and selection ops live in ``nodes.logical``; Cast, CastLike and
Identity in ``nodes.cast``. Float16, bfloat16 and float8 inputs are computed in float32 where
numpy has no fast or accurate kernel, and the result is cast back to the input dtype.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from nodes._util import broadcast_infer, broadcast_shapes, same_as_input
from nodes.kernels import CHANNEL_CODES, clip_, compiled_float, erf32_, per_channel_
from nodes.polyfit import ERF_NEAR, fit_poly
from nodes.registry import register, register_spec
from nodes.rules import pow_exponent
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

_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def is_ext(dtype: np.dtype) -> bool:
    """True for ml_dtypes extension types (bfloat16, float8*, float4, int4, int2...)."""
    # Their numpy kind is not reliable ('V' for most, 'f' for float8_e5m2); they are user dtypes.
    return np.dtype(dtype).isbuiltin == 2


def is_ext_float(dtype: np.dtype) -> bool:
    """True for ml_dtypes extension floats (bfloat16, float8*, float4...)."""
    return is_ext(dtype) and "float" in np.dtype(dtype).name


def is_low_float(dtype: np.dtype) -> bool:
    """True for float types numpy computes slowly or not at all (float16, bfloat16, float8...)."""
    dtype = np.dtype(dtype)
    return dtype == np.float16 or is_ext_float(dtype)


def as_compute(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype numpy computes well: float32 for low-precision floats, else unchanged."""
    return x.astype(np.float32) if is_low_float(x.dtype) else x


def float_kernel(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """Wrap a float math function: low floats compute in float32, the result keeps x's dtype."""

    def run(x: np.ndarray) -> np.ndarray:
        dt = x.dtype
        if dt in _NATIVE_FLOATS:
            out = fn(x)
        else:
            xc = x.astype(np.float32) if dt.kind in "biu" or is_ext(dt) or dt == np.float16 else x
            out = fn(xc)
        out = np.asarray(out)
        return out if out.dtype == dt else out.astype(dt)

    return run


def check_same_dtype(ctx: NodeContext, indices: tuple[int, ...] | None = None) -> None:
    """Raise OpError when the connected inputs (or those in ``indices``) differ in dtype."""
    idx = range(ctx.n_inputs) if indices is None else indices
    dts = {ctx.node.inputs[i].name: ctx.dtype(i) for i in idx if ctx.has_input(i) and ctx.dtype(i) is not None}
    if len(set(dts.values())) > 1:
        desc = ", ".join(f"{n}: {np.dtype(d).name if d != np.dtype(object) else 'string'}" for n, d in dts.items())
        raise OpError(f"{ctx.node.op_type} needs inputs of one element type, got {desc}")


# -- binary arithmetic ---------------------------------------------------------------------------
class BinarySpec(FnSpec):
    """Two inputs broadcast to one output computed by ``fn``."""

    family = "elementwise"
    inputs = (Port("A"), Port("B"))
    outputs = (Port("C"),)

    def __init__(self, op_type: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], since: int,
                 out_dtype: np.dtype | None = None, doc: str = "", same_type: bool = True,
                 attrs: tuple[AttrSpec, ...] = (), ufunc: np.ufunc | None = None) -> None:
        self.out_dtype = out_dtype
        self.same_type = same_type
        self.ufunc = ufunc  # float32/float64 arithmetic written into a donated input (out=)
        self.inplace = ufunc is not None
        super().__init__(op_type, fn, since, doc, attrs)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast shape; the dtype of A (or bool for comparisons)."""
        if self.same_type:
            check_same_dtype(ctx, (0, 1))
        sa, sb = ctx.shape(0), ctx.shape(1)
        if sa is not None and sb is not None and _legacy_axis(ctx.attrs, ctx.opset, len(sa), len(sb)) is not None:
            sb = tuple(sb) + (1,) * _legacy_axis(ctx.attrs, ctx.opset, len(sa), len(sb))
            dt = self.out_dtype if self.out_dtype is not None else ctx.dtype(0)
            return [TensorType(dt, broadcast_shapes(sa, sb))]
        return broadcast_infer(ctx, self.out_dtype)

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Apply the numpy function; keeps the input dtype for arithmetic."""
        pad = _legacy_axis(ctx.attrs, ctx.opset, a.ndim, b.ndim)
        if pad:
            b = b.reshape(b.shape + (1,) * pad)
        elif ctx.donate >= 0 and a.dtype == b.dtype and a.dtype in _NATIVE_FLOATS:
            target = b if ctx.donate else a
            if target.shape == _broadcast(a.shape, b.shape):
                if self.op_type in CHANNEL_CODES:  # by one value per channel: one compiled pass
                    res = per_channel_(self.op_type, target, a if ctx.donate else b, not ctx.donate)
                    if res is not None:
                        return res
                return self.ufunc(a, b, out=target)  # type: ignore[misc]
        out = np.asarray(self.fn(a, b))
        if self.out_dtype is None and out.dtype != a.dtype:
            out = out.astype(a.dtype)
        return out


_broadcast = functools.lru_cache(maxsize=4096)(np.broadcast_shapes)
"""np.broadcast_shapes of two shapes, kept: ~0.1 us where the call took ~3 (a small model's 26
elementwise steps a run)."""


def _legacy_axis(attrs: dict, opset: int, rank_a: int, rank_b: int) -> int | None:
    """Opset < 7 ``broadcast=1, axis=k``: trailing 1-dims that align B at axis k of A (else None)."""
    if opset >= 7 or not attrs.get("broadcast") or attrs.get("axis") is None:
        return None
    axis = int(attrs["axis"])
    axis = axis + rank_a if axis < 0 else axis
    pad = rank_a - axis - rank_b
    if pad < 0:
        raise OpError(f"legacy broadcast: B of rank {rank_b} does not fit A of rank {rank_a} at axis {axis}")
    return pad


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # ONNX integer Div truncates toward zero (C semantics); numpy floors.
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.floor_divide(a, b)
            if a.dtype.kind == "i":
                fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
                q = q + fix.astype(q.dtype)
        return q
    if is_low_float(a.dtype):
        return (a.astype(np.float32) / b.astype(np.float32)).astype(a.dtype)
    return np.divide(a, b)


def _low_float_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if is_ext_float(a.dtype):  # bfloat16 / float8: via float32
            return fn(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
        return fn(a, b)

    return run


for _name, _fn, _since, _ufunc in (
    ("Add", np.add, 14, np.add),
    ("Sub", np.subtract, 14, np.subtract),
    ("Mul", np.multiply, 14, np.multiply),
    ("Div", _div, 14, np.divide),
):
    _spec = register_spec(BinarySpec(_name, _low_float_binary(_fn), _since,
                                     doc=f"Elementwise {_name} with broadcasting.", ufunc=_ufunc))
    if _name != "Div":
        _spec.quant = ELEMENTWISE_QUANT


# -- Pow and Mod ---------------------------------------------------------------------------------
def _pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """X ** Y with the dtype of X (ONNX Pow allows a different exponent dtype)."""
    dt = x.dtype
    with np.errstate(all="ignore"):
        if dt.kind in "iu":
            if y.dtype.kind in "iu" and not (y < 0).any():
                return np.power(x, y.astype(dt))
            # Integer base, float (or negative) exponent: compute in float64, truncate.
            return np.power(x.astype(np.float64), y.astype(np.float64)).astype(dt)
        xc = as_compute(x)
        yc = y.astype(xc.dtype) if y.dtype != xc.dtype else y
        out = np.power(xc, yc)
    return out if out.dtype == dt else out.astype(dt)


def _mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    """ONNX Mod: fmod=0 takes the divisor's sign (floor), fmod=1 the dividend's (C fmod)."""
    dt = a.dtype
    if dt.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.fmod(a, b) if fmod else np.mod(a, b)
    ac, bc = as_compute(a), as_compute(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.fmod(ac, bc) if fmod else np.mod(ac, bc)
    return out if out.dtype == dt else out.astype(dt)


@register("Pow", since=15)
class PowSpec(OpSpec):
    """Elementwise power; the exponent may have another numeric dtype than the base."""

    family = "elementwise"
    doc = "Elementwise X ** Y with broadcasting; the output has the dtype of X."
    inputs = (Port("X"), Port("Y"))
    outputs = (Port("Z"),)
    # quantized only for TFLite targets (engine/quant/config.py: a decomposed LayerNorm's square
    # and reciprocal square root become int8 MUL and RSQRT); the exponent stays float
    quant = QuantSpec("elementwise", float_inputs=frozenset({1}))
    rules = (pow_exponent,)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast shape, dtype of X."""
        return broadcast_infer(ctx)

    def reference(self, ctx: RunContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """X ** Y in X's dtype."""
        return np.asarray(_pow(x, y))


@register("Mod", since=13)
class ModSpec(OpSpec):
    """Elementwise remainder; ``fmod`` selects floor (0) or truncated (1) semantics."""

    family = "elementwise"
    doc = "Elementwise remainder: fmod=0 has the sign of B (A - floor(A/B)*B), fmod=1 the sign of A."
    inputs = (Port("A"), Port("B"))
    outputs = (Port("C"),)
    attrs = (AttrSpec("fmod", "int", 0, "0: sign of the divisor (integers only), 1: C fmod", (0, 1)),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast shape, dtype of A; float Mod needs fmod=1 by the spec (accepted anyway)."""
        check_same_dtype(ctx, (0, 1))
        if ctx.attrs["fmod"] not in (0, 1):
            raise OpError(f"Mod fmod must be 0 or 1, got {ctx.attrs['fmod']}")
        return broadcast_infer(ctx)

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Floor or truncated remainder."""
        return np.asarray(_mod(a, b, int(ctx.attrs["fmod"])))


# -- variadic Max / Min / Sum / Mean --------------------------------------------------------------
class VariadicSpec(FnSpec):
    """One or more inputs broadcast together and folded with a binary function."""

    family = "elementwise"
    inputs = (Port("data_0", variadic=True),)
    outputs = (Port("result"),)

    def __init__(self, op_type: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], since: int,
                 mean: bool = False, doc: str = "") -> None:
        self.mean = mean
        super().__init__(op_type, fn, since, doc)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast of all inputs; dtype of the first."""
        if not any(ctx.has_input(i) for i in range(ctx.n_inputs)):
            raise OpError(f"{ctx.node.op_type} needs at least one input")
        check_same_dtype(ctx)
        return broadcast_infer(ctx)

    def reference(self, ctx: RunContext, *xs: np.ndarray | None) -> np.ndarray:
        """Fold the inputs left to right."""
        arrs = [x for x in xs if x is not None]
        if not arrs:
            raise OpError(f"{self.op_type} needs at least one input")
        dt = arrs[0].dtype
        low = is_low_float(dt)
        if low:
            arrs = [a.astype(np.float32) for a in arrs]
        if len(arrs) == 1:
            out = arrs[0]
        else:
            out = self.fn(arrs[0], arrs[1])
            for a in arrs[2:]:
                out = self.fn(out, a)
        out = np.asarray(out)
        if self.mean:
            out = np.asarray(out / np.asarray(len(arrs), dtype=out.dtype))
        return out if out.dtype == dt else out.astype(dt)


for _name, _fn, _mean in (("Max", np.maximum, False), ("Min", np.minimum, False),
                          ("Sum", np.add, False), ("Mean", np.add, True)):
    register_spec(VariadicSpec(_name, _fn, 13, mean=_mean,
                               doc=f"Elementwise {_name.lower()} of one or more inputs with broadcasting."))


# -- unary math ----------------------------------------------------------------------------------
class UnarySpec(FnSpec):
    """One input, one output of the same shape computed elementwise by ``fn``."""

    family = "elementwise"
    inputs = (Port("X"),)
    outputs = (Port("Y"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input."""
        return same_as_input(ctx)

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """Apply ``fn`` keeping the input dtype."""
        with np.errstate(all="ignore"):
            return np.asarray(self.fn(x))


def _horner(coef: np.ndarray, s: np.ndarray) -> np.ndarray:
    out = np.full_like(s, coef[0])
    for c in coef[1:]:
        out *= s
        out += c
    return out


# erf(x) = x * A(x^2) for |x| < 1; erf(x) = 1 - exp(-x^2) * B(|x|) for |x| >= 1 (B flat past 6,
# where erfc underflows double precision). Fitted once against math.erf: relative error < 1e-15.
_ERFC_B = fit_poly(lambda v: math.erfc(v) * math.exp(v * v), 1.0, 6.0, 26)


def _erf_poly(x: np.ndarray) -> np.ndarray:
    """erf in float64 from the fitted polynomials (used when scipy is not installed)."""
    xd = np.asarray(x, dtype=np.float64)
    a = np.abs(xd)
    out = np.empty_like(xd)
    near = a < 1.0
    xa = xd[near]
    out[near] = xa * _horner(ERF_NEAR, 2.0 * xa * xa - 1.0)
    far = ~near
    af = a[far]
    tail = _horner(_ERFC_B, (np.minimum(af, 6.0) - 3.5) / 2.5) * np.exp(-af * af)
    out[far] = np.copysign(1.0 - tail, xd[far])
    return out


try:  # scipy is optional: the fitted fallback is as precise, only slower.
    from scipy.special import erf as _scipy_erf
except ImportError:  # pragma: no cover - depends on the environment
    _scipy_erf = None


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of a float array (float32/float64 in, same dtype out).

    float32 runs the compiled one-pass kernel (correctly rounded, nodes/kernels.py); float64
    scipy's erf or, without scipy, the fitted polynomials.
    """
    if x.dtype == np.float32 and x.ndim > 0:
        return erf32_(np.ascontiguousarray(x))
    out = _scipy_erf(x) if _scipy_erf is not None else _erf_poly(x)
    return np.asarray(out).astype(x.dtype, copy=False)


def _keep(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A dtype-generic numpy function (abs, neg, sign) that also runs on extension floats."""

    def run(x: np.ndarray) -> np.ndarray:
        if is_ext(x.dtype):
            return fn(x.astype(np.float32)).astype(x.dtype)
        return fn(x)

    return run


def _reciprocal(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(x) if x.dtype.kind == "f" else 1.0 / x


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.rint(x)


_UNARY: tuple[tuple[str, Callable[[np.ndarray], np.ndarray], int, str], ...] = (
    ("Abs", _keep(np.abs), 13, "Absolute value."),
    ("Neg", _keep(np.negative), 13, "Negation."),
    ("Sign", _keep(np.sign), 13, "Sign: -1, 0 or 1 (0 for zero)."),
    ("Exp", float_kernel(np.exp), 13, "Natural exponential."),
    ("Log", float_kernel(np.log), 13, "Natural logarithm."),
    ("Sqrt", float_kernel(np.sqrt), 13, "Square root."),
    ("Reciprocal", float_kernel(_reciprocal), 13, "1 / x."),
    ("Floor", float_kernel(np.floor), 13, "Round toward -inf."),
    ("Ceil", float_kernel(np.ceil), 13, "Round toward +inf."),
    ("Round", float_kernel(_round_half_even), 11, "Round to nearest, halves to even."),
    ("Sin", float_kernel(np.sin), 7, "Sine."),
    ("Cos", float_kernel(np.cos), 7, "Cosine."),
    ("Tan", float_kernel(np.tan), 7, "Tangent."),
    ("Asin", float_kernel(np.arcsin), 7, "Arcsine."),
    ("Acos", float_kernel(np.arccos), 7, "Arccosine."),
    ("Atan", float_kernel(np.arctan), 7, "Arctangent."),
    ("Sinh", float_kernel(np.sinh), 9, "Hyperbolic sine."),
    ("Cosh", float_kernel(np.cosh), 9, "Hyperbolic cosine."),
    ("Asinh", float_kernel(np.arcsinh), 9, "Inverse hyperbolic sine."),
    ("Acosh", float_kernel(np.arccosh), 9, "Inverse hyperbolic cosine."),
    ("Atanh", float_kernel(np.arctanh), 9, "Inverse hyperbolic tangent."),
    ("Erf", float_kernel(erf), 13, "Gauss error function."),
)

for _name, _fn1, _since, _doc in _UNARY:
    register_spec(UnarySpec(_name, _fn1, _since, doc=_doc))


# -- Clip ----------------------------------------------------------------------------------------
def _bound(v: np.ndarray | float | None, dtype: np.dtype, name: str) -> np.ndarray | None:
    if v is None:
        return None
    arr = np.asarray(v)
    if arr.size != 1:
        raise OpError(f"Clip {name} must be a scalar, got shape {arr.shape}")
    return arr.reshape(()).astype(dtype)


@register("Clip", since=13)
class ClipSpec(OpSpec):
    """Limit values to [min, max]: attributes before opset 11, optional inputs from 11."""

    family = "elementwise"
    quant = QuantSpec("elementwise", float_inputs=frozenset({1, 2}), epilogue=True)  # Relu6 in a Conv
    doc = "Clamp every element to [min, max]; when min > max every element becomes max."
    inplace = True  # writes into a donated float input (ctx.donate == 0)
    inputs = (Port("input"), Port("min", optional=True), Port("max", optional=True))
    outputs = (Port("output"),)
    attrs = (
        AttrSpec("min", "float", None, "lower bound (opset < 11; default: lowest float)"),
        AttrSpec("max", "float", None, "upper bound (opset < 11; default: largest float)"),
    )

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Same type as the input; bounds must be scalars of the input dtype."""
        for i, name in ((1, "min"), (2, "max")):
            s = ctx.shape(i) if ctx.has_input(i) else None
            if s is not None and (len(s) > 1 or (len(s) == 1 and isinstance(s[0], int) and s[0] != 1)):
                raise OpError(f"Clip {name} must be a scalar, got shape {s}")
        check_same_dtype(ctx)
        return [ctx.type(0)]

    def reference(self, ctx: RunContext, x: np.ndarray, lo: np.ndarray | None = None,
                  hi: np.ndarray | None = None) -> np.ndarray:
        """min(max(x, lo), hi) in x's dtype."""
        if ctx.opset < 11:
            lo = ctx.attrs.get("min")
            hi = ctx.attrs.get("max")
        dt = x.dtype
        xc = as_compute(x)
        lo_a = _bound(lo, xc.dtype, "min")
        hi_a = _bound(hi, xc.dtype, "max")
        if lo_a is None and hi_a is None:
            return x
        if lo_a is not None and hi_a is not None:  # min > max gives max everywhere, as ONNX specifies
            if compiled_float(xc):  # np.clip's values in one compiled pass, into a donated input
                out = clip_(xc, lo_a, hi_a, out=xc if ctx.donate == 0 and xc is x else None)
            else:
                out = np.clip(xc, lo_a, hi_a)
        elif lo_a is not None:
            out = np.maximum(xc, lo_a)
        else:
            out = np.minimum(xc, hi_a)
        out = np.asarray(out)
        return out if out.dtype == dt else out.astype(dt)
