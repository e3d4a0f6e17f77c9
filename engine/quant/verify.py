"""The last check before a quantized model is written: every scale finite and positive.

Values near the float limit (3e38 weights or calibration data, an infinite bias) can give a
scale of inf, NaN or 0 that ONNX's checker accepts and a runtime silently turns into garbage.
Such a model is never written: the error names the tensor and the scale's range.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, numpy_helper

from engine.errors import InputError

SMALLEST_SCALE = float(np.finfo(np.float32).tiny)
"""A smaller (denormal) scale has a reciprocal beyond float32: runtimes quantize to garbage."""


def _constants(model: ModelProto) -> dict[str, np.ndarray]:
    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def check_qdq_scales(model: ModelProto) -> None:
    """InputError when a QuantizeLinear/DequantizeLinear scale is not finite and positive."""
    consts = _constants(model)
    for n in model.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(n.input) < 2:
            continue
        scale = consts.get(n.input[1])
        if scale is None:
            continue
        s = np.asarray(scale, np.float64)
        if s.size and not (np.all(np.isfinite(s)) and np.all(s >= SMALLEST_SCALE)):
            tensor = n.input[0]
            raise InputError(f"tensor {tensor[:60]!r}: its quantization scale ranges over [{np.nanmin(s):.3g}, "
                             f"{np.nanmax(s):.3g}], not finite and at least {SMALLEST_SCALE:.3g} (values near the float limits, such as "
                             "3e38, inf or 1e-42, cannot be quantized); nothing was written")


QUANTIZABLE_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def check_quantizable(graph) -> None:
    """Refuse, before any pass runs, a model whose float tensors QuantizeLinear cannot take.

    ONNX's QuantizeLinear quantizes float32, float16 (and bfloat16) only; a float64 graph input
    or weight would give a QDQ model that no runtime loads.
    """
    where = getattr(graph, "source_path", None) or "model"
    values = [*graph.inputs, *graph.initializers.values()]
    for v in values:
        dt = v.type.dtype
        if dt is not None and dt.kind == "f" and np.dtype(dt) not in QUANTIZABLE_FLOATS and dt.itemsize > 4:
            raise InputError(f"{where}: tensor {v.name[:60]!r} is {dt.name}; the quantizer takes float32 or float16 "
                             "models (QuantizeLinear has no double input); convert the model to float32 first")
