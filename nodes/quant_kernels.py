"""Compiled (numba) kernels of dynamic uint8 quantization and small exact integer products.

numpy spends DynamicQuantizeLinear in five passes (min, max, divide, round, clip) and a
quantized recurrent step in a dozen small calls around a float32 matrix-vector product whose
weight (4 bytes an element) streams from L3 every step. These kernels do the same arithmetic
in one pass each, and the integer product from an int8/int16 copy of the weight (1-2 bytes an
element) with exact int32 sums (LLVM's vpmaddwd), so every result equals the numpy code's bit
for bit:

- ``dynamic_quantize``: range (numpy's SIMD min/max), scale, zero point and the quantized
  tensor in one compiled pass, as ONNX's DynamicQuantizeLinear (scale 0 on a range of 0) or
  onnxruntime's dynamic GEMMs (scale 1) compute them.
- ``QuantizedGemm`` (``qgemm_float`` for one product): x (float32, M x K) quantized to uint8
  from its own range, times a centered integer weight, * x_scale * w_scale (+ an addend), in
  one compiled call: onnxruntime's quantized LSTM GEMM.

A NaN or infinite input takes the numpy path (its min/max semantics), as does a product whose
int32 sums could overflow.

The loops are in nodes/_quant_jit.py, imported on the first call.
"""

from __future__ import annotations

import math

import numpy as np

_I32_SAFE = 2**31 - 1

SMALL_M = 4
"""Rows of x up to which the compiled product (a dot product per output) beats float BLAS on
exact float32 operands: dddd_common_old's recurrent step, 1 x 512 @ 512 x 2048, took ~200 us as
a float32 GEMV in the model (its 4 MB weight from L3) and ~50 us here (1 byte an element); its
32-row input projections ran 2.5x slower here than in BLAS, whose blocking wins there."""


def _jit():
    """The compiled loops (nodes/_quant_jit.py); numba is imported on the first call."""
    from nodes import _quant_jit

    return _quant_jit


def data_range(x: np.ndarray) -> tuple[float, float] | None:
    """(min(0, min x), max(0, max x)) of float32 ``x``; None for NaN/inf or empty. numpy's
    SIMD min and max (two passes, 16 us for 98k floats) beat one compiled pass with NaN checks
    (49 us: the compares do not vectorize); both propagate NaN."""
    if not x.size:
        return None
    lo, hi = float(x.min()), float(x.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return min(0.0, lo), max(0.0, hi)


def dynamic_quantize(x: np.ndarray, zero_range_scale: float) -> tuple[np.ndarray, np.float32, np.uint8] | None:
    """uint8 y, scale and zero point of float32 ``x`` from its own range in two passes (range,
    then quantize); None when ``x`` holds NaN/inf or nothing (the caller's numpy path applies).
    A zero scale (ONNX's range of 0) gives zeros."""
    r = data_range(x)
    if r is None:
        return None
    scale, zp = _jit().u8_params(np.float32(r[0]), np.float32(r[1]), np.float32(zero_range_scale))
    scale, zp = np.float32(scale), np.float32(zp)  # numba returns them as Python floats (exact)
    if scale == 0:
        return np.zeros(x.shape, np.uint8), scale, np.uint8(0)
    out = np.empty(x.shape, np.uint8)
    _jit().quantize_u8(np.ascontiguousarray(x).reshape(-1), scale, zp, out.reshape(-1))
    return out, scale, np.uint8(zp)


def narrow_transposed(b: np.ndarray) -> np.ndarray | None:
    """A centered integer (K, N) weight as contiguous (N, K) int8, else int16 (None: wider)."""
    if b.ndim != 2 or not b.size:
        return None
    lo, hi = int(b.min()), int(b.max())
    if lo >= -128 and hi <= 127:
        return np.ascontiguousarray(b.T.astype(np.int8))
    if lo >= -32768 and hi <= 32767:
        return np.ascontiguousarray(b.T.astype(np.int16))
    return None


class QuantizedGemm:
    """add + float32((quant_u8(x) - zp) @ B) * (x_scale * mult_w) for float32 x (M, K), with the
    centered weight B given as ``bt`` (N, K) int8/int16 of largest magnitude ``bmax``; x is
    quantized from its own range with scale 1 on a range of 0 (onnxruntime's dynamic GEMM).
    Prepared once for many products (a recurrent step's): the multiplier and the integer work
    buffers are kept. A call returns None when the numpy path must run (NaN/inf in x); ``usable``
    is False when int32 sums could overflow."""

    def __init__(self, bt: np.ndarray, bmax: int, mult_w: np.ndarray) -> None:
        self.bt = bt
        self.usable = bt.shape[1] * 255 * max(bmax, 1) <= _I32_SAFE
        self.mult = np.ascontiguousarray(np.asarray(mult_w, np.float32).reshape(-1))
        self._work: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, x: np.ndarray, add: np.ndarray | None = None) -> np.ndarray | None:
        """The product of ``x`` (+ ``add``, shaped like the result), or None (see the class)."""
        m, k = x.shape
        n = self.bt.shape[0]
        work = self._work.get(m)
        if work is None:
            work = self._work[m] = (np.empty((m, k), np.int16), np.empty((m, n), np.int32))
        if x.dtype != np.float32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, np.float32)
        if add is None:
            add = _NO_ADD
        elif add.dtype != np.float32 or not add.flags.c_contiguous or add.shape != (m, n):
            add = np.ascontiguousarray(add, np.float32).reshape(m, n)
        out = np.empty((m, n), np.float32)
        return out if _jit().qgemm_u8(x, self.bt, self.mult, add, work[0], work[1], out) else None


def qgemm_float(x: np.ndarray, bt: np.ndarray, bmax: int, mult_w: np.ndarray,
                add: np.ndarray | None = None) -> np.ndarray | None:
    """One product of ``QuantizedGemm(bt, bmax, mult_w)``; None where the numpy path must run."""
    g = QuantizedGemm(bt, bmax, mult_w)
    return g(x, add) if g.usable else None


_NO_ADD = np.empty((0, 0), np.float32)
