"""The numba-compiled loops behind nodes/quant_kernels.py, imported on their first use there
(numba's import costs 1-2 s, which commands that never run a kernel should not pay).

Integer arithmetic only, or single IEEE float32 operations in the order the numpy code they
replace performs them (no fastmath: no contraction, no reassociation), so the results are the
numpy code's bit for bit.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def range_f32(x):  # pragma: no cover - compiled
    """(min, max, has_nan) of a flat float32 array in one pass."""
    lo = np.float32(np.inf)
    hi = np.float32(-np.inf)
    nan = False
    for i in range(x.size):
        v = x[i]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
        if v != v:
            nan = True
    return lo, hi, nan


@njit(cache=True, nogil=True)
def quantize_u8(x, scale, zp, out):  # pragma: no cover - compiled
    """out = clip(rint(x / scale) + zp, 0, 255) as uint8 (x float32 flat, scale/zp float32)."""
    lo = np.float32(0.0)
    hi = np.float32(255.0)
    for i in range(x.size):
        q = np.rint(x[i] / scale) + zp
        q = min(max(q, lo), hi)
        out[i] = np.uint8(q)


@njit(cache=True, nogil=True)
def quantize_centered(x, scale, zp, out):  # pragma: no cover - compiled
    """out = clip(rint(x / scale) + zp, 0, 255) - zp as int16 (x float32 (M, K))."""
    lo = np.float32(0.0)
    hi = np.float32(255.0)
    izp = np.int16(zp)
    m, k = x.shape
    for i in range(m):
        for j in range(k):
            q = np.rint(x[i, j] / scale) + zp
            q = min(max(q, lo), hi)
            out[i, j] = np.int16(q) - izp


@njit(cache=True, nogil=True)
def dot_rows(a, bt, out):  # pragma: no cover - compiled
    """out[i, j] = sum_k a[i, k] * bt[j, k] in int32 (a int16 (M, K), bt int8/int16 (N, K)).

    The inner loop is a contiguous int16 dot product, which LLVM turns into vpmaddwd (pairs
    of 16-bit products summed into 32-bit lanes)."""
    m, kk = a.shape
    n = bt.shape[0]
    for j in range(n):
        for i in range(m):
            s = np.int32(0)
            for k in range(kk):
                s += np.int32(a[i, k]) * np.int32(bt[j, k])
            out[i, j] = s


@njit(cache=True, nogil=True)
def u8_params(lo, hi, zero_range_scale):  # pragma: no cover - compiled
    """(scale, zero point) in float32 of uint8 quantization of [lo, hi] (lo <= 0 <= hi)."""
    if hi == lo:
        scale = zero_range_scale
    else:
        scale = (hi - lo) / np.float32(255.0)
    if scale == 0:
        return scale, np.float32(0.0)
    zp = np.rint(np.float32(0.0) - lo / scale)
    return scale, min(max(zp, np.float32(0.0)), np.float32(255.0))


@njit(cache=True, nogil=True)
def qgemm_u8(x, bt, mult_w, add, a, acc, out):  # pragma: no cover - compiled
    """out = add + float32((quant_u8(x) - zp) @ bt.T) * (x_scale * mult_w), x float32 (M, K)
    quantized from its own range (scale 1 on a range of 0); a (M, K) int16 and acc (M, N)
    int32 are work buffers. False (nothing written) when x holds NaN or infinity."""
    lo, hi, nan = range_f32(x.reshape(-1))
    if nan or lo == -np.inf or hi == np.inf:
        return False
    lo = min(lo, np.float32(0.0))
    hi = max(hi, np.float32(0.0))
    scale, zp = u8_params(lo, hi, np.float32(1.0))
    quantize_centered(x, scale, zp, a)
    dot_rows(a, bt, acc)
    m, n = acc.shape
    per_col = mult_w.size > 1
    has_add = add.size > 0
    for i in range(m):
        for j in range(n):
            v = np.float32(acc[i, j]) * (scale * (mult_w[j] if per_col else mult_w[0]))
            out[i, j] = add[i, j] + v if has_add else v
    return True
