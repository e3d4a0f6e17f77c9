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
def conv2d_phase(xph, w, out, qs, offs, kw, span, band):  # pragma: no cover - compiled
    # xph (N, C, s*s, Hq*Wq): the padded input split into its stride phases (phase (py, px) holds
    # rows py, py+s, ... and columns px, px+s, ...), so every tap reads one phase contiguously.
    # out (N, M, OH*Wq): rows at the phase pitch Wq (columns from OW on are scratch). Tap t
    # reads phase qs[t] at flat offset offs[t]; a row of kw taps is one contiguous loop over
    # the output positions (a band at a time, kept in L1), the running sum in a register:
    # acc + w0*s0 + w1*s1 + ... in tap order, the same FMAs as one pass per tap.
    n_batch, m, _ = out.shape
    cg = w.shape[1]
    kh = w.shape[2] // kw
    mg = m // (xph.shape[1] // cg)
    for n in range(n_batch):
        for oc in range(m):
            g = oc // mg
            dst = out[n, oc]
            for lo in range(0, span, band):
                hi = min(lo + band, span)
                cnt = hi - lo
                d = dst[lo:hi]
                for ci in range(cg):
                    src_c = xph[n, g * cg + ci]
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


@njit(cache=True, nogil=True)
def phase_split(x, out, pt, pl, sy, sx, wq):  # pragma: no cover - compiled
    # out (N, C, sy*sx, Hq*Wq) <- the input padded by pt rows on top and pl columns on the left
    # (zeros outside x; negative pads crop), split into its stride phases: padded element
    # (r, col) lands in phase (r % sy, col % sx) at (r // sy, col // sx)
    n_batch, c, h, w = x.shape
    hq = out.shape[3] // wq
    for n in range(n_batch):
        for ch in range(c):
            for r in range(hq * sy):
                py, i = r % sy, r // sy
                xr = r - pt
                if xr < 0 or xr >= h:
                    for px in range(sx):
                        out[n, ch, py * sx + px, i * wq:(i + 1) * wq] = 0
                    continue
                src = x[n, ch, xr]
                # padded columns wq*sx; x column = col - pl for 0 <= col - pl < w
                c0 = min(wq * sx, max(0, pl))
                c1 = max(c0, min(wq * sx, w + pl))
                for px in range(sx):
                    row = out[n, ch, py * sx + px, i * wq:(i + 1) * wq]
                    row[:(c0 - px + sx - 1) // sx if c0 > px else 0] = 0
                    row[max(0, (c1 - px + sx - 1) // sx):] = 0
                if sx == 1:
                    row = out[n, ch, py, i * wq + c0:]
                    sv = src[c0 - pl:]
                    for j in range(c1 - c0):
                        row[j] = sv[j]
                elif sx == 2:
                    # whole column pairs [2*j0, 2*j1) inside [c0, c1): one interleaved pass
                    j0 = (c0 + 1) // 2
                    j1 = max(j0, c1 // 2)
                    r0 = out[n, ch, py * 2, i * wq + j0:]
                    r1 = out[n, ch, py * 2 + 1, i * wq + j0:]
                    sv = src[2 * j0 - pl:]
                    for j in range(j1 - j0):
                        r0[j] = sv[2 * j]
                        r1[j] = sv[2 * j + 1]
                    if c0 % 2 == 1 and c0 < c1:  # a leading odd column
                        out[n, ch, py * 2 + 1, i * wq + c0 // 2] = src[c0 - pl]
                    if c1 % 2 == 1 and c1 - 1 >= c0 and c1 - 1 >= 2 * j1:  # a trailing even column
                        out[n, ch, py * 2, i * wq + (c1 - 1) // 2] = src[c1 - 1 - pl]
                else:
                    for col in range(c0, c1):
                        out[n, ch, py * sx + col % sx, i * wq + col // sx] = src[col - pl]


@njit(cache=True, nogil=True)
def pool2d_separable(xp, out, kh, kw, sy, sx, dh, dw, is_max):  # pragma: no cover - compiled
    # every window of the padded (N, C, Hp, Wp) xp reduced into out (N, C, OH, OW), max or sum,
    # separably: per output row the kh input rows combined column by column (contiguous), then
    # the kw taps along that row, as nodes.pooling.separable_reduce orders them (rows first,
    # taps in order), so sums round alike; max propagates NaN as np.maximum does. At stride 2
    # the combined row is split into its even and odd columns first, so every tap is a
    # contiguous pass too.
    n_batch, c, oh, ow = out.shape
    wp = xp.shape[3]
    acc = np.empty(wp, xp.dtype)
    half = (wp + 1) // 2
    ph = np.empty((2, half), xp.dtype)
    for n in range(n_batch):
        for ch in range(c):
            for oy in range(oh):
                r0 = xp[n, ch, oy * sy]
                for j in range(wp):
                    acc[j] = r0[j]
                for ky in range(1, kh):
                    r = xp[n, ch, oy * sy + ky * dh]
                    if is_max:
                        for j in range(wp):
                            a, v = acc[j], r[j]
                            acc[j] = np.maximum(a, v)
                    else:
                        for j in range(wp):
                            acc[j] = acc[j] + r[j]
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
                        src = ph[t % 2, t // 2:] if sx == 2 else acc[t:]
                        if is_max:
                            for j in range(ow):
                                a, v = dst[j], src[j]
                                dst[j] = np.maximum(a, v)
                        else:
                            for j in range(ow):
                                dst[j] = dst[j] + src[j]
                    continue
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


@njit(cache=True, nogil=True)
def channel_chain(x, codes, params):  # pragma: no cover - compiled
    # in place on x (N, C, S): per channel row, each op of the chain in turn (the row stays in
    # cache): 0 x*p, 1 x+p, 2 x-p, 3 p-x, 4 x/p, 5 p/x, 6 max(x, 0); p = params[op, channel].
    # Each op rounds in x's type, as the numpy op does.
    n_batch, c, s = x.shape
    for n in range(n_batch):
        for ch in range(c):
            row = x[n, ch]
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
