"""Linear quantization and integer kernels.

QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger, MatMulInteger,
QLinearConv and QLinearMatMul. The arithmetic is exact and mirrors an integer runtime: the
division x / scale runs in the scale's precision (or the ``precision`` attribute), rounds half
to even, adds the zero point and saturates to the target range. Integer accumulations are
exact (float BLAS is used only where every partial sum is provably representable), and
requantization multiplies the int32 accumulator by the float32 multiplier
``x_scale * w_scale / y_scale`` and rounds half to even, as integer runtimes do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from nodes import kernels
from nodes._util import norm_axis
from nodes.conv import conv_gemm, conv_geometry, conv_macs, conv_nd, conv_out_shape
from nodes.int8_gemm import ConvWeights, MatMulWeights
from nodes.matmul import matmul, matmul_gemm, matmul_shape
from nodes.quant_kernels import dynamic_quantize
from nodes.registry import register
from nodes.spec import AttrSpec, Gemm, NodeContext, OpError, OpSpec, Port, RunContext, Work
from nodes.types import TensorType, np_dtype

_SUB_BYTE_INTS = ("int4", "uint4", "int2", "uint2")


def int_range(dtype: np.dtype) -> tuple[int, int] | None:
    """(min, max) of an integer dtype, including ml_dtypes' int4/uint4/int2/uint2; else None."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        ii = np.iinfo(dt)
        return int(ii.min), int(ii.max)
    if dt.name in _SUB_BYTE_INTS:
        ii = ml_dtypes.iinfo(dt)
        return int(ii.min), int(ii.max)
    return None


def is_small_float(dtype: np.dtype) -> bool:
    """True for the float8 / float6 / float4 element types of ml_dtypes."""
    return np.dtype(dtype).name.startswith(("float8", "float6", "float4"))


