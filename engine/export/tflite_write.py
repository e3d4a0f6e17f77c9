"""Serializing a TModel as a TFLite flatbuffer (schema bindings of the ``tflite`` package).

Buffer 0 is the empty sentinel every TFLite file starts with; each constant tensor owns one
buffer, activations point at buffer 0. Nothing time-dependent is written: the same program
gives the same bytes.
"""

from __future__ import annotations

import importlib
from typing import Any

import flatbuffers
import numpy as np
import tflite

from engine.export.tflite_ir import OP_VERSIONS, TModel, TOp

TENSOR_TYPES = {"float32": 0, "int32": 2, "int8": 9, "int64": 4}
ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}
PADDING = {"SAME": 0, "VALID": 1}
DESCRIPTION = "npu-studio int8 export"


def _m(name: str) -> Any:
    """The generated module of one schema table (the package re-exports its classes by name)."""
    return importlib.import_module(f"tflite.{name}")


def _ivec(b: flatbuffers.Builder, values: list[int]) -> int:
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        b.PrependInt32(int(v))
    return b.EndVector()


def _options(b: flatbuffers.Builder, op: TOp) -> tuple[int, int]:
    """(BuiltinOptions type, table offset) of one operator."""
    o, code = op.options, op.opcode
    act = ACTIVATIONS[o.get("activation", "NONE")]
    if code in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        mod = _m("Conv2DOptions") if code == "CONV_2D" else _m("DepthwiseConv2DOptions")
        pre = "Conv2DOptions" if code == "CONV_2D" else "DepthwiseConv2DOptions"
        getattr(mod, f"{pre}Start")(b)
        getattr(mod, f"{pre}AddPadding")(b, PADDING[o["padding"]])
        getattr(mod, f"{pre}AddStrideW")(b, o["stride_w"])
        getattr(mod, f"{pre}AddStrideH")(b, o["stride_h"])
        getattr(mod, f"{pre}AddDilationWFactor")(b, o["dilation_w"])
        getattr(mod, f"{pre}AddDilationHFactor")(b, o["dilation_h"])
        getattr(mod, f"{pre}AddFusedActivationFunction")(b, act)
        if code == "DEPTHWISE_CONV_2D":
            _m("DepthwiseConv2DOptions").DepthwiseConv2DOptionsAddDepthMultiplier(b, o["depth_multiplier"])
            return tflite.BuiltinOptions.DepthwiseConv2DOptions, getattr(mod, f"{pre}End")(b)
        return tflite.BuiltinOptions.Conv2DOptions, getattr(mod, f"{pre}End")(b)
    if code in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        m = _m("Pool2DOptions")
        m.Pool2DOptionsStart(b)
        m.Pool2DOptionsAddPadding(b, PADDING[o["padding"]])
        m.Pool2DOptionsAddStrideW(b, o["stride_w"])
        m.Pool2DOptionsAddStrideH(b, o["stride_h"])
        m.Pool2DOptionsAddFilterWidth(b, o["filter_w"])
        m.Pool2DOptionsAddFilterHeight(b, o["filter_h"])
        m.Pool2DOptionsAddFusedActivationFunction(b, act)
        return tflite.BuiltinOptions.Pool2DOptions, m.Pool2DOptionsEnd(b)
    if code == "FULLY_CONNECTED":
        m = _m("FullyConnectedOptions")
        m.FullyConnectedOptionsStart(b)
        m.FullyConnectedOptionsAddFusedActivationFunction(b, act)
        return tflite.BuiltinOptions.FullyConnectedOptions, m.FullyConnectedOptionsEnd(b)
    if code in ("ADD", "SUB", "MUL"):
        name = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions"}[code]
        m = _m(name)
        getattr(m, f"{name}Start")(b)
        getattr(m, f"{name}AddFusedActivationFunction")(b, act)
        return getattr(tflite.BuiltinOptions, name), getattr(m, f"{name}End")(b)
    if code == "CONCATENATION":
        m = _m("ConcatenationOptions")
        m.ConcatenationOptionsStart(b)
        m.ConcatenationOptionsAddAxis(b, o["axis"])
        m.ConcatenationOptionsAddFusedActivationFunction(b, act)
        return tflite.BuiltinOptions.ConcatenationOptions, m.ConcatenationOptionsEnd(b)
    if code == "RESHAPE":
        shape = _ivec(b, o["new_shape"])
        m = _m("ReshapeOptions")
        m.ReshapeOptionsStart(b)
        m.ReshapeOptionsAddNewShape(b, shape)
        return tflite.BuiltinOptions.ReshapeOptions, m.ReshapeOptionsEnd(b)
    if code == "SOFTMAX":
        m = _m("SoftmaxOptions")
        m.SoftmaxOptionsStart(b)
        m.SoftmaxOptionsAddBeta(b, o.get("beta", 1.0))
        return tflite.BuiltinOptions.SoftmaxOptions, m.SoftmaxOptionsEnd(b)
    if code == "LEAKY_RELU":
        m = _m("LeakyReluOptions")
        m.LeakyReluOptionsStart(b)
        m.LeakyReluOptionsAddAlpha(b, o["alpha"])
        return tflite.BuiltinOptions.LeakyReluOptions, m.LeakyReluOptionsEnd(b)
    if code in ("SPLIT", "SPLIT_V"):
        name = "SplitOptions" if code == "SPLIT" else "SplitVOptions"
        m = _m(name)
        getattr(m, f"{name}Start")(b)
        getattr(m, f"{name}AddNumSplits")(b, o["num_splits"])
        return getattr(tflite.BuiltinOptions, name), getattr(m, f"{name}End")(b)
    if code in ("RESIZE_NEAREST_NEIGHBOR", "RESIZE_BILINEAR"):
        name = "ResizeNearestNeighborOptions" if code == "RESIZE_NEAREST_NEIGHBOR" else "ResizeBilinearOptions"
        m = _m(name)
        getattr(m, f"{name}Start")(b)
        getattr(m, f"{name}AddAlignCorners")(b, bool(o.get("align_corners")))
        getattr(m, f"{name}AddHalfPixelCenters")(b, bool(o.get("half_pixel_centers")))
        return getattr(tflite.BuiltinOptions, name), getattr(m, f"{name}End")(b)
    if code == "TRANSPOSE_CONV":
        m = _m("TransposeConvOptions")
        m.TransposeConvOptionsStart(b)
        m.TransposeConvOptionsAddPadding(b, PADDING[o["padding"]])
        m.TransposeConvOptionsAddStrideW(b, o["stride_w"])
        m.TransposeConvOptionsAddStrideH(b, o["stride_h"])
        m.TransposeConvOptionsAddFusedActivationFunction(b, act)
        return tflite.BuiltinOptions.TransposeConvOptions, m.TransposeConvOptionsEnd(b)
    if code == "STRIDED_SLICE":
        m = _m("StridedSliceOptions")
        m.StridedSliceOptionsStart(b)
        return tflite.BuiltinOptions.StridedSliceOptions, m.StridedSliceOptionsEnd(b)
    if code == "BATCH_MATMUL":
        m = _m("BatchMatMulOptions")
        m.BatchMatMulOptionsStart(b)
        m.BatchMatMulOptionsAddAdjX(b, bool(o.get("adj_x")))
        m.BatchMatMulOptionsAddAdjY(b, bool(o.get("adj_y")))
        return tflite.BuiltinOptions.BatchMatMulOptions, m.BatchMatMulOptionsEnd(b)
    if code == "MEAN":
        m = _m("ReducerOptions")
        m.ReducerOptionsStart(b)
        m.ReducerOptionsAddKeepDims(b, bool(o.get("keep_dims")))
        return tflite.BuiltinOptions.ReducerOptions, m.ReducerOptionsEnd(b)
    if code == "GELU":
        m = _m("GeluOptions")
        m.GeluOptionsStart(b)
        m.GeluOptionsAddApproximate(b, bool(o.get("approximate")))
        return tflite.BuiltinOptions.GeluOptions, m.GeluOptionsEnd(b)
    simple = {"PAD": "PadOptions", "TRANSPOSE": "TransposeOptions", "QUANTIZE": "QuantizeOptions", "DEQUANTIZE": "DequantizeOptions",
              "HARD_SWISH": "HardSwishOptions", "MAXIMUM": "MaximumMinimumOptions",
              "MINIMUM": "MaximumMinimumOptions", "SLICE": "SliceOptions",
              "SQUARED_DIFFERENCE": "SquaredDifferenceOptions"}
    if code in simple:
        name = simple[code]
        m = _m(name)
        getattr(m, f"{name}Start")(b)
        return getattr(tflite.BuiltinOptions, name), getattr(m, f"{name}End")(b)
    return tflite.BuiltinOptions.NONE, 0


