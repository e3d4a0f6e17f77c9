"""Compiled (numba) kernels for the loops numpy cannot express without extra passes or copies.

numpy runs one ufunc per pass over memory and a grouped convolution as im2col plus a batched
matrix-vector product; on one thread both leave most of the time in memory traffic and Python
dispatch (issue #19: depthwise convs 5-14x onnxruntime, Gelu's erf 12x). These kernels do the
same arithmetic in one pass, in the input's float type (float32 stays float32):

- ``conv2d_direct``: a grouped 2-D convolution summed tap by tap into the output row, which
  stays in cache; for depthwise and small-group convolutions, whose im2col is mostly copying.
- ``erf32_`` / ``gelu32_`` / ``hard_swish_``: elementwise functions in one pass, written into a
  caller-given buffer (which may be the input itself). (Sigmoid is not here: numpy's SIMD exp
  in three in-place passes measured 2x faster than a scalar exp loop.)

Compiled with ``cache=True`` so the machine code is kept in numba's cache: next to this file
when its folder is writable, else in the user's cache (numba falls back to
``~/.cache/numba`` or ``NUMBA_CACHE_DIR`` on a read-only install). ``fastmath`` is limited to
contraction (fused multiply-add) and signed zeros, which change results only within float
rounding; NaN and infinity keep their meaning.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from nodes.polyfit import ERF_NEAR, fit_poly

_FAST = {"contract", "nsz"}


@njit(cache=True, nogil=True, fastmath=_FAST)
def _conv2d_direct(xp, w, out, sh, sw, dh, dw, group):  # pragma: no cover - compiled
    n_batch, m, oh, ow = out.shape
    cg = w.shape[1]
    kh, kw = w.shape[2], w.shape[3]
    mg = m // group
    for n in range(n_batch):
        for oc in range(m):
            g = oc // mg
            for oy in range(oh):
                row = out[n, oc, oy]
                for ci in range(cg):
                    c = g * cg + ci
                    for ky in range(kh):
                        for kx in range(kw):
                            wv = w[oc, ci, ky, kx]
                            # a slice starting at the tap: the index below is provably >= 0, so
                            # the loop compiles to vector FMAs (no negative-index wrap check)
                            src = xp[n, c, oy * sh + ky * dh, kx * dw:]
                            if sw == 1:
                                for ox in range(ow):
                                    row[ox] += wv * src[ox]
                            else:
                                step = src[::sw]
                                for ox in range(ow):
                                    row[ox] += wv * step[ox]


def conv2d_direct(xp: np.ndarray, w: np.ndarray, out: np.ndarray, strides: tuple[int, int],
                  dils: tuple[int, int], group: int) -> np.ndarray:
    """Add the grouped convolution of padded NCHW ``xp`` by (M, C/group, kh, kw) ``w`` into
    ``out`` (N, M, OH, OW; holding the bias or zeros). All three of one float dtype, C-contiguous."""
    _conv2d_direct(xp, w, out, int(strides[0]), int(strides[1]), int(dils[0]), int(dils[1]), int(group))
    return out


@njit(cache=True, nogil=True, inline="always", fastmath=_FAST)
def _poly12(c, s):  # pragma: no cover - compiled
    """Horner with constant indices (a loop over c would stop vectorization)."""
    r = c[0] * s + c[1]
    r = r * s + c[2]
    r = r * s + c[3]
    r = r * s + c[4]
    r = r * s + c[5]
    r = r * s + c[6]
    r = r * s + c[7]
    r = r * s + c[8]
    r = r * s + c[9]
    r = r * s + c[10]
    r = r * s + c[11]
    return r


@njit(cache=True, nogil=True, inline="always", fastmath=_FAST)
def _poly21(c, s):  # pragma: no cover - compiled
    """Horner with constant indices (a loop over c would stop vectorization)."""
    r = c[0] * s + c[1]
    r = r * s + c[2]
    r = r * s + c[3]
    r = r * s + c[4]
    r = r * s + c[5]
    r = r * s + c[6]
    r = r * s + c[7]
    r = r * s + c[8]
    r = r * s + c[9]
    r = r * s + c[10]
    r = r * s + c[11]
    r = r * s + c[12]
    r = r * s + c[13]
    r = r * s + c[14]
    r = r * s + c[15]
    r = r * s + c[16]
    r = r * s + c[17]
    r = r * s + c[18]
    r = r * s + c[19]
    r = r * s + c[20]
    return r


@njit(cache=True, nogil=True, fastmath=_FAST)
def _erf_flat(x, out, near, far, gelu):  # pragma: no cover - compiled
    # erf: both polynomials for every element, then a select. The body must stay in this loop
    # (a helper function, even inlined, measured 4x slower: the loop no longer vectorizes).
    scale = 0.7071067811865476 if gelu else 1.0
    for i in range(x.size):
        w = np.float64(x[i])
        v = w * scale
        a = abs(v)
        lo = _poly12(near, 2.0 * a * a - 1.0) * v
        hi = _poly21(far, (min(a, 4.0) - 2.5) / 1.5)
        hi = hi if v > 0.0 else -hi
        e = lo if a < 1.0 else hi
        e = e if a == a else v
        out[i] = 0.5 * w * (1.0 + e) if gelu else e


@njit(cache=True, nogil=True, fastmath=_FAST)
def _hard_swish_flat(x, out):  # pragma: no cover - compiled
    one = x.dtype.type(1.0)
    zero = x.dtype.type(0.0)
    sixth = x.dtype.type(1.0 / 6.0)
    half = x.dtype.type(0.5)
    for i in range(x.size):
        v = x[i]
        t = v * sixth + half
        t = min(max(t, zero), one)
        out[i] = v * t


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
    _erf_flat(x.reshape(-1), out.reshape(-1), ERF_NEAR, ERF_FAR, False)
    return out


def gelu32_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Gelu x * (1 + erf(x / sqrt(2))) / 2 of C-contiguous float32 ``x`` in one pass (float64
    inside, so at least as close to the exact value as the op-by-op float32 chain)."""
    if out is None:
        out = np.empty_like(x)
    _erf_flat(x.reshape(-1), out.reshape(-1), ERF_NEAR, ERF_FAR, True)
    return out


def hard_swish_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * clip(x / 6 + 1/2, 0, 1) in one pass; ``out`` may be ``x``."""
    return _flat_pass(_hard_swish_flat, x, out)

