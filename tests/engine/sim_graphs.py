"""Small graphs and targets shared by the hardware, placement and simulator tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.hw.target import HardwareTarget, target_from_dict
from engine.ir.graph import Graph

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "assets" / "targets"


def target_doc(name: str = "phone-npu") -> dict[str, Any]:
    """The parsed YAML of a bundled target (a fresh copy to modify)."""
    return copy.deepcopy(yaml.safe_load((TARGETS / f"{name}.yaml").read_text()))


def make_target(name: str = "phone-npu", ops: list[str] | None = None, **npu: Any) -> HardwareTarget:
    """A bundled target with some NPU fields or the op list replaced."""
    doc = target_doc(name)
    doc["npu"].update(npu)
    if ops is not None:
        doc["npu"]["ops"] = {op: {} for op in ops}
    return target_from_dict(doc, f"{name}(test)")


def every_op_target(name: str = "phone-npu") -> HardwareTarget:
    """A target whose NPU lists every op NPU Studio defines and holds every dtype."""
    from nodes import registry

    doc = target_doc(name)
    doc["npu"]["ops"] = {op: {} for op in sorted(registry.op_types())}
    doc["npu"]["constraints"] = {"dtypes": ["int8", "uint8", "int16", "int32", "int64", "bool", "float32"],
                                 "static_shapes": True}
    return target_from_dict(doc, "every-op(test)")


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _w(name: str, shape: tuple[int, ...], seed: int = 0):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def vi(name: str, shape: list[int]):
    """A float tensor value info."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def load(model: onnx.ModelProto) -> Graph:
    """engine.load of an in-memory model."""
    return engine.load(model)


def chain(ops: list[str], shape: tuple[int, ...] = (1, 64, 56, 56)) -> Graph:
    """x -> op0 -> op1 -> ... (unary elementwise ops), node names n0, n1, ..."""
    nodes, prev = [], "x"
    for k, op in enumerate(ops):
        out = f"t{k}" if k < len(ops) - 1 else "y"
        nodes.append(helper.make_node(op, [prev], [out], name=f"n{k}"))
        prev = out
    return load(_model(nodes, [vi("x", list(shape))], [vi("y", list(shape))]))


def matmul_sandwich(m: int, k: int, n: int, outer: str = "Erf") -> Graph:
    """x -> outer (CPU) -> MatMul(W k x n) -> outer (CPU) -> y, nodes pre, mm, post."""
    nodes = [helper.make_node(outer, ["x"], ["a"], name="pre"),
             helper.make_node("MatMul", ["a", "W"], ["b"], name="mm"),
             helper.make_node(outer, ["b"], ["y"], name="post")]
    return load(_model(nodes, [vi("x", [m, k])], [vi("y", [m, n])], [_w("W", (k, n))]))


def conv_graph(cin: int = 64, cout: int = 64, hw: int = 56, k: int = 3, stride: int = 1,
               relu: bool = True, group: int = 1) -> Graph:
    """x -> Conv(k x k) [-> Relu] -> y."""
    pad = k // 2
    nodes = [helper.make_node("Conv", ["x", "W"], ["c" if relu else "y"], name="conv", kernel_shape=[k, k],
                              pads=[pad] * 4, strides=[stride, stride], group=group)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    ho = (hw + 2 * pad - k) // stride + 1
    return load(_model(nodes, [vi("x", [1, cin, hw, hw])], [vi("y", [1, cout, ho, ho])],
                       [_w("W", (cout, cin // group, k, k))]))


def split_by_cheap_op(m: int = 256, k: int = 1024, op: str = "Erf") -> Graph:
    """Two large MatMuls split by one cheap op the phone NPU does not run: mm1 -> mid -> mm2."""
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"], name="mm1"),
             helper.make_node(op, ["a"], ["b"], name="mid"),
             helper.make_node("MatMul", ["b", "W2"], ["y"], name="mm2")]
    return load(_model(nodes, [vi("x", [m, k])], [vi("y", [m, k])], [_w("W1", (k, k)), _w("W2", (k, k), 1)]))


def branchy(n_blocks: int = 3) -> Graph:
    """A small CNN-like graph with residual adds, an unsupported op per block and a head."""
    nodes, inits = [], []
    prev = "x"
    for b in range(n_blocks):
        inits.append(_w(f"W{b}", (16, 16, 3, 3), b))
        nodes += [helper.make_node("Conv", [prev, f"W{b}"], [f"c{b}"], name=f"conv{b}", kernel_shape=[3, 3],
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{b}"], [f"r{b}"], name=f"relu{b}"),
                  helper.make_node("Erf", [f"r{b}"], [f"e{b}"], name=f"erf{b}"),
                  helper.make_node("Add", [f"e{b}", prev], [f"s{b}"], name=f"add{b}")]
        prev = f"s{b}"
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "Wfc"], ["y"], name="fc", transB=1)]
    inits.append(_w("Wfc", (10, 16), 9))
    return load(_model(nodes, [vi("x", [1, 16, 32, 32])], [vi("y", [1, 10])], inits))


def synthetic(n_nodes: int, seed: int = 0) -> Graph:
    """A long graph of cheap ops with skip connections and occasional unsupported ops (scale tests)."""
    rng = np.random.default_rng(seed)
    nodes = []
    names = ["x"]
    for k in range(n_nodes):
        r = rng.random()
        if r < 0.1 and len(names) > 4:
            other = names[-int(rng.integers(2, min(len(names), 8)))]
            nodes.append(helper.make_node("Add", [names[-1], other], [f"v{k}"], name=f"n{k}"))
        elif r < 0.15:
            nodes.append(helper.make_node("Erf", [names[-1]], [f"v{k}"], name=f"n{k}"))
        elif r < 0.4:
            nodes.append(helper.make_node("Sigmoid", [names[-1]], [f"v{k}"], name=f"n{k}"))
        else:
            nodes.append(helper.make_node("Relu", [names[-1]], [f"v{k}"], name=f"n{k}"))
        names.append(f"v{k}")
    return load(_model(nodes, [vi("x", [1, 32, 16, 16])], [vi(names[-1], [1, 32, 16, 16])]))
