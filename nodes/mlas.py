"""Float convolution as onnxruntime's CPU provider computes it (MLAS, one thread), bit for bit.

onnxruntime runs a Conv whose weight is not a constant initializer (a QDQ model's weight comes out
of a DequantizeLinear, which also keeps its NCHWc rewrite away) through MlasConv: im2col in
(channel, ky, kx) order, then SGEMM of the (M filters, K) weight by the (K, output pixels)
columns per group, then the bias added to each sum in float32. The SGEMM splits K into blocks
of ``stride_k`` (MlasSgemmOperation: 128/128 N/K strides, traded against each other when N or
K is small), and the summation order inside a block is the kernel's (nodes/_mlas_jit.py).
One row (M == 1) and one column (N == 1: a Conv over a 1x1 image, as in squeeze-excite blocks)
take MLAS's M == 1 kernels instead, each with its own order. A MatMul of dequantized operands is
the same SGEMM per matrix of the batch. Measured against onnxruntime 1.32 on x86-64 (AVX-512,
AVX2/FMA3): equal float32 outputs for 1x1, 3x3 strided, 2x2, 1x7 and depthwise convolutions, 1x1
convolutions of a 1x1 image and batched MatMuls (tests/engine/test_ort_exactness.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SGEMM_STRIDE_N = 128
SGEMM_STRIDE_K = 128


def sgemm_stride_k(n: int, k: int) -> int:
    """The K block MLAS's SGEMM uses for an (M, K) x (K, N) product on one thread."""
    sn, sk = SGEMM_STRIDE_N, SGEMM_STRIDE_K
    if n >= k:
        while sk // 2 >= k:
            sn, sk = sn * 2, sk // 2
    else:
        while sn > 16 and sn // 2 >= n:
            sn, sk = sn // 2, sk * 2
    return sk


def sgemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M, K) x (K, N) float32 product in MLAS's order (the M == 1 kernel for one row, the
    transposed one for one column)."""
    from nodes import _mlas_jit

    a = np.ascontiguousarray(a, np.float32)
    b = np.ascontiguousarray(b, np.float32)
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    if b.shape[1] == 1 and a.shape[0] != 1:
        _mlas_jit.sgemv_n1(a, b[:, 0], out[:, 0])
        return out
    kernel = _mlas_jit.sgemm_m1 if a.shape[0] == 1 else _mlas_jit.sgemm_fma
    kernel(a, b, sgemm_stride_k(b.shape[1], a.shape[1]), out)
    return out


def _im2col(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dils: Sequence[int],
            pb: Sequence[int], pe: Sequence[int]) -> tuple[np.ndarray, tuple[int, int]]:
    """(C * kh * kw, oh * ow) columns of one (C, H, W) image, zero padded."""
    c, h, w = x.shape
    kh, kw = kernel
    xp = np.zeros((c, h + pb[0] + pe[0], w + pb[1] + pe[1]), np.float32)
    xp[:, pb[0]:pb[0] + h, pb[1]:pb[1] + w] = x
    oh = (xp.shape[1] - dils[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[2] - dils[1] * (kw - 1) - 1) // strides[1] + 1
    cols = np.empty((c, kh, kw, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dils[0], j * dils[1]
            cols[:, i, j] = xp[:, y0:y0 + strides[0] * (oh - 1) + 1:strides[0], x0:x0 + strides[1] * (ow - 1) + 1:strides[1]]
    return cols.reshape(c * kh * kw, oh * ow), (oh, ow)


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: Sequence[int], dils: Sequence[int],
           pb: Sequence[int], pe: Sequence[int], group: int) -> np.ndarray:
    """NCHW float32 convolution with MLAS's im2col, SGEMM order and bias addition."""
    n_batch, c_in = x.shape[:2]
    m = w.shape[0]
    cg, mg = c_in // group, m // group
    out = None
    for n in range(n_batch):
        parts = []
        for g in range(group):
            cols, (oh, ow) = _im2col(x[n, g * cg:(g + 1) * cg].astype(np.float32, copy=False), w.shape[2:],
                                     strides, dils, pb, pe)
            parts.append(sgemm(w[g * mg:(g + 1) * mg].reshape(mg, -1), cols))
        y = np.concatenate(parts)
        if b is not None:
            y = y + np.asarray(b, np.float32)[:, None]
        if out is None:
            out = np.empty((n_batch, m, oh, ow), np.float32)
        out[n] = y.reshape(m, oh, ow)
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 MatMul of rank >= 2 operands (batch dims broadcast), one MLAS SGEMM per matrix."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, (*batch, *a.shape[-2:])).reshape(-1, *a.shape[-2:])
    b = np.broadcast_to(b, (*batch, *b.shape[-2:])).reshape(-1, *b.shape[-2:])
    out = np.stack([sgemm(x, y) for x, y in zip(a, b)])
    return out.reshape(*batch, a.shape[-2], b.shape[-1])


_LOGISTIC_ALPHA = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05, 8.51377133304701e-03,
                   2.48287947061529e-01)
_LOGISTIC_BETA = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06, 1.70198817374094e-03,
                  1.16817656904453e-01, 9.93151921023180e-01)


def _fma(x: np.ndarray, y, z) -> np.ndarray:
    """float32 x * y + z rounded once (the float64 product of two float32 is exact)."""
    return (x.astype(np.float64) * np.float64(y) + np.asarray(z, np.float64)).astype(np.float32)


def logistic(x: np.ndarray) -> np.ndarray:
    """MlasComputeLogistic (the FMA3 kernel): x clamped to [-18, 18], the odd polynomial p(x) over
    the even q(x) of Eigen's coefficients by FMA (Horner in x^2), then p / q + 1/2, clamped at 0
    only (1.0000001 at x = 17.844, as onnxruntime's).
    onnxruntime's Sigmoid, QuickGelu and QLinearSigmoid's table all come from it."""
    f = np.float32
    v = np.clip(np.asarray(x, np.float32), f(-18.0), f(18.0))
    v2 = v * v
    p = _fma(v2, f(_LOGISTIC_ALPHA[0]), f(_LOGISTIC_ALPHA[1]))
    for c in _LOGISTIC_ALPHA[2:]:
        p = _fma(p, v2, f(c))
    p = p * v
    q = _fma(v2, f(_LOGISTIC_BETA[0]), f(_LOGISTIC_BETA[1]))
    for c in _LOGISTIC_BETA[2:]:
        q = _fma(q, v2, f(c))
    return np.maximum(p / q + f(0.5), f(0.0))
