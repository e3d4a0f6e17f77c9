"""Sequences and optionals: the ops, loop-carried sequences and the types' file round trip."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.errors import ExecutionError
from engine.ir.onnx_io import from_onnx, to_onnx
from nodes.types import OptionalType, SequenceType
from tests.nodes._build import load_graph

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _seq_vi(name, elem, shape):
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, shape)))


def test_split_insert_erase_concat_give_back_the_tensor():
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["s"], axis=1),
        helper.make_node("SequenceInsert", ["s", "x"], ["s2"]),  # appended ...
        helper.make_node("SequenceErase", ["s2"], ["s3"]),       # ... and erased again (default: last)
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("SequenceAt", ["s3", "minus_one"], ["last"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["y"], axis=1),
    ]
    g = load_graph(nodes, [("x", F, [2, 5])], ["y", "n", "last"],
                   inits=[("sizes", np.array([2, 3], np.int64)), ("minus_one", np.array(-1, np.int64))])
    assert isinstance(g.lookup("s3").type, SequenceType)
    assert g.lookup("s3").type.elem.dtype == np.float32
    assert g.lookup("y").type.dtype == np.float32
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    out = engine.execute(g, {"x": x})
    np.testing.assert_array_equal(out["y"], x)
    assert int(out["n"]) == 2
    np.testing.assert_array_equal(out["last"], x[:, 2:])


def _loop_collecting_model():
    """A Loop whose carried state is a sequence: appends i * x each iteration, then stacks."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["scaled"]),  # x is read from the outer scope
         helper.make_node("SequenceInsert", ["seq_in", "scaled"], ["seq_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         _seq_vi("seq_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _seq_vi("seq_out", F, [3])])
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["trip", "", "empty"], ["collected"], body=body),
        helper.make_node("ConcatFromSequence", ["collected"], ["y"], axis=0, new_axis=1),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [3])],
                              [helper.make_tensor_value_info("y", F, [4, 3])],
                              initializer=[numpy_helper.from_array(np.array(4, np.int64), "trip")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_loop_carrying_a_sequence_matches_onnxruntime():
    model = _loop_collecting_model()
    x = np.array([1.0, -2.0, 0.5], np.float32)
    ours = engine.execute(engine.load(model), {"x": x})["y"]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert ours.shape == (4, 3)
    np.testing.assert_allclose(ours, ref)


def test_sequence_and_optional_types_survive_writing_and_reading():
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    nodes = [helper.make_node("Optional", ["x"], ["o"]),
             helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("SequenceConstruct", ["x", "x"], ["s"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_value_info("o", opt_type), _seq_vi("s", F, [2]),
                               helper.make_tensor_value_info("has", TensorProto.BOOL, [])])
    g = engine.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    proto = to_onnx(g)
    outs = {o.name: o.type for o in proto.graph.output}
    assert outs["o"].optional_type.elem_type.tensor_type.elem_type == F
    assert outs["s"].sequence_type.elem_type.tensor_type.elem_type == F
    back = from_onnx(proto)
    assert back.lookup("o").type == OptionalType(elem=g.lookup("x").type)
    assert isinstance(back.lookup("s").type, SequenceType)
    assert ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]) is not None
    res = engine.execute(back, {"x": np.ones(2, np.float32)})
    assert bool(res["has"]) and isinstance(res["s"], list) and len(res["s"]) == 2


def test_an_empty_optional_has_no_element_and_getting_it_is_an_error():
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    nodes = [helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, [2])),
             helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalGetElement", ["o"], ["y"])]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                                               helper.make_tensor_value_info("y", F, [2])],
                              value_info=[helper.make_value_info("o", opt)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    g = engine.load(model, check=False)
    assert isinstance(g.lookup("o").type, OptionalType)
    with pytest.raises(ExecutionError, match="empty optional"):
        engine.execute(g, {})


def test_sequence_at_past_the_end_names_the_position():
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]
    g = load_graph(nodes, [("x", F, [2])], ["y"], inits=[("p", np.array(3, np.int64))])
    with pytest.raises(ExecutionError, match="position 3 is out of range"):
        engine.execute(g, {"x": np.ones(2, np.float32)})
