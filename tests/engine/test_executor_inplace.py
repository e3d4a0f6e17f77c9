"""In-place execution: an elementwise chain reuses one buffer, and nothing a user holds changes.

The executor hands a dying input to an in-place kernel only when nothing else references its
buffer; these tests hold references in every way a user or the graph can (feeds, views made
by Reshape, a hook, keep_all) and check the numbers against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import engine
from engine.sim.executor import Executor


def _chain_model():
    """x -> Relu -> Mul(a, a) -> Sigmoid -> Add(., x) -> d; d is read by a Reshape (a view) and a Tanh."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Mul", ["a", "a"], ["b"]),
             helper.make_node("Sigmoid", ["b"], ["c"]), helper.make_node("Add", ["c", "x"], ["d"]),
             helper.make_node("Reshape", ["d", "s"], ["e"]), helper.make_node("Tanh", ["d"], ["f"]),
             helper.make_node("Reshape", ["f", "s"], ["f2"]), helper.make_node("HardSwish", ["f2"], ["g"]),
             helper.make_node("Add", ["e", "g"], ["y"])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
                          initializer=[helper.make_tensor("s", TensorProto.INT64, [2], [4, 6])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_in_place_chain_leaves_the_feed_and_viewed_values_intact_and_matches_onnxruntime():
    model = _chain_model()
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    keep = x.copy()
    graph = engine.load(model)
    ex = Executor(graph)
    for _ in range(2):  # the second run reuses the plan
        np.testing.assert_allclose(ex.run({"x": x})["y"], _reference(model, keep), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(x, keep)  # the caller's array is never a scratch buffer


def test_every_intermediate_asked_for_or_held_by_a_hook_keeps_its_own_value():
    model = _chain_model()
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    graph = engine.load(model)
    every = Executor(graph).run({"x": x}, keep_all=True)
    held = {}
    Executor(graph).run({"x": x}, hook=lambda node, outs: held.update(zip([v.name for v in node.outputs], outs)))
    a = np.maximum(x, 0)
    c = 1 / (1 + np.exp(-(a * a)))
    for values in (every, held):
        np.testing.assert_allclose(values["a"], a, rtol=1e-6)
        np.testing.assert_allclose(values["c"], c, rtol=1e-6)
        np.testing.assert_allclose(values["d"], c + x, rtol=1e-6)


def test_an_elementwise_chain_writes_into_one_buffer():
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Add", ["b", "k"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "ew", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
                          initializer=[helper.make_tensor("k", TensorProto.FLOAT, [1], [0.5])])
    graph = engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    where = {}  # the data address of every output (keeping no reference, which would stop reuse)
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    y = Executor(graph).run({"x": x}, hook=lambda node, outs: where.update(
        {node.op_type: outs[0].__array_interface__["data"][0]}))["y"]
    assert where["Sigmoid"] == where["Mul"] == where["Add"] == where["Relu"]
    np.testing.assert_allclose(y, np.maximum(1 / (1 + np.exp(-(x * 0.5))) + 0.5, 0), rtol=1e-6)


def test_keep_all_after_an_ordinary_run_returns_every_intermediate_unchanged():
    # an ordinary run leaves donor indices on the plan's steps; a keep_all run must not follow them
    # (it overwrote "a" with a*a, so quantization's kept FP32 values were wrong after a calibration)
    model = _chain_model()
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    graph = engine.load(model)
    ex = Executor(graph)
    ex.run({"x": x})
    every = ex.run({"x": x}, keep_all=True)
    a = np.maximum(x, 0)
    c = 1 / (1 + np.exp(-(a * a)))
    np.testing.assert_allclose(every["a"], a, rtol=1e-6)
    np.testing.assert_allclose(every["b"], a * a, rtol=1e-6)
    np.testing.assert_allclose(every["c"], c, rtol=1e-6)
