"""Quantization end to end: our simulation of the QDQ model agrees with onnxruntime running it."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import engine
from engine.ir.onnx_io import to_onnx
from engine.quant.api import quantize
from engine.quant.cli import optimize_for_quantization
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet, load_calibration
from tests.engine.cli_util import run_cli
from tests.models import ASSETS, LIGHT_DIR, demo_model


def _session(model: onnx.ModelProto, optimized: bool = True) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _sqnr(ref, got):
    ref = np.asarray(ref, np.float64)
    err = ((ref - got) ** 2).sum()
    return np.inf if err == 0 else 10 * np.log10((ref**2).sum() / err)


def _agreement(graph, data, config, feeds, optimized=True):
    r = quantize(optimize_for_quantization(graph), data, config, analysis_samples=0)
    model = to_onnx(r.graph)
    onnx.checker.check_model(model, full_check=True)
    sess = _session(model, optimized)
    worst = np.inf
    for k, v in enumerate(r.graph.outputs):
        ours = np.concatenate([engine.execute(r.graph, f)[v.name] for f in feeds])
        theirs = np.concatenate([sess.run(None, f)[k] for f in feeds])
        worst = min(worst, _sqnr(theirs, ours))
    return worst, r


DEMOS = {
    "digits_cnn": "digits_calib.npz",
    "mobilenet_demo": "mobilenet_calib.npz",
    "transformer_demo": "transformer_calib.npz",
}


def _demo(name: str, calib: int, feeds: int):
    """A bundled demo model (the test skips when it is missing), ``calib`` samples of its
    calibration set and the first ``feeds`` of them as inputs."""
    path = demo_model(name)
    if not path.exists():
        pytest.skip(f"{path} missing")
    g = engine.load(path)
    data = load_calibration(ASSETS / "data" / DEMOS[name], g).take(calib)
    return g, data, [data.sample(i) for i in range(feeds)]


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_simulation_matches_onnxruntime_integer_kernels(name):
    """>= 40 dB on every output. Weights use 7 bits (reduce_range): this x86 CPU lacks VNNI and
    onnxruntime's u8*s8 kernels add product pairs in saturating int16, which 8-bit weights overflow."""
    g, data, feeds = _demo(name, calib=16, feeds=8)
    sq, _ = _agreement(g, data, QuantConfig(method="percentile", per_channel=True, reduce_range=True), feeds)
    assert sq >= 40, f"{name}: ours vs onnxruntime {sq:.1f} dB"


@pytest.mark.parametrize("name", sorted(DEMOS))
def test_full_8bit_weights_match_onnxruntime_qdq_semantics(name):
    g, data, feeds = _demo(name, calib=8, feeds=4)
    sq, _ = _agreement(g, data, QuantConfig(method="minmax", per_channel=True), feeds, optimized=False)
    assert sq >= 60, f"{name}: ours vs onnxruntime (QDQ in float) {sq:.1f} dB"


def test_light_resnet50_simulation_matches_onnxruntime():
    g = engine.load(LIGHT_DIR / "light_resnet50.onnx")
    rng = np.random.default_rng(0)
    x = rng.random((3, 1, 3, 224, 224), dtype=np.float32)
    data = CalibrationSet.from_arrays("random", {g.inputs[0].name: x})
    sq, r = _agreement(g, data, QuantConfig(method="minmax", per_channel=True, reduce_range=True), [data.sample(0)])
    assert sq >= 40, f"resnet50: {sq:.1f} dB"
    assert r.graph.opset("") >= 13


