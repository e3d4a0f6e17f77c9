"""TFLite's fixed-point requantization, vectorized in numpy.

A real multiplier M (e.g. input_scale * weight_scale / output_scale) is stored as a 32-bit
``multiplier`` in [2^30, 2^31) and a power-of-two ``shift`` with M = multiplier * 2^(shift - 31)
(QuantizeMultiplier: frexp, then round(q * 2^31)). Applying it to an int32 accumulator x:

* single rounding (LiteRT's default optimized kernels, and the int64 overload)::

      (x * multiplier + 2^(30 - shift)) >> (31 - shift)        (round half up)

* double rounding (gemmlowp; LiteRT's reference kernels, measured with LiteRT 2.3.0)::

      RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x * 2^max(shift, 0), multiplier),
                          max(-shift, 0))

Tests run both against the interpreter (reference and default op resolvers), so a change of
LiteRT's build is noticed.
"""

from __future__ import annotations

import math

import numpy as np

SINGLE = "single"
DOUBLE = "double"


def quantize_multiplier(m: float) -> tuple[int, int]:
    """(multiplier, shift) of a real multiplier, as TFLite's QuantizeMultiplier."""
    if m == 0.0:
        return 0, 0
    q, shift = math.frexp(m)
    q_fixed = round(q * (1 << 31))  # std::round: half away from zero (q > 0)
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:  # single-rounding builds clamp here
        shift, q_fixed = 30, (1 << 31) - 1
    return q_fixed, shift


def _srdhm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values (int64 arithmetic)."""
    a = a.astype(np.int64)
    b = np.asarray(b, np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    res = np.where(s >= 0, s >> 31, -((-s) >> 31))  # C++ division truncates toward zero
    overflow = (a == b) & (a == -(1 << 31))
    return np.where(overflow, (1 << 31) - 1, res)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray | int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2^exponent, rounding half away from zero."""
    x = x.astype(np.int64)
    e = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + (remainder > threshold)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: np.ndarray | int, shift: np.ndarray | int,
                                     mode: str = SINGLE) -> np.ndarray:
    """x * M in TFLite's fixed point (``multiplier``/``shift`` broadcast against x)."""
    x = np.asarray(x, np.int64)
    m = np.asarray(multiplier, np.int64)
    s = np.asarray(shift, np.int64)
    if mode == SINGLE:
        total = 31 - s
        return (x * m + (np.int64(1) << (total - 1))) >> total
    left = np.maximum(s, 0)
    right = np.maximum(-s, 0)
    shifted = np.clip(x * (np.int64(1) << left), -(2**31), 2**31 - 1)
    return rounding_divide_by_pot(_srdhm(shifted, m), right)


# -- int16 helpers of HARD_SWISH --------------------------------------------------------------
def srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp's int16 SaturatingRoundingDoublingHighMul."""
    a = a.astype(np.int64)
    ab = a * int(b)
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    s = ab + nudge
    res = np.where(s >= 0, s >> 15, -((-s) >> 15))
    overflow = (a == b) & (a == -32768)
    return np.where(overflow, 32767, res)


def sat16(x: np.ndarray) -> np.ndarray:
    """Saturate to int16."""
    return np.clip(x, -32768, 32767)


def downscale_to_int16(multiplier: int) -> int:
    """TFLite's DownScaleInt32ToInt16Multiplier."""
    if multiplier >= (2**31 - 1) - (1 << 15):
        return 32767
    return (multiplier + (1 << 15)) >> 16
