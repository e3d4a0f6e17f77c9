"""Pooling: window shapes (ceil mode, symbolic dims), MaxPool indices, divisors, unpooling, ROI ops."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from engine.ir.infer import node_context
from tests.nodes._build import load_graph as _load


def _pool(op, x_shape, n_out=1, dtype=TensorProto.FLOAT, opset=17, **attrs):
    outs = ["y", "i"][:n_out]
    return _load([helper.make_node(op, ["x"], outs, **attrs)], [("x", dtype, x_shape)], outs, opset=opset)


@pytest.mark.parametrize(("op", "x_shape", "attrs", "out"), [
    ("MaxPool", ("N", 64, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     ("N", 64, 56, 56)),
    ("MaxPool", (1, 1, 4, 4), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 1, 2, 2)),
    # ceil mode: a last window that would start in the end padding is dropped
    ("AveragePool", (1, 1, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1],
                                   "ceil_mode": 1}, (1, 1, 3, 3)),
    ("AveragePool", ("N", "C", "H", "W"), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"}, ("N", "C", "H", "W")),
    ("LpPool", (2, 3, 9), {"kernel_shape": [3], "strides": [2], "dilations": [2]}, (2, 3, 3)),
    ("GlobalAveragePool", ("N", 2048, 7, 7), {}, ("N", 2048, 1, 1)),
    ("GlobalMaxPool", (1, 8, "D", "H", "W"), {}, (1, 8, 1, 1, 1)),
])
def test_pool_infer_shapes(op, x_shape, attrs, out):
    g = _pool(op, x_shape, **attrs)
    assert g.outputs[0].type.shape == out


def test_maxpool_indices_follow_onnx_convention():
    x = np.array([[[[1, 9, 2], [3, 4, 8], [7, 5, 6]]], [[[0, 0, 0], [0, 0, 0], [0, 0, 5]]]], np.float32)
    g = _pool("MaxPool", x.shape, n_out=2, kernel_shape=[2, 2])
    assert g.outputs[1].type.dtype == np.int64
    res = engine.execute(g, {"x": x})
    np.testing.assert_array_equal(res["y"][0, 0], [[9, 9], [7, 8]])
    # flat index into the whole (N, C, H, W) input, row major; ties keep the first maximum
    np.testing.assert_array_equal(res["i"][0, 0], [[1, 1], [6, 5]])
    np.testing.assert_array_equal(res["i"][1, 0], [[9, 10], [12, 17]])
    g = _pool("MaxPool", x.shape, n_out=2, kernel_shape=[2, 2], storage_order=1)
    np.testing.assert_array_equal(engine.execute(g, {"x": x})["i"][0, 0], [[3, 3], [2, 7]])


def test_maxpool_uint8_pads_with_the_type_minimum():
    x = np.array([[[[3, 200], [17, 4]]]], np.uint8)
    g = _pool("MaxPool", x.shape, dtype=TensorProto.UINT8, kernel_shape=[2, 2], pads=[1, 1, 0, 0])
    y = engine.execute(g, {"x": x})["y"]
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y[0, 0], [[3, 200], [17, 200]])


def test_averagepool_divisor_with_and_without_padding():
    x = np.ones((1, 1, 3, 3), np.float32)
    args = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    y = engine.execute(_pool("AveragePool", x.shape, **args), {"x": x})["y"]
    np.testing.assert_allclose(y, np.ones((1, 1, 3, 3)))  # padding excluded from the count
    y = engine.execute(_pool("AveragePool", x.shape, count_include_pad=1, **args), {"x": x})["y"]
    np.testing.assert_allclose(y[0, 0], np.array([[4, 6, 4], [6, 9, 6], [4, 6, 4]]) / 9)


def test_pool_work_counts_window_taps():
    g = _pool("AveragePool", (1, 16, 8, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    ctx = node_context(g.nodes[0])
    assert ctx.spec.work(ctx).macs == 16 * 4 * 4 * 9


def test_maxunpool_inverts_maxpool_positions():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    g = _load([helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
               helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
              [("x", TensorProto.FLOAT, x.shape)], ["y"])
    assert g.outputs[0].type.shape == (2, 3, 4, 6)
    y = engine.execute(g, {"x": x})["y"]
    blocks = x.reshape(2, 3, 2, 2, 3, 2).max(axis=(3, 5))
    assert np.count_nonzero(y) == blocks.size
    np.testing.assert_allclose(np.sort(y[y != 0]), np.sort(blocks.ravel()))


def test_roialign_half_pixel_is_opset_dependent():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    rois = np.array([[0, 0, 2, 2]], np.float32)
    feeds = {"x": x, "r": rois, "b": np.zeros(1, np.int64)}

    def run(opset, **attrs):
        g = _load([helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], output_height=1, output_width=1,
                                    sampling_ratio=1, **attrs)],
                  [("x", TensorProto.FLOAT, x.shape), ("r", TensorProto.FLOAT, rois.shape),
                   ("b", TensorProto.INT64, (1,))], ["y"], opset=opset)
        assert g.outputs[0].type.shape == (1, 1, 1, 1)
        return float(engine.execute(g, feeds)["y"].ravel()[0])

    # opset 10 has no half-pixel shift: the single sample sits at (1, 1) -> x[1, 1] = 5
    assert run(10) == pytest.approx(5.0)
    # opset 16+ defaults to half_pixel: the sample moves to (0.5, 0.5) -> 2.5
    assert run(16) == pytest.approx(2.5)
    assert run(16, coordinate_transformation_mode="output_half_pixel") == pytest.approx(5.0)


def test_maxpool_work_counts_compares_not_macs():
    g = _pool("MaxPool", (1, 16, 8, 8), kernel_shape=[2, 2], strides=[2, 2])
    ctx = node_context(g.nodes[0])
    w = ctx.spec.work(ctx)
    assert w.macs == 0
    assert w.elem_ops == 16 * 4 * 4 * 4


def _naive_pool(x, kernel, strides, pads, dils, op):
    pt, pl, pb, pr = pads
    fill = -np.inf if op == "max" else 0.0
    xp = np.full((*x.shape[:2], x.shape[2] + pt + pb, x.shape[3] + pl + pr), fill, x.dtype)
    xp[:, :, pt:pt + x.shape[2], pl:pl + x.shape[3]] = x
    oh = (xp.shape[2] - (kernel[0] - 1) * dils[0] - 1) // strides[0] + 1
    ow = (xp.shape[3] - (kernel[1] - 1) * dils[1] - 1) // strides[1] + 1
    y = np.empty((*x.shape[:2], oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * strides[0]:i * strides[0] + (kernel[0] - 1) * dils[0] + 1:dils[0],
                     j * strides[1]:j * strides[1] + (kernel[1] - 1) * dils[1] + 1:dils[1]]
            y[:, :, i, j] = np.max(win, axis=(2, 3)) if op == "max" else win.astype(np.float64).sum(axis=(2, 3))
    return y


@pytest.mark.parametrize(("x_shape", "kernel", "strides", "pads", "dils"), [
    ((1, 3, 20, 23), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((2, 2, 11, 12), (3, 2), (1, 2), (0, 1, 2, 0), (1, 1)),
    ((1, 2, 17, 16), (2, 3), (3, 3), (0, 0, 0, 0), (2, 1)),
    ((1, 2, 9, 31), (3, 3), (1, 1), (1, 1, 1, 1), (1, 2)),
])
def test_max_and_average_pools_match_the_window_loop_and_keep_nan(x_shape, kernel, strides, pads, dils):
    rng = np.random.default_rng(sum(x_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    x[0, 0, 2, 3] = np.nan  # a NaN in a window makes that window's maximum NaN (np.maximum)
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads), "dilations": list(dils)}
    y = engine.execute(_pool("MaxPool", x_shape, **attrs), {"x": x})["y"]
    want = _naive_pool(x, kernel, strides, pads, dils, "max")
    assert np.isnan(y).sum() == np.isnan(want).sum() > 0
    np.testing.assert_array_equal(y, want.astype(np.float32))
    x[0, 0, 2, 3] = 0.5
    del attrs["dilations"]
    y = engine.execute(_pool("AveragePool", x_shape, count_include_pad=1, **attrs), {"x": x})["y"]
    want = _naive_pool(x, kernel, strides, pads, (1, 1), "sum") / (kernel[0] * kernel[1])
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("op", "attrs"), [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [3, 1], "pads": [2, 1, 0, 2], "dilations": [2, 1], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [2, 1, 0, 2]}),  # windows only in padding: 0 / 0
    ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 3], "pads": [1, 0, 1, 2], "ceil_mode": 1,
                     "count_include_pad": 1}),
])
def test_pools_without_a_padded_copy_give_the_padded_forms_values_bit_for_bit(op, attrs, monkeypatch):
    """2-D float pools run on the input itself (the padding virtual, an average's division in the
    same pass): the values of the padded copy's separable passes, NaN, -0 and 0 / 0 included."""
    from nodes import pooling

    rng = np.random.default_rng(3)
    for dtype, onnx_type in ((np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE)):
        x = rng.standard_normal((2, 3, 7, 9)).astype(dtype)
        x[0, 0, 0, :3] = (np.nan, -0.0, 0.0)
        x[1, 2] = -0.0
        g = _pool(op, x.shape, dtype=onnx_type, **attrs)
        direct = engine.execute(g, {"x": x})["y"]
        monkeypatch.setattr(pooling, "_direct", lambda *a: False)
        padded = engine.execute(_pool(op, x.shape, dtype=onnx_type, **attrs), {"x": x})["y"]
        monkeypatch.undo()
        np.testing.assert_array_equal(direct, padded)
        np.testing.assert_array_equal(np.signbit(direct), np.signbit(padded))
        assert np.isnan(direct).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_global_average_pool_keeps_ndarray_mean_bits(dtype):
    # GlobalAveragePool calls the sum and divide ufuncs that ndarray.mean makes itself (no Python
    # wrapper), float32 planes through the compiled float64 sum: the bits must stay those of
    # mean() in the accumulator dtype (float64 for float32 and float64), row lengths below, at
    # and above numpy's pairwise-summation block included
    rng = np.random.default_rng(7)
    for shape in [(1, 8, 12, 96), (1, 200, 1, 1), (2, 3, 5), (1, 4, 3, 3, 3), (1, 16, 8, 16), (3, 7, 129),
                  (1, 5, 112, 112)]:
        x = (rng.standard_normal(shape) * 50).astype(dtype)
        y = engine.execute(_pool("GlobalAveragePool", shape, dtype=helper.np_dtype_to_tensor_dtype(x.dtype)),
                           {"x": x})["y"]
        acc = np.float32 if dtype == np.float16 else np.float64
        want = x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=acc).astype(dtype)
        assert y.dtype == want.dtype and y.shape == want.shape
        assert np.array_equal(y.view(np.uint8), want.view(np.uint8)), shape


