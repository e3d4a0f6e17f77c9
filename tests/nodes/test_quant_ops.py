"""Quantization ops: exact rounding/saturation, granularities, dtypes and integer kernels."""

from __future__ import annotations

import itertools
from functools import partial

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from engine.ir.infer import node_context
from tests.nodes._build import load_graph

_load = partial(load_graph, opset=21)


def _quantize(x, scale, zp=None, opset=21, **attrs):
    inits = [("s", np.asarray(scale, np.float32))]
    names = ["x", "s"]
    if zp is not None:
        inits.append(("zp", zp))
        names.append("zp")
    g = _load([helper.make_node("QuantizeLinear", names, ["y"], **attrs)],
              [("x", TensorProto.FLOAT, x.shape)], ["y"], inits, opset=opset)
    return g, engine.execute(g, {"x": x})["y"]


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([2.5, -2.5, 3.5, 0.5, 1.5, 300.0, -300.0], np.float32)
    _, y = _quantize(x, 1.0, np.array(0, np.int8))
    np.testing.assert_array_equal(y, [2, -2, 4, 0, 2, 127, -128])
    assert y.dtype == np.int8
    _, u = _quantize(x, 1.0, np.array(10, np.uint8))
    np.testing.assert_array_equal(u, [12, 8, 14, 10, 12, 255, 0])


def test_quantize_default_output_is_uint8():
    g, y = _quantize(np.array([-1.0, 0.4, 0.6, 1000.0], np.float32), 0.5)
    assert g.outputs[0].type.dtype == np.uint8
    np.testing.assert_array_equal(y, [0, 1, 1, 255])


def test_quantize_per_axis_and_blocked():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    s = np.array([1.0, 2.0, 4.0], np.float32)
    zp = np.array([0, 1, 2], np.uint8)
    _, y = _quantize(x, s, zp, axis=1)
    np.testing.assert_array_equal(y, np.rint(x / s[None, :, None]) + zp[None, :, None])

    xb = np.arange(12, dtype=np.float32).reshape(2, 6)
    sb = np.array([[1.0, 2.0, 4.0], [0.5, 1.0, 8.0]], np.float32)  # blocks of 2 along axis 1
    _, yb = _quantize(xb, sb, np.zeros((2, 3), np.int16), axis=1, block_size=2)
    expect = np.clip(np.rint(xb / np.repeat(sb, 2, axis=1)), -32768, 32767).astype(np.int16)
    np.testing.assert_array_equal(yb, expect)
    assert yb.dtype == np.int16


def test_quantize_int4_from_output_dtype():
    x = np.array([-10.0, -8.5, 0.5, 6.5, 7.5, 20.0], np.float32)
    g, y = _quantize(x, 1.0, output_dtype=TensorProto.INT4)
    assert g.outputs[0].type.dtype == np.dtype(ml_dtypes.int4)
    np.testing.assert_array_equal(y.astype(np.int32), [-8, -8, 0, 6, 7, 7])


def test_quantize_float8_saturation_switch():
    x = np.array([1000.0, -1000.0, np.inf, 1.0], np.float32)
    zp = np.zeros((), ml_dtypes.float8_e4m3fn)
    _, sat = _quantize(x, 1.0, zp, opset=19)
    np.testing.assert_array_equal(sat.astype(np.float32), [448, -448, 448, 1])
    _, raw = _quantize(x, 1.0, zp, opset=19, saturate=0)
    assert np.isnan(raw.astype(np.float32)[:3]).all()