def _quant(b: flatbuffers.Builder, t: Any) -> int:
    scale = np.asarray(t.scale, np.float32).reshape(-1)
    zp = np.asarray(t.zero_point, np.int64).reshape(-1)
    b.StartVector(4, len(scale), 4)
    for v in reversed(scale):
        b.PrependFloat32(float(v))
    sv = b.EndVector()
    b.StartVector(8, len(zp), 8)
    for v in reversed(zp):
        b.PrependInt64(int(v))
    zv = b.EndVector()
    m = _m("QuantizationParameters")
    m.QuantizationParametersStart(b)
    m.QuantizationParametersAddScale(b, sv)
    m.QuantizationParametersAddZeroPoint(b, zv)
    m.QuantizationParametersAddQuantizedDimension(b, int(t.axis))
    return m.QuantizationParametersEnd(b)


def serialize(model: TModel) -> bytes:
    """The flatbuffer bytes of ``model``."""
    b = flatbuffers.Builder(1 << 16)
    # buffers: 0 = empty sentinel, then one per constant
    buffer_of: dict[int, int] = {}
    buf_offsets = []
    _m("Buffer").BufferStart(b)
    buf_offsets.append(_m("Buffer").BufferEnd(b))
    for i, t in enumerate(model.tensors):
        if t.data is None:
            continue
        raw = np.ascontiguousarray(t.data).astype(t.data.dtype.newbyteorder("<")).tobytes()
        b.StartVector(1, len(raw), 16)
        b.head = b.head - len(raw)
        b.Bytes[b.head:b.head + len(raw)] = raw
        data = b.EndVector()
        _m("Buffer").BufferStart(b)
        _m("Buffer").BufferAddData(b, data)
        buffer_of[i] = len(buf_offsets)
        buf_offsets.append(_m("Buffer").BufferEnd(b))
    tensors = []
    for i, t in enumerate(model.tensors):
        name = b.CreateString(t.name)
        shape = _ivec(b, list(t.shape))
        q = _quant(b, t) if t.quantized else None
        m = _m("Tensor")
        m.TensorStart(b)
        m.TensorAddShape(b, shape)
        m.TensorAddType(b, TENSOR_TYPES[t.dtype])
        m.TensorAddBuffer(b, buffer_of.get(i, 0))
        m.TensorAddName(b, name)
        if q is not None:
            m.TensorAddQuantization(b, q)
        tensors.append(m.TensorEnd(b))
    codes: list[str] = []
    for op in model.ops:
        if op.opcode not in codes:
            codes.append(op.opcode)
    ops = []
    for op in model.ops:
        ins, outs = _ivec(b, op.inputs), _ivec(b, op.outputs)
        opt_type, opt = _options(b, op)
        m = _m("Operator")
        m.OperatorStart(b)
        m.OperatorAddOpcodeIndex(b, codes.index(op.opcode))
        m.OperatorAddInputs(b, ins)
        m.OperatorAddOutputs(b, outs)
        if opt_type:
            m.OperatorAddBuiltinOptionsType(b, opt_type)
            m.OperatorAddBuiltinOptions(b, opt)
        ops.append(m.OperatorEnd(b))

    def vec(items: list[int]) -> int:
        b.StartVector(4, len(items), 4)
        for it in reversed(items):
            b.PrependUOffsetTRelative(it)
        return b.EndVector()

    tensor_vec, op_vec = vec(tensors), vec(ops)
    in_vec, out_vec = _ivec(b, model.inputs), _ivec(b, model.outputs)
    sg_name = b.CreateString("main")
    m = _m("SubGraph")
    m.SubGraphStart(b)
    m.SubGraphAddTensors(b, tensor_vec)
    m.SubGraphAddInputs(b, in_vec)
    m.SubGraphAddOutputs(b, out_vec)
    m.SubGraphAddOperators(b, op_vec)
    m.SubGraphAddName(b, sg_name)
    subgraph = m.SubGraphEnd(b)
    code_offsets = []
    for c in codes:
        value = getattr(tflite.BuiltinOperator, c)
        m = _m("OperatorCode")
        m.OperatorCodeStart(b)
        m.OperatorCodeAddDeprecatedBuiltinCode(b, min(value, 127))
        m.OperatorCodeAddBuiltinCode(b, value)
        version = OP_VERSIONS.get(c, 1)
        if c == "TRANSPOSE_CONV" and any(o.opcode == c and o.options.get("activation", "NONE") != "NONE"
                                         for o in model.ops):
            version = 4  # a fused activation needs TRANSPOSE_CONV v4
        m.OperatorCodeAddVersion(b, version)
        code_offsets.append(m.OperatorCodeEnd(b))
    codes_vec = vec(code_offsets)
    sub_vec = vec([subgraph])
    buffers_vec = vec(buf_offsets)
    desc = b.CreateString(DESCRIPTION)
    m = _m("Model")
    m.ModelStart(b)
    m.ModelAddVersion(b, 3)
    m.ModelAddOperatorCodes(b, codes_vec)
    m.ModelAddSubgraphs(b, sub_vec)
    m.ModelAddDescription(b, desc)
    m.ModelAddBuffers(b, buffers_vec)
    b.Finish(m.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())
