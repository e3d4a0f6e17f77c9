"""The executor's fused plan: BatchNormalization folded into the Conv, activations run on the
Conv's own buffer, the user's graph untouched and the numbers onnxruntime's.

A run without a hook or keep_all uses it; a hook or keep_all gets one step per node.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.errors import ExecutionError
from engine.sim.executor import Executor
from tests.zoo import MATRIX, locate


def _conv_bn_model(tail: str = "relu", extra_output: bool = False, dims=(1, 3, 9, 9)):
    rng = np.random.default_rng(1)
    c = 6
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")]
    for name, val in (("g", rng.uniform(0.5, 2, c)), ("be", rng.standard_normal(c)),
                      ("mu", rng.standard_normal(c)), ("var", rng.uniform(0.2, 3, c))):
        inits.append(numpy_helper.from_array(val.astype(np.float32), name))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["n"], name="bn")]
    if tail == "relu":
        nodes.append(helper.make_node("Relu", ["n"], ["y"], name="relu"))
    elif tail == "silu":
        nodes += [helper.make_node("Sigmoid", ["n"], ["s"], name="sig"), helper.make_node("Mul", ["n", "s"], ["y"], name="mul")]
    elif tail == "add":
        inits.append(numpy_helper.from_array(np.ones((1, c, 9, 9), np.float32), "k"))
        nodes.append(helper.make_node("Add", ["n", "k"], ["y"], name="add"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, *dims[2:]])]
    if extra_output:
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, c, *dims[2:]]))
    g = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _fused_steps(ex: Executor) -> list[str]:
    plan = ex._plans[(id(ex.graph), True, frozenset(), frozenset())]
    return [s.spec.op_type for s in plan.steps]


@pytest.mark.parametrize("tail", ["relu", "silu"])
def test_conv_batchnorm_and_activation_run_as_one_step_with_onnxruntimes_numbers(tail):
    model = _conv_bn_model(tail)
    graph = engine.load(model)
    nodes_before = [n.op_type for n in graph.toposort()]
    inits_before = set(graph.initializers)
    x = np.random.default_rng(2).standard_normal((1, 3, 9, 9)).astype(np.float32)
    ex = Executor(graph)
    for _ in range(2):  # the second run reuses the fused plan
        got = ex.run({"x": x})["y"]
        np.testing.assert_allclose(got, _ort(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    assert _fused_steps(ex) == ["Conv"]
    assert [n.op_type for n in graph.toposort()] == nodes_before  # the user's graph is not rewritten
    assert set(graph.initializers) == inits_before


def test_a_hook_still_sees_every_node_of_a_fused_chain():
    model = _conv_bn_model("relu")
    graph = engine.load(model)
    x = np.random.default_rng(3).standard_normal((1, 3, 9, 9)).astype(np.float32)
    ex = Executor(graph)
    ex.run({"x": x})
    seen = {}
    ex.run({"x": x}, hook=lambda node, outs: seen.update({node.name: outs[0].copy()}))
    assert set(seen) == {"conv", "bn", "relu"}
    ref = _ort(model, {"x": x})["y"]
    np.testing.assert_allclose(seen["relu"], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(seen["relu"], np.maximum(seen["bn"], 0))


def test_a_conv_output_that_is_also_a_graph_output_keeps_its_value():
    model = _conv_bn_model("relu", extra_output=True)
    graph = engine.load(model)
    x = np.random.default_rng(4).standard_normal((1, 3, 9, 9)).astype(np.float32)
    ex = Executor(graph)
    got = ex.run({"x": x})
    ref = _ort(model, {"x": x})
    np.testing.assert_allclose(got["c"], ref["c"], rtol=1e-5, atol=1e-5)  # not normalized in place
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-5, atol=1e-5)
    assert "BatchNormalization" in _fused_steps(ex)


def test_values_kept_by_name_come_back_unfused_while_the_rest_stays_fused():
    """What the per-layer analysis asks for: a layer's own output (here the Conv's, before the
    BatchNormalization the fused plan would fold into it) without keep_all's unfused run."""
    model = _conv_bn_model("relu")
    graph = engine.load(model)
    x = np.random.default_rng(5).standard_normal((1, 3, 9, 9)).astype(np.float32)
    ex = Executor(graph)
    every = ex.run({"x": x}, keep_all=True)
    for keep, steps in (({"c"}, ["Conv", "BatchNormalization"]),  # the Relu runs on the BN's buffer
                        ({"c", "n"}, ["Conv", "BatchNormalization", "Relu"])):  # not on a kept one
        got = ex.run({"x": x}, keep=keep)
        assert set(got) == keep | {"y"}
        for name in got:
            np.testing.assert_array_equal(got[name], every[name])
        assert [s.spec.op_type for s in ex._plans[(id(graph), True, frozenset(keep), frozenset())].steps] == steps
    np.testing.assert_allclose(ex.run({"x": x})["y"], every["y"], rtol=1e-5, atol=1e-6)
    assert _fused_steps(ex) == ["Conv"]  # the plain run's plan folds and fuses all three


