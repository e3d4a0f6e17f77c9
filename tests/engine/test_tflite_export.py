"""int8 TFLite export: LiteRT runs it, our TFLite-rounding simulation equals LiteRT's kernels,
the tflite package reads back what plan.json says, vela compiles it for Ethos-U."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import engine
from engine.compiler import CompileOptions, compile_model
from engine.export.tflite import (
    dequantize_output,
    export_bytes,
    quantize_input,
    read_summary,
    summary_differences,
)
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.sim.fixedpoint import DOUBLE, SINGLE
from engine.sim.tflite_int import TfliteSimulator
from tests.engine.cli_util import run_cli

litert = pytest.importorskip("ai_edge_litert.interpreter")
ROOT = Path(__file__).resolve().parents[2]
DEMOS = {"digits_cnn": "digits_calib.npz", "mobilenet_demo": "mobilenet_calib.npz",
         "transformer_demo": "transformer_calib.npz", "transformer_demo+float_layernorm": "transformer_calib.npz"}
SAMPLES = 24


def _compile(key: str):
    name, _, variant = key.partition("+")
    g = engine.load(ROOT / "assets" / "models" / f"{name}.onnx")
    data = dict(np.load(ROOT / "assets" / "data" / DEMOS[key]))
    cs = CalibrationSet.from_arrays(DEMOS[key], data)
    # transformer_demo: int8 decomposed LayerNorms by default; with --allow-float-ops float islands
    r = compile_model(g, "ethos-u55", cs, CompileOptions(quant=QuantConfig(method="percentile"), analysis_samples=0,
                                                         allow_float_ops=variant == "float_layernorm",
                                                         require_tflite=True))
    inp = g.inputs[0].name
    return r, inp, data[inp][:SAMPLES, 0]


@pytest.fixture(scope="module", params=sorted(DEMOS))
def compiled(request):
    return _compile(request.param)


def _litert(buf: bytes, resolver) -> object:
    it = litert.Interpreter(model_content=buf, experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    return it


def _invoke(it, x: np.ndarray) -> np.ndarray:
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).copy()


def _sqnr(ref: np.ndarray, x: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((ref - x).astype(np.float64) ** 2)))


def test_litert_output_sqnr_is_within_half_a_db_of_the_qdq_model_in_onnxruntime(compiled):
    import onnxruntime as ort

    from engine.ir.onnx_io import to_onnx

    r, inp, xs = compiled
    tm, out = r.tflite, r.tflite.tensors[r.tflite.outputs[0]].name
    it = _litert(export_bytes(tm), litert.OpResolverType.BUILTIN_REF)
    lit = np.concatenate([dequantize_output(tm, out, _invoke(it, quantize_input(tm, inp, xs[i:i + 1])))
                          for i in range(len(xs))])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # QDQ semantics, no u8s8 kernels
    fp = ort.InferenceSession(to_onnx(r.optimized).SerializeToString())
    qdq = ort.InferenceSession(to_onnx(r.quant.graph).SerializeToString(), so)
    ref = np.concatenate([fp.run(None, {inp: xs[i:i + 1]})[0] for i in range(len(xs))])
    q = np.concatenate([qdq.run(None, {inp: xs[i:i + 1]})[0] for i in range(len(xs))])
    assert _sqnr(ref, lit) >= _sqnr(ref, q) - 0.5
    assert _sqnr(ref, lit) > 25.0


def test_tflite_rounding_simulation_equals_litert_reference_and_default_kernels(compiled):
    r, inp, xs = compiled
    tm = r.tflite
    buf = export_bytes(tm)
    out = tm.tensors[tm.outputs[0]].name
    # reference kernels: the acceptance bar; default (XNNPACK) kernels round a few values their own way
    # (0.1% of the first FULLY_CONNECTED's values in transformer_demo), and its LayerNorms spread
    # each such difference over a whole row (48 of its 64 logits agree, 62 with float LayerNorms):
    # the transformer is held to the reference kernels only
    checks = [(litert.OpResolverType.BUILTIN_REF, DOUBLE, 0.999)]
    if not any(o.opcode == "BATCH_MATMUL" for o in tm.ops):
        checks.append((litert.OpResolverType.AUTO, SINGLE, 0.99))
    for resolver, mode, bar in checks:
        it = _litert(buf, resolver)
        sim = TfliteSimulator(tm, mode)
        equal = total = 0
        for i in range(len(xs)):
            x = quantize_input(tm, inp, xs[i:i + 1])
            ours, theirs = sim.run({inp: x})[out], _invoke(it, x)
            equal += int(np.sum(ours == theirs))
            total += ours.size
        assert equal / total >= bar, (resolver, mode, equal / total)


def test_reading_model_tflite_back_gives_the_ops_shapes_and_quantization_of_plan_json(compiled):
    from engine.export.artifacts import plan_document

    r, _, _ = compiled
    plan = json.loads(json.dumps(plan_document(r)))["tflite"]
    back = read_summary(export_bytes(r.tflite))
    assert [o["op"] for o in back["ops"]] == [o["op"] for o in plan["ops"]]
    assert summary_differences(plan, back) == []
    weights = [o["inputs"][1] for o in back["ops"] if o["op"] in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")]
    assert weights and all(w["dtype"] == "int8" and set(w["quant"]["zero_point"]) == {0} for w in weights)


def test_compile_for_ethos_u55_writes_model_tflite_and_vela_compiles_it_with_no_cpu_ops(tmp_path):
    pytest.importorskip("ethosu.vela")
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(ROOT / "assets/models/mobilenet_demo.onnx"), "--target", "ethos-u55",
                          "--calib", str(ROOT / "assets/data/mobilenet_calib.npz"), "-o", str(out), "--vela",
                          "--quiet", "--analysis-samples", "2"])
    assert rc == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert "model.tflite" in manifest["files"] and "vela/model_per-layer.csv" in manifest["files"]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["vela"]["cpu_ops"] == 0 and plan["vela"]["npu_ops"] > 0
    assert plan["vela"]["total_cycles"] > 0
    assert any(op.get("vela_cycles", 0) > 0 for op in plan["ops"] if op["op_type"] == "Conv")
    tflite_ops = {o["op"] for o in plan["tflite"]["ops"]}
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "HARD_SWISH", "MUL", "ADD", "AVERAGE_POOL_2D"} <= tflite_ops
    html = (out / "report.html").read_text()
    assert "vela beside our estimate" in html and f"{plan['vela']['total_cycles']:,}" in html


def test_transformer_compiles_with_float_layer_norms_and_vela_says_why_each_cpu_op_stays_on_the_cpu(tmp_path):
    pytest.importorskip("ethosu.vela")
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(ROOT / "assets/models/transformer_demo.onnx"), "--target", "ethos-u55",
                          "--calib", str(ROOT / "assets/data/transformer_calib.npz"), "-o", str(out), "--vela",
                          "--allow-float-ops", "--quiet", "--analysis-samples", "2"])
    assert rc == 0, err
    plan = json.loads((out / "plan.json").read_text())
    floats = plan["tflite"]["float_ops"]
    assert [f["op"] for f in floats] == ["LayerNormalization"] * 5 and all(f["reason"] for f in floats)
    ops = {o["op"] for o in plan["tflite"]["ops"]}
    assert {"BATCH_MATMUL", "GELU", "MEAN", "SLICE", "DEQUANTIZE", "QUANTIZE", "FULLY_CONNECTED"} <= ops
    vela = plan["vela"]
    assert vela["npu_ops"] > 0 and len(vela["cpu_operators"]) == vela["cpu_ops"] > 0
    # every op vela keeps on the CPU comes from a float island, and vela's reason is kept
    island_nodes = {f["node"] for f in floats}
    for c in vela["cpu_operators"]:
        assert c["node"] in island_nodes and c["reason"], c
    assert {c["op"] for c in vela["cpu_operators"]} >= {"DEQUANTIZE", "RSQRT"}
    html = (out / "report.html").read_text()
    assert "5 ops stay float" in html and "LayerNormalization" in html


def test_transformer_compiles_to_int8_layer_norms_that_vela_runs_entirely_on_the_npu(tmp_path):
    pytest.importorskip("ethosu.vela")
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(ROOT / "assets/models/transformer_demo.onnx"), "--target", "ethos-u55",
                          "--calib", str(ROOT / "assets/data/transformer_calib.npz"), "-o", str(out), "--vela",
                          "--quiet", "--analysis-samples", "2"])
    assert rc == 0, err
    plan = json.loads((out / "plan.json").read_text())
    assert plan["tflite"]["float_ops"] == []
    ops = [o["op"] for o in plan["tflite"]["ops"]]
    assert ops.count("RSQRT") == 5 and "DEQUANTIZE" not in ops and "BATCH_MATMUL" in ops
    assert all(t["dtype"] != "float32" for o in plan["tflite"]["ops"] for t in o["inputs"] + o["outputs"] if t)
    assert plan["vela"]["cpu_ops"] == 0 and plan["vela"]["cpu_operators"] == [] and plan["vela"]["npu_ops"] > 0


def _sin_model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).reshape(-1).tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Sin", ["h"], ["s"]),
             helper.make_node("MatMul", ["s", "w"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_an_op_without_a_tflite_form_is_one_clear_error_and_nothing_is_written(tmp_path):
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(_sin_model(tmp_path / "sin.onnx")), "--target", "ethos-u55",
                          "--allow-synthetic-calibration", "-o", str(out), "--quiet"])
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Sin" in lines[0] and "TFLite" in lines[0]
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_vela_on_a_target_without_tflite_export_is_a_clear_error(tmp_path):
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(ROOT / "assets/models/digits_cnn.onnx"), "--target", "phone-npu",
                          "--calib", str(ROOT / "assets/data/digits_calib.npz"), "-o", str(out), "--vela"])
    assert rc == 2 and err.startswith("error:") and "does not export TFLite" in err
    assert not out.exists()


def test_vela_failing_on_the_file_is_a_clear_error_and_nothing_is_written(tmp_path):
    import yaml

    pytest.importorskip("ethosu.vela")
    doc = yaml.safe_load((ROOT / "assets/targets/ethos-u55.yaml").read_text())
    doc["vela"]["system_config"] = "No_Such_System"
    target = tmp_path / "bad.yaml"
    target.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(ROOT / "assets/models/digits_cnn.onnx"), "--target", str(target),
                          "--calib", str(ROOT / "assets/data/digits_calib.npz"), "-o", str(out), "--vela",
                          "--quiet", "--analysis-samples", "1"])
    assert rc == 2 and err.startswith("error: vela failed") and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_target_yaml_with_an_unknown_export_format_names_the_field(tmp_path):
    import yaml

    doc = yaml.safe_load((ROOT / "assets/targets/ethos-u55.yaml").read_text())
    doc["exports"] = ["onnx-qdq", "coreml"]
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump(doc))
    rc, _, err = run_cli(["simulate", str(ROOT / "assets/models/digits_cnn.onnx"), "--target", str(p)])
    assert rc == 2 and "exports[1]" in err and "coreml" in err


def test_a_model_with_dynamic_shapes_is_one_clear_error_and_nothing_is_written(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).reshape(-1).tolist())
    model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "dyn.onnx")
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(tmp_path / "dyn.onnx"), "--target", "ethos-u55",
                          "--allow-synthetic-calibration", "-o", str(out), "--quiet"])
    assert rc == 2 and err.startswith("error:") and "dynamic" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_no_tflite_writes_the_bundle_without_model_tflite_and_says_why(tmp_path):
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(_sin_model(tmp_path / "sin.onnx")), "--target", "ethos-u55",
                          "--allow-synthetic-calibration", "-o", str(out), "--quiet", "--no-tflite"])
    assert rc == 0, err
    assert not (out / "model.tflite").exists() and (out / "model.qdq.onnx").exists()
    assert "model.tflite not written" in err and "Sin" in err


@pytest.mark.slow
def test_a_zoo_cnn_ppocr_direction_classifier_exports_and_runs_bit_exactly_in_litert():
    from tests.bench.bench_tflite_zoo import MODELS, _images, _load

    path, shapes, _, mean, std, _ = MODELS["ch_ppocr_cls_mobile"]
    if not path.exists():
        pytest.skip("rapidocr models not installed")
    g = _load(path, shapes)
    xs = _images([1, 3, 48, 192], mean, std)[:6]
    r = compile_model(g, "ethos-u55", CalibrationSet.from_arrays("images", {"x": xs}),
                      CompileOptions(quant=QuantConfig(method="percentile"), analysis_samples=0, require_tflite=True))
    tm = r.tflite
    it = _litert(export_bytes(tm), litert.OpResolverType.BUILTIN_REF)
    sim = TfliteSimulator(tm)
    out = tm.tensors[tm.outputs[0]].name
    for i in range(len(xs)):
        q = quantize_input(tm, "x", xs[i])
        assert np.array_equal(sim.run({"x": q})[out], _invoke(it, q))
    assert {"HARD_SWISH", "SOFTMAX", "DEPTHWISE_CONV_2D"} <= {o.opcode for o in tm.ops}


def test_compiling_twice_gives_the_same_model_tflite_bytes():
    a, _, _ = _compile("digits_cnn")
    b, _, _ = _compile("digits_cnn")
    assert export_bytes(a.tflite) == export_bytes(b.tflite)


def test_vela_not_installed_is_one_clear_error_saying_how_to_install(tmp_path, monkeypatch):
    import engine.export.vela as vela

    monkeypatch.setattr(vela, "vela_available", lambda: False)
    out = tmp_path / "out"
    rc, _, err = run_cli(["compile", str(ROOT / "assets/models/digits_cnn.onnx"), "--target", "ethos-u55",
                          "--calib", str(ROOT / "assets/data/digits_calib.npz"), "-o", str(out), "--vela"])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: --vela needs Arm's vela") and "npu-studio[ethos-u]" in err
    assert not out.exists()
