"""The in-memory TFLite program: tensors and operators as the flatbuffer stores them.

The lowering (tflite_lower.py) builds it from the QDQ graph, the writer (tflite_write.py)
serializes it, the integer simulator (engine/sim/tflite_int.py) runs it. Shapes are TFLite's
(NHWC for 4-D feature maps); constant tensors are deduplicated by content.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

OP_VERSIONS = {
    "CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 4, "ADD": 2, "SUB": 2, "MUL": 2,
    "MAXIMUM": 2, "MINIMUM": 2, "AVERAGE_POOL_2D": 2, "MAX_POOL_2D": 2, "MEAN": 2, "RESHAPE": 1,
    "CONCATENATION": 2, "PAD": 2, "TRANSPOSE": 2, "LOGISTIC": 2, "TANH": 2, "HARD_SWISH": 1,
    "RELU": 2, "RELU6": 2, "RELU_N1_TO_1": 2, "LEAKY_RELU": 2, "SOFTMAX": 2, "QUANTIZE": 2,
    "DEQUANTIZE": 2, "STRIDED_SLICE": 2, "SPLIT": 2, "SPLIT_V": 2, "RESIZE_NEAREST_NEIGHBOR": 2,
    "RESIZE_BILINEAR": 2, "PRELU": 1, "TRANSPOSE_CONV": 3, "BATCH_MATMUL": 2, "GELU": 2, "SLICE": 2,
    "SQUARED_DIFFERENCE": 1, "RSQRT": 1, "RELU_0_TO_1": 1,
}
"""Operator versions LiteRT registers for the int8 forms we write (tensorflow/lite/tools/versioning)."""


@dataclass
class TTensor:
    """One tensor: int8 activations carry (scale, zero point); constants carry data."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int = 0
    data: np.ndarray | None = None

    @property
    def quantized(self) -> bool:
        """True when the tensor carries quantization parameters."""
        return self.scale is not None

    def scalar_scale(self) -> float:
        """The per-tensor scale (float32 as stored)."""
        assert self.scale is not None
        return float(np.float32(np.asarray(self.scale).reshape(-1)[0]))

    def scalar_zp(self) -> int:
        """The per-tensor zero point."""
        assert self.zero_point is not None
        return int(np.asarray(self.zero_point).reshape(-1)[0])

    def quant_json(self) -> dict[str, Any] | None:
        """Quantization parameters for plan.json and the round-trip test."""
        if self.scale is None:
            return None
        sc = np.asarray(self.scale, np.float32).reshape(-1)
        zp = np.asarray(self.zero_point, np.int64).reshape(-1)
        return {"scale": [float(v) for v in sc], "zero_point": [int(v) for v in zp],
                "quantized_dimension": int(self.axis)}


@dataclass
class TOp:
    """One operator: builtin name, tensor indices (-1: absent optional input) and options."""

    opcode: str
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    node: str = ""


@dataclass
class TModel:
    """A single-subgraph TFLite model."""

    tensors: list[TTensor] = field(default_factory=list)
    ops: list[TOp] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    float_ops: list[dict[str, str]] = field(default_factory=list)
    nhwc: bool = True
    _consts: dict[str, int] = field(default_factory=dict, repr=False)
    _names: set[str] = field(default_factory=set, repr=False)

    def _unique(self, name: str) -> str:
        base, k = name, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def add(self, t: TTensor) -> int:
        """Append an activation tensor; returns its index."""
        t.name = self._unique(t.name)
        self.tensors.append(t)
        return len(self.tensors) - 1

    def const(self, name: str, data: np.ndarray, scale: Any = None, zero_point: Any = None,
              axis: int = 0) -> int:
        """A constant tensor, shared with any earlier constant of the same content."""
        data = np.ascontiguousarray(data)
        h = hashlib.sha256()
        h.update(str((data.dtype.str, data.shape, axis)).encode())
        h.update(data.tobytes())
        for p in (scale, zero_point):
            h.update(b"|" if p is None else np.asarray(p, np.float64).tobytes())
        key = h.hexdigest()
        if key in self._consts:
            return self._consts[key]
        dt = {"i": {1: "int8", 4: "int32", 8: "int64"}, "f": {4: "float32"}}[data.dtype.kind][data.dtype.itemsize]
        idx = self.add(TTensor(name, tuple(int(d) for d in data.shape), dt,
                               None if scale is None else np.asarray(scale, np.float32).reshape(-1),
                               None if zero_point is None else np.asarray(zero_point, np.int64).reshape(-1),
                               axis, data))
        self._consts[key] = idx
        return idx

    def op(self, opcode: str, inputs: list[int], outputs: list[int], node: str = "", **options: Any) -> TOp:
        """Append an operator."""
        o = TOp(opcode, list(inputs), list(outputs), options, node)
        self.ops.append(o)
        return o

    def summary(self) -> dict[str, Any]:
        """Ops with their tensors' shapes and quantization (plan.json's ``tflite`` section)."""
        def tj(i: int) -> dict[str, Any] | None:
            if i < 0:
                return None
            t = self.tensors[i]
            return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "quant": t.quant_json()}

        return {"ops": [{"op": o.opcode, "node": o.node, "inputs": [tj(i) for i in o.inputs],
                         "outputs": [tj(i) for i in o.outputs]} for o in self.ops],
                "inputs": [tj(i) for i in self.inputs], "outputs": [tj(i) for i in self.outputs],
                "float_ops": list(self.float_ops)}
