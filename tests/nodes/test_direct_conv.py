"""The direct SIMD convolution (nodes/_cconv.c via nodes/direct_conv.py): built, used, right.

Every case runs both kernels this CPU can run (AVX-512 with 16-channel vectors where present,
AVX2 with 8) against the float64 one-position-at-a-time convolution, over the geometries the
kernel's blocking has branches for: row widths 1..25 (every pixel-run length up to 12 and the
splits of longer rows), output channels not a multiple of the vector (the last block half
empty, a single block), strides, dilations, asymmetric and negative pads, groups, batches.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.ir.graph import Graph
from nodes import direct_conv
from nodes.conv import conv_nd
from tests.nodes.test_conv import naive_conv


def _widths() -> list[int]:
    if direct_conv.lanes() == 16:
        return [16, 8]
    return [direct_conv.lanes()] if direct_conv.lanes() else []


def _run(x, w, b, strides, pads, dils, group, vb, relu=False):
    ep = direct_conv.RELU if relu else None
    from nodes.conv import pad_spatial

    n = 2
    out = [(x.shape[2 + i] + pads[i] + pads[n + i] - ((w.shape[2 + i] - 1) * dils[i] + 1)) // strides[i] + 1
           for i in range(n)]
    return direct_conv.Prepared(w, b, group, vb)(pad_spatial(x, pads[:n], pads[n:]), strides, dils, out, ep)


def test_the_kernel_is_built_and_runs_on_this_cpu():
    """make test installs the project, which compiles nodes/_cconv.c: a missing compiler or a
    broken build fails here, not as a silent 1.3x slower executor."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the kernel is x86-64 only; elsewhere the numpy path runs")
    from pathlib import Path

    flags = Path("/proc/cpuinfo").read_text()
    want = 16 if " avx512f" in flags else 8 if " avx2" in flags else 0
    assert direct_conv.lanes() == want


