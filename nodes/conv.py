"""Convolution ops: Conv, ConvTranspose, DeformConv and Col2Im.

Float32 2-D convolutions run the SIMD kernels of nodes/direct_conv.py where this CPU has them; otherwise
im2col (a strided view copied once) and one matmul per group, batched over groups, or for depthwise and
small groups a compiled direct kernel (nodes/kernels.py). float64 stays float64. The window geometry
helpers here (explicit/auto pads, ceil mode, symbolic dims) are shared with the pooling family.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nodes import direct_conv
from nodes._util import prod, static_dims
from nodes.kernels import conv2d_phases, conv2d_shifted, per_channel_, shifted_weights
from nodes.registry import register
from nodes.rules import WINDOW_RULES
from nodes.spec import (
    AttrSpec,
    Gemm,
    NodeContext,
    OpError,
    OpSpec,
    Port,
    QuantSpec,
    RunContext,
    Work,
    ints,
)
from nodes.types import Dim, TensorType

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

# -- window geometry (shared with pooling) ------------------------------------------------------


def window_attrs(attrs: dict[str, Any], n_spatial: int) -> tuple[list[int], list[int]]:
    """Strides and dilations of a windowed op (defaults 1) checked against the spatial rank."""
    strides = ints(attrs.get("strides")) or [1] * n_spatial
    dils = ints(attrs.get("dilations")) or [1] * n_spatial
    if len(strides) != n_spatial or len(dils) != n_spatial:
        raise OpError(f"strides {strides} / dilations {dils} do not match {n_spatial} spatial dims")
    if min(strides) < 1 or min(dils) < 1:
        raise OpError(f"strides {strides} and dilations {dils} must be >= 1")
    return strides, dils


def explicit_pads(attrs: dict[str, Any], n_spatial: int) -> tuple[list[int], list[int]]:
    """(begin, end) pads from the ``pads`` attribute (zeros when absent)."""
    pads = ints(attrs.get("pads")) or [0] * (2 * n_spatial)
    if len(pads) != 2 * n_spatial:
        raise OpError(f"pads {pads} must hold 2 x {n_spatial} values")
    if any(abs(p) > MAX_PAD for p in pads):
        raise OpError(f"pads {pads} hold a value beyond +-{MAX_PAD:,} (no tensor has such an axis)")
    return pads[:n_spatial], pads[n_spatial:]


MAX_PAD = 2**31 - 1
"""Largest pad a window op accepts: beyond it the output size would overflow int64 sooner or later."""


def window_out_dim(size: Dim, k: int, s: int, d: int, pb: int, pe: int, auto_pad: str,
                   ceil_mode: bool = False) -> Dim:
    """Output length of one sliding-window axis; symbolic sizes pass through when unchanged."""
    ek = (k - 1) * d + 1
    if not isinstance(size, int):
        if s == 1 and (auto_pad in ("SAME_UPPER", "SAME_LOWER") or (auto_pad != "VALID" and ek == 1 + pb + pe)):
            return size
        if s == 1 and ek == 1:
            return size
        return None
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // s)
    if auto_pad == "VALID":
        pb = pe = 0
    span = size + pb + pe - ek
    if span < 0:
        raise OpError(f"window of extent {ek} does not fit an axis of {size} (+{pb + pe} padding)")
    if ceil_mode:
        out = -(-span // s) + 1
        if (out - 1) * s >= size + pb:  # the last window would start in the end padding
            out -= 1
        return out
    return span // s + 1


def window_geometry(in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                    dils: Sequence[int], attrs: dict[str, Any], ceil_mode: bool = False,
                    clamp_same: bool = True) -> tuple[list[int], list[int], list[int]]:
    """(pads_begin, pads_end, out_sizes) of a windowed op on a concrete input.

    With automatic (SAME) padding a kernel smaller than the stride asks for a negative total
    padding: convolutions clamp it to zero, pools (``clamp_same=False``) crop like
    onnxruntime does (the begin pad is the total halved toward zero).
    """
    n = len(in_sizes)
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise OpError(f"unknown auto_pad {auto_pad!r}")
    pb, pe = explicit_pads(attrs, n)
    if auto_pad == "VALID":
        pb, pe = [0] * n, [0] * n
    outs = []
    for i in range(n):
        out = window_out_dim(in_sizes[i], kernel[i], strides[i], dils[i], pb[i], pe[i], auto_pad, ceil_mode)
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            total = (out - 1) * strides[i] + (kernel[i] - 1) * dils[i] + 1 - in_sizes[i]
            if clamp_same or total >= 0:
                total = max(0, total)
                small = total // 2
                pb[i], pe[i] = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
            else:
                head = int(total / 2) if auto_pad == "SAME_UPPER" else int((total + 1) / 2)
                pb[i], pe[i] = head, total - head
        outs.append(out)
    return list(pb), list(pe), outs


def infer_window_shape(ctx: NodeContext, kernel: Sequence[int] | None, lead: Sequence[Dim],
                       ceil_mode: bool = False) -> tuple[Dim, ...] | None:
    """Output shape ``lead + spatial`` of a windowed op from input 0 (None when rank unknown)."""
    xs = ctx.shape(0)
    if xs is None:
        return None
    n = len(xs) - 2
    if n < 1:
        raise OpError(f"{ctx.spec.op_type} needs an input of rank >= 3, got {len(xs)}")
    if kernel is None:
        return (*lead, *([None] * n))
    if len(kernel) != n:
        raise OpError(f"kernel_shape {list(kernel)} does not match {n} spatial dims")
    strides, dils = window_attrs(ctx.attrs, n)
    auto_pad = ctx.attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise OpError(f"unknown auto_pad {auto_pad!r}")
    pb, pe = explicit_pads(ctx.attrs, n)
    out = [window_out_dim(xs[2 + i], kernel[i], strides[i], dils[i], pb[i], pe[i], auto_pad, ceil_mode)
           for i in range(n)]
    return (*lead, *out)


def pad_spatial(x: np.ndarray, pb: Sequence[int], pe: Sequence[int], fill: Any = 0) -> np.ndarray:
    """Pad the spatial axes (2...) of ``x`` with ``fill``; pads may be negative (crop)."""
    if not any(pb) and not any(pe):
        return x
    lead = x.shape[:2]
    shape = [s + b + e for s, b, e in zip(x.shape[2:], pb, pe)]
    out = np.full((*lead, *shape), fill, dtype=x.dtype)
    dst = [slice(None), slice(None)]
    src = [slice(None), slice(None)]
    for s, b, e in zip(x.shape[2:], pb, pe):
        dst.append(slice(max(b, 0), max(b, 0) + s + min(b, 0) + min(e, 0)))
        src.append(slice(max(-b, 0), s - max(-e, 0)))
    out[tuple(dst)] = x[tuple(src)]
    return out


def tap_view(xp: np.ndarray, tap: Sequence[int], out: Sequence[int], strides: Sequence[int],
             dils: Sequence[int]) -> np.ndarray:
    """The strided view of the padded input that kernel tap ``tap`` reads for every output."""
    sl = [slice(None), slice(None)]
    for t, o, s, d in zip(tap, out, strides, dils):
        start = t * d
        sl.append(slice(start, start + (o - 1) * s + 1, s))
    return xp[tuple(sl)]


def window_view(xp: np.ndarray, kernel: Sequence[int], out: Sequence[int], strides: Sequence[int],
                dils: Sequence[int]) -> np.ndarray:
    """A (N, C, *kernel, *out) strided view of the padded input (no copy)."""
    st = xp.strides
    n = len(kernel)
    shape = (*xp.shape[:2], *kernel, *out)
    vstrides = (st[0], st[1], *(st[2 + i] * dils[i] for i in range(n)), *(st[2 + i] * strides[i] for i in range(n)))
    if xp.flags.c_contiguous and xp.size:  # a view on the buffer directly (as_strided costs ~10 us a call)
        v = np.ndarray(shape, xp.dtype, buffer=xp, strides=vstrides)
        v.flags.writeable = False
        return v
    return as_strided(xp, shape=shape, strides=vstrides, writeable=False)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float64 stays float64; every other float type is computed in float32."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def scatter_taps(cols: np.ndarray, kernel: Sequence[int], grid: Sequence[int], strides: Sequence[int],
                 dils: Sequence[int], pb: Sequence[int], out_sizes: Sequence[int]) -> np.ndarray:
    """col2im: add ``cols`` (N, C, *kernel, *grid) into a (N, C, *out_sizes) output.

    Grid position g and tap t land on output coordinate ``g*stride + t*dilation - pad_begin``;
    contributions outside the output are dropped and missing positions stay zero. Taps that tile the output
    (stride = kernel, no dilation, padding or crop: a 2x2 stride-2 upsampling) are each written once as
    0 + tap: the same bits without the zeroed buffer and re-reads ((1, 24, 80, 80) -> 160^2: 832 -> 395 us)."""
    n = len(kernel)
    full = [(g - 1) * s + (k - 1) * d + 1 for g, s, k, d in zip(grid, strides, kernel, dils)]
    off = [max(0, -b) for b in pb]
    length = [max(f, b + o) + a for f, b, o, a in zip(full, pb, out_sizes, off)]
    tiles = all(s == k and d == 1 and b == 0 and o == f for s, k, d, b, o, f in
                zip(strides, kernel, dils, pb, out_sizes, full))
    buf = (np.empty if tiles else np.zeros)((*cols.shape[:2], *length), dtype=cols.dtype)
    for tap in itertools.product(*(range(k) for k in kernel)):
        sl = [slice(None), slice(None)]
        for i in range(n):
            start = off[i] + tap[i] * dils[i]
            sl.append(slice(start, start + (grid[i] - 1) * strides[i] + 1, strides[i]))
        if tiles:
            np.add(cols[(slice(None), slice(None), *tap)], cols.dtype.type(0), out=buf[tuple(sl)])
        else:
            buf[tuple(sl)] += cols[(slice(None), slice(None), *tap)]
    crop = [slice(None), slice(None)] + [slice(a + b, a + b + o) for a, b, o in zip(off, pb, out_sizes)]
    return buf[tuple(crop)]


# -- Conv ------------------------------------------------------------------------------------------

_CONV_ATTRS = (
    AttrSpec("auto_pad", "string", "NOTSET", "Automatic padding (deprecated): NOTSET uses pads.",
             choices=AUTO_PADS),
    AttrSpec("dilations", "ints", None, "Dilation per spatial axis (default 1)."),
    AttrSpec("group", "int", 1, "Number of groups input and output channels are split into."),
    AttrSpec("kernel_shape", "ints", None, "Kernel size per spatial axis (default: from W)."),
    AttrSpec("pads", "ints", None, "Padding [x1_begin, x2_begin, ..., x1_end, x2_end, ...]."),
    AttrSpec("strides", "ints", None, "Stride per spatial axis (default 1)."),
)


def conv_kernel(ctx: NodeContext, w_index: int = 1) -> list[int] | None:
    """Spatial kernel size: the kernel_shape attribute, else the static trailing dims of W."""
    k = ints(ctx.attrs.get("kernel_shape"))
    if k:
        return k
    ws = ctx.shape(w_index)
    if ws is None or not all(isinstance(d, int) for d in ws[2:]):
        return None
    return [int(d) for d in ws[2:]]


def conv_out_shape(ctx: NodeContext, w_index: int = 1) -> tuple[Dim, ...] | None:
    """(N, M, *out_spatial) of input 0 convolved with the (M, C/group, k1, ...) weight at
    ``w_index``; dims that cannot be told are None (the whole shape when no rank is known)."""
    xs, ws = ctx.shape(0), ctx.shape(w_index)
    m: Dim = ws[0] if ws is not None else None
    if xs is None:
        return None if ws is None else (None, m, *([None] * (len(ws) - 2)))
    return infer_window_shape(ctx, conv_kernel(ctx, w_index), (xs[0], m))


def conv_geometry(attrs: dict[str, Any], x_shape: Sequence[int],
                  w_shape: Sequence[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """(strides, dilations, pads_begin, pads_end) of a convolution of ``x_shape`` by a weight of
    ``w_shape``; a kernel_shape attribute must agree with W."""
    kernel = list(w_shape[2:])
    if len(x_shape) != len(w_shape) or len(x_shape) < 3:
        raise OpError(f"X of shape {list(x_shape)} and W of shape {list(w_shape)} must have the same rank (>= 3)")
    ks = ints(attrs.get("kernel_shape"))
    if ks and ks != kernel:
        raise OpError(f"kernel_shape {ks} does not match W of shape {list(w_shape)}")
    strides, dils = window_attrs(attrs, len(x_shape) - 2)
    pb, pe, _ = window_geometry(x_shape[2:], kernel, strides, dils, attrs)
    return strides, dils, pb, pe


def conv_macs(shape: Sequence[Dim] | None, w_shape: Sequence[Dim] | None) -> int:
    """MACs of a convolution: prod(shape) * prod(W.shape[1:]), where ``shape`` is the output
    (Conv: every output element sums over C/group * kernel taps) or, for ConvTranspose, the
    input; 0 while any of these dims is unknown."""
    if shape is None or w_shape is None or not all(isinstance(d, int) for d in (*shape, *w_shape[1:])):
        return 0
    return prod(shape) * prod(w_shape[1:])  # type: ignore[arg-type]


IM2COL_CHUNK_BYTES = 32 << 20
"""Largest im2col buffer built at once; bigger convolutions are computed in bands of output rows."""

IM2COL_BAND_BYTES = 1 << 20
IM2COL_BAND_WEIGHTS = 256 << 10
IM2COL_BAND_BIG_WEIGHTS = 4 << 20
IM2COL_BAND_BIG_COLS = 6 << 20
"""A convolution whose weights fit IM2COL_BAND_WEIGHTS and whose columns pass 2 x
IM2COL_BAND_BYTES is computed in bands of output rows of about IM2COL_BAND_BYTES, so each band's
columns are written and multiplied while in cache (measured, BLAS 1 thread: a 96-channel 80x80
3x3 conv to 24 channels 10.5 -> 6.6 ms, 64ch 56x56 5.6 -> 4.0, 24ch 160x160 2x2 4.5 -> 2.8; one
22 MB buffer streamed through memory twice). Weights up to IM2COL_BAND_BIG_WEIGHTS band too
once the columns pass IM2COL_BAND_BIG_COLS (OpenBLAS packs the weights in panels anyway; side
by side, banded vs not: 128ch 56x56 11.5 -> 9.6 ms, 128ch 112x112 46 -> 38, 64 -> 128ch
112x112 26.5 -> 19.7, 256ch 56x56 38.7 -> 32.7, 160ch 40x40 7.4 -> 6.7, 256ch 28x28 8.3 -> 7.9;
but 3.5-4.5 MB of columns were 4-7% slower in bands: 128ch 28x28, 192ch 26x26). 512 -> 512
channels (9 MB of weights) was 8% slower in bands, hence the limit."""

IM2COL_FEW_FILTERS = 32
IM2COL_FEW_BAND_BYTES = 128 << 10
IM2COL_BAND_MIN_COLS = 256
"""With at most IM2COL_FEW_FILTERS filters (per group) the GEMM does few multiplies per column
loaded, so it pays to read its columns from L2: bands of about IM2COL_FEW_BAND_BYTES, but at
least IM2COL_BAND_MIN_COLS output pixels (narrower GEMMs take OpenBLAS's small-matrix kernels,
whose sums are ordered differently). Each band is copied into one buffer reused for every band
and multiplied straight into the output (no per-band result to copy)."""


def conv_gemm(ctx: NodeContext, x_index: int = 0, w_index: int = 1, transposed: bool = False) -> list[Gemm] | None:
    """A convolution as im2col GEMMs: M = output pixels, K = C/group * kernel, N = filters per group
    (transposed: M = input pixels, K = C/group, N = M/group * kernel, scattered afterwards)."""
    x, w, y = static_dims(ctx.shape(x_index)), static_dims(ctx.shape(w_index)), static_dims(ctx.out_type(0).shape)
    if x is None or w is None or y is None or len(x) < 3 or len(w) < 3:
        return None
    g = int(ctx.attrs.get("group", 1) or 1)
    if transposed:
        return [Gemm(x[0] * prod(x[2:]), x[1] // g, w[1] * prod(w[2:]), g)]
    return [Gemm(y[0] * prod(y[2:]), w[1] * prod(w[2:]), w[0] // g, g)]


DIRECT_GROUP_WIDTH = 4
"""Grouped 2-D convolutions with (input x output channels per group) up to this run the compiled direct kernel
(nodes.kernels.conv2d_phases): 2-4x faster than im2col for depthwise (1 x 1) and 2 x 2, slower from 3 x 4 on."""


def _im2col_matmul(view: np.ndarray, wk: np.ndarray, n_batch: int, group: int, rows: int) -> np.ndarray:
    """Copy a (N, C, *k, *out) window view into columns and multiply by the weights."""
    cols = view.reshape(n_batch, group, rows, -1)
    return np.matmul(wk, cols[:, 0]) if group == 1 else np.matmul(wk, cols)


def _im2col_bands(view: np.ndarray, wk: np.ndarray, y: np.ndarray, rows: int, n_spatial: int) -> None:
    """im2col ``rows`` output rows of a (N, C, *k, *out) window view at a time into one reused buffer, each
    band multiplied by the weights straight into its columns of ``y`` (N, group, M/group, pixels)."""
    n_batch, group = y.shape[:2]
    axis = 2 + n_spatial
    k_rows = wk.shape[-1]
    full = view[(slice(None),) * axis + (slice(0, rows),)].shape
    buf = np.empty(prod(full), dtype=y.dtype)
    row_cols = y.shape[-1] // view.shape[axis]
    for r0 in range(0, view.shape[axis], rows):
        band = view[(slice(None),) * axis + (slice(r0, r0 + rows),)]
        cols = buf[:band.size].reshape(band.shape)
        np.copyto(cols, band)
        cols = cols.reshape(n_batch, group, k_rows, -1)
        dst = y[..., r0 * row_cols:r0 * row_cols + cols.shape[-1]]
        if group == 1:
            np.matmul(wk, cols[:, 0], out=dst[:, 0])
        else:
            np.matmul(wk, cols, out=dst)


SHIFTED_MIN_RATIO = 2
"""Stride-1 dense 2-D convolutions with at least SHIFTED_MIN_RATIO times more input than output channels skip
im2col (nodes.kernels.conv2d_shifted): per-tap GEMMs on the padded input itself, summed at their shifts.
Measured (BLAS 1 thread, side by side): 96 -> 24 channels 3x3 on 80x80 5.76 -> 5.05 ms, 24 -> 12 2x2 on 160x160
2.17 -> 1.63, 128 -> 32 3x3 on 28x28 1.63 -> 1.17, on 56x56 5.96 -> 5.36; slower with as many outputs as inputs
(64 -> 64 on 56x56: 4.7 -> 7.2), at stride 2 (48 -> 24 on 160x160: 4.9 -> 5.3) and with 64 outputs (128 -> 64
on 20x20: 1.26 -> 1.40, 256 -> 64 on 10x10: 0.87 -> 0.88), hence at most SHIFTED_MAX_OUT output channels."""
SHIFTED_MAX_OUT = 32

FAST_CALL = "direct_call"
"""Conv cache key: (x shape, x dtype, w, b, epilogue, fn) once conv_nd ran a C kernel; fn(x) runs it
again without conv_nd's checks and routing (~4 us a call; a small model has 35 convolutions)."""

