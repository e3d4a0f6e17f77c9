"""Activations fused into Conv/Gemm (and written back as standard ONNX); HardSigmoid/HardSwish."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import engine
from engine.ir.onnx_io import to_onnx
from engine.passes.fuse_activation import activation_pass, hardswish_pass
from tests.engine.passes_util import (
    assert_runs_in_onnxruntime,
    assert_same_numbers,
    fired,
    load,
    model,
    op_types,
    rand,
    refused,
    run_pass,
)

ACTS = [
    ("Relu", "a = Relu (c)", {}),
    ("Relu6", "a = Clip (c, lo, hi)", {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}),
    ("LeakyRelu", "a = LeakyRelu <alpha=0.2> (c)", {}),
    ("HardSigmoid", "a = HardSigmoid <alpha=0.3, beta=0.4> (c)", {}),
    ("HardSwish", "a = HardSwish (c)", {}),
    ("Sigmoid", "a = Sigmoid (c)", {}),
    ("Tanh", "a = Tanh (c)", {}),
    ("SiLU", "s = Sigmoid (c)\n a = Mul (c, s)", {}),
]


@pytest.mark.parametrize(("name", "body", "inits"), ACTS, ids=[a[0] for a in ACTS])
@pytest.mark.parametrize("producer", ["Conv", "Gemm"])
def test_activation_fuses_into_producer_and_writes_back_as_standard_onnx(name, body, inits, producer):
    if producer == "Conv":
        head = "agraph (float[1,3,6,6] x) => (float[1,4,6,6] y) {\n c = Conv <pads=[1,1,1,1]> (x, W, b)"
        weights = {"W": rand(4, 3, 3, 3) * 2, "b": rand(4)}
    else:
        head = "agraph (float[4,5] x) => (float[4,6] y) {\n c = Gemm <transB=1> (x, W, b)"
        weights = {"W": rand(6, 5) * 2, "b": rand(6)}
    g = load(model(f"{head}\n {body}\n y = Identity (a) }}", **weights, **inits))
    after, res = run_pass(g, activation_pass)
    assert op_types(after) == [producer, "Identity"]
    node = after.toposort()[0]
    expected = "Clip" if name == "Relu6" else name
    assert node.activation.op_type == expected
    assert len(node.meta["provenance"]) == (3 if name == "SiLU" else 2)
    assert fired(res)
    assert_same_numbers(g, after)
    # Written back: the producer, then the activation under its original name.
    m = to_onnx(after)
    written = [n.op_type for n in m.graph.node]
    assert written[0] == producer and written[-1] == "Identity"
    assert set(node.activation.names) <= {n.name for n in m.graph.node}
    assert_runs_in_onnxruntime(after, reference=g)


def test_fused_graph_round_trips_through_onnx_without_loss():
    g = load(model("""
        agraph (float[1,3,6,6] x) => (float[1,4,6,6] y) {
            c = Conv <pads=[1,1,1,1]> (x, W)
            y = Clip (c, lo, hi)
        }""", W=rand(4, 3, 3, 3), lo=np.array(0.0, np.float32), hi=np.array(6.0, np.float32)))
    after, _ = run_pass(g, activation_pass)
    assert op_types(after) == ["Conv"]
    back = engine.load(to_onnx(after))
    assert op_types(back) == ["Conv", "Clip"]
    assert [v.name for v in back.outputs] == ["y"]
    assert_same_numbers(g, back)


def test_activation_does_not_fuse_when_preactivation_is_also_read():
    g = load(model("""
        agraph (float[4,5] x) => (float[4,6] y, float[4,6] z) {
            c = Gemm (x, W)
            y = Relu (c)
            z = Neg (c)
        }""", W=rand(5, 6)))
    after, res = run_pass(g, activation_pass)
    assert op_types(after) == ["Gemm", "Relu", "Neg"]
    (ev,) = refused(res, "fuse_activation.relu")
    assert "also read by" in ev.reason


def test_clip_with_runtime_bounds_does_not_fuse():
    g = load(model("""
        agraph (float[1,3,4,4] x, float hi) => (float[1,4,4,4] y) {
            c = Conv (x, W)
            y = Clip (c, lo, hi)
        }""", W=rand(4, 3, 1, 1), lo=np.array(0.0, np.float32)))
    after, res = run_pass(g, activation_pass)
    assert op_types(after) == ["Conv", "Clip"]
    (ev,) = refused(res, "fuse_activation.clip")
    assert ev.reason == "Clip max 'hi' is not a constant scalar"


def test_second_activation_is_not_stacked():
    g = load(model("""
        agraph (float[1,3,4,4] x) => (float[1,4,4,4] y) {
            c = Conv (x, W)
            r = Relu (c)
            y = Sigmoid (r)
        }""", W=rand(4, 3, 1, 1)))
    after, res = run_pass(g, activation_pass)
    assert op_types(after) == ["Conv", "Sigmoid"]
    assert refused(res, "fuse_activation.sigmoid")[0].reason.endswith("already carries a fused Relu")
    assert_same_numbers(g, after)


SIX, THREE = np.array(6.0, np.float32), np.array(3.0, np.float32)
ZERO = np.array(0.0, np.float32)


@pytest.mark.parametrize("body", [
    "h = HardSigmoid <alpha=0.16666667, beta=0.5> (x)\n y = Mul (x, h)",
    "a = Add (x, three)\n cl = Clip (a, zero, six)\n m = Mul (x, cl)\n y = Div (m, six)",
    "a = Add (x, three)\n cl = Clip (a, zero, six)\n d = Div (cl, six)\n y = Mul (d, x)",
])
def test_hardswish_patterns_become_one_node(body):
    g = load(model(f"agraph (float[2,8] x) => (float[2,8] y) {{ {body} }}", opset=14,
                   three=THREE, six=SIX, zero=ZERO))
    after, res = run_pass(g, hardswish_pass)
    assert op_types(after) == ["HardSwish"]
    assert fired(res, "fuse_hardswish.hardswish")
    assert_same_numbers(g, after)


def test_hardsigmoid_from_clip():
    g = load(model("""
        agraph (float[2,8] x) => (float[2,8] y) {
            a = Add (x, three)
            cl = Clip (a, zero, six)
            y = Div (cl, six)
        }""", three=THREE, six=SIX, zero=ZERO))
    after, _ = run_pass(g, hardswish_pass)
    assert op_types(after) == ["HardSigmoid"]
    assert_same_numbers(g, after)


def test_hardswish_raises_the_opset_when_safe():
    g = load(model("""
        agraph (float[2,8] x) => (float[2,8] y) {
            h = HardSigmoid <alpha=0.16666667, beta=0.5> (x)
            y = Mul (x, h)
        }""", opset=13))
    after, _ = run_pass(g, hardswish_pass)
    assert op_types(after) == ["HardSwish"]
    assert after.opset("") == 14
    onnx.checker.check_model(to_onnx(after), full_check=True)
    assert_same_numbers(g, after)


def test_hardswish_stays_decomposed_when_the_opset_cannot_be_raised():
    g = load(model("""
        agraph (float[2,8] x) => (float[2,8] y) {
            h = HardSigmoid <alpha=0.16666667, beta=0.5> (x)
            m = Mul (x, h)
            y = Softmax <axis=0> (m)
        }""", opset=11))
    after, res = run_pass(g, hardswish_pass)
    assert op_types(after) == ["HardSigmoid", "Mul", "Softmax"]
    assert after.opset("") == 11
    (ev,) = refused(res, "fuse_hardswish.hardswish")
    assert "Softmax" in ev.reason and "opset 13" in ev.reason


def test_a_fused_activation_is_validated_when_made():
    from engine.ir.fused import FusedActivation

    with pytest.raises(ValueError, match="not a fusable activation"):
        FusedActivation("Softmax")
    with pytest.raises(ValueError, match="no attribute 'alpha'"):
        FusedActivation("Relu", {"alpha": 0.1})
    act = FusedActivation("Clip", {"min": 0, "max": 6}, ["relu6"])
    assert act.attrs == {"min": 0.0, "max": 6.0} and act.names == ("relu6",)
    assert FusedActivation("SiLU").onnx_nodes == 2 and act.onnx_nodes == 1
