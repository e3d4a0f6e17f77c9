"""Resize / Upsample / DepthToSpace / SpaceToDepth: inferred sizes, coordinate modes, opset forms."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from tests.nodes._build import load_graph

_load = partial(load_graph, opset=19)


def _resize(x_shape, scales=None, sizes=None, dtype=TensorProto.FLOAT, opset=19, **attrs):
    inits = []
    names = ["x", ""]
    if scales is not None:
        inits.append(("scales", np.asarray(scales, np.float32)))
        names.append("scales")
    else:
        names.append("")
    if sizes is not None:
        inits.append(("sizes", np.asarray(sizes, np.int64)))
        names.append("sizes")
    return _load([helper.make_node("Resize", names, ["y"], **attrs)], [("x", dtype, x_shape)], ["y"], inits, opset=opset)


@pytest.mark.parametrize(("x_shape", "kw", "out"), [
    ((1, 3, 20, 30), {"scales": [1, 1, 2, 2]}, (1, 3, 40, 60)),
    ((1, 3, 10, 10), {"scales": [1, 1, 0.6, 0.75]}, (1, 3, 6, 7)),
    ((1, 3, 20, 30), {"sizes": [1, 3, 64, 48]}, (1, 3, 64, 48)),
    (("N", 3, 20, 30), {"sizes": [40, 90], "axes": [2, 3]}, ("N", 3, 40, 90)),
    (("N", 3, 20, 30), {"scales": [2, 0.5], "axes": [-1, -2]}, ("N", 3, 10, 60)),
    ((1, 3, 20, 30), {"sizes": [40, 90], "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}, (1, 3, 40, 60)),
    ((1, 3, 20, 30), {"sizes": [40, 90], "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"},
     (1, 3, 60, 90)),
])
def test_resize_infer_shapes(x_shape, kw, out):
    g = _resize(x_shape, **kw)
    assert g.outputs[0].type.shape == out


def test_resize_with_runtime_sizes_keeps_rank_and_untouched_axes():
    g = _load([helper.make_node("Resize", ["x", "", "", "s"], ["y"], axes=[2, 3])],
              [("x", TensorProto.FLOAT, ("N", 3, 8, 8)), ("s", TensorProto.INT64, (2,))], ["y"])
    assert g.outputs[0].type.shape == ("N", 3, None, None)
    y = engine.execute(g, {"x": np.zeros((2, 3, 8, 8), np.float32), "s": np.array([4, 12], np.int64)})["y"]
    assert y.shape == (2, 3, 4, 12)


def test_nearest_rounding_is_opset_dependent():
    x = np.arange(10, dtype=np.float32).reshape(1, 1, 1, 10)
    scales = [1, 1, 1, 0.3]
    # Resize-10: asymmetric coordinates, and shrinking rounds up (like onnxruntime)
    g10 = _load([helper.make_node("Resize", ["x", "s"], ["y"])], [("x", TensorProto.FLOAT, x.shape)], ["y"],
                [("s", np.array(scales, np.float32))], opset=10)
    np.testing.assert_array_equal(engine.execute(g10, {"x": x})["y"].ravel(), [0, 4, 7])
    # Resize-11+: half_pixel coordinates with round_prefer_floor by default
    y = engine.execute(_resize(x.shape, scales=scales), {"x": x})["y"].ravel()
    np.testing.assert_array_equal(y, [1, 4, 8])


@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 8, 4], [1, 1, 3, 1]])
def test_whole_scale_nearest_upsampling_repeats_each_pixel_as_onnxruntime_does(scales):
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((1, 2, 5, 7)).astype(np.float32)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    g = _resize(x.shape, scales=scales, **attrs)
    y = engine.execute(g, {"x": x})["y"]
    expect = x
    for axis, f in enumerate(scales):
        expect = np.repeat(expect, f, axis=axis)
    np.testing.assert_array_equal(y, expect)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], **attrs)
    model = helper.make_model(helper.make_graph(
        [node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, expect.shape)],
        [helper.make_tensor("s", TensorProto.FLOAT, [4], [float(v) for v in scales])]),
        opset_imports=[helper.make_opsetid("", 19)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(y, sess.run(None, {"x": x})[0])


@pytest.mark.parametrize(("onnx_type", "dtype"), [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16),
                                                  (TensorProto.UINT8, np.uint8), (TensorProto.INT8, np.int8),
                                                  (TensorProto.INT64, np.int64)])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 4, 4], [1, 1, 1, 6], [1, 2, 1, 3]])
def test_whole_scale_nearest_upsampling_keeps_every_bit_of_every_type(onnx_type, dtype, scales):
    """A feature pyramid's 2x and 4x upsampling of float, half, quantized and integer maps: each
    element repeated, bit for bit (a NaN's payload and -0 included), on every run."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((1, 3, 6, 10)) * 50).astype(dtype)
    if x.dtype.kind == "f":
        bits = x.view(f"u{x.itemsize}")
        bits[0, 0, 0, :3] = [bits.dtype.type(0x7C01 if x.itemsize == 2 else 0x7F800123),
                             bits.dtype.type(1 << (8 * x.itemsize - 1)), 0]  # a NaN's payload, -0, +0
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    g = _resize(x.shape, scales=scales, dtype=onnx_type, **attrs)
    expect = x
    for axis, f in enumerate(scales):
        expect = np.repeat(expect, f, axis=axis)
    for _ in range(2):
        y = engine.execute(g, {"x": x})["y"]
        assert y.dtype == x.dtype and y.shape == expect.shape
        np.testing.assert_array_equal(y.view(f"u{x.itemsize}"), expect.view(f"u{x.itemsize}"))


def test_upsample_attribute_and_input_forms_agree():
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    g7 = _load([helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])],
               [("x", TensorProto.FLOAT, x.shape)], ["y"], opset=7)
    g9 = _load([helper.make_node("Upsample", ["x", "s"], ["y"])], [("x", TensorProto.FLOAT, x.shape)], ["y"],
               [("s", np.array([1, 1, 2, 3], np.float32))], opset=9)
    assert g7.outputs[0].type.shape == g9.outputs[0].type.shape == (1, 1, 4, 9)
    ref = x.repeat(2, axis=2).repeat(3, axis=3)
    np.testing.assert_array_equal(engine.execute(g7, {"x": x})["y"], ref)
    np.testing.assert_array_equal(engine.execute(g9, {"x": x})["y"], ref)


