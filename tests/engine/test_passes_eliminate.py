"""Cleanup: dead code, Identity/Dropout, no-op shape ops, merged Transposes/Reshapes, CSE."""

from __future__ import annotations

import numpy as np
import pytest

from engine.passes.eliminate import (
    EliminateCommonSubexpressions,
    EliminateDeadCode,
    identity_pass,
    noop_pass,
)
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

I64 = np.int64


def test_dead_nodes_and_unused_initializers_go():
    g = load(model("""
        agraph (float[2,3] x) => (float[2,3] y) {
            dead = Mul (x, w)
            dead2 = Relu (dead)
            y = Relu (x)
        }""", w=rand(3), unused=rand(5)))
    after, res = run_pass(g, EliminateDeadCode)
    assert op_types(after) == ["Relu"]
    assert "unused" not in after.initializers and "w" not in after.initializers
    assert res.modified
    assert_same_numbers(g, after)


def test_identity_and_dropout_are_removed():
    g = load(model("""
        agraph (float[2,3] x) => (float[2,3] y) {
            a = Identity (x)
            b = Relu (a)
            c = Dropout (b)
            y = Identity (c)
        }"""))
    after, res = run_pass(g, identity_pass)
    assert op_types(after) == ["Relu"]
    assert after.outputs[0].name == "y"  # the graph output keeps its name
    assert len(fired(res)) == 3
    assert_same_numbers(g, after)


def test_dropout_with_a_used_mask_stays():
    g = load(model("""
        agraph (float[2,3] x) => (float[2,3] y, bool[2,3] mask) {
            y, mask = Dropout (x)
        }"""))
    after, res = run_pass(g, identity_pass)
    assert op_types(after) == ["Dropout"]
    (ev,) = refused(res, "eliminate_identity.dropout")
    assert ev.reason == "its mask output 'mask' is read"


def test_identity_between_graph_input_and_output_stays_with_a_reason():
    g = load(model("agraph (float[2] x) => (float[2] y) { y = Identity (x) }"))
    after, res = run_pass(g, identity_pass)
    assert op_types(after) == ["Identity"]
    (ev,) = refused(res)
    assert "graph input" in ev.reason


@pytest.mark.parametrize(("body", "inits"), [
    ("y = Reshape (x, s)", {"s": np.array([2, 0, -1], dtype=I64)}),
    ("y = Transpose <perm=[0,1,2]> (x)", {}),
    ("y = Cast <to=1> (x)", {}),
    ("y = Pad (x, p)", {"p": np.zeros(6, dtype=I64)}),
    ("y = Slice (x, st, en)", {"st": np.array([0, 0], dtype=I64), "en": np.array([2, 99], dtype=I64)}),
    ("y = Expand (x, s)", {"s": np.array([3, 4], dtype=I64)}),
    ("y = Concat <axis=0> (x)", {}),
])
def test_noop_shape_ops_are_removed(body, inits):
    g = load(model(f"agraph (float[2,3,4] x) => (float[2,3,4] z) {{ {body}\n z = Relu (y) }}", **inits))
    after, res = run_pass(g, noop_pass)
    assert op_types(after) == ["Relu"], body
    assert fired(res)
    assert_same_numbers(g, after)


def test_real_reshape_is_not_reported():
    g = load(model("agraph (float[2,3,4] x) => (float[6,4] y) { y = Reshape (x, s) }", s=np.array([6, 4], dtype=I64)))
    after, res = run_pass(g, noop_pass)
    assert op_types(after) == ["Reshape"]
    assert not res.events


def test_opposite_transposes_cancel():
    g = load(model("""
        agraph (float[2,3,4] x) => (float[2,3,4] y) {
            a = Transpose <perm=[0,2,1]> (x)
            b = Transpose <perm=[0,2,1]> (a)
            y = Relu (b)
        }"""))
    after, _ = run_pass(g, noop_pass)
    assert op_types(after) == ["Relu"]
    assert_same_numbers(g, after)


def test_consecutive_transposes_merge_into_one():
    g = load(model("""
        agraph (float[2,3,4,5] x) => (float[5,2,4,3] y) {
            a = Transpose <perm=[0,2,3,1]> (x)
            y = Transpose <perm=[2,0,1,3]> (a)
        }"""))
    after, res = run_pass(g, noop_pass)
    assert op_types(after) == ["Transpose"]
    assert after.nodes[0].attrs["perm"] == [3, 0, 2, 1]
    assert len(after.nodes[0].meta["provenance"]) == 2
    assert fired(res, "eliminate_noop.merge_transposes")
    assert_same_numbers(g, after)


def test_inner_transpose_with_another_reader_stays():
    g = load(model("""
        agraph (float[2,3,4] x) => (float[2,4,3] y, float[2,3,4] z) {
            a = Transpose <perm=[0,2,1]> (x)
            b = Transpose <perm=[1,0,2]> (a)
            y = Relu (a)
            z = Relu (b)
        }""", ))
    after, _ = run_pass(g, noop_pass)
    assert op_types(after).count("Transpose") == 2
    assert_same_numbers(g, after)


def test_reshape_chains_merge():
    g = load(model("""
        agraph (float[2,3,4] x) => (float[4,6] y) {
            a = Flatten <axis=1> (x)
            b = Reshape (a, s1)
            y = Reshape (b, s2)
        }""", s1=np.array([0, 3, 4], dtype=I64), s2=np.array([4, -1], dtype=I64)))
    after, _ = run_pass(g, noop_pass)
    assert op_types(after) == ["Reshape"]
    assert after.nodes[0].inputs[0].name == "x"
    np.testing.assert_array_equal(after.nodes[0].inputs[1].const, [4, -1])
    assert_same_numbers(g, after)


def test_cse_merges_duplicate_nodes_and_constants():
    g = load(model("""
        agraph (float[2,3] x) => (float[2,3] y) {
            a = Mul (x, c1)
            b = Mul (x, c2)
            ra = Relu (a)
            rb = Relu (b)
            y = Add (ra, rb)
        }""", c1=np.full(3, 2.0, dtype=np.float32), c2=np.full(3, 2.0, dtype=np.float32)))
    after, res = run_pass(g, EliminateCommonSubexpressions)
    assert op_types(after) == ["Mul", "Relu", "Add"]
    assert fired(res, "eliminate_common_subexpressions.initializer")
    assert_same_numbers(g, after)


def test_cse_keeps_two_graph_outputs_apart():
    g = load(model("""
        agraph (float[2] x) => (float[2] y, float[2] z) {
            y = Relu (x)
            z = Relu (x)
        }"""))
    after, res = run_pass(g, EliminateCommonSubexpressions)
    assert op_types(after) == ["Relu", "Relu"]
    (ev,) = refused(res)
    assert "both graph outputs" in ev.reason
