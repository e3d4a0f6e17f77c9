"""The quantizer inside If/Loop bodies: body tensors are calibrated (every Loop iteration),
body MatMuls get Q/DQ, onnxruntime runs the result and agrees with our executor, and a
branch that never ran on the calibration data stays in float with a warning."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.ir.onnx_io import to_onnx
from engine.quant.api import quantize
from engine.quant.calibrate import calibrate
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
RNG = np.random.default_rng(11)
W1 = RNG.standard_normal((8, 8)).astype(np.float32) * 0.4
W2 = RNG.standard_normal((8, 8)).astype(np.float32) * 0.4


def _vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def _if_model():
    """y = If(c) then Relu(x @ W1) @ W2 else x @ W2 (W2 captured from the outer scope)."""
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="then_mm1"),
         helper.make_node("Relu", ["h"], ["hr"], name="then_relu"),
         helper.make_node("MatMul", ["hr", "w2"], ["t_out"], name="then_mm2")],
        "then", [], [_vi("t_out", F, [1, 8])], initializer=[numpy_helper.from_array(W1, "w1")])
    else_g = helper.make_graph([helper.make_node("MatMul", ["x", "w2"], ["e_out"], name="else_mm")],
                               "else", [], [_vi("e_out", F, [1, 8])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g,
                                            else_branch=else_g)],
                          "g", [_vi("x", F, [1, 8]), _vi("c", B, [])], [_vi("y", F, [1, 8])],
                          initializer=[numpy_helper.from_array(W2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _loop_model(trips=3):
    """A Loop that applies h = tanh(h @ W1) ``trips`` times (the MatMul is in the body)."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "w1"], ["m"], name="body_mm"),
         helper.make_node("Tanh", ["m"], ["h_out"], name="body_tanh"),
         helper.make_node("Identity", ["c_in"], ["c_out"], name="body_cond")],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("h_in", F, [1, 8])],
        [_vi("c_out", B, []), _vi("h_out", F, [1, 8])])
    g = helper.make_graph([helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)],
                          "g", [_vi("x", F, [1, 8])], [_vi("y", F, [1, 8])],
                          initializer=[numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                                       numpy_helper.from_array(W1, "w1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _data(n=12, **extra):
    arrays = {"x": RNG.standard_normal((n, 1, 8)).astype(np.float32)}
    arrays.update({k: np.stack([v] * n) for k, v in extra.items()})
    return CalibrationSet.from_arrays("random", arrays)


def _count(model, op):
    def walk(g):
        n = 0
        for node in g.node:
            n += node.op_type == op
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    n += walk(a.g)
        return n
    return walk(model.graph)


def _ort(model):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_loop_body_tensors_are_calibrated_over_every_iteration():
    g = engine.load(_loop_model(trips=3))
    data = _data(n=4)
    calib = calibrate(g, data, QuantConfig(), batch=1)
    # m is computed 3 times per sample: 4 samples x 3 iterations x 8 values
    assert calib.stats["m"].count == 4 * 3 * 8
    # h_in (a body input, loop-carried) is observed too
    assert calib.stats["h_in"].count == 4 * 3 * 8


def test_loop_body_matmul_is_quantized_and_onnxruntime_agrees():
    g = engine.load(_loop_model())
    r = quantize(g, _data(), QuantConfig())
    model = to_onnx(r.graph)
    onnx.checker.check_model(model, full_check=True)
    assert "body_mm" in r.model.node_precision
    assert _count(model, "QuantizeLinear") >= 2 and _count(model, "DequantizeLinear") >= 3
    sess = _ort(model)
    for _ in range(3):
        x = RNG.standard_normal((1, 8)).astype(np.float32)
        ours = engine.execute(r.graph, {"x": x})["y"]
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], ours, atol=1e-5)
        fp = engine.execute(g, {"x": x})["y"]
        assert np.abs(ours - fp).max() < 0.1  # quantized, but close to FP32
    row = next(le for le in r.report()["layers"] if le["node"] == "body_mm")
    assert 15 < row["sqnr_db"] < 200  # measured per iteration: a real, finite error


def test_if_branch_ops_are_quantized_and_a_branch_that_never_ran_stays_float():
    g = engine.load(_if_model())
    r = quantize(g, _data(c=np.array(True)), QuantConfig())
    assert {"then_mm1", "then_mm2"} <= set(r.model.node_precision)
    assert "else_mm" not in r.model.node_precision
    warned = [d for d in r.model.diagnostics if d.code == "not-calibrated"]
    assert [d.node for d in warned] == ["else_mm"]
    model = to_onnx(r.graph)
    onnx.checker.check_model(model, full_check=True)
    sess = _ort(model)
    for cond in (True, False):
        x = RNG.standard_normal((1, 8)).astype(np.float32)
        feeds = {"x": x, "c": np.array(cond)}
        ours = engine.execute(r.graph, feeds)["y"]
        np.testing.assert_allclose(sess.run(None, feeds)[0], ours, atol=1e-5)
        if not cond:  # the float branch computes exactly what the FP32 model does
            np.testing.assert_array_equal(ours, engine.execute(g, feeds)["y"])
    rows = {le["node"]: le for le in r.report()["layers"]}
    assert 15 < rows["then_mm2"]["sqnr_db"] < 200
