"""Activations: recognised from their decomposed forms, then fused into Conv/Gemm.

Recognised patterns (all exact identities; constants compared with a relative tolerance of
1e-3, which separates 1/6 from any other constant a model would use here)::

    HardSigmoid(x) = max(0, min(1, x/6 + 1/2)) = Clip(x + 3, 0, 6) / 6 = Clip(x + 3, 0, 6) * (1/6)
    HardSwish(x)   = x * HardSigmoid(x)        (HardSigmoid with alpha = 1/6, beta = 1/2)
                   = x * Clip(x + 3, 0, 6) / 6  (also with * (1/6))

HardSwish is an opset-14 op; the model's opset is raised when that is safe (see opset.py),
otherwise the decomposed form stays and the reason is reported.

Fusion into the producer: ``act(Conv(x))`` becomes one Conv node carrying
``activation = FusedActivation(act, {..}, names=(original names))`` (the
executor applies it after the Conv kernel; the ONNX writer writes the Conv followed by the
activation again). Relu, Clip (Relu6 is Clip(0, 6); bounds must be constants), LeakyRelu,
HardSigmoid, HardSwish, Sigmoid, Tanh and SiLU, x * sigmoid(x), fuse into Conv,
ConvTranspose and Gemm. The producer's output must have no other reader: the pre-activation
value would be lost.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from engine.ir.fused import FUSABLE_ACTIVATIONS, FusedActivation
from engine.ir.graph import Graph, Node
from engine.passes.opset import ensure_opset
from engine.passes.pattern import Alt, Const, Match, Op, Rule, RulePass, Var, match_pattern
from engine.passes.rewrite import absorb, const_value, fused_name, replace_with

PRODUCERS = ("Conv", "ConvTranspose", "Gemm")


def clip_bounds(node: Node) -> tuple[float | None, float | None] | str:
    """(min, max) of a Clip node (None for an absent bound), or why they are not constants."""
    g = node.graph
    opset = g.opset("") if g is not None else 13
    if opset < 11:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
        return (None if lo is None else float(lo), None if hi is None else float(hi))
    out: list[float | None] = []
    for i in (1, 2):
        v = node.input(i)
        if v is None:
            out.append(None)
            continue
        arr = const_value(v)
        if arr is None or arr.size != 1:
            return f"Clip {'min' if i == 1 else 'max'} {v.name!r} is not a constant scalar"
        out.append(float(arr.reshape(-1)[0]))
    return out[0], out[1]


def _close(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= 1e-3 * max(abs(b), 1e-6)


def _is_relu6_shift(node: Node) -> bool:
    b = clip_bounds(node)
    return not isinstance(b, str) and _close(b[0], 0.0) and _close(b[1], 6.0)


def _hs_attrs_ok(node: Node) -> bool:
    return _close(float(node.attrs.get("alpha", 0.2)), 1 / 6) and _close(float(node.attrs.get("beta", 0.5)), 0.5)


_CLIP = Op("Clip", Op("Add", Var("x"), Const("three", 3.0), name="add3"), extra=True, name="clip",
           where=_is_relu6_shift)
_HSIG_FORMS = Alt(Op("Div", _CLIP, Const("six", 6.0), name="scale"),
                  Op("Mul", _CLIP, Const("sixth", 1 / 6), name="scale"))


class HardSigmoidFromClip(Rule):
    """Clip(x + 3, 0, 6) / 6 -> HardSigmoid(x, alpha=1/6, beta=0.5)."""

    name = "fuse_hardswish.hardsigmoid"

    def __init__(self) -> None:
        self.pattern = _HSIG_FORMS  # type: ignore[assignment]
        self.anchors = ("Div", "Mul")
        super().__init__()

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """One HardSigmoid node."""
        return replace_with(graph, m.nodes, m.root, "HardSigmoid", [m["x"]], {"alpha": 1 / 6, "beta": 0.5},
                            name=fused_name(graph, "HardSigmoid", m.nodes))


class HardSwishRule(Rule):
    """x * HardSigmoid(x) and x * Clip(x + 3, 0, 6) / 6 -> HardSwish(x)."""

    name = "fuse_hardswish.hardswish"
    anchors = ("Mul", "Div")

    def __init__(self, allow_raise: bool = True) -> None:
        super().__init__()
        self.allow_raise = allow_raise
        self.patterns = [
            Op("Mul", Var("x"), Op("HardSigmoid", Var("x"), name="hsig", where=_hs_attrs_ok), name="root"),
            Op("Div", Op("Mul", Var("x"), _CLIP, name="mul"), Const("six", 6.0), name="root"),
            Op("Mul", Op("Mul", Var("x"), _CLIP, name="mul"), Const("sixth", 1 / 6), name="root"),
            Op("Mul", Var("x"), _HSIG_FORMS, name="root"),
        ]

    def matches(self, node: Node) -> Iterator[Match]:
        """Every form above rooted at ``node``."""
        for p in self.patterns:
            yield from match_pattern(p, node)

    def check(self, graph: Graph, m: Match) -> str | None:
        """HardSwish needs opset 14."""
        return ensure_opset(graph, 14, self.allow_raise, ignore=m.nodes)

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """One HardSwish node."""
        return replace_with(graph, m.nodes, m.root, "HardSwish", [m["x"]], name=fused_name(graph, "HardSwish", m.nodes))


# -- fusion into the producer -------------------------------------------------------------------------
def _record(act: Node) -> FusedActivation | str:
    op = act.op_type
    if op == "Clip":
        b = clip_bounds(act)
        if isinstance(b, str):
            return b
        attrs: dict[str, Any] = {k: v for k, v in (("min", b[0]), ("max", b[1])) if v is not None}
    elif op == "LeakyRelu":
        attrs = {"alpha": float(act.attrs.get("alpha", 0.01))}
    elif op == "HardSigmoid":
        attrs = {"alpha": float(act.attrs.get("alpha", 0.2)), "beta": float(act.attrs.get("beta", 0.5))}
    else:
        attrs = {}
    return FusedActivation(op, attrs, (act.name,))


class ActivationIntoProducer(Rule):
    """act(Conv/ConvTranspose/Gemm(..)) -> the producer carrying ``activation``."""

    def __init__(self, act: str) -> None:
        self.name = f"fuse_activation.{act.lower()}"
        self.pattern = Op(act, Op(PRODUCERS, name="prod", any_inputs=True), extra=True, name="act")
        super().__init__()

    def check(self, graph: Graph, m: Match) -> str | None:
        """The activation reads the producer's output as its data input; constant bounds."""
        act, prod = m["act"], m["prod"]
        if act.inputs[0] is not prod.outputs[0]:
            return "the producer output is not the activation's data input"
        if prod.activation:
            return f"{prod.name!r} already carries a fused {prod.activation.op_type}"
        dt = prod.outputs[0].type.dtype
        if dt is not None and np.dtype(dt).kind != "f":
            return "not a floating-point output"
        rec = _record(act)
        return rec if isinstance(rec, str) else None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """The producer takes over the activation's output and records it."""
        act, prod = m["act"], m["prod"]
        rec = _record(act)
        node = absorb(graph, prod, [act], act)
        node.activation = rec
        return node


