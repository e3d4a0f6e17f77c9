"""Matrix products: MatMul (numpy semantics), Gemm and Det."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nodes._util import broadcast_shapes, prod, static_dims
from nodes.registry import register
from nodes.rules import MATMUL_RULES
from nodes.spec import (
    AttrSpec,
    Gemm,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    QuantSpec,
    RunContext,
    Work,
)
from nodes.types import Dim, TensorType

_LOW_PRECISION = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})


def _dim_mismatch(a: Dim, b: Dim) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a != b


def matmul_shape(a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """Output shape of numpy ``matmul`` for shapes that may hold symbolic or unknown dims."""
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise OpError("MatMul does not accept scalar operands")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if _dim_mismatch(a2[-1], b2[-2]):
        raise OpError(f"MatMul: inner dimensions differ: {tuple(a)} x {tuple(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out: list[Dim] = list(batch or ())
    if len(a) > 1:
        out.append(a2[-2])
    if len(b) > 1:
        out.append(b2[-1])
    return tuple(out)


def matmul_gemm(ctx: NodeContext, a_index: int = 0, b_index: int = 1) -> list[Gemm] | None:
    """numpy-matmul operands as GEMMs: a shared weight matrix folds A's batch dims into M, a
    batched B makes one GEMM per broadcast batch element."""
    a, b = static_dims(ctx.shape(a_index)), static_dims(ctx.shape(b_index))
    if a is None or b is None or not a or not b:
        return None
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    m, k, n = a2[-2], a2[-1], b2[-1]
    if len(b2) == 2:
        return [Gemm(m * prod(a2[:-2]), k, n)]
    ba, bb = a2[:-2], b2[:-2]
    width = max(len(ba), len(bb))
    ba, bb = [1] * (width - len(ba)) + ba, [1] * (width - len(bb)) + bb
    return [Gemm(m, k, n, batch=max(1, prod(max(x, z) for x, z in zip(ba, bb))))]


def _matmul_weight_axis(node) -> int:
    """Output channels of a MatMul weight are its last axis."""
    w = node.inputs[1]
    return (w.const.ndim - 1) if w is not None and w.const is not None else 1


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul`` that folds batch dims into one BLAS call when B is a matrix.

    float16/bfloat16 operands are multiplied in float32 (fp32 accumulation, as NPUs and
    onnxruntime's CPU kernels do) and the result is rounded back to the input dtype.
    """
    dt = a.dtype
    if dt in _LOW_PRECISION:
        return matmul(a.astype(np.float32), b.astype(np.float32)).astype(dt)
    if a.ndim > 2 and b.ndim == 2:
        lead = a.shape[:-1]
        return np.matmul(a.reshape(-1, a.shape[-1]), b).reshape(*lead, b.shape[-1])
    return np.asarray(np.matmul(a, b))


def is_constant(ctx: RunContext, index: int, value: np.ndarray) -> bool:
    """Whether ``value`` is input ``index``'s constant itself (an initializer the plan did not
    replace by a fed value): what a kernel may prepare once and keep for later runs."""
    node_inputs = getattr(ctx.node, "inputs", ())
    v = node_inputs[index] if index < len(node_inputs) else None
    return v is not None and v.const is value


def weight_product(ctx: RunContext, a: np.ndarray, b: np.ndarray, index: int, transposed: bool = False,
                   key: str = "dense", source: np.ndarray | None = None) -> np.ndarray | None:
    """``a @ op(b)`` (op(b) = b.T when ``transposed``; a's leading dims folded into rows) on the
    direct kernel (direct_conv.Dense, packed once per plan) when ``b`` is input ``index``'s
    constant float32 matrix and the product has the few rows where that pays
    (direct_conv.DENSE_ROWS); None: the caller's BLAS path. ``source``: the input array the
    packing is kept for (default ``b``; a slice of it, e.g. one direction's weights, is a new
    object on every run). A weight fed at run time (an IR 3 initializer overridden) is packed
    for no run after it: BLAS."""
    kept_for = b if source is None else source
    if (not is_constant(ctx, index, kept_for) or b.ndim != 2 or a.ndim < 1
            or a.dtype != np.float32 or b.dtype != np.float32):
        return None
    from nodes import direct_conv

    n, k = b.shape if transposed else b.shape[::-1]
    rows = a.size // k if k else 0
    if a.shape[-1] != k or not direct_conv.dense_suits(rows, k, n):
        return None
    dense = ctx.keep(key, kept_for, lambda: direct_conv.Dense(b if transposed else b.T))
    return dense(a.reshape(rows, k)).reshape(*a.shape[:-1], n)


