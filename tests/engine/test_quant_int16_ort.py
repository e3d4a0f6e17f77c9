"""An int16-raised layer in our QDQ model computes the same in onnxruntime's default session as in
our simulation (onnxruntime's WeightBiasQuantization once turned its float bias into -2^31)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.ir.onnx_io import to_onnx
from engine.quant.analysis import ErrorStats
from engine.quant.api import quantize
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet


def _two_convs() -> onnx.ModelProto:
    """x -> Conv(3->8, 3x3, bias ~N(0, 10)) -> Relu -> Conv(8->4, 1x1, bias up to 40) -> y: biases
    of several units, as trained Convs carry after BatchNorm folding."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 10, 8).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)
    b2 = np.array([40.0, -25.0, 12.0, -8.0], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [numpy_helper.from_array(a, n) for n, a in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    stats = ErrorStats()
    stats.update(ref, got)
    return stats.sqnr_db


@pytest.mark.parametrize("raise_", ["conv1", "all"])
def test_an_int16_raised_conv_runs_in_onnxruntime_default_session_as_we_simulate_it(raise_):
    """One Conv raised to int16 (the mixed search's move) and the whole model at int16: onnxruntime
    at its default optimization level agrees with our executor >= 40 dB on every sample, as it
    does with its optimizations off (before: its default session gave ~-3 dB, the big biases'
    signs flipped)."""
    g = engine.load(_two_convs())
    rng = np.random.default_rng(1)
    xs = rng.normal(0, 1, (12, 1, 3, 8, 8)).astype(np.float32)
    data = CalibrationSet.from_arrays("test", {"x": xs[:8]})
    config = QuantConfig(per_channel=True, dtype="int16") if raise_ == "all" else \
        QuantConfig(per_channel=True, precision={"conv1": "int16"})
    r = quantize(g, data, config, analysis_samples=0)
    assert r.model.node_precision["conv1"] == "int16"
    model = to_onnx(r.graph)
    onnx.checker.check_model(model, full_check=True)
    ours = np.concatenate([engine.execute(r.graph, {"x": x})["y"] for x in xs[8:]])
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL"):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        theirs = np.concatenate([sess.run(None, {"x": x})[0] for x in xs[8:]])
        assert _sqnr(theirs, ours) >= 40, f"{raise_}, onnxruntime {level}: {_sqnr(theirs, ours):.1f} dB vs ours"


def test_a_layer_kept_float_between_int8_layers_is_one_warning_naming_it_and_the_session_that_runs_it():
    """conv1 in fp32 (the CPU) between int8 Convs reads a dequantized input and feeds a quantized
    output: onnxruntime's default session quantizes its float weights to int8 per tensor (no
    standard form keeps them float there), so the result says so in one warning naming conv1 and
    the session option that runs the model as written, and the report records it."""
    import json

    from engine.quant.ort_rewrites import CODE

    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i, (ci, co) in enumerate(((3, 8), (8, 8), (8, 4))):
        inits += [numpy_helper.from_array(rng.normal(0, 0.3, (co, ci, 3, 3)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 1, co).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}" if i < 2 else "y"],
                                      pads=[1, 1, 1, 1], name=f"conv{i}"))
        if i < 2:
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    xs = rng.normal(0, 1, (12, 1, 3, 8, 8)).astype(np.float32)
    # 7-bit weights: this CPU's u8*s8 kernels saturate pair sums of 8-bit ones (test_quant_e2e)
    r = quantize(engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])),
                 CalibrationSet.from_arrays("t", {"x": xs[:8]}),
                 QuantConfig(per_channel=True, reduce_range=True, precision={"conv1": "fp32"}), analysis_samples=0)
    warnings = [d for d in r.diagnostics if d.code == CODE]
    assert len(warnings) == 1 and "conv1" in warnings[0].message and "conv0" not in warnings[0].message
    assert "disabled_optimizers=['WeightBiasQuantization']" in warnings[0].message
    assert CODE in json.dumps(r.report()["diagnostics"])
    model = to_onnx(r.graph).SerializeToString()
    ours = np.concatenate([engine.execute(r.graph, {"x": x})["y"] for x in xs[8:]])

    def theirs(disabled):
        so = ort.SessionOptions()
        so.log_severity_level, so.intra_op_num_threads = 3, 1
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)
        return np.concatenate([sess.run(None, {"x": x})[0] for x in xs[8:]])

    assert _sqnr(theirs([]), ours) < 60  # the default session changes the model (41 dB measured)
    assert _sqnr(theirs(["WeightBiasQuantization"]), ours) >= 100  # the session the warning names runs it as written
