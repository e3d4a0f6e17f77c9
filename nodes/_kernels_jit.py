"""The numba-compiled loops behind nodes/kernels.py, imported on their first use there (numba's
import costs 1-2 s, which commands that never run a kernel should not pay).

Compiled with ``cache=True``: the machine code is kept in numba's cache (next to this file when
its folder is writable, else NUMBA_CACHE_DIR or the user's cache), so only the first process
after an install compiles. ``fastmath`` is limited to contraction (fused multiply-add) and
signed zeros, which change results only within float rounding; NaN and infinity keep their
meaning.
"""

import numpy as np
from numba import njit

_FAST = {"contract", "nsz"}


@njit(cache=True, nogil=True, fastmath=_FAST)
def conv2d_direct(xp, w, out, sh, sw, dh, dw, group):  # pragma: no cover - compiled
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


@njit(cache=True, nogil=True, inline="always", fastmath=_FAST)
def poly12(c, s):  # pragma: no cover - compiled
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
def poly21(c, s):  # pragma: no cover - compiled
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
def erf_flat(x, out, near, far, gelu):  # pragma: no cover - compiled
    # erf: both polynomials for every element, then a select. The body must stay in this loop
    # (a helper function, even inlined, measured 4x slower: the loop no longer vectorizes).
    scale = 0.7071067811865476 if gelu else 1.0
    for i in range(x.size):
        w = np.float64(x[i])
        v = w * scale
        a = abs(v)
        lo = poly12(near, 2.0 * a * a - 1.0) * v
        hi = poly21(far, (min(a, 4.0) - 2.5) / 1.5)
        hi = hi if v > 0.0 else -hi
        e = lo if a < 1.0 else hi
        e = e if a == a else v
        out[i] = 0.5 * w * (1.0 + e) if gelu else e


@njit(cache=True, nogil=True, fastmath=_FAST)
def hard_swish_flat(x, out):  # pragma: no cover - compiled
    one = x.dtype.type(1.0)
    zero = x.dtype.type(0.0)
    sixth = x.dtype.type(1.0 / 6.0)
    half = x.dtype.type(0.5)
    for i in range(x.size):
        v = x[i]
        t = v * sixth + half
        t = min(max(t, zero), one)
        out[i] = v * t


@njit(cache=True, nogil=True, fastmath=_FAST)
def conv2d_flat(xp, w, out, dh, dw, group):  # pragma: no cover - compiled
    # stride 1: output (oy, ox) and tap (ky, kx) read the padded plane at flat index
    # oy * wp + ox + (ky * dh * wp + kx * dw), so every tap is one long contiguous loop over
    # the whole plane (rows kept at the input's pitch wp; the columns past ow are scratch)
    n_batch, m, oh, wp = out.shape
    cg = w.shape[1]
    kh, kw = w.shape[2], w.shape[3]
    mg = m // group
    span = oh * wp - (kw - 1) * dw
    for n in range(n_batch):
        for oc in range(m):
            g = oc // mg
            dst = out[n, oc].reshape(-1)
            for ci in range(cg):
                src = xp[n, g * cg + ci].reshape(-1)
                for ky in range(kh):
                    for kx in range(kw):
                        wv = w[oc, ci, ky, kx]
                        s = src[ky * dh * wp + kx * dw:]
                        for i in range(span):
                            dst[i] += wv * s[i]