@register("MatMul", since=1)
class MatMulSpec(OpSpec):
    """Matrix product with numpy semantics (1-D operands, broadcast batch dims)."""

    doc = "Matrix product like numpy.matmul: 1-D operands are promoted and batch dims broadcast."
    inputs = (Port("A"), Port("B"))
    quant = QuantSpec("compute", weight_input=1, weight_axis=_matmul_weight_axis)
    rules = MATMUL_RULES

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """M x K x N with A's batch dims folded into M (shared weights) or one GEMM per batch."""
        return matmul_gemm(ctx)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast batch dims, M from A, N from B."""
        return [TensorType(ctx.dtype(0), matmul_shape(ctx.shape(0), ctx.shape(1)))]

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """numpy matmul keeping the input dtype (a constant weight times a few rows: the direct
        kernel)."""
        y = weight_product(ctx, a, b, 1) if b.ndim == 2 else None
        return y if y is not None else matmul(a, b)

    def work(self, ctx: NodeContext) -> Work:
        """MACs = prod(batch) * M * K * N."""
        w = super().work(ctx)
        w.elem_ops = 0
        a, b = ctx.type(0), ctx.type(1)
        out = ctx.out_type(0)
        if a.is_static and out.is_static and a.shape:
            k = a.shape[-1]
            w.macs = int(out.numel() or 0) * int(k)  # type: ignore[arg-type]
        elif a.is_static and b.is_static and a.shape and b.shape:
            shp = matmul_shape(a.shape, b.shape)
            if shp is not None and all(isinstance(d, int) for d in shp):
                w.macs = prod(shp) * int(a.shape[-1])  # type: ignore[arg-type]
        return w


TRANSPOSE_KEEP_BYTES = 64 << 20
"""Largest transB weight whose contiguous transpose a Gemm keeps (once per plan)."""


def _transposed(ctx: RunContext, b: np.ndarray, rows: int) -> np.ndarray:
    """op(B) = B^T for a Gemm with transB: a view, or, for a product of several rows by a
    constant weight up to TRANSPOSE_KEEP_BYTES, a contiguous copy kept for the plan (BLAS ran
    (32 x 1024) @ (8210 x 1024)^T in 17 ms through the view, 12 ms on the copy)."""
    if rows < 2 or b.nbytes > TRANSPOSE_KEEP_BYTES or b.dtype.kind != "f" or not is_constant(ctx, 1, b):
        return b.T
    return ctx.keep("Bt", b, lambda: np.ascontiguousarray(b.T))


@register("Gemm", since=1)
class GemmSpec(OpSpec):
    """Y = alpha * A' @ B' + beta * C with optional transposes and a broadcast C."""

    doc = "General matrix multiply: alpha * op(A) @ op(B) + beta * C; C broadcasts to (M, N)."
    inputs = (Port("A"), Port("B"), Port("C", optional=True))
    quant = QuantSpec("compute", weight_input=1, bias_input=2,
                      weight_axis=lambda node: 0 if node.attrs.get("transB", 0) else 1)
    attrs = (
        AttrSpec("alpha", "float", 1.0, "Scalar multiplier of A @ B."),
        AttrSpec("beta", "float", 1.0, "Scalar multiplier of C."),
        AttrSpec("transA", "int", 0, "Transpose A first.", choices=(0, 1)),
        AttrSpec("transB", "int", 0, "Transpose B first.", choices=(0, 1)),
        AttrSpec("broadcast", "int", 0, "Opset < 7 only: allow C to broadcast."),
    )

    def _mkn(self, ctx: NodeContext) -> tuple[Dim, Dim, Dim]:
        sa, sb = ctx.shape(0), ctx.shape(1)
        m = k = n = None
        k2 = None
        if sa is not None:
            if len(sa) != 2:
                raise OpError(f"Gemm: A must be 2-D, got shape {tuple(sa)}")
            m, k = (sa[1], sa[0]) if ctx.attrs["transA"] else (sa[0], sa[1])
        if sb is not None:
            if len(sb) != 2:
                raise OpError(f"Gemm: B must be 2-D, got shape {tuple(sb)}")
            k2, n = (sb[1], sb[0]) if ctx.attrs["transB"] else (sb[0], sb[1])
        if _dim_mismatch(k, k2):
            raise OpError(f"Gemm: inner dimensions differ ({k} vs {k2}) for A {sa} and B {sb}")
        return m, (k if k is not None else k2), n

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(M, N) with the dtype of A; C must broadcast to it."""
        m, _, n = self._mkn(ctx)
        if ctx.has_input(2) and ctx.shape(2) is not None:
            sc = ctx.shape(2)
            if len(sc) > 2:  # type: ignore[arg-type]
                raise OpError(f"Gemm: C must have rank <= 2, got {tuple(sc)}")  # type: ignore[arg-type]
            broadcast_shapes((m, n), sc)
        return [TensorType(ctx.dtype(0), (m, n))]

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        """BLAS product with alpha/beta; integer inputs stay integer when alpha and beta are 1."""
        at = ctx.attrs
        alpha, beta = float(at["alpha"]), float(at["beta"])
        dt = a.dtype
        if at["transA"]:
            a = a.T
        y = weight_product(ctx, a, b, 1, transposed=bool(at["transB"])) if a.ndim == 2 else None
        if at["transB"] and y is None:
            b = _transposed(ctx, b, a.shape[0])
        if dt.kind in "iu" and (alpha != 1.0 or (c is not None and beta != 1.0)):
            y = matmul(a.astype(np.float64), b.astype(np.float64)) * alpha
            if c is not None:
                y = y + beta * c.astype(np.float64)
            return y.astype(dt)
        if y is None:
            y = matmul(a, b)
        if alpha != 1.0:
            y = y * np.asarray(alpha, dtype=y.dtype) if dt.kind == "f" else y * alpha
        if c is not None and beta != 0.0:
            cc = c if beta == 1.0 else c * np.asarray(beta, dtype=c.dtype)
            if cc.dtype == y.dtype and np.ndim(cc) <= 2 and np.broadcast_shapes(np.shape(cc), y.shape) == y.shape:
                y += cc  # y is our own product
            else:
                y = y + cc
        return y.astype(dt, copy=False)

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """op(A) (M x K) @ op(B) (K x N)."""
        a, b = static_dims(ctx.shape(0)), static_dims(ctx.shape(1))
        if a is None or b is None or len(a) != 2 or len(b) != 2:
            return None
        m, k = (a[1], a[0]) if ctx.attrs.get("transA") else (a[0], a[1])
        return [Gemm(m, k, b[0] if ctx.attrs.get("transB") else b[1])]

    def work(self, ctx: NodeContext) -> Work:
        """MACs = M * K * N."""
        w = super().work(ctx)
        m, k, n = self._mkn(ctx)
        if all(isinstance(d, int) for d in (m, k, n)):
            w.macs = int(m) * int(k) * int(n)  # type: ignore[arg-type]
            w.elem_ops = int(m) * int(n) if ctx.has_input(2) else 0  # type: ignore[arg-type]
        return w


@register("Det", since=11)
class DetSpec(OpSpec):
    """Determinant of square matrices in the last two dims."""

    doc = "Determinant of the square matrices held in the last two dimensions."
    inputs = (Port("X"),)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Drops the last two dims."""
        s = ctx.shape(0)
        if s is not None:
            if len(s) < 2:
                raise OpError(f"Det needs rank >= 2, got shape {tuple(s)}")
            if _dim_mismatch(s[-1], s[-2]):
                raise OpError(f"Det needs square matrices, got shape {tuple(s)}")
            s = tuple(s[:-2])
        return [TensorType(ctx.dtype(0), s)]

    def reference(self, ctx: RunContext, x: np.ndarray) -> np.ndarray:
        """numpy.linalg.det in float32/float64, cast back to the input dtype."""
        work = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
        return np.asarray(np.linalg.det(work)).astype(x.dtype, copy=False)
