"""Constant folding: Constant nodes, constant expressions, shape subgraphs, the size cap."""

from __future__ import annotations

import numpy as np

import engine
from engine.passes.fold_constants import FoldConstants
from tests.engine.passes_util import (
    assert_same_numbers,
    fired,
    load,
    model,
    op_types,
    rand,
    refused,
    run_pass,
)

SHAPE_SUBGRAPH = """
    agraph (float[N,4,6] x) => (float[N,24] y) {
        s = Shape (x)
        n = Gather <axis=0> (s, zero)
        nu = Unsqueeze (n, axes0)
        shape = Concat <axis=0> (nu, minus1)
        y = Reshape (x, shape)
    }"""


def _shape_model():
    return model(SHAPE_SUBGRAPH, zero=np.array(0, dtype=np.int64), axes0=np.array([0], dtype=np.int64),
                 minus1=np.array([-1], dtype=np.int64))


def test_constant_nodes_become_initializers():
    g = load(model("""
        agraph (float[2,3] x) => (float[2,3] y) {
            c = Constant <value = float[3] {1.0, 2.0, 3.0}> ()
            y = Add (x, c)
        }"""))
    after, res = run_pass(g, FoldConstants)
    assert op_types(after) == ["Add"]
    assert "c" in after.initializers
    np.testing.assert_array_equal(after.initializers["c"].const, [1.0, 2.0, 3.0])
    assert fired(res, "fold_constants.constant")
    assert_same_numbers(g, after)


def test_constant_expressions_fold_through_reference_kernels():
    g = load(model("""
        agraph (float[2,3] x) => (float[2,3] y) {
            a = Mul (c1, c2)
            b = Sqrt (a)
            y = Add (x, b)
        }""", c1=rand(3, positive=True), c2=rand(3, positive=True)))
    after, _ = run_pass(g, FoldConstants)
    assert op_types(after) == ["Add"]
    assert_same_numbers(g, after)


def test_shape_subgraph_folds_once_input_shapes_are_static():
    g = load(_shape_model(), x=(3, 4, 6))
    after, res = run_pass(g, FoldConstants)
    assert op_types(after) == ["Reshape"]
    reshape = after.nodes[0]
    np.testing.assert_array_equal(reshape.inputs[1].const, [3, -1])
    assert fired(res, "fold_constants.static_shape")
    assert_same_numbers(g, after)


def test_shape_subgraph_stays_while_the_batch_is_dynamic():
    g = load(_shape_model())
    after, res = run_pass(g, FoldConstants)
    assert op_types(after)[0] == "Shape"
    assert not res.modified


def test_size_cap_keeps_huge_results_unmaterialized():
    g = load(model("""
        agraph (float[1] x) => (float[4096,4096] y) {
            big = ConstantOfShape <value = float[1] {1.0}> (shape)
            y = Mul (big, x)
        }""", shape=np.array([4096, 4096], dtype=np.int64)))
    after, res = run_pass(g, lambda: FoldConstants(max_bytes=16 * 2**20))
    assert op_types(after) == ["ConstantOfShape", "Mul"]
    (ev,) = refused(res, "fold_constants.fold")
    assert "64.0 MiB" in ev.reason and "folding cap of 16 MiB" in ev.reason


def test_random_ops_are_not_folded():
    g = load(model("""
        agraph (float[2] x) => (float[2] y) {
            r = RandomUniform <shape=[2]> ()
            y = Add (x, r)
        }"""))
    after, res = run_pass(g, FoldConstants)
    assert op_types(after) == ["RandomUniform", "Add"]
    assert not res.modified


def test_graph_output_computed_from_constants_keeps_its_name():
    g = load(model("""
        agraph (float[2] x) => (float[2] y, float[2] k) {
            y = Relu (x)
            k = Add (c, c)
        }""", c=np.array([1.0, 2.0], dtype=np.float32)))
    after, _ = run_pass(g, FoldConstants)
    assert op_types(after) == ["Relu"]
    assert [v.name for v in after.outputs] == ["y", "k"]
    out = engine.execute(after, {"x": np.array([-1.0, 1.0], dtype=np.float32)})
    np.testing.assert_array_equal(out["k"], [2.0, 4.0])


def test_initializers_listed_as_inputs_are_frozen_and_leave_the_inputs():
    m = model("""
        agraph (float[2] x, float[2] w) => (float[2] y) {
            y = Add (x, w)
        }""", ir_version=8, w=np.array([1.0, 2.0], dtype=np.float32))
    g = load(m)
    assert g.overridable == ["w"]
    after, res = run_pass(g, FoldConstants)
    assert after.overridable == []
    assert res.diagnostics and res.diagnostics[0].code == "frozen-initializers"


def test_dequantize_of_constant_weights_is_kept():
    g = load(model("""
        agraph (float[2,3] x) => (float[2,3] y) {
            w = DequantizeLinear (q, s, z)
            y = Add (x, w)
        }""", q=np.array([1, 2, 3], dtype=np.int8), s=np.array(0.5, dtype=np.float32),
        z=np.array(0, dtype=np.int8)))
    after, res = run_pass(g, FoldConstants)
    assert op_types(after) == ["DequantizeLinear", "Add"]
    assert not res.modified


def test_empty_graph_passes_through_the_pipeline():
    from engine.passes.pipeline import optimize

    g = load(model("agraph (float[2] x) => (float[2] x) { }"))
    res = optimize(g)
    assert len(res.graph) == 0 and [v.name for v in res.graph.outputs] == ["x"]
