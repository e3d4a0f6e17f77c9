"""Elementwise arithmetic, comparison and logic ops (numpy broadcasting semantics)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.ir.types import TensorType
from nodes._util import broadcast_infer
from nodes.registry import register_spec
from nodes.spec import NodeContext, OpSpec, Port, RunContext


class BinarySpec(OpSpec):
    """Two inputs broadcast to one output computed by ``fn``."""

    family = "elementwise"
    inputs = (Port("A"), Port("B"))
    outputs = (Port("C"),)

    def __init__(self, op_type: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], since: int,
                 out_dtype: np.dtype | None = None, doc: str = "") -> None:
        self.op_type = op_type
        self.since = since
        self.fn = fn
        self.out_dtype = out_dtype
        self.doc = doc
        super().__init__()

    def infer(self, ctx: NodeContext) -> list[TensorType]:
        """Broadcast shape; the dtype of A (or bool for comparisons)."""
        return broadcast_infer(ctx, self.out_dtype)

    def reference(self, ctx: RunContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Apply the numpy function; keeps the input dtype for arithmetic."""
        out = self.fn(a, b)
        if self.out_dtype is None and out.dtype != a.dtype:
            out = out.astype(a.dtype)
        return out


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        # ONNX integer Div truncates toward zero (C semantics), numpy floors.
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.trunc(a.astype(np.float64) / b.astype(np.float64))
        return q.astype(a.dtype)
    return np.divide(a, b)


for _name, _fn, _since in (
    ("Add", np.add, 7),
    ("Sub", np.subtract, 7),
    ("Mul", np.multiply, 7),
    ("Div", _div, 7),
):
    register_spec(BinarySpec(_name, _fn, _since, doc=f"Elementwise {_name} with broadcasting."))