def test_linear_align_corners_and_cubic_keep_the_corners():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    y = engine.execute(_resize(x.shape, sizes=[1, 1, 7, 7], mode="linear",
                               coordinate_transformation_mode="align_corners"), {"x": x})["y"][0, 0]
    np.testing.assert_allclose(y[0], np.linspace(0, 3, 7), rtol=1e-6)
    np.testing.assert_allclose(y[:, 0], np.linspace(0, 12, 7), rtol=1e-6)
    # a linear ramp is reproduced exactly by cubic interpolation away from the borders
    y = engine.execute(_resize(x.shape, scales=[1, 1, 2, 2], mode="cubic",
                               coordinate_transformation_mode="asymmetric"), {"x": x})["y"][0, 0]
    np.testing.assert_allclose(y[2:5, 2:5], np.add.outer(np.arange(1, 2.5, 0.5) * 4, np.arange(1, 2.5, 0.5)),
                               rtol=1e-5)


def test_tf_crop_and_resize_extrapolates_outside_the_input():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    g = _load([helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear",
                                coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-1.0)],
              [("x", TensorProto.FLOAT, x.shape)], ["y"],
              [("roi", np.array([0, 0, 0, 0, 1, 1, 1, 2], np.float32)), ("sizes", np.array([1, 1, 2, 3], np.int64))])
    y = engine.execute(g, {"x": x})["y"][0, 0]
    np.testing.assert_allclose(y, [[0, 3, -1], [12, 15, -1]])


def test_nearest_keeps_integer_dtype():
    x = np.array([[[[0, 255], [10, 20]]]], np.uint8)
    y = engine.execute(_resize(x.shape, scales=[1, 1, 2, 2], dtype=TensorProto.UINT8), {"x": x})["y"]
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y[0, 0], x[0, 0].repeat(2, axis=0).repeat(2, axis=1))


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_inverts_space_to_depth(mode):
    x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    g = _load([helper.make_node("SpaceToDepth", ["x"], ["d"], blocksize=2, mode=mode),
               helper.make_node("DepthToSpace", ["d"], ["y"], blocksize=2, mode=mode)],
              [("x", TensorProto.FLOAT, ("N", 3, 4, 6))], ["d", "y"], opset=28)
    assert g.outputs[0].type.shape == ("N", 12, 2, 3)
    assert g.outputs[1].type.shape == ("N", 3, 4, 6)
    res = engine.execute(g, {"x": x})
    np.testing.assert_array_equal(res["y"], x)
    if mode == "DCR":  # depth index = (row offset * b + column offset) * C + channel
        np.testing.assert_array_equal(res["d"][:, 3:6], x[:, :, 0::2, 1::2])
    else:  # depth index = channel * b * b + row offset * b + column offset
        np.testing.assert_array_equal(res["d"][:, 1], x[:, 0, 0::2, 1::2])
