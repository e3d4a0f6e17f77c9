"""Compiled (numba) kernels for the loops numpy cannot express without extra passes or copies.

numpy runs one ufunc per pass over memory and a grouped convolution as im2col plus a batched
matrix-vector product; on one thread both leave most of the time in memory traffic and Python
dispatch (issue #19: depthwise convs 5-14x onnxruntime, Gelu's erf 12x). These kernels do the
same arithmetic in one pass, in the input's float type (float32 stays float32):

- ``conv2d_phases``: a grouped 2-D convolution for depthwise and small-group convolutions,
  whose im2col is mostly copying: the padded input split into its stride phases (so a strided
  tap reads contiguous memory), each row of taps one contiguous loop over the output plane,
  band by band in L1, with the running sum in a register.
- ``pool2d``: max and sum (average) pooling windows, row by row in cache, the padding
  virtual (numpy's separable passes over strided views of the whole tensor were 3-10x
  onnxruntime; the padded copy was half of what remained).
- ``erf32_`` / ``gelu32_`` / ``hard_swish_`` / ``logistic32_`` / ``relu_`` / ``clip_`` /
  ``hard_sigmoid_`` / ``silu32_``: elementwise
  functions in one pass, written into a caller-given buffer (which may be the input itself).
  The logistic and Gelu kernels compute exp in float32 with a polynomial (a scalar libm exp
  loop measured 2x slower than numpy's SIMD exp; this one vectorizes).

The loops themselves are in nodes/_kernels_jit.py, imported on the first call (numba's import
costs 1-2 s; commands that run no kernel do not pay it). The first call of each kernel in a
process loads its cached machine code; only the first process after an install compiles.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nodes import direct_conv
from nodes.polyfit import ERF_NEAR, fit_poly


def _jit():
    """The compiled loops (nodes/_kernels_jit.py); numba is imported on the first call (then
    the module is kept: the import statement cost ~0.7 us per kernel call)."""
    global _JIT
    if _JIT is None:
        from nodes import _kernels_jit

        _JIT = _kernels_jit
    return _JIT


_JIT = None


PHASE_BAND = 2048
"""Output positions one band of the phase kernel covers (8 KB of float32): the band stays in
L1 while every tap adds into it."""


@functools.lru_cache(maxsize=256)
def _phase_taps(kh: int, kw: int, sy: int, sx: int, dh: int, dw: int, wq: int) -> tuple[np.ndarray, np.ndarray]:
    """Per tap (ky, kx): the stride phase it reads and its flat offset in that phase plane."""
    ty, tx = np.divmod(np.arange(kh) * dh, sy), np.divmod(np.arange(kw) * dw, sx)
    qs = (ty[1][:, None] * sx + tx[1][None, :]).reshape(-1).astype(np.int64)
    offs = (ty[0][:, None] * wq + tx[0][None, :]).reshape(-1).astype(np.int64)
    return qs, offs


NHWC_CHANNELS = 32
NHWC_PLANE = (64, 400)
"""Depthwise convolutions with at least NHWC_CHANNELS channels and output planes up to
NHWC_PLANE (at stride 1, at larger strides) run channels-last (depthwise_nhwc): there the
phase kernel's short per-row loops are mostly overhead, while a loop over the channels stays
long. Measured (BLAS 1 thread, side by side): 256ch 14x14 5x5 s2 0.30 -> 0.10 ms, 192ch 20x20
s2 0.21 -> 0.09, 136ch 28x28 s2 0.21 -> 0.14, 544ch 7x7 s1 0.13 -> 0.08; slower at stride 1
from 14x14 (256ch 5x5: 0.19 -> 0.28) and at stride 2 on 28x28 outputs."""


def _depthwise_nhwc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: Sequence[int],
                    dils: Sequence[int], pads: Sequence[int], out_hw: Sequence[int]) -> np.ndarray:
    """Depthwise convolution through a padded channels-last copy (the same sums as conv2d_phases)."""
    n_batch, c, h, wd = x.shape
    pt, pl, pb, pr = pads
    xp = np.zeros((n_batch, h + pt + pb, wd + pl + pr, c), x.dtype)
    xp[:, pt:pt + h, pl:pl + wd, :] = x.transpose(0, 2, 3, 1)
    out = np.empty((n_batch, int(out_hw[0]), int(out_hw[1]), c), x.dtype)
    if b is None:
        out.fill(0)
    else:
        out[...] = b.astype(x.dtype, copy=False)
    wt = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0))
    _jit().depthwise_nhwc(xp, wt, out, int(strides[0]), int(strides[1]), int(dils[0]), int(dils[1]))
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def conv2d_phases(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: Sequence[int],
                  dils: Sequence[int], pads: Sequence[int], out_hw: Sequence[int]) -> np.ndarray:
    """The grouped 2-D convolution (N, M, OH, OW) of NCHW ``x`` padded by ``pads`` (top, left,
    bottom, right; negative crops) by (M, C/group, kh, kw) ``w`` plus bias ``b`` (or none), all
    of one float dtype.

    One group at a time, in cache: its input channels are padded and split into their stride
    phases (stride s: s*s planes, each contiguous), so every tap of a strided convolution reads
    one phase plane with unit stride; a row of taps is then one contiguous loop over the output
    plane (kept at the phase pitch in a scratch plane, band by band in L1) with the running sum
    in a register, and the plane is copied into the output row by row (no padded copy of the
    whole input, no cropping copy of the whole output). Per output element the taps add in the order
    (input channel, ky, kx) from the bias. For depthwise and small-group convolutions, whose
    im2col is mostly copying.
    """
    n_batch, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    sy, sx = int(strides[0]), int(strides[1])
    oh, ow = int(out_hw[0]), int(out_hw[1])
    pt, pl, pb, pr = (int(p) for p in pads)
    if cg == 1 and m == c and c >= NHWC_CHANNELS and oh * ow <= NHWC_PLANE[max(sy, sx) > 1] and min(pt, pl, pb, pr) >= 0:
        return _depthwise_nhwc(x, w, b, (sy, sx), dils, (pt, pl, pb, pr), (oh, ow))
    hq, wq = -(-(h + pt + pb) // sy), -(-(wd + pl + pr) // sx)
    qs, offs = _phase_taps(kh, kw, sy, sx, int(dils[0]), int(dils[1]), wq)
    out = np.empty((n_batch, m, oh, ow), x.dtype)
    bias = np.empty(0, x.dtype) if b is None else b.astype(x.dtype, copy=False).reshape(m)
    _jit().conv2d_grouped(np.ascontiguousarray(x), np.ascontiguousarray(w).reshape(m, cg, kh * kw), bias, out,
                          pt, pl, sy, sx, hq, wq, qs, offs, kw, PHASE_BAND)
    return out


SHIFT_BAND_BYTES = 1 << 20
"""Per-tap products one band of conv2d_shifted holds (in L2 while they are summed)."""


def shifted_weights(w: np.ndarray, strides: Sequence[int], dils: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, C, kh, kw) weights as conv2d_shifted takes them: (kh*kw, M, C), the taps ordered by
    the stride phase they read (so each phase's taps are one GEMM), the index of tap (ky, kx)
    in that order, and each tap's (phase, row shift, column shift)."""
    m, c, kh, kw = w.shape
    sy, sx = int(strides[0]), int(strides[1])
    taps = [(((ky * dils[0]) % sy) * sx + (kx * dils[1]) % sx, (ky * dils[0]) // sy, (kx * dils[1]) // sx)
            for ky in range(kh) for kx in range(kw)]
    order = sorted(range(kh * kw), key=lambda t: taps[t][0])
    zi = np.empty(kh * kw, np.int64)
    zi[order] = np.arange(kh * kw)
    wst = np.ascontiguousarray(w.reshape(m, c, kh * kw).transpose(2, 0, 1)[order])
    return wst, zi, np.array(taps, np.int64)


def conv2d_shifted(x: np.ndarray, prepared: tuple[np.ndarray, np.ndarray, np.ndarray], b: np.ndarray | None,
                   strides: Sequence[int], pads: Sequence[int], out_hw: Sequence[int]) -> np.ndarray:
    """A dense 2-D convolution (N, M, OH, OW) without im2col: the padded input split into its
    stride phases, one GEMM per phase of that phase's taps' weights (taps*M, C) by the phase
    plane itself (C, rows*Wq, no copy), and the per-tap products summed at their shifts
    (shifted_sum), band by band of output rows. It moves taps*M*OH*Wq values where im2col
    moves taps*C*OH*OW: the cheaper form when a conv has fewer output than input channels.
    ``prepared`` is shifted_weights(w, ...); the sum runs over taps of per-tap GEMM sums (a
    different rounding order than im2col's, within float rounding)."""
    wst, zi, taps = prepared
    kk, m, c = wst.shape
    n_batch = x.shape[0]
    sy, sx = int(strides[0]), int(strides[1])
    oh, ow = int(out_hw[0]), int(out_hw[1])
    pt, pl, pb, pr = (int(p) for p in pads)
    h, wd = x.shape[2:]
    hq, wq = -(-(h + pt + pb) // sy), -(-(wd + pl + pr) // sx)
    offs = taps[:, 1] * wq + taps[:, 2]
    ry = int(taps[:, 1].max())
    ph = np.empty(kk, np.int64)
    ph[zi] = taps[:, 0]  # the phase of each position of the tap order (sorted)
    phases = [(q, int(np.searchsorted(ph, q)), int(np.searchsorted(ph, q, "right"))) for q in range(sy * sx)]
    phases = [p for p in phases if p[2] > p[1]]
    y = np.empty((n_batch, m, oh, ow), x.dtype)
    bias = np.empty(0, x.dtype) if b is None else b.astype(x.dtype, copy=False).reshape(m)
    rows = max(1, SHIFT_BAND_BYTES // max(1, kk * m * wq * x.itemsize) - ry)
    z = np.empty((kk, m, (min(rows, oh) + ry) * wq), x.dtype)
    for n in range(n_batch):
        xph = np.zeros((c, sy * sx, hq, wq), x.dtype)
        xp = xph.reshape(c, sy * sx, hq * wq)
        for q in {p[0] for p in phases}:  # phase (py, px): padded rows py, py+sy, ... and columns px, px+sx, ...
            py, px = divmod(q, sx)
            r_lo, c_lo = -(-(pt - py) // sy), -(-(pl - px) // sx)  # first phase row/column inside x
            r_lo, c_lo = max(0, r_lo), max(0, c_lo)
            src = x[n, :, r_lo * sy + py - pt::sy, c_lo * sx + px - pl::sx]
            nr, nc = min(src.shape[1], hq - r_lo), min(src.shape[2], wq - c_lo)
            xph[:, q, r_lo:r_lo + nr, c_lo:c_lo + nc] = src[:, :nr, :nc]
        for r0 in range(0, oh, rows):
            nr = min(rows, oh - r0)
            span = (nr + ry) * wq
            zb = z[:, :, :span] if span == z.shape[2] else np.empty((kk, m, span), x.dtype)
            for q, j0, j1 in phases:
                np.matmul(wst[j0:j1].reshape((j1 - j0) * m, c), xp[:, q, r0 * wq:r0 * wq + span],
                          out=zb[j0:j1].reshape((j1 - j0) * m, span))
            _jit().shifted_sum(zb, zi, offs, bias, y[n:n + 1], wq, r0, nr)
    return y


def pool2d(x: np.ndarray, kernel: Sequence[int], out_hw: Sequence[int], strides: Sequence[int],
           dils: Sequence[int], is_max: bool, pads: Sequence[int] = (0, 0),
           div: np.ndarray | None = None) -> np.ndarray:
    """Max or sum over every window of NCHW float ``x`` (N, C, OH, OW), padded by ``pads`` (top,
    left; the bottom and right as far as the windows reach) with -inf (max) or zeros (sum)
    without building the padded copy, then divided by ``div`` (OH, OW) when given (an
    average, in the same pass); one compiled pass per output row: the window's rows combined
    along the row (contiguous), then its taps. The same order as numpy's separable passes
    over a padded copy (nodes.pooling.separable_reduce), so the same values."""
    if x.dtype == np.float32 and direct_conv.lanes():  # the same loops in C, vectorized
        return direct_conv.pool2d(np.ascontiguousarray(x), kernel, out_hw, strides, dils, is_max, pads, div)
    out = np.empty((*x.shape[:2], int(out_hw[0]), int(out_hw[1])), x.dtype)
    d = np.empty((0, 0), x.dtype) if div is None else np.ascontiguousarray(div, x.dtype).reshape(out.shape[2:])
    _jit().pool2d_separable(np.ascontiguousarray(x), out, int(kernel[0]), int(kernel[1]), int(strides[0]),
                            int(strides[1]), int(dils[0]), int(dils[1]), int(pads[0]), int(pads[1]),
                            bool(is_max), d)
    return out


def _flat_pass(fn, x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """Run a one-pass elementwise kernel over C-contiguous float32/float64 ``x`` into ``out``."""
    if out is None:
        out = np.empty_like(x)
    fn(x.reshape(-1), out.reshape(-1))
    return out


def compiled_float(x: np.ndarray) -> bool:
    """Whether the one-pass kernels take ``x``: a C-contiguous float32/float64 array."""
    return x.dtype in (np.float32, np.float64) and x.flags.c_contiguous and x.ndim > 0


ERF_FAR = fit_poly(math.erf, 1.0, 4.0, 20)
"""erf on [1, 4] as one degree-20 polynomial in (x - 2.5) / 1.5 (absolute error ~1e-12);
beyond 4 its value at 4 (1 - 1.5e-8) rounds to 1 in float32, as erf does."""


def erf32_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """erf of C-contiguous float32 ``x`` in one pass, correctly rounded to float32.

    Evaluated in float64: x * A(2x^2 - 1) below 1 (relative error < 1e-15), one polynomial on
    [1, 4] (ERF_FAR), +-1 beyond.
    Checked on 2 million points over [-6, 6] plus tiny values: every result equals float64
    erf rounded to float32. ``out`` may be ``x``.
    """
    if out is None:
        out = np.empty_like(x)
    _jit().erf_flat(x.reshape(-1), out.reshape(-1), ERF_NEAR, ERF_FAR)
    return out


def gelu32_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Gelu x * (1 + erf(x / sqrt(2))) / 2 of C-contiguous float32 ``x`` in one float32 pass;
    ``out`` may be ``x``.

    1 + erf(v) is computed as erfc(|v|) for negative v and 2 - erfc(|v|) otherwise, erfc(z) =
    t exp(-z^2 + R(t)) with t = 1 / (1 + z/2) (relative error < 1.2e-7) and logistic32_'s exp:
    at most 3.9e-7 from the exact value on [-8, 8] (the float32 op chain Div, Erf, Add, Mul,
    Mul: 4.5e-7), and for negative x relative to the value, where the chain's 1 + erf cancels.
    Measured 3.2x faster than the float64 erf polynomials it replaced (1M elements, 1 thread).
    """
    return _flat_pass(_jit().gelu_flat, x, out)


def hard_swish_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * clip(x / 6 + 1/2, 0, 1) in one pass; ``out`` may be ``x``."""
    return _flat_pass(_jit().hard_swish_flat, x, out)



def relu_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0) of C-contiguous float32/float64 ``x`` in one compiled pass, the values
    np.maximum gives (NaN stays NaN); ``out`` may be ``x``. numpy's NaN-propagating maximum
    measured 6x slower on 18K-200K float32 elements (18.5 vs 3.0 us, 173 vs 27 us)."""
    return _flat_pass(_jit().relu_flat, x, out)


def add_relu_(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(a + b, 0) of two C-contiguous float32/float64 arrays of one shape and dtype in one
    compiled pass (a residual Add or Sum and its ReLU), the values np.add and relu_ give;
    ``out`` may be ``a`` or ``b``."""
    if out is None:
        out = np.empty_like(a)
    _jit().add_relu_flat(a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out


def int_bias_scale_(x: np.ndarray, b: np.ndarray, s: np.float32) -> np.ndarray:
    """float32(x + b) * s of a C-contiguous int32 accumulator ``x`` (N, C, ...) and an int32 bias
    of one value per channel (``b``, C values), into a new float32 array in one compiled pass:
    the values numpy's int32 add, astype(float32) and float32 multiply give."""
    out = np.empty(x.shape, np.float32)
    lead = (x.shape[0], x.shape[1], -1)
    _jit().int_bias_scale(x.reshape(lead), np.ascontiguousarray(b, np.int32).reshape(-1), np.float32(s),
                          out.reshape(lead))
    return out


def clip_(x: np.ndarray, lo: Any, hi: Any, out: np.ndarray | None = None) -> np.ndarray:
    """np.clip(x, lo, hi) of C-contiguous float32/float64 ``x`` in one compiled pass (the same
    values: NaN stays NaN, lo > hi gives hi); ``out`` may be ``x``. numpy's clip measured
    12.3 vs ~3 us on 18K float32 elements."""
    if out is None:
        out = np.empty_like(x)
    dt = x.dtype.type
    _jit().clip_flat(x.reshape(-1), out.reshape(-1), dt(lo), dt(hi))
    return out


def hard_sigmoid_(x: np.ndarray, alpha: Any, beta: Any, out: np.ndarray | None = None) -> np.ndarray:
    """clip(x * alpha + beta, 0, 1) of C-contiguous float32/float64 ``x`` in one compiled pass,
    the product and the sum each rounded in x's dtype as the numpy ops round them; ``out`` may
    be ``x``."""
    if out is None:
        out = np.empty_like(x)
    dt = x.dtype.type
    _jit().hard_sigmoid_flat(x.reshape(-1), out.reshape(-1), dt(alpha), dt(beta))
    return out


def logistic32_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 / (1 + exp(-x)) of C-contiguous float32 ``x`` in one pass; ``out`` may be ``x``.

    exp in float32 (Cody-Waite reduction, Cephes expf's polynomial): within 1.2e-7 relative of
    the exact value where it is above 1e-30 (numpy's float32 chain: 2.1e-7), 0 below -88 (the
    exact value is below 6.1e-39), NaN for NaN."""
    return _flat_pass(_logistic, x, out)


def silu32_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * sigmoid(x), as x / (1 + exp(-x)), of C-contiguous float32 ``x`` in one pass (the
    exp of logistic32_); ``out`` may be ``x``."""
    return _flat_pass(_silu, x, out)


def _logistic(x: np.ndarray, out: np.ndarray) -> None:
    _jit().logistic_flat(x, out, False)


def _silu(x: np.ndarray, out: np.ndarray) -> None:
    _jit().logistic_flat(x, out, True)


def hard_swish_chain_(x: np.ndarray, c: Any, lo: Any, hi: Any, k: Any, mode: int) -> np.ndarray:
    """A spelled-out HardSwish in one pass, in place: t = clip(x + c, lo, hi), then (x * t) / k,
    (x * t) * k, x * (t / k) or x * (t * k) for ``mode`` 0-3 (the orders exporters write it in).
    Each operation rounds in x's dtype as the numpy op chain does (same numbers). ``x`` must be
    a C-contiguous float array and the constants of its dtype."""
    dt = x.dtype.type
    _jit().hard_swish_chain(x.reshape(-1), dt(c), dt(lo), dt(hi), dt(k), int(mode))
    return x


CHANNEL_CODES = {"Mul": (0, 0), "Add": (1, 1), "Sub": (2, 3), "Div": (4, 5)}
"""channel_chain_'s code of each binary op: (with the chained value first, with it second)."""

_ONE_OP = {code: np.array([code], np.int64) for code in range(7)}


def per_channel_(op: str, x: np.ndarray, p: np.ndarray, x_first: bool) -> np.ndarray | None:
    """``x op p`` (or ``p op x``) written into ``x`` when ``p`` holds one value per channel of ``x``
    ((1, C, 1, ...) or (C, 1, ...)) and both are float32/float64 of one dtype: one compiled
    pass over each channel's row (channel_chain_), the values numpy's broadcast gives. numpy's
    broadcast multiply by (1, C, 1, 1) measured 2x its plain multiply (78 vs 41 us on 64x56x56).
    None when the shapes are not that case."""
    if x.ndim < 3 or not x.flags.c_contiguous or not x.flags.writeable or p.dtype != x.dtype:
        return None
    c = x.shape[1]
    ones = (1,) * (x.ndim - 2)
    if c < 2 or p.shape not in ((1, c, *ones), (c, *ones)) or not compiled_float(x):
        return None
    codes = CHANNEL_CODES[op]
    return channel_chain_(x, _ONE_OP[codes[0 if x_first else 1]], np.ascontiguousarray(p).reshape(1, c))


def channel_chain_(x: np.ndarray, codes: np.ndarray, params: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Per-channel elementwise ops (codes: 0 x*p, 1 x+p, 2 x-p, 3 p-x, 4 x/p, 5 p/x, 6 max(x, 0))
    applied in turn to every channel row of C-contiguous float ``x`` (N, C, ...), each rounded as
    its numpy op; ``params`` (ops, C) of x's dtype. Written into ``x`` itself, or into ``out``
    (C-contiguous, x's shape and dtype): then one pass reads x and writes out."""
    if out is None:
        out = x
    lead = (x.shape[0], x.shape[1], -1)
    _jit().channel_chain(x.reshape(lead), out.reshape(lead), codes, params)
    return out


def lrn_base_(x: np.ndarray, size: int, alpha: float, bias: float) -> np.ndarray:
    """LRN's ``bias + alpha / size * window`` (N, C, ...) of float32/float64 ``x``, where window is
    the sum of squares over ``size`` neighbouring channels: one compiled pass per channel row
    (numpy's cumsum over the channel axis and the two gathers took 2.9 of the op's 3.8 ms on
    192 x 56 x 56), the same running sums, differences and roundings (x's type), so the same
    values."""
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    xc = np.ascontiguousarray(x)
    out = np.empty(xc.shape, xc.dtype)
    lead = (xc.shape[0], xc.shape[1], -1)
    t = xc.dtype.type
    _jit().lrn_base(xc.reshape(lead), out.reshape(lead), lo, hi, t(alpha / size), t(bias))
    return out


_NARROW_INTS = ("int8", "uint8", "int16", "uint16")


def _channel_lead(shape: tuple[int, ...], n: int, axis: int | None) -> tuple[int, int, int] | None:
    """``shape`` as (outer, channels, inner) for ``n`` parameters: per tensor (``n`` 1 or
    ``axis`` None) or per channel along ``axis``; None when ``n`` fits neither."""
    if n == 1:
        return 1, 1, math.prod(shape)
    if axis is None or not -len(shape) <= axis < len(shape):
        return None
    a = axis % len(shape)
    return (math.prod(shape[:a]), n, math.prod(shape[a + 1:])) if shape[a] == n else None


def _params(x: np.ndarray, scale: Any, zero_point: Any, axis: int | None):
    """(x float32 contiguous, scale, zero point as float32 vectors, lead) or None."""
    s = np.asarray(scale, np.float32).reshape(-1)
    z = np.zeros(1, np.float32) if zero_point is None else np.asarray(zero_point).astype(np.float32).reshape(-1)
    if z.size == 1 and s.size > 1:
        z = np.repeat(z, s.size)
    lead = _channel_lead(np.shape(x), s.size, axis) if z.size == s.size else None
    return (s, z, lead) if lead is not None else None


def fake_quant_(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, axis: int | None, lo: int,
                hi: int) -> np.ndarray | None:
    """QuantizeLinear then DequantizeLinear of float32 ``x`` to an 8- or 16-bit range [lo, hi], in
    one pass (the two ops' roundings, so the same bits): per tensor, or per channel along
    ``axis`` with 1-D ``scale``/``zero_point``. None when ``x`` holds a NaN (numpy's cast decides
    what a NaN quantizes to) or the parameters fit neither form."""
    p = _params(x, scale, zero_point, axis)
    if p is None:
        return None
    s, z, lead = p
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty(x.shape, np.float32)
    if _jit().fake_quant(x.reshape(lead), s, z, np.float32(lo), np.float32(hi), out.reshape(lead)):
        return None
    return out


def quantize_(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None,
              out_dtype: np.dtype) -> np.ndarray | None:
    """QuantizeLinear of float32 ``x`` by float32 scales to an 8- or 16-bit type in one pass
    (quantize_linear's roundings); None where that does not apply (see fake_quant_)."""
    out_dtype = np.dtype(out_dtype)
    if out_dtype.name not in _NARROW_INTS or x.dtype != np.float32 or np.asarray(scale).dtype != np.float32:
        return None
    p = _params(x, scale, zero_point, axis)
    if p is None:
        return None
    s, z, lead = p
    ii = np.iinfo(out_dtype)
    out = np.empty(x.shape, out_dtype)
    if _jit().quantize(np.ascontiguousarray(x).reshape(lead), s, z, np.float32(ii.min), np.float32(ii.max),
                       out.reshape(lead)):
        return None
    return out


def dequantize_(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None) -> np.ndarray | None:
    """DequantizeLinear of an 8- or 16-bit ``x`` by float32 scales to float32 in one pass; None
    where that does not apply."""
    if x.dtype.name not in _NARROW_INTS or np.asarray(scale).dtype != np.float32:
        return None
    p = _params(x, scale, zero_point, axis)
    if p is None:
        return None
    s, z, lead = p
    out = np.empty(x.shape, np.float32)
    _jit().dequantize(np.ascontiguousarray(x).reshape(lead), s, z, out.reshape(lead))
    return out


def error_sums_(r: np.ndarray, x: np.ndarray) -> np.ndarray:
    """[sum(r^2), sum((r-x)^2), sum(x^2), sum(r*x), max |r-x|] of two float32 arrays of one
    size in one pass: the sums in float64, the max over float32 differences (NaN if any is)."""
    out = np.empty(5)
    _jit().error_sums(np.ascontiguousarray(r, np.float32).reshape(-1),
                      np.ascontiguousarray(x, np.float32).reshape(-1), out)
    return out


def warm_up() -> None:
    """Compile (first process after an install) or load from numba's cache every kernel, for
    float32 and float64, now instead of inside the first run that needs one.

    A compile takes the interpreter for seconds (26 s measured for all kernels on a loaded
    2-core machine; loading the cache ~1-3 s): a GUI calls this before its window shows, the
    test suite before its first (timed) test, so neither a worker-thread analysis nor a timed
    test pays it while the event loop must stay responsive.
    """
    for dt in (np.float32, np.float64):
        xp = np.zeros((1, 2, 3, 3), dt)
        conv2d_phases(xp, np.ones((2, 1, 3, 3), dt), None, (2, 2), (1, 1), (1, 1, 1, 1), (2, 2))
        hard_swish_(np.zeros(2, dt))
        relu_(np.zeros(2, dt))
        add_relu_(np.zeros(2, dt), np.zeros(2, dt))
        clip_(np.zeros(2, dt), 0, 6)
        hard_sigmoid_(np.zeros(2, dt), 0.2, 0.5)
        pool2d(xp, (2, 2), (1, 1), (1, 1), (1, 1), True)
        pool2d(xp, (2, 2), (2, 2), (1, 1), (1, 1), False, (1, 1), np.ones((2, 2), dt))
        conv2d_shifted(xp, shifted_weights(np.ones((1, 2, 2, 2), dt), (1, 1), (1, 1)), None, (1, 1), (0, 0, 0, 0), (2, 2))
        _depthwise_nhwc(xp, np.ones((2, 1, 3, 3), dt), None, (1, 1), (1, 1), (1, 1, 1, 1), (3, 3))
        hard_swish_chain_(np.zeros(2, dt), 3, 0, 6, 6, 0)
        channel_chain_(np.zeros((1, 2, 2), dt), np.arange(7, dtype=np.int64), np.ones((7, 2), dt))
        lrn_base_(np.zeros((1, 2, 2), dt), 3, 1e-4, 1.0)
    int_bias_scale_(np.zeros((1, 2, 2), np.int32), np.zeros(2, np.int32), np.float32(1))
    fake_quant_(np.zeros(2, np.float32), np.float32(1), np.uint8(0), None, 0, 255)
    for idt in _NARROW_INTS:
        dequantize_(quantize_(np.zeros(2, np.float32), np.float32(1), None, None, np.dtype(idt)), np.float32(1), None, None)
    error_sums_(np.zeros(2, np.float32), np.zeros(2, np.float32))
    erf32_(np.zeros(2, np.float32))
    gelu32_(np.zeros(2, np.float32))
    logistic32_(np.zeros(2, np.float32))
    silu32_(np.zeros(2, np.float32))