def test_a_fused_step_that_fails_names_the_node_at_fault():
    model = _conv_bn_model("add", dims=(1, 3, "H", "W"))  # Add by a 9x9 constant: only 9x9 images fit
    graph = engine.load(model)
    ex = Executor(graph)
    ok = np.zeros((1, 3, 9, 9), np.float32)
    np.testing.assert_allclose(ex.run({"x": ok})["y"], _ort(model, {"x": ok})["y"], rtol=1e-5, atol=1e-5)
    assert _fused_steps(ex) == ["Conv"]
    with pytest.raises(ExecutionError, match="'add'"):
        ex.run({"x": np.zeros((1, 3, 7, 7), np.float32)})


def test_a_spelled_out_gelu_runs_as_one_step_with_onnxruntimes_numbers():
    sqrt2 = np.array(np.sqrt(2.0), np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Div", ["r", "sqrt2"], ["d"], name="div"), helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"), helper.make_node("Mul", ["r", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="half_mul")]
    inits = [numpy_helper.from_array(sqrt2, "sqrt2"), numpy_helper.from_array(np.array(1, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 50])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 50])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(5).standard_normal((4, 50)).astype(np.float32) * 3
    ex = Executor(engine.load(model))
    np.testing.assert_allclose(ex.run({"x": x})["y"], _ort(model, {"x": x})["y"], rtol=1e-6, atol=1e-7)
    assert _fused_steps(ex) == ["Relu", "Gelu"]


