"""The one-pass fake quantization and error sums give what the two-op and numpy forms give.

fake_quantize (what the per-layer analysis, calibration search and noise budget run on every
activation) now takes one compiled pass for 8- and 16-bit types; a user would see any changed
bit as a changed error figure. ErrorStats sums in float64 in one pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.quant.analysis import ErrorStats
from engine.quant.params import (
    dequantize_array,
    fake_quantize,
    params_from_range,
    quantize_array,
    weight_params,
)


def _two_ops(x, qp):
    return dequantize_array(quantize_array(x, qp), qp)


def _hard_values(scale: float) -> np.ndarray:
    """Ties at every half step, signed zeros, values far outside the range, subnormals, inf."""
    ties = (np.arange(-600, 600) + 0.5).astype(np.float32) * np.float32(scale)
    odd = np.array([-0.0, 0.0, 1e30, -1e30, np.inf, -np.inf, 1e-40, -1e-40, scale / 2, -scale / 2], np.float32)
    rng = np.random.default_rng(1)
    return np.concatenate([ties, odd, (rng.standard_normal(5000) * 4).astype(np.float32)])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_fake_quantize_per_tensor_matches_quantize_then_dequantize_bit_for_bit(dtype, symmetric):
    qp = params_from_range(-2.5, 5.0, dtype, symmetric)
    x = _hard_values(float(qp.scale))
    got = fake_quantize(x, qp)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.int32), _two_ops(x, qp).view(np.int32))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_fake_quantize_per_channel_matches_along_any_axis(axis):
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((6, 5, 3, 4)) * rng.uniform(0.1, 9, (6, 1, 1, 1))).astype(np.float32)
    w = np.moveaxis(w, 0, axis)
    qp = weight_params(w, "int8", symmetric=True, per_channel=True, axis=axis % w.ndim)
    assert qp.per_channel
    assert np.array_equal(fake_quantize(w, qp).view(np.int32), _two_ops(w, qp).view(np.int32))
    # a non-contiguous float64 view quantizes as its float32 copy does
    v = w.astype(np.float64)[..., ::2] if axis % w.ndim != w.ndim - 1 else w.astype(np.float64)[::2]
    qv = weight_params(v.astype(np.float32), "int8", True, True, axis=axis % w.ndim)
    assert np.array_equal(fake_quantize(v, qv), _two_ops(v, qv))


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
def test_a_nan_quantizes_as_the_two_ops_do():
    qp = params_from_range(-1.0, 1.0, "int8", False)
    x = np.array([0.3, np.nan, -0.7], np.float32)
    assert np.array_equal(fake_quantize(x, qp), _two_ops(x, qp), equal_nan=True)


def test_error_stats_are_the_float64_figures_of_the_difference():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((2, 8, 37, 29)).astype(np.float32)  # not a multiple of 16 values
    q = (ref + rng.standard_normal(ref.shape).astype(np.float32) * 0.05).astype(np.float32)
    st = ErrorStats()
    st.update(ref, q)
    st.update(ref[:, :3], q[:, :3])
    r, x = ref.astype(np.float64).ravel(), q.astype(np.float64).ravel()
    r3, x3 = ref[:, :3].astype(np.float64).ravel(), q[:, :3].astype(np.float64).ravel()
    assert st.ref2 == pytest.approx((r @ r) + (r3 @ r3), rel=1e-12)
    assert st.err2 == pytest.approx(((r - x) ** 2).sum() + ((r3 - x3) ** 2).sum(), rel=1e-12)
    assert st.dot == pytest.approx((r @ x) + (r3 @ x3), rel=1e-12)
    assert st.q2 == pytest.approx((x @ x) + (x3 @ x3), rel=1e-12)
    assert st.max_abs == float(np.abs(ref - q).max())
    assert 25 < st.sqnr_db < 27 and 0.998 < st.cosine < 1.0


def test_error_stats_of_a_nan_output_say_nan_not_a_clean_figure():
    st = ErrorStats()
    ref = np.ones(40, np.float32)
    bad = ref.copy()
    bad[17] = np.nan
    st.update(ref, bad)
    st.update(ref, ref)  # a clean sample after it does not hide it
    assert np.isnan(st.err2) and np.isnan(st.sqnr_db) and np.isnan(st.max_abs)
