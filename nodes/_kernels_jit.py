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

# _IN_PLACE: A one-pass kernel ``f(x, out)`` that may be called with ``out`` the very array ``x`` runs a
# loop of its own for that case, reading and writing ``x`` only: with two names for one buffer,
# LLVM's run-time overlap check fails and the whole pass runs scalar. Measured on 401,408
# float32 in place (one process, best of 60): HardSwish 233 -> 38 us, Clip 465 -> 58,
# HardSigmoid 275 -> 48, Relu 113 -> 31 (into a new buffer all take ~100 us).


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
def erf_flat(x, out, near, far):  # pragma: no cover - compiled
    # erf: both polynomials for every element, then a select. The body must stay in this loop
    # (a helper function, even inlined, measured 4x slower: the loop no longer vectorizes).
    for i in range(x.size):
        v = np.float64(x[i])
        a = abs(v)
        lo = poly12(near, 2.0 * a * a - 1.0) * v
        hi = poly21(far, (min(a, 4.0) - 2.5) / 1.5)
        hi = hi if v > 0.0 else -hi
        e = lo if a < 1.0 else hi
        e = e if a == a else v
        out[i] = e


@njit(cache=True, nogil=True, inline="always", fastmath=_FAST)
def _hard_swish1(v, sixth, half, zero, one):  # pragma: no cover - compiled
    t = v * sixth + half
    return v * min(max(t, zero), one)


@njit(cache=True, nogil=True, fastmath=_FAST)
def hard_swish_flat(x, out):  # pragma: no cover - compiled
    # (in place: see _IN_PLACE)
    sixth, half = x.dtype.type(1.0 / 6.0), x.dtype.type(0.5)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    if x.ctypes.data == out.ctypes.data:
        for i in range(x.size):
            x[i] = _hard_swish1(x[i], sixth, half, zero, one)
    else:
        for i in range(x.size):
            out[i] = _hard_swish1(x[i], sixth, half, zero, one)


@njit(cache=True, nogil=True, inline="always", fastmath=_FAST)
def _phase_taps_acc(xs, w, oc, d, lo, cnt, qs, offs, kh, kw):  # pragma: no cover - compiled
    # d[0:cnt] += the taps of output channel oc over the output positions lo.. of its group's
    # phase planes xs (cg, s*s, Hq*Wq): per input channel, per kernel row, the running sum in
    # a register (acc + w0*s0 + w1*s1 + ... in tap order)
    cg = w.shape[1]
    for ci in range(cg):
        src_c = xs[ci]
        for ky in range(kh):
            t = ky * kw
            if kw == 3:
                w0, w1, w2 = w[oc, ci, t], w[oc, ci, t + 1], w[oc, ci, t + 2]
                s0 = src_c[qs[t], offs[t] + lo:]
                s1 = src_c[qs[t + 1], offs[t + 1] + lo:]
                s2 = src_c[qs[t + 2], offs[t + 2] + lo:]
                for i in range(cnt):
                    d[i] = d[i] + w0 * s0[i] + w1 * s1[i] + w2 * s2[i]
            elif kw == 5:
                w0, w1, w2 = w[oc, ci, t], w[oc, ci, t + 1], w[oc, ci, t + 2]
                w3, w4 = w[oc, ci, t + 3], w[oc, ci, t + 4]
                s0 = src_c[qs[t], offs[t] + lo:]
                s1 = src_c[qs[t + 1], offs[t + 1] + lo:]
                s2 = src_c[qs[t + 2], offs[t + 2] + lo:]
                s3 = src_c[qs[t + 3], offs[t + 3] + lo:]
                s4 = src_c[qs[t + 4], offs[t + 4] + lo:]
                for i in range(cnt):
                    d[i] = d[i] + w0 * s0[i] + w1 * s1[i] + w2 * s2[i] + w3 * s3[i] + w4 * s4[i]
            elif kw == 7:
                w0, w1, w2 = w[oc, ci, t], w[oc, ci, t + 1], w[oc, ci, t + 2]
                w3, w4, w5, w6 = w[oc, ci, t + 3], w[oc, ci, t + 4], w[oc, ci, t + 5], w[oc, ci, t + 6]
                s0 = src_c[qs[t], offs[t] + lo:]
                s1 = src_c[qs[t + 1], offs[t + 1] + lo:]
                s2 = src_c[qs[t + 2], offs[t + 2] + lo:]
                s3 = src_c[qs[t + 3], offs[t + 3] + lo:]
                s4 = src_c[qs[t + 4], offs[t + 4] + lo:]
                s5 = src_c[qs[t + 5], offs[t + 5] + lo:]
                s6 = src_c[qs[t + 6], offs[t + 6] + lo:]
                for i in range(cnt):
                    d[i] = (d[i] + w0 * s0[i] + w1 * s1[i] + w2 * s2[i] + w3 * s3[i]
                            + w4 * s4[i] + w5 * s5[i] + w6 * s6[i])
            else:
                for kx in range(kw):
                    wv = w[oc, ci, t + kx]
                    src = src_c[qs[t + kx], offs[t + kx] + lo:]
                    for i in range(cnt):
                        d[i] += wv * src[i]