def test_identities_are_read_through_and_a_graph_output_identity_stays():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i1"]),
             helper.make_node("Identity", ["i1"], ["i2"]), helper.make_node("Sigmoid", ["i2"], ["s"]),
             helper.make_node("Add", ["s", "i1"], ["y"]), helper.make_node("Identity", ["y"], ["z"])]
    g = helper.make_graph(nodes, "ids", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("i2", TensorProto.FLOAT, [3, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    ex = Executor(engine.load(model))
    for _ in range(2):
        got = ex.run({"x": x})
        ref = _ort(model, {"x": x})
        np.testing.assert_allclose(got["z"], ref["z"], rtol=1e-6)
        np.testing.assert_array_equal(got["i2"], np.maximum(x, 0))  # kept though Sigmoid read it
    assert _fused_steps(ex) == ["Relu", "Identity", "Sigmoid", "Add", "Identity"]


def test_a_gelu_whose_input_comes_through_an_identity_runs_fused():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i"]),
             helper.make_node("Div", ["i", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["i", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    inits = [numpy_helper.from_array(np.array(np.sqrt(2.0), np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1, np.float32), "one"), numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    g = helper.make_graph(nodes, "gelu_id", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 30])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 30])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(6).standard_normal((2, 30)).astype(np.float32)
    ex = Executor(engine.load(model))
    for _ in range(2):
        np.testing.assert_allclose(ex.run({"x": x})["y"], _ort(model, {"x": x})["y"], rtol=1e-6, atol=1e-7)
    assert _fused_steps(ex) == ["Relu", "Gelu"]
    assert ex.fused_fallbacks == 0


@pytest.mark.parametrize("entry", MATRIX, ids=lambda e: e.name)
def test_every_zoo_model_runs_its_fused_plan_without_falling_back(entry):
    path, why = locate(entry)
    if path is None:
        pytest.skip(why)
    graph = engine.load(path, shapes=entry.shapes)
    feeds = entry.feed()
    ex = Executor(graph)
    fused = ex.run(feeds)
    unfused = ex.run(feeds, hook=lambda node, outs: None)
    assert ex.fused_fallbacks == 0  # a fusion that fails at run time would only show as a slower run
    for name, ref in unfused.items():
        ref = np.asarray(ref)
        scale = max(float(np.abs(ref).max()), 1e-12) if ref.size and ref.dtype.kind == "f" else 1.0
        assert np.abs(np.asarray(fused[name], np.float64) - ref).max() / scale <= 1e-4 if ref.size else True, name


def _conv_hard_swish_model(order: str, third_reader: bool = False):
    """Conv -> y * clip(y + 3, 0, 6) / 6 spelled out in one of the orders exporters write."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3))).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(3, np.float32), "three"),
             numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(6, np.float32), "six"),
             numpy_helper.from_array(np.array(1 / 6, np.float32), "sixth")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["y", "three"], ["a"]),
             helper.make_node("Clip", ["a", "zero", "six"], ["t"])]
    if order == "mul_div":  # PaddleOCR: (y * t) / 6
        nodes += [helper.make_node("Mul", ["y", "t"], ["m"]), helper.make_node("Div", ["m", "six"], ["out"])]
    elif order == "mul_mul":
        nodes += [helper.make_node("Mul", ["t", "y"], ["m"]), helper.make_node("Mul", ["sixth", "m"], ["out"])]
    elif order == "div_mul":  # y * (t / 6)
        nodes += [helper.make_node("Div", ["t", "six"], ["u"]), helper.make_node("Mul", ["y", "u"], ["out"])]
    else:
        nodes += [helper.make_node("Mul", ["t", "sixth"], ["u"]), helper.make_node("Mul", ["u", "y"], ["out"])]
    outs = ["out"]
    if third_reader:
        nodes.append(helper.make_node("Neg", ["y"], ["ny"]))
        outs.append("ny")
    g = helper.make_graph(nodes, "hs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8, 8]) for n in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("order", ["mul_div", "mul_mul", "div_mul", "mul_mul_after"])
def test_a_spelled_out_hard_swish_runs_on_the_conv_buffer_with_the_op_by_op_numbers(order):
    model = _conv_hard_swish_model(order)
    graph = engine.load(model)
    x = (np.random.default_rng(5).standard_normal((1, 3, 8, 8)) * 3).astype(np.float32)
    ex = Executor(graph)
    got = ex.run({"x": x})["out"]
    assert _fused_steps(ex) == ["Conv"]  # four elementwise steps became one pass on the Conv's output
    op_by_op = ex.run({"x": x}, keep_all=True)["out"]  # the unfused plan: one kernel per node
    np.testing.assert_array_equal(got, op_by_op)
    assert (got == 0).any() and (got < 0).any() and (got > 3).any()  # every branch of the clip was taken
    np.testing.assert_allclose(got, _ort(model, {"x": x})["out"], rtol=1e-6, atol=1e-6)


def test_a_hard_swish_input_read_elsewhere_is_not_fused_away():
    model = _conv_hard_swish_model("mul_div", third_reader=True)
    graph = engine.load(model)
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)
    ex = Executor(graph)
    got = ex.run({"x": x})
    assert "Clip" in _fused_steps(ex)
    want = _ort(model, {"x": x})
    for name in ("out", "ny"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def _channel_chain_model():
    """Concat -> BatchNormalization -> Mul -> Add -> Relu (DenseNet's pre-activation, the Concat
    also read by the next Concat) and Conv -> Mul -> Sub -> Relu: per-channel chains."""
    rng = np.random.default_rng(7)
    c = 6
    inits = [numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w")]
    for name, val in (("g", rng.uniform(0.5, 2, c)), ("be", rng.standard_normal(c)),
                      ("mu", rng.standard_normal(c)), ("var", rng.uniform(0.2, 3, c)),
                      ("s", rng.standard_normal((c, 1, 1))), ("t", rng.standard_normal((1, c, 1, 1))),
                      ("u", np.array(0.25))):
        inits.append(numpy_helper.from_array(val.astype(np.float32), name))
    nodes = [helper.make_node("Concat", ["x", "x2"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "g", "be", "mu", "var"], ["n"]),
             helper.make_node("Mul", ["n", "s"], ["m"]), helper.make_node("Add", ["t", "m"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["cv"]), helper.make_node("Mul", ["cv", "u"], ["cm"]),
             helper.make_node("Sub", ["s", "cm"], ["cs"]), helper.make_node("Relu", ["cs"], ["cr"]),
             helper.make_node("Concat", ["cat", "cr"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 7]),
                                           helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 3, 5, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * c, 5, 7])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_per_channel_chains_run_as_one_pass_with_the_op_by_op_numbers():
    from engine.sim.plan_fusion import ChannelChain, NormChain

    model = _channel_chain_model()
    graph = engine.load(model)
    rng = np.random.default_rng(8)
    feeds = {"x": rng.standard_normal((1, 3, 5, 7)).astype(np.float32),
             "x2": rng.standard_normal((1, 3, 5, 7)).astype(np.float32)}
    ex = Executor(graph)
    runs = [ex.run(feeds)["y"] for _ in range(3)]  # the first run builds the chains' parameters
    plan = ex._plans[(id(graph), True, frozenset(), frozenset())]
    assert _fused_steps(ex) == ["Concat", "BatchNormalization", "Conv", "Concat"]
    assert sum(isinstance(p.fn, ChannelChain) for s in plan.steps for p in s.post) == 1  # the Conv's
    norm = [s.fn for s in plan.steps if isinstance(s.fn, NormChain)]  # the BatchNormalization's, with its chain
    assert len(norm) == 1 and all(norm[0].progs.values()) and not plan.steps[1].post
    op_by_op = ex.run(feeds, keep_all=True)["y"]
    for got in runs:
        np.testing.assert_array_equal(got, op_by_op)
    assert (op_by_op == 0).any() and (op_by_op > 0).any()
    np.testing.assert_allclose(runs[-1], _ort(model, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_a_batchnorm_chain_on_a_dying_input_follows_statistics_a_feed_overrides():
    """Abs -> BatchNormalization -> Relu with the statistics initializers that are also graph
    inputs (IR 3): one pass in the Abs output's buffer, and a feed of other statistics gets
    their numbers (the pass's parameters belong to the statistics it was built from)."""
    from engine.sim.plan_fusion import NormChain

    rng = np.random.default_rng(9)
    c = 4
    stats = {"g": rng.uniform(0.5, 2, c), "be": rng.standard_normal(c), "mu": rng.standard_normal(c),
             "var": rng.uniform(0.2, 3, c)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in stats.items()]
    nodes = [helper.make_node("Abs", ["x"], ["a"]),
             helper.make_node("BatchNormalization", ["a", "g", "be", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 3, 5])]
    inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, [c]) for k in stats]
    g = helper.make_graph(nodes, "bnr", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 3, 5])],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    x = rng.standard_normal((1, c, 3, 5)).astype(np.float32)
    ex = Executor(engine.load(model))
    runs = [ex.run({"x": x})["y"] for _ in range(3)]
    plan = ex._plans[(id(ex.graph), True, frozenset(), frozenset())]
    assert _fused_steps(ex) == ["Abs", "BatchNormalization"]
    assert isinstance(plan.steps[1].fn, NormChain) and all(plan.steps[1].fn.progs.values())
    op_by_op = ex.run({"x": x}, keep_all=True)["y"]
    for got in runs:
        np.testing.assert_array_equal(got, op_by_op)
    assert (op_by_op == 0).any() and (op_by_op > 0).any()
    other = {"x": x, "mu": (stats["mu"] + 1).astype(np.float32)}
    got = ex.run(other)["y"]
    np.testing.assert_array_equal(got, ex.run(other, keep_all=True)["y"])
    assert not np.array_equal(got, op_by_op)
    assert ex.fused_fallbacks == 0


def test_an_ir3_models_batchnorm_folds_into_its_conv_unless_a_feed_overrides_its_statistics():
    """An IR 3 model lists every initializer as a graph input (the onnx wheel's light models):
    a run that does not feed them treats them as constants, as onnxruntime does below IR 4, so
    Conv+BatchNormalization+Relu is one step; a run that feeds other statistics gets their numbers."""
    model = _conv_bn_model("relu")
    g = model.graph
    g.input.extend([helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in g.initializer])
    model.ir_version = 3
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 9))
    graph = engine.load(model)
    assert sorted(graph.overridable) == ["b", "be", "g", "mu", "var", "w"]
    x = np.random.default_rng(5).standard_normal((1, 3, 9, 9)).astype(np.float32)
    ex = Executor(graph)
    for _ in range(2):
        np.testing.assert_allclose(ex.run({"x": x})["y"], _ort(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    assert _fused_steps(ex) == ["Conv"]
    var_init = next(t for t in g.initializer if t.name == "var")
    var4 = (numpy_helper.to_array(var_init) * 4).astype(np.float32)
    got = ex.run({"x": x, "var": var4})["y"]
    var_init.CopyFrom(numpy_helper.from_array(var4, "var"))  # onnxruntime refuses such a feed below IR 4
    np.testing.assert_allclose(got, _ort(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, ex.run({"x": x})["y"], rtol=1e-3, atol=1e-3)
    assert ex.fused_fallbacks == 0


@pytest.mark.parametrize("op", ["Sum", "Add"])
def test_a_residual_sum_and_its_relu_run_as_one_pass_with_the_op_by_op_numbers(op):
    """Abs -> Neg -> op(., skip) -> Relu (a residual connection; the Neg's output dies there, so an
    Add writes into it) and op(., broadcast input) -> Relu (no AddRelu pass: the two kernels)."""
    from engine.sim.plan_fusion import AddRelu

    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["n"]),
             helper.make_node(op, ["n", "skip"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node(op, ["r", "ch"], ["s2"]), helper.make_node("Relu", ["s2"], ["y"])]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5]),
                                         helper.make_tensor_value_info("skip", TensorProto.FLOAT, [1, 3, 4, 5]),
                                         helper.make_tensor_value_info("ch", TensorProto.FLOAT, [1, 3, 1, 1])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 4, 5]) for n in ("y", "r")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((1, 3, 4, 5)).astype(np.float32),
             "skip": rng.standard_normal((1, 3, 4, 5)).astype(np.float32),
             "ch": rng.standard_normal((1, 3, 1, 1)).astype(np.float32)}
    feeds["skip"][0, 0, 0, :3] = (np.nan, 0.0, -0.0)
    feeds["x"][0, 0, 0, 1:3] = 0.0  # -0 + 0 and -0 + -0: the ReLU of a signed zero
    skip = feeds["skip"].copy()
    ex = Executor(engine.load(model))
    got = ex.run(feeds)
    plan = ex._plans[(id(ex.graph), True, frozenset(), frozenset())]
    assert _fused_steps(ex) == ["Abs", "Neg", op, op]
    assert all(isinstance(s.fn, AddRelu) for s in plan.steps[2:])
    want = ex.run(feeds, keep_all=True)
    for name in ("y", "r"):
        np.testing.assert_array_equal(got[name], want[name])
        np.testing.assert_array_equal(np.signbit(got[name]), np.signbit(want[name]))
    assert np.isnan(got["r"]).any() and (got["r"][0, 0, 0, 1:3] == 0).all()
    np.testing.assert_array_equal(feeds["skip"], skip)  # a feed is never written
    assert ex.fused_fallbacks == 0