EPILOGUE = "epilogue"
"""Key of a Conv step's cache set by the fused plan (engine/sim/plan_fusion.py) when the
activation after it (a direct_conv.Epilogue: Relu, HardSwish) runs inside the Conv: the C
kernels apply it as they store each output."""


def conv_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: Sequence[int],
            dils: Sequence[int], pb: Sequence[int], pe: Sequence[int], group: int,
            cache: dict | None = None, epilogue: direct_conv.Epilogue | None = None) -> np.ndarray:
    """N-D grouped convolution of NC... ``x`` with (M, C/group, *k) ``w``; returns compute dtype.
    ``cache`` (a kernel's per-node cache) keeps weights prepared for the shifted form.
    ``epilogue``: an activation applied to the result (by the C kernels as they store each
    output; on the other paths in one pass afterwards): a fused plan's Conv -> Relu/HardSwish."""
    y, done = _conv_nd(x, w, b, strides, dils, pb, pe, group, cache, epilogue)
    return epilogue.apply(y) if epilogue is not None and not done else y


def _conv_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides: Sequence[int],
             dils: Sequence[int], pb: Sequence[int], pe: Sequence[int], group: int,
             cache: dict | None, epilogue: direct_conv.Epilogue | None) -> tuple[np.ndarray, bool]:
    """conv_nd's result, and whether the epilogue asked for is already applied."""
    cdt = compute_dtype(x.dtype)
    x = x.astype(cdt, copy=False)
    w = w.astype(cdt, copy=False)
    n_batch, c_in = x.shape[:2]
    m, cg = w.shape[:2]
    kernel = list(w.shape[2:])
    if cg * group != c_in:
        raise OpError(f"Conv: input has {c_in} channels but W expects {cg} x group {group}")
    if m % group:
        raise OpError(f"Conv: {m} output channels are not divisible by group {group}")
    mg = m // group
    if b is not None and tuple(b.shape) != (m,):
        raise OpError(f"Conv: bias B has shape {list(b.shape)}, expected [{m}] (one per output channel)")
    out = [(s + b + e - ((k - 1) * d + 1)) // st + 1
           for s, b, e, k, d, st in zip(x.shape[2:], pb, pe, kernel, dils, strides)]
    if min(out) < 1:
        raise OpError(f"Conv: kernel {kernel} does not fit input {list(x.shape[2:])} with the given pads")
    p = prod(out)
    if x.size == 0 or w.size == 0:  # an empty batch or no channels: nothing to sum, only the bias
        y = np.zeros((n_batch, m, *out), dtype=cdt)
        if b is not None:
            y += b.astype(cdt, copy=False).reshape((1, m) + (1,) * len(out))
        return y, False
    ktot = prod(kernel)
    if (group > 1 and cg == 1 and mg < direct_conv.DIRECT_MIN_GROUP_OUT and ktot > 1 and len(kernel) == 2
            and cdt == np.float32 and direct_conv.lanes()):
        return _direct(cache, lambda: direct_conv.Depthwise(w, b), x, w, b, epilogue,
                       lambda prep, x_: prep(x_, kernel, strides, dils, pb, pe, out, epilogue)), True
    if group > 1 and ktot > 1 and len(kernel) == 2 and cg * mg <= DIRECT_GROUP_WIDTH:
        return conv2d_phases(x, w, b, strides, dils, (*pb, *pe), out), False
    if (len(kernel) == 2 and cdt == np.float32 and direct_conv.lanes() and (
            (group == 1 or mg >= direct_conv.DIRECT_MIN_GROUP_OUT) and (ktot > 1 or group == 1 or direct_conv.lanes() in direct_conv.GROUPED_1X1_LANES))):
        return _direct(cache, lambda: direct_conv.Prepared(w, b, group), x, w, b, epilogue,
                       lambda prep, x_: prep(pad_spatial(x_, pb, pe), strides, dils, out, epilogue),
                       lambda prep: prep.runner(x.shape, strides, dils, out, epilogue, pb, pe)), True
    if (group == 1 and ktot > 1 and len(kernel) == 2 and tuple(strides) == (1, 1) and m <= SHIFTED_MAX_OUT
            and c_in >= SHIFTED_MIN_RATIO * m):
        prep = cache.get("shifted") if cache is not None else None
        if prep is None or prep[0] is not w or prep[1] != tuple(dils):
            prep = (w, tuple(dils), shifted_weights(w, strides, dils))
            if cache is not None:
                cache["shifted"] = prep
        return conv2d_shifted(x, prep[2], b, strides, (*pb, *pe), out), False
    xp = pad_spatial(x, pb, pe)
    if ktot == 1:
        xs = tap_view(xp, [0] * len(kernel), out, strides, dils)
        cols = xs.reshape(n_batch, group, cg, p)
        if group == 1:
            y = np.matmul(w.reshape(m, cg), cols[:, 0])
        else:
            y = np.matmul(w.reshape(group, mg, cg), cols)
    else:
        view = window_view(xp, kernel, out, strides, dils)
        wk = w.reshape(m, cg * ktot) if group == 1 else w.reshape(group, mg, cg * ktot)
        row_cols = p // out[0]
        row_bytes = n_batch * c_in * ktot * row_cols * x.itemsize
        band_bytes = IM2COL_FEW_BAND_BYTES if mg <= IM2COL_FEW_FILTERS else IM2COL_BAND_BYTES
        cols_bytes = row_bytes * out[0]
        banded = cols_bytes > 2 * band_bytes and (wk.nbytes <= IM2COL_BAND_WEIGHTS or (
            wk.nbytes <= IM2COL_BAND_BIG_WEIGHTS and cols_bytes > IM2COL_BAND_BIG_COLS))
        if cols_bytes <= IM2COL_CHUNK_BYTES and not banded:
            y = _im2col_matmul(view, wk, n_batch, group, cg * ktot)
        else:  # bounded workspace: im2col a band of output rows at a time
            rows = max(1, (band_bytes if banded else IM2COL_CHUNK_BYTES) // max(row_bytes, 1))
            if banded:
                rows = max(rows, -(-IM2COL_BAND_MIN_COLS // row_cols))
            y = np.empty((n_batch, m, *out), dtype=cdt)
            _im2col_bands(view, wk, y.reshape(n_batch, group, mg, p), rows, len(kernel))
    y = y.reshape(n_batch, m, *out)
    if b is not None:
        add_bias(y, b.astype(cdt, copy=False))
    return y, False


def _direct(cache: dict | None, make, x: np.ndarray, w: np.ndarray, b: Any, epilogue: Any, call, fast=None):
    """call(prep, x), prep the node's C kernel (kept in ``cache``); kept as its FAST_CALL (or
    ``fast(prep)``, a call made once for this geometry)."""
    prep = cache.get("direct") if cache is not None else None
    if prep is None or not prep.fits(w, b):
        prep = make()
    if cache is not None:
        cache["direct"] = prep
        cache[FAST_CALL] = (x.shape, x.dtype, w, b, epilogue, fast(prep) if fast is not None else lambda x_: call(prep, x_))
    return call(prep, x)


BIAS_ROW_MAX = 4096


def add_bias(y: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``y += b`` per output channel (axis 1), in place: channel rows up to BIAS_ROW_MAX long in one
    compiled pass per row (nodes.kernels.per_channel_; numpy's broadcast add measured 15.8 vs 9.9
    us on 200 channels of 192), longer ones by numpy's broadcast (as fast there: 96 x 6400).
    The same sums either way."""
    m = y.shape[1]
    if y.size > BIAS_ROW_MAX * m * y.shape[0] or \
            per_channel_("Add", y, b.reshape((1, m) + (1,) * (y.ndim - 2)), True) is None:
        y += b.reshape((1, m) + (1,) * (y.ndim - 2))
    return y


@register("Conv", since=1)
class ConvSpec(OpSpec):
    """Convolution of an N-D image with a bank of filters."""

    quant = QuantSpec("compute", weight_input=1, bias_input=2, weight_axis=lambda node: 0)

    doc = "N-D convolution (groups, dilations, strides, explicit or automatic padding)."
    rules = WINDOW_RULES
    inputs = (Port("X", doc="(N, C, D1, ...)"), Port("W", doc="(M, C/group, k1, ...)"),
              Port("B", optional=True, doc="(M,) bias"))
    outputs = (Port("Y"),)
    attrs = _CONV_ATTRS

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, M, *out_spatial) with the output sizes of the window geometry."""
        xs, ws = ctx.shape(0), ctx.shape(1)
        group = int(ctx.attrs["group"])
        if group < 1:
            raise OpError(f"group must be >= 1, got {group}")
        m: Dim = ws[0] if ws is not None else None
        if xs is not None and ws is not None:
            if len(xs) != len(ws):
                raise OpError(f"X has rank {len(xs)} but W has rank {len(ws)}")
            c, cg = xs[1], ws[1]
            if isinstance(c, int) and isinstance(cg, int) and c != cg * group:
                raise OpError(f"X has {c} channels but W expects {cg} per group x {group} groups")
            if isinstance(m, int) and m % group:
                raise OpError(f"{m} output channels are not divisible by group {group}")
        bs = ctx.shape(2) if ctx.has_input(2) else None
        if bs is not None and isinstance(m, int) and all(isinstance(d, int) for d in bs) and tuple(bs) != (m,):
            raise OpError(f"bias B has shape {list(bs)}, expected [{m}] (one per output channel)")
        return [TensorType(ctx.dtype(0), conv_out_shape(ctx))]

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """im2col + matmul per group; a pointwise convolution of one image is one matmul."""
        direct = ctx.cache.get(FAST_CALL)
        if (direct is not None and direct[0] == x.shape and direct[1] == x.dtype and direct[2] is w and direct[3] is b
                and direct[4] is ctx.cache.get(EPILOGUE)):
            return direct[5](x)
        fast = ctx.cache.get("pointwise")
        if fast is not None and fast[0] is w and fast[1] is b and fast[2] == x.shape and fast[3] == x.dtype:
            y = np.matmul(fast[4], x.reshape(fast[5])).reshape(fast[7])
            y = y if fast[6] is None else add_bias(y, fast[6])
            ep = ctx.cache.get(EPILOGUE)
            return ep.apply(y) if ep is not None else y
        key = (x.shape, w.shape)
        geom = ctx.cache.get(key)
        if geom is None:
            geom = ctx.cache[key] = (*conv_geometry(ctx.attrs, x.shape, w.shape), int(ctx.attrs["group"]))
        strides, dils, pb, pe, group = geom
        y = conv_nd(x, w, b, strides, dils, pb, pe, group, ctx.cache, ctx.cache.get(EPILOGUE)).astype(x.dtype, copy=False)
        if (group == 1 and x.shape[0] == 1 and x.ndim >= 3 and x.dtype in (np.float32, np.float64)
                and "direct" not in ctx.cache  # conv_nd ran the direct kernel: no GEMM to repeat
                and w.dtype == x.dtype and (b is None or b.dtype == x.dtype) and w.shape[2:] == (1,) * (x.ndim - 2)
                and not any(pb) and not any(pe) and all(s == 1 for s in strides)):
            # the same matmul and bias add conv_nd ran, without its per-call geometry work (the
            # check above ran once: conv_nd raised on a bad weight or bias)
            m = w.shape[0]
            ctx.cache["pointwise"] = (w, b, x.shape, x.dtype, w.reshape(m, -1), (x.shape[1], -1), b, y.shape)
        return y

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """im2col: output pixels x (C/group * kernel) x filters per group, per group."""
        return conv_gemm(ctx)

    def work(self, ctx: NodeContext) -> Work:
        """MACs = N * M * prod(out) * (C/group) * prod(kernel)."""
        w = super().work(ctx)
        w.macs = conv_macs(ctx.out_type(0).shape, ctx.shape(1))
        return w


# -- ConvTranspose ---------------------------------------------------------------------------------

def _convtranspose_geometry(in_sizes: Sequence[Dim], kernel: Sequence[int], strides: Sequence[int],
                            dils: Sequence[int], attrs: dict[str, Any]) -> tuple[list[int], list[Dim]]:
    """(pads_begin, out_sizes) of a transposed convolution; out sizes may be symbolic/None."""
    n = len(kernel)
    auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise OpError(f"unknown auto_pad {auto_pad!r}")
    opad = ints(attrs.get("output_padding")) or [0] * n
    oshape = ints(attrs.get("output_shape"))
    if len(opad) != n:
        raise OpError(f"output_padding {opad} does not match {n} spatial dims")
    if oshape and len(oshape) > n:
        oshape = oshape[-n:]  # a full (N, C, ...) shape: keep the spatial part
    pb, pe = explicit_pads(attrs, n)
    if auto_pad == "VALID":
        pb, pe = [0] * n, [0] * n
    outs: list[Dim] = []
    for i in range(n):
        size = in_sizes[i]
        ek = (kernel[i] - 1) * dils[i] + 1
        if not isinstance(size, int):
            outs.append(oshape[i] if oshape else None)
            continue
        full = strides[i] * (size - 1) + opad[i] + ek
        if oshape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = oshape[i] if oshape else size * strides[i]
            total = full - target
            if not oshape:  # like onnxruntime: automatic padding never grows the output
                total = max(total, 0)
                target = full - total
            half = total // 2
            pb[i] = half if auto_pad == "SAME_UPPER" else total - half
            outs.append(target)
        else:
            outs.append(full - pb[i] - pe[i])
    return pb, outs


@register("ConvTranspose", since=1)
class ConvTransposeSpec(OpSpec):
    """Transposed (fractionally strided) convolution."""

    quant = QuantSpec("compute", weight_input=1, bias_input=2, weight_axis=lambda node: 1)

    doc = "N-D transposed convolution (output_padding, output_shape, groups, dilations)."
    rules = WINDOW_RULES
    inputs = (Port("X", doc="(N, C, D1, ...)"), Port("W", doc="(C, M/group, k1, ...)"),
              Port("B", optional=True, doc="(M,) bias"))
    outputs = (Port("Y"),)
    attrs = (*_CONV_ATTRS,
             AttrSpec("output_padding", "ints", None, "Extra size added at the end of each spatial axis."),
             AttrSpec("output_shape", "ints", None, "Explicit output spatial shape (pads are derived)."))

    def gemm(self, ctx: NodeContext) -> list[Gemm] | None:
        """Input pixels x C/group x (M/group * kernel) per group, then a scatter of the taps."""
        return conv_gemm(ctx, transposed=True)

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, M, *out_spatial)."""
        xs, ws = ctx.shape(0), ctx.shape(1)
        group = int(ctx.attrs["group"])
        m: Dim = ws[1] * group if ws is not None and isinstance(ws[1], int) else None
        if xs is None:
            return [TensorType(ctx.dtype(0), None if ws is None else (None, m, *([None] * (len(ws) - 2))))]
        if ws is not None and isinstance(xs[1], int) and isinstance(ws[0], int) and xs[1] != ws[0]:
            raise OpError(f"X has {xs[1]} channels but W has {ws[0]} input channels")
        n = len(xs) - 2
        kernel = conv_kernel(ctx)
        if kernel is None:
            return [TensorType(ctx.dtype(0), (xs[0], m, *([None] * n)))]
        strides, dils = window_attrs(ctx.attrs, n)
        _, outs = _convtranspose_geometry(xs[2:], kernel, strides, dils, ctx.attrs)
        return [TensorType(ctx.dtype(0), (xs[0], m, *outs))]

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """One matmul per group (batched), then col2im over the kernel taps."""
        a = ctx.attrs
        group = int(a["group"])
        cdt = compute_dtype(x.dtype)
        n_batch, c_in = x.shape[:2]
        if w.shape[0] != c_in or c_in % group:
            raise OpError(f"ConvTranspose: X has {c_in} channels, W has shape {list(w.shape)}, group {group}")
        kernel = list(w.shape[2:])
        n = len(kernel)
        strides, dils = window_attrs(a, n)
        pb, outs = _convtranspose_geometry(x.shape[2:], kernel, strides, dils, a)
        cg, mg = c_in // group, w.shape[1]
        grid = list(x.shape[2:])
        if b is not None and tuple(b.shape) != (group * mg,):
            raise OpError(f"ConvTranspose: bias B has shape {list(b.shape)}, expected [{group * mg}]")
        if x.size == 0 or w.size == 0:
            raise OpError(f"ConvTranspose: empty input {list(x.shape)} or weights {list(w.shape)}")
        wk = w.astype(cdt, copy=False).reshape(group, cg, mg * prod(kernel)).transpose(0, 2, 1)
        xr = x.astype(cdt, copy=False).reshape(n_batch, group, cg, prod(grid))
        cols = np.matmul(wk, xr).reshape(n_batch, group * mg, *kernel, *grid)
        y = scatter_taps(cols, kernel, grid, strides, dils, pb, outs)  # type: ignore[arg-type]
        if b is not None:
            y += b.astype(cdt, copy=False).reshape((1, group * mg) + (1,) * n)
        return y.astype(x.dtype, copy=False)

    def work(self, ctx: NodeContext) -> Work:
        """MACs = N * C * prod(in_spatial) * (M/group) * prod(kernel)."""
        w = super().work(ctx)
        w.macs = conv_macs(ctx.shape(0), ctx.shape(1))
        return w


# -- DeformConv ------------------------------------------------------------------------------------

def _bilinear_gather(x: np.ndarray, py: np.ndarray, px: np.ndarray) -> np.ndarray:
    """Sample (N, G, Cg, H, W) ``x`` at (N, G, K, P) float positions; zero outside the image."""
    n_batch, g, cg, h, w = x.shape
    flat = x.reshape(n_batch, g, cg, h * w)
    y0 = np.floor(py)
    x0 = np.floor(px)
    ly, lx = py - y0, px - x0
    y0 = y0.astype(np.int64)
    x0 = x0.astype(np.int64)
    k, p = py.shape[2:]
    acc = np.zeros((n_batch, g, cg, k * p), dtype=x.dtype)
    for dy, dx, wgt in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx),
                        (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = y0 + dy, x0 + dx
        valid = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        idx = (np.clip(yy, 0, h - 1) * w + np.clip(xx, 0, w - 1)).reshape(n_batch, g, 1, k * p)
        vals = np.take_along_axis(flat, np.broadcast_to(idx, (n_batch, g, cg, k * p)), axis=3)
        acc += vals * np.where(valid, wgt, 0).astype(x.dtype).reshape(n_batch, g, 1, k * p)
    return acc.reshape(n_batch, g * cg, k, p)


@register("DeformConv", since=19)
class DeformConvSpec(OpSpec):
    """Deformable convolution: every kernel tap samples at a learned offset (bilinear)."""

    doc = "2-D deformable convolution with per-tap offsets and an optional modulation mask."
    inputs = (Port("X"), Port("W"), Port("offset"), Port("B", optional=True), Port("mask", optional=True))
    outputs = (Port("Y"),)
    attrs = (AttrSpec("dilations", "ints", None, "Dilation per spatial axis (default 1)."),
             AttrSpec("group", "int", 1, "Number of channel groups."),
             AttrSpec("kernel_shape", "ints", None, "Kernel size (default: from W)."),
             AttrSpec("offset_group", "int", 1, "Number of channel groups sharing one offset field."),
             AttrSpec("pads", "ints", None, "Padding [begin..., end...]."),
             AttrSpec("strides", "ints", None, "Stride per spatial axis (default 1)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, M, *out_spatial) like Conv."""
        xs, ws = ctx.shape(0), ctx.shape(1)
        m: Dim = ws[0] if ws is not None else None
        if xs is None:
            return [TensorType(ctx.dtype(0), None)]
        return [TensorType(ctx.dtype(0), infer_window_shape(ctx, conv_kernel(ctx), (xs[0], m)))]

    def reference(self, ctx: RunContext, x: np.ndarray, w: np.ndarray, offset: np.ndarray,
                  b: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """Bilinear sampling at offset taps into columns, then one matmul per group."""
        a = ctx.attrs
        if x.ndim != 4:
            raise OpError("DeformConv supports 2-D images (rank-4 X)")
        group, og = int(a["group"]), int(a["offset_group"])
        cdt = compute_dtype(x.dtype)
        n_batch, c_in, h, wd = x.shape
        m, cg, kh, kw = w.shape
        strides, dils = window_attrs(a, 2)
        pb, pe = explicit_pads(a, 2)
        oh = (h + pb[0] + pe[0] - ((kh - 1) * dils[0] + 1)) // strides[0] + 1
        ow = (wd + pb[1] + pe[1] - ((kw - 1) * dils[1] + 1)) // strides[1] + 1
        k = kh * kw
        if c_in % og or cg * group != c_in:
            raise OpError(f"DeformConv: {c_in} channels do not fit group {group} / offset_group {og}")
        off = offset.astype(cdt, copy=False).reshape(n_batch, og, k, 2, oh * ow)
        ti, tj = np.divmod(np.arange(k), kw)
        base_y = (np.arange(oh)[None, :, None] * strides[0] - pb[0] + ti[:, None, None] * dils[0])
        base_x = (np.arange(ow)[None, None, :] * strides[1] - pb[1] + tj[:, None, None] * dils[1])
        py = np.broadcast_to(base_y, (k, oh, ow)).reshape(1, 1, k, oh * ow) + off[:, :, :, 0]
        px = np.broadcast_to(base_x, (k, oh, ow)).reshape(1, 1, k, oh * ow) + off[:, :, :, 1]
        xs = x.astype(cdt, copy=False).reshape(n_batch, og, c_in // og, h, wd)
        cols = _bilinear_gather(xs, py, px)  # (N, C, K, P)
        if mask is not None:
            mk = mask.astype(cdt, copy=False).reshape(n_batch, og, 1, k, oh * ow)
            cols = (cols.reshape(n_batch, og, c_in // og, k, oh * ow) * mk).reshape(n_batch, c_in, k, oh * ow)
        cols = cols.reshape(n_batch, group, cg * k, oh * ow)
        y = np.matmul(w.astype(cdt, copy=False).reshape(group, m // group, cg * k), cols)
        y = y.reshape(n_batch, m, oh, ow)
        if b is not None:
            y += b.astype(cdt, copy=False).reshape(1, m, 1, 1)
        return y.astype(x.dtype, copy=False)

    def work(self, ctx: NodeContext) -> Work:
        """MACs of the equivalent convolution (bilinear sampling not counted)."""
        w = super().work(ctx)
        w.macs = conv_macs(ctx.out_type(0).shape, ctx.shape(1))
        return w


# -- Col2Im ----------------------------------------------------------------------------------------

@register("Col2Im", since=18)
class Col2ImSpec(OpSpec):
    """Rearrange column blocks back into an image, summing overlaps (inverse of im2col)."""

    doc = "Combine sliding-window columns (N, C*prod(block), L) into an image (N, C, *image_shape)."
    inputs = (Port("input"), Port("image_shape"), Port("block_shape"))
    outputs = (Port("output"),)
    attrs = (AttrSpec("dilations", "ints", None, "Dilation per spatial axis (default 1)."),
             AttrSpec("pads", "ints", None, "Padding [begin..., end...]."),
             AttrSpec("strides", "ints", None, "Stride per spatial axis (default 1)."))

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """(N, C, *image_shape) when image_shape and block_shape are constant."""
        xs = ctx.shape(0)
        img, blk = ctx.const(1), ctx.const(2)
        n_batch: Dim = xs[0] if xs is not None else None
        c: Dim = None
        if blk is not None and xs is not None and isinstance(xs[1], int):
            c = xs[1] // prod(ints(blk))
        if img is not None:
            return [TensorType(ctx.dtype(0), (n_batch, c, *ints(img)))]
        ish = ctx.shape(1)
        if ish is not None and isinstance(ish[0], int):
            return [TensorType(ctx.dtype(0), (n_batch, c, *([None] * ish[0])))]
        return [TensorType(ctx.dtype(0), None)]

    def reference(self, ctx: RunContext, x: np.ndarray, image_shape: np.ndarray,
                  block_shape: np.ndarray) -> np.ndarray:
        """Scatter-add each block tap into the padded image, then crop the pads."""
        img, blk = ints(image_shape), ints(block_shape)
        n = len(img)
        strides, dils = window_attrs(ctx.attrs, n)
        pb, pe = explicit_pads(ctx.attrs, n)
        grid = [(i + b + e - ((k - 1) * d + 1)) // s + 1 for i, b, e, k, d, s in zip(img, pb, pe, blk, dils, strides)]
        n_batch, ck, length = x.shape
        kb = prod(blk)
        if ck % kb or prod(grid) != length:
            raise OpError(f"Col2Im: input {list(x.shape)} does not match block {blk} over image {img}")
        cdt = x.dtype if x.dtype.kind == "f" and x.dtype.itemsize >= 4 else compute_dtype(x.dtype)
        cols = x.astype(cdt, copy=False).reshape(n_batch, ck // kb, *blk, *grid)
        return scatter_taps(cols, blk, grid, strides, dils, pb, img).astype(x.dtype, copy=False)


__all__ = ["conv_geometry", "conv_kernel", "conv_macs", "conv_nd", "conv_out_shape", "explicit_pads",
           "infer_window_shape", "pad_spatial", "scatter_taps", "tap_view", "window_attrs", "window_geometry",
           "window_out_dim", "window_view"]