def test_report_has_contract_keys_and_per_layer_errors():
    g = engine.load(demo_model("digits_cnn"))
    data = load_calibration(ASSETS / "data" / "digits_calib.npz", g).take(32)
    r = quantize(optimize_for_quantization(g), data, QuantConfig(method="entropy", per_channel=True),
                 analysis_samples=4)
    doc = r.report()
    assert {"method", "per_channel", "dtype", "samples", "layers", "outputs"} <= set(doc)
    assert doc["method"] == "entropy" and doc["samples"] == 32
    convs = [row for row in doc["layers"] if row["op_type"] == "Conv"]
    assert len(convs) == 2
    for row in doc["layers"]:
        assert {"node", "op_type", "dtype", "cosine", "max_abs_err", "sqnr_db"} <= set(row)
        assert -1 <= row["cosine"] <= 1
        assert row["sqnr_db"] > 10
    out = doc["outputs"][g.outputs[0].name]
    assert out["cosine"] > 0.99


def test_accumulated_error_is_at_least_isolated_error_downstream():
    g = engine.load(demo_model("digits_cnn"))
    data = load_calibration(ASSETS / "data" / "digits_calib.npz", g).take(16)
    r = quantize(optimize_for_quantization(g), data, QuantConfig(), analysis_samples=8)
    last = r.analysis.layers[-1]
    assert last.accumulated.sqnr_db <= last.isolated.sqnr_db + 1.0
    assert r.analysis.sensitivity()[0].isolated.sqnr_db <= r.analysis.sensitivity()[-1].isolated.sqnr_db


def test_cli_quantize_writes_qdq_model_and_report(tmp_path):
    rc, _, err = run_cli(["quantize", str(demo_model("digits_cnn")), "--calib", str(ASSETS / "data" / "digits_calib.npz"),
                            "-o", str(tmp_path / "q.onnx"), "--method", "percentile", "--per-channel",
                            "--report", str(tmp_path / "r.json"), "--max-samples", "24"])
    assert rc == 0, err
    model = onnx.load(str(tmp_path / "q.onnx"))
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["samples"] == 24 and doc["per_channel"] is True
    x = np.load(ASSETS / "data" / "digits_test.npz")["x"][:1]
    _session(model).run(None, {"x": x})


