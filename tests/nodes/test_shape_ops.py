"""Shape ops: static and symbolic shape inference through shape subgraphs, opset-dependent forms."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.ir.graph import Graph
from tests.nodes._build import load_graph as _load
from tests.nodes._build import shape_of

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _reshape_chain(x_shape) -> Graph:
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): keep dim 0, flatten the rest."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0v"]),
        helper.make_node("Concat", ["d0v", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [("zero", np.array(0, np.int64)), ("ax0", np.array([0], np.int64)),
             ("minus1", np.array([-1], np.int64))]
    return _load(nodes, [("x", F, x_shape)], [("y", F, None)], inits, opset=13)


def test_shape_gather_unsqueeze_concat_reshape_static_input_gives_static_shape():
    g = _reshape_chain([2, 3, 4, 5])
    assert shape_of(g, "target") == (2,)
    assert shape_of(g, "y") == (2, 60)
    x = np.random.rand(2, 3, 4, 5).astype(np.float32)
    np.testing.assert_array_equal(engine.execute(g, {"x": x})["y"], x.reshape(2, 60))


def test_shape_chain_with_symbolic_batch_keeps_the_symbol():
    g = _reshape_chain(["N", 3, 4, 5])
    assert shape_of(g, "y") == ("N", 60)
    x = np.random.rand(7, 3, 4, 5).astype(np.float32)
    assert engine.execute(g, {"x": x})["y"].shape == (7, 60)


def test_reshape_zero_copies_dims_for_transformer_heads():
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["h"]),
             helper.make_node("Transpose", ["h"], ["t"], perm=[0, 2, 1, 3])]
    g = _load(nodes, [("x", F, ["B", "S", 768])], [("t", F, None)],
              [("shp", np.array([0, 0, 12, 64], np.int64))])
    assert shape_of(g, "h") == ("B", "S", 12, 64)
    assert shape_of(g, "t") == ("B", 12, "S", 64)


def test_reshape_allowzero_makes_a_zero_sized_dim():
    node = helper.make_node("Reshape", ["x", "shp"], ["y"], allowzero=1)
    g = _load([node], [("x", F, [0, 4])], [("y", F, None)], [("shp", np.array([4, 0], np.int64))], opset=14)
    assert shape_of(g, "y") == (4, 0)
    assert engine.execute(g, {"x": np.zeros((0, 4), np.float32)})["y"].shape == (4, 0)


def test_flatten_keeps_symbolic_batch():
    g = _load([helper.make_node("Flatten", ["x"], ["y"], axis=1)], [("x", F, ["N", 512, 1, 1])], [("y", F, None)])
    assert shape_of(g, "y") == ("N", 512)


def test_unknown_reshape_target_still_gives_rank():
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["y"])]
    g = _load(nodes, [("x", F, [2, 6]), ("shp", I64, [3])], [("y", F, None)])
    assert shape_of(g, "y") == (None, None, None)


def test_squeeze_unsqueeze_attribute_form_before_13_and_input_form_after():
    old = _load([helper.make_node("Squeeze", ["x"], ["y"], axes=[1]),
                 helper.make_node("Unsqueeze", ["y"], ["z"], axes=[0, -1])],
                [("x", F, ["N", 1, 8])], [("z", F, None)], opset=11)
    assert shape_of(old, "y") == ("N", 8)
    assert shape_of(old, "z") == (1, "N", 8, 1)
    new = _load([helper.make_node("Squeeze", ["x", "a"], ["y"]),
                 helper.make_node("Unsqueeze", ["y", "b"], ["z"])],
                [("x", F, ["N", 1, 8])], [("z", F, None)],
                [("a", np.array([1], np.int64)), ("b", np.array([0, -1], np.int64))], opset=13)
    assert shape_of(new, "z") == (1, "N", 8, 1)
    x = np.ones((3, 1, 8), np.float32)
    assert engine.execute(new, {"x": x})["z"].shape == (1, 3, 8, 1)


def test_split_sizes_attribute_at_11_and_num_outputs_uneven_at_18():
    old = _load([helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[2, 5])],
                [("x", F, [1, 7])], [("a", F, None), ("b", F, None)], opset=11)
    assert (shape_of(old, "a"), shape_of(old, "b")) == ((1, 2), (1, 5))
    new = _load([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)],
                [("x", F, [1, 7])], [("a", F, None), ("b", F, None), ("c", F, None)], opset=18)
    assert [shape_of(new, n) for n in "abc"] == [(1, 3), (1, 3), (1, 1)]
    out = engine.execute(new, {"x": np.arange(7, dtype=np.float32).reshape(1, 7)})
    np.testing.assert_array_equal(out["c"], [[6.0]])


def test_slice_negative_step_clamps_and_infers_length():
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])]
    inits = [("s", np.array([-1], np.int64)), ("e", np.array([-100], np.int64)),
             ("a", np.array([0], np.int64)), ("st", np.array([-2], np.int64))]
    g = _load(nodes, [("x", F, [10])], [("y", F, None)], inits)
    assert shape_of(g, "y") == (5,)
    y = engine.execute(g, {"x": np.arange(10, dtype=np.float32)})["y"]
    np.testing.assert_array_equal(y, [9, 7, 5, 3, 1])


def test_slice_attribute_form_before_opset_10_and_symbolic_full_range():
    old = _load([helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[1000], axes=[1])],
                [("x", F, ["N", 6])], [("y", F, None)], opset=9)
    assert shape_of(old, "y") == ("N", 5)
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])]
    inits = [("s", np.array([0], np.int64)), ("e", np.array([2**63 - 1], np.int64)), ("a", np.array([0], np.int64))]
    g = _load(nodes, [("x", F, ["N", 6])], [("y", F, None)], inits)
    assert shape_of(g, "y") == ("N", 6)


def test_expand_with_symbolic_target_from_shape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Expand", ["b", "s"], ["y"])]
    g = _load(nodes, [("x", F, ["N", 4]), ("b", F, [1, 4])], [("y", F, None)])
    assert shape_of(g, "y") == ("N", 4)


def test_shape_start_end_is_static_even_with_symbolic_batch():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1),
             helper.make_node("Concat", ["m1", "s"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"]),
             helper.make_node("Size", ["w"], ["n"])]
    g = _load(nodes, [("x", F, ["N", 3, 4]), ("w", F, [2, 5])], [("y", F, None), ("n", I64, None)],
              [("m1", np.array([-1], np.int64))], opset=15)
    assert shape_of(g, "t") == (3,)
    assert shape_of(g, "y") == ("N", 3, 4)
    assert engine.execute(g, {"x": np.zeros((2, 3, 4), np.float32), "w": np.zeros((2, 5), np.float32)})["n"] == 10


def test_pad_attribute_form_before_11_and_input_form_with_axes():
    old = _load([helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 2], mode="edge")],
                [("x", F, [2, 3])], [("y", F, None)], opset=10)
    assert shape_of(old, "y") == (2, 6)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(engine.execute(old, {"x": x})["y"], np.pad(x, [(0, 0), (1, 2)], mode="edge"))
    new = _load([helper.make_node("Pad", ["x", "p", "v", "a"], ["y"], mode="constant")],
                [("x", F, [2, 3])], [("y", F, None)],
                [("p", np.array([1, -1], np.int64)), ("v", np.array(9.0, np.float32)),
                 ("a", np.array([-1], np.int64))], opset=18)
    assert shape_of(new, "y") == (2, 3)
    np.testing.assert_array_equal(engine.execute(new, {"x": x})["y"], [[9, 0, 1], [9, 3, 4]])


@pytest.mark.parametrize("mode", ["reflect", "wrap"])
def test_pad_reflect_and_wrap_match_numpy(mode):
    g = _load([helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)], [("x", F, [3, 4])], [("y", F, None)],
              [("p", np.array([1, 2, 1, 3], np.int64))], opset=19)
    x = np.random.rand(3, 4).astype(np.float32)
    np.testing.assert_array_equal(engine.execute(g, {"x": x})["y"], np.pad(x, [(1, 1), (2, 3)], mode=mode))


def test_constant_forms_and_range_length():
    nodes = [helper.make_node("Constant", [], ["lim"], value_int=10),
             helper.make_node("Constant", [], ["f"], value_floats=[1.0, 2.0]),
             helper.make_node("Range", ["start", "lim", "delta"], ["r"]),
             helper.make_node("ConstantOfShape", ["shp"], ["z"],
                              value=numpy_helper.from_array(np.array([7], np.int32)))]
    g = _load(nodes, [], [("r", I64, None), ("f", F, None), ("z", TensorProto.INT32, None)],
              [("start", np.array(1, np.int64)), ("delta", np.array(3, np.int64)), ("shp", np.array([2, 3], np.int64))])
    assert shape_of(g, "r") == (3,)
    assert g.lookup("f").type.dtype == np.float32
    out = engine.execute(g, {})
    np.testing.assert_array_equal(out["r"], [1, 4, 7])
    assert out["z"].dtype == np.int32
    assert out["z"].shape == (2, 3)


def test_dropout_is_identity_in_inference_and_seeded_in_training():
    g = _load([helper.make_node("Dropout", ["x"], ["y", "m"])], [("x", F, ["N", 4])],
              [("y", F, None), ("m", TensorProto.BOOL, None)], opset=13)
    assert g.lookup("m").type.dtype == np.bool_
    x = np.random.rand(2, 4).astype(np.float32)
    out = engine.execute(g, {"x": x})
    np.testing.assert_array_equal(out["y"], x)
    assert out["m"].all()
    tr = _load([helper.make_node("Dropout", ["x", "r", "t"], ["y"], seed=3)], [("x", F, [100])], [("y", F, None)],
               [("r", np.array(0.5, np.float32)), ("t", np.array(True))], opset=13)
    x = np.ones(100, np.float32)
    y1, y2 = (engine.execute(tr, {"x": x})["y"] for _ in range(2))
    np.testing.assert_array_equal(y1, y2)
    assert set(np.unique(y1)) <= {0.0, 2.0}
    assert 0 < np.count_nonzero(y1) < 100


def test_trilu_center_crop_pad_and_reverse_sequence():
    nodes = [helper.make_node("Trilu", ["x", "k"], ["u"], upper=1),
             helper.make_node("CenterCropPad", ["x", "cs"], ["c"]),
             helper.make_node("ReverseSequence", ["x", "lens"], ["r"], batch_axis=1, time_axis=0)]
    g = _load(nodes, [("x", F, [3, 3])], [("u", F, None), ("c", F, None), ("r", F, None)],
              [("k", np.array(1, np.int64)), ("cs", np.array([2, 5], np.int64)), ("lens", np.array([1, 2, 3], np.int64))])
    assert shape_of(g, "c") == (2, 5)
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    out = engine.execute(g, {"x": x})
    np.testing.assert_array_equal(out["u"], np.triu(x, 1))
    np.testing.assert_array_equal(out["c"], [[0, 0, 1, 2, 0], [0, 3, 4, 5, 0]])
    np.testing.assert_array_equal(out["r"], [[0, 4, 8], [3, 1, 5], [6, 7, 2]])


def test_position_ids_range_over_a_symbolic_sequence_length():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["seq"]),
             helper.make_node("Range", ["zero", "seq", "one"], ["pos"])]
    g = _load(nodes, [("x", F, ["B", "S", 8])], [("pos", I64, None)],
              [("one", np.array(1, np.int64)), ("zero", np.array(0, np.int64))])
    assert shape_of(g, "pos") == ("S",)
    np.testing.assert_array_equal(engine.execute(g, {"x": np.zeros((1, 4, 8), np.float32)})["pos"], [0, 1, 2, 3])