def _has_no_infinity(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name.startswith(("float4", "float6"))


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The numpy dtype arithmetic in ``dtype`` runs in (float32 for ml_dtypes floats and ints)."""
    dt = np.dtype(dtype)
    if dt in (np.float16, np.float32, np.float64):
        return dt
    return np.dtype(np.float32)


def expand_param(param: np.ndarray, x_shape: tuple[int, ...], axis: int, block_size: int,
                 what: str = "scale") -> np.ndarray:
    """A scale or zero point reshaped/repeated so it broadcasts against the input.

    Scalar: per tensor. 1-D: per axis along ``axis``. Same rank as the input with
    ``block_size`` > 0: blocked along ``axis`` (each element repeated ``block_size`` times).
    """
    p = np.asarray(param)
    rank = len(x_shape)
    if p.ndim == 0:
        return p
    if block_size and block_size > 0:
        if p.ndim != rank:
            raise OpError(f"blocked quantization needs a {what} of rank {rank}, got shape {p.shape}")
        a = norm_axis(axis, rank)
        d = x_shape[a]
        if p.shape[a] * block_size < d or (p.shape[a] - 1) * block_size >= d:
            raise OpError(f"{what} shape {p.shape} with block_size {block_size} does not cover "
                          f"dimension {a} of size {d}")
        for k in range(rank):
            if k != a and p.shape[k] != x_shape[k]:
                raise OpError(f"blocked {what} shape {p.shape} does not match input shape {x_shape}")
        return np.take(np.repeat(p, block_size, axis=a), np.arange(d), axis=a)
    if p.ndim == 1:
        if p.size == 1:
            return p.reshape(())
        if rank == 0:
            raise OpError(f"a 1-D {what} needs an input of rank >= 1")
        a = norm_axis(axis, rank)
        if p.size != x_shape[a]:
            raise OpError(f"per-axis {what} has {p.size} elements but input dimension {a} is {x_shape[a]}")
        shape = [1] * rank
        shape[a] = p.size
        return p.reshape(shape)
    if p.ndim == rank:
        return p
    raise OpError(f"{what} of shape {p.shape} fits neither per-tensor, per-axis nor blocked "
                  f"quantization of an input of shape {x_shape}")


def saturate_cast(q: np.ndarray, out_dtype: np.dtype, saturate: bool = True) -> np.ndarray:
    """Cast a float array to the quantized type: clip to the integer range (values already
    integral) or, for float8/float4, clip to +-max when saturating, then round to nearest even.

    ``q`` may be modified in place.
    """
    out_dtype = np.dtype(out_dtype)
    rng = int_range(out_dtype)
    if rng is not None:
        q = _clip_inplace(q, rng[0], rng[1])
        return q.astype(out_dtype)
    if is_small_float(out_dtype):
        if saturate or _has_no_infinity(out_dtype):
            m = float(ml_dtypes.finfo(out_dtype).max)
            q = _clip_inplace(q, -m, m)
        return q.astype(out_dtype)
    return q.astype(out_dtype)


def _clip_inplace(q: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Clip into [lo, hi] keeping NaN (np.maximum/np.minimum with out= beat np.clip)."""
    q = np.asarray(q)
    if q.ndim == 0 or not q.flags.writeable:
        return np.asarray(np.clip(q, lo, hi))
    np.minimum(q, q.dtype.type(hi), out=q)
    np.maximum(q, q.dtype.type(lo), out=q)
    return q


def quantize_linear(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, out_dtype: np.dtype,
             axis: int = 1, block_size: int = 0, saturate: bool = True,
             precision: np.dtype | None = None) -> np.ndarray:
    """y = saturate(round_half_even(x / scale) + zero_point) in ``out_dtype`` (ONNX QuantizeLinear).
    Float32 to an 8- or 16-bit type, per tensor or per axis, takes one compiled pass."""
    out_dtype = np.dtype(out_dtype)
    if not block_size and (precision is None or precision == np.float32):
        y = kernels.quantize_(np.asarray(x), scale, zero_point, axis, out_dtype)
        if y is not None:
            return y
    calc = compute_dtype(precision if precision is not None else scale.dtype)
    s = expand_param(scale, x.shape, axis, block_size).astype(calc, copy=False)
    q = np.divide(x.astype(calc, copy=False), s)
    zp = None
    if zero_point is not None:
        zp = expand_param(zero_point, x.shape, axis, block_size, "zero point")
    acc = np.promote_types(calc, np.float32)
    q = np.array(q, dtype=acc, copy=q.dtype != acc or q.ndim == 0)
    if int_range(out_dtype) is not None:
        np.rint(q, out=q)
    elif not is_small_float(out_dtype):
        raise OpError(f"QuantizeLinear cannot quantize to {out_dtype.name}")
    if zp is not None:
        q = np.add(q, zp.astype(acc), out=q if q.shape == np.broadcast_shapes(q.shape, zp.shape) else None)
    return saturate_cast(q, out_dtype, saturate)


def dequantize_linear(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, out_dtype: np.dtype,
               axis: int = 1, block_size: int = 0) -> np.ndarray:
    """y = (x - zero_point) * scale; the subtraction is exact, the product runs in ``out_dtype``.
    An 8- or 16-bit x to float32, per tensor or per axis, takes one compiled pass."""
    out_dtype = np.dtype(out_dtype)
    if not block_size and out_dtype == np.float32:
        y = kernels.dequantize_(np.asarray(x), scale, zero_point, axis)
        if y is not None:
            return y
    calc = compute_dtype(out_dtype)
    s = expand_param(scale, x.shape, axis, block_size).astype(calc, copy=False)
    if int_range(x.dtype) is not None:
        wide = np.int64 if x.dtype.itemsize >= 4 else np.int32
        d = x.astype(wide)
        if zero_point is not None:
            d = d - expand_param(zero_point, x.shape, axis, block_size, "zero point").astype(wide)
    else:
        d = x.astype(np.float32)
        if zero_point is not None:
            d = d - expand_param(zero_point, x.shape, axis, block_size, "zero point").astype(np.float32)
    y = d.astype(calc) * s
    return y.astype(out_dtype, copy=False)


def _dtype_attr(code: int) -> np.dtype | None:
    if not code:
        return None
    try:
        return np_dtype(int(code))
    except KeyError:
        raise OpError(f"unknown ONNX element type {code}") from None


def _check_param_shape(ctx: NodeContext, i: int, what: str) -> None:
    """Raise when a scale/zero point can be seen to mismatch the input statically."""
    sx, sp = ctx.shape(0), ctx.shape(i)
    if sx is None or sp is None or len(sp) != 1 or len(sx) == 0:
        return
    if ctx.attrs.get("block_size", 0):
        return
    n = sp[0]
    a = norm_axis(int(ctx.attrs.get("axis", 1)), len(sx))
    d = sx[a]
    if isinstance(n, int) and isinstance(d, int) and n not in (1, d):
        raise OpError(f"per-axis {what} has {n} elements but input dimension {a} is {d}")


@register("QuantizeLinear", since=10)
class QuantizeLinearSpec(OpSpec):
    """Float -> quantized integer/float8/float4 with per-tensor, per-axis or blocked scales."""

    doc = ("y = saturate(round_half_even(x / y_scale) + y_zero_point). The target type comes from "
           "output_dtype, else y_zero_point, else uint8.")
    inputs = (Port("x"), Port("y_scale"), Port("y_zero_point", optional=True))
    outputs = (Port("y"),)
    attrs = (
        AttrSpec("axis", "int", 1, "Quantization axis for per-axis and blocked scales."),
        AttrSpec("block_size", "int", 0, "Block size of blocked quantization (opset 21+); 0: none."),
        AttrSpec("output_dtype", "int", 0, "ONNX element type of y (opset 21+); 0: from y_zero_point."),
        AttrSpec("saturate", "int", 1, "float8 targets: clip out-of-range values to +-max."),
        AttrSpec("precision", "int", 0, "ONNX element type of the division; 0: the scale's type."),
    )

    def _out_dtype(self, zp_dtype: np.dtype | None, attrs: dict, has_zp: bool) -> np.dtype | None:
        od = _dtype_attr(attrs.get("output_dtype", 0))
        if od is not None:
            if zp_dtype is not None and np.dtype(zp_dtype) != od:
                raise OpError(f"output_dtype {od.name} differs from the zero point type {np.dtype(zp_dtype).name}")
            return od
        if has_zp:
            return zp_dtype
        return np.dtype(np.uint8)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Shape of x; dtype from output_dtype / y_zero_point / uint8."""
        _check_param_shape(ctx, 1, "scale")
        dt = self._out_dtype(ctx.dtype(2), ctx.attrs, ctx.has_input(2))
        return [TensorType(dt, ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray,
                  zp: np.ndarray | None = None) -> np.ndarray:
        """Exact quantization (round half to even, saturation)."""
        a = ctx.attrs
        out = self._out_dtype(zp.dtype if zp is not None else None, a, zp is not None)
        return quantize_linear(x, scale, zp, out, axis=int(a["axis"]), block_size=int(a["block_size"]),
                        saturate=bool(a["saturate"]), precision=_dtype_attr(a.get("precision", 0)))


@register("DequantizeLinear", since=10)
class DequantizeLinearSpec(OpSpec):
    """Quantized -> float with per-tensor, per-axis or blocked scales."""

    doc = "y = (x - x_zero_point) * x_scale; y has the type of x_scale unless output_dtype is set."
    inputs = (Port("x"), Port("x_scale"), Port("x_zero_point", optional=True))
    outputs = (Port("y"),)
    attrs = (
        AttrSpec("axis", "int", 1, "Quantization axis for per-axis and blocked scales."),
        AttrSpec("block_size", "int", 0, "Block size of blocked quantization (opset 21+); 0: none."),
        AttrSpec("output_dtype", "int", 0, "ONNX element type of y (opset 23+); 0: the scale's type."),
    )

    @staticmethod
    def _out_dtype(scale_dtype: np.dtype | None, attrs: dict) -> np.dtype | None:
        od = _dtype_attr(attrs.get("output_dtype", 0))
        return od if od is not None else scale_dtype

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Shape of x, dtype of the scale (or output_dtype)."""
        _check_param_shape(ctx, 1, "scale")
        return [TensorType(self._out_dtype(ctx.dtype(1), ctx.attrs), ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray, scale: np.ndarray,
                  zp: np.ndarray | None = None) -> np.ndarray:
        """Exact integer subtraction, then one multiply in the output precision."""
        a = ctx.attrs
        out = self._out_dtype(scale.dtype, a)
        return dequantize_linear(x, scale, zp, out, axis=int(a["axis"]), block_size=int(a["block_size"]))


@register("DynamicQuantizeLinear", since=11)
class DynamicQuantizeLinearSpec(OpSpec):
    """uint8 quantization with scale and zero point computed from the data range."""

    doc = ("Computes scale = (max(0, max x) - min(0, min x)) / 255 and a uint8 zero point, then "
           "quantizes x with them.")
    inputs = (Port("x"),)
    outputs = (Port("y"), Port("y_scale"), Port("y_zero_point"))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """y: uint8 shaped like x; y_scale float32 and y_zero_point uint8 scalars."""
        return [TensorType(np.dtype(np.uint8), ctx.shape(0)),
                TensorType(np.dtype(np.float32), ()),
                TensorType(np.dtype(np.uint8), ())]

    def reference(self, ctx: RunContext, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """float32 arithmetic with round half to even, as the ONNX function body specifies (one
        compiled pass for the range and one for the quantization; NaN/inf: numpy)."""
        xf = x.astype(np.float32, copy=False)
        fast = dynamic_quantize(xf, 0.0)
        if fast is not None:
            y, scale, zp = fast
            return y, np.asarray(scale), np.asarray(zp)
        lo = np.float32(min(0.0, float(xf.min()))) if xf.size else np.float32(0)
        hi = np.float32(max(0.0, float(xf.max()))) if xf.size else np.float32(0)
        scale = np.float32((hi - lo) / np.float32(255))
        if scale == 0:
            zp = np.uint8(0)
            return np.zeros(x.shape, np.uint8), np.asarray(scale), np.asarray(zp)
        zp_f = np.clip(np.rint(np.float32(0) - lo / scale), 0, 255)
        zp = np.asarray(zp_f).astype(np.uint8)
        y = quantize_linear(xf, np.asarray(scale), zp, np.dtype(np.uint8))
        return y, np.asarray(scale), zp


# -- integer kernels -------------------------------------------------------------------------------

_F32_EXACT = 2**24


def _centered(x: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    """x - zero_point as int32 (zp already shaped to broadcast)."""
    d = x.astype(np.int32)
    if zp is not None:
        d = d - np.asarray(zp).astype(np.int32)
    return d


def _absmax(a: np.ndarray) -> int:
    return int(np.abs(a).max()) if a.size else 0


class IntOperand:
    """A centered int32 right operand prepared once for many exact products (a constant weight,
    an LSTM's recurrent matrix over the steps): its largest magnitude and its float copies are
    computed on first use, not per product."""

    def __init__(self, b: np.ndarray) -> None:
        self.b = b
        self.bmax = _absmax(b)
        self._float: dict[np.dtype, np.ndarray] = {}
        self.conv_caches: dict[np.dtype, dict] = {}  # conv_nd's per-node cache for the float copy of each dtype

    def as_float(self, dt: np.dtype) -> np.ndarray:
        """The operand in float dtype ``dt`` (kept)."""
        f = self._float.get(dt)
        if f is None:
            f = self._float[dt] = self.b.astype(dt)
        return f

    def row_absmax(self) -> np.ndarray:
        """max_n |b[k, n]| per row k of a 2-D operand, float64 (kept)."""
        if not hasattr(self, "_row_absmax"):
            self._row_absmax = np.abs(self.b).max(axis=1).astype(np.float64) if self.b.size else np.zeros(self.b.shape[0])
        return self._row_absmax

    def narrow_t(self) -> np.ndarray | None:
        """A 2-D operand (K, N) as contiguous (N, K) int8 or int16 for the compiled integer
        products (kept; None when it is not 2-D or needs more than 16 bits)."""
        if not hasattr(self, "_narrow"):
            from nodes.quant_kernels import narrow_transposed

            self._narrow = narrow_transposed(self.b)
        return self._narrow

    def int8_columns(self) -> MatMulWeights | None:
        """The operand (K, N) packed for the VNNI product (kept; None where it does not apply)."""
        if not hasattr(self, "_cols"):
            self._cols = MatMulWeights.make(self.b)
        return self._cols

    def int8_rows(self, group: int) -> ConvWeights | None:
        """The convolution weight as the VNNI kernel's rows (kept; None where it does not apply)."""
        if getattr(self, "_rows_group", None) != group:
            self._rows, self._rows_group = ConvWeights.make(self.b, group), group
        return self._rows


MIN_EXACT_CHUNK = 64
"""Shortest stretch of the summed axis worth a float32 product of its own: below it one
float64 product is cheaper than the chunks' extra passes."""


def exact_chunk(amax: int, bmax: int, k: int) -> int:
    """How many products bounded by amax * bmax float32 sums exactly (every partial sum within
    2**24): k when all of them, else a shorter chunk (0: too short to pay, use float64)."""
    lim = _F32_EXACT // max(amax * bmax, 1)
    if lim >= k:
        return k
    return lim if lim >= MIN_EXACT_CHUNK else 0


def _chunked_exact(k: int, chunk: int, product) -> np.ndarray:
    """int32 sum of ``product(k0, k1)`` (an exact float32 partial product over [k0, k1)) over
    chunks of the summed axis; the chunks' sums add exactly in float64."""
    acc = None
    for k0 in range(0, k, chunk):
        part = product(k0, min(k, k0 + chunk))
        acc = part.astype(np.float64) if acc is None else np.add(acc, part, out=acc)
    return acc.astype(np.int32)


def sums_fit_f32(a: np.ndarray, op: IntOperand) -> bool:
    """True when every partial sum of a @ op.b (2-D) is within float32's exact integers, by the
    bound max_i sum_k |a[i, k]| * max_n |b[k, n]| (any subset of a row's products, so any order
    BLAS adds them in, stays below it). Far tighter than K * max|a| * max|b|: dddd_common_old's
    classifier (K = 1024) bounds at 1.1e6, where the product of the maxima said 3.6e7."""
    if op.b.ndim != 2 or not a.size:
        return False
    bound = np.abs(a.reshape(-1, a.shape[-1])).astype(np.float64) @ op.row_absmax()
    return float(bound.max(initial=0.0)) < _F32_EXACT


def int_matmul(a: np.ndarray, b: np.ndarray | IntOperand) -> np.ndarray:
    """Exact int32 matmul of int32 operands through float BLAS: float32 when its sums are exact
    (by the product of the maxima or, for a 2-D right operand, the tighter ``sums_fit_f32``),
    float32 over chunks of K when a chunk's are (a uint8 x int8 product of K = 1024 sums up to
    3e7, beyond float32's 2**24, in two exact chunks: twice float64's speed), else float64."""
    op = b if isinstance(b, IntOperand) else IntOperand(b)
    k = a.shape[-1]
    chunk = exact_chunk(_absmax(a), op.bmax, k)
    if chunk != k and sums_fit_f32(a, op):
        chunk = k
    if chunk == k:
        return matmul(a.astype(np.float32), op.as_float(np.dtype(np.float32))).astype(np.int32)  # exact integers
    if chunk:
        af, bf = a.astype(np.float32), op.as_float(np.dtype(np.float32))
        return _chunked_exact(k, chunk, lambda k0, k1: matmul(
            af[..., k0:k1], bf[k0:k1] if bf.ndim == 1 else bf[..., k0:k1, :]))
    dt = np.dtype(np.float64)
    return matmul(a.astype(dt), op.as_float(dt)).astype(np.int32)


def int_matmul_raw(a: np.ndarray, a_zp: np.ndarray | None, b: np.ndarray | IntOperand) -> np.ndarray:
    """Exact int32 (a - a_zp) @ b of integer ``a`` (a_zp scalar, or per row as an (M, 1) column)
    and centered ``b``: the VNNI kernel on the raw bytes where it applies (nodes/int8_gemm.py),
    else ``int_matmul`` of the centered operands."""
    op = b if isinstance(b, IntOperand) else IntOperand(b)
    cols = op.int8_columns() if a.dtype in _BYTE_TYPES else None
    if cols is not None:
        y = cols(a, a_zp)
        if y is not None:
            return y
    return int_matmul(_centered(a, a_zp), op)


_BYTE_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))


def cached_int_operand(ctx: RunContext, key: str, sources: tuple[Any, ...],
                       make: Callable[[], np.ndarray]) -> IntOperand:
    """IntOperand(make()) kept in the node's run cache while the same ``sources`` arrays come in
    (identity): a constant weight is centered and converted once per plan, not once per run."""
    hit = ctx.cache.get(key)
    if hit is not None and len(hit[0]) == len(sources) and all(x is y for x, y in zip(hit[0], sources)):
        return hit[1]
    op = IntOperand(make())
    ctx.cache[key] = (sources, op)
    return op


def _row_param(p: np.ndarray | None, a_ndim: int) -> np.ndarray | None:
    """A per-row (M) parameter of the left operand as an (M, 1) column; scalars stay scalars."""
    if p is None:
        return None
    p = np.asarray(p)
    if p.ndim == 1 and p.size > 1 and a_ndim >= 2:
        return p.reshape(-1, 1)
    return p.reshape(()) if p.size == 1 else p


def _col_param(p: np.ndarray | None) -> np.ndarray | None:
    """A per-column (N) parameter of the right operand (broadcasts along the last axis)."""
    if p is None:
        return None
    p = np.asarray(p)
    return p.reshape(()) if p.size == 1 else p


def requantize(acc: np.ndarray, multiplier: np.ndarray, zp: np.ndarray | None,
               out_dtype: np.dtype) -> np.ndarray:
    """saturate(round_half_even(float32(acc) * multiplier) + zp) in ``out_dtype``."""
    y = np.rint(acc.astype(np.float32) * multiplier)
    if zp is not None:
        y = y + np.asarray(zp).astype(np.float32)
    return saturate_cast(y, out_dtype)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def int_conv(x: np.ndarray, w: np.ndarray | IntOperand, attrs: dict, x_zp: np.ndarray | None = None) -> np.ndarray:
    """Exact int32 convolution of integer ``x`` minus its scalar zero point ``x_zp`` and centered
    (int32) ``w``: 2-D on 8-bit ``x`` the VNNI kernel (nodes/int8_gemm.py); else through the float
    Conv kernel, in float32 when its sums are exact, else (one group) in float32 over chunks of
    input channels whose sums are, else in float64. The float results are exact integers, so
    they convert to int32 without rounding."""
    op = w if isinstance(w, IntOperand) else IntOperand(w)
    if x_zp is not None and np.size(x_zp) != 1:
        x, x_zp = _centered(x, x_zp), None
    zp = int(np.asarray(x_zp).reshape(-1)[0]) if x_zp is not None else 0
    strides, dils, pb, pe = conv_geometry(attrs, x.shape, op.b.shape)
    group = int(attrs["group"])
    rows = op.int8_rows(group) if x.dtype in _BYTE_TYPES and x.ndim == 4 and x.size else None
    if rows is not None:
        oshape = tuple((x.shape[2 + i] + pb[i] + pe[i] - (op.b.shape[2 + i] - 1) * dils[i] - 1) // strides[i] + 1
                       for i in range(2))
        y = rows(x, zp, strides, dils, pb, oshape)
        if y is not None:
            return y
    amax = max(abs(int(x.max()) - zp), abs(int(x.min()) - zp)) if x.size else 0
    taps = int(np.prod(op.b.shape[2:]))
    k = op.b.shape[1] * taps
    chunk = exact_chunk(amax, op.bmax, k)
    if chunk and chunk < k and (group != 1 or chunk < taps):
        chunk = 0
    dt = np.dtype(np.float32) if chunk else np.dtype(np.float64)
    xf = x.astype(dt)
    if zp:
        xf -= dt.type(zp)
    wf = op.as_float(dt)
    if chunk and chunk < k:
        step = chunk // taps
        return _chunked_exact(op.b.shape[1], step, lambda c0, c1: conv_nd(
            xf[:, c0:c1], wf[:, c0:c1], None, strides, dils, pb, pe, 1))
    # the kept float weights' kernel (packed once: re-packing took ~3 ms a run of dddd_common_old)
    cache = op.conv_caches.setdefault(dt, {})
    return conv_nd(xf, wf, None, strides, dils, pb, pe, group, cache).astype(np.int32)


def _w_channel_param(p: np.ndarray | None, w_ndim: int) -> np.ndarray | None:
    """A per-output-channel (M) parameter of W shaped (M, 1, 1, ...)."""
    if p is None:
        return None
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(())
    return p.reshape((-1,) + (1,) * (w_ndim - 1))


def _matmul_macs(ctx: NodeContext, a_index: int) -> int:
    a, out = ctx.type(a_index), ctx.out_type(0)
    if a.is_static and out.is_static and a.shape:
        return int(out.numel() or 0) * int(a.shape[-1])  # type: ignore[arg-type]
    return 0


_CONV_ATTRS = (
    AttrSpec("auto_pad", "string", "NOTSET", "Automatic padding: NOTSET uses pads.",
             choices=("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")),
    AttrSpec("dilations", "ints", None, "Dilation per spatial axis (default 1)."),
    AttrSpec("group", "int", 1, "Number of channel groups."),
    AttrSpec("kernel_shape", "ints", None, "Kernel size per spatial axis (default: from W)."),
    AttrSpec("pads", "ints", None, "Padding [x1_begin, ..., x1_end, ...]."),
    AttrSpec("strides", "ints", None, "Stride per spatial axis (default 1)."),
)


class _IntConvSpec(OpSpec):
    """What ConvInteger and QLinearConv share: Conv's attributes, one output and Conv's MACs,
    with the weight at input ``w_index`` (their output shape is ``conv_out_shape`` with it)."""

    outputs = (Port("y"),)
    attrs = _CONV_ATTRS
    w_index = 1

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """The GEMMs of the float Conv."""
        return conv_gemm(ctx, 0, self.w_index)

    def work(self, ctx: NodeContext) -> Work:
        """MACs as for Conv."""
        w = super().work(ctx)
        w.macs = conv_macs(ctx.out_type(0).shape, ctx.shape(self.w_index))
        return w


class _IntMatMulSpec(OpSpec):
    """What MatMulInteger and QLinearMatMul share: MACs and GEMMs as for MatMul, with B at
    input ``b_index``."""

    b_index = 1

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """The GEMMs of the float MatMul."""
        return matmul_gemm(ctx, 0, self.b_index)

    def work(self, ctx: NodeContext) -> Work:
        """MACs as for MatMul."""
        w = super().work(ctx)
        w.macs = _matmul_macs(ctx, 0)
        return w


@register("ConvInteger", since=10)
class ConvIntegerSpec(_IntConvSpec):
    """Integer convolution with zero points, int32 output."""

    doc = "int32 Y = conv(x - x_zero_point, w - w_zero_point); w_zero_point may be per output channel."
    inputs = (Port("x"), Port("w"), Port("x_zero_point", optional=True), Port("w_zero_point", optional=True))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Conv output shape, int32."""
        return [TensorType(np.dtype(np.int32), conv_out_shape(ctx, self.w_index))]

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, x_zp: np.ndarray | None = None,
                  w_zp: np.ndarray | None = None) -> np.ndarray:
        """Exact integer convolution (padding contributes x_zero_point, i.e. zero)."""
        wc = cached_int_operand(ctx, "W", (w, w_zp), lambda: _centered(w, _w_channel_param(w_zp, w.ndim)))
        return int_conv(x, wc, ctx.attrs, x_zp)


@register("QLinearConv", since=10)
class QLinearConvSpec(_IntConvSpec):
    """Quantized convolution: integer accumulation, bias and requantization."""

    doc = ("y = saturate(round(conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale) + y_zp); "
           "w_scale/w_zero_point may be per output channel.")
    inputs = (Port("x"), Port("x_scale"), Port("x_zero_point"), Port("w"), Port("w_scale"),
              Port("w_zero_point"), Port("y_scale"), Port("y_zero_point"), Port("B", optional=True))
    w_index = 3

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Conv output shape with the type of y_zero_point (else of x)."""
        dt = ctx.dtype(7) if ctx.has_input(7) else ctx.dtype(0)
        return [TensorType(dt, conv_out_shape(ctx, self.w_index))]

    def reference(self, ctx: RunContext, x: np.ndarray, x_scale: np.ndarray, x_zp: np.ndarray | None,
                  w: np.ndarray, w_scale: np.ndarray, w_zp: np.ndarray | None, y_scale: np.ndarray,
                  y_zp: np.ndarray | None, b: np.ndarray | None = None) -> np.ndarray:
        """int32 accumulation + bias, float32 requantization rounding half to even."""
        wc = cached_int_operand(ctx, "W", (w, w_zp), lambda: _centered(w, _w_channel_param(w_zp, w.ndim)))
        acc = int_conv(x, wc, ctx.attrs, x_zp)
        nsp = x.ndim - 2
        if b is not None:
            acc = acc + b.astype(np.int32).reshape((1, -1) + (1,) * nsp)
        ws = np.asarray(w_scale)
        ws = ws.reshape(()) if ws.size == 1 else ws.reshape((1, -1) + (1,) * nsp)
        mult = (_f32(x_scale).reshape(()) * _f32(ws)) / _f32(y_scale).reshape(())
        out = y_zp.dtype if y_zp is not None else x.dtype
        return requantize(acc, mult, None if y_zp is None else np.asarray(y_zp).reshape(()), out)


@register("MatMulInteger", since=10)
class MatMulIntegerSpec(_IntMatMulSpec):
    """Integer matmul with zero points, int32 output."""

    doc = ("int32 Y = (A - a_zero_point) @ (B - b_zero_point); a_zero_point may be per row, "
           "b_zero_point per column.")
    inputs = (Port("A"), Port("B"), Port("a_zero_point", optional=True), Port("b_zero_point", optional=True))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """MatMul shape, int32."""
        return [TensorType(np.dtype(np.int32), matmul_shape(ctx.shape(0), ctx.shape(1)))]

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None = None,
                  b_zp: np.ndarray | None = None) -> np.ndarray:
        """Exact integer product."""
        return int_matmul_raw(a, _row_param(a_zp, a.ndim), cached_int_operand(
            ctx, "B", (b, b_zp), lambda: _centered(b, _col_param(b_zp))))


@register("QLinearMatMul", since=10)
class QLinearMatMulSpec(_IntMatMulSpec):
    """Quantized matmul: integer accumulation and requantization."""

    doc = "y = saturate(round((a - a_zp) @ (b - b_zp) * a_scale * b_scale / y_scale) + y_zp)."
    inputs = (Port("a"), Port("a_scale"), Port("a_zero_point"), Port("b"), Port("b_scale"),
              Port("b_zero_point"), Port("y_scale"), Port("y_zero_point"))
    b_index = 3

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """MatMul shape with the type of y_zero_point."""
        dt = ctx.dtype(7) if ctx.has_input(7) else ctx.dtype(0)
        return [TensorType(dt, matmul_shape(ctx.shape(0), ctx.shape(3)))]

    def reference(self, ctx: RunContext, a: np.ndarray, a_scale: np.ndarray, a_zp: np.ndarray | None,
                  b: np.ndarray, b_scale: np.ndarray, b_zp: np.ndarray | None, y_scale: np.ndarray,
                  y_zp: np.ndarray | None) -> np.ndarray:
        """int32 accumulation, float32 requantization rounding half to even."""
        acc = int_matmul_raw(a, _row_param(a_zp, a.ndim), cached_int_operand(
            ctx, "B", (b, b_zp), lambda: _centered(b, _col_param(b_zp))))
        mult = (_f32(_row_param(a_scale, a.ndim)) * _f32(_col_param(b_scale))) / _f32(_col_param(y_scale))
        out = y_zp.dtype if y_zp is not None else a.dtype
        return requantize(acc, mult, _col_param(y_zp), out)