def test_dequantize_per_axis_and_int32_exact():
    s = np.array([0.5, 2.0], np.float32)
    zp = np.array([128, 10], np.uint8)
    g = _load([helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["y"], axis=0)],
              [("x", TensorProto.UINT8, ("N", 3))], ["y"], [("s", s), ("zp", zp)])
    assert g.outputs[0].type.dtype == np.float32
    assert g.outputs[0].type.shape == ("N", 3)
    x2 = np.array([[0, 128, 255]] * 2, np.uint8)
    with pytest.raises(engine.ExecutionError, match="per-axis scale has 2 elements"):
        engine.execute(g, {"x": np.zeros((3, 3), np.uint8)})  # 3 rows vs 2 scales
    y = engine.execute(g, {"x": x2})["y"]
    np.testing.assert_array_equal(y, [[-64, 0, 63.5], [-20, 236, 490]])

    big = np.array([2**30 + 1, -(2**30) - 3], np.int32)
    g32 = _load([helper.make_node("DequantizeLinear", ["x", "s"], ["y"])], [("x", TensorProto.INT32, (2,))],
                ["y"], [("s", np.array(1.0, np.float64))])
    np.testing.assert_array_equal(engine.execute(g32, {"x": big})["y"], big.astype(np.float64))


def test_dynamic_quantize_linear():
    x = np.array([0.0, 2.0, -3.0, -2.5, 1.34, 0.5], np.float32)
    g = _load([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])],
              [("x", TensorProto.FLOAT, (6,))], ["y", "s", "zp"], opset=11)
    out = engine.execute(g, {"x": x})
    scale = np.float32(5.0) / np.float32(255)
    assert out["s"].dtype == np.float32
    assert np.isclose(out["s"], scale)
    assert out["zp"].dtype == np.uint8
    assert int(out["zp"]) == 153
    np.testing.assert_array_equal(out["y"], np.clip(np.rint(x / scale) + 153, 0, 255).astype(np.uint8))