class SiLUIntoProducer(Rule):
    """y * Sigmoid(y) with y = Conv/Gemm(..) -> the producer carrying a SiLU activation."""

    name = "fuse_activation.silu"

    def __init__(self) -> None:
        prod = Op(PRODUCERS, name="prod", any_inputs=True)
        self.pattern = Op("Mul", prod, Op("Sigmoid", prod, name="sig"), name="act")
        super().__init__()

    def check(self, graph: Graph, m: Match) -> str | None:
        """The producer carries no activation yet."""
        prod = m["prod"]
        if prod.activation:
            return f"{prod.name!r} already carries a fused {prod.activation.op_type}"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """The producer takes over the Mul's output."""
        sig, act, prod = m["sig"], m["act"], m["prod"]
        node = absorb(graph, prod, [sig, act], act)
        node.activation = FusedActivation("SiLU", {}, (sig.name, act.name))
        return node


# One list of fusable activations (engine.ir.fused); SiLU is a two-node pattern of its own rule.
ACTIVATIONS = tuple(a for a in FUSABLE_ACTIVATIONS if a != "SiLU")


def hardswish_pass(disabled: tuple[str, ...] = (), allow_raise: bool = True) -> RulePass:
    """The fuse_hardswish rule set (HardSigmoid and HardSwish from their decompositions)."""
    return RulePass("fuse_hardswish", [HardSigmoidFromClip(), HardSwishRule(allow_raise)],
                    "Clip(x+3,0,6)/6 -> HardSigmoid; x*HardSigmoid(x) -> HardSwish", disabled=disabled)


def activation_pass(disabled: tuple[str, ...] = ()) -> RulePass:
    """The fuse_activation rule set."""
    rules: list[Rule] = [SiLUIntoProducer()] + [ActivationIntoProducer(a) for a in ACTIVATIONS]
    return RulePass("fuse_activation", rules, "Activations fused into the Conv/ConvTranspose/Gemm producing them",
                    disabled=disabled)