CASES = [
    # (N, C, H, W), (M, C/g, KH, KW), strides, pads (t, l, b, r), dils, group
    ((1, 3, 9, 25), (20, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # rows split 13 + 12 ... 25 wide
    ((2, 5, 7, 12), (16, 5, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # exactly one block, batch 2
    ((1, 4, 11, 11), (40, 4, 5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 1),  # stride 2, 5x5, 2.5 blocks
    ((1, 6, 13, 10), (9, 6, 3, 2), (1, 2), (2, 0, 1, 3), (2, 1), 1),  # dilated, asymmetric pads
    ((1, 8, 12, 12), (24, 4, 3, 3), (1, 1), (0, -1, 1, 0), (1, 1), 2),  # grouped, a negative pad
    ((1, 3, 30, 30), (33, 3, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),  # a stem: 3 channels, 7x7 s2
    ((1, 40, 7, 7), (24, 40, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1 on a small image
    ((2, 12, 13, 13), (40, 12, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),  # 1x1 at stride 2
]


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize(("x_shape", "w_shape", "strides", "pads", "dils", "group"), CASES)
def test_direct_conv_matches_the_definition(x_shape, w_shape, strides, pads, dils, group, vb):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    crop = x[:, :, max(0, -pads[0]):x.shape[2] - max(0, -pads[2]), max(0, -pads[1]):x.shape[3] - max(0, -pads[3])]
    ref = naive_conv(crop, w, b, list(strides), [max(0, p) for p in pads], list(dils), group)
    y = _run(x, w, b, strides, pads, dils, group, vb)
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    yr = _run(x, w, None, strides, pads, dils, group, vb, relu=True)
    np.testing.assert_allclose(yr, np.maximum(ref - b.reshape(1, -1, 1, 1), 0), rtol=2e-5,
                               atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("width", range(1, 26))
def test_every_row_width(width, vb):
    """Each row is cut into runs of at most 12 (AVX-512) or 6 (AVX2) pixels, each length its own
    compiled block: every length, and the splits of longer rows, land every output."""
    rng = np.random.default_rng(width)
    x = rng.standard_normal((1, 2, 3, width)).astype(np.float32)
    w = rng.standard_normal((18, 2, 3, 3)).astype(np.float32)
    ref = naive_conv(x, w, None, [1, 1], [1, 1, 1, 1], [1, 1])
    np.testing.assert_allclose(_run(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1, vb), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("vb", _widths())
def test_relu_as_numpy_maximum(vb):
    """The fused Relu keeps NaN and turns -0 into +0, as np.maximum(y, 0) (a Relu node) does."""
    x = np.zeros((1, 1, 3, 4), np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 0, 1, 2] = 1.0
    w = np.ones((3, 1, 1, 2), np.float32)
    w[1] *= -1
    plain = _run(x, w, None, (1, 1), (0, 0, 0, 0), (1, 1), 1, vb)
    fused = _run(x, w, None, (1, 1), (0, 0, 0, 0), (1, 1), 1, vb, relu=True)
    expect = np.maximum(plain, np.float32(0))
    np.testing.assert_array_equal(fused, expect)  # NaN where NaN, equal elsewhere
    assert not np.signbit(fused[~np.isnan(fused)]).any()
    assert np.isnan(fused).sum() == np.isnan(plain).sum() > 0


def test_conv_relu_plan_runs_the_relu_in_the_conv():
    """A fused plan hands a Conv's Relu to the Conv (no step of its own); the values are the
    Relu node's, and the unfused plan (a hook) still runs both."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(1)
    w = rng.standard_normal((20, 8, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 15])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20, 10, 15])], [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = engine.load(model)
    assert isinstance(graph, Graph)
    x = rng.standard_normal((1, 8, 10, 15)).astype(np.float32)
    fused = engine.execute(graph, {"x": x})["y"]
    ex = engine._executors[graph]
    plan = next(iter(ex._plans.values()))
    assert [s.spec.op_type for s in plan.steps] == ["Conv"] and plan.steps[0].ctx.cache.get("epilogue") is direct_conv.RELU
    unfused = engine.execute(graph, {"x": x}, keep_all=True)
    seen = unfused["c"]
    np.testing.assert_array_equal(fused, np.maximum(seen, 0))
    np.testing.assert_array_equal(fused, unfused["y"])


def test_numpy_path_when_disabled(monkeypatch):
    """Without the kernel (another CPU, or NPU_STUDIO_NO_CCONV=1) conv_nd gives the same
    values within float rounding, relu included."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 6, 9, 9)).astype(np.float32)
    w = rng.standard_normal((10, 6, 3, 3)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    fast = conv_nd(x, w, b, [1, 1], [1, 1], [1, 1], [1, 1], 1, {}, direct_conv.RELU)
    monkeypatch.setattr(direct_conv, "lanes", lambda: 0)
    slow = conv_nd(x, w, b, [1, 1], [1, 1], [1, 1], [1, 1], 1, {}, direct_conv.RELU)
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-5)
    assert (slow >= 0).all() and (slow == 0).any()


def test_pointwise_convs_take_the_kernel_and_keep_their_values(monkeypatch):
    """Dense 1x1 convolutions run the direct kernel, from a squeeze-excite head on a 1x1 image to
    a 128 -> 512 one on 28x28, and give the definition's values within float rounding; grouped
    1x1 ones too at the widths of GROUPED_1X1_LANES, batched GEMMs elsewhere."""
    calls = []
    real = direct_conv.Prepared.__call__
    monkeypatch.setattr(direct_conv.Prepared, "__call__", lambda self, xp, *a: calls.append(xp.shape) or real(self, xp, *a))
    rng = np.random.default_rng(4)
    for shape, m, g in (((1, 512, 7, 7), 96, 1), ((1, 128, 28, 28), 512, 1), ((1, 8, 1, 1), 2, 1), ((1, 24, 5, 5), 48, 3)):
        x = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal((m, shape[1] // g, 1, 1)).astype(np.float32)
        ref = naive_conv(x, w, None, [1, 1], [0, 0, 0, 0], [1, 1], g)
        np.testing.assert_allclose(conv_nd(x, w, None, [1, 1], [1, 1], [0, 0], [0, 0], g, {}), ref,
                                   rtol=1e-4, atol=1e-4)
    grouped = [(1, 24, 5, 5)] if direct_conv.lanes() in direct_conv.GROUPED_1X1_LANES else []
    assert calls == [(1, 512, 7, 7), (1, 128, 28, 28), (1, 8, 1, 1), *grouped]


DW_CASES = [
    # (N, C, H, W), outputs per channel, (KH, KW), strides, pads (t, l, b, r), dils
    ((1, 5, 9, 40), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 40 wide: the last tile overlaps
    ((2, 3, 11, 37), 1, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),  # stride 2 (even-lane shuffle), batch 2
    ((1, 4, 7, 7), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # rows narrower than a vector
    ((1, 3, 6, 5), 1, (3, 3), (2, 2), (0, 1, 1, 0), (1, 1)),  # narrow at stride 2, asymmetric pads
    ((1, 2, 13, 50), 1, (3, 3), (3, 3), (1, 1, 1, 1), (1, 1)),  # stride 3: lane-by-lane gather
    ((1, 3, 12, 33), 1, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated
    ((1, 3, 10, 20), 2, (3, 3), (1, 2), (1, 1, 1, 1), (1, 1)),  # two outputs per channel, mixed strides
    ((1, 4, 3, 30), 1, (1, 7), (1, 1), (0, 3, 0, 3), (1, 1)),  # PP-OCR's 1x7
    ((1, 2, 10, 18), 1, (3, 3), (1, 1), (-1, 1, 0, -2), (1, 1)),  # negative pads crop
    ((1, 6, 1, 1), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # a 1x1 image: every tap but one is padding
    ((1, 3, 10, 40), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # bands of 4 rows: 10 rows, the last band half
    ((1, 2, 7, 33), 1, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),  # bands, 7x7, odd vector count per row
    ((1, 2, 9, 20), 1, (4, 6), (1, 1), (1, 2, 2, 3), (1, 1)),  # bands with a kernel height of no unrolled case
    ((2, 3, 6, 25), 2, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # bands, two outputs per channel, batch 2
]


# channels as lanes (every case with one output per channel): channel counts not a multiple of
# the vector (the last block's lanes repeat a channel), several blocks, rows of 1..15 and of
# more than 16 pixels (the transposes' tails), output pixel runs of 8 and their tail
DW_BLOCKED_CASES = [
    ((1, 37, 7, 7), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((2, 20, 14, 14), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 9, 2, 45), 1, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((1, 16, 5, 11), 1, (7, 7), (1, 2), (3, 3, 3, 3), (1, 2)),
]


def _dw(x, w, b, kernel, strides, pads, dils, vb, ep=None, blocked=None, prep=None):
    n = 2
    out = [(x.shape[2 + i] + pads[i] + pads[n + i] - ((kernel[i] - 1) * dils[i] + 1)) // strides[i] + 1
           for i in range(n)]
    prep = prep or direct_conv.Depthwise(w, b, vb)
    return prep(x, kernel, strides, dils, pads[:n], pads[n:], out, ep, blocked)


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("blocked", [False, True], ids=["pixel_lanes", "channel_lanes"])
@pytest.mark.parametrize(("x_shape", "mult", "kernel", "strides", "pads", "dils"), DW_CASES + DW_BLOCKED_CASES)
def test_depthwise_conv_matches_the_definition(x_shape, mult, kernel, strides, pads, dils, vb, blocked):
    if blocked and mult != 1:
        pytest.skip("channels as lanes take one output per channel")
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(np.float32)
    c = x_shape[1]
    w = rng.standard_normal((c * mult, 1, *kernel)).astype(np.float32)
    b = rng.standard_normal(c * mult).astype(np.float32)
    crop = x[:, :, max(0, -pads[0]):x.shape[2] - max(0, -pads[2]), max(0, -pads[1]):x.shape[3] - max(0, -pads[3])]
    ref = naive_conv(crop, w, b, list(strides), [max(0, p) for p in pads], list(dils), c)
    y = _dw(x, w, b, kernel, strides, pads, dils, vb, blocked=blocked)
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize(("x_shape", "mult", "kernel", "strides", "pads", "dils"), DW_CASES + DW_BLOCKED_CASES)
def test_both_depthwise_paths_give_the_same_values(x_shape, mult, kernel, strides, pads, dils, vb):
    """Channels as lanes sum each output's taps in the order the pixel-lane paths do: equal bits,
    and its kept scratch serves a second input of the same shape with nothing left over."""
    if mult != 1:
        pytest.skip("channels as lanes take one output per channel")
    rng = np.random.default_rng(5)
    c = x_shape[1]
    w = rng.standard_normal((c, 1, *kernel)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    prep = direct_conv.Depthwise(w, b, vb)
    for _ in range(2):
        x = rng.standard_normal(x_shape).astype(np.float32)
        np.testing.assert_array_equal(_dw(x, w, b, kernel, strides, pads, dils, vb, blocked=True, prep=prep),
                                      _dw(x, w, b, kernel, strides, pads, dils, vb, blocked=False))


def test_small_planes_take_channels_as_lanes():
    """The measured rule (direct_conv.Depthwise.blocked_lanes): narrow rows or small planes."""
    rule = direct_conv.Depthwise.blocked_lanes
    assert rule(512, 7, 7) and rule(200, 2, 96) and rule(96, 20, 20)
    assert not rule(64, 56, 56) and not rule(16, 112, 112) and not rule(32, 32, 32)


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("blocked", [False, True], ids=["pixel_lanes", "channel_lanes"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("width", range(1, 41))
def test_every_depthwise_row_width(width, stride, vb, blocked):
    """Rows of any width land every output: whole vectors, an overlapping last tile, or one
    partial tile stored lane by lane; the scratch's slack is never read into a stored lane."""
    rng = np.random.default_rng(width)
    x = rng.standard_normal((1, 3, 5, width)).astype(np.float32)
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    ref = naive_conv(x, w, None, [stride, stride], [1, 1, 1, 1], [1, 1], 3)
    got = _dw(x, w, None, (3, 3), (stride, stride), (1, 1, 1, 1), (1, 1), vb, blocked=blocked)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


EPILOGUES = [direct_conv.RELU, direct_conv.HARD_SWISH] + [
    direct_conv.Epilogue(direct_conv.Epilogue.HSCHAIN, (3.0, 0.0, 6.0, k, mode))
    for mode, k in ((0, 6.0), (1, 1 / 6), (2, 6.0), (3, 1 / 6))] + [
    direct_conv.Epilogue(direct_conv.Epilogue.HSIGMOID, ab) for ab in ((0.2, 0.5), (1 / 6, 0.5))]


# (N, C, H, W), output channels: pixel counts not a multiple of a pixel group (the zero-padded
# tail), output channels not a multiple of a weight group, batches, the channel limit
POINTWISE_CASES = [((1, 16, 112, 112), 32), ((2, 3, 25, 29), 7), ((1, 5, 27, 27), 13), ((3, 8, 23, 23), 6),
                   ((1, 33, 33, 31), 70), ((1, 128, 23, 23), 9), ((1, 1, 32, 16), 1)]


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("ep", [None, *EPILOGUES], ids=repr)
@pytest.mark.parametrize(("x_shape", "m"), POINTWISE_CASES)
def test_pointwise_with_pixels_as_lanes_gives_the_channel_lanes_kernels_bits(x_shape, m, ep, vb, monkeypatch):
    """A large dense 1x1 convolution runs with pixels as the vector lanes (npu_pointwise_f32):
    every output's sum is the channels-as-lanes kernel's, term for term, so the bits are equal,
    NaN, infinity and -0 in the input and every epilogue included."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    w = rng.standard_normal((m, x_shape[1], 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    out = x_shape[2:]
    monkeypatch.setattr(direct_conv, "POINTWISE_MAX_IN", {16: 128, 8: 128})  # both widths, however fast
    prep = direct_conv.Prepared(w, b, 1, vb)
    got = prep(x, (1, 1), (1, 1), out, ep)
    assert prep._pointwise is not None  # the pixel-lanes kernel ran
    monkeypatch.setattr(direct_conv, "POINTWISE_MIN_PIXELS", 10 ** 9)
    channel_lanes = direct_conv.Prepared(w, b, 1, vb)
    want = channel_lanes(x, (1, 1), (1, 1), out, ep)
    assert channel_lanes._pointwise is None
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# (N, C, H, W), output channels, kernel, stride, pads, dilation: stride 1 and 2, the last tile of a
# row 1..3 vectors, dilation, batches; all but the first case's last tiles read past the input's end (the
# gathered tile)
ROW_TILE_CASES = [((1, 3, 64, 64), 20, 3, 2, 0, 1), ((2, 3, 41, 37), 7, 3, 1, 1, 1), ((1, 5, 47, 53), 13, 3, 2, 1, 1),
                  ((1, 3, 30, 70), 9, 5, 1, 2, 1), ((1, 1, 33, 100), 17, 7, 2, 3, 1), ((1, 3, 40, 60), 8, 3, 1, 2, 2)]


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("ep", [None, *EPILOGUES], ids=repr)
@pytest.mark.parametrize(("x_shape", "m", "k", "stride", "pad", "dil"), ROW_TILE_CASES)
def test_row_tiles_with_pixels_as_lanes_give_the_channel_lanes_kernels_bits(x_shape, m, k, stride, pad, dil, ep, vb,
                                                                           monkeypatch):
    """A dense convolution with a short sum per pixel runs with pixels as the lanes in row tiles
    (npu_conv_rows_f32): the channels-as-lanes kernel's bits, NaN, infinity and -0 included."""
    from nodes.conv import pad_spatial

    rng = np.random.default_rng(12)
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    w = rng.standard_normal((m, x_shape[1], k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    xp = pad_spatial(x, (pad, pad), (pad, pad))
    out = [(xp.shape[2 + i] - (k - 1) * dil - 1) // stride + 1 for i in range(2)]
    monkeypatch.setattr(direct_conv, "ROWS_MIN_OW", 1)
    monkeypatch.setattr(direct_conv, "ROWS_LANES", (16, 8))  # both widths, however fast
    tiles = direct_conv.Prepared(w, b, 1, vb)
    got = tiles(xp, (stride, stride), (dil, dil), out, ep)
    assert tiles._pointwise is not None  # the row-tile kernel ran
    monkeypatch.setattr(direct_conv, "ROWS_ENABLED", False)
    want = direct_conv.Prepared(w, b, 1, vb)(xp, (stride, stride), (dil, dil), out, ep)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("ep", [None, *EPILOGUES], ids=repr)
@pytest.mark.parametrize(("x_shape", "m"), [((1, 512, 13, 13), 1000), ((2, 40, 7, 9), 21), ((1, 3, 5, 5), 8)])
def test_a_pointwise_plane_run_as_one_row_keeps_the_bits(x_shape, m, ep, vb, monkeypatch):
    """A 1x1 convolution with channels as lanes sees its plane as one long row (FLAT_POINTWISE):
    runs of pixels cross the row ends, each output's sum is unchanged, so are its bits."""
    rng = np.random.default_rng(21)
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    w = rng.standard_normal((m, x_shape[1], 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    monkeypatch.setattr(direct_conv, "POINTWISE_MIN_PIXELS", 10 ** 9)
    got = direct_conv.Prepared(w, b, 1, vb)(x, (1, 1), (1, 1), x_shape[2:], ep)
    monkeypatch.setattr(direct_conv, "FLAT_POINTWISE", False)
    want = direct_conv.Prepared(w, b, 1, vb)(x, (1, 1), (1, 1), x_shape[2:], ep)
    assert got.shape == want.shape == (x_shape[0], m, *x_shape[2:])
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize(("x_shape", "m", "k", "chunk"), [((1, 64, 9, 11), 40, 3, 100), ((2, 37, 6, 5), 17, 3, 7),
                                                          ((1, 600, 4, 4), 24, 1, -1), ((1, 64, 5, 5), 8, 3, -1)])
def test_long_sums_cut_into_chunks_keep_the_bits(x_shape, m, k, chunk, vb):
    """The channels-as-lanes kernel cuts a long sum (C x KH x KW taps) into chunks whose weights
    stay in L1; a chunk's partial sums are stored as they are and the next continues them, so
    every output (the bias and a fused ReLU after the last chunk) has the whole sum's bits."""
    rng = np.random.default_rng(17)
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    x.reshape(-1)[:2] = [np.nan, -0.0]
    w = rng.standard_normal((m, x_shape[1], k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2,) * 2, (k // 2,) * 2))
    prep = direct_conv.Prepared(w, b, 1, vb)
    try:
        direct_conv.set_sum_chunk(chunk)
        got = prep(xp, (1, 1), (1, 1), x_shape[2:], direct_conv.RELU)
        direct_conv.set_sum_chunk(10 ** 9)
        want = direct_conv.Prepared(w, b, 1, vb)(xp, (1, 1), (1, 1), x_shape[2:], direct_conv.RELU)
    finally:
        direct_conv.set_sum_chunk(-1)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(("x_shape", "m", "group"), [((1, 24, 9, 11), 112, 4), ((2, 240, 5, 5), 240, 3),
                                                   ((1, 64, 6, 6), 16, 2)])
def test_grouped_pointwise_runs_the_kernel_where_it_is_faster_with_the_reference_values(x_shape, m, group):
    """A grouped 1x1 convolution (ShuffleNet's) runs the direct kernel, one call per group, at the
    SIMD widths of GROUPED_1X1_LANES (batched GEMMs elsewhere): the reference convolution's values."""
    rng = np.random.default_rng(23)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((m, x_shape[1] // group, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    cache: dict = {}
    got = conv_nd(x, w, b, [1, 1], [1, 1], [0, 0], [0, 0], group, cache=cache)
    np.testing.assert_allclose(got, naive_conv(x, w, b, [1, 1], [0, 0, 0, 0], [1, 1], group), rtol=1e-4, atol=1e-4)
    assert ("direct" in cache) == (direct_conv.lanes() in direct_conv.GROUPED_1X1_LANES)


@pytest.mark.parametrize(("x_shape", "m", "k", "stride"), [((1, 19, 13, 22), 70, 3, 1), ((2, 64, 9, 9), 24, 1, 1),
                                                           ((1, 3, 31, 29), 20, 3, 2), ((1, 600, 5, 6), 8, 1, 1)])
def test_the_avx2_tiles_give_the_same_bits(x_shape, m, k, stride):
    """The AVX2 kernel's 3 x 4 tile (the default) and its 2 x 6 tile sum each output in the same
    order: equal bits, channel tails (70 = 8 x 8 + 6) and pixel tails, the fused ReLU, a chunked
    600-channel sum and a NaN included."""
    if 8 not in _widths():
        pytest.skip("no AVX2 kernel here")
    rng = np.random.default_rng(29)
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    x.reshape(-1)[5] = np.nan
    w = rng.standard_normal((m, x_shape[1], k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2,) * 2, (k // 2,) * 2))
    out = [(xp.shape[2 + i] - k) // stride + 1 for i in range(2)]
    runs = []
    try:
        for tile in (1, 0):
            direct_conv.set_avx2_tile(tile)
            runs.append(direct_conv.Prepared(w, b, 1, 8)(xp, (stride, stride), (1, 1), out, direct_conv.RELU))
    finally:
        direct_conv.set_avx2_tile(1)
    np.testing.assert_array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))
    ref = np.maximum(naive_conv(x, w, b, [stride] * 2, [k // 2] * 4, [1, 1], 1), 0)
    np.testing.assert_allclose(np.nan_to_num(runs[0], nan=0), np.nan_to_num(ref, nan=0), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("pads", [0, 1])
def test_a_convs_kept_fast_call_takes_transposed_and_padded_inputs_with_the_first_runs_values(pads):
    """The second run of a Conv takes its kept fast call (the geometry's lookup made once): a
    Transpose's non-contiguous output and the padding give the first run's values, which are
    the definition's."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(31)
    w = rng.standard_normal((12, 5, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
             helper.make_node("Conv", ["t", "w"], ["y"], pads=[pads] * 4)]
    side = 9 + 2 * pads - 2
    g = helper.make_graph(nodes, "tc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, side, side])],
                          [numpy_helper.from_array(w, "w")])
    graph = engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    for _ in range(3):
        x = rng.standard_normal((1, 5, 9, 9)).astype(np.float32)
        got = engine.execute(graph, {"x": x})["y"]
        want = naive_conv(x.transpose(0, 1, 3, 2), w, None, [1, 1], [pads] * 4, [1, 1], 1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_pointwise_with_pixels_as_lanes_only_where_it_is_faster():
    """Small images, wide inputs, strides and groups keep the channels-as-lanes kernel (a padded
    1x1 convolution is one over the padded image: it takes the pixel lanes too)."""
    rng = np.random.default_rng(9)

    def takes(x_shape, m, strides=(1, 1), pads=(0, 0, 0, 0), group=1):
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal((m, x_shape[1] // group, 1, 1)).astype(np.float32)
        prep = direct_conv.Prepared(w, None, group)
        from nodes.conv import pad_spatial

        xp = pad_spatial(x, pads[:2], pads[2:])
        out = [(xp.shape[2 + i] - 1) // strides[i] + 1 for i in range(2)]
        prep(xp, strides, (1, 1), out)
        return prep._pointwise is not None

    assert takes((1, 16, 112, 112), 32)
    assert not takes((1, 256, 14, 14), 256)  # 196 pixels
    assert not takes((1, 256, 56, 56), 64)  # 256 input channels
    assert not takes((1, 16, 112, 112), 32, strides=(3, 3))
    assert takes((1, 16, 56, 56), 32, pads=(1, 1, 1, 1))
    assert not takes((1, 32, 56, 56), 32, group=2)


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("ep", EPILOGUES, ids=repr)
@pytest.mark.parametrize("kind", ["dense", "depthwise", "depthwise_bands", "depthwise_s2", "depthwise_channel_lanes"])
def test_an_epilogue_gives_the_unfused_activations_values(kind, ep, vb):
    """The activation applied as each output is stored equals, bit for bit, the activation's own
    pass over the stored output (what the unfused plan runs): NaN, -0 and every clip branch."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1, 4, 6, 21)) * 4).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    x[0, 2, 4, 5] = -0.0
    if kind == "dense":
        w = rng.standard_normal((20, 4, 3, 3)).astype(np.float32)
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))

        def run(e):
            return direct_conv.Prepared(w, None, 1, vb)(xp, (1, 1), (1, 1), (6, 21), e)
    else:
        k, st = {"depthwise": (3, 1), "depthwise_bands": (5, 1), "depthwise_s2": (3, 2),
                 "depthwise_channel_lanes": (3, 1)}[kind]
        w = rng.standard_normal((4, 1, k, k)).astype(np.float32)

        def run(e):
            return _dw(x, w, None, (k, k), (st, st), (k // 2,) * 4, (1, 1), vb, e, kind == "depthwise_channel_lanes")
    plain = run(None)
    want = ep.apply(plain.copy())
    got = run(ep)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert np.isnan(got).any() and (got == 0).any() and (got > 0).any()


def test_depthwise_convs_take_the_kernel_in_a_model_and_keep_onnxruntimes_values():
    """A MobileNet-style block (depthwise 3x3 at stride 2, HardSwish) runs the depthwise kernel
    with the HardSwish inside it, and matches onnxruntime."""
    import onnx
    from onnx import TensorProto, helper

    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(8)
    w = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
         helper.make_node("HardSwish", ["c"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 29, 43])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 15, 22])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = engine.load(model)
    x = (rng.standard_normal((1, 16, 29, 43)) * 3).astype(np.float32)
    fused = engine.execute(graph, {"x": x})["y"]
    plan = next(iter(engine._executors[graph]._plans.values()))
    step = plan.steps[0]
    assert [s.spec.op_type for s in plan.steps] == ["Conv"]
    assert isinstance(step.ctx.cache.get("direct"), direct_conv.Depthwise)
    assert step.ctx.cache.get("epilogue") is direct_conv.HARD_SWISH
    np.testing.assert_array_equal(fused, engine.execute(graph, {"x": x}, keep_all=True)["y"])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(fused, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


POOL_CASES = [
    # (N, C, H, W), kernel, strides, dils, pads (top, left), output (OH, OW)
    ((1, 3, 28, 28), (3, 3), (1, 1), (1, 1), (1, 1), (28, 28)),  # Inception's 3x3 s1 pools
    ((2, 4, 13, 13), (3, 3), (2, 2), (1, 1), (0, 0), (7, 7)),  # ceil mode: the last window hangs over
    ((1, 5, 17, 30), (3, 3), (2, 2), (1, 1), (1, 1), (9, 15)),  # stride 2 with pads, odd padded width
    ((1, 2, 11, 9), (2, 3), (1, 1), (2, 1), (1, 0), (10, 7)),  # dilated, rectangular
    ((1, 2, 12, 20), (3, 2), (3, 3), (1, 1), (1, 1), (4, 7)),  # stride 3: the per-row path
    ((1, 6, 5, 3), (5, 5), (1, 1), (1, 1), (2, 2), (5, 3)),  # windows wider than the image
    ((1, 3, 20, 41), (3, 3), (2, 1), (1, 1), (1, 1), (10, 41)),  # mixed strides
    ((1, 37, 13, 11), (3, 3), (2, 2), (1, 1), (1, 1), (7, 6)),  # 37 planes: blocks of lanes and a tail
    ((2, 9, 27, 27), (3, 3), (2, 2), (1, 1), (0, 0), (13, 13)),  # SqueezeNet's pools, batch 2
    ((1, 4, 111, 111), (3, 3), (2, 2), (1, 1), (0, 0), (55, 55)),  # SqueezeNet 1.1's first: whole-vector rows
    ((1, 3, 9, 31), (3, 3), (2, 2), (1, 1), (1, 1), (5, 16)),  # the last window past the right edge
]


@pytest.mark.parametrize("vb", _widths())
@pytest.mark.parametrize("blocked", [False, True], ids=["pixel_lanes", "plane_lanes"])
@pytest.mark.parametrize("is_max", [True, False], ids=["max", "avg"])
@pytest.mark.parametrize(("x_shape", "kernel", "strides", "dils", "pads", "out"), POOL_CASES)
def test_pooling_matches_the_numba_kernel_bit_for_bit(x_shape, kernel, strides, dils, pads, out, is_max, vb,
                                                      blocked):
    """The C pool (pixel lanes: whole planes at stride 1, even lanes of combined rows at stride 2,
    rows otherwise; or planes as lanes) gives the numba kernel's values exactly: the same sums in
    the same order, max propagating NaN."""
    from nodes._kernels_jit import pool2d_separable

    rng = np.random.default_rng(sum(x_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    x[0, 0, 2, 2] = np.nan
    div = None if is_max else (rng.integers(1, 9, out) + 0.5).astype(np.float32)
    got = direct_conv.pool2d(x, kernel, out, strides, dils, is_max, pads, div, vb, blocked)
    want = np.empty((*x_shape[:2], *out), np.float32)
    pool2d_separable(x, want, *kernel, *strides, *dils, *pads, is_max, np.empty((0, 0), np.float32) if div is None else div)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got).any() and np.isfinite(got).sum() > got.size // 2
