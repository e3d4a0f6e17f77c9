"""Each op the TFLite exporter writes, on a tiny model: LiteRT's reference kernels give exactly our
TFLite-rounding simulation, and the int8 result still computes what the FP32 ONNX model does
(the NHWC layout, paddings and axes are right)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.compiler import CompileOptions, compile_model
from engine.export.tflite import dequantize_output, export_bytes, quantize_input
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.sim.tflite_int import TfliteSimulator

litert = pytest.importorskip("ai_edge_litert.interpreter")
RNG = np.random.default_rng(7)


def _w(name: str, *shape: int, scale: float = 0.5) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _c(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype), name)


# name: (middle nodes reading "a" [1,8,8,8] and writing "b", extra initializers, channels of b, head)
CASES = {
    "conv3x3_relu": ([helper.make_node("Conv", ["a", "w3"], ["c"], pads=[1, 1, 1, 1]),
                      helper.make_node("Relu", ["c"], ["b"])], [_w("w3", 8, 8, 3, 3, scale=0.2)], 8, "conv"),
    "conv_stride2_explicit_pad": ([helper.make_node("Conv", ["a", "w3"], ["b"], pads=[1, 1, 1, 1], strides=[2, 2])],
                                  [_w("w3", 8, 8, 3, 3, scale=0.2)], 8, "conv"),
    "depthwise_relu6": ([helper.make_node("Conv", ["a", "wd"], ["c"], pads=[1, 1, 1, 1], group=8),
                         helper.make_node("Clip", ["c", "lo", "hi"], ["b"])],
                        [_w("wd", 8, 1, 3, 3), numpy_helper.from_array(np.float32(0), "lo"),
                         numpy_helper.from_array(np.float32(6), "hi")], 8, "conv"),
    "maxpool": ([helper.make_node("MaxPool", ["a"], ["b"], kernel_shape=[2, 2], strides=[2, 2])], [], 8, "conv"),
    "avgpool_same": ([helper.make_node("AveragePool", ["a"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                     [], 8, "conv"),
    "global_avgpool": ([helper.make_node("GlobalAveragePool", ["a"], ["b"])], [], 8, "conv"),
    "add": ([helper.make_node("Conv", ["a", "w1b"], ["c"]), helper.make_node("Add", ["a", "c"], ["b"])],
            [_w("w1b", 8, 8, 1, 1)], 8, "conv"),
    "sub_const": ([helper.make_node("Sub", ["a", "k"], ["b"])],
                  [numpy_helper.from_array(RNG.standard_normal((8, 1, 1)).astype(np.float32), "k")], 8, "conv"),
    "mul": ([helper.make_node("Conv", ["a", "w1b"], ["c"]), helper.make_node("Mul", ["a", "c"], ["b"])],
            [_w("w1b", 8, 8, 1, 1)], 8, "conv"),
    "concat": ([helper.make_node("Conv", ["a", "w1b"], ["c"]), helper.make_node("Concat", ["a", "c"], ["b"], axis=1)],
               [_w("w1b", 8, 8, 1, 1)], 16, "conv"),
    "hardswish": ([helper.make_node("HardSwish", ["a"], ["b"])], [], 8, "conv"),
    "sigmoid": ([helper.make_node("Sigmoid", ["a"], ["b"])], [], 8, "conv"),
    "tanh": ([helper.make_node("Tanh", ["a"], ["b"])], [], 8, "conv"),
    "leaky_relu": ([helper.make_node("LeakyRelu", ["a"], ["b"], alpha=0.1)], [], 8, "conv"),
    "prelu": ([helper.make_node("PRelu", ["a", "slope"], ["b"])],
              [numpy_helper.from_array(np.linspace(0.05, 0.4, 8, dtype=np.float32).reshape(8, 1, 1), "slope")],
              8, "conv"),
    "transpose": ([helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1, 3, 2])], [], 8, "conv"),
    "pad": ([helper.make_node("Pad", ["a", "pads"], ["b"])], [_c("pads", [0, 0, 1, 2, 0, 0, 2, 1])], 8, "conv"),
    "slice_step2": ([helper.make_node("Slice", ["a", "st", "en", "ax", "sp"], ["b"])],
                    [_c("st", [1, 0]), _c("en", [8, 6]), _c("ax", [2, 3]), _c("sp", [2, 1])], 8, "conv"),
    "split": ([helper.make_node("Split", ["a"], ["s0", "s1"], axis=1),
               helper.make_node("Add", ["s0", "s1"], ["b"])], [], 4, "conv"),
    "resize_nearest": ([helper.make_node("Resize", ["a", "", "scales"], ["b"], mode="nearest",
                                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
                       [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")], 8, "conv"),
    "resize_bilinear_half_pixel": ([helper.make_node("Resize", ["a", "", "scales"], ["b"], mode="linear",
                                                     coordinate_transformation_mode="half_pixel")],
                                   [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")], 8, "conv"),
    "resize_bilinear_align_corners": ([helper.make_node("Resize", ["a", "", "", "sizes"], ["b"], mode="linear",
                                                        coordinate_transformation_mode="align_corners")],
                                      [_c("sizes", [1, 8, 12, 12])], 8, "conv"),
    "reduce_mean": ([helper.make_node("ReduceMean", ["a"], ["b"], axes=[2, 3], keepdims=1)], [], 8, "conv"),
    "reshape_through_nchw": ([helper.make_node("Reshape", ["a", "s3"], ["r"]),
                              helper.make_node("Reshape", ["r", "s4"], ["b"])],
                             [_c("s3", [1, 16, 32]), _c("s4", [1, 8, 8, 8])], 8, "conv"),
    "relu_n1_to_1": ([helper.make_node("Clip", ["a", "m1", "p1"], ["b"])],
                     [numpy_helper.from_array(np.float32(-1), "m1"), numpy_helper.from_array(np.float32(1), "p1")],
                     8, "conv"),
    "conv_transpose_same": ([helper.make_node("ConvTranspose", ["a", "wt"], ["b"], strides=[2, 2],
                                                kernel_shape=[4, 4], pads=[1, 1, 1, 1])],
                            [_w("wt", 8, 8, 4, 4, scale=0.2)], 8, "conv"),
    "conv_transpose_valid_relu": ([helper.make_node("ConvTranspose", ["a", "wt"], ["c"], strides=[2, 2]),
                                   helper.make_node("Relu", ["c"], ["b"])],
                                  [_w("wt", 8, 8, 3, 3, scale=0.2)], 8, "conv"),
    "softmax": ([helper.make_node("Flatten", ["a"], ["f"]), helper.make_node("Gemm", ["f", "wg"], ["g"], transB=1),
                 helper.make_node("Softmax", ["g"], ["y"], axis=-1)], [_w("wg", 10, 512, scale=0.05)], 0, "none"),
    # a feature map's softmax over channels is TFLite's last (NHWC) axis; over width it is swapped there
    "softmax_channels": ([helper.make_node("Softmax", ["a"], ["b"], axis=1)], [], 8, "conv"),
    "softmax_width": ([helper.make_node("Softmax", ["a"], ["b"], axis=-1)], [], 8, "conv"),
    "maxpool_same_upper": ([helper.make_node("MaxPool", ["a"], ["b"], kernel_shape=[3, 3], strides=[2, 2],
                                             auto_pad="SAME_UPPER")], [], 8, "conv"),
}


def _model(case: str) -> onnx.ModelProto:
    nodes, inits, ch, head = CASES[case]
    first = [helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1])]
    inits = [_w("w0", 8, 4, 3, 3, scale=0.3), _w("b0", 8, scale=0.1), *inits]
    last = [helper.make_node("Conv", ["b", "wl"], ["y"])] if head == "conv" else []
    if head == "conv":
        inits.append(_w("wl", 6, ch, 1, 1, scale=0.3))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(first + nodes + last, case, [x], [y], inits)
    model = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    inferred = {v.name: v for v in model.graph.value_info}
    if "y" in inferred:
        model.graph.output[0].CopyFrom(inferred["y"])
    else:
        model.graph.output[0].type.tensor_type.shape.CopyFrom(
            onnx.shape_inference.infer_shapes(model).graph.output[0].type.tensor_type.shape)
    return model


@pytest.mark.parametrize("case", sorted(CASES))
def test_litert_reference_kernels_equal_our_simulation_and_follow_the_onnx_model(case):
    proto = _model(case)
    g = engine.load(proto)
    xs = RNG.uniform(-1, 1, (24, 1, 1, 4, 8, 8)).astype(np.float32)
    r = compile_model(g, "ethos-u55", CalibrationSet.from_arrays(case, {"x": xs[:, 0]}),
                      CompileOptions(quant=QuantConfig(method="minmax"), analysis_samples=0, require_tflite=True))
    tm = r.tflite
    it = litert.Interpreter(model_content=export_bytes(tm),
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    sim = TfliteSimulator(tm)
    fp = ort.InferenceSession(proto.SerializeToString())
    out = tm.tensors[tm.outputs[0]].name
    equal = total = 0
    ref, got = [], []
    for i in range(8):
        q = quantize_input(tm, "x", xs[i, 0])
        it.set_tensor(it.get_input_details()[0]["index"], q)
        it.invoke()
        theirs = it.get_tensor(it.get_output_details()[0]["index"])
        ours = sim.run({"x": q})[out]
        equal += int(np.sum(ours == theirs))
        total += ours.size
        ref.append(fp.run(None, {"x": xs[i, 0]})[0])
        got.append(dequantize_output(tm, out, theirs))
    assert equal / total >= 0.999, f"{case}: {equal}/{total} equal"
    ref_a, got_a = np.concatenate(ref).ravel(), np.concatenate(got).ravel()
    cos = float(ref_a @ got_a / (np.linalg.norm(ref_a) * np.linalg.norm(got_a) + 1e-12))
    assert cos > 0.98, f"{case}: cosine {cos:.4f} between LiteRT and the FP32 model"


@pytest.mark.parametrize("case", ["transpose", "pad", "slice_step2", "split", "resize_nearest", "prelu", "softmax",
                                  "softmax_width"])
def test_vela_runs_the_data_movement_ops_on_the_npu(case):
    pytest.importorskip("ethosu.vela")
    from engine.export.vela import run_vela
    from engine.hw.target import resolve_target

    target = resolve_target("ethos-u55")
    xs = RNG.uniform(-1, 1, (8, 1, 4, 8, 8)).astype(np.float32)
    r = compile_model(engine.load(_model(case)), target, CalibrationSet.from_arrays(case, {"x": xs}),
                      CompileOptions(quant=QuantConfig(method="minmax"), analysis_samples=0, require_tflite=True))
    v = run_vela(export_bytes(r.tflite), r.tflite, target.vela, target.name)
    assert v.cpu_ops == 0 and v.npu_ops >= 2, v.cpu_reasons


def test_vela_says_why_it_keeps_an_op_on_the_cpu():
    pytest.importorskip("ethosu.vela")
    from engine.export.vela import run_vela
    from engine.hw.target import resolve_target

    target = resolve_target("ethos-u55")
    case = "resize_bilinear_align_corners"  # scale factor 11/7: not one vela's Ethos-U resize takes
    xs = RNG.uniform(-1, 1, (8, 1, 4, 8, 8)).astype(np.float32)
    r = compile_model(engine.load(_model(case)), target, CalibrationSet.from_arrays(case, {"x": xs}),
                      CompileOptions(quant=QuantConfig(method="minmax"), analysis_samples=0, require_tflite=True))
    v = run_vela(export_bytes(r.tflite), r.tflite, target.vela, target.name)
    assert v.cpu_ops == 1
    assert len(v.cpu_reasons) == 1 and "RESIZE_BILINEAR" in v.cpu_reasons[0] and "scale-factor" in v.cpu_reasons[0]


def _gelu_nodes(src: str, dst: str) -> list[onnx.NodeProto]:
    """Gelu as torch exports it (x * 0.5 * (1 + erf(x / sqrt 2))); the optimizer fuses it."""
    return [helper.make_node("Div", [src, "sqrt2"], ["gd"]), helper.make_node("Erf", ["gd"], ["ge"]),
            helper.make_node("Add", ["ge", "one"], ["ga"]), helper.make_node("Mul", [src, "ga"], ["gm"]),
            helper.make_node("Mul", ["gm", "half"], [dst])]


_HEADS = [_c("s_heads", [1, 8, 2, 8]), _c("s_back", [1, 8, 16])]
# name: (nodes reading "a" [1, 8, 16] and writing "b", extra initializers, last axis of b, --allow-float-ops)
SEQ_CASES = {
    "fully_connected_rank3": ([helper.make_node("Relu", ["a"], ["b"])], [], 16, False),
    "batch_matmul_attention": ([
        helper.make_node("Reshape", ["a", "s_heads"], ["h"]),
        helper.make_node("Transpose", ["h"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["h"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "q"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "s_back"], ["b"])], _HEADS, 16, False),
    "mean_last_axis": ([helper.make_node("ReduceMean", ["a"], ["m"], axes=[-1], keepdims=1),
                        helper.make_node("Sub", ["a", "m"], ["b"])], [], 16, False),
    "mean_sequence_axis": ([helper.make_node("ReduceMean", ["a"], ["b"], axes=[1], keepdims=0)], [], 16, False),
    "slice_unit_steps": ([helper.make_node("Slice", ["a", "st", "en", "ax"], ["b"])],
                         [_c("st", [4]), _c("en", [12]), _c("ax", [2])], 8, False),
    "gelu": (_gelu_nodes("a", "b"), [numpy_helper.from_array(np.float32(np.sqrt(2)), "sqrt2"),
                                     numpy_helper.from_array(np.float32(1), "one"),
                                     numpy_helper.from_array(np.float32(0.5), "half")], 16, False),
    "layer_norm_decomposed_int8": ([
        helper.make_node("ReduceMean", ["a"], ["lm"], axes=[-1]), helper.make_node("Sub", ["a", "lm"], ["ld"]),
        helper.make_node("Pow", ["ld", "two"], ["lp"]), helper.make_node("ReduceMean", ["lp"], ["lv"], axes=[-1]),
        helper.make_node("Add", ["lv", "eps"], ["le"]), helper.make_node("Sqrt", ["le"], ["ls"]),
        helper.make_node("Div", ["ld", "ls"], ["ln"]), helper.make_node("Mul", ["ln", "ln_g"], ["lg"]),
        helper.make_node("Add", ["lg", "ln_b"], ["b"])],
        [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(1e-5), "eps"),
         _w("ln_g", 16, scale=1.0), _w("ln_b", 16, scale=0.2)], 16, False),
    "layer_norm_float_island": ([helper.make_node("LayerNormalization", ["a", "ln_g", "ln_b"], ["b"], axis=-1)],
                                [_w("ln_g", 16, scale=1.0), _w("ln_b", 16, scale=0.2)], 16, True),
}


def _seq_model(case: str) -> onnx.ModelProto:
    nodes, inits, width, _ = SEQ_CASES[case]
    first = [helper.make_node("MatMul", ["x", "w0"], ["a0"]), helper.make_node("Add", ["a0", "b0"], ["a"])]
    inits = [_w("w0", 16, 16, scale=0.3), _w("b0", 16, scale=0.1), _w("wl", width, 6, scale=0.3), *inits]
    last = [helper.make_node("MatMul", ["b", "wl"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(first + nodes + last, case, [x], [y], inits)
    model = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    model.graph.output[0].type.tensor_type.shape.CopyFrom(
        onnx.shape_inference.infer_shapes(model).graph.output[0].type.tensor_type.shape)
    return model


@pytest.mark.parametrize("case", sorted(SEQ_CASES))
def test_sequence_ops_in_litert_equal_our_simulation_and_follow_the_onnx_model(case):
    proto = _seq_model(case)
    xs = RNG.uniform(-1, 1, (24, 1, 8, 16)).astype(np.float32)
    r = compile_model(engine.load(proto), "ethos-u55", CalibrationSet.from_arrays(case, {"x": xs}),
                      CompileOptions(quant=QuantConfig(method="minmax"), analysis_samples=0, require_tflite=True,
                                     allow_float_ops=SEQ_CASES[case][3]))
    tm = r.tflite
    opcodes = {o.opcode for o in tm.ops}
    expected = {"fully_connected_rank3": "FULLY_CONNECTED", "batch_matmul_attention": "BATCH_MATMUL",
                "mean_last_axis": "MEAN", "mean_sequence_axis": "MEAN", "slice_unit_steps": "SLICE",
                "gelu": "GELU", "layer_norm_decomposed_int8": "RSQRT", "layer_norm_float_island": "DEQUANTIZE"}[case]
    assert expected in opcodes, opcodes
    floats = [t.name for t in tm.tensors if t.dtype == "float32"]
    assert bool(floats) == SEQ_CASES[case][3], floats  # float tensors only inside --allow-float-ops islands
    it = litert.Interpreter(model_content=export_bytes(tm),
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    sim = TfliteSimulator(tm)
    fp = ort.InferenceSession(proto.SerializeToString())
    out = tm.tensors[tm.outputs[0]].name
    equal = total = 0
    ref, got = [], []
    for i in range(8):
        q = quantize_input(tm, "x", xs[i])
        it.set_tensor(it.get_input_details()[0]["index"], q)
        it.invoke()
        theirs = it.get_tensor(it.get_output_details()[0]["index"])
        ours = sim.run({"x": q})[out]
        equal += int(np.sum(ours == theirs))
        total += ours.size
        ref.append(fp.run(None, {"x": xs[i]})[0])
        got.append(dequantize_output(tm, out, theirs))
    assert equal / total >= 0.999, f"{case}: {equal}/{total} equal"
    ref_a, got_a = np.concatenate(ref).ravel(), np.concatenate(got).ravel()
    cos = float(ref_a @ got_a / (np.linalg.norm(ref_a) * np.linalg.norm(got_a) + 1e-12))
    assert cos > 0.98, f"{case}: cosine {cos:.4f} between LiteRT and the FP32 model"


def test_without_allow_float_ops_layer_normalization_is_an_error_naming_it_and_the_flag():
    from engine.errors import InputError

    proto = _seq_model("layer_norm_float_island")
    xs = RNG.uniform(-1, 1, (8, 1, 8, 16)).astype(np.float32)
    with pytest.raises(InputError, match=r"LayerNormalization.*--allow-float-ops"):
        compile_model(engine.load(proto), "ethos-u55", CalibrationSet.from_arrays("ln", {"x": xs}),
                      CompileOptions(quant=QuantConfig(method="minmax"), analysis_samples=0, require_tflite=True))
