"""Indexing ops: inferred shapes, ONNX tie/ordering rules, reductions on scatter, Einsum MACs."""

from __future__ import annotations

from functools import partial

import numpy as np
from onnx import TensorProto, helper

import engine
from engine.ir.infer import node_context
from tests.nodes._build import load_graph, shape_of

F, I64 = TensorProto.FLOAT, TensorProto.INT64


_load = partial(load_graph, opset=18)


def test_gather_embedding_lookup_shape_with_symbolic_tokens():
    g = _load([helper.make_node("Gather", ["emb", "ids"], ["y"], axis=0)],
              [("ids", I64, ["B", "S"])], [("y", F, None)], [("emb", np.random.rand(100, 16).astype(np.float32))])
    assert shape_of(g, "y") == ("B", "S", 16)
    assert g.lookup("y").type.dtype == np.float32
    out = engine.execute(g, {"ids": np.array([[1, -1]], np.int64)})["y"]
    np.testing.assert_array_equal(out[0, 1], g.lookup("emb").const[99])


def test_gather_of_scalar_index_gives_rank_0():
    g = _load([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [("x", F, [3, 5])], [("y", F, None)],
              [("i", np.array(2, np.int64))])
    assert shape_of(g, "y") == (3,)


def test_topk_ties_keep_the_lower_index_first_for_largest_and_smallest():
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=1),
             helper.make_node("TopK", ["x", "k"], ["sv", "si"], axis=-1, largest=0)]
    outs = [(n, F if n.endswith("v") else I64, None) for n in ("v", "i", "sv", "si")]
    g = _load(nodes, [("x", F, ["N", 6])], outs, [("k", np.array([3], np.int64))])
    assert shape_of(g, "v") == ("N", 3)
    assert g.lookup("i").type.dtype == np.int64
    x = np.array([[1, 5, 3, 5, 1, 5]], np.float32)
    out = engine.execute(g, {"x": x})
    np.testing.assert_array_equal(out["i"], [[1, 3, 5]])
    np.testing.assert_array_equal(out["si"], [[0, 4, 2]])


def test_topk_k_attribute_before_opset_10():
    g = _load([helper.make_node("TopK", ["x"], ["v", "i"], axis=0, k=2)], [("x", F, [4])],
              [("v", F, None), ("i", I64, None)], opset=9)
    assert shape_of(g, "v") == (2,)
    np.testing.assert_array_equal(engine.execute(g, {"x": np.array([3, 9, 1, 9], np.float32)})["i"], [1, 3])


def test_argmax_keepdims_and_select_last_index():
    nodes = [helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0, select_last_index=1),
             helper.make_node("ArgMin", ["x"], ["b"], axis=0, keepdims=1)]
    g = _load(nodes, [("x", F, ["N", 4])], [("a", I64, None), ("b", I64, None)], opset=13)
    assert shape_of(g, "a") == ("N",)
    assert shape_of(g, "b") == (1, 4)
    out = engine.execute(g, {"x": np.array([[2, 7, 7, 1], [0, 0, 0, 0]], np.float32)})
    np.testing.assert_array_equal(out["a"], [2, 3])
    assert out["a"].dtype == np.int64


def test_gathernd_batch_dims_shape_and_values():
    g = _load([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)], [("x", F, [2, 3, 4])],
              [("y", F, None)], [("i", np.array([[[2], [0]], [[1], [-1]]], np.int64))])
    assert shape_of(g, "y") == (2, 2, 4)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = engine.execute(g, {"x": x})["y"]
    np.testing.assert_array_equal(y, np.stack([x[0, [2, 0]], x[1, [1, 2]]]))


def test_scatter_elements_add_accumulates_duplicate_indices():
    g = _load([helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="add")],
              [("d", F, [1, 4])], [("y", F, None)],
              [("i", np.array([[1, 1, -1]], np.int64)), ("u", np.array([[1, 2, 5]], np.float32))])
    y = engine.execute(g, {"d": np.zeros((1, 4), np.float32)})["y"]
    np.testing.assert_array_equal(y, [[0, 3, 0, 5]])


