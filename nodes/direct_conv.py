"""The direct SIMD convolution (nodes/_cconv.c), called through ctypes.

im2col + OpenBLAS runs a dense 3x3 convolution at 45-65 GMAC/s on one AVX-512 core, where
onnxruntime's direct kernel runs it at 80-90: the column copy moves nine times the input and
the GEMM's shapes (few output channels, or few pixels) are far from OpenBLAS's best. The C
kernel keeps 2 x 12 vector accumulators in registers (16 output channels x 12 pixels each with
AVX-512; 2 x 6 with AVX2) and reads the padded input in place, so there is no column copy.

``lanes()`` is 0 where the library was not built or the CPU has neither AVX-512 nor AVX2: the
caller then keeps its numpy path. Weights are packed once per node (``pack``: per group,
(ceil(M/VB), C/group, KH, KW, VB), zero-padded output channels) and cached by the caller.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Sequence

import numpy as np

DISABLE_ENV = "NPU_STUDIO_NO_CCONV"
"""Set to 1 to run every convolution on the numpy/OpenBLAS path (side-by-side benchmarks)."""


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None
    try:
        from nodes import _cconv
    except ImportError:
        return None
    lib = ctypes.CDLL(_cconv.__file__)
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.npu_conv_lanes.restype = i64
    lib.npu_conv_lanes.argtypes = []
    lib.npu_conv2d_f32.restype = ctypes.c_int
    lib.npu_conv2d_f32.argtypes = [ptr, i64, i64, i64, ptr, i64, i64, i64, ptr, i64, i64, i64, i64,
                                   ptr, i64, i64, i64, ptr, ctypes.c_int]
    return lib


@functools.lru_cache(maxsize=1)
def lanes() -> int:
    """Output channels per vector of the kernel on this CPU (16, 8), or 0: no kernel here."""
    lib = _lib()
    return int(lib.npu_conv_lanes()) if lib is not None else 0


def pack(w: np.ndarray, group: int, vb: int | None = None) -> np.ndarray:
    """(M, C/group, KH, KW) float32 weights as (group, ceil(M/group/VB), C/group, KH, KW, VB);
    VB is ``lanes()`` unless given (8: the AVX2 kernel, which an AVX-512 CPU runs too)."""
    vb = vb or lanes()
    m, cg, kh, kw = w.shape
    mg = m // group
    nb = -(-mg // vb)
    wp = np.zeros((group, nb * vb, cg, kh, kw), np.float32)
    wp[:, :mg] = w.reshape(group, mg, cg, kh, kw)
    return np.ascontiguousarray(wp.reshape(group, nb, vb, cg, kh, kw).transpose(0, 1, 3, 4, 5, 2))


def conv2d(xp: np.ndarray, packed: np.ndarray, m: int, b: np.ndarray | None, strides: Sequence[int],
           dils: Sequence[int], out_hw: Sequence[int], relu: bool = False) -> np.ndarray:
    """(N, M, OH, OW) float32 convolution of the padded float32 input ``xp`` (N, C, HP, WP) with
    ``pack``-ed weights (the padding already applied: the kernel reads xp in place); ``relu``:
    max(y, 0) as np.maximum gives it, applied as each output is stored."""
    lib = _lib()
    group, _, cg, kh, kw, vb = packed.shape
    n, c, hp, wp = xp.shape
    oh, ow = int(out_hw[0]), int(out_hw[1])
    xp = np.ascontiguousarray(xp, np.float32)
    y = np.empty((n, m, oh, ow), np.float32)
    mg = m // group
    bias = np.zeros((group, packed.shape[1] * vb), np.float32)  # a whole vector per block
    if b is not None:
        bias[:, :mg] = np.asarray(b, np.float32).reshape(group, mg)
    offs = np.empty(cg * kh * kw, np.int64)
    x_img, y_img, x_grp, y_grp = c * hp * wp * 4, m * oh * ow * 4, cg * hp * wp * 4, mg * oh * ow * 4
    w_grp = packed[0].nbytes
    x0, y0, w0 = xp.ctypes.data, y.ctypes.data, packed.ctypes.data
    b0, b_grp = bias.ctypes.data, bias[0].nbytes
    sy, sx = int(strides[0]), int(strides[1])
    dh, dw = int(dils[0]), int(dils[1])
    for i in range(n):
        for g in range(group):
            lib.npu_conv2d_f32(x0 + i * x_img + g * x_grp, cg, hp, wp, w0 + g * w_grp, mg, kh, kw,
                               b0 + g * b_grp, sy, sx, dh, dw,
                               y0 + i * y_img + g * y_grp, oh, ow, vb, offs.ctypes.data, int(relu))
    return y
