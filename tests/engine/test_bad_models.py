"""Broken models give exit 2 and one `error:` line from `npu-studio inspect`, fast, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.models import tiny_add_mul, with_initializer

ROOT = Path(__file__).resolve().parents[2]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _cycle(d: Path) -> Path:
    g = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second"),
         helper.make_node("Add", ["x", "a"], ["y"], name="out")],
        "cyclic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "cycle.onnx")


def _undefined(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")], "undef",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "undefined.onnx")


def _external_outside(d: Path) -> Path:
    secret = d.parent / "secret.bin"
    secret.write_bytes(np.full(4, 7.0, np.float32).tobytes())
    m = with_initializer()
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    return _save(m, d / "escape.onnx")


def _opset_too_new(d: Path) -> Path:
    m = tiny_add_mul()
    m.opset_import[0].version = 99
    return _save(m, d / "opset99.onnx")


def _truncated(d: Path) -> Path:
    m = with_initializer()
    data = m.SerializeToString()
    (d / "trunc.onnx").write_bytes(data[: len(data) // 2])
    return d / "trunc.onnx"


CASES = {
    "not-onnx": (lambda d: (d / "notes.onnx").write_text("this is a text file\n" * 20) and d / "notes.onnx",
                 "not an ONNX model"),
    "random-bytes": (lambda d: (d / "rand.onnx").write_bytes(np.random.default_rng(0).bytes(4096)) and d / "rand.onnx",
                     "not an ONNX model"),
    "truncated": (_truncated, "not an ONNX model"),
    "empty": (lambda d: (d / "empty.onnx").write_bytes(b"") or d / "empty.onnx", "file is empty"),
    "cycle": (_cycle, "cycle through nodes first, second"),
    "undefined-input": (_undefined, "'ghost', which nothing produces"),
    "external-escape": (_external_outside, "leaves the model's folder"),
    "opset-too-new": (_opset_too_new, "opset 99 is newer than this onnx knows"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_inspect_rejects_broken_model_with_one_error_line(case, tmp_path):
    make, expected = CASES[case]
    d = tmp_path / "models"
    d.mkdir()
    path = make(d)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "engine", "inspect", str(path)], capture_output=True, text=True,
                          timeout=30, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert str(path.name) in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert elapsed < 5, f"took {elapsed:.1f}s"


def test_load_raises_model_error_with_same_message(tmp_path):
    import engine

    path = _cycle(tmp_path)
    with pytest.raises(engine.ModelError, match="cycle") as info:
        engine.load(path)
    assert isinstance(info.value, ValueError)


def test_external_data_inside_folder_loads(tmp_path):
    import engine

    m = with_initializer()
    t = m.graph.initializer[0]
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8 + np.full(4, 5.0, np.float32).tobytes())
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "8"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    path = _save(m, tmp_path / "ok.onnx")
    g = engine.load(path)
    out = engine.execute(g, {"x": np.ones((2, 2), np.float32)})
    np.testing.assert_array_equal(out["y"], np.full((2, 2), 5.0, np.float32))


def test_unknown_shape_option_names_the_inputs(tmp_path):
    from io import StringIO

    from engine.cli import Out, main

    path = _save(tiny_add_mul(), tmp_path / "m.onnx")
    err = StringIO()
    rc = main(["inspect", str(path), "--shape", "nope=1,3"], Out(StringIO(), err))
    assert rc == 2
    assert err.getvalue() == f"error: {path}: --shape names 'nope', which is not an input (inputs: x, y)\n"

