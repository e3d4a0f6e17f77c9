"""Full-integer int8 TFLite export (no TensorFlow): the facade over lowering and serializing.

``export_tflite(result)`` gives the bytes of model.tflite for a compile whose target exports
TFLite; ``read_summary(data)`` reads a file back with the ``tflite`` package's schema bindings
(ops, tensor shapes, quantization), the same shape of document as ``TModel.summary()`` writes
into plan.json, so the two can be compared (``summary_differences``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.export.tflite_ir import TModel


def export_bytes(model: TModel) -> bytes:
    """The flatbuffer of a lowered program."""
    from engine.export.tflite_write import serialize

    return serialize(model)


def quantize_input(model: TModel, name: str, x: np.ndarray) -> np.ndarray:
    """A float input (ONNX layout) as the int8 tensor the TFLite model takes (NHWC for 4-D)."""
    t = next(model.tensors[i] for i in model.inputs if model.tensors[i].name == name)
    x = np.asarray(x, np.float32)
    if x.ndim == 4 and model.nhwc:
        x = x.transpose(0, 2, 3, 1)
    q = np.rint(x / np.float32(t.scalar_scale())) + t.scalar_zp()
    return np.clip(q, -128, 127).astype(np.int8)


def dequantize_output(model: TModel, name: str, q: np.ndarray) -> np.ndarray:
    """An int8 output as float in ONNX layout."""
    t = next(model.tensors[i] for i in model.outputs if model.tensors[i].name == name)
    x = (q.astype(np.float32) - t.scalar_zp()) * np.float32(t.scalar_scale())
    return x.transpose(0, 3, 1, 2) if x.ndim == 4 and model.nhwc else x


def read_summary(data: bytes) -> dict[str, Any]:
    """Ops, tensor shapes and quantization of a .tflite file, read with the ``tflite`` package."""
    import tflite

    model = tflite.Model.GetRootAsModel(data, 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    sg = model.Subgraphs(0)

    def tj(i: int) -> dict[str, Any] | None:
        if i < 0:
            return None
        t = sg.Tensors(i)
        q = t.Quantization()
        quant = None
        if q is not None and q.ScaleLength():
            quant = {"scale": [float(v) for v in q.ScaleAsNumpy()],
                     "zero_point": [int(v) for v in q.ZeroPointAsNumpy()],
                     "quantized_dimension": int(q.QuantizedDimension())}
        dtypes = {0: "float32", 2: "int32", 4: "int64", 9: "int8"}
        return {"name": t.Name().decode(), "shape": [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else [],
                "dtype": dtypes.get(t.Type(), str(t.Type())), "quant": quant}

    ops = []
    for k in range(sg.OperatorsLength()):
        op = sg.Operators(k)
        code = model.OperatorCodes(op.OpcodeIndex())
        ops.append({"op": names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())],
                    "version": int(code.Version()),
                    "inputs": [tj(int(i)) for i in op.InputsAsNumpy()],
                    "outputs": [tj(int(i)) for i in op.OutputsAsNumpy()]})
    return {"ops": ops, "inputs": [tj(int(i)) for i in sg.InputsAsNumpy()],
            "outputs": [tj(int(i)) for i in sg.OutputsAsNumpy()]}


def summary_differences(written: dict[str, Any], read_back: dict[str, Any]) -> list[str]:
    """Where a file read back (``read_summary``) differs from what plan.json says was written
    (``TModel.summary()``): op order, each tensor's shape, dtype and quantization (scales to
    float32 precision). Empty when they agree."""
    diffs: list[str] = []
    ops_w, ops_r = [o["op"] for o in written["ops"]], [o["op"] for o in read_back["ops"]]
    if ops_w != ops_r:
        return [f"ops differ: plan.json {len(ops_w)} ops, file {len(ops_r)} ops"]
    for k, (a, b) in enumerate(zip(written["ops"], read_back["ops"])):
        ta_all, tb_all = a["inputs"] + a["outputs"], b["inputs"] + b["outputs"]
        if len(ta_all) != len(tb_all):
            diffs.append(f"op {k} {a['op']}: {len(ta_all)} tensors in plan.json, {len(tb_all)} in the file")
            continue
        for ta, tb in zip(ta_all, tb_all):
            if (ta is None) != (tb is None):
                diffs.append(f"op {k} {a['op']}: an optional input is present in only one of them")
                continue
            if ta is None:
                continue
            where = f"op {k} {a['op']} tensor {ta['name']!r}"
            if list(ta["shape"]) != list(tb["shape"]) or ta["dtype"] != tb["dtype"]:
                diffs.append(f"{where}: {ta['dtype']}{ta['shape']} written, {tb['dtype']}{tb['shape']} read")
            qa, qb = ta["quant"], tb["quant"]
            if (qa is None) != (qb is None):
                diffs.append(f"{where}: quantized in only one of them")
            elif qa is not None and (qa["zero_point"] != qb["zero_point"]
                                     or qa["quantized_dimension"] != qb["quantized_dimension"]
                                     or not np.allclose(qa["scale"], qb["scale"], rtol=1e-7, atol=0)):
                diffs.append(f"{where}: quantization differs")
    return diffs
