"""Compiled (numba) kernels for the loops numpy cannot express without extra passes or copies.

numpy runs one ufunc per pass over memory and a grouped convolution as im2col plus a batched
matrix-vector product; on one thread both leave most of the time in memory traffic and Python
dispatch (issue #19: depthwise convs 5-14x onnxruntime, Gelu's erf 12x). These kernels do the
same arithmetic in one pass, in the input's float type (float32 stays float32):

- ``conv2d_direct``: a grouped 2-D convolution summed tap by tap into the output row, which
  stays in cache; for depthwise and small-group convolutions, whose im2col is mostly copying.
  ``conv2d_plane``: the same at stride 1 with one pass per tap over a whole (small) plane.
- ``erf32_`` / ``gelu32_`` / ``hard_swish_``: elementwise functions in one pass, written into a
  caller-given buffer (which may be the input itself). (Sigmoid is not here: numpy's SIMD exp
  in three in-place passes measured 2x faster than a scalar exp loop.)

The loops themselves are in nodes/_kernels_jit.py, imported on the first call (numba's import
costs 1-2 s; commands that run no kernel do not pay it). The first call of each kernel in a
process loads its cached machine code; only the first process after an install compiles.
"""

from __future__ import annotations

import math

import numpy as np

from nodes.polyfit import ERF_NEAR, fit_poly


def _jit():
    """The compiled loops (nodes/_kernels_jit.py); numba is imported on the first call."""
    from nodes import _kernels_jit

    return _kernels_jit


def conv2d_direct(xp: np.ndarray, w: np.ndarray, out: np.ndarray, strides: tuple[int, int],
                  dils: tuple[int, int], group: int) -> np.ndarray:
    """Add the grouped convolution of padded NCHW ``xp`` by (M, C/group, kh, kw) ``w`` into
    ``out`` (N, M, OH, OW; holding the bias or zeros). All three of one float dtype, C-contiguous."""
    _jit().conv2d_direct(xp, w, out, int(strides[0]), int(strides[1]), int(dils[0]), int(dils[1]), int(group))
    return out


def conv2d_plane(xp: np.ndarray, w: np.ndarray, out: np.ndarray, dils: tuple[int, int], group: int) -> np.ndarray:
    """Add the stride-1 grouped convolution of padded NCHW ``xp`` by ``w`` into ``out`` of shape
    (N, M, OH, Wp), rows at the padded input's pitch Wp (columns from OW on are scratch): each
    tap is one contiguous pass over the whole plane. For small planes (depthwise layers of
    14x14 to 28x28: 1.5-3.9x conv2d_direct, whose per-row passes were mostly loop overhead)."""
    _jit().conv2d_flat(xp, w, out, int(dils[0]), int(dils[1]), int(group))
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
    _jit().erf_flat(x.reshape(-1), out.reshape(-1), ERF_NEAR, ERF_FAR, False)
    return out


def gelu32_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Gelu x * (1 + erf(x / sqrt(2))) / 2 of C-contiguous float32 ``x`` in one pass (float64
    inside, so at least as close to the exact value as the op-by-op float32 chain)."""
    if out is None:
        out = np.empty_like(x)
    _jit().erf_flat(x.reshape(-1), out.reshape(-1), ERF_NEAR, ERF_FAR, True)
    return out


def hard_swish_(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * clip(x / 6 + 1/2, 0, 1) in one pass; ``out`` may be ``x``."""
    return _flat_pass(_jit().hard_swish_flat, x, out)



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
        conv2d_direct(xp, np.ones((2, 1, 3, 3), dt), np.zeros((1, 2, 1, 1), dt), (1, 1), (1, 1), 2)
        conv2d_plane(xp, np.ones((2, 1, 3, 3), dt), np.zeros((1, 2, 1, 3), dt), (1, 1), 2)
        hard_swish_(np.zeros(2, dt))
    erf32_(np.zeros(2, np.float32))
    gelu32_(np.zeros(2, np.float32))