@pytest.mark.parametrize("bias_shape", [(1, 3, 1, 1), (1, 3, 5, 6)])
def test_a_dynamically_quantized_convs_add_cast_mul_run_as_one_pass_with_the_op_by_op_numbers(bias_shape):
    """ConvInteger -> Add(int32 bias fed at run time) -> Cast(float) -> Mul(scale fed at run time),
    as onnxruntime's dynamic quantization writes it: one IntBiasScale step where the Mul stood,
    the op by op numbers; a bias of the full shape (no per-channel pass) runs the three kernels."""
    from engine.sim.plan_fusion import IntBiasScale

    rng = np.random.default_rng(12)
    w = rng.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(131, np.uint8), "xz"),
             numpy_helper.from_array(np.array(-3, np.int8), "wz")]
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["acc", "bias"], ["s"]), helper.make_node("Cast", ["s"], ["f"], to=1),
             helper.make_node("Mul", ["sc", "f"], ["y"])]
    g = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 2, 5, 6]),
                                        helper.make_tensor_value_info("bias", TensorProto.INT32, list(bias_shape)),
                                        helper.make_tensor_value_info("sc", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 6])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": rng.integers(0, 256, (1, 2, 5, 6)).astype(np.uint8),
             "bias": rng.integers(-2**20, 2**20, bias_shape).astype(np.int32),
             "sc": np.array([3.1e-5], np.float32)}
    ex = Executor(engine.load(model))
    got = ex.run(feeds)["y"]
    plan = ex._plans[(id(ex.graph), True, frozenset(), frozenset())]
    assert _fused_steps(ex) == ["ConvInteger", "Mul"] and isinstance(plan.steps[1].fn, IntBiasScale)
    np.testing.assert_array_equal(got, ex.run(feeds, keep_all=True)["y"])
    np.testing.assert_allclose(got, _ort(model, feeds)["y"], rtol=1e-6)
    assert ex.fused_fallbacks == 0


