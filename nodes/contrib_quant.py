"""onnxruntime's com.microsoft quantized ops, as its quantization tools emit them.

QOperator form: QLinearAdd, QLinearMul (8-bit: MLAS's x86-64 arithmetic, mlas_qlinear_add /
mlas_qlinear_mul; other types y = saturate(round(f(dq(a), dq(b)) / y_scale) + y_zp)),
QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax (onnxruntime builds a 256-entry table of
the float function of every quantized input value; so do we), QLinearConcat,
QLinearGlobalAveragePool, QLinearAveragePool (integer sums requantized once), QGemm
(integer product, int32 bias, float or requantized output); dynamic quantization:
DynamicQuantizeMatMul and MatMulIntegerToFloat (A quantized to uint8 from its own range, exact
integer product, * a_scale * b_scale + bias) and DynamicQuantizeLSTM (LSTM whose W and R are
int8, stored transposed as (dirs, input, 4H); every GEMM quantizes its float operand to uint8
from that operand's range, as onnxruntime's quantized LSTM does); and the contrib
QuantizeLinear / DequantizeLinear (the ONNX ops with an ``axis`` attribute).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nodes._util import broadcast_shapes
from nodes.matmul import matmul_shape
from nodes.pooling import AveragePoolSpec
from nodes.quant_kernels import SMALL_M, QuantizedGemm
from nodes.quant_ops import (
    DequantizeLinearSpec,
    IntOperand,
    QuantizeLinearSpec,
    _centered,
    _col_param,
    _row_param,
    cached_int_operand,
    dequantize_linear,
    int_matmul_raw,
    quantize_linear,
    requantize,
)
from nodes.recurrent import LSTMSpec, _clipper, _RecurrentSpec, lstm_cell
from nodes.registry import register
from nodes.spec import AttrSpec, NodeContext, OpError, OpSpec, Port, RunContext, Work
from nodes.types import TensorType

MS = "com.microsoft"


def _scalar(p: np.ndarray | None) -> np.ndarray | None:
    return None if p is None else np.asarray(p).reshape(())


def _dq(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    return dequantize_linear(x, np.asarray(scale, np.float32), zp, np.dtype(np.float32))


def _q(y: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    return quantize_linear(y.astype(np.float32, copy=False), np.asarray(scale, np.float32), zp, dtype)


def _qtype(ctx: NodeContext, zp_index: int, fallback: int = 0) -> np.dtype | None:
    if ctx.has_input(zp_index) and ctx.dtype(zp_index) is not None:
        return ctx.dtype(zp_index)
    return ctx.dtype(fallback)


def dynamic_quantize_u8(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """uint8 quantization from the data's own range (min/max widened to include 0); a range of
    zero gives scale 1, as onnxruntime's GetQuantizationParameter does."""
    xf = x.astype(np.float32, copy=False)
    lo = np.float32(min(0.0, float(xf.min()))) if xf.size else np.float32(0)
    hi = np.float32(max(0.0, float(xf.max()))) if xf.size else np.float32(0)
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.uint8(np.rint(np.clip(np.float32(0) - lo / scale, 0, 255)))
    q = np.clip(np.rint(xf / scale) + np.float32(zp), 0, 255).astype(np.uint8)
    return q, scale, zp


def _scalar_side(sa: tuple[int, ...], sb: tuple[int, ...]) -> int | None:
    """Which input onnxruntime's broadcast loop hands MLAS as a scalar per span: 0 (A), 1 (B) or
    None (both spans are vectors). The span is the innermost run of output axes; an input whose
    size is 1 along the innermost axis that is not 1 in the output is the scalar there."""
    nd = max(len(sa), len(sb))
    pa, pb = (1,) * (nd - len(sa)) + tuple(sa), (1,) * (nd - len(sb)) + tuple(sb)
    for da, db in zip(reversed(pa), reversed(pb)):
        if max(da, db) == 1:
            continue
        return 0 if da == 1 else (1 if db == 1 else None)
    return 0


def _zp_int(zp: np.ndarray | None) -> int:
    return 0 if zp is None else int(np.asarray(zp).reshape(()))