def _int_conv_naive(x, w, pads, strides):
    """Direct int64 convolution for the tests (one group)."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, _, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh, ow = (h - kh) // strides[0] + 1, (wd - kw) // strides[1] + 1
    y = np.zeros((n, m, oh, ow), np.int64)
    for i, j in itertools.product(range(oh), range(ow)):
        patch = x[:, :, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
        y[:, :, i, j] = np.einsum("nchw,mchw->nm", patch, w.astype(np.int64))
    return y


def test_matmul_integer_exact_with_row_and_column_zero_points():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (3, 5, 700), dtype=np.uint8)  # K=700: needs the float64 path
    b = rng.integers(-128, 128, (700, 4), dtype=np.int8)
    azp = rng.integers(0, 256, (5,), dtype=np.uint8)
    bzp = rng.integers(-128, 128, (4,), dtype=np.int8)
    g = _load([helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])],
              [("a", TensorProto.UINT8, ("B", 5, 700))], ["y"], [("b", b), ("azp", azp), ("bzp", bzp)])
    assert g.outputs[0].type.dtype == np.int32
    assert g.outputs[0].type.shape == ("B", 5, 4)
    y = engine.execute(g, {"a": a})["y"]
    expect = (a.astype(np.int64) - azp[:, None]) @ (b.astype(np.int64) - bzp)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expect)


def test_conv_integer_pads_with_zero_point_and_counts_macs():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (1, 3, 6, 6), dtype=np.uint8)
    w = rng.integers(0, 256, (4, 3, 3, 3), dtype=np.uint8)
    wzp = np.array([1, 2, 3, 4], np.uint8)
    g = _load([helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])],
              [("x", TensorProto.UINT8, (1, 3, 6, 6))], ["y"],
              [("w", w), ("xzp", np.array(7, np.uint8)), ("wzp", wzp)])
    assert g.outputs[0].type.shape == (1, 4, 3, 3)
    assert g.outputs[0].type.dtype == np.int32
    y = engine.execute(g, {"x": x})["y"]
    xc = x.astype(np.int64) - 7
    wc = w.astype(np.int64) - wzp[:, None, None, None]
    np.testing.assert_array_equal(y, _int_conv_naive(xc, wc, [1, 1, 1, 1], [2, 2]))
    ctx = node_context(g.nodes[0])
    assert ctx.spec.work(ctx).macs == 1 * 4 * 3 * 3 * 3 * 3 * 3


def test_integer_products_beyond_float32s_exact_range_stay_exact():
    # uint8 x int8 sums of K = 1024 (matmul) and 64 channels x 9 taps (conv) reach 3e7 and
    # 7e6 x 9, beyond float32's 2**24: they run as float32 chunks whose sums are exact
    rng = np.random.default_rng(5)
    a = np.full((4, 1024), 255, np.uint8)
    a[1:] = rng.integers(0, 256, (3, 1024), dtype=np.uint8)
    b = np.full((1024, 3), -128, np.int8)
    b[:, 1:] = rng.integers(-128, 128, (1024, 2), dtype=np.int8)
    g = _load([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], [("a", TensorProto.UINT8, (4, 1024))], ["y"],
              [("b", b)])
    np.testing.assert_array_equal(engine.execute(g, {"a": a})["y"], a.astype(np.int64) @ b.astype(np.int64))
    x = rng.integers(0, 256, (1, 64, 7, 9), dtype=np.uint8)
    x[0, :, 2:5, 3:6] = 255
    w = rng.integers(0, 256, (5, 64, 3, 3), dtype=np.uint8)
    w[0] = 255
    g = _load([helper.make_node("ConvInteger", ["x", "w", "xzp"], ["y"], pads=[1, 1, 1, 1])],
              [("x", TensorProto.UINT8, (1, 64, 7, 9))], ["y"], [("w", w), ("xzp", np.array(3, np.uint8))])
    for _ in range(2):  # the second run reuses the prepared weight
        y = engine.execute(g, {"x": x})["y"]
        np.testing.assert_array_equal(y, _int_conv_naive(x.astype(np.int64) - 3, w.astype(np.int64), [1, 1, 1, 1], [1, 1]))
    assert int(y.max()) > 2**24


def test_qlinear_conv_per_channel_requantization():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (2, 2, 5, 5), dtype=np.int8)
    w = rng.integers(-127, 128, (3, 2, 3, 3), dtype=np.int8)
    b = rng.integers(-1000, 1000, (3,), dtype=np.int32)
    ws = np.array([0.01, 0.02, 0.005], np.float32)
    inits = [("xs", np.array(0.05, np.float32)), ("xzp", np.array(-3, np.int8)), ("w", w), ("ws", ws),
             ("wzp", np.zeros(3, np.int8)), ("ys", np.array(0.2, np.float32)), ("yzp", np.array(5, np.int8)),
             ("b", b)]
    g = _load([helper.make_node("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"], ["y"])],
              [("x", TensorProto.INT8, (2, 2, 5, 5))], ["y"], inits, opset=10)
    y = engine.execute(g, {"x": x})["y"]
    acc = _int_conv_naive(x.astype(np.int64) + 3, w, [0, 0, 0, 0], [1, 1]) + b[None, :, None, None]
    mult = (np.float32(0.05) * ws / np.float32(0.2)).astype(np.float32)
    expect = np.clip(np.rint(acc.astype(np.float32) * mult[None, :, None, None]) + 5, -128, 127)
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, expect.astype(np.int8))


def test_qlinear_matmul_uint8():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (2, 3, 8), dtype=np.uint8)
    b = rng.integers(0, 256, (8, 5), dtype=np.uint8)
    inits = [("as", np.array(0.02, np.float32)), ("azp", np.array(120, np.uint8)), ("b", b),
             ("bs", np.array(0.01, np.float32)), ("bzp", np.array(130, np.uint8)),
             ("ys", np.array(0.1, np.float32)), ("yzp", np.array(128, np.uint8))]
    g = _load([helper.make_node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"], ["y"])],
              [("a", TensorProto.UINT8, ("N", 3, 8))], ["y"], inits, opset=10)
    assert g.outputs[0].type.shape == ("N", 3, 5)
    assert g.outputs[0].type.dtype == np.uint8
    y = engine.execute(g, {"a": a})["y"]
    acc = (a.astype(np.int64) - 120) @ (b.astype(np.int64) - 130)
    mult = np.float32(0.02) * np.float32(0.01) / np.float32(0.1)
    expect = np.clip(np.rint(acc.astype(np.float32) * mult) + 128, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(y, expect)
