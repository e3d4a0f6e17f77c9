"""``npu-studio optimize``: the written model, the report document, bad input."""

from __future__ import annotations

import json

import numpy as np
import onnx

from tests.engine.cli_util import run_cli
from tests.engine.passes_util import model, rand


def _conv_bn_relu(tmp_path) -> str:
    m = model("""
        agraph (float[1,3,8,8] x) => (float[1,4,8,8] y) {
            c = Conv <pads=[1,1,1,1]> (x, W, b)
            n = BatchNormalization (c, s, bb, mu, v)
            i = Identity (n)
            y = Relu (i)
        }""", W=rand(4, 3, 3, 3), b=rand(4), s=rand(4), bb=rand(4), mu=rand(4), v=rand(4, positive=True))
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return str(path)


def test_optimize_writes_a_checked_model_and_the_report(tmp_path):
    src = _conv_bn_relu(tmp_path)
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    code, stdout, stderr = run_cli(["optimize", src, "-o", str(out), "--report", str(rep)])
    assert code == 0, stderr
    assert "wrote" in stdout
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    assert [n.op_type for n in m.graph.node] == ["Conv", "Relu"]  # the fused Relu written back
    doc = json.loads(rep.read_text())
    assert doc["nodes_before"] == 4 and doc["nodes_after"] == 1 and doc["nodes_after_onnx"] == 2
    for p in doc["passes"]:
        assert {"name", "modified", "nodes_before", "nodes_after", "ms", "fired", "not_fired"} <= set(p)
    (fused,) = doc["fused"]
    assert fused["op_type"] == "Conv" and fused["from"] == ["conv", "batchnormalization", "relu"]
    rules = {e["rule"] for p in doc["passes"] for e in p["fired"]}
    assert {"fuse_batchnorm.conv", "fuse_activation.relu", "eliminate_identity.identity"} <= rules


def test_optimized_file_runs_like_the_original(tmp_path):
    import onnxruntime as ort

    src = _conv_bn_relu(tmp_path)
    out = tmp_path / "o.onnx"
    assert run_cli(["optimize", src, "-o", str(out)])[0] == 0
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    a = ort.InferenceSession(src).run(None, {"x": x})[0]
    b = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    assert float(np.max(np.abs(a - b))) <= 1e-4 * float(np.max(np.abs(a)))


def test_disable_switches_off_passes_and_json_prints_the_report(tmp_path):
    src = _conv_bn_relu(tmp_path)
    code, stdout, _ = run_cli(["optimize", src, "-o", str(tmp_path / "o.onnx"), "--disable", "fuse_batchnorm",
                               "fuse_activation", "--json"])
    assert code == 0
    doc = json.loads(stdout)
    assert doc["op_histogram_after"] == {"BatchNormalization": 1, "Conv": 1, "Relu": 1}


def test_bad_input_is_one_error_line_and_exit_2(tmp_path):
    src = _conv_bn_relu(tmp_path)
    code, _, err = run_cli(["optimize", src, "-o", str(tmp_path / "o.onnx"), "--disable", "fuse_everything"])
    assert code == 2 and err.startswith("error: --disable fuse_everything: no such pass or rule")
    code, _, err = run_cli(["optimize", src, "-o", str(tmp_path / "missing" / "o.onnx")])
    assert code == 2 and "does not exist" in err and err.count("\n") == 1
    code, _, err = run_cli(["optimize", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "o.onnx")])
    assert code == 2 and err.startswith("error:")
    assert not (tmp_path / "o.onnx").exists()