def _saturate(r: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """cvtps2dq (round half to even), then the saturating packs to 16 and 8 bits."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(r), info.min, info.max).astype(dtype)


def mlas_qlinear_add(a: np.ndarray, a_s: float, a_zp: int, b: np.ndarray, b_s: float, b_zp: int,
                     c_s: float, c_zp: int) -> np.ndarray:
    """QLinearAdd as onnxruntime 1.32's x86-64 8-bit kernel computes it (the SSE2 helper of
    MLAS's qladd.cpp, in a build that contracts its multiply-adds into FMAs; measured): the zero
    points folded into one float32 constant, fixed = zC - fma(rA, zA, rB * zB) with
    rA = sA / sC, rB = sB / sC, then round(fma(a, rA, fma(b, rB, fixed))). A scalar span (per
    onnxruntime's broadcast loop, which passes the vector first) is folded into the constant the
    same way, so an A scalar per span swaps the roles."""
    f = np.float32
    if _scalar_side(a.shape, b.shape) == 0:  # the vector is B: MLAS gets (B, A)
        a, a_s, a_zp, b, b_s, b_zp = b, b_s, b_zp, a, a_s, a_zp
    ra, rb = f(f(a_s) / f(c_s)), f(f(b_s) / f(c_s))
    fixed = f(f(c_zp) - _fma(f(ra), f(a_zp), f(rb * f(b_zp))))
    return _saturate(_fma(a.astype(np.float32), ra, _fma(b.astype(np.float32), rb, fixed)), a.dtype)


def _fma(x, y, z) -> np.ndarray:
    """float32 x * y + z rounded once (the float64 product is exact)."""
    return (np.asarray(x, np.float64) * np.float64(y) + np.asarray(z, np.float64)).astype(np.float32)


def mlas_qlinear_mul(a: np.ndarray, a_s: float, a_zp: int, b: np.ndarray, b_s: float, b_zp: int,
                     c_s: float, c_zp: int) -> np.ndarray:
    """QLinearMul as MLAS's x86-64 kernel (qlmul.cpp, SSE2) computes it: the exact integer
    product (a - zA)(b - zB), times the float32 ratio sA * sB / sC, plus zC in float32, rounded."""
    f = np.float32
    ratio = f(f(f(a_s) * f(b_s)) / f(c_s))
    prod = (a.astype(np.int32) - a_zp) * (b.astype(np.int32) - b_zp)
    return _saturate(prod.astype(np.float32) * ratio + f(c_zp), a.dtype)


class _QBinarySpec(OpSpec):
    """QLinearAdd / QLinearMul: A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp."""

    family = "contrib"
    inputs = (Port("A"), Port("A_scale"), Port("A_zero_point", optional=True), Port("B"), Port("B_scale"),
              Port("B_zero_point", optional=True), Port("C_scale"), Port("C_zero_point", optional=True))
    outputs = (Port("C"),)

    def op(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The float operation."""
        raise NotImplementedError

    def mlas(self, *args: Any) -> np.ndarray:
        """onnxruntime's 8-bit kernel."""
        raise NotImplementedError

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast shape, the quantized type of A."""
        sa, sb = ctx.shape(0), ctx.shape(3)
        shape = broadcast_shapes(sa, sb) if sa is not None and sb is not None else None
        return [TensorType(ctx.dtype(0), shape)]

    def reference(self, ctx: RunContext, a: np.ndarray, a_s: np.ndarray, a_zp: np.ndarray | None,
                  b: np.ndarray, b_s: np.ndarray, b_zp: np.ndarray | None, c_s: np.ndarray,
                  c_zp: np.ndarray | None) -> np.ndarray:
        """8-bit operands: onnxruntime's MLAS arithmetic; others: dequantize, operate in float32,
        requantize."""
        if a.dtype in (np.int8, np.uint8) and a.dtype == b.dtype and all(
                np.asarray(p).size == 1 for p in (a_s, b_s, c_s)):
            return self.mlas(a, float(np.asarray(a_s).reshape(())), _zp_int(a_zp), b,
                             float(np.asarray(b_s).reshape(())), _zp_int(b_zp),
                             float(np.asarray(c_s).reshape(())), _zp_int(c_zp))
        y = self.op(_dq(a, a_s, _scalar(a_zp)), _dq(b, b_s, _scalar(b_zp)))
        return _q(y, c_s, _scalar(c_zp), a.dtype)


@register("QLinearAdd", since=1, domain=MS)
class QLinearAddSpec(_QBinarySpec):
    """Quantized elementwise addition with broadcasting."""

    doc = "C = quantize(dequantize(A) + dequantize(B)) with C_scale, C_zero_point."

    def op(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a + b."""
        return a + b

    def mlas(self, *args: Any) -> np.ndarray:
        """mlas_qlinear_add."""
        return mlas_qlinear_add(*args)


@register("QLinearMul", since=1, domain=MS)
class QLinearMulSpec(_QBinarySpec):
    """Quantized elementwise multiplication with broadcasting."""

    doc = "C = quantize(dequantize(A) * dequantize(B)) with C_scale, C_zero_point."

    def op(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a * b."""
        return a * b

    def mlas(self, *args: Any) -> np.ndarray:
        """mlas_qlinear_mul."""
        return mlas_qlinear_mul(*args)


class _QUnarySpec(OpSpec):
    """X, X_scale, X_zp, Y_scale, Y_zp: y = quantize(f(dequantize(x))) through a 256-entry table."""

    family = "contrib"
    inputs = (Port("X"), Port("X_scale"), Port("X_zero_point", optional=True), Port("Y_scale"),
              Port("Y_zero_point", optional=True))

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """The float function."""
        raise NotImplementedError

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Shape of X, the type of Y_zero_point (else of X)."""
        return [TensorType(_qtype(ctx, 4), ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray, xs: np.ndarray, xzp: np.ndarray | None,
                  ys: np.ndarray, yzp: np.ndarray | None) -> np.ndarray:
        """Look every input value up in the table of f over the 256 codes."""
        if x.dtype not in (np.uint8, np.int8):
            raise OpError(f"{self.op_type} takes int8 or uint8, got {x.dtype}")
        codes = np.arange(256, dtype=np.int32) + (-128 if x.dtype == np.int8 else 0)
        deq = _dq(codes.astype(x.dtype), xs, _scalar(xzp))
        out_dt = yzp.dtype if yzp is not None else x.dtype
        table = _q(self.fn(deq, ctx.attrs), ys, _scalar(yzp), out_dt)
        idx = x.astype(np.int32) - (-128 if x.dtype == np.int8 else 0)
        return table[idx]


@register("QLinearSigmoid", since=1, domain=MS)
class QLinearSigmoidSpec(_QUnarySpec):
    """Quantized sigmoid."""

    doc = "Y = quantize(sigmoid(dequantize(X)))."

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """Sigmoid."""
        with np.errstate(over="ignore"):
            return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


@register("QLinearLeakyRelu", since=1, domain=MS)
class QLinearLeakyReluSpec(_QUnarySpec):
    """Quantized leaky ReLU."""

    doc = "Y = quantize(leaky_relu(dequantize(X), alpha))."
    attrs = (AttrSpec("alpha", "float", 0.01, "Slope for x < 0."),)

    def fn(self, x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
        """x for x >= 0, alpha x otherwise."""
        return np.where(x >= 0, x, x * np.float32(float(attrs["alpha"])))


@register("QLinearSoftmax", since=1, domain=MS)
class QLinearSoftmaxSpec(OpSpec):
    """Quantized softmax along an axis (exp through a table of the 256 codes)."""

    family = "contrib"
    doc = "Y = quantize(softmax(dequantize(X), axis)); opset < 13 flattens the trailing axes."
    inputs = (Port("X"), Port("X_scale"), Port("x_zero_point", optional=True), Port("y_scale"),
              Port("y_zero_point", optional=True))
    attrs = (AttrSpec("axis", "int", -1, "Softmax axis."),
             AttrSpec("opset", "int", 13, "The ONNX opset whose Softmax semantics apply."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Shape of X, the type of y_zero_point."""
        return [TensorType(_qtype(ctx, 4), ctx.shape(0))]

    def reference(self, ctx: RunContext, x: np.ndarray, xs: np.ndarray, xzp: np.ndarray | None,
                  ys: np.ndarray, yzp: np.ndarray | None) -> np.ndarray:
        """onnxruntime's algorithm: a float32 table of exp over the 256 code distances from the row
        maximum (built in double, scaled up so the row sums stay in range), a float32 row sum in
        order, then round-half-even(table * floor(1 / y_scale) / sum, in double) + y_zp. The multiplier is
        floor(1 / y_scale), not 1 / y_scale, and the zero point does not enter the table (its
        softmax is shift-invariant); results saturate to the output type (onnxruntime 1.32)."""
        if x.dtype not in (np.uint8, np.int8):
            raise OpError(f"QLinearSoftmax takes int8 or uint8, got {x.dtype}")
        axis = int(ctx.attrs["axis"]) % max(x.ndim, 1)
        if int(ctx.attrs["opset"]) < 13:
            rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
        else:
            rows = np.moveaxis(x, axis, -1)
            rows = rows.reshape(-1, rows.shape[-1])
        d = rows.shape[-1]
        out_dt = yzp.dtype if yzp is not None else x.dtype
        y = _ort_softmax_rows(rows.astype(np.int64), d, float(np.asarray(xs).reshape(())),
                              float(np.asarray(ys).reshape(())), int(_scalar(yzp)) if yzp is not None else 0)
        info = np.iinfo(out_dt)
        y = np.clip(y, info.min, info.max)
        if int(ctx.attrs["opset"]) < 13:
            return y.astype(out_dt).reshape(x.shape)
        moved = list(np.moveaxis(x, axis, -1).shape)
        return np.moveaxis(y.reshape(moved), -1, axis).astype(out_dt)


def _ort_softmax_rows(rows: np.ndarray, d: int, x_scale: float, y_scale: float, y_zp: int) -> np.ndarray:
    """QLinearSoftmax over the last axis of (N, D) integer codes; int64 results before the cast.

    As onnxruntime 1.32 computes it (probed bit for bit): the headroom log is taken in float
    (logf of FLT_MAX / D; we round the double log to float, which equals glibc's logf for every
    D < 60594), the 256 table entries are glibc's double exp (math.exp, not numpy's SIMD exp)
    rounded to float, the row sum is float32 in index order, and the quotient
    table * floor(1 / y_scale) / sum is formed in double before round-half-even."""
    import math

    headroom = float(np.float32(np.finfo(np.float32).max) / np.float32(d))  # float / size_t, in float
    log_headroom = float(np.float32(math.log(headroom)))  # logf
    shift = max(0.0, log_headroom - 5.0) / x_scale
    table = np.array([math.exp((shift - k) * x_scale) for k in range(256)]).astype(np.float32)
    e = table[rows.max(axis=1, keepdims=True) - rows]
    total = np.zeros(len(rows), np.float32)
    for k in range(d):  # float32 sum in index order, as the runtime adds
        total += e[:, k]
    mult = float(math.floor(np.float32(1.0) / np.float32(y_scale)))
    q = e.astype(np.float64)
    q *= mult
    with np.errstate(divide="ignore", invalid="ignore"):
        q /= total[:, None]
    np.rint(q, out=q)
    return np.nan_to_num(q, nan=0.0, copy=False).astype(np.int64) + y_zp


@register("QLinearConcat", since=1, domain=MS)
class QLinearConcatSpec(OpSpec):
    """Concatenation of quantized tensors with different scales into one scale."""

    family = "contrib"
    doc = "Y = concat(requantize(X_i from its scale/zero point to Y's), axis); inputs Y_scale, Y_zp, then (X, scale, zp) triples."
    inputs = (Port("Y_scale"), Port("Y_zero_point"), Port("inputs", variadic=True))
    attrs = (AttrSpec("axis", "int", None, "Concatenation axis (required)."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Concat's shape of the tensors at positions 2, 5, 8, ..."""
        if (ctx.n_inputs - 2) % 3 or ctx.n_inputs < 5:
            raise OpError("QLinearConcat takes Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples")
        if ctx.attrs.get("axis") is None:
            raise OpError("QLinearConcat needs the axis attribute")
        shapes = [ctx.shape(i) for i in range(2, ctx.n_inputs, 3)]
        dt = ctx.dtype(1)
        if any(s is None for s in shapes):
            return [TensorType(dt)]
        rank = len(shapes[0])
        axis = int(ctx.attrs["axis"]) % rank
        total: Any = 0
        for s in shapes:
            if len(s) != rank:
                raise OpError("QLinearConcat inputs differ in rank")
            total = total + s[axis] if isinstance(total, int) and isinstance(s[axis], int) else None
        out = list(shapes[0])
        out[axis] = total
        return [TensorType(dt, tuple(out))]

    def reference(self, ctx: RunContext, ys: np.ndarray, yzp: np.ndarray, *rest: np.ndarray | None) -> np.ndarray:
        """Requantize each piece, then concatenate."""
        parts = []
        for i in range(0, len(rest), 3):
            x, xs, xzp = rest[i], rest[i + 1], rest[i + 2]
            parts.append(_q(_dq(x, xs, _scalar(xzp)), ys, _scalar(yzp), yzp.dtype))
        return np.concatenate(parts, axis=int(ctx.attrs["axis"]))


def _avg_requant(s: np.ndarray, count: np.ndarray | int, xs: np.ndarray, xzp: np.ndarray | None,
                 ys: np.ndarray, yzp: np.ndarray | None, out_dt: np.dtype) -> np.ndarray:
    """Requantize integer window sums as MLAS's QLinearGlobalAveragePool does (x86-64):
    round(float32(sum_centered) * float32(x_scale / (y_scale * count))) + y_zp, the scale one
    float32 constant (sum * (x_scale / y_scale) / count rounds some halves the other way)."""
    scale = np.float32(np.asarray(xs).reshape(())) / (np.float32(np.asarray(ys).reshape(())) * np.float32(count))
    y = np.rint(s.astype(np.float32) * scale)
    if yzp is not None:
        y = y + np.float32(np.asarray(yzp).reshape(()))
    info = np.iinfo(out_dt)
    return np.clip(y, info.min, info.max).astype(out_dt)


@register("QLinearGlobalAveragePool", since=1, domain=MS)
class QLinearGlobalAveragePoolSpec(OpSpec):
    """Quantized global average pooling (NCHW, or NHWC with channels_last)."""

    family = "contrib"
    doc = "Y = requantize(mean over the spatial axes of (X - X_zp)), channels_last selects NHWC."
    inputs = (Port("X"), Port("x_scale"), Port("x_zero_point", optional=True), Port("y_scale"),
              Port("y_zero_point", optional=True))
    attrs = (AttrSpec("channels_last", "int", 0, "1: X is (N, H, W, C)."),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Spatial axes become 1."""
        s = ctx.shape(0)
        if s is not None:
            s = (s[0], *([1] * (len(s) - 2)), s[-1]) if ctx.attrs["channels_last"] else (s[0], s[1], *([1] * (len(s) - 2)))
        return [TensorType(_qtype(ctx, 4), s)]

    def reference(self, ctx: RunContext, x: np.ndarray, xs: np.ndarray, xzp: np.ndarray | None,
                  ys: np.ndarray, yzp: np.ndarray | None) -> np.ndarray:
        """Exact integer sums, one requantization."""
        axes = tuple(range(1, x.ndim - 1)) if ctx.attrs["channels_last"] else tuple(range(2, x.ndim))
        c = _centered(x, _scalar(xzp)).astype(np.int64)
        s = c.sum(axis=axes, keepdims=True)
        n = int(np.prod([x.shape[a] for a in axes]))
        return _avg_requant(s, n, xs, xzp, ys, yzp, yzp.dtype if yzp is not None else x.dtype)


def ort_average_pool(pool: AveragePoolSpec, ctx: RunContext, x: np.ndarray, xs: np.float32, xzp: int,
                     ys: np.float32, yzp: int) -> np.ndarray:
    """QLinearAveragePool as onnxruntime computes it (qlinear_pool.cc, NCHW): every input
    dequantized to float32, each window summed in float32 in row-major order over the taps inside
    the input, divided by its count (the kernel size with count_include_pad), then
    round(y / y_scale + y_zp) with the zero point added in float32 before the rounding."""
    import itertools

    from nodes.pooling import pad_spatial

    kernel, strides, _, pb, pe, out = pool._geometry(ctx, x)
    xf = (x.astype(np.int32) - xzp).astype(np.float32) * xs
    xp = pad_spatial(xf, pb, pe, 0)
    acc = np.zeros((*x.shape[:2], *out), np.float32)
    for tap in itertools.product(*(range(k) for k in kernel)):
        acc += xp[(..., *(slice(t, t + s * (o - 1) + 1, s) for t, s, o in zip(tap, strides, out)))]
    if ctx.attrs.get("count_include_pad", 0):
        count = np.full(out, float(np.prod(kernel)), np.float32)
    else:
        count = np.ones(out, np.float32)
        for i, size in enumerate(x.shape[2:]):
            pos = np.arange(out[i])[:, None] * strides[i] + np.arange(kernel[i])[None, :]
            c = ((pos >= pb[i]) & (pos < pb[i] + size)).sum(axis=1).astype(np.float32)
            count = count * c.reshape([-1 if j == i else 1 for j in range(len(out))])
    with np.errstate(divide="ignore", invalid="ignore"):
        y = acc / count / ys + np.float32(yzp)
    return _saturate(y, x.dtype)


@register("QLinearAveragePool", since=1, domain=MS)
class QLinearAveragePoolSpec(OpSpec):
    """Quantized average pooling with AveragePool's window attributes."""

    family = "contrib"
    doc = "Y = requantize(AveragePool(X - X_zp)) (count_include_pad as in AveragePool), channels_last selects NHWC."
    inputs = QLinearGlobalAveragePoolSpec.inputs
    attrs = (*AveragePoolSpec.attrs, AttrSpec("channels_last", "int", 0, "1: X is (N, H, W, C)."))

    def _pool(self) -> AveragePoolSpec:
        from nodes import registry

        return registry.get("AveragePool")  # type: ignore[return-value]

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """AveragePool's output shape (channels moved for NHWC)."""
        pool = self._pool()
        s = ctx.shape(0)
        last = bool(ctx.attrs["channels_last"])
        if s is not None and last:
            s = (s[0], s[-1], *s[1:-1])
        sub = NodeContext(ctx.node, pool, [TensorType(ctx.dtype(0), s)], [None])
        sub.attrs = {k: v for k, v in ctx.attrs.items() if k != "channels_last"}
        out = pool.infer(sub)[0].shape
        if out is not None and last:
            out = (out[0], *out[2:], out[1])
        return [TensorType(_qtype(ctx, 4), out)]

    def reference(self, ctx: RunContext, x: np.ndarray, xs: np.ndarray, xzp: np.ndarray | None,
                  ys: np.ndarray, yzp: np.ndarray | None) -> np.ndarray:
        """8-bit: onnxruntime's arithmetic (mlas_average_pool); else integer window sums
        (AveragePool on exact small ints in float64) and one requantization."""
        last = bool(ctx.attrs["channels_last"])
        pool = self._pool()
        sub = RunContext(ctx.node, {k: v for k, v in ctx.attrs.items() if k != "channels_last"}, 19)
        if x.dtype in (np.int8, np.uint8) and (yzp is None or yzp.dtype == x.dtype) and \
                all(int(d) == 1 for d in (ctx.attrs.get("dilations") or [1])):
            xn = np.moveaxis(x, -1, 1) if last else x
            y = ort_average_pool(pool, sub, xn, np.float32(np.asarray(xs).reshape(())), _zp_int(xzp),
                                 np.float32(np.asarray(ys).reshape(())), _zp_int(yzp))
            return np.moveaxis(y, 1, -1) if last else y
        c = _centered(x, _scalar(xzp)).astype(np.float64)
        if last:
            c = np.moveaxis(c, -1, 1)
        mean = np.asarray(pool.reference(sub, c))
        out_dt = yzp.dtype if yzp is not None else x.dtype
        y = _avg_requant(mean, 1, xs, xzp, ys, yzp, out_dt)
        return np.moveaxis(y, 1, -1) if last else y


@register("QGemm", since=1, domain=MS)
class QGemmSpec(OpSpec):
    """Quantized Gemm: integer product, int32 bias C, float output or requantized with y_scale."""

    family = "contrib"
    doc = "Y = alpha * (A - a_zp) @ (B - b_zp) * a_scale * b_scale + C * a_scale * b_scale; quantized with y_scale/y_zp when given."
    inputs = (Port("A"), Port("a_scale"), Port("a_zero_point"), Port("B"), Port("b_scale"),
              Port("b_zero_point"), Port("C", optional=True), Port("y_scale", optional=True),
              Port("y_zero_point", optional=True))
    attrs = (AttrSpec("alpha", "float", 1.0, "Scale of the product."),
             AttrSpec("transA", "int", 0, "Transpose A."),
             AttrSpec("transB", "int", 0, "Transpose B."))

    def _mkn(self, ctx: NodeContext) -> tuple[Any, Any, Any]:
        sa, sb = ctx.shape(0), ctx.shape(3)
        m = k = n = None
        if sa is not None:
            m, k = (sa[1], sa[0]) if ctx.attrs["transA"] else (sa[0], sa[1])
        if sb is not None:
            n = sb[0] if ctx.attrs["transB"] else sb[1]
        return m, k, n

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(M, N): float32 without y_scale, else the quantized type."""
        m, _, n = self._mkn(ctx)
        if ctx.has_input(7):
            dt = ctx.dtype(8) if ctx.has_input(8) else np.dtype(np.uint8)
        else:
            dt = np.dtype(np.float32)
        return [TensorType(dt, (m, n))]

    def reference(self, ctx: RunContext, a: np.ndarray, a_s: np.ndarray, a_zp: np.ndarray | None,
                  b: np.ndarray, b_s: np.ndarray, b_zp: np.ndarray | None, c: np.ndarray | None = None,
                  y_s: np.ndarray | None = None, y_zp: np.ndarray | None = None) -> np.ndarray:
        """int32 accumulation (+ C), scaled in float32."""
        at = ctx.attrs
        aa = a.T if at["transA"] else a
        bb = b.T if at["transB"] else b
        bzp = _col_param(b_zp)
        acc = int_matmul_raw(aa, _scalar(a_zp), cached_int_operand(ctx, "B", (b, b_zp), lambda: _centered(bb, bzp)))
        if c is not None:
            acc = acc + c.astype(np.int32)
        mult = np.float32(float(at["alpha"])) * np.float32(np.asarray(a_s).reshape(())) * _col_param(
            np.asarray(b_s, np.float32))
        if y_s is None:
            return (acc.astype(np.float32) * mult).astype(np.float32)
        m2 = (mult / np.float32(np.asarray(y_s).reshape(()))).astype(np.float32)
        out = y_zp.dtype if y_zp is not None else np.dtype(np.uint8)
        return requantize(acc, m2, _scalar(y_zp), out)

    def work(self, ctx: NodeContext) -> Work:
        """MACs = M * K * N."""
        w = super().work(ctx)
        m, k, n = self._mkn(ctx)
        if all(isinstance(d, int) for d in (m, k, n)):
            w.macs = m * k * n
        return w


class _IntToFloatSpec(OpSpec):
    family = "contrib"

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """MatMul's shape, float32."""
        return [TensorType(np.dtype(np.float32), matmul_shape(ctx.shape(0), ctx.shape(1)))]

    def work(self, ctx: NodeContext) -> Work:
        """MACs = prod(output) * K."""
        w = super().work(ctx)
        n, sa = ctx.out_type(0).numel(), ctx.shape(0)
        if n is not None and sa and isinstance(sa[-1], int):
            w.macs = int(n) * int(sa[-1])
        return w

    @staticmethod
    def _finish(ctx: RunContext, qa: np.ndarray, a_zp: Any, b: np.ndarray, b_zp: np.ndarray | None,
                scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        acc = int_matmul_raw(qa, a_zp, cached_int_operand(ctx, "B", (b, b_zp), lambda: _centered(b, _col_param(b_zp))))
        y = acc.astype(np.float32) * scale.astype(np.float32)
        if bias is not None:
            y = y + bias.astype(np.float32)
        return y.astype(np.float32)


@register("DynamicQuantizeMatMul", since=1, domain=MS)
class DynamicQuantizeMatMulSpec(_IntToFloatSpec):
    """Float A quantized to uint8 from its own range, times an int8/uint8 B."""

    doc = "Y = ((quant_u8(A) - a_zp) @ (B - b_zp)) * a_scale * b_scale + bias; a_scale/a_zp from A's range."
    inputs = (Port("A"), Port("B"), Port("b_scale"), Port("b_zero_point", optional=True), Port("bias", optional=True))

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray, b_s: np.ndarray,
                  b_zp: np.ndarray | None = None, bias: np.ndarray | None = None) -> np.ndarray:
        """Quantize A, exact integer product, scale, bias."""
        qa, sa, zpa = dynamic_quantize_u8(a)
        return self._finish(ctx, qa, np.asarray(zpa), b, b_zp, np.float32(sa) * _col_param(np.asarray(b_s, np.float32)), bias)


@register("MatMulIntegerToFloat", since=1, domain=MS)
class MatMulIntegerToFloatSpec(_IntToFloatSpec):
    """Integer matmul whose int32 result is scaled to float32 (and biased) in one op."""

    doc = "Y = ((A - a_zp) @ (B - b_zp)) * a_scale * b_scale + bias."
    inputs = (Port("A"), Port("B"), Port("a_scale"), Port("b_scale"), Port("a_zero_point", optional=True),
              Port("b_zero_point", optional=True), Port("bias", optional=True))

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray, a_s: np.ndarray, b_s: np.ndarray,
                  a_zp: np.ndarray | None = None, b_zp: np.ndarray | None = None,
                  bias: np.ndarray | None = None) -> np.ndarray:
        """Exact integer product, scale, bias."""
        scale = _row_param(np.asarray(a_s, np.float32), a.ndim) * _col_param(np.asarray(b_s, np.float32))
        return self._finish(ctx, a, _row_param(a_zp, a.ndim), b, b_zp, scale, bias)


def _qgemm_float(x: np.ndarray, wq: IntOperand, w_s: np.ndarray, add: np.ndarray | None = None,
                 fast: QuantizedGemm | None = None) -> np.ndarray:
    """x (float, M x K) @ wq (centered int8, K x N) the way onnxruntime's quantized RNN GEMM
    computes it: x quantized to uint8 from its own range, exact integer product, * x_scale *
    w_scale (+ ``add``, e.g. the step's input projection). The VNNI kernel in one call where it
    runs (nodes/int8_gemm.py), else the numba one (``fast``, or one made here for a few rows),
    with the same numbers; else numpy."""
    cols = wq.int8_columns() if x.ndim == 2 else None
    if cols is not None:
        y = cols.qgemm(x, w_s, add)
        if y is not None:
            return y
    if fast is None and x.ndim == 2 and x.shape[0] <= SMALL_M:
        fast = _small_gemm(wq, w_s)
    if fast is not None:
        y = fast(x, add)
        if y is not None:
            return y
    qx, sx, zx = dynamic_quantize_u8(x)
    acc = int_matmul_raw(qx, np.asarray(zx), wq)
    y = acc.astype(np.float32) * (np.float32(sx) * w_s)
    return y if add is None else add + y


def _small_gemm(wq: IntOperand, w_s: np.ndarray) -> QuantizedGemm | None:
    """The compiled product with wq for inputs of up to SMALL_M rows, where it applies."""
    bt = wq.narrow_t()
    if bt is None:
        return None
    g = QuantizedGemm(bt, wq.bmax, w_s)
    return g if g.usable else None


def _dir_param(p: np.ndarray | None, d: int, n: int) -> np.ndarray:
    """A per-direction scale or zero point: scalar per direction or per output column (N)."""
    if p is None:
        return np.zeros((), np.int32)
    a = np.asarray(p)
    a = a[d] if a.ndim >= 1 and a.shape[0] > 1 and a.ndim > 0 and (a.ndim > 1 or a.shape[0] != n) else a
    if a.ndim == 2:
        a = a[0]
    return a.reshape(()) if a.size == 1 else a.reshape(n)


@register("DynamicQuantizeLSTM", since=1, domain=MS)
class DynamicQuantizeLSTMSpec(LSTMSpec):
    """LSTM with int8 W and R (transposed, (dirs, input, 4H) and (dirs, H, 4H)) and dynamic
    uint8 quantization of X and of the hidden state at every step."""

    family = "contrib"
    integer_weights = True
    doc = ("LSTM (gates i, o, f, c) with int8 weights W (dirs, input, 4H), R (dirs, H, 4H) and their "
           "scales/zero points; each GEMM quantizes its float operand to uint8 from its range.")
    inputs = (Port("X"), Port("W"), Port("R"), Port("B", optional=True), Port("sequence_lens", optional=True),
              Port("initial_h", optional=True), Port("initial_c", optional=True), Port("P", optional=True),
              Port("W_scale"), Port("W_zero_point"), Port("R_scale"), Port("R_zero_point"))

    def _hidden(self, ctx: NodeContext) -> Any:
        hs = ctx.attrs.get("hidden_size")
        if hs is not None:
            return int(hs)
        r = ctx.shape(2)
        return r[1] if r is not None and len(r) == 3 else None

    def _dims(self, ctx: NodeContext) -> tuple[Any, Any, Any, int, Any]:
        """(seq, batch, input, num_directions, hidden) with W stored transposed."""
        from nodes.recurrent import _num_dir, sequence_dims

        seq, batch, inp = sequence_dims(ctx, self.op_type)
        return seq, batch, inp, _num_dir(ctx.attrs["direction"]), self._hidden(ctx)

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
                  b: np.ndarray | None = None, lens: np.ndarray | None = None, h0: np.ndarray | None = None,
                  c0: np.ndarray | None = None, p: np.ndarray | None = None, w_s: np.ndarray | None = None,
                  w_zp: np.ndarray | None = None, r_s: np.ndarray | None = None,
                  r_zp: np.ndarray | None = None) -> list[np.ndarray]:
        """Y, Y_h, Y_c."""
        if w_s is None or r_s is None:
            raise OpError("DynamicQuantizeLSTM needs W_scale and R_scale")
        clipf = _clipper(ctx.attrs.get("clip"))
        coupled = bool(ctx.attrs.get("input_forget", 0))
        hid = int(r.shape[1])
        wt = np.swapaxes(w, 1, 2)  # (dirs, 4H, input): the layout the shared driver checks

        def make_step(xx, wd_unused, rd_unused, bd, hid_, acts, clip, d):
            f, g, h = acts
            n4 = 4 * hid
            ws, rs = _dir_param(w_s, d, n4).astype(np.float32), _dir_param(r_s, d, n4).astype(np.float32)
            # centered and converted once per plan, not per step (the recurrent one ran 32x a run)
            wq = cached_int_operand(ctx, f"W{d}", (w, w_zp), lambda: _centered(w[d], _dir_param(w_zp, d, n4)))
            rq = cached_int_operand(ctx, f"R{d}", (r, r_zp), lambda: _centered(r[d], _dir_param(r_zp, d, n4)))
            t_len, batch, inp = xx.shape
            xw = _qgemm_float(xx.reshape(-1, inp), wq, ws).reshape(t_len, batch, n4)
            xw = xw + (bd[:n4] + bd[n4:]).astype(np.float32)
            pd = p[d].astype(np.float32) if p is not None else None
            # work buffers kept over the steps (the compiled product where the VNNI one does not run)
            fast = _small_gemm(rq, rs) if batch <= SMALL_M and rq.int8_columns() is None else None

            def step(xt: np.ndarray, state: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
                hp, cp = state
                ht, ct = lstm_cell(_qgemm_float(hp, rq, rs, xt, fast), cp, pd, hid, f, g, h, clipf, coupled)
                return ht.astype(np.float32, copy=False), ct.astype(np.float32, copy=False)

            return xw, step

        return _RecurrentSpec._run(self, ctx, x, wt, r, b, lens, [h0, c0], make_step)

    def work(self, ctx: NodeContext) -> Work:
        """MACs of all gate matmuls."""
        return LSTMSpec.work(self, ctx)


@register("QuantizeLinear", since=1, domain=MS)
class MsQuantizeLinearSpec(QuantizeLinearSpec):
    """The contrib QuantizeLinear: ONNX QuantizeLinear with its axis attribute (any opset)."""

    family = "contrib"


@register("DequantizeLinear", since=1, domain=MS)
class MsDequantizeLinearSpec(DequantizeLinearSpec):
    """The contrib DequantizeLinear: ONNX DequantizeLinear with its axis attribute (any opset)."""

    family = "contrib"


