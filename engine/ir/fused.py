"""Fused activations: a Conv/Gemm (or any single-output op) that also applies an activation.

A fused node is the same op with ``node.activation``, a validated ``FusedActivation``::

    FusedActivation("Clip", {"min": 0.0, "max": 6.0}, names=("relu6",))

``names`` are the original activation node names (they name the nodes again when the fused
node is written back as standard ONNX). The activation is spelled out as *steps*, each one
standard ONNX op, so that the executor, the ONNX writer, the node counts of the optimizer
report and every other reader use the same definition:

=============  ===================================================  ======================
op_type        meaning                                              steps
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

ACTIVATION_ATTRS: dict[str, tuple[str, ...]] = {
    "Relu": (), "Clip": ("min", "max"), "LeakyRelu": ("alpha",), "HardSigmoid": ("alpha", "beta"),
    "HardSwish": (), "Sigmoid": (), "Tanh": (), "SiLU": (),
}
"""The activations a producer node may carry (``node.activation``) and the attributes of each."""

FUSABLE_ACTIVATIONS = tuple(ACTIVATION_ATTRS)

X = "x"  # a step input: the fused op's own (pre-activation) output
PREV = "prev"  # a step input: the previous step's output


@dataclass
class Step:
    """One standard ONNX op of an activation: inputs are X, PREV or constant arrays."""

    op_type: str
    inputs: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FusedActivation:
    """An activation applied to a node's (single) output; immutable, validated at construction.

    ``attrs`` holds only the attributes the activation defines (``ACTIVATION_ATTRS``), as
    floats; ``names`` the names of the activation nodes it replaced (provenance).
    """

    op_type: str
    attrs: dict[str, float] = field(default_factory=dict)
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        allowed = ACTIVATION_ATTRS.get(self.op_type)
        if allowed is None:
            raise ValueError(f"{self.op_type!r} is not a fusable activation ({', '.join(FUSABLE_ACTIVATIONS)})")
        extra = sorted(set(self.attrs) - set(allowed))
        if extra:
            raise ValueError(f"fused {self.op_type} has no attribute {extra[0]!r}")
        clean = {k: float(v) for k, v in self.attrs.items() if v is not None}
        object.__setattr__(self, "attrs", clean)
        object.__setattr__(self, "names", tuple(self.names))

    def __hash__(self) -> int:
        return hash((self.op_type, tuple(sorted(self.attrs.items())), self.names))

    def steps(self, opset: int, dtype: np.dtype | None = None) -> list[Step]:
        """The standard ONNX ops that compute it at this default-domain opset."""
        return activation_steps(self, opset, dtype)

    @property
    def onnx_nodes(self) -> int:
        """How many ONNX nodes the writer emits for it (SiLU is Sigmoid + Mul)."""
        return len(self.steps(13))

    def describe(self) -> str:
        """A short human text, e.g. ``Clip(0, 6)``."""
        return describe(self)

    def to_json(self) -> dict[str, Any]:
        """``{"op_type", "attrs", "names"}`` (the simulate document's op records)."""
        return {"op_type": self.op_type, "attrs": dict(self.attrs), "names": list(self.names)}


def activation_steps(act: FusedActivation, opset: int, dtype: np.dtype | None = None) -> list[Step]:
    """The standard ONNX ops that compute ``act`` at this default-domain opset."""
    op = act.op_type
    attrs = dict(act.attrs)
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
    """``node.activation`` as a function of the op's output, with the registry's reference
    kernels resolved once (the executor keeps it in its plan)."""
    from nodes import registry
    from nodes.spec import REQUIRED, RunContext

    compiled = []
    for step in activation_steps(node.activation, opset, dtype):
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
    """Apply ``node.activation`` to ``x`` with the registry's reference kernels."""
    return activation_fn(node, opset, x.dtype)(x)


def describe(act: FusedActivation) -> str:
    """A short human text of an activation, e.g. ``Clip(0, 6)``."""
    attrs = act.attrs
    if act.op_type == "Clip":
        return f"Clip({attrs.get('min')}, {attrs.get('max')})"
    if attrs:
        inner = ", ".join(f"{k}={v:g}" for k, v in sorted(attrs.items()))
        return f"{act.op_type}({inner})"
    return act.op_type


def fused_activation(node: Any) -> FusedActivation | None:
    """The activation a node carries (None when it has none)."""
    return getattr(node, "activation", None)
