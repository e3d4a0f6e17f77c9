"""LiteRT's reference int8 SOFTMAX in gemmlowp fixed point, vectorized.

Per row: d = x - max(x) (<= 0), rescaled by beta * input_scale into Q5.26; exp(d) with gemmlowp's
exp_on_negative_values (a 4th-order polynomial on [-1/4, 0) and a barrel shifter of exp(-2^k)
constants); the sum in Q12.19; its reciprocal by Newton-Raphson (one_over_one_plus_x_for_x_in_0_1);
each output = exp(d) * 1/sum scaled to 8 bits, minus 128. Entries below ``diff_min`` are -128.
"""

from __future__ import annotations

import math

import numpy as np

from engine.sim.fixedpoint import quantize_multiplier, rounding_divide_by_pot

I32_MAX, I32_MIN = 2**31 - 1, -(2**31)


def _mul(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on int32 raws."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ab = a * b
    s = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    res = np.where(s >= 0, s >> 31, -((-s) >> 31))
    return np.where((a == b) & (a == I32_MIN), I32_MAX, res)


def _wrap(x: np.ndarray) -> np.ndarray:
    """int32 wrap-around of an int64 array (gemmlowp adds raws without saturation)."""
    return ((np.asarray(x, np.int64) + 2**31) % 2**32) - 2**31


def _shl_sat(x: np.ndarray, k: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT with a positive exponent."""
    return np.clip(np.asarray(x, np.int64) * (1 << k), I32_MIN, I32_MAX)


def _exp_quarter(a: np.ndarray) -> np.ndarray:
    """exp on [-1/4, 0) for a Q0.31 raw."""
    x = _wrap(a + (1 << 28))
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(_wrap(_mul(_wrap(x4_over_4 + x3), 715827883) + x2), 1)
    c = 1895147668
    return _wrap(c + _mul(c, _wrap(x + poly)))


def exp_on_negative_values(a: np.ndarray, integer_bits: int = 5) -> np.ndarray:
    """gemmlowp exp_on_negative_values for a Q(integer_bits) raw; returns a Q0.31 raw."""
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    mask = quarter - 1
    a = np.asarray(a, np.int64)
    a_mod = _wrap((a & mask) - quarter)
    result = _exp_quarter(_shl_sat(a_mod, integer_bits))
    remainder = _wrap(a_mod - a)
    for k, mult in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
                    (3, 720401), (4, 242)):
        if integer_bits > k:
            bit = 1 << (frac + k)
            result = np.where((remainder & bit) != 0, _mul(result, mult), result)
    if integer_bits > 5:
        clamp = -(1 << (frac + 5))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, I32_MAX, result)


def _one_over_one_plus_x(a: np.ndarray) -> np.ndarray:
    """gemmlowp one_over_one_plus_x_for_x_in_0_1 (Q0.31 in and out)."""
    s = np.asarray(a, np.int64) + I32_MAX
    half = (s + np.where(s >= 0, 1, -1))
    half = np.where(half >= 0, half // 2, -((-half) // 2))
    x = _wrap(1515870810 + _mul(half, -1010580540))
    one_f2 = 1 << 29
    for _ in range(3):
        hx = _mul(half, x)
        omx = _wrap(one_f2 - hx)
        x = _wrap(x + _shl_sat(_mul(x, omx), 2))
    return _shl_sat(x, 1)


def _reciprocal(x: np.ndarray, integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite GetReciprocal: (Q0.31 scale, num_bits_over_unit) of a positive Q(integer_digits) raw."""
    x = np.asarray(x, np.int64)
    clz = np.array([32 - int(v).bit_length() for v in x.reshape(-1)], np.int64).reshape(x.shape)
    bits_over = integer_digits - clz
    shifted = ((x << clz) & 0xFFFFFFFF) - (1 << 31)
    return _one_over_one_plus_x(_wrap(shifted)), bits_over


def softmax_params(beta: float, input_scale: float, integer_bits: int = 5) -> tuple[int, int, int]:
    """(input_multiplier, input_left_shift, diff_min) as LiteRT's Prepare computes them."""
    real = min(beta * input_scale * (1 << (31 - integer_bits)), (1 << 31) - 1.0)
    mult, shift = quantize_multiplier(real)
    radius = math.floor(((1 << integer_bits) - 1) * (1 << (31 - integer_bits)) / (1 << shift))
    return mult, shift, -radius


def softmax_int8(x: np.ndarray, input_scale: float, beta: float = 1.0) -> np.ndarray:
    """Reference int8 softmax over the last axis (output scale 1/256, zero point -128)."""
    mult, shift, diff_min = softmax_params(beta, float(np.float32(input_scale)))
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    diff = rows - rows.max(axis=1, keepdims=True)
    valid = diff >= diff_min
    rescaled = _mul(np.clip(diff * (1 << shift), I32_MIN, I32_MAX), mult)
    e = exp_on_negative_values(rescaled)
    total = np.where(valid, rounding_divide_by_pot(e, 12), 0).sum(axis=1)
    scale, bits_over = _reciprocal(total, 12)
    unsat = rounding_divide_by_pot(_mul(scale[:, None], e), (bits_over + 31 - 8)[:, None])
    out = np.where(valid, np.clip(unsat - 128, -128, 127), -128)
    return out.astype(np.int8).reshape(x.shape)