def test_a_channel_chain_dividing_by_a_zero_constant_gives_infinities_without_falling_back():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((3, 2, 1, 1)).astype(np.float32)
    scale = np.array([1.5, 2.0, -1.0], np.float32).reshape(1, 3, 1, 1)
    div = np.array([2.0, 0.0, 4.0], np.float32).reshape(1, 3, 1, 1)  # channel 1 divided by zero
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("Div", ["m", "d"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "s"), numpy_helper.from_array(div, "d")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    ex = Executor(engine.load(model))
    want = _ort(model, {"x": x})["y"]
    for _ in range(3):  # the first run builds the chain's parameters, the next ones run it compiled
        np.testing.assert_allclose(ex.run({"x": x})["y"], want, rtol=1e-6)
    assert np.isinf(want[0, 1]).all()
    assert _fused_steps(ex) == ["Conv"]
    assert ex.fused_fallbacks == 0


@pytest.mark.parametrize("kernel", [1, 3], ids=["pointwise", "3x3"])
def test_a_bias_free_convs_add_and_hard_sigmoid_run_inside_the_conv_with_the_op_by_op_numbers(kernel):
    """Paddle's squeeze-excite head: Conv without a bias, Add of a per-channel constant, then
    HardSigmoid. The constant becomes the Conv's bias and the HardSigmoid its epilogue: one
    step, the same bits as one kernel per node (every clip branch and a NaN taken)."""
    rng = np.random.default_rng(8)
    c, m = 5, 7
    inits = [numpy_helper.from_array(rng.standard_normal((m, c, kernel, kernel)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((1, m, 1, 1)).astype(np.float32), "k")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[kernel // 2] * 4),
             helper.make_node("Add", ["c", "k"], ["a"]),
             helper.make_node("HardSigmoid", ["a"], ["y"], alpha=0.1666667, beta=0.5)]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, 6, 6])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = (rng.standard_normal((1, c, 6, 6)) * 4).astype(np.float32)
    x[0, 0, 3, 3] = np.nan
    ex = Executor(engine.load(model))
    got = ex.run({"x": x})["y"]
    assert _fused_steps(ex) == ["Conv"]
    np.testing.assert_array_equal(got, ex.run({"x": x}, keep_all=True)["y"])
    assert np.isnan(got).any() and (got == 0).any() and (got == 1).any() and ((got > 0) & (got < 1)).any()
    np.testing.assert_allclose(got, _ort(model, {"x": x})["y"], rtol=1e-6, atol=1e-6)



def _weight_fed_model(op: str, ir3: bool):
    """A one-node model whose weight ``w`` is a graph input (ir3: an initializer the model also
    lists as an input, as every IR 3 model does)."""
    rng = np.random.default_rng(7)
    if op == "Conv":
        x_shape, w = (1, 8, 16, 16), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    elif op == "MatMul":  # few rows by a large weight: the packed direct kernel when constant
        x_shape, w = (8, 512), rng.standard_normal((512, 1024)).astype(np.float32)
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
    else:
        x_shape, w = (4, 2, 256), (rng.standard_normal((1, 2048, 256)) * 0.05).astype(np.float32)
        r = numpy_helper.from_array((rng.standard_normal((1, 2048, 512)) * 0.05).astype(np.float32), "r")
        node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=512)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
           helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)]

    def model(with_w: bool):
        inits = ([numpy_helper.from_array(w, "w")] if with_w else []) + ([r] if op == "LSTM" else [])
        out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
        return helper.make_model(helper.make_graph([node], "g", ins, out, inits),
                                 opset_imports=[helper.make_opsetid("", 13)])

    ours = model(ir3)
    if ir3:
        ours.ir_version = 3
    # onnxruntime refuses a feed of an IR 3 initializer: its reference has w as a plain input
    return ours, model(False), rng.standard_normal(x_shape).astype(np.float32), w


@pytest.mark.parametrize(("op", "ir3"), [("Conv", False), ("Conv", True), ("MatMul", True), ("LSTM", True)])
def test_a_weight_fed_as_an_input_and_refilled_in_place_gives_the_new_weights_numbers(op, ir3):
    """A caller that feeds a weight (a graph input, or an IR 3 initializer it overrides) and
    refills the same array between runs gets the refilled weight's result every run, as
    onnxruntime does: nothing prepared from last run's values is reused."""
    model, reference, x, w0 = _weight_fed_model(op, ir3)
    graph = engine.load(model, check=False)
    sess = ort.InferenceSession(reference.SerializeToString(), providers=["CPUExecutionProvider"])
    w = w0 * 0.5
    for scale in (1.0, -2.0, 0.25):
        w[...] = w0 * scale
        ours = engine.execute(graph, {"x": x, "w": w})["y"]
        np.testing.assert_allclose(ours, sess.run(None, {"x": x, "w": w})[0], rtol=1e-4, atol=1e-4)
