"""If / Loop / Scan: outer-scope reads, inferred types from subgraphs, loop and scan semantics."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import engine
from tests.nodes._build import load_graph as _load

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def _if_model(cond_const=None):
    # then: x + one (reads the outer-scope value x); else: x * x
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t_out"])], "then", [],
                               [_vi("t_out", F, [2])],
                               initializer=[numpy_helper.from_array(np.ones(2, np.float32), "one")])
    else_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["e_out"])], "else", [],
                               [_vi("e_out", F, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return _load([node], [("x", F, [2]), ("c", B, [])], ["y"])


def _if_shapes_model(cond_const=None):
    # then: a (2, 3) constant; else: the outer-scope input x of shape (2, "k")
    then_g = helper.make_graph([helper.make_node("Identity", ["w"], ["t_out"])], "then", [],
                               [_vi("t_out", F, [2, 3])],
                               initializer=[numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "else", [],
                               [_vi("e_out", F, [2, "k"])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    if cond_const is None:
        return _load([node], [("x", F, [2, "k"]), ("c", B, [])], ["y"])
    return _load([node], [("x", F, [2, "k"])], ["y"], inits=[("c", np.array(cond_const))])


def test_if_branch_reads_outer_scope_value():
    g = _if_model()
    x = np.array([3.0, -2.0], np.float32)
    np.testing.assert_array_equal(engine.execute(g, {"x": x, "c": np.array(True)})["y"], [4.0, -1.0])
    np.testing.assert_array_equal(engine.execute(g, {"x": x, "c": np.array(False)})["y"], [9.0, 4.0])


def test_if_infer_merges_branches_or_uses_known_condition():
    g = _if_shapes_model()
    assert g.outputs[0].type.shape == (2, None)
    assert g.outputs[0].type.dtype == np.float32
    assert _if_shapes_model(cond_const=True).outputs[0].type.shape == (2, 3)
    assert _if_shapes_model(cond_const=False).outputs[0].type.shape == (2, "k")
    x = np.zeros((2, 5), np.float32)
    assert engine.execute(g, {"x": x, "c": np.array(True)})["y"].shape == (2, 3)
    assert engine.execute(g, {"x": x, "c": np.array(False)})["y"].shape == (2, 5)


def _loop_body(stop_at=None):
    nodes = [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),  # x is an outer-scope value
             helper.make_node("Identity", ["acc_out"], ["scan_out"])]
    if stop_at is None:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
        inits = []
    else:
        nodes.append(helper.make_node("Less", ["i", "limit"], ["cond_out"]))
        inits = [numpy_helper.from_array(np.array(stop_at, np.int64), "limit")]
    return helper.make_graph(nodes, "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [2])],
                             [_vi("cond_out", B, []), _vi("acc_out", F, [2]), _vi("scan_out", F, [2])],
                             initializer=inits)


def test_loop_trip_count_carries_state_and_stacks_scan_outputs():
    node = helper.make_node("Loop", ["M", "", "acc0"], ["acc", "trace"], body=_loop_body())
    g = _load([node], [("x", F, [2]), ("acc0", F, [2])], ["acc", "trace"], inits=[("M", np.array(5, np.int64))])
    assert g.outputs[0].type.shape == (2,)
    assert g.outputs[1].type.shape == (5, 2)
    x = np.array([1.0, 2.0], np.float32)
    out = engine.execute(g, {"x": x, "acc0": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(out["acc"], 5 * x)
    np.testing.assert_array_equal(out["trace"], np.outer(np.arange(1, 6), x))


def test_loop_stops_when_the_body_condition_turns_false():
    node = helper.make_node("Loop", ["", "c0", "acc0"], ["acc", "trace"], body=_loop_body(stop_at=2))
    g = _load([node], [("x", F, [2]), ("acc0", F, [2])], ["acc", "trace"], inits=[("c0", np.array(True))])
    assert g.outputs[1].type.shape == (None, 2)
    out = engine.execute(g, {"x": np.ones(2, np.float32), "acc0": np.zeros(2, np.float32)})
    # iterations 0, 1, 2 run; the condition computed in iteration 2 (2 < 2) ends the loop
    np.testing.assert_array_equal(out["acc"], [3.0, 3.0])
    assert out["trace"].shape == (3, 2)


def _scan_model(in_dir, out_dir):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [_vi("s_in", F, [3]), _vi("x_t", F, [3])], [_vi("s_out", F, [3]), _vi("y_t", F, [3])])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[in_dir],
                            scan_output_axes=[-1], scan_output_directions=[out_dir])
    return _load([node], [("s0", F, [3]), ("x", F, [3, "T"])], ["s", "y"])


def test_scan_axes_and_directions():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = _scan_model(in_dir=1, out_dir=0)
    assert g.outputs[0].type.shape == (3,)
    assert g.outputs[1].type.shape == (3, "T")
    out = engine.execute(g, {"s0": np.zeros(3, np.float32), "x": x})
    np.testing.assert_array_equal(out["s"], x.sum(axis=1))
    np.testing.assert_array_equal(out["y"], np.cumsum(x[:, ::-1], axis=1))  # appended in processing order
    g2 = _scan_model(in_dir=1, out_dir=1)
    out2 = engine.execute(g2, {"s0": np.zeros(3, np.float32), "x": x})
    np.testing.assert_array_equal(out2["y"], np.cumsum(x[:, ::-1], axis=1)[:, ::-1])  # prepended
