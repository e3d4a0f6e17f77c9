"""onnxruntime's com.microsoft contrib ops: our kernels agree with onnxruntime's on tiny models."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import engine

MS = "com.microsoft"
RNG = np.random.default_rng(7)


def _model(op: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], n_out: int = 1,
           attrs: dict | None = None, order: list[str] | None = None,
           out_types: list[int] | None = None) -> onnx.ModelProto:
    names = order or [*inputs, *consts]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, domain=MS, name="n", **(attrs or {}))
    g = helper.make_graph(
        [node], "contrib",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, out_types[k], None) if out_types else helper.make_empty_tensor_value_info(o)
         for k, o in enumerate(outs)],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _both(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feed)
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    for vi, ref in zip(typed.graph.output, theirs):  # declare what onnxruntime produced
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, helper.np_dtype_to_tensor_dtype(ref.dtype), ref.shape))
    g = engine.load(typed)
    got = engine.execute(g, feed)
    return [got[v.name] for v in g.outputs], theirs


def _assert_close(ours, theirs, atol=1e-5, lsb=0):
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if a.dtype.kind in "iu":
            diff = np.abs(a.astype(np.int64) - b.astype(np.int64))
            assert int(diff.max(initial=0)) <= lsb, f"{int(diff.max())} LSB off, {np.mean(diff > 0):.1%} of values"
        else:
            np.testing.assert_allclose(a, b, atol=atol, rtol=1e-4)


def _u8(*shape):
    return RNG.integers(0, 256, size=shape).astype(np.uint8)


def _s8(*shape):
    """int8 weights in [-64, 63]: onnxruntime's AVX2 u8s8 kernel (no VNNI here) saturates
    pair sums of products in int16, so full-range weights would make *it* inexact."""
    return RNG.integers(-64, 64, size=shape).astype(np.int8)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


S = np.float32


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_ops_match_onnxruntime(op):
    a, b = _u8(2, 3, 4), _u8(1, 3, 4)
    consts = {"as": S(0.02), "az": np.uint8(120), "b": b, "bs": S(0.03), "bz": np.uint8(130),
              "cs": S(0.05 if op == "QLinearAdd" else 0.4), "cz": np.uint8(128)}
    m = _model(op, {"a": a}, consts, order=["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
    _assert_close(*_both(m, {"a": a}), lsb=1)


@pytest.mark.parametrize(("op", "attrs"), [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_unary_ops_match_onnxruntime(op, attrs, dtype):
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(4, 64)
    zp = dtype(3)
    consts = {"xs": S(0.05), "xz": zp, "ys": S(1 / 200 if op == "QLinearSigmoid" else 0.04), "yz": dtype(0) if dtype == np.int8 else dtype(10)}
    m = _model(op, {"x": x}, consts, attrs=attrs, order=["x", "xs", "xz", "ys", "yz"])
    _assert_close(*_both(m, {"x": x}), lsb=0)


def test_qlinear_softmax_matches_onnxruntime():
    x = _u8(2, 3, 10)
    consts = {"xs": S(0.05), "xz": np.uint8(128), "ys": S(1 / 256), "yz": np.uint8(0)}
    m = _model("QLinearSoftmax", {"x": x}, consts, attrs={"axis": -1, "opset": 13}, order=["x", "xs", "xz", "ys", "yz"])
    _assert_close(*_both(m, {"x": x}), lsb=1)


def test_qlinear_concat_requantizes_each_input_to_the_output_scale():
    a, b = _u8(1, 2, 3), _u8(1, 4, 3)
    consts = {"ys": S(0.05), "yz": np.uint8(128), "as": S(0.02), "az": np.uint8(100), "bs": S(0.09), "bz": np.uint8(140)}
    m = _model("QLinearConcat", {"a": a, "b": b}, consts, attrs={"axis": 1},
               order=["ys", "yz", "a", "as", "az", "b", "bs", "bz"])
    _assert_close(*_both(m, {"a": a, "b": b}), lsb=1)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool_matches_onnxruntime(channels_last):
    x = _u8(2, 5, 6, 7)
    consts = {"xs": S(0.05), "xz": np.uint8(100), "ys": S(0.03), "yz": np.uint8(90)}
    m = _model("QLinearGlobalAveragePool", {"x": x}, consts, attrs={"channels_last": channels_last},
               order=["x", "xs", "xz", "ys", "yz"])
    _assert_close(*_both(m, {"x": x}), lsb=1)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_qlinear_average_pool_matches_onnxruntime(count_include_pad):
    x = _u8(1, 3, 9, 8)
    consts = {"xs": S(0.05), "xz": np.uint8(100), "ys": S(0.04), "yz": np.uint8(110)}
    m = _model("QLinearAveragePool", {"x": x}, consts, order=["x", "xs", "xz", "ys", "yz"],
               attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                      "count_include_pad": count_include_pad})
    _assert_close(*_both(m, {"x": x}), lsb=1)


@pytest.mark.parametrize("requantized", [False, True])
def test_qgemm_matches_onnxruntime(requantized):
    a, b = _u8(4, 6), _s8(5, 6)
    consts = {"as": S(0.02), "az": np.uint8(128), "b": b, "bs": S(0.01), "bz": np.int8(0),
              "c": RNG.integers(-500, 500, 5).astype(np.int32)}
    order = ["a", "as", "az", "b", "bs", "bz", "c"]
    if requantized:
        consts |= {"ys": S(0.05), "yz": np.uint8(120)}
        order += ["ys", "yz"]
    m = _model("QGemm", {"a": a}, consts, attrs={"transB": 1, "alpha": 1.0}, order=order)
    _assert_close(*_both(m, {"a": a}), atol=1e-5, lsb=1)


def test_dynamic_quantize_matmul_matches_onnxruntime():
    a = _f(3, 8)
    consts = {"b": _s8(8, 5), "bs": S(0.02), "bz": np.int8(0), "bias": _f(5)}
    m = _model("DynamicQuantizeMatMul", {"a": a}, consts)
    _assert_close(*_both(m, {"a": a}), atol=1e-4)


def test_matmul_integer_to_float_matches_onnxruntime():
    a = _u8(3, 8)
    consts = {"b": _s8(8, 5), "as": S(0.03),
              "bs": np.full(5, 0.02, np.float32), "az": np.uint8(128), "bz": np.zeros(5, np.int8), "bias": _f(5)}
    m = _model("MatMulIntegerToFloat", {"a": a}, consts)
    _assert_close(*_both(m, {"a": a}), atol=1e-4)


def test_dynamic_quantize_lstm_matches_onnxruntime():
    seq, batch, inp, hid = 5, 2, 6, 4
    x = _f(seq, batch, inp)
    consts = {"W": _s8(1, inp, 4 * hid),
              "R": _s8(1, hid, 4 * hid),
              "B": _f(1, 8 * hid) * 0.1,
              "ws": np.array([0.01], np.float32), "wz": np.array([0], np.int8),
              "rs": np.array([0.02], np.float32), "rz": np.array([0], np.int8)}
    order = ["x", "W", "R", "B", "", "", "", "", "ws", "wz", "rs", "rz"]
    m = _model("DynamicQuantizeLSTM", {"x": x}, consts, n_out=3, attrs={"hidden_size": hid}, order=order)
    _assert_close(*_both(m, {"x": x}), atol=2e-5)


@pytest.mark.parametrize(("activation", "params"), [("Relu", []), ("LeakyRelu", [0.2]), ("Clip", [-0.5, 0.5]),
                                                    ("HardSigmoid", [0.3, 0.4]), ("Sigmoid", []), ("Tanh", [])])
def test_fused_conv_applies_its_activation_like_onnxruntime(activation, params):
    x = _f(1, 3, 7, 7)
    consts = {"w": _f(4, 3, 3, 3), "b": _f(4)}
    attrs = {"activation": activation, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    if params:
        attrs["activation_params"] = params
    m = _model("FusedConv", {"x": x}, consts, attrs=attrs)
    _assert_close(*_both(m, {"x": x}), atol=1e-4)


def test_fused_matmul_transposes_and_scales_like_onnxruntime():
    a, b = _f(2, 3, 5, 4), _f(2, 3, 6, 5)
    m = _model("FusedMatMul", {"a": a, "b": b}, {}, attrs={"alpha": 0.5, "transA": 1, "transB": 1})
    _assert_close(*_both(m, {"a": a, "b": b}), atol=1e-4)


def test_fused_matmul_batch_transpose_matches_onnxruntime():
    a, b = _f(3, 2, 4), _f(2, 4, 5)
    m = _model("FusedMatMul", {"a": a, "b": b}, {}, attrs={"transBatchA": 1})
    _assert_close(*_both(m, {"a": a, "b": b}), atol=1e-4)


def test_fused_gemm_matches_onnxruntime():
    a = _f(3, 4)
    m = _model("FusedGemm", {"a": a}, {"b": _f(5, 4), "c": _f(5)},
               attrs={"transB": 1, "alpha": 0.7, "beta": 0.5, "activation": "LeakyRelu", "activation_alpha": 0.1})
    _assert_close(*_both(m, {"a": a}), atol=1e-5)


@pytest.mark.parametrize(("op", "with_bias", "attrs"), [("Gelu", False, {}), ("FastGelu", False, {}),
                                                       ("FastGelu", True, {}), ("BiasGelu", True, {}),
                                                       ("QuickGelu", False, {"alpha": 1.5})])
def test_gelu_family_matches_onnxruntime(op, with_bias, attrs):
    x = _f(2, 3, 8) * 3
    consts = {"bias": _f(8)} if with_bias else {}
    m = _model(op, {"x": x}, consts, attrs=attrs)
    _assert_close(*_both(m, {"x": x}), atol=1e-5)


@pytest.mark.parametrize("simplified", [False, True])
def test_skip_layer_normalization_matches_onnxruntime(simplified):
    x, skip = _f(2, 3, 8), _f(2, 3, 8)
    if simplified:
        consts = {"gamma": _f(8), "bias": _f(8)}
        op = "SkipSimplifiedLayerNormalization"
    else:
        consts = {"gamma": _f(8), "beta": _f(8), "bias": _f(8)}
        op = "SkipLayerNormalization"
    m = _model(op, {"x": x, "skip": skip}, consts, n_out=4, attrs={"epsilon": 1e-5},
               out_types=[1, 1, 1, 1])
    ours, theirs = _both(m, {"x": x, "skip": skip})
    # output and the input + skip + bias sum (outputs 0 and 3) are the values models consume
    _assert_close([ours[0], ours[3]], [theirs[0], theirs[3]], atol=1e-4)


def test_simplified_layer_normalization_matches_onnxruntime():
    x = _f(2, 3, 8)
    g = helper.make_graph(
        [helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y"], domain="", epsilon=1e-5, axis=-1)],
        "rms", [helper.make_tensor_value_info("x", 1, x.shape)], [helper.make_empty_tensor_value_info("y")],
        initializer=[numpy_helper.from_array(_f(8), "s")])
    # onnxruntime registers SimplifiedLayerNormalization in the default domain; exporters
    # and its optimizer also write it under com.microsoft.
    m_ms = _model("SimplifiedLayerNormalization", {"x": x}, {"s": _f(8)}, attrs={"epsilon": 1e-5})
    m_ms.graph.output[0].CopyFrom(helper.make_tensor_value_info("y0", 1, x.shape))
    ours_ms = engine.execute(engine.load(m_ms), {"x": x})["y0"]
    so = ort.SessionOptions()
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.graph.initializer[0].CopyFrom(m_ms.graph.initializer[0])
    m.graph.initializer[0].name = "s"
    theirs = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours_ms, theirs, atol=1e-5)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", 1, x.shape))
    ours = engine.execute(engine.load(m, check=False), {"x": x})["y"]  # the default-domain spelling
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_attention_matches_onnxruntime(masked):
    b, s, d, heads = 2, 5, 8, 2
    x = _f(b, s, d)
    consts = {"w": _f(d, 3 * d) * 0.3, "bias": _f(3 * d) * 0.1}
    inputs = {"x": x}
    order = ["x", "w", "bias"]
    if masked:
        inputs["mask"] = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
        order.append("mask")
    m = _model("Attention", inputs, consts, attrs={"num_heads": heads}, order=order)
    ours, theirs = _both(m, inputs)
    _assert_close(ours[:1], theirs[:1], atol=1e-4)


def test_multi_head_attention_matches_onnxruntime():
    b, s, kv, d, heads = 2, 3, 4, 8, 2
    q, k, v = _f(b, s, d), _f(b, kv, d), _f(b, kv, d)
    m = _model("MultiHeadAttention", {"q": q, "k": k, "v": v}, {"bias": _f(3 * d) * 0.1}, attrs={"num_heads": heads})
    ours, theirs = _both(m, {"q": q, "k": k, "v": v})
    _assert_close(ours[:1], theirs[:1], atol=1e-4)


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_contrib_quantize_dequantize_match_onnxruntime(op):
    x = _f(2, 4, 3) if op == "QuantizeLinear" else _u8(2, 4, 3)
    consts = {"s": np.array([0.02, 0.03, 0.05, 0.1], np.float32), "z": np.array([120, 128, 130, 0], np.uint8)}
    m = _model(op, {"x": x}, consts, attrs={"axis": 1})
    _assert_close(*_both(m, {"x": x}), atol=1e-6)


def test_fused_conv_and_gemm_cost_like_the_ops_they_replace():
    from engine.inspect import node_work

    x = _f(1, 3, 8, 8)
    w = _f(4, 3, 3, 3)
    conv = engine.load(_typed(_model("Conv", {"x": x}, {"w": w}, attrs={"pads": [1, 1, 1, 1]}), x))
    fused = engine.load(_typed(_model("FusedConv", {"x": x}, {"w": w},
                                      attrs={"pads": [1, 1, 1, 1], "activation": "Relu"}), x))
    assert node_work(fused.nodes[0]).macs == node_work(conv.nodes[0]).macs == 8 * 8 * 4 * 27
    a = engine.simulate(conv, "phone-npu").to_json()["latency_us"]
    b = engine.simulate(fused, "phone-npu").to_json()["latency_us"]
    assert b > 0 and 0.5 * a <= b <= 2 * a
    a2 = _f(3, 4)
    gemm = engine.load(_typed(_model("FusedGemm", {"x": a2}, {"b": _f(5, 4)}, attrs={"transB": 1, "activation": "Relu"}), a2))
    assert node_work(gemm.nodes[0]).macs == 3 * 4 * 5


def _typed(model: onnx.ModelProto, x: np.ndarray) -> onnx.ModelProto:
    """Declare the output type by running onnxruntime once (Conv in the default domain)."""
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.domain = ""
    out = ort.InferenceSession(model.SerializeToString(), ort.SessionOptions(),
                               providers=["CPUExecutionProvider"]).run(None, {model.graph.input[0].name: x})
    for vi, ref in zip(model.graph.output, out):
        vi.CopyFrom(helper.make_tensor_value_info(vi.name, 1, ref.shape))
    return model
