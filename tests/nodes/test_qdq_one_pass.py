"""QuantizeLinear and DequantizeLinear of float32 and 8/16-bit types take one compiled pass;
the values are those of the numpy expression of the ops (each rounding in the same order)."""

from __future__ import annotations

import numpy as np
import pytest

from nodes import kernels
from nodes import quant_ops as q


def _numpy_path(monkeypatch, fn, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(kernels, "quantize_", lambda *a, **k: None)
        m.setattr(kernels, "dequantize_", lambda *a, **k: None)
        return fn(*args, **kw)


def _values(shape, scale: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 200 * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[:800] = (np.arange(800) - 400 + 0.5).astype(np.float32) * np.float32(scale)  # ties
    flat[800:808] = [-0.0, 0.0, 1e30, -1e30, np.inf, -np.inf, 1e-40, -1e-40]
    return x


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_one_pass_quantize_and_dequantize_give_the_numpy_bits(monkeypatch, dtype, axis):
    x = _values((3, 8, 10, 12), 0.03)
    zp_value = 0 if dtype in (np.int8, np.int16) else 128
    if axis is None:
        scale, zp = np.float32(0.03), np.array(zp_value + 3, dtype)
    else:
        n = x.shape[axis]
        scale = np.linspace(0.01, 0.05, n).astype(np.float32)
        zp = np.full(n, zp_value, dtype)
    a = 1 if axis is None else axis
    got = q.quantize_linear(x, scale, zp, dtype, axis=a)
    want = _numpy_path(monkeypatch, q.quantize_linear, x, scale, zp, dtype, axis=a)
    assert got.dtype == want.dtype == np.dtype(dtype) and np.array_equal(got, want)
    back = q.dequantize_linear(got, scale, zp, np.float32, axis=a)
    back_want = _numpy_path(monkeypatch, q.dequantize_linear, got, scale, zp, np.float32, axis=a)
    assert back.dtype == np.float32 and np.array_equal(back.view(np.int32), back_want.view(np.int32))


def test_a_mismatched_per_axis_scale_is_still_the_ops_error():
    from nodes.spec import OpError

    with pytest.raises(OpError):
        q.quantize_linear(np.zeros((2, 3), np.float32), np.ones(4, np.float32), None, np.uint8, axis=1)