@njit(cache=True, nogil=True, inline="always")
def _phase_fill(src, xs, pt, pl, sy, sx, hq, wq):  # pragma: no cover - compiled
    # the interior of one channel's phase planes xs (s*s, Hq*Wq) <- src (H, W): padded element
    # (r, col) = src[r - pt, col - pl] lands in phase (r % sy, col % sx) at (r // sy, col // sx).
    # Positions outside src are never written (the caller zeroes xs once: the same positions are
    # padding for every channel). Negative pads crop.
    # The phase row and plane of padded row r + pt advance by counting, not by a division per
    # row: a 64-bit division with Python's floor semantics cost about as much as copying the
    # row (256 channels of 14 x 14: the whole fill 98 -> 21.5 us).
    h, wd = src.shape
    r0, r1 = max(0, -pt), min(h, hq * sy - pt)
    c0, c1 = max(0, -pl), min(wd, wq * sx - pl)
    ry, qy = divmod(r0 + pt, sy)
    for r in range(r0, r1):
        row = src[r]
        base = ry * wq
        q = qy * sx
        qy += 1
        if qy == sy:
            qy = 0
            ry += 1
        if sx == 1:
            dst = xs[q, base + c0 + pl:]
            sv = row[c0:]
            for j in range(c1 - c0):
                dst[j] = sv[j]
        elif sx == 2:  # column pairs in one interleaved pass (2.5x a strided read per phase)
            col = c0
            if (col + pl) % 2 == 1 and col < c1:
                xs[q + 1, base + (col + pl) // 2] = row[col]
                col += 1
            npair = (c1 - col) // 2
            j0 = base + (col + pl) // 2
            d0 = xs[q, j0:]
            d1 = xs[q + 1, j0:]
            sv = row[col:]
            for j in range(npair):
                e = sv[2 * j]
                o = sv[2 * j + 1]
                d0[j] = e
                d1[j] = o
            if col + 2 * npair < c1:
                xs[q, base + (c1 - 1 + pl) // 2] = row[c1 - 1]
        else:
            for px in range(sx):  # the columns of phase px: a strided read, a contiguous write
                first = c0 + (px - (c0 + pl)) % sx
                if first >= c1:
                    continue
                dst = xs[q + px, base + (first + pl) // sx:]
                for j in range((c1 - first + sx - 1) // sx):
                    dst[j] = row[first + j * sx]


@njit(cache=True, nogil=True, inline="always")
def _clip1(v, lo, hi):  # pragma: no cover - compiled
    # np.clip's min(max(v, lo), hi), ties kept (clip(-0, 0, 6) is -0): a NaN v (or bound)
    # stays NaN, lo > hi gives hi
    m = v if (v != v or v >= lo) else lo
    return m if (m != m or m <= hi) else hi


@njit(cache=True, nogil=True)
def clip_flat(x, out, lo, hi):  # pragma: no cover - compiled
    # (in place: see _IN_PLACE)
    if x.ctypes.data == out.ctypes.data:
        for i in range(x.size):
            x[i] = _clip1(x[i], lo, hi)
    else:
        for i in range(x.size):
            out[i] = _clip1(x[i], lo, hi)


@njit(cache=True, nogil=True)
def hard_sigmoid_flat(x, out, alpha, beta):  # pragma: no cover - compiled
    # clip(x * alpha + beta, 0, 1), the product and the sum each rounded (no contraction)
    # (in place: see _IN_PLACE)
    zero, one = x.dtype.type(0.0), x.dtype.type(1.0)
    if x.ctypes.data == out.ctypes.data:
        for i in range(x.size):
            x[i] = _clip1(x[i] * alpha + beta, zero, one)
    else:
        for i in range(x.size):
            out[i] = _clip1(x[i] * alpha + beta, zero, one)


@njit(cache=True, nogil=True)
def relu_flat(x, out):  # pragma: no cover - compiled
    # max(x, 0) as np.maximum gives it: NaN stays NaN, -0 becomes +0
    # (in place: see _IN_PLACE)
    zero = x.dtype.type(0.0)
    if x.ctypes.data == out.ctypes.data:
        for i in range(x.size):
            x[i] = _relu1(x[i], zero)
    else:
        for i in range(x.size):
            out[i] = _relu1(x[i], zero)


@njit(cache=True, nogil=True, inline="always")
def _relu1(v, zero):  # pragma: no cover - compiled
    # np.maximum(v, 0): NaN stays NaN, -0 becomes +0
    return v if v > zero else (v if v != v else zero)


@njit(cache=True, nogil=True)
def add_relu_flat(a, b, out):  # pragma: no cover - compiled
    # max(a + b, 0): the sum rounded in the inputs' type, then relu_flat's max (NaN stays NaN,
    # -0 becomes +0); out may be a or b
    # (into a or b: see _IN_PLACE)
    zero = a.dtype.type(0.0)
    if out.ctypes.data == a.ctypes.data:
        for i in range(a.size):
            a[i] = _relu1(a[i] + b[i], zero)
    elif out.ctypes.data == b.ctypes.data:
        for i in range(a.size):
            b[i] = _relu1(a[i] + b[i], zero)
    else:
        for i in range(a.size):
            out[i] = _relu1(a[i] + b[i], zero)


@njit(cache=True, nogil=True)
def int_bias_scale(x, b, s, out):  # pragma: no cover - compiled
    # out (N, C, S) float32 = float32(int32(x + b[c])) * s: an int32 accumulator plus its
    # per-channel int32 bias (wrapping as numpy's int32 add does), converted to float32 and
    # scaled, each step rounded as the ops (Add, Cast, Mul) round it
    n_batch, c, size = x.shape
    for n in range(n_batch):
        for ch in range(c):
            bv = b[ch]
            src = x[n, ch]
            dst = out[n, ch]
            for i in range(size):
                dst[i] = np.float32(np.int32(src[i] + bv)) * s


@njit(cache=True, nogil=True, fastmath=_FAST)
def conv2d_grouped(x, w, b, out, pt, pl, sy, sx, hq, wq, qs, offs, kw, band):  # pragma: no cover - compiled
    # out (N, M, OH, OW) = x (N, C, H, W) padded (pt top, pl left; zeros) convolved by w
    # (M, C/group, kh*kw) plus b (M,; empty: none), one group at a time in cache: the group's
    # input channels split into their stride phases (cg, s*s, Hq*Wq; every tap then reads one
    # phase plane with unit stride), each output channel summed at the phase pitch Wq into a
    # scratch plane (band by band, in L1) from its bias and copied out row by row.
    n_batch, c, _, _ = x.shape
    m, cg, taps = w.shape
    oh, ow = out.shape[2], out.shape[3]
    mg = m // (c // cg)
    kh = taps // kw  # once: a runtime division inside the channel loop costs as much as a short row
    span = (oh - 1) * wq + ow
    xs = np.zeros((cg, sy * sx, hq * wq), x.dtype)
    wide = np.empty(oh * wq, x.dtype)
    zero = x.dtype.type(0.0)
    for n in range(n_batch):
        for g in range(c // cg):
            for ci in range(cg):
                _phase_fill(x[n, g * cg + ci], xs[ci], pt, pl, sy, sx, hq, wq)
            for oc in range(g * mg, (g + 1) * mg):
                bv = b[oc] if b.size else zero
                for i in range(span):
                    wide[i] = bv
                for lo in range(0, span, band):
                    cnt = min(lo + band, span) - lo
                    _phase_taps_acc(xs, w, oc, wide[lo:lo + cnt], lo, cnt, qs, offs, kh, kw)
                dst = out[n, oc]
                for oy in range(oh):
                    src = wide[oy * wq:]
                    drow = dst[oy]
                    for j in range(ow):
                        drow[j] = src[j]


@njit(cache=True, nogil=True, inline="always")
def _combine(dst, src, cnt, is_max):  # pragma: no cover - compiled
    # dst[:cnt] = max(dst, src) (NaN propagating, as np.maximum) or dst + src
    if is_max:
        for j in range(cnt):
            a, v = dst[j], src[j]
            dst[j] = np.maximum(a, v)
    else:
        for j in range(cnt):
            dst[j] = dst[j] + src[j]


@njit(cache=True, nogil=True, error_model="numpy")  # an empty window's 0 / 0 is NaN, as in numpy
def pool2d_separable(x, out, kh, kw, sy, sx, dh, dw, pt, pl, is_max, div):  # pragma: no cover - compiled
    # every window of float x (N, C, H, W), padded by pt rows on top and pl columns on the left
    # (and as far as the windows reach at the end) with -inf (max) or 0 (sum), reduced into out
    # (N, C, OH, OW), max or sum, then divided by div (OH, OW) unless div is empty (an
    # average). The padding is never built: per output row the kh rows combine column by
    # column into a padded-width row whose pl + right-hand border columns hold the fill (a
    # padding row of a sum adds the zeros itself: -0 + 0 is +0, as with a padded copy), then
    # the kw taps along that row, as nodes.pooling.separable_reduce orders them (rows first,
    # taps in order), so sums round alike; max propagates NaN as np.maximum does. At stride 2
    # the combined row is split into its even and odd columns first, so every tap is a
    # contiguous pass too.
    n_batch, c, oh, ow = out.shape
    h, w = x.shape[2], x.shape[3]
    fill = x.dtype.type(-np.inf) if is_max else x.dtype.type(0.0)
    wp = max(pl + w, (ow - 1) * sx + (kw - 1) * dw + 1)
    acc = np.empty(wp, x.dtype)
    half = (wp + 1) // 2
    ph = np.empty((2, half), x.dtype)
    scale = div.size > 0
    for j in range(pl):
        acc[j] = fill
    for j in range(pl + w, wp):
        acc[j] = fill
    for n in range(n_batch):
        for ch in range(c):
            for oy in range(oh):
                r = oy * sy - pt
                if 0 <= r < h:
                    r0 = x[n, ch, r]
                    for j in range(w):
                        acc[pl + j] = r0[j]
                else:
                    for j in range(w):
                        acc[pl + j] = fill
                for ky in range(1, kh):
                    r = oy * sy + ky * dh - pt
                    seg = acc[pl:pl + w]
                    if 0 <= r < h:
                        _combine(seg, x[n, ch, r], w, is_max)
                    elif not is_max:  # a padding row of zeros
                        for j in range(w):
                            seg[j] = seg[j] + fill
                dst = out[n, ch, oy]
                if sx == 1 or sx == 2:
                    if sx == 2:
                        ev, od = ph[0], ph[1]
                        for j in range(wp // 2):
                            ev[j] = acc[2 * j]
                            od[j] = acc[2 * j + 1]
                        if wp % 2:
                            ev[wp // 2] = acc[wp - 1]
                    for j in range(ow):
                        dst[j] = ph[0, j] if sx == 2 else acc[j]
                    for kx in range(1, kw):
                        t = kx * dw
                        _combine(dst, ph[t % 2, t // 2:] if sx == 2 else acc[t:], ow, is_max)
                else:
                    for ox in range(ow):
                        row = acc[ox * sx:]
                        m = row[0]
                        for kx in range(1, kw):
                            v = row[kx * dw]
                            if is_max:
                                m = np.maximum(m, v)
                            else:
                                m = m + v
                        dst[ox] = m
                if scale:
                    dv = div[oy]
                    for j in range(ow):
                        dst[j] = dst[j] / dv[j]


@njit(cache=True, nogil=True)
def hard_swish_chain(x, c, lo, hi, k, mode):  # pragma: no cover - compiled
    # in place: t = clip(x + c, lo, hi); x = (x * t) / k, (x * t) * k, x * (t / k) or x * (t * k)
    # for mode 0-3: a spelled-out HardSwish, each operation rounded in x's type as numpy does
    for i in range(x.size):
        v = x[i]
        t = np.minimum(np.maximum(v + c, lo), hi)
        if mode == 0:
            x[i] = (v * t) / k
        elif mode == 1:
            x[i] = (v * t) * k
        elif mode == 2:
            x[i] = v * (t / k)
        else:
            x[i] = v * (t * k)


@njit(cache=True, nogil=True, fastmath=_FAST)
def depthwise_nhwc(xp, w, out, sy, sx, dh, dw):  # pragma: no cover - compiled
    # a depthwise convolution channels-last: xp (N, Hp, Wp, C) padded, w (kh, kw, C), out
    # (N, OH, OW, C) holding the bias; per output pixel and tap one contiguous FMA loop over the
    # channels (the taps in the order (ky, kx), as conv2d_phase adds them)
    n_batch, oh, ow, c = out.shape
    kh, kw = w.shape[0], w.shape[1]
    for n in range(n_batch):
        for oy in range(oh):
            for ox in range(ow):
                d = out[n, oy, ox]
                for ky in range(kh):
                    row = xp[n, oy * sy + ky * dh]
                    for kx in range(kw):
                        src = row[ox * sx + kx * dw]
                        wt = w[ky, kx]
                        for ch in range(c):
                            d[ch] += wt[ch] * src[ch]


@njit(cache=True, nogil=True, error_model="numpy")  # x / 0 is inf or NaN, as in numpy
def channel_chain(x, out, codes, params):  # pragma: no cover - compiled
    # out (N, C, S) = the chain applied to x (N, C, S; out may be x): per channel row, x's row
    # copied into out's (when they differ), then each op of the chain in turn in place (the row
    # stays in cache): 0 x*p, 1 x+p, 2 x-p, 3 p-x, 4 x/p, 5 p/x, 6 max(x, 0); p = params[op,
    # channel]. Each op rounds in x's type, as the numpy op does. (Reading x's row in the first
    # op instead measured 3x slower: the two rows may alias, and the loops stop vectorizing.)
    n_batch, c, s = x.shape
    copy = x.ctypes.data != out.ctypes.data
    for n in range(n_batch):
        for ch in range(c):
            row = out[n, ch]
            if copy:
                src = x[n, ch]
                for i in range(s):
                    row[i] = src[i]
            for k in range(codes.size):
                code = codes[k]
                p = params[k, ch]
                if code == 0:
                    for i in range(s):
                        row[i] = row[i] * p
                elif code == 1:
                    for i in range(s):
                        row[i] = row[i] + p
                elif code == 2:
                    for i in range(s):
                        row[i] = row[i] - p
                elif code == 3:
                    for i in range(s):
                        row[i] = p - row[i]
                elif code == 4:
                    for i in range(s):
                        row[i] = row[i] / p
                elif code == 5:
                    for i in range(s):
                        row[i] = p / row[i]
                else:
                    for i in range(s):
                        row[i] = np.maximum(row[i], 0)


@njit(cache=True, nogil=True)
def lrn_base(x, out, lo, hi, k, bias):  # pragma: no cover - compiled
    # LRN's base, out (N, C, S) = bias + k * (sum of x^2 over the channels c-lo .. c+hi, clipped):
    # the window sum as numpy's form takes it, a running sum over the channels (cumsum: csum[c+1]
    # = csum[c] + x[c] * x[c]) differenced at the window's ends, each operation rounded in x's
    # type (k * w, then bias + that), row by row over the contiguous positions
    n_batch, c, s = x.shape
    csum = np.zeros((c + 1, s), x.dtype)
    for n in range(n_batch):
        for ch in range(c):
            prev, cur, row = csum[ch], csum[ch + 1], x[n, ch]
            for i in range(s):
                v = row[i]
                cur[i] = prev[i] + v * v
        for ch in range(c):
            up = csum[min(ch + hi, c - 1) + 1]
            down = csum[max(ch - lo, 0)]
            dst = out[n, ch]
            for i in range(s):
                dst[i] = bias + k * (up[i] - down[i])


# float32 exp(v) = 2^n * e^r, n = round(v / ln 2), r = v - n ln 2 (ln 2 in two parts, Cody-Waite),
# e^r = 1 + r + r^2 P(r) with Cephes expf's degree-5 P (relative error ~1e-7 on |r| <= ln 2 / 2).
# float32 constants, so numba keeps the arithmetic in float32 (8 lanes of AVX2).
_F32 = np.float32
_LOG2E = _F32(1.4426950408889634)
_LN2_HI = _F32(0.693359375)
_LN2_LO = _F32(-2.12194440e-4)
_EXP_P = (_F32(1.9875691500e-4), _F32(1.3981999507e-3), _F32(8.3334519073e-3), _F32(4.1665795894e-2),
          _F32(1.6666665459e-1), _F32(5.0000001201e-1))
_EXP_LO = _F32(-87.0)  # 2^n stays a normal float32 (n in [-126, 127])
_EXP_HI = _F32(88.0)
_ROUND = _F32(12582912.0)  # 1.5 * 2^23: adding and subtracting it rounds to an integer
_BIAS = _F32(127.0)
_MANT = _F32(8388608.0)  # 2^23
_ZERO = _F32(0.0)
_HALF = _F32(0.5)
_ONE = _F32(1.0)
_TWO = _F32(2.0)
_INF = _F32(np.inf)
_RSQRT2 = _F32(0.7071067811865476)
_ERFC_R = tuple(_F32(c) for c in (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                                  0.09678418, 0.37409196, 1.00002368, -1.26551223))
"""erfc(z) = t exp(-z^2 + R(t)), t = 1 / (1 + z/2), z >= 0: Numerical Recipes' erfcc, relative
error below 1.2e-7 for every z (R's coefficients, highest degree first)."""
EXP_BLOCK = 512


@njit(cache=True, nogil=True, inline="always", fastmath=_FAST)
def exp_block(v, e, k, m):  # pragma: no cover - compiled
    # exp(v[i]) = e[i] * (k[i] viewed as float32) for i < m, v clamped to [-87, 88] (2^n stays
    # normal); 2^n's bit pattern (n + 127) << 23 is an exact float product converted to int32.
    # A loop of its own over block arrays, so it vectorizes where it is inlined.
    p0, p1, p2, p3, p4, p5 = _EXP_P
    for i in range(m):
        w = min(max(v[i], _EXP_LO), _EXP_HI)
        nf = (w * _LOG2E + _ROUND) - _ROUND
        r = w - nf * _LN2_HI
        r = r - nf * _LN2_LO
        p = p0 * r + p1
        p = p * r + p2
        p = p * r + p3
        p = p * r + p4
        p = p * r + p5
        e[i] = (p * (r * r) + r) + _ONE
        k[i] = np.int32((nf + _BIAS) * _MANT)


@njit(cache=True, nogil=True)
def _exp_scratch():  # pragma: no cover - compiled
    # one block's buffers for exp_block: the input copy, -x, the mantissa part, the exponent bits
    return (np.empty(EXP_BLOCK, np.float32), np.empty(EXP_BLOCK, np.float32), np.empty(EXP_BLOCK, np.float32),
            np.empty(EXP_BLOCK, np.int32))


@njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST)
def logistic_flat(x, out, silu):  # pragma: no cover - compiled
    # out = 1 / (1 + exp(-x)) (silu: x / (1 + exp(-x))) for float32 x, block by block. Below
    # x = -87 the result rounds to 1 (x) anyway; above -x = 88 exp(-x) counts as infinite, as
    # numpy's overflow makes it (result 0, or -0 for SiLU; the exact value is below 6.1e-39).
    # NaN stays NaN. x is copied into the block (xs) so that an in-place call (out is x) still
    # passes the vectorized loops' runtime overlap checks.
    n = x.size
    xs, v, e, k = _exp_scratch()
    scale = k.view(np.float32)
    for b0 in range(0, n, EXP_BLOCK):
        m = min(EXP_BLOCK, n - b0)
        xb = x[b0:b0 + m]
        ob = out[b0:b0 + m]
        for i in range(m):
            xs[i] = xb[i]
            v[i] = -xb[i]
        exp_block(v, e, k, m)
        if silu:
            for i in range(m):
                xi = xs[i]
                d = _ONE + e[i] * scale[i]
                y = xi / (d if xi >= -_EXP_HI else _INF)
                ob[i] = y if xi == xi else xi
        else:
            for i in range(m):
                xi = xs[i]
                d = _ONE + e[i] * scale[i]
                y = _ONE / (d if xi >= -_EXP_HI else _INF)
                ob[i] = y if xi == xi else xi


@njit(cache=True, nogil=True, error_model="numpy", fastmath=_FAST)
def gelu_flat(x, out):  # pragma: no cover - compiled
    # out = x / 2 * (1 + erf(x / sqrt 2)) for float32 x, block by block: c = erfc(|x| / sqrt 2)
    # (_ERFC_R), then 1 + erf is c for negative x (no cancellation) and 2 - c otherwise. NaN
    # stays NaN; an overlapping out is handled as in logistic_flat.
    n = x.size
    xs, v, e, k = _exp_scratch()
    ts = np.empty(EXP_BLOCK, np.float32)
    scale = k.view(np.float32)
    r0, r1, r2, r3, r4, r5, r6, r7, r8, r9 = _ERFC_R
    for b0 in range(0, n, EXP_BLOCK):
        m = min(EXP_BLOCK, n - b0)
        xb = x[b0:b0 + m]
        ob = out[b0:b0 + m]
        for i in range(m):
            xs[i] = xb[i]
        for i in range(m):
            z = abs(xs[i]) * _RSQRT2
            t = _ONE / (_ONE + _HALF * z)
            p = r0 * t + r1
            p = p * t + r2
            p = p * t + r3
            p = p * t + r4
            p = p * t + r5
            p = p * t + r6
            p = p * t + r7
            p = p * t + r8
            p = p * t + r9
            ts[i] = t
            v[i] = p - z * z
        exp_block(v, e, k, m)
        for i in range(m):
            xi = xs[i]
            c = ts[i] * e[i] * scale[i]
            y = _HALF * xi * (c if xi < _ZERO else _TWO - c)
            ob[i] = y if xi == xi else xi


@njit(cache=True, nogil=True)
def shifted_sum(z, zi, offs, b, out, pitch, r0, rows):  # pragma: no cover - compiled
    # out[0, m, r0 + oy, ox] = b[m] + the sum over taps t (in order) of
    # z[zi[t], m, oy*pitch + offs[t] + ox] for oy < rows (b empty: no bias): a convolution's
    # per-tap products, computed as one GEMM per stride phase on the input itself, summed at
    # their shifts. z (taps, M, L); out (1, M, OH, OW).
    m_out, ow = out.shape[1], out.shape[3]
    zero = out.dtype.type(0.0)
    for m in range(m_out):
        bv = b[m] if b.size else zero
        for oy in range(rows):
            d = out[0, m, r0 + oy]
            for j in range(ow):
                d[j] = bv
            base = oy * pitch
            for t in range(zi.size):
                src = z[zi[t], m, base + offs[t]:]
                for j in range(ow):
                    d[j] = d[j] + src[j]


@njit(cache=True, nogil=True, inline="always")
def _quant_pass(x, s, z, lo, hi, out, fake):  # pragma: no cover - compiled
    # q = clip(rint(x / s[c]) + z[c], lo, hi) with the float32 roundings of quantize_linear over
    # x, out (outer, C, inner); out = q (QuantizeLinear, cast to out's type: exact, q is integral
    # and in range) or, with ``fake``, (q - z[c]) * s[c] (then DequantizeLinear: q - z is exact in
    # float32 for 8- and 16-bit types). Returns how many x are NaN: numpy's cast of a NaN to an
    # integer type decides those, so the caller recomputes them its own way.
    n_outer, c, inner = x.shape
    nan = 0
    for o in range(n_outer):
        for ch in range(c):
            sv, zv = s[ch], z[ch]
            src, dst = x[o, ch], out[o, ch]
            if fake:
                for i in range(inner):
                    q = np.rint(src[i] / sv) + zv
                    nan += q != q
                    dst[i] = ((lo if q < lo else (hi if q > hi else q)) - zv) * sv
            else:
                for i in range(inner):
                    q = np.rint(src[i] / sv) + zv
                    nan += q != q
                    dst[i] = lo if q < lo else (hi if q > hi else q)
    return nan


@njit(cache=True, nogil=True)
def fake_quant(x, s, z, lo, hi, out):  # pragma: no cover - compiled
    # QuantizeLinear then DequantizeLinear in one pass (_quant_pass)
    return _quant_pass(x, s, z, lo, hi, out, True)


@njit(cache=True, nogil=True, fastmath={"contract"})
def error_sums(r, x, out):  # pragma: no cover - compiled
    # out = [sum(r^2), sum((r-x)^2), sum(x^2), sum(r*x), max |r - x|] of float32 r, x: the sums
    # in float64 (16 lanes, then the lanes in order), the max of the float32 differences, NaN
    # when any difference is NaN. The lanes are written out: LLVM vectorizes neither a float
    # max reduction nor, without reassociation, a sum.
    lanes = 16
    acc = np.zeros((4, lanes))
    mx = np.zeros(lanes, np.float32)
    n = r.size // lanes * lanes
    for j in range(0, n, lanes):
        for k in range(lanes):
            rv, xv = np.float64(r[j + k]), np.float64(x[j + k])
            e = rv - xv
            acc[0, k] += rv * rv
            acc[1, k] += e * e
            acc[2, k] += xv * xv
            acc[3, k] += rv * xv
            ae = abs(r[j + k] - x[j + k])
            mx[k] = ae if ae > mx[k] else mx[k]
    out[:] = 0.0
    m = np.float32(0.0)
    for k in range(lanes):
        m = mx[k] if mx[k] > m else m
        for t in range(4):
            out[t] += acc[t, k]
    for i in range(n, r.size):
        rv, xv = np.float64(r[i]), np.float64(x[i])
        e = rv - xv
        out[0] += rv * rv
        out[1] += e * e
        out[2] += xv * xv
        out[3] += rv * xv
        ae = abs(r[i] - x[i])
        m = ae if ae > m else m
    out[4] = np.nan if out[1] != out[1] else m


@njit(cache=True, nogil=True)
def quantize(x, s, z, lo, hi, out):  # pragma: no cover - compiled
    # QuantizeLinear in one pass (_quant_pass)
    return _quant_pass(x, s, z, lo, hi, out, False)


@njit(cache=True, nogil=True)
def dequantize(x, s, z, out):  # pragma: no cover - compiled
    # DequantizeLinear of an 8- or 16-bit x: out = float32(x - z[c]) * s[c] (the difference is
    # exact in float32, as the int32 one quantize_linear converts). x (outer, C, inner).
    n_outer, c, inner = x.shape
    for o in range(n_outer):
        for ch in range(c):
            sv, zv = s[ch], z[ch]
            src, dst = x[o, ch], out[o, ch]
            for i in range(inner):
                dst[i] = (np.float32(src[i]) - zv) * sv
