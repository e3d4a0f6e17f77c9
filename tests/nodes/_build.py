"""Building the one-graph models of the op tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.ir.graph import Graph

ValueInfo = tuple[str, int, Sequence[Any] | None]


def _value_info(v: str | ValueInfo):
    if isinstance(v, str):  # declared without type or shape: inference fills them in
        return helper.make_tensor_value_info(v, TensorProto.UNDEFINED, None)
    return helper.make_tensor_value_info(*v)


def load_graph(nodes: Sequence, inputs: Iterable[ValueInfo], outputs: Iterable[str | ValueInfo],
               inits: Iterable[tuple[str, Any]] = (), opset: int = 17) -> Graph:
    """Load a one-graph model of ``nodes`` without the onnx checker.

    ``inputs`` are (name, elem_type, shape-or-None); ``outputs`` are names (declared without
    type or shape) or such triples; ``inits`` are (name, array-like) initializers.
    """
    g = helper.make_graph(list(nodes), "g", [_value_info(v) for v in inputs], [_value_info(v) for v in outputs],
                          initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    return engine.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), check=False)


def shape_of(g: Graph, name: str) -> tuple | None:
    """The inferred shape of value ``name``."""
    return g.lookup(name).type.shape
