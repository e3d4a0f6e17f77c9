"""Small models built in tests (onnx.helper), shared by several test modules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_models() -> list[Path]:
    """The real architectures shipped in the onnx wheel (weights are placeholders)."""
    return sorted(LIGHT_DIR.glob("*.onnx"))


def demo_model(name: str) -> Path:
    """Path of a bundled demo model (assets/models/NAME.onnx)."""
    return ASSETS / "models" / f"{name}.onnx"


def tiny_add_mul(opset: int = 17) -> onnx.ModelProto:
    """w = (x + y) * x with a symbolic batch dim."""
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"], name="add"), helper.make_node("Mul", ["z", "x"], ["w"], name="mul")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, ["N", 3])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def with_initializer(name: str = "c", value: float = 2.0) -> onnx.ModelProto:
    """y = x * c, where c is an initializer."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", name], ["y"], name="scale")],
        "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        initializer=[numpy_helper.from_array(np.full((2, 2), value, np.float32), name)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
