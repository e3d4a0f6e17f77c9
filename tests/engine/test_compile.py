"""Compile to the deployable bundle: every demo model on every bundled target, reproducibly."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

import engine
from engine.compiler import CompileOptions, compile_model
from engine.export.artifacts import BUNDLE_FILES, write_bundle
from engine.hw.target import bundled_targets
from engine.quant.config import QuantConfig
from engine.quant.data import load_calibration
from tests.engine.cli_util import run_cli
from tests.models import ASSETS, demo_model

CALIB = {"digits_cnn": "digits_calib.npz", "mobilenet_demo": "mobilenet_calib.npz",
         "transformer_demo": "transformer_calib.npz"}
OPTIONS = CompileOptions(quant=QuantConfig(method="percentile", per_channel=True), analysis_samples=2)


def _compile(name: str, target: str):
    g = engine.load(demo_model(name))
    data = load_calibration(ASSETS / "data" / CALIB[name], g).take(8)
    return compile_model(g, target, data, OPTIONS)


def _check_plan(plan: dict) -> None:
    assert {"target", "latency_us", "ops", "partitions", "transfers", "summary"} <= set(plan)
    names = [o["node"] for o in plan["ops"]]
    assert len(names) == len(set(names)), "an op appears twice"
    for o in plan["ops"]:
        assert o["device"] in ("npu", "cpu")
        assert o["bound"] in ("compute", "memory", "overhead", "transfer")
        assert (o["fallback_reason"] is not None) == (o["device"] == "cpu")
        if o["device"] == "cpu":
            assert o["fallback_reason"].strip()
    in_partitions = [n for p in plan["partitions"] for n in p["nodes"]]
    assert sorted(in_partitions) == sorted(names)
    assert {"npu_ops", "cpu_ops", "npu_us", "cpu_us", "transfer_us"} <= set(plan["summary"])


@pytest.mark.parametrize("target", sorted(bundled_targets()))
@pytest.mark.parametrize("name", sorted(CALIB))
def test_compile_writes_a_valid_bundle(name, target, tmp_path):
    if not demo_model(name).exists():
        pytest.skip("demo model missing")
    result = _compile(name, target)
    out = tmp_path / "bundle"
    hashes = write_bundle(result, out)
    files = {p.name for p in out.iterdir()}
    expected = set(BUNDLE_FILES) - (set() if result.quantized else {"model.qdq.onnx"})
    if result.tflite is not None:
        expected.add("model.tflite")
    assert files == expected
    for f in files:
        if f.endswith(".onnx"):
            model = onnx.load(str(out / f))
            onnx.checker.check_model(model, full_check=True)
            so = ort.SessionOptions()
            so.log_severity_level = 3
            sess = ort.InferenceSession(str(out / f), so, providers=["CPUExecutionProvider"])
            feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
                     for i in sess.get_inputs()}
            sess.run(None, feeds)
    plan = json.loads((out / "plan.json").read_text())
    _check_plan(plan)
    rt = yaml.safe_load((out / "runtime.yaml").read_text())
    assert rt["model"]["id"] and rt["model"]["inputs"][0]["shape"]
    assert rt["devices"]["primary"].startswith("npu") and rt["devices"]["fallback"] == "cpu"
    assert {"mode", "calibration_set"} <= set(rt["precision"])
    assert {"fusion", "profiling", "max_batch"} <= set(rt["runtime"])
    manifest = json.loads((out / "manifest.json").read_text())
    for f, h in manifest["files"].items():
        assert hashlib.sha256((out / f).read_bytes()).hexdigest() == h
    assert hashes["manifest.json"] == hashlib.sha256((out / "manifest.json").read_bytes()).hexdigest()
    html = (out / "report.html").read_text()
    assert "<svg" in html and "Stage breakdown" in html and "http" not in html.replace("http://www.w3.org", "")


def test_compiling_twice_gives_identical_bundles(tmp_path):
    a = write_bundle(_compile("digits_cnn", "phone-npu"), tmp_path / "a")
    b = write_bundle(_compile("digits_cnn", "phone-npu"), tmp_path / "b")
    assert a == b


def test_target_supporting_every_op_has_no_transfers():
    from engine.hw.target import resolve_target

    g = engine.load(demo_model("mobilenet_demo"))
    t = resolve_target("phone-npu")
    every = t.with_ops({op: {} for op in engine.supported_ops()})
    result = compile_model(g, every, None, CompileOptions(allow_synthetic_calibration=True, analysis_samples=0))
    assert result.sim.summary()["transfers"] == 0
    assert result.sim.summary()["cpu_ops"] == 0


def test_cli_compile_refuses_integer_target_without_calibration(tmp_path):
    rc, _, err = run_cli(["compile", str(demo_model("digits_cnn")), "--target", "phone-npu", "-o", str(tmp_path / "o")])
    assert rc == 2
    assert "needs calibration data (--calib)" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_compile_refuses_non_empty_outdir_without_force(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["compile", str(demo_model("digits_cnn")), "--target", "phone-npu", "-o", str(out),
            "--allow-synthetic-calibration", "--quiet"]
    rc, _, err = run_cli(args)
    assert rc == 2 and "not empty (use --force" in err
    assert (out / "keep.txt").read_text() == "mine"
    rc, _, err = run_cli([*args, "--force"])
    assert rc == 0, err
    assert not (out / "keep.txt").exists() and (out / "manifest.json").exists()


def test_cli_compile_to_unwritable_place_is_one_error_line():
    rc, _, err = run_cli(["compile", str(demo_model("digits_cnn")), "--target", "phone-npu", "-o", "/proc/npu_bundle",
                          "--allow-synthetic-calibration", "--quiet"])
    assert rc == 2
    assert err.startswith("error: /proc/npu_bundle") and err.count("\n") == 1


def test_interrupted_compile_leaves_no_bundle(tmp_path, monkeypatch):
    import engine.export.artifacts as artifacts

    result = _compile("digits_cnn", "phone-npu")
    real_fsync = artifacts.os.fsync
    calls = {"n": 0}

    def dying_fsync(fd):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real_fsync(fd)

    monkeypatch.setattr(artifacts.os, "fsync", dying_fsync)
    with pytest.raises(KeyboardInterrupt):
        write_bundle(result, tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()


def test_simulate_json_per_contract(tmp_path):
    rc, out, err = run_cli(["simulate", str(demo_model("transformer_demo")), "--target", "ethos-u55", "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    _check_plan(doc)


def test_cli_compiles_a_project_file_with_its_settings(tmp_path):
    from engine.project import Project, save_project, sha256_of

    model = demo_model("digits_cnn")
    g = engine.load(model)
    pin_node = g.nodes[0].name
    proj = Project(model, sha256_of(model), target="phone-npu",
                   quantization={"method": "entropy", "per_channel": True,
                                 "calibration": str(ASSETS / "data" / "digits_calib.npz")},
                   pins={pin_node: "cpu"})
    save_project(tmp_path / "digits.npuproj", proj)
    rc, _, err = run_cli(["compile", str(tmp_path / "digits.npuproj"), "-o", str(tmp_path / "b"), "--quiet",
                          "--analysis-samples", "2"])
    assert rc == 0, err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["inputs"]["options"]["quant"]["method"] == "entropy"
    assert manifest["inputs"]["options"]["pins"] == {pin_node: "cpu"}
    plan = json.loads((tmp_path / "b" / "plan.json").read_text())
    assert plan["target"] == "phone-npu"
    pinned = [o for o in plan["ops"] if o["node"] == pin_node or pin_node in (o.get("provenance") or [])]
    assert pinned
    assert pinned[0]["device"] == "cpu"


@pytest.mark.parametrize(("content", "message"), [
    ('{"format": "npu-studio-project", "version": 1, "model": {"pa', "invalid or truncated JSON"),
    ('{"format": "npu-studio-project", "version": 99, "model": {"path": "m.onnx"}}', "newer than this NPU Studio"),
])
def test_cli_compile_refuses_bad_project_files(tmp_path, content, message):
    (tmp_path / "p.npuproj").write_text(content)
    rc, _, err = run_cli(["compile", str(tmp_path / "p.npuproj"), "-o", str(tmp_path / "b")])
    assert rc == 2
    assert message in err
    assert err.count("\n") == 1
    assert not (tmp_path / "b").exists()


def test_python_facade_compiles_and_quantizes():
    g = engine.load(demo_model("digits_cnn"))
    calib = ASSETS / "data" / "digits_calib.npz"
    result = engine.compile(g, "phone-npu", calibration=calib,
                            options=CompileOptions(analysis_samples=2))
    assert result.quantized
    assert result.sim.latency_us > 0
    q = engine.quantize(g, calib, analysis_samples=2)
    assert q.report()["samples"] == 200
