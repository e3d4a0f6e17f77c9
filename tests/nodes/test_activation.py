"""Activation ops: values, dtype preservation, and the opset-dependent Softmax/Hardmax axis semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from nodes.spec import OpError
from tests.nodes._build import load_graph


def _model(op, shape, opset=17, dtype=TensorProto.FLOAT, **attrs):
    return load_graph([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", dtype, shape)], ["y"], opset=opset)


def _run(op, x, opset=17, **attrs):
    g = _model(op, x.shape, opset, helper.np_dtype_to_tensor_dtype(x.dtype), **attrs)
    return engine.execute(g, {"x": x})["y"]


def test_activation_shapes_keep_symbolic_dims():
    for op in ("Relu", "Gelu", "Softmax", "HardSwish"):
        g = _model(op, ("batch", "seq", 768), opset=20)
        assert g.outputs[0].type.shape == ("batch", "seq", 768), op
        assert g.outputs[0].type.dtype == np.float32, op


def test_softmax_axis_semantics_change_at_opset_13():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10
    # Opset 11: default axis 1 and the input is flattened to [2, 12]: one softmax over 12 values.
    y11 = _run("Softmax", x, opset=11)
    np.testing.assert_allclose(y11.reshape(2, -1).sum(axis=1), [1, 1], rtol=1e-6)
    e = np.exp(x.reshape(2, 12) - x.reshape(2, 12).max(axis=1, keepdims=True))
    np.testing.assert_allclose(y11, (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4), rtol=1e-6)
    # Opset 13: default axis -1, per row of 4.
    y13 = _run("Softmax", x, opset=13)
    np.testing.assert_allclose(y13.sum(axis=-1), np.ones((2, 3)), rtol=1e-6)
    # LogSoftmax is the log of Softmax in both versions.
    np.testing.assert_allclose(_run("LogSoftmax", x, opset=11), np.log(y11), rtol=1e-5, atol=1e-6)


def test_hardmax_opset_11_coerces_to_2d():
    x = np.array([[[1, 5], [3, 2]], [[0, 0], [9, 1]]], np.float32)
    y11 = _run("Hardmax", x, opset=11, axis=1)
    np.testing.assert_array_equal(y11, [[[0, 1], [0, 0]], [[0, 0], [1, 0]]])
    y13 = _run("Hardmax", x, opset=13, axis=1)
    np.testing.assert_array_equal(y13, [[[0, 1], [1, 0]], [[0, 0], [1, 1]]])


def test_softmax_is_stable_and_keeps_float16():
    x = np.array([[1000.0, 1000.0], [-1000.0, 0.0]], np.float16)
    y = _run("Softmax", x, opset=13)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), [[0.5, 0.5], [0, 1]])


def test_softmax_axis_out_of_range_is_a_diagnostic():
    g = _model("Softmax", (2, 3), opset=13, axis=3)
    assert any("out of range" in d.message for d in g.diagnostics)


def test_pointwise_values():
    x = np.array([-3.0, -0.5, 0.0, 0.5, 3.0], np.float32)
    np.testing.assert_allclose(_run("LeakyRelu", x, alpha=0.1), [-0.3, -0.05, 0, 0.5, 3], rtol=1e-6)
    np.testing.assert_allclose(_run("HardSigmoid", x), np.clip(0.2 * x + 0.5, 0, 1), rtol=1e-6)
    np.testing.assert_allclose(_run("HardSwish", x), x * np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6)
    np.testing.assert_allclose(_run("Elu", x, alpha=2.0), np.where(x < 0, 2 * np.expm1(x), x), rtol=1e-6)
    np.testing.assert_allclose(_run("ThresholdedRelu", x, alpha=0.5), [0, 0, 0, 0, 3])
    np.testing.assert_allclose(_run("Shrink", x, lambd=1.0, bias=0.5), [-2.5, 0, 0, 0, 2.5])
    np.testing.assert_allclose(_run("Softplus", np.array([-100, 0, 100], np.float32)), [0, math.log(2), 100],
                               rtol=1e-6, atol=1e-30)
    gelu = [v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.tolist()]
    np.testing.assert_allclose(_run("Gelu", x, opset=20), gelu, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(_run("Gelu", x, opset=20, approximate="tanh"), gelu, rtol=2e-3, atol=1e-3)
    np.testing.assert_allclose(_run("Sigmoid", np.array([-200, 0, 200], np.float32)), [0, 0.5, 1])


def test_relu_on_integers_and_prelu_channel_slope():
    np.testing.assert_array_equal(_run("Relu", np.array([-3, 4], np.int8), opset=14), [0, 4])
    x = -np.ones((1, 3, 2, 2), np.float32)
    gr = load_graph([helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", TensorProto.FLOAT, ("N", 3, 2, 2))], ["y"],
                    [("s", np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1, 1))], opset=16)
    assert gr.outputs[0].type.shape == ("N", 3, 2, 2)
    y = engine.execute(gr, {"x": x})["y"]
    np.testing.assert_allclose(y[0, :, 0, 0], [-0.1, -0.2, -0.3], rtol=1e-6)


def test_bad_gelu_mode_raises():
    with pytest.raises((OpError, engine.ExecutionError), match="approximate"):
        _run("Gelu", np.zeros(2, np.float32), opset=20, approximate="fast")


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_keeps_ndarray_reduction_bits(opset):
    # Softmax reduces with np.maximum/np.add.reduce directly (what ndarray.max/sum call): same bits
    # as the method spelling, on a classifier head (1, 2) and on wider rows in both axis conventions
    rng = np.random.default_rng(3)
    for shape in [(1, 2), (4, 1000), (2, 3, 40)]:
        for dtype in (np.float32, np.float64):
            x = (rng.standard_normal(shape) * 8).astype(dtype)
            y = _run("Softmax", x, opset=opset)
            x2 = x.reshape(shape[0], -1) if opset < 13 else x
            e = x2 - x2.max(axis=-1, keepdims=True)
            np.exp(e, out=e)
            e /= e.sum(axis=-1, keepdims=True)
            assert y.dtype == dtype
            assert np.array_equal(y.view(np.uint8), e.reshape(shape).view(np.uint8)), (shape, dtype)
