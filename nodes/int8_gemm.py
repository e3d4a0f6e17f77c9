"""Exact 8-bit integer convolution and matmul on the VNNI kernel of nodes/_cint8.c.

ConvInteger, MatMulInteger, QLinearConv/QLinearMatMul and the dynamic-quantized GEMMs ran as
float32 BLAS over chunks of K whose sums stay exact (nodes/quant_ops.py): 4 bytes an element
and one float FMA per multiply-add. The VNNI kernel multiplies the raw bytes, 64 pairs an
instruction, and folds both zero points in afterwards (the identity in nodes/_cint8.c), so the
result is the same int32 bit for bit. Measured on dddd_common_old (uint8 weights with zero
points, one thread, standalone): its 21 ConvIntegers' shapes ~6.5 -> 2.2 ms (a 48 -> 192 3x3
conv on 16x64 0.88 -> 0.29 ms, 294 GMAC/s), its 32 x 1024 x 8210 MatMulInteger 6.8 -> 2.2 ms;
the whole model went from 2.5x onnxruntime's time to 1.2x.

``available()`` is False where the library was not built, the CPU lacks AVX-512 VNNI, or
NPU_STUDIO_NO_CCONV is set: callers then keep their float path. Constant weights are prepared
once per node (``ConvWeights``, ``MatMulWeights``) and cached by the caller.
"""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from nodes._util import addr
from nodes.direct_conv import DISABLE_ENV

MAX_K = 33025
"""Longest reduction whose exact result always fits int32: 255 * 255 * K < 2**31 (the kernel's
int32 arithmetic wraps, and is exact whenever the true result fits)."""

_BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    try:
        from nodes import _cint8
    except ImportError:
        return None
    lib = ctypes.CDLL(_cint8.__file__)
    i64, ptr, cint = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    lib.npu_int8_available.restype = i64
    lib.npu_int8_available.argtypes = []
    lib.npu_gemm_u8s8.restype = cint
    lib.npu_gemm_u8s8.argtypes = [ptr, i64, i64, ptr, i64, i64, cint, ptr, ptr, ptr, ptr, ptr, i64]
    lib.npu_conv_u8_scratch.restype = i64
    lib.npu_conv_u8_scratch.argtypes = [i64, i64, i64]
    lib.npu_conv_u8.restype = cint
    lib.npu_conv_u8.argtypes = [ptr] + [i64] * 13 + [cint, cint, ptr, i64, i64, i64, cint, ptr, ptr,
                                                    ctypes.c_int32, ptr, ptr]
    lib.npu_qgemm_f32.restype = cint
    lib.npu_qgemm_f32.argtypes = [ptr, i64, i64, ptr, i64, i64, cint, ptr, ptr, ptr, cint, ptr, ptr, ptr]
    return lib if lib.npu_int8_available() else None


def available() -> bool:
    """Whether the VNNI kernel runs here (and is not disabled by NPU_STUDIO_NO_CCONV)."""
    return os.environ.get(DISABLE_ENV, "") in ("", "0") and _lib() is not None


_ptr = addr


def _flip(dtype: np.dtype, unsigned: bool) -> int:
    """The xor (0 or 0x80) that turns bytes of ``dtype`` into the signedness the kernel needs."""
    return 0x80 if (np.dtype(dtype) == np.uint8) != unsigned else 0


def _view_value(zp: np.ndarray | int, dtype: np.dtype, flip: int) -> np.ndarray:
    """A zero point (of ``dtype``) as the kernel sees it once its bytes are xor-ed with ``flip``."""
    z = np.asarray(zp).astype(np.int32)
    if not flip:
        return z
    return z - 128 if np.dtype(dtype) == np.uint8 else z + 128


