"""The command line: inspect and run as CONTRACTS.md describes them."""

from __future__ import annotations

import json

import numpy as np
import onnx

from tests.engine.cli_util import run_cli
from tests.models import tiny_add_mul


def test_inspect_json_has_contract_keys_and_symbolic_dims(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(tiny_add_mul(), path)
    rc, out, err = run_cli(["inspect", str(path), "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["opset"] == 17
    assert doc["inputs"][0] == {"name": "x", "shape": ["N", 3], "dtype": "float32"}
    assert doc["outputs"] == [{"name": "w", "shape": ["N", 3], "dtype": "float32"}]
    assert doc["nodes"] == 2
    assert doc["op_histogram"] == {"Add": 1, "Mul": 1}
    assert doc["params"] == 0
    assert doc["macs"] == 0


def test_inspect_shape_option_fixes_dynamic_dim(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(tiny_add_mul(), path)
    rc, out, _ = run_cli(["inspect", str(path), "--json", "--shape", "x=4,3"])
    assert rc == 0
    doc = json.loads(out)
    assert doc["inputs"][0]["shape"] == [4, 3]
    assert doc["outputs"][0]["shape"] == [4, 3]


def test_run_writes_outputs_npz(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(tiny_add_mul(), path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((1, 3), np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=y)
    rc, _, err = run_cli(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")])
    assert rc == 0, err
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_array_equal(z["w"], (x + y) * x)


def test_run_with_wrong_input_shape_is_one_error_line(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(tiny_add_mul(), path)
    np.savez(tmp_path / "in.npz", x=np.ones((2, 4), np.float32), y=np.ones((1, 3), np.float32))
    rc, _, err = run_cli(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    assert rc == 2
    assert err == "error: input 'x' dimension 1 must be 3, got 4 (shape (2, 4))\n"


def test_run_with_corrupt_npz_is_one_error_line(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(tiny_add_mul(), path)
    (tmp_path / "in.npz").write_bytes(b"PK\x03\x04 definitely not a zip")
    rc, _, err = run_cli(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    assert rc == 2
    assert err.startswith(f"error: {tmp_path / 'in.npz'}: cannot read as .npz")
    assert err.count("\n") == 1


def test_unknown_option_is_one_error_line():
    rc, _, err = run_cli(["inspect", "--bogus"])
    assert rc == 2
    assert err.startswith("error: ")
    assert err.count("\n") == 1
