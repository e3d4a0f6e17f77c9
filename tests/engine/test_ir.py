"""The IR: round trips through onnx_io, use-def links, events."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.ir import events
from engine.ir.graph import Graph, GraphError, Node, Value
from engine.ir.onnx_io import from_onnx, to_onnx
from nodes.types import TensorType
from tests.models import tiny_add_mul, with_initializer


def _rich_model() -> onnx.ModelProto:
    """Constant node, initializer, attributes of several types, metadata and an If subgraph."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "k"], ["t_out"], name="then_add")], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "k"], ["e_out"], name="else_sub")], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2])])
    nodes = [
        helper.make_node("Constant", [], ["k"], name="const_k",
                         value=numpy_helper.from_array(np.array([1.0, 2.0], np.float32))),
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("LeakyRelu", ["y"], ["z"], name="act", alpha=0.25),
    ]
    g = helper.make_graph(nodes, "rich", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
                          initializer=[numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
    helper.set_model_props(m, {"author": "npu-studio tests", "license": "MIT"})
    return m


def test_round_trip_preserves_names_attributes_constants_metadata_and_subgraphs():
    m = _rich_model()
    back = to_onnx(from_onnx(m))
    onnx.checker.check_model(back, full_check=True)
    assert [n.name for n in back.graph.node] == [n.name for n in m.graph.node]
    assert [n.op_type for n in back.graph.node] == [n.op_type for n in m.graph.node]
    act = next(n for n in back.graph.node if n.name == "act")
    assert helper.get_attribute_value(act.attribute[0]) == pytest.approx(0.25)
    assert act.attribute[0].type == onnx.AttributeProto.FLOAT
    assert {p.key: p.value for p in back.metadata_props} == {"author": "npu-studio tests", "license": "MIT"}
    assert [(o.domain, o.version) for o in back.opset_import] == [("", 17)]
    branch = next(n for n in back.graph.node if n.op_type == "If")
    then_g = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert [n.name for n in then_g.node] == ["then_add"]
    assert [t.name for t in back.graph.initializer] == ["zero"]
    const = next(n for n in back.graph.node if n.op_type == "Constant")
    np.testing.assert_array_equal(numpy_helper.to_array(const.attribute[0].t), [1.0, 2.0])


def test_subgraph_reads_outer_scope_value_through_use_def():
    g = from_onnx(_rich_model())
    k = g.values["k"]
    users = {n.name for n, _ in k.uses()}
    assert users == {"then_add", "else_sub"}
    # the If node must come after Constant k in topological order because its body reads k
    order = [n.name for n in g.toposort()]
    assert order.index("const_k") < order.index("branch")


def test_use_def_links_follow_edits():
    g = from_onnx(tiny_add_mul())
    z = g.values["z"]
    add, mul = g.node_by_name("add"), g.node_by_name("mul")
    assert z.producer() is add
    assert z.uses() == [(mul, 0)]
    x = g.values["x"]
    z.replace_all_uses_with(x)
    assert mul.inputs[0] is x
    assert z.uses() == []
    assert (mul, 0) in x.uses()


def test_remove_node_detaches_consumers_and_reinsert_restores():
    g = from_onnx(tiny_add_mul())
    add, mul = g.node_by_name("add"), g.node_by_name("mul")
    seen = []
    g.events.subscribe(seen.append)
    g.remove_node(add, detach_consumers=True)
    assert mul.inputs[0] is None
    assert any(isinstance(e, events.NodeRemoved) for e in seen)
    assert any(isinstance(e, events.EdgeChanged) and e.node is mul for e in seen)
    g.reinsert_node(add)
    mul.set_input(0, add.outputs[0])
    assert to_onnx(g).graph == to_onnx(from_onnx(tiny_add_mul())).graph


def test_events_report_attribute_changes():
    g = from_onnx(tiny_add_mul())
    seen = []
    unsubscribe = g.events.subscribe(seen.append)
    node = g.node_by_name("add")
    v0 = g.version
    node.set_attr("note", 1)
    assert seen == [events.NodeChanged(node, "note")]
    assert g.version > v0
    unsubscribe()
    node.set_attr("note", None)
    assert len(seen) == 1


def test_toposort_names_cycle_nodes():
    g = Graph("cyc")
    a, b = Value("a"), Value("b")
    g.add_node(Node("Relu", [b], [a], name="first"))
    g.add_node(Node("Relu", [a], [b], name="second"))
    with pytest.raises(GraphError, match="cycle through nodes first, second"):
        g.toposort()


def test_duplicate_value_definition_is_refused():
    g = Graph("dup")
    x = g.add_input(Value("x", TensorType(np.dtype(np.float32), (1,))))
    g.make_node("Relu", [x], output_names=["y"])
    with pytest.raises(GraphError, match="already defined"):
        g.add_node(Node("Relu", [x], [g.values["y"]], name="again"))


def test_initializer_round_trip_keeps_values():
    g = engine.load(with_initializer(value=3.0))
    assert g.initializers["c"].const.dtype == np.float32
    back = to_onnx(g)
    np.testing.assert_array_equal(numpy_helper.to_array(back.graph.initializer[0]), np.full((2, 2), 3.0, np.float32))


def test_networkx_view_is_derived_and_read_only_copy():
    from engine.ir.nx_view import to_networkx

    g = from_onnx(tiny_add_mul())
    dg = to_networkx(g)
    assert list(dg.edges) == [("add", "mul")]
    dg.remove_node("add")
    assert g.node_by_name("add") is not None


def test_shape_inference_gives_every_copy_of_a_repeated_block_the_same_static_shapes(tmp_path):
    # Two identical attention-style slices: Constant starts/ends (equal attributes, so equal
    # op signatures) feeding Slice; the second copy must see its Constants' values too.
    nodes, prev = [], "x"
    for k in range(2):
        nodes += [helper.make_node("Constant", [], [f"s{k}"], value_ints=[0], name=f"cs{k}"),
                  helper.make_node("Constant", [], [f"e{k}"], value_ints=[8], name=f"ce{k}"),
                  helper.make_node("Constant", [], [f"a{k}"], value_ints=[2], name=f"ca{k}"),
                  helper.make_node("Slice", [prev, f"s{k}", f"e{k}", f"a{k}"], [f"y{k}"], name=f"slice{k}"),
                  helper.make_node("Relu", [f"y{k}"], [f"r{k}"], name=f"relu{k}"),
                  helper.make_node("Concat", [f"r{k}", f"r{k}"], [f"c{k}"], axis=2, name=f"cat{k}")]
        prev = f"c{k}"
    g = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4, 16])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "blocks.onnx")
    graph = engine.load(tmp_path / "blocks.onnx")
    shapes = {v.name: v.type.shape for n in graph.nodes for v in n.outputs}
    assert shapes["y0"] == shapes["y1"] == (1, 4, 8)
    assert shapes["c0"] == shapes["c1"] == (1, 4, 16)
