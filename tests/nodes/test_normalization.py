"""Normalization ops: formulas, statistics outputs, opset-dependent forms and dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from tests.nodes._build import load_graph as _load

RNG = np.random.default_rng(0)


def test_batchnorm_inference_formula_and_symbolic_shape():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s, b, m = (RNG.standard_normal(3).astype(np.float32) for _ in range(3))
    v = RNG.random(3).astype(np.float32) + 0.5
    g = _load([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
              [("x", TensorProto.FLOAT, ("N", 3, "H", "W"))], ["y"], [("s", s), ("b", b), ("m", m), ("v", v)])
    assert g.outputs[0].type.shape == ("N", 3, "H", "W")
    y = engine.execute(g, {"x": x})["y"]
    c = (1, 3, 1, 1)
    ref = (x - m.reshape(c)) / np.sqrt(v.reshape(c) + 1e-3) * s.reshape(c) + b.reshape(c)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_batchnorm_opset7_per_activation_statistics():
    x = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    s, b, m = (RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    v = RNG.random((2, 3)).astype(np.float32) + 0.5
    g = _load([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0)],
              [("x", TensorProto.FLOAT, x.shape)], ["y"], [("s", s), ("b", b), ("m", m), ("v", v)], opset=7)
    y = engine.execute(g, {"x": x})["y"]
    np.testing.assert_allclose(y, (x - m) / np.sqrt(v + 1e-5) * s + b, rtol=1e-5, atol=1e-5)


def test_batchnorm_training_mode_outputs_running_statistics():
    x = RNG.standard_normal((8, 2, 3)).astype(np.float32)
    one, zero = np.ones(2, np.float32), np.zeros(2, np.float32)
    g = _load([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                                training_mode=1, momentum=0.75)],
              [("x", TensorProto.FLOAT, x.shape)], ["y", "rm", "rv"], [("s", one), ("b", zero), ("m", zero), ("v", one)],
              opset=15)
    res = engine.execute(g, {"x": x})
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(res["rm"], 0.25 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["rv"], 0.75 + 0.25 * var, rtol=1e-5)
    np.testing.assert_allclose(res["y"].mean(axis=(0, 2)), 0, atol=1e-5)


def test_layernorm_statistics_outputs_and_float16():
    x = RNG.standard_normal((2, 5, 8)).astype(np.float16)
    scale = np.ones(8, np.float16)
    g = _load([helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "inv"], axis=-1)],
              [("x", TensorProto.FLOAT16, ("B", "S", 8))], ["y", "mean", "inv"], [("s", scale)])
    assert g.outputs[0].type.shape == ("B", "S", 8)
    assert g.outputs[1].type.shape == ("B", "S", 1)
    assert g.outputs[1].type.dtype == np.float32  # stash_type 1
    res = engine.execute(g, {"x": x})
    assert res["y"].dtype == np.float16
    xf = x.astype(np.float32)
    np.testing.assert_allclose(res["mean"], xf.mean(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["inv"], 1 / np.sqrt(xf.var(axis=-1, keepdims=True) + 1e-5), rtol=1e-4)
    np.testing.assert_allclose(res["y"].astype(np.float32), (xf - res["mean"]) * res["inv"], atol=1e-2)


def test_rmsnorm_and_instancenorm():
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    s = RNG.standard_normal((4, 4)).astype(np.float32)
    g = _load([helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=2)],
              [("x", TensorProto.FLOAT, x.shape)], ["y"], [("s", s)], opset=23)
    ref = x / np.sqrt((x * x).mean(axis=(2, 3), keepdims=True) + 1e-5) * s
    np.testing.assert_allclose(engine.execute(g, {"x": x})["y"], ref, rtol=1e-5, atol=1e-5)
    sc, b = np.full(3, 2.0, np.float32), np.full(3, 1.0, np.float32)
    g = _load([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
              [("x", TensorProto.FLOAT, x.shape)], ["y"], [("s", sc), ("b", b)])
    y = engine.execute(g, {"x": x})["y"]
    np.testing.assert_allclose(y.mean(axis=(2, 3)), 1.0, atol=1e-5)
    np.testing.assert_allclose(y.std(axis=(2, 3)), 2.0, rtol=1e-3)


@pytest.mark.parametrize("opset", [18, 21])
def test_groupnorm_scale_is_per_group_before_21_and_per_channel_after(opset):
    x = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    n_scale = 2 if opset == 18 else 4
    s = np.arange(1, n_scale + 1, dtype=np.float32)
    g = _load([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=0.0)],
              [("x", TensorProto.FLOAT, x.shape)], ["y"], [("s", s), ("b", np.zeros(n_scale, np.float32))], opset=opset)
    y = engine.execute(g, {"x": x})["y"]
    xg = x.reshape(2, 2, 6)
    norm = ((xg - xg.mean(-1, keepdims=True)) / xg.std(-1, keepdims=True)).reshape(2, 4, 3)
    per_channel = np.repeat(s, 2) if opset == 18 else s
    np.testing.assert_allclose(y, norm * per_channel.reshape(1, 4, 1), rtol=1e-4, atol=1e-4)


def test_lrn_lp_and_mvn():
    x = RNG.standard_normal((1, 5, 2, 2)).astype(np.float32)
    g = _load([helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.1, beta=0.5, bias=2.0)],
              [("x", TensorProto.FLOAT, x.shape)], ["y"])
    sq = np.pad(x * x, [(0, 0), (1, 1), (0, 0), (0, 0)])
    window = sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:]
    np.testing.assert_allclose(engine.execute(g, {"x": x})["y"], x / (2.0 + 0.1 / 3 * window) ** 0.5, rtol=1e-5)

    v = np.array([[3, 4], [0, 0]], np.float32)
    g = _load([helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=2)], [("x", TensorProto.FLOAT, v.shape)], ["y"])
    np.testing.assert_allclose(engine.execute(g, {"x": v})["y"], [[0.6, 0.8], [0, 0]])

    g = _load([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], [("x", TensorProto.FLOAT, x.shape)], ["y"])
    y = engine.execute(g, {"x": x})["y"]
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(axis=(0, 2, 3)), 1, rtol=1e-4)



@pytest.mark.parametrize(("size", "dtype"), [(5, np.float32), (4, np.float64), (9, np.float32)])
def test_lrn_compiled_pass_gives_the_numpy_forms_values_bit_for_bit(size, dtype):
    """A C-contiguous input runs the compiled base (nodes.kernels.lrn_base_), a strided view the
    numpy cumsum form: the same values, windows clipped at both channel ends (size 9 > 7 channels)."""
    from nodes import registry
    from nodes.spec import OpError, RunContext

    spec = registry.get("LRN")
    wide = (RNG.standard_normal((2, 7, 3, 10)) * 30).astype(dtype)
    view = wide[..., ::2]
    ctx = RunContext(None, {"size": size, "alpha": 3e-4, "beta": 0.75, "bias": 2.0}, 13, None)
    numpy_form = spec.reference(ctx, view)
    compiled = spec.reference(ctx, np.ascontiguousarray(view))
    assert compiled.dtype == dtype
    np.testing.assert_array_equal(compiled, numpy_form)
    with pytest.raises(OpError, match="LRN size must be >= 1, got 0"):
        spec.reference(RunContext(None, {**ctx.attrs, "size": 0}, 13, None), view)
    lo = (size - 1) // 2
    sq = np.pad(view.astype(np.float64) ** 2, [(0, 0), (lo, size - 1 - lo), (0, 0), (0, 0)])
    window = sum(sq[:, i:i + 7] for i in range(size))
    np.testing.assert_allclose(compiled, view / (2.0 + 3e-4 / size * window) ** 0.75, rtol=1e-5)