def test_global_average_pool_of_a_large_float32_plane_is_the_mean_rounded_once():
    # a float32 running sum of 50k values near 1000 is off by many ulps of the mean; a float64
    # sum rounds once at the end: the exact mean (math.fsum) rounded to float32
    import math

    rng = np.random.default_rng(11)
    x = (1000 + rng.standard_normal((1, 6, 224, 224))).astype(np.float32)
    y = engine.execute(_pool("GlobalAveragePool", x.shape), {"x": x})["y"].ravel()
    exact = np.array([math.fsum(p.astype(np.float64)) / p.size for p in x.reshape(6, -1)]).astype(np.float32)
    assert np.array_equal(y, exact)
    naive = x.mean(axis=(2, 3), dtype=np.float32).ravel()  # what a float32 sum gives
    assert not np.array_equal(naive, exact)


def test_compiled_plane_means_have_the_bits_of_numpys_float64_sum_and_divide():
    from nodes import direct_conv

    def numpy_means(x):
        with np.errstate(invalid="ignore"):
            s = np.add.reduce(x, axis=(2, 3), dtype=np.float64, keepdims=True)
        return (s / np.intp(x.shape[2] * x.shape[3])).astype(np.float32)

    rng = np.random.default_rng(5)
    for length in [*range(1, 140), 191, 255, 256, 257, 1000, 8191, 8192, 8193, 12544]:
        planes = int(rng.integers(1, 10))
        shape = (1, planes, 1, length)
        means = direct_conv.plane_means_for(shape, np.dtype(np.float32))
        if means is None:
            pytest.skip("this build or CPU has no compiled plane means")
        x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, (1, planes, 1, 1))).astype(np.float32)
        assert np.array_equal(means(x).view(np.uint32), numpy_means(x).view(np.uint32)), (length, planes)
    x = np.array([[[[np.nan, 1]], [[np.inf, -np.inf]], [[-0.0, -0.0]], [[-0.0, 0.0]], [[np.inf, 1]]]], np.float32)
    got = direct_conv.plane_means_for(x.shape, x.dtype)(x)
    assert np.array_equal(got, numpy_means(x), equal_nan=True) and not np.signbit(got[0, 2:4]).any()  # -0 planes: +0
