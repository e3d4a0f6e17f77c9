"""Conv / ConvTranspose / DeformConv / Col2Im: shapes (symbolic dims), values, MAC counts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from engine.ir.infer import node_context
from nodes.spec import OpError
from tests.nodes._build import load_graph as _load


def _conv_graph(x_shape, w, b=None, dtype=TensorProto.FLOAT, **attrs):
    inits = [("w", w)] + ([("b", b)] if b is not None else [])
    ins = ["x", "w"] + (["b"] if b is not None else [])
    return _load([helper.make_node("Conv", ins, ["y"], **attrs)], [("x", dtype, x_shape)], ["y"], inits)


def _work(graph):
    ctx = node_context(graph.nodes[0])
    return ctx.spec.work(ctx)


def naive_conv(x, w, b=None, strides=None, pads=None, dils=None, group=1):
    """Direct N-D convolution, one output position at a time (slow, obviously right)."""
    n_sp = x.ndim - 2
    strides = strides or [1] * n_sp
    dils = dils or [1] * n_sp
    pads = pads or [0] * (2 * n_sp)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[n_sp + i]) for i in range(n_sp)])
    m, cg = w.shape[:2]
    k = w.shape[2:]
    out = [(xp.shape[2 + i] - ((k[i] - 1) * dils[i] + 1)) // strides[i] + 1 for i in range(n_sp)]
    y = np.zeros((x.shape[0], m, *out))
    mg = m // group
    for o in itertools.product(*(range(v) for v in out)):
        sl = tuple(slice(o[i] * strides[i], o[i] * strides[i] + (k[i] - 1) * dils[i] + 1, dils[i]) for i in range(n_sp))
        for g in range(group):
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg), *sl)]
            wg = w[g * mg:(g + 1) * mg].astype(np.float64)
            y[(slice(None), slice(g * mg, (g + 1) * mg), *o)] = np.tensordot(patch, wg, axes=(
                list(range(1, patch.ndim)), list(range(1, wg.ndim))))
    if b is not None:
        y += b.reshape((1, m) + (1,) * n_sp)
    return y


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "out"), [
    (("N", 3, 224, 224), (64, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, ("N", 64, 112, 112)),
    (("N", 64, "H", "W"), (64, 64, 3, 3), {"auto_pad": "SAME_UPPER"}, ("N", 64, "H", "W")),
    (("N", 64, "H", "W"), (128, 64, 1, 1), {}, ("N", 128, "H", "W")),
    (("N", 64, "H", "W"), (64, 64, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, ("N", 64, None, None)),
    ((1, 32, 17, 17), (32, 1, 3, 3), {"group": 32, "auto_pad": "SAME_LOWER", "strides": [2, 2]}, (1, 32, 9, 9)),
    ((2, 8, 20), (4, 8, 5), {"dilations": [2], "auto_pad": "VALID"}, (2, 4, 12)),
    ((1, 4, 8, 9, 10), (6, 2, 3, 3, 3), {"group": 2, "pads": [1, 0, 1, 1, 0, 1]}, (1, 6, 8, 7, 10)),
])
def test_conv_infer_shapes(x_shape, w_shape, attrs, out):
    g = _conv_graph(x_shape, np.zeros(w_shape, np.float32), **attrs)
    assert g.outputs[0].type.shape == out
    assert g.outputs[0].type.dtype == np.float32


def test_conv_channel_mismatch_is_reported():
    g = _conv_graph((1, 5, 8, 8), np.zeros((4, 2, 3, 3), np.float32), group=2)
    ctx = node_context(g.nodes[0])
    with pytest.raises(OpError, match="channels"):
        ctx.spec.infer(ctx)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 1], "pads": [1, 2, 0, 1], "dilations": [1, 2]},
    {"group": 2, "auto_pad": "SAME_UPPER"},
    {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]},  # depthwise
    {"kernel_shape": [1, 1], "strides": [2, 2]},  # strided pointwise
    {"group": 6, "pads": [2, 1, 0, 2], "dilations": [2, 1]},  # stride-1 depthwise: one pass per tap and plane
    {"group": 3, "kernel_shape": [5, 3], "pads": [2, 1, 2, 1]},  # 2 x 2 channels per group, whole plane
])
def test_conv_values_match_direct_convolution(attrs):
    rng = np.random.default_rng(0)
    group = attrs.get("group", 1)
    k = attrs.get("kernel_shape", [3, 3])
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 6 // group, *k)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    g = _conv_graph(x.shape, w, b, **attrs)
    y = engine.execute(g, {"x": x})["y"]
    pads = attrs.get("pads")
    if attrs.get("auto_pad") == "SAME_UPPER":
        pads = [1, 1, 1, 1]
    ref = naive_conv(x, w, b, attrs.get("strides"), pads, attrs.get("dilations"), group)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_depthwise_with_channel_multiplier_and_float16():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 7, 7)).astype(np.float16)
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float16)
    g = _conv_graph(x.shape, w, dtype=TensorProto.FLOAT16, group=3, pads=[1, 1, 1, 1])
    y = engine.execute(g, {"x": x})["y"]
    assert y.dtype == np.float16
    ref = naive_conv(x.astype(np.float32), w.astype(np.float32), pads=[1, 1, 1, 1], group=3)
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=1e-2, atol=1e-2)


def test_conv_macs():
    # ResNet-50's stem: 64 filters of 3x7x7 over a 112x112 output
    g = _conv_graph((1, 3, 224, 224), np.zeros((64, 3, 7, 7), np.float32), strides=[2, 2], pads=[3, 3, 3, 3])
    w = _work(g)
    assert w.macs == 1 * 64 * 112 * 112 * 3 * 7 * 7 == 118_013_952
    assert w.weight_bytes == 64 * 3 * 7 * 7 * 4
    # depthwise: one input channel per output channel
    g = _conv_graph((2, 32, 56, 56), np.zeros((32, 1, 3, 3), np.float32), group=32, pads=[1, 1, 1, 1])
    assert _work(g).macs == 2 * 32 * 56 * 56 * 9


def naive_convtranspose(x, w, strides, pads, out_shape, group=1):
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    k = w.shape[2:]
    full = [(x.shape[2 + i] - 1) * strides[i] + k[i] for i in range(2)]
    buf = np.zeros((n, mg * group, max(full[0], pads[0] + out_shape[0]), max(full[1], pads[1] + out_shape[1])))
    for i, j in itertools.product(range(x.shape[2]), range(x.shape[3])):
        for g in range(group):
            contrib = np.einsum("nc,cmhw->nmhw", x[:, g * cg:(g + 1) * cg, i, j], w[g * cg:(g + 1) * cg])
            buf[:, g * mg:(g + 1) * mg, i * strides[0]:i * strides[0] + k[0], j * strides[1]:j * strides[1] + k[1]] += contrib
    return buf[:, :, pads[0]:pads[0] + out_shape[0], pads[1]:pads[1] + out_shape[1]]


def test_convtranspose_shapes_values_and_macs():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    # explicit pads + output_padding: out = s*(in-1) + op + k - pads
    g = _load([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                                output_padding=[1, 0], group=2)],
              [("x", TensorProto.FLOAT, ("N", 4, 5, 6))], ["y"], [("w", w)])
    assert g.outputs[0].type.shape == ("N", 6, 10, 11)
    assert _work(g).macs == 0  # symbolic batch: unknown work
    y = engine.execute(g, {"x": x})["y"]
    np.testing.assert_allclose(y, naive_convtranspose(x, w, [2, 2], [1, 1], [10, 11], group=2), rtol=1e-4, atol=1e-4)
    # output_shape larger than the full result: pads are derived (negative: zeros at the end)
    g = _load([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[12, 14])],
              [("x", TensorProto.FLOAT, (1, 4, 5, 6))], ["y"], [("w", w[:, :3])])
    assert g.outputs[0].type.shape == (1, 3, 12, 14)
    y = engine.execute(g, {"x": x})["y"]
    np.testing.assert_allclose(y[:, :, :11, :13], naive_convtranspose(x, w, [2, 2], [0, 0], [11, 13]),
                               rtol=1e-4, atol=1e-4)
    assert _work(g).macs == 1 * 4 * 5 * 6 * 3 * 3 * 3


@pytest.mark.parametrize(("kernel", "group", "bias"), [((2, 2), 1, False), ((2, 2), 2, True), ((3, 3), 1, True),
                                                   ((1, 4), 1, False)])
def test_convtranspose_whose_taps_tile_the_output_matches_onnxruntime_and_the_definition(kernel, group, bias):
    """A detector's 2x2 stride-2 upsampling (stride = kernel: every output pixel is one tap):
    the naive definition's values and onnxruntime's, with and without bias; and the taps' bits
    are the summing path's (0 + tap: -0 becomes +0, NaN stays NaN)."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(sum(kernel) + group)
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    x[:, :, 0] = 0.0
    w = -np.abs(rng.standard_normal((4, 3, *kernel))).astype(np.float32)
    inits = [("w", w)] + ([("b", np.zeros(3 * group, np.float32))] if bias else [])
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], strides=list(kernel),
                            group=group)
    g = _load([node], [("x", TensorProto.FLOAT, x.shape)], ["y"], inits)
    y = engine.execute(g, {"x": x})["y"]
    out = [5 * kernel[0], 6 * kernel[1]]
    np.testing.assert_allclose(y, naive_convtranspose(x, w, list(kernel), [0, 0], out, group=group), rtol=1e-5, atol=1e-5)
    from engine.ir.onnx_io import to_onnx

    sess = ort.InferenceSession(to_onnx(g).SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(y, theirs, rtol=1e-5, atol=1e-5)
    from nodes.conv import scatter_taps

    cols = rng.standard_normal((1, 3, *kernel, 5, 6)).astype(np.float32)
    cols[..., 0, :] = -0.0
    cols[..., 1, 0] = np.nan
    want = np.zeros((1, 3, *out), np.float32)
    for a, b in itertools.product(range(kernel[0]), range(kernel[1])):
        want[:, :, a::kernel[0], b::kernel[1]] += cols[:, :, a, b]
    got = scatter_taps(cols, list(kernel), [5, 6], list(kernel), [1, 1], [0, 0], out)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_deformconv_with_zero_offsets_is_conv_and_col2im_inverts_im2col():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    off = np.zeros((1, 2 * 9, 4, 5), np.float32)
    g = _load([helper.make_node("DeformConv", ["x", "w", "off"], ["y"])],
              [("x", TensorProto.FLOAT, x.shape), ("off", TensorProto.FLOAT, off.shape)], ["y"], [("w", w)], opset=19)
    assert g.outputs[0].type.shape == (1, 2, 4, 5)
    np.testing.assert_allclose(engine.execute(g, {"x": x, "off": off})["y"], naive_conv(x, w), rtol=1e-4, atol=1e-4)
    # Col2Im of all-ones 2x2 blocks (stride 1) counts how many blocks cover each pixel
    cols = np.ones((1, 4, 9), np.float32)
    g = _load([helper.make_node("Col2Im", ["c", "img", "blk"], ["y"])], [("c", TensorProto.FLOAT, cols.shape)], ["y"],
              [("img", np.array([4, 4], np.int64)), ("blk", np.array([2, 2], np.int64))], opset=18)
    assert g.outputs[0].type.shape == (1, 1, 4, 4)
    y = engine.execute(g, {"c": cols})["y"][0, 0]
    np.testing.assert_array_equal(y, np.outer([1, 2, 2, 1], [1, 2, 2, 1]))


@pytest.mark.parametrize(("x_shape", "w_shape", "strides", "pads", "dils", "group"), [
    ((2, 3, 13, 13), (8, 3, 3, 3), [2, 2], [1, 1, 1, 0], [1, 1], 1),  # first layer: 3 channels, stride 2
    ((1, 8, 11, 9), (12, 4, 3, 2), [1, 1], [2, 0, 2, 1], [2, 1], 2),  # grouped, dilated
    ((1, 6, 9, 9), (40, 6, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),  # more than IM2COL_FEW_FILTERS filters
    ((2, 2, 7, 4, 6), (3, 2, 2, 3, 2), [1, 2, 1], [0, 1, 0, 1, 0, 1], [1, 1, 1], 1),  # 3-D
])
def test_banded_im2col_matches_direct_convolution(monkeypatch, x_shape, w_shape, strides, pads, dils, group):
    """The banded im2col (a band of output rows at a time in one reused buffer, each band's GEMM
    written straight into the output) gives the direct convolution's values, last short band included."""
    import nodes.conv as conv

    monkeypatch.setattr(conv.direct_conv, "lanes", lambda: 0)  # the numpy path this test is about
    calls = []
    bands = conv._im2col_bands
    monkeypatch.setattr(conv, "_im2col_bands", lambda *a: calls.append(a[3]) or bands(*a))
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    n = len(strides)
    ref = naive_conv(x, w, b, strides, pads, dils, group)
    row_bytes = x_shape[0] * x_shape[1] * int(np.prod(w_shape[2:])) * int(np.prod(ref.shape[3:])) * 4
    monkeypatch.setattr(conv, "IM2COL_FEW_BAND_BYTES", 2 * row_bytes)  # bands of two output rows
    monkeypatch.setattr(conv, "IM2COL_BAND_BYTES", 2 * row_bytes)
    monkeypatch.setattr(conv, "IM2COL_BAND_MIN_COLS", 1)
    y = conv.conv_nd(x, w, b, strides, dils, pads[:n], pads[n:], group)
    assert calls == [2] and y.shape[2] % 2 == 1  # banded, the last band shorter
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
