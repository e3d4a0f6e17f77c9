"""The output-noise budget (engine/quant/budget.py) and ``--output-ranges`` (engine/quant/outrange.py):
the budget names the tensor that costs the output its dB, and the step clips that tensor's range
where the model's output says clipping helps."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.ir.onnx_io import from_onnx
from engine.quant.api import quantize
from engine.quant.budget import noise_budget
from engine.quant.calibrate import calibrate
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.qdq import build_qdq
from tests.engine.cli_util import run_cli

RNG = np.random.default_rng(11)


def _saturating_model() -> onnx.ModelProto:
    """x -> Tanh -> MatMul: the output depends on x's bulk (|x| < 3) to the last bit and not at all
    on how far out its rare outliers go (Tanh saturates there), so a minmax range stretched by the
    outliers wastes x's levels and clipping the tail costs nothing."""
    w = RNG.normal(size=(64, 8)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
                           helper.make_node("MatMul", ["t", "w"], ["y"], name="mm")], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 8])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _heavy_tailed(n: int) -> CalibrationSet:
    x = RNG.normal(size=(n, 1, 64, 64)).astype(np.float32)
    for i in range(n):  # two outliers in 4096 values per sample, 40x the bulk's scale
        x[i, 0, RNG.integers(0, 64, 2), RNG.integers(0, 64, 2)] = RNG.choice([-40.0, 40.0], 2)
    return CalibrationSet.from_arrays("heavy", {"x": x})


def test_budget_puts_the_outlier_stretched_input_first_and_its_shares_add_up():
    g = from_onnx(_saturating_model())
    data = _heavy_tailed(8)
    cfg = QuantConfig(per_channel=True)
    qm = build_qdq(g, calibrate(g, data, cfg), cfg)
    rows = noise_budget(g, qm, [data.sample(i) for i in range(4)], weights=True)
    assert rows[0].tensor == "x" and rows[0].share > 0.5
    assert abs(sum(r.share for r in rows) - 1.0) < 1e-9
    assert {r.kind for r in rows} == {"activation", "weight"}
    assert rows[0].alone_db < min(r.alone_db for r in rows[1:])


def test_output_ranges_clips_the_tensor_the_budget_blames_and_the_output_sqnr_rises():
    g = from_onnx(_saturating_model())
    data = _heavy_tailed(16)
    plain = quantize(g, data, QuantConfig(per_channel=True), analysis_samples=8)
    tuned = quantize(g, data, QuantConfig(per_channel=True, output_ranges="auto"), analysis_samples=8)
    step = next(s for s in tuned.report()["ptq"]["steps"] if s["algorithm"] == "output_ranges")
    assert step["applied"]
    first = step["changed"]["tensors"][0]
    assert first["tensor"] == "x" and first["from"] == "minmax" and first["to"] != "minmax"
    assert first["noise_share"] > 0.5 and first["gain_db"] > 3
    assert tuned.config.method_overrides["x"] in ("percentile", "mse")
    sqnr = lambda r: min(v["sqnr_db"] for v in r.report()["outputs"].values())  # noqa: E731
    assert sqnr(tuned) >= sqnr(plain) + 3


def test_cli_output_ranges_is_reported_and_a_bad_mode_is_one_error(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_saturating_model(), str(src))
    calib = _heavy_tailed(8)
    np.savez(tmp_path / "c.npz", x=np.stack([calib.sample(i)["x"] for i in range(8)]))
    base = ["quantize", str(src), "--calib", str(tmp_path / "c.npz"), "-o", str(tmp_path / "q.onnx")]
    rc, _, err = run_cli([*base, "--output-ranges", "sometimes"])
    assert rc == 2 and err.count("error:") == 1 and not (tmp_path / "q.onnx").exists()
    rc, out, err = run_cli([*base, "--output-ranges", "on", "--report", str(tmp_path / "r.json"),
                            "--analysis-samples", "2"])
    assert rc == 0, err
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [s["algorithm"] for s in rep["ptq"]["steps"]] == ["output_ranges"]
    assert "ptq output_ranges:" in out
