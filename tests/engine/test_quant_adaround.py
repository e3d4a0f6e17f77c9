"""AdaRound (engine/quant/adaround.py): weights rounded up or down by the layer's output error
lower that error below nearest rounding's, survive the QDQ build as exactly the chosen integers
with the same scales, and the quantize report says what it changed and what it bought."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.quant.adaround import adaround
from engine.quant.api import quantize
from engine.quant.calibrate import calibrate
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.qdq import build_qdq
from tests.engine.cli_util import run_cli

RNG = np.random.default_rng(13)
C_IN, C_OUT = 16, 4


def _coherent_model() -> onnx.ModelProto:
    """A 1x1 conv whose weights all sit 0.4 of a step above a grid point (one weight per row sets
    the scale): nearest rounding errs by the same -0.4 steps on every weight, and the inputs are
    one shared signal, so the errors add up in the output instead of averaging out."""
    s = 1.0 / 127.5
    k = RNG.integers(-60, 60, size=(C_OUT, C_IN)).astype(np.float64)
    w = (k + 0.4) * s
    w[:, 0] = 1.0
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="pw")], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C_OUT, 12, 12])],
                          [numpy_helper.from_array(w.reshape(C_OUT, C_IN, 1, 1).astype(np.float32), "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _shared_signal(n: int) -> CalibrationSet:
    u = RNG.normal(size=(n, 1, 1, 12, 12))
    x = u + 0.05 * RNG.normal(size=(n, 1, C_IN, 12, 12))
    x[:, :, 0] = 0.0  # the scale-setting weight reads nothing: the other fifteen carry the signal
    return CalibrationSet.from_arrays("shared", {"x": x.astype(np.float32)})


def _graph():
    from engine.ir.onnx_io import from_onnx
    from engine.quant.cli import optimize_for_quantization

    return optimize_for_quantization(from_onnx(_coherent_model()))


def test_adaround_cuts_a_layers_output_error_and_the_qdq_model_keeps_its_integers():
    g = _graph()
    data = _shared_signal(16)
    cfg = QuantConfig(per_channel=True)
    calib = calibrate(g, data, cfg)
    qm = build_qdq(g, calib, cfg)
    rounded, layers = adaround(g, qm, (data.sample(i) for i in range(len(data))))
    (rec,) = layers
    assert rec.applied and rec.flipped > 0
    assert rec.adaround_db >= rec.nearest_db + 6  # the coherent -0.4-step errors cancel
    after = build_qdq(rounded, calib, cfg)
    w_new = rounded.node_by_name("pw").inputs[1].const
    stored = next(v.const for v in after.graph.initializers.values() if v.name == "w_quantized")
    scale = np.asarray(after.weights["w"].scale)[:, None, None, None]
    # the chosen integers are written as q * s: the QDQ model stores exactly them
    inner = np.abs(w_new) < np.abs(w_new).max(axis=(1, 2, 3), keepdims=True)
    assert inner.sum() >= C_OUT * (C_IN - 1)
    assert np.allclose((stored * scale)[inner], w_new[inner], rtol=0, atol=1e-7)


def test_a_channels_range_shrinks_when_its_outlier_weight_multiplies_nothing():
    # the weight that sets each channel's range (1.0) reads an input that is always 0: clipping
    # it costs nothing, and the finer grid serves the fifteen weights that carry the signal
    g = _graph()
    data = _shared_signal(16)
    cfg = QuantConfig(per_channel=True)
    calib = calibrate(g, data, cfg)
    qm = build_qdq(g, calib, cfg)
    rounded, (rec,) = adaround(g, qm, (data.sample(i) for i in range(len(data))))
    assert rec.clipped == C_OUT
    after = build_qdq(rounded, calib, cfg).weights["w"]
    assert np.all(np.asarray(after.scale) <= 0.95 * np.asarray(qm.weights["w"].scale))


def _step(res, name: str) -> dict:
    return next(s.to_json() for s in res.ptq.steps if s.algorithm == name)


def test_quantize_with_adaround_raises_the_output_sqnr_and_reports_the_layers_it_rounded():
    g = _graph()
    data = _shared_signal(16)
    res = quantize(g, data, QuantConfig(per_channel=True, adaround="auto"), analysis_samples=8)
    step = _step(res, "adaround")
    assert step["applied"] and step["changed"]["layers"] == 1 and step["changed"]["weights_flipped"] > 0
    assert step["calib_sqnr_db"]["gain"] >= 3 and step["heldout_sqnr_db"]["gain"] >= 3
    off = quantize(g, data, QuantConfig(per_channel=True), analysis_samples=8)
    assert res.report()["outputs"]["y"]["sqnr_db"] >= off.report()["outputs"]["y"]["sqnr_db"] + 3


def test_cli_quantize_adaround_on_writes_the_step_into_the_report(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_coherent_model(), str(src))
    data = _shared_signal(8)
    np.savez(tmp_path / "c.npz", x=np.stack([data.sample(i)["x"] for i in range(8)]))
    rc, out, err = run_cli(["quantize", str(src), "--calib", str(tmp_path / "c.npz"), "-o", str(tmp_path / "q.onnx"),
                            "--per-channel", "--adaround", "on", "--report", str(tmp_path / "r.json"),
                            "--analysis-samples", "4"])
    assert rc == 0, err
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [s["algorithm"] for s in rep["ptq"]["steps"]] == ["adaround"]
    assert rep["ptq"]["steps"][0]["changed"]["largest"][0]["node"] == "pw"
    assert "ptq adaround: applied" in out


def test_adaround_leaves_a_layer_that_sees_too_few_input_patches_at_nearest_rounding():
    # a squeeze-excite FC sees one patch per sample: 8 samples cannot pin down 16 x 16 input
    # statistics, and a rounding fitted to them would fit the samples (mobilenet_demo's SE layers)
    g = _graph()
    data = _shared_signal(16)
    cfg = QuantConfig(per_channel=True)
    calib = calibrate(g, data, cfg)
    qm = build_qdq(g, calib, cfg)
    few = [{"x": data.sample(i)["x"][:, :, :1, :1]} for i in range(len(data))]
    from engine.ir.onnx_io import from_onnx
    from engine.quant.cli import optimize_for_quantization

    m = _coherent_model()
    for vi in (*m.graph.input, *m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        dims[2].dim_value = dims[3].dim_value = 1
    small = optimize_for_quantization(from_onnx(m))
    qm_small = build_qdq(small, calibrate(small, CalibrationSet.from_arrays("few", {"x": np.stack([f["x"] for f in few])}),
                                          cfg), cfg)
    rounded, layers = adaround(small, qm_small, few)
    assert layers == []
    assert np.array_equal(rounded.node_by_name("pw").inputs[1].const, small.node_by_name("pw").inputs[1].const)
    # the same layer on 12x12 inputs (144 patches a sample) is rounded
    assert adaround(g, qm, (data.sample(i) for i in range(len(data))))[1][0].applied