def test_cli_quantize_model_without_quantizable_op_is_exit_2(tmp_path):
    g = helper.make_graph([helper.make_node("Sin", ["x"], ["y"], name="s")], "noq",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "noq.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.savez(tmp_path / "c.npz", x=np.zeros((2, 1, 4), np.float32))
    rc, _, err = run_cli(["quantize", str(path), "--calib", str(tmp_path / "c.npz"), "-o", str(tmp_path / "o.onnx"),
                          "--no-optimize"])
    assert rc == 2
    assert "no quantizable op" in err and err.count("\n") == 1
    assert not (tmp_path / "o.onnx").exists()


def test_mixed_precision_raises_sensitive_layers_until_target(tmp_path):
    base_target = 42.0
    rc, _, err = run_cli(["quantize", str(demo_model("mobilenet_demo")), "--calib",
                          str(ASSETS / "data" / "mobilenet_calib.npz"), "-o", str(tmp_path / "mp.onnx"),
                          "--target-sqnr", str(base_target), "--target", "phone-npu", "--raise-to", "int16",
                          "--report", str(tmp_path / "r.json"),
                          "--quiet", "--analysis-samples", "8"])
    assert rc == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    mp = doc["mixed_precision"]
    assert mp["reached"] and mp["target_sqnr_db"] == base_target
    assert mp["raised"], "the int8 model alone should not reach the target"
    assert all(r["to"] == "int16" and r["latency_us_delta"] is not None for r in mp["raised"])
    raised = {n for r in mp["raised"] for n in r["nodes"]}  # each raise moves a group of ops
    assert {n for n, p in doc["precision"].items() if p == "int16"} == raised
    assert mp["output_sqnr_db"] >= base_target
    # the gains add up from the int8 figure to the final one, and the latency from int8 to final
    assert sum(r["db_gain"] for r in mp["raised"]) == pytest.approx(mp["output_sqnr_db"] - mp["start_sqnr_db"], abs=0.01)
    assert mp["latency_us"]["final"] == pytest.approx(
        mp["latency_us"]["int8"] + sum(r["latency_us_delta"] for r in mp["raised"]), abs=0.01)
    model = onnx.load(str(tmp_path / "mp.onnx"))
    assert model.opset_import[0].version >= 21  # int16 QDQ needs opset 21
    _session(model).run(None, {"image": np.load(ASSETS / "data" / "mobilenet_calib.npz")["image"][0]})


def test_low_output_sqnr_is_one_warning_naming_the_layer_and_the_fix(tmp_path):
    """One calibration value of 1e4 among 16k normal ones stretches a minmax range so far that
    the normal values quantize to zero; percentile clips it and the warning goes away, and so
    does ``--method auto``, which picks the clipping range for that tensor."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "outlier",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                          [onnx.numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    x = rng.standard_normal((64, 1, 4, 8, 8)).astype(np.float32)
    x[-1, 0, 0, 0, 0] = 1e4  # analysed are the first 8 samples, calibrated are all 64
    np.savez(tmp_path / "c.npz", x=x)
    args = ["quantize", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "c.npz"), "-o", str(tmp_path / "q.onnx"),
            "--quiet", "--per-channel", "--analysis-samples", "8", "--report", str(tmp_path / "r.json")]
    rc, _, err = run_cli([*args, "--method", "auto"])
    assert rc == 0 and "warning:" not in err, err
    rc, _, err = run_cli(args)  # the defaults: minmax, no PTQ algorithm
    assert rc == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, err
    assert "below 20 dB" in warnings[0] and "conv (Conv" in warnings[0] and "--method percentile" in warnings[0]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["outputs"]["y"]["sqnr_db"] < 20
    assert [d["code"] for d in doc["diagnostics"]] == ["low-sqnr"]
    rc, _, err = run_cli([*args, "--method", "percentile"])  # the fix it names removes the warning
    assert rc == 0 and "warning:" not in err, err


def test_raising_a_layer_on_a_tflite_target_keeps_the_activations_it_does_not_fuse():
    """An int16 raise rebuilds the model at opset 21; fusing activations back must not fuse the
    HardSwish that TFLite mode keeps as its own op (its input would vanish from the analysis)."""
    import dataclasses

    from engine.compiler import CompileOptions, compile_model

    g = engine.load(demo_model("mobilenet_demo"))
    data = load_calibration(ASSETS / "data" / "mobilenet_calib.npz", g).take(4)
    first = compile_model(g, "ethos-u55", data, CompileOptions(analysis_samples=2))
    hswish = next(n for n in first.quant.model.node_precision if "HardSwish" in n)
    quant = dataclasses.replace(first.options.quant, precision={hswish: "int16"})
    raised = compile_model(g, "ethos-u55", data, CompileOptions(analysis_samples=2, quant=quant))
    assert raised.quant.model.node_precision[hswish] == "int16"
    assert {le.node for le in raised.quant.analysis.layers} == {le.node for le in first.quant.analysis.layers}


def test_opset9_softmax_on_4d_quantizes_like_squeezenet():
    """light_squeezenet (opset 9) ends Conv -> GlobalAveragePool -> Softmax(axis=1) on a 4-D
    tensor; raising it to opset 13 for QDQ rewrites the Softmax as Flatten -> Softmax -> Reshape
    with a new value calibration never saw, and quantize failed with "not calibrated"."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Softmax", ["p"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "sq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
                          [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 7
    data = CalibrationSet.from_arrays("random", {"x": rng.random((4, 1, 3, 8, 8), dtype=np.float32)})
    res = quantize(engine.load(model), data, QuantConfig())
    out = ort.InferenceSession(to_onnx(res.model.graph).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": data._make(0)["x"]})[0]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": data._make(0)["x"]})[0]
    assert out.shape == (1, 8, 1, 1)
    assert _sqnr(ref, out) > 20
