"""Lowerings before placement: each keeps the numbers (executor on the lowered graph vs
onnxruntime on the original model), fires only where the target's NPU needs it, and its
lowered form runs on the ethos-u55 NPU."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from engine.hw.target import resolve_target
from engine.passes.lower_npu import lower_for_target
from engine.place.support import node_verdict
from tests.engine.passes_util import feeds_for, load, model, op_types, rand

U55 = resolve_target("ethos-u55")


def _lower(proto: onnx.ModelProto, target=U55, disabled=()):
    from engine.ir.clone import clone_graph

    g = load(proto)
    run = lower_for_target(clone_graph(g), target, disabled)
    return g, run


def _same_as_onnxruntime(proto: onnx.ModelProto, lowered, rtol: float = 1e-5) -> None:
    import onnxruntime as ort

    import engine

    feeds = feeds_for(load(proto))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    got = engine.execute(lowered, feeds)
    assert list(got) == list(want)
    for name, w in want.items():
        scale = max(float(np.max(np.abs(w))), 1e-6)
        assert got[name].shape == w.shape
        assert float(np.max(np.abs(got[name] - w))) <= rtol * scale, name


def _fired(run, rule):
    return [e for r in run.trace for e in r.fired if e.rule == rule]


def _all_on_npu(graph, target=U55):
    return {n.name: node_verdict(n, target).reason for n in graph.nodes if not node_verdict(n, target).supported}


def test_rank3_matmul_by_a_weight_becomes_a_2d_matmul_between_reshapes():
    proto = model("""
        agraph (float[1,6,16] x) => (float[1,6,8] y) {
            y = MatMul (x, W)
        }""", W=rand(16, 8))
    g, run = _lower(proto)
    assert not node_verdict(g.nodes[0], U55).supported  # the rank-3 FC falls back as it is
    assert op_types(run.graph) == ["Reshape", "MatMul", "Reshape"]
    ev = _fired(run, "lower_matmul.rank3_weight")
    assert len(ev) == 1 and ev[0].nodes == [g.nodes[0].name]
    assert all(n.meta["provenance"] == [g.nodes[0].name] for n in run.graph.nodes)
    assert run.graph.outputs[0].name == "y"
    assert _all_on_npu(run.graph) == {}
    _same_as_onnxruntime(proto, run.graph)


def test_matmul_of_two_activations_stays_a_batch_matmul_on_the_npu():
    proto = model("""
        agraph (float[1,4,6,8] a, float[1,4,8,5] b) => (float[1,4,6,5] y) {
            y = MatMul (a, b)
        }""")
    _g, run = _lower(proto)
    assert op_types(run.graph) == ["MatMul"]  # no spatial ops: TFLite keeps ONNX's axis order
    assert _all_on_npu(run.graph) == {}


def test_batch_matmul_in_a_cnn_becomes_rank3_for_tflite():
    proto = model("""
        agraph (float[1,4,6,6] x, float[1,4,6,6] b) => (float[1,4,6,6] y) {
            c = Conv <pads=[1,1,1,1]> (x, W)
            y = MatMul (c, b)
        }""", W=rand(4, 4, 3, 3))
    _g, run = _lower(proto)
    assert Counter(op_types(run.graph)) == {"Conv": 1, "Reshape": 3, "MatMul": 1}
    assert len(_fired(run, "lower_matmul.batch_rank3")) == 1
    _same_as_onnxruntime(proto, run.graph)


def test_global_average_pool_becomes_a_whole_map_average_pool_on_the_npu():
    proto = model("""
        agraph (float[1,8,7,5] x) => (float[1,8,1,1] y) {
            y = GlobalAveragePool (x)
        }""")
    g, run = _lower(proto)
    assert op_types(run.graph) == ["AveragePool"]
    node = run.graph.nodes[0]
    assert node.attrs["kernel_shape"] == [7, 5] and node.meta["provenance"] == [g.nodes[0].name]
    assert node.name == g.nodes[0].name
    assert _all_on_npu(run.graph) == {}
    _same_as_onnxruntime(proto, run.graph)


def test_global_average_pool_too_large_for_a_pool_window_becomes_reduce_mean():
    for opset in (13, 18):  # axes as an attribute, then as an input
        proto = model("""
            agraph (float[1,4,300,3] x) => (float[1,4,1,1] y) {
                y = GlobalAveragePool (x)
            }""", opset=opset)
        _, run = _lower(proto)
        assert op_types(run.graph) == ["ReduceMean"], opset  # kernel 300 > the U55's 256
        assert _all_on_npu(run.graph) == {}
        _same_as_onnxruntime(proto, run.graph)


def test_division_by_a_constant_becomes_multiplication_by_its_reciprocal():
    proto = model("""
        agraph (float[1,3,4,4] x) => (float[1,3,4,4] y) {
            y = Div (x, c)
        }""", c=np.asarray([[[2.0]], [[4.0]], [[-0.5]]], np.float32))
    _g, run = _lower(proto)
    assert op_types(run.graph) == ["Mul"]
    assert _all_on_npu(run.graph) == {}
    _same_as_onnxruntime(proto, run.graph)


def test_division_by_a_tensor_with_zeros_is_refused_with_the_reason():
    proto = model("""
        agraph (float[1,3] x) => (float[1,3] y) {
            y = Div (x, c)
        }""", c=np.asarray([2.0, 0.0, 1.0], np.float32))
    _, run = _lower(proto)
    assert op_types(run.graph) == ["Div"]
    reasons = [e.reason for r in run.trace for e in r.not_fired if e.rule == "lower_div.const"]
    assert reasons == ["the divisor has zeros"]


def test_standalone_batchnorm_becomes_mul_add_per_channel():
    proto = model("""
        agraph (float[1,4,5,5] x) => (float[1,4,5,5] y) {
            y = BatchNormalization <epsilon=0.001> (x, s, b, m, v)
        }""", s=rand(4), b=rand(4), m=rand(4), v=rand(4, positive=True))
    g, run = _lower(proto)
    assert op_types(run.graph) == ["Mul", "Add"]
    assert not node_verdict(g.nodes[0], U55).supported
    assert _all_on_npu(run.graph) == {}
    _same_as_onnxruntime(proto, run.graph)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "HardSwish"])
def test_unary_functions_are_marked_as_lookup_tables_the_npu_runs(op):
    proto = model(f"""
        agraph (float[1,16] x) => (float[1,16] y) {{
            y = {op} (x)
        }}""", opset=14)
    _, run = _lower(proto)
    node = run.graph.nodes[0]
    assert node.op_type == op and node.meta["npu_form"] == "LUT"
    assert len(_fired(run, "lower_lut.mark")) == 1
    _same_as_onnxruntime(proto, run.graph)


def test_a_target_whose_npu_runs_the_op_keeps_it():
    proto = model("""
        agraph (float[1,8,4,4] x) => (float[1,8,1,1] y) {
            y = GlobalAveragePool (x)
        }""")
    target = U55.with_ops({**U55.ops, "GlobalAveragePool": {}})
    _, run = _lower(proto, target)
    assert op_types(run.graph) == ["GlobalAveragePool"]
    assert not [e for r in run.trace for e in r.not_fired]  # a node the NPU runs is no candidate


def test_a_lowering_can_be_switched_off_by_name():
    proto = model("""
        agraph (float[1,8,4,4] x) => (float[1,8,1,1] y) {
            y = GlobalAveragePool (x)
        }""")
    _, run = _lower(proto, disabled=("lower_global_pool",))
    assert op_types(run.graph) == ["GlobalAveragePool"]


def test_standalone_hardsigmoid_becomes_mul_add_clip():
    proto = model("""
        agraph (float[1,4,5,5] x) => (float[1,4,5,5] y) {
            y = HardSigmoid <alpha=0.25, beta=0.4> (x)
        }""")
    g, run = _lower(proto)
    assert not node_verdict(g.nodes[0], U55).supported
    assert op_types(run.graph) == ["Mul", "Add", "Clip"]
    assert _all_on_npu(run.graph) == {}
    _same_as_onnxruntime(proto, run.graph)
