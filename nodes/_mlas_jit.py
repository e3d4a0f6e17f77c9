"""onnxruntime's float32 GEMM (MLAS, x86-64 with FMA3, one thread) in its own summation order.

Compiled with numba, no fastmath: every float32 rounding is written out. A fused multiply-add
round32(a * b + c) is computed in float64 (a * b is exact there) and rounded once to float32; the
double rounding this implies differs from a true FMA only when the float64 sum lands exactly on
a float32 halfway point, which does not change an int8 result in practice.

* M > 1 (MlasSgemmKernelFma3): each output is an FMA chain from zero over a K block of
  ``stride_k`` terms in index order; a block's result is added to the previous blocks' sum.
* M == 1 (MlasSgemmKernelM1Avx, no FMA): each K block is consumed 4 rows at a time,
  t = ((a0 b0 + a1 b1) + a2 b2) + a3 b3 with every product and sum rounded, then C = t + C;
  a remainder of 2 rows, then of 1 row, the same way.
* N == 1 (MlasSgemmKernelM1TransposeBAvx, B and C contiguous columns: a Conv over a 1x1 image,
  the squeeze-excite convolutions, or a MatMul by one column): MLAS swaps the operands, so each
  output is a dot product of a row of A with the column, no K blocks. Eight lane sums of rounded
  products (no FMA), k = l, l + 8, ...; then the lanes reduced in the order of the kernel's
  shuffles, which depends on whether the row is in a group of 4, of 2, or alone.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def sgemm_fma(a, b, stride_k, out):  # pragma: no cover - compiled
    m_rows, k_len = a.shape
    n_cols = b.shape[1]
    acc = np.empty(n_cols, np.float32)
    for m in range(m_rows):  # rows of C, each walked along N (contiguous) for every k in order
        for k0 in range(0, k_len, stride_k):
            acc[:] = 0.0
            for k in range(k0, min(k_len, k0 + stride_k)):
                av = np.float64(a[m, k])
                for n in range(n_cols):
                    acc[n] = np.float32(av * np.float64(b[k, n]) + np.float64(acc[n]))
            for n in range(n_cols):
                out[m, n] = acc[n] if k0 == 0 else np.float32(acc[n] + out[m, n])


@njit(cache=True, nogil=True)
def sgemm_m1(a, b, stride_k, out):  # pragma: no cover - compiled
    k_len = a.shape[1]
    n_cols = b.shape[1]
    t = np.empty(n_cols, np.float32)
    out[0, :] = 0.0
    for k0 in range(0, k_len, stride_k):
        end = min(k_len, k0 + stride_k)
        k = k0
        while k < end:
            step = 4 if end - k >= 4 else (2 if end - k >= 2 else 1)
            for n in range(n_cols):
                t[n] = np.float32(a[0, k] * b[k, n])
            for j in range(1, step):
                for n in range(n_cols):
                    t[n] = np.float32(t[n] + np.float32(a[0, k + j] * b[k + j, n]))
            for n in range(n_cols):
                out[0, n] = np.float32(t[n] + out[0, n])
            k += step


@njit(cache=True, nogil=True)
def sgemv_n1(a, x, out):  # pragma: no cover - compiled
    m_rows, k_len = a.shape
    lane = np.empty(8, np.float32)
    m = 0
    while m < m_rows:
        rows = 4 if m_rows - m >= 4 else (2 if m_rows - m >= 2 else 1)
        for r in range(m, m + rows):
            lane[:] = 0.0
            for k0 in range(0, k_len, 8):
                for j in range(8):  # the masked tail adds 0 * 0
                    p = np.float32(a[r, k0 + j] * x[k0 + j]) if k0 + j < k_len else np.float32(0.0)
                    lane[j] = np.float32(lane[j] + p)
            if rows == 4:  # unpck/add: ((l0 + l1) + l2) + l3 per half, then the halves
                lo = np.float32(np.float32(np.float32(lane[0] + lane[1]) + lane[2]) + lane[3])
                hi = np.float32(np.float32(np.float32(lane[4] + lane[5]) + lane[6]) + lane[7])
            elif rows == 2:  # unpck/add, halves, then movhlps: (l0 + l2) + (l4 + l6), odd lanes alike
                lo = np.float32(np.float32(lane[0] + lane[2]) + np.float32(lane[4] + lane[6]))
                hi = np.float32(np.float32(lane[1] + lane[3]) + np.float32(lane[5] + lane[7]))
            else:  # two vhaddps, then the halves
                lo = np.float32(np.float32(lane[0] + lane[1]) + np.float32(lane[2] + lane[3]))
                hi = np.float32(np.float32(lane[4] + lane[5]) + np.float32(lane[6] + lane[7]))
            out[r] = np.float32(np.float32(lo + hi) + np.float32(0.0))  # + C masked to zero (beta 0)
        m += rows