def test_scatternd_max_reduction():
    g = _load([helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction="max")], [("d", F, [3])],
              [("y", F, None)], [("i", np.array([[0], [0], [2]], np.int64)), ("u", np.array([4, 9, -1], np.float32))])
    np.testing.assert_array_equal(engine.execute(g, {"d": np.ones(3, np.float32)})["y"], [9, 1, 1])


def test_onehot_inserts_depth_at_axis_and_handles_negative_indices():
    g = _load([helper.make_node("OneHot", ["i", "depth", "vals"], ["y"], axis=0)], [("i", I64, ["N"])],
              [("y", F, None)], [("depth", np.array(3, np.int64)), ("vals", np.array([0, 5], np.float32))])
    assert shape_of(g, "y") == (3, "N")
    y = engine.execute(g, {"i": np.array([-1, 0, 7], np.int64)})["y"]
    np.testing.assert_array_equal(y, [[0, 5, 0], [0, 0, 0], [5, 0, 0]])


def test_nonzero_and_compress_shapes_known_from_constant_inputs():
    nodes = [helper.make_node("NonZero", ["c"], ["nz"]),
             helper.make_node("Compress", ["x", "cond"], ["y"], axis=1)]
    g = _load(nodes, [("x", F, ["N", 4])], [("nz", I64, None), ("y", F, None)],
              [("c", np.array([[1, 0], [2, 3]], np.float32)), ("cond", np.array([True, False, True, True]))])
    assert shape_of(g, "nz") == (2, 3)
    assert shape_of(g, "y") == ("N", 3)


def test_cumsum_exclusive_reverse():
    g = _load([helper.make_node("CumSum", ["x", "ax"], ["y"], exclusive=1, reverse=1)], [("x", F, [4])],
              [("y", F, None)], [("ax", np.array(0, np.int64))])
    np.testing.assert_array_equal(engine.execute(g, {"x": np.array([1, 2, 3, 4], np.float32)})["y"], [9, 7, 4, 0])


def test_unique_unsorted_keeps_first_occurrence_order():
    g = _load([helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], sorted=0)], [("x", F, [6])],
              [("y", F, None), ("idx", I64, None), ("inv", I64, None), ("cnt", I64, None)])
    out = engine.execute(g, {"x": np.array([2, 1, 1, 3, 4, 3], np.float32)})
    np.testing.assert_array_equal(out["y"], [2, 1, 3, 4])
    np.testing.assert_array_equal(out["idx"], [0, 1, 3, 4])
    np.testing.assert_array_equal(out["inv"], [0, 1, 1, 2, 3, 2])
    np.testing.assert_array_equal(out["cnt"], [1, 2, 2, 1])


def test_einsum_shape_with_ellipsis_and_macs():
    g = _load([helper.make_node("Einsum", ["q", "k"], ["s"], equation="...qd,...kd->...qk")],
              [("q", F, ["B", 12, 64, 32]), ("k", F, ["B", 12, 80, 32])], [("s", F, None)], opset=12)
    assert shape_of(g, "s") == ("B", 12, 64, 80)
    implicit = _load([helper.make_node("Einsum", ["a", "b"], ["c"], equation="ij,jk")],
                     [("a", F, [2, 3]), ("b", F, [3, 5])], [("c", F, None)], opset=12)
    assert shape_of(implicit, "c") == (2, 5)
    node = implicit.nodes[0]
    ctx = node_context(node)
    assert ctx.spec.work(ctx).macs == 2 * 3 * 5
    a, b = np.random.rand(2, 3).astype(np.float32), np.random.rand(3, 5).astype(np.float32)
    np.testing.assert_allclose(engine.execute(implicit, {"a": a, "b": b})["c"], a @ b, rtol=1e-6)
