"""Passes inside If/Loop/Scan bodies: folding, cleanup and fusion reach body nodes (values
captured from the outer scope included), the numbers stay, and the trace counts body nodes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.ir.onnx_io import to_onnx
from engine.passes.base import count_nodes
from engine.passes.eliminate import EliminateDeadCode, identity_pass
from engine.passes.fold_constants import FoldConstants
from engine.passes.fuse_activation import activation_pass
from engine.passes.fuse_linear import matmul_add_pass
from engine.passes.pipeline import optimize
from tests.engine.passes_util import assert_same_numbers, run_pass

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
RNG = np.random.default_rng(7)


def _vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _body(graph, node_op):
    """The bodies of the first ``node_op`` node: (then, else) of an If, (body,) of a Loop."""
    node = next(n for n in graph.nodes if n.op_type == node_op)
    names = ("then_branch", "else_branch") if node_op == "If" else ("body",)
    return [node.attrs[k] for k in names]


def _if_model():
    """If(c): then = x * ((k + one) * two), where k = a * b is computed outside (captured);
    else = Relu(MatMul(x, w) + bias) through an Identity."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["k", "one"], ["k1"]),
         helper.make_node("Mul", ["k1", "two"], ["k2"]),
         helper.make_node("Mul", ["x", "k2"], ["t_out"])],
        "then", [], [_vi("t_out", F, [2, 3])],
        initializer=[_init("one", np.ones(3, np.float32)), _init("two", np.float32(2))])
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["mm"]),
         helper.make_node("Add", ["mm", "bias"], ["pre"]),
         helper.make_node("Identity", ["pre"], ["pre_id"]),
         helper.make_node("Relu", ["pre_id"], ["e_out"]),
         helper.make_node("Neg", ["x"], ["unused"])],  # dead code inside the body
        "else", [], [_vi("e_out", F, [2, 3])],
        initializer=[_init("w", RNG.standard_normal((3, 3)).astype(np.float32)),
                     _init("bias", RNG.standard_normal(3).astype(np.float32))])
    nodes = [helper.make_node("Mul", ["a", "b"], ["k"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return _model(nodes, [_vi("x", F, [2, 3]), _vi("c", B, [])], [_vi("y", F, [2, 3])],
                  [_init("a", np.array([1, 2, 3], np.float32)), _init("b", np.array([0.5, 1, 2], np.float32))])


def _feeds(cond: bool):
    return {"x": RNG.standard_normal((2, 3)).astype(np.float32), "c": np.array(cond)}


def _assert_both_branches_same(before, after):
    for cond in (True, False):
        assert_same_numbers(before, after, feeds=_feeds(cond))


def test_folding_reaches_a_body_through_a_captured_outer_value():
    g = engine.load(_if_model())
    after, res = run_pass(g, FoldConstants)
    then_g, _ = _body(after, "If")
    assert [n.op_type for n in then_g.toposort()] == ["Mul"]  # (k + one) * two folded inside the body
    assert "Mul" not in [n.op_type for n in after.nodes]        # k = a * b folded outside
    fired = [e for e in res.events if e.fired]
    assert len(fired) == 3  # one outside, two inside the body: the trace lists the body's rewrites
    _assert_both_branches_same(g, after)


def test_dead_code_and_identities_go_inside_a_body():
    g = engine.load(_if_model())
    after, _ = run_pass(g, EliminateDeadCode)
    _, else_g = _body(after, "If")
    assert "Neg" not in [n.op_type for n in else_g.nodes]
    after, _ = run_pass(after, lambda: identity_pass(()))
    _, else_g = _body(after, "If")
    assert [n.op_type for n in else_g.toposort()] == ["MatMul", "Add", "Relu"]
    _assert_both_branches_same(g, after)


def test_fusions_rewrite_nodes_inside_a_body():
    g = engine.load(_if_model())
    after, _ = run_pass(g, lambda: identity_pass(()))
    after, _ = run_pass(after, lambda: matmul_add_pass(()))
    after, _ = run_pass(after, lambda: activation_pass(()))
    _, else_g = _body(after, "If")
    assert sorted(n.op_type for n in else_g.nodes) == ["Gemm", "Neg"]  # MatMul + Add + Relu -> one Gemm
    gemm = next(n for n in else_g.nodes if n.op_type == "Gemm")
    assert gemm.activation is not None and gemm.activation.op_type == "Relu"
    assert set(gemm.meta["provenance"]) == {"", "mm", "pre"} or len(gemm.meta["provenance"]) >= 2
    _assert_both_branches_same(g, after)


def _loop_model():
    """Loop 3 times: acc = acc + x * (s * s) (s captured from outside, foldable in the body)
    through an Identity; a dead Sigmoid and a Loop nested inside the body that doubles acc."""
    inner = helper.make_graph(
        [helper.make_node("Identity", ["ci"], ["co"]),
         helper.make_node("Add", ["v_in", "v_in"], ["v_out"])],
        "inner", [_vi("j", I64, []), _vi("ci", B, []), _vi("v_in", F, [4])],
        [_vi("co", B, []), _vi("v_out", F, [4])])
    body = helper.make_graph(
        [helper.make_node("Mul", ["s", "s"], ["s2"]),
         helper.make_node("Mul", ["x", "s2"], ["xs"]),
         helper.make_node("Add", ["acc_in", "xs"], ["acc1"]),
         helper.make_node("Identity", ["acc1"], ["acc2"]),
         helper.make_node("Sigmoid", ["acc2"], ["dead"]),
         helper.make_node("Loop", ["one_trip", "", "acc2"], ["acc_out"], body=inner),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("acc_in", F, [4])],
        [_vi("cond_out", B, []), _vi("acc_out", F, [4])],
        initializer=[_init("one_trip", np.array(1, np.int64))])
    nodes = [helper.make_node("Loop", ["trip", "", "zeros"], ["acc"], body=body)]
    return _model(nodes, [_vi("x", F, [4])], [_vi("acc", F, [4])],
                  [_init("trip", np.array(3, np.int64)), _init("zeros", np.zeros(4, np.float32)),
                   _init("s", np.array([1, 2, 3, 4], np.float32))])


def test_optimize_shrinks_loop_bodies_counts_them_and_onnxruntime_agrees():
    model = _loop_model()
    g = engine.load(model)
    res = optimize(g)
    rep = res.report()
    assert rep["nodes_before"] == count_nodes(g) == 1 + 7 + 2
    assert rep["nodes_after"] == count_nodes(res.graph) < rep["nodes_before"]
    body = _body(res.graph, "Loop")[0]
    assert [n.op_type for n in body.toposort()].count("Mul") == 1    # s * s folded in the body
    assert "Sigmoid" not in [n.op_type for n in body.nodes]           # dead code gone
    passes = {p["name"] for p in rep["passes"] if p["modified"]}
    assert "fold_constants" in passes and any(p["nodes_before"] > p["nodes_after"] for p in rep["passes"])
    x = RNG.standard_normal(4).astype(np.float32)
    ours = engine.execute(res.graph, {"x": x})["acc"]
    np.testing.assert_allclose(ours, engine.execute(g, {"x": x})["acc"], rtol=1e-6)
    sess = ort.InferenceSession(to_onnx(res.graph).SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ours, rtol=1e-5)


def test_outer_value_read_only_by_a_body_survives_dead_code_elimination():
    g = engine.load(_if_model())
    after, _ = run_pass(g, EliminateDeadCode)
    assert "Mul" in [n.op_type for n in after.nodes]  # k = a * b is read only inside then_branch
    _assert_both_branches_same(g, after)


def _silero_models():
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        return []
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    return sorted(p for p in data.glob("*.onnx"))


def _has_bodies(graph) -> bool:
    return any(True for n in graph.nodes for _ in n.subgraphs())


def test_silero_vad_models_with_if_bodies_lose_body_nodes_and_keep_their_numbers():
    paths = _silero_models()
    if not paths:
        pytest.skip("silero-vad is not installed (pip install --no-deps silero-vad)")
    checked = 0
    for path in paths:
        g = engine.load(path)
        if not _has_bodies(g):
            continue
        res = optimize(g)
        body_before = count_nodes(g) - len(g)
        body_after = count_nodes(res.graph) - len(res.graph)
        assert body_after < body_before, f"{path.name}: body nodes {body_before} -> {body_after}"
        assert res.report()["nodes_before"] == count_nodes(g)
        sess = ort.InferenceSession(to_onnx(res.graph).SerializeToString(), providers=["CPUExecutionProvider"])
        for sr, n in ((16000, 512), (8000, 256)):
            feeds = {}
            for v in g.inputs:
                if v.name == "sr":
                    feeds["sr"] = np.array(sr, np.int64)
                elif v.name == "input":
                    feeds["input"] = (RNG.standard_normal((1, n)) * 0.1).astype(v.type.dtype)
                else:
                    feeds[v.name] = np.zeros([d if isinstance(d, int) else 1 for d in v.type.shape], v.type.dtype)
            if "sr" not in feeds and sr == 8000:
                continue  # a 16 kHz-only model
            want = engine.execute(g, feeds)
            got = engine.execute(res.graph, feeds)
            theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            for k in want:
                np.testing.assert_allclose(got[k].astype(np.float64), want[k].astype(np.float64), atol=1e-6)
                np.testing.assert_allclose(theirs[k].astype(np.float64), got[k].astype(np.float64), atol=1e-4)
        checked += 1
    assert checked >= 1


def _twin_branches_model():
    """Both branches compute u = Unsqueeze(Gather(s, i0), axes) (axes: equal constants, one per
    branch); then y = u + x, else y = u * x. The Gathers read outer values only."""
    def branch(name, op):
        return helper.make_graph(
            [helper.make_node("Gather", ["s", "i0"], [f"{name}_g"], name=f"{name}_gather"),
             helper.make_node("Unsqueeze", [f"{name}_g", f"{name}_axes"], [f"{name}_u"], name=f"{name}_unsq"),
             helper.make_node(op, [f"{name}_u", "x"], [f"{name}_out"], name=f"{name}_{op.lower()}")],
            name, [], [_vi(f"{name}_out", F, [1, 4])],
            initializer=[_init(f"{name}_axes", np.array([0], np.int64))])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Add"),
                              else_branch=branch("else", "Mul"))]
    return _model(nodes, [_vi("x", F, [1, 4]), _vi("c", B, [])], [_vi("y", F, [1, 4])],
                  [_init("s", RNG.standard_normal((3, 4)).astype(np.float32)), _init("i0", np.array(1, np.int64))])


def test_what_both_if_branches_compute_moves_out_once():
    from engine.passes.hoist import HoistCommonBranchNodes

    g = engine.load(_twin_branches_model())
    after, res = run_pass(g, HoistCommonBranchNodes)
    then_g, else_g = _body(after, "If")
    assert [n.op_type for n in then_g.nodes] == ["Add"] and [n.op_type for n in else_g.nodes] == ["Mul"]
    assert sorted(n.op_type for n in after.nodes) == ["Gather", "If", "Unsqueeze"]
    assert count_nodes(after) == count_nodes(g) - 2
    assert len([e for e in res.events if e.fired]) == 2
    for cond in (True, False):
        assert_same_numbers(g, after, feeds=_feeds_x14(cond))
    sess = ort.InferenceSession(to_onnx(after).SerializeToString(), providers=["CPUExecutionProvider"])
    for cond in (True, False):
        feeds = _feeds_x14(cond)
        np.testing.assert_allclose(sess.run(None, feeds)[0], engine.execute(g, feeds)["y"], rtol=1e-6)


def _feeds_x14(cond: bool):
    return {"x": RNG.standard_normal((1, 4)).astype(np.float32), "c": np.array(cond)}


def test_a_node_writing_a_branch_output_stays_in_its_branch():
    from engine.passes.hoist import HoistCommonBranchNodes

    same = [helper.make_node("Neg", ["x"], ["t_out"], name="t_neg")]
    other = [helper.make_node("Neg", ["x"], ["e_out"], name="e_neg")]
    then_g = helper.make_graph(same, "then", [], [_vi("t_out", F, [2])])
    else_g = helper.make_graph(other, "else", [], [_vi("e_out", F, [2])])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
               [_vi("x", F, [2]), _vi("c", B, [])], [_vi("y", F, [2])])
    g = engine.load(m)
    after, res = run_pass(g, HoistCommonBranchNodes)
    assert not res.modified and count_nodes(after) == 3
