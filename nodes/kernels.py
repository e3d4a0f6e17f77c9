"""Compiled (numba) kernels for the loops numpy cannot express without extra passes or copies.

numpy runs one ufunc per pass over memory and a grouped convolution as im2col plus a batched
matrix-vector product; on one thread both leave most of the time in memory traffic and Python
dispatch (issue #19: depthwise convs 5-14x onnxruntime, Gelu's erf 12x). These kernels do the
same arithmetic in one pass, in the input's float type (float32 stays float32):

- ``conv2d_direct``: a grouped 2-D convolution summed tap by tap into the output row, which
  stays in cache; for depthwise and small-group convolutions, whose im2col is mostly copying.
- ``erf32_`` / ``hard_swish_``: elementwise functions in one pass, written into a
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


@njit(cache=True, nogil=True, fastmath=_FAST)
def _erf_flat(x, out, near, far):  # pragma: no cover - compiled
    nf = far.shape[0]
    for i in range(x.size):
        v = np.float64(x[i])
        a = abs(v)
        if a < 1.0:
            s = 2.0 * a * a - 1.0
            r = near[0]
            for j in range(1, near.size):
                r = r * s + near[j]
            out[i] = v * r
        elif a < 1.0 + nf * ERF_SEGMENT:
            t = (a - 1.0) / ERF_SEGMENT
            k = int(t)
            s = (t - k) * 2.0 - 1.0
            r = far[k, 0]
            for j in range(1, far.shape[1]):
                r = r * s + far[k, j]
            out[i] = r if v > 0 else -r
        elif a == a:
            out[i] = 1.0 if v > 0 else -1.0
        else:
            out[i] = v


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


ERF_SEGMENT = 0.25
"""Width of the pieces erf is fitted on over [1, 4); beyond 4 erf is 1 in float32."""
_ERF_FAR = np.stack([fit_poly(math.erf, 1.0 + k * ERF_SEGMENT, 1.0 + (k + 1) * ERF_SEGMENT, 9)
                     for k in range(int(3 / ERF_SEGMENT))])


def erf32_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """erf of C-contiguous float32 ``x`` in one pass, correctly rounded to float32.

    Evaluated in float64: x * A(2x^2 - 1) below 1 (``near``, relative error < 1e-15), one
    degree-9 fit per quarter unit on [1, 4), and +-1 beyond (erf(4) rounds to 1 in float32).
    Checked on 2 million points over [-6, 6] plus tiny values: every result equals float64
    erf rounded to float32. ``out`` may be ``x``.
    """
    if out is None:
        out = np.empty_like(x)
    _erf_flat(x.reshape(-1), out.reshape(-1), ERF_NEAR, _ERF_FAR)
    return out


def hard_swish_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * clip(x / 6 + 1/2, 0, 1) in one pass; ``out`` may be ``x``."""
    return _flat_pass(_hard_swish_flat, x, out)

