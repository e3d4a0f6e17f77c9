"""Fused activations: a Conv/Gemm (or any single-output op) that also applies an activation.

A fused node is the same op with ``node.meta["activation"]``, a record::

    {"op_type": "Relu", "attrs": {}, "names": ["relu1"]}

``names`` are the original activation node names (they name the nodes again when the fused
node is written back as standard ONNX). The activation is spelled out as *steps*, each one
standard ONNX op, so that the executor and the ONNX writer use the same definition:

=============  ===================================================  ======================
record         meaning                                              steps
=============  ===================================================  ======================
Relu           max(x, 0)                                            Relu(x)
Clip           min(max(x, min), max); Relu6 is Clip(0, 6)           Clip(x, min, max)
LeakyRelu      x if x >= 0 else alpha * x                           LeakyRelu(x)
HardSigmoid    max(0, min(1, alpha * x + beta))                     HardSigmoid(x)
HardSwish      x * max(0, min(1, x / 6 + 1/2))                      HardSwish(x)
Sigmoid        1 / (1 + exp(-x))                                    Sigmoid(x)
Tanh           tanh(x)                                              Tanh(x)
SiLU           x * sigmoid(x)                                       Sigmoid(x); Mul(x, s)
=============  ===================================================  ======================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FUSABLE_ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "SiLU")
"""Activations a producer node may carry in ``meta["activation"]``."""

X = "x"  # a step input: the fused op's own (pre-activation) output
PREV = "prev"  # a step input: the previous step's output


@dataclass
class Step:
    """One standard ONNX op of an activation: inputs are X, PREV or constant arrays."""

    op_type: str
    inputs: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)


def activation_steps(record: dict[str, Any], opset: int, dtype: np.dtype | None = None) -> list[Step]:
    """The standard ONNX ops that compute ``record`` at this default-domain opset."""
    op = record["op_type"]
    attrs = dict(record.get("attrs") or {})
    dt = np.dtype(dtype) if dtype is not None else np.dtype(np.float32)
    if op == "SiLU":
        return [Step("Sigmoid", [X]), Step("Mul", [X, PREV])]
    if op == "Clip":
        lo, hi = attrs.get("min"), attrs.get("max")
        if opset < 11:
            kept = {k: float(v) for k, v in (("min", lo), ("max", hi)) if v is not None}
            return [Step("Clip", [X], kept)]
        inputs: list[Any] = [X, None if lo is None else np.array(lo, dtype=dt),
                             None if hi is None else np.array(hi, dtype=dt)]
        while inputs[-1] is None:
            inputs.pop()
        return [Step("Clip", inputs)]
    if op not in FUSABLE_ACTIVATIONS:
        raise ValueError(f"unknown fused activation {op!r}")
    return [Step(op, [X], attrs)]


def activation_fn(node: Any, opset: int, dtype: np.dtype | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """``node.meta["activation"]`` as a function of the op's output, with the registry's reference
    kernels resolved once (the executor keeps it in its plan)."""
    from nodes import registry
    from nodes.spec import REQUIRED, RunContext

    compiled = []
    for step in activation_steps(node.meta["activation"], opset, dtype):
        spec = registry.get(step.op_type)
        if spec is None:
            raise ValueError(f"fused activation {step.op_type!r} of node {node.name!r} has no kernel")
        attrs = {a.name: a.default for a in spec.attrs if a.default is not REQUIRED}
        attrs.update(step.attrs)
        compiled.append((spec.reference, RunContext(node, attrs, opset), step.inputs))

    def run(x: np.ndarray) -> np.ndarray:
        prev = x
        for ref, ctx, inputs in compiled:
            args = [x if a is X else prev if a is PREV else
                    (a.astype(x.dtype) if isinstance(a, np.ndarray) and a.dtype != x.dtype else a) for a in inputs]
            res = ref(ctx, *args)
            prev = res if isinstance(res, np.ndarray) else np.asarray(res[0])
        return prev

    return run


def run_activation(node: Any, x: np.ndarray, opset: int) -> np.ndarray:
    """Apply ``node.meta["activation"]`` to ``x`` with the registry's reference kernels."""
    return activation_fn(node, opset, x.dtype)(x)


def describe(record: dict[str, Any]) -> str:
    """A short human text of an activation record, e.g. ``Clip(0, 6)``."""
    attrs = record.get("attrs") or {}
    if record["op_type"] == "Clip":
        return f"Clip({attrs.get('min')}, {attrs.get('max')})"
    if attrs:
        inner = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(attrs.items()))
        return f"{record['op_type']}({inner})"
    return str(record["op_type"])


def fused_activation(node: Any) -> dict[str, Any] | None:
    """The activation record a node carries (None when it has no fused activation)."""
    return node.meta.get("activation") or None