def _pad16(v: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(-(-n // 16) * 16, np.int32)
    out[:n] = v
    return out


def byte_form(c: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Integer values ``c`` as bytes and an int32 zero point per slice along ``axis`` (c = bytes -
    zero point): int8 with zero point 0 where every value fits, else uint8 shifted by each slice's
    minimum; None where a slice spans more than 256 values."""
    red = tuple(i for i in range(c.ndim) if i != axis)
    lo, hi = c.min(axis=red).astype(np.int64), c.max(axis=red).astype(np.int64)
    if c.size and int((hi - lo).max()) > 255:
        return None
    if not c.size or (int(lo.min()) >= -128 and int(hi.max()) <= 127):
        return c.astype(np.int8), np.zeros(c.shape[axis], np.int32)
    shape = [1] * c.ndim
    shape[axis] = -1
    return (c - lo.reshape(shape)).astype(np.uint8), (-lo).astype(np.int32)


def _fits(k: int, amax: int, bmax: int) -> bool:
    """Whether every exact sum of k products of magnitudes up to amax x bmax fits int32."""
    return k * amax * bmax < 2**31


class ConvWeights:
    """A convolution's constant centered weight (M, C/group, KH, KW) as the kernel's broadcast
    rows: per output channel its bytes (``byte_form``) padded to a multiple of 4 (the image side
    holds its zero point there, so the padding adds nothing), the zero point and the row sum. ``make`` returns
    None where the kernel cannot take it."""

    def __init__(self, raw: np.ndarray, zp: np.ndarray, group: int, wmax: int) -> None:
        m = raw.shape[0]
        self.group, self.shape, self.wmax = group, raw.shape, wmax
        self.unsigned = raw.dtype == np.uint8  # the broadcast side's signedness (bu)
        self.k = int(np.prod(raw.shape[1:]))
        self.kq = -(-self.k // 4)
        self.zb = zp
        rows = np.zeros((m, 4 * self.kq), raw.dtype)  # k past K: the image side holds its zero point
        rows[:, :self.k] = raw.reshape(m, self.k)
        self.rows = rows.view(np.uint8)
        self.rb = rows.astype(np.int32).sum(axis=1, dtype=np.int32)
        self._work: dict[tuple[int, int], np.ndarray] = {}

    @classmethod
    def make(cls, w: np.ndarray, group: int) -> ConvWeights | None:
        """From centered integer weights (M, C/group, KH, KW); None: not 2-D, a channel spanning
        more than 256 values, or the kernel not available here."""
        if w.ndim != 4 or w.shape[0] % group or not w.size or not available():
            return None
        form = byte_form(w, 0)
        if form is None:
            return None
        return cls(form[0], form[1], group, int(np.abs(w).max()))

    def __call__(self, x: np.ndarray, x_zp: int, strides: tuple[int, ...], dils: tuple[int, ...],
                 pb: tuple[int, ...], oshape: tuple[int, int]) -> np.ndarray | None:
        """int32 conv(x - x_zp, w) of x (N, C, H, W) of uint8/int8 with top/left pads ``pb`` (the
        output size ``oshape`` says how far the windows reach), NCHW; None where x is not 8-bit or
        the sums could leave int32 (the caller's path)."""
        if x.dtype not in _BYTES or x.ndim != 4:
            return None
        ii = np.iinfo(x.dtype)
        if not _fits(self.k, max(abs(int(ii.max) - x_zp), abs(int(ii.min) - x_zp)), self.wmax):
            return None
        lib = _lib()
        n, c, h, wd = x.shape
        oh, ow = oshape
        m, g = self.shape[0], self.group
        mg, cg = m // g, c // g
        kh, kw = self.shape[2], self.shape[3]
        flip = _flip(x.dtype, not self.unsigned)
        zq = int(_view_value(x_zp, x.dtype, flip))
        padv = int(np.asarray(x_zp).astype(x.dtype).view(np.uint8)) ^ flip
        scr = self._scratch(oh, ow, lib)
        xb = np.ascontiguousarray(x).view(np.uint8)
        y = np.empty((n, m, oh, ow), np.int32)
        for i in range(n):
            for gi in range(g):
                r0 = gi * mg
                lib.npu_conv_u8(_ptr(xb[i, gi * cg:]), cg, h, wd, kh, kw, strides[0], strides[1], dils[0], dils[1],
                                pb[0], pb[1], oh, ow, flip, padv, _ptr(self.rows[r0:]), mg, 4 * self.kq, self.kq,
                                int(self.unsigned), _ptr(self.zb[r0:]), _ptr(self.rb[r0:]), zq, _ptr(y[i, r0:]),
                                _ptr(scr))
        return y

    def _scratch(self, oh: int, ow: int, lib: ctypes.CDLL) -> np.ndarray:
        key = (oh, ow)
        scr = self._work.get(key)
        if scr is None:
            scr = self._work[key] = np.empty(lib.npu_conv_u8_scratch(oh, ow, self.kq), np.uint8)
        return scr


class MatMulWeights:
    """A constant centered right operand B (K, N) packed as the kernel's columns: per column its
    bytes (``byte_form``), in panels of 16 columns x 4 k (K padded with zeros; a's rows hold
    their zero point there, so the padding adds nothing), the zero points and the column terms
    sum_k B - K4 zB. ``make`` returns None where
    the kernel cannot take it."""

    def __init__(self, raw: np.ndarray, zp: np.ndarray, bmax: int) -> None:
        k, n = raw.shape
        self.k, self.n, self.kq, self.bmax = k, n, -(-k // 4), bmax
        self.unsigned = raw.dtype == np.uint8  # the packed side's signedness
        panels = -(-n // 16)
        full = np.zeros((4 * self.kq, panels * 16), raw.dtype)  # k past K: a's rows hold their zero point
        full[:k, :n] = raw
        self.zq = _pad16(zp, n)
        self.cq = full.astype(np.int32).sum(axis=0, dtype=np.int32) - np.int32(4 * self.kq) * self.zq
        self._qscratch: dict[int, np.ndarray] = {}
        self.packed = np.ascontiguousarray(
            full.view(np.uint8).reshape(self.kq, 4, panels, 16).transpose(2, 0, 3, 1)).reshape(-1)

    @classmethod
    def make(cls, b: np.ndarray) -> MatMulWeights | None:
        """From a centered integer operand (K, N); None: not 2-D, a column spanning more than 256
        values, or the kernel not available here."""
        if b.ndim != 2 or not b.size or not available():
            return None
        form = byte_form(b, 1)
        if form is None:
            return None
        return cls(form[0], form[1], int(np.abs(b).max()))

    def __call__(self, a: np.ndarray, a_zp: np.ndarray | int | None) -> np.ndarray | None:
        """int32 (a - a_zp) @ B for a (..., K) of uint8/int8 with a scalar or per-row zero point;
        None where a is not 8-bit, its zero point has another shape, or the sums could leave int32
        (the caller's path)."""
        if a.dtype not in _BYTES or a.shape[-1] != self.k:
            return None
        lead = a.shape[:-1]
        a2 = a.reshape(-1, self.k)
        m = a2.shape[0]
        za = np.zeros(1, np.int32) if a_zp is None else np.asarray(a_zp).reshape(-1).astype(np.int32)
        if za.size not in (1, m):
            return None
        ii = np.iinfo(a.dtype)
        amax = max(abs(int(ii.max) - int(za.min())), abs(int(ii.min) - int(za.max())))
        if not _fits(self.k, amax, self.bmax):
            return None
        flip = _flip(a.dtype, not self.unsigned)
        k4 = 4 * self.kq
        zb = np.broadcast_to(_view_value(za, a.dtype, flip), (m,)).astype(np.int32)
        if flip or k4 != self.k or not a2.flags.c_contiguous:
            rows = np.empty((m, k4), np.uint8)
            np.bitwise_xor(a2.view(np.uint8), np.uint8(flip), out=rows[:, :self.k])
            rows[:, self.k:] = (np.broadcast_to(za, (m,)).astype(a.dtype).view(np.uint8) ^ np.uint8(flip))[:, None]
        else:
            rows = a2.view(np.uint8)
        view = rows.view(np.int8 if self.unsigned else np.uint8)
        rb = view.sum(axis=1, dtype=np.int32)
        y = np.empty((m, self.n), np.int32)
        _lib().npu_gemm_u8s8(_ptr(rows), m, k4, _ptr(self.packed), self.n, self.kq, int(not self.unsigned),
                             _ptr(zb), _ptr(rb), _ptr(self.zq), _ptr(self.cq), _ptr(y), self.n)
        return y.reshape((*lead, self.n))

    def qgemm(self, x: np.ndarray, mult: np.ndarray, add: np.ndarray | None = None) -> np.ndarray | None:
        """add + float32((quant_u8(x) - zp) @ B) * (x_scale * mult) for float32 x (M, K) quantized
        from its own range as onnxruntime's dynamic GEMMs do (nodes/quant_kernels.py
        QuantizedGemm: the same float operations in the same order, so the same bits), in one
        call; ``mult`` has N values or one. None where the caller's path must run (NaN or
        infinity in x, sums that could leave int32)."""
        m, k = x.shape
        if k != self.k or not _fits(k, 255, self.bmax):
            return None
        if x.dtype != np.float32 or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, np.float32)
        mult = np.ascontiguousarray(mult, np.float32).reshape(-1)
        if add is not None and (add.dtype != np.float32 or not add.flags.c_contiguous or add.shape != (m, self.n)):
            add = np.ascontiguousarray(np.broadcast_to(add, (m, self.n)), np.float32)
        scr = self._qscratch.get(m)
        if scr is None:
            scr = self._qscratch[m] = np.empty(m * (4 * self.kq + 4 * self.n + 8) + 64, np.uint8)
        out = np.empty((m, self.n), np.float32)
        done = _lib().npu_qgemm_f32(_ptr(x), m, k, _ptr(self.packed), self.n, self.kq, int(self.unsigned),
                                    _ptr(self.zq), _ptr(self.cq), _ptr(mult), int(mult.size > 1),
                                    None if add is None else _ptr(add), _ptr(out), _ptr(scr))
        return out if done == 1 else None
