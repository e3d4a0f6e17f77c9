"""Reduce ops: axes attribute vs input by opset, keepdims, noop_with_empty_axes, empty reductions."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from tests.nodes._build import load_graph, shape_of

F, I64 = TensorProto.FLOAT, TensorProto.INT64


_load = partial(load_graph, opset=18)


def test_global_average_pool_as_reduce_mean_keeps_symbolic_batch():
    g = _load([helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)],
              [("x", F, ["N", 64, 7, 7])], [("y", F, None)], opset=13)
    assert shape_of(g, "y") == ("N", 64, 1, 1)
    x = np.random.rand(2, 64, 7, 7).astype(np.float32)
    y = engine.execute(g, {"x": x})["y"]
    np.testing.assert_allclose(y, x.mean(axis=(2, 3), keepdims=True), rtol=1e-5)
    assert y.dtype == np.float32


def test_reduce_sum_axes_attribute_at_11_and_input_at_13():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    old = _load([helper.make_node("ReduceSum", ["x"], ["y"], axes=[-1], keepdims=0)],
                [("x", F, ["B", 3, 4])], [("y", F, None)], opset=11)
    new = _load([helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)],
                [("x", F, ["B", 3, 4])], [("y", F, None)], [("a", np.array([-1], np.int64))], opset=13)
    for g in (old, new):
        assert shape_of(g, "y") == ("B", 3)
        np.testing.assert_array_equal(engine.execute(g, {"x": x})["y"], x.sum(-1))


def test_reduce_max_axes_input_form_from_opset_18():
    g = _load([helper.make_node("ReduceMax", ["x", "a"], ["y"], keepdims=1)], [("x", F, [2, 5])],
              [("y", F, None)], [("a", np.array([1], np.int64))], opset=18)
    assert shape_of(g, "y") == (2, 1)


def test_unknown_axes_input_gives_rank_only():
    g = _load([helper.make_node("ReduceSum", ["x", "a"], ["k"], keepdims=1),
               helper.make_node("ReduceSum", ["x", "a"], ["d"], keepdims=0)],
              [("x", F, [2, 3, 4]), ("a", I64, [2])], [("k", F, None), ("d", F, None)], opset=13)
    assert shape_of(g, "k") == (None, None, None)
    assert shape_of(g, "d") == (None,)


def test_noop_with_empty_axes_keeps_elementwise_part():
    nodes = [helper.make_node("ReduceSumSquare", ["x"], ["sq"], noop_with_empty_axes=1),
             helper.make_node("ReduceSum", ["x"], ["all"], keepdims=0)]
    g = _load(nodes, [("x", F, [2, 2])], [("sq", F, None), ("all", F, None)], opset=18)
    assert shape_of(g, "sq") == (2, 2)
    assert shape_of(g, "all") == ()
    x = np.array([[1, -2], [3, 4]], np.float32)
    out = engine.execute(g, {"x": x})
    np.testing.assert_array_equal(out["sq"], x * x)
    assert out["all"] == 6


@pytest.mark.parametrize(("op", "dtype", "expected"), [
    ("ReduceMax", np.float32, -np.inf), ("ReduceMin", np.float32, np.inf),
    ("ReduceMin", np.int32, np.iinfo(np.int32).max), ("ReduceSum", np.float32, 0.0),
    ("ReduceProd", np.float32, 1.0), ("ReduceLogSumExp", np.float32, -np.inf),
])
def test_reduction_over_an_empty_axis_gives_the_identity(op, dtype, expected):
    et = TensorProto.INT32 if dtype == np.int32 else F
    g = _load([helper.make_node(op, ["x", "a"], ["y"], keepdims=0)], [("x", et, [2, 0])], [("y", et, None)],
              [("a", np.array([1], np.int64))])
    y = engine.execute(g, {"x": np.zeros((2, 0), dtype)})["y"]
    assert y.dtype == dtype
    assert y.shape == (2,)
    np.testing.assert_array_equal(y, [expected, expected])


def test_log_sum_exp_is_stable_and_float16_stays_float16():
    g = _load([helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[0], keepdims=0)],
              [("x", F, [3])], [("y", F, None)], opset=13)
    y = engine.execute(g, {"x": np.array([1000.0, 1000.0, 1000.0], np.float32)})["y"]
    np.testing.assert_allclose(y, 1000.0 + np.log(3.0), rtol=1e-6)
    h = _load([helper.make_node("ReduceL2", ["x"], ["y"], keepdims=0)],
              [("x", TensorProto.FLOAT16, [2])], [("y", TensorProto.FLOAT16, None)], opset=13)
    assert h.lookup("y").type.dtype == np.float16
    out = engine.execute(h, {"x": np.array([3, 4], np.float16)})["y"]
    assert out.dtype == np.float16
    assert out == 5
