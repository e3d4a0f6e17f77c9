"""Transformer blocks: decomposed LayerNorm -> LayerNormalization, erf/tanh GELU -> Gelu.

LayerNorm over the trailing axes A = [a, .., r-1] of x (ReduceMean with keepdims=1)::

    mu  = ReduceMean_A(x)                 d = x - mu
    var = ReduceMean_A(d ** 2)            (d * d also accepted)
    n   = d / Sqrt(var + eps)             (d * Reciprocal(Sqrt(..)) also accepted)
    y   = n * gamma + beta  ==  LayerNormalization(x, gamma, beta, axis=a, epsilon=eps)

It is matched in three composable steps so every variant reduces to one node: the core ``n``
becomes ``LayerNormalization(x, ones, axis=a, epsilon=eps)``; then ``LN(x, s, b) * c`` becomes
``LN(x, s*c, b*c)`` and ``LN(x, s, b) + c`` becomes ``LN(x, s, b+c)`` for constants c that
broadcast over the normalized shape only.

GELU (Gelu, opset 20)::

    exact:  GELU(x) = x * 0.5 * (1 + erf(x / sqrt(2)))                 (x * (1/sqrt(2)) also)
    tanh:   GELU(x) = x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
                      -> Gelu(x, approximate="tanh")                     (x^3 = Pow(x, 3) or x*x*x)

The outer product x * 0.5 * (1 + ..) is matched in any association and order (the factors of a
tree of single-use Mul nodes, or a final Div by 2 for the 0.5).

LayerNormalization needs opset 17 and Gelu opset 20. The model's opset is raised when no other
node changes meaning by that (see opset.py); otherwise the decomposed form stays and the
report says which op prevents it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from engine.ir.graph import Graph, Node, Value
from engine.passes.opset import ensure_opset
from engine.passes.pattern import Alt, Const, Match, Op, Rule, RulePass, Var, match_pattern
from engine.passes.rewrite import (
    add_constant,
    const_value,
    fused_name,
    is_scalar_close,
    merge_provenance,
    replace_with,
)


def reduce_axes(node: Node, rank: int | None) -> list[int] | None:
    """The normalized axes a ReduceMean reduces (None when unknown or not keepdims)."""
    if int(node.attrs.get("keepdims", 1)) != 1 or rank is None:
        return None
    if "axes" in node.attrs:
        axes = [int(a) for a in node.attrs["axes"]]
    elif node.input(1) is not None:
        arr = const_value(node.input(1))
        if arr is None:
            return None
        axes = [int(a) for a in arr.reshape(-1)]
    else:
        if int(node.attrs.get("noop_with_empty_axes", 0)):
            return None
        axes = list(range(rank))
    return sorted(a + rank if a < 0 else a for a in axes)


_X = Var("x")
_MEAN = Op("ReduceMean", _X, name="mean", extra=True)
_D = Op("Sub", _X, _MEAN, name="d")
_SQ = Alt(Op("Pow", _D, Const("two", 2.0), name="sq"), Op("Mul", _D, _D, name="sq"))
_VAR = Op("ReduceMean", _SQ, name="var", extra=True)
_STD = Op("Sqrt", Op("Add", _VAR, Const("eps"), name="add_eps"), name="std")
_LN_CORE = Alt(Op("Div", _D, _STD, name="norm"), Op("Mul", _D, Op("Reciprocal", _STD, name="recip"), name="norm"))


class LayerNormCore(Rule):
    """(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) -> LayerNormalization(x, ones)."""

    name = "fuse_layernorm.core"
    anchors = ("Div", "Mul")

    def __init__(self, allow_raise: bool = True) -> None:
        self.allow_raise = allow_raise
        super().__init__()

    def matches(self, node: Node) -> Iterator[Match]:
        """The normalization core rooted at the Div (or the Mul by a reciprocal)."""
        yield from match_pattern(_LN_CORE, node)

    def _axes(self, m: Match) -> list[int] | str:
        x = m["x"]
        rank = x.type.rank
        if rank is None:
            return "the rank of the input is not known"
        a1, a2 = reduce_axes(m["mean"], rank), reduce_axes(m["var"], rank)
        if a1 is None or a2 is None:
            return "ReduceMean axes are not constant or keepdims is 0"
        if a1 != a2:
            return f"mean and variance reduce different axes ({a1} vs {a2})"
        if a1 != list(range(rank - len(a1), rank)) or not a1:
            return f"reduces axes {a1}, not the trailing axes"
        return a1

    def check(self, graph: Graph, m: Match) -> str | None:
        """Trailing axes, a scalar epsilon, a floating input with a static normalized shape, opset 17."""
        axes = self._axes(m)
        if isinstance(axes, str):
            return axes
        eps = const_value(m["eps"])
        if eps is None or eps.size != 1:
            return "epsilon is not a scalar constant"
        x = m["x"]
        if x.type.dtype is None or np.dtype(x.type.dtype).kind != "f":
            return "the input is not floating point (or its type is unknown)"
        shape = x.type.shape
        if shape is None or not all(isinstance(shape[a], int) for a in axes):
            return "the normalized dimensions are not static (fix input shapes with --shape)"
        return ensure_opset(graph, 17, self.allow_raise, ignore=m.nodes)

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """One LayerNormalization with unit scale and no bias."""
        axes = self._axes(m)
        x = m["x"]
        norm_shape = tuple(int(x.type.shape[a]) for a in axes)  # type: ignore[index, arg-type]
        dtype = np.dtype(x.type.dtype)
        scale = add_constant(graph, "ln_scale", np.ones(norm_shape, dtype=dtype))
        eps = float(const_value(m["eps"]).reshape(-1)[0])  # type: ignore[union-attr]
        return replace_with(graph, m.nodes, m.root, "LayerNormalization", [x, scale],
                            {"axis": int(axes[0]) - (x.type.rank or 0), "epsilon": eps},  # type: ignore[index]
                            name=fused_name(graph, "LayerNormalization", m.nodes))


def _affine_vector(c: np.ndarray, norm_shape: tuple[int, ...], out_rank: int) -> np.ndarray | None:
    """``c`` as an array of the normalized shape when it only broadcasts over it, else None."""
    if c.ndim > out_rank:
        return None
    k = len(norm_shape)
    lead = c.shape[:max(0, c.ndim - k)]
    if any(d != 1 for d in lead):
        return None
    tail = c.reshape(c.shape[len(lead):])
    try:
        return np.broadcast_to(tail, norm_shape) if np.broadcast_shapes(tail.shape, norm_shape) == norm_shape else None
    except ValueError:
        return None


class LayerNormAffine(Rule):
    """LayerNormalization(x, s, b) * c -> LN(x, s*c, b*c); LN(x, s, b) + c -> LN(x, s, b+c)."""

    anchors = ("Mul", "Add")

    def __init__(self, op: str) -> None:
        self.op = op
        self.name = f"fuse_layernorm.{'scale' if op == 'Mul' else 'bias'}"
        self.anchors = (op,)
        self.pattern = Op(op, Op("LayerNormalization", Var("x"), Var("s"), name="ln", extra=True), Var("c"),
                          name="root")
        super().__init__()

    def _norm(self, m: Match) -> tuple[np.ndarray, np.ndarray | None, np.ndarray] | str:
        ln = m["ln"]
        s = const_value(ln.input(1))
        b = const_value(ln.input(2)) if ln.input(2) is not None else None
        if s is None or (ln.input(2) is not None and b is None):
            return "LayerNormalization scale or bias is not a constant"
        if any(o is not None and (o.uses() or o.is_graph_output) for o in ln.outputs[1:]):
            return "LayerNormalization's mean/inv-std outputs are read"
        c = const_value(m["c"])
        if c is None:
            return f"{m['c'].name!r} is not a constant"
        rank = ln.outputs[0].type.rank
        if rank is None:
            return "the rank is not known"
        vec = _affine_vector(c, tuple(s.shape), rank)
        if vec is None:
            return f"constant of shape {tuple(c.shape)} does not act on the normalized axes only"
        return s, b, vec

    def check(self, graph: Graph, m: Match) -> str | None:
        """A constant acting on the normalized axes only."""
        got = self._norm(m)
        return got if isinstance(got, str) else None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """New scale/bias initializers; the LayerNormalization keeps its name."""
        ln, root = m["ln"], m["root"]
        s, b, vec = self._norm(m)  # type: ignore[misc]
        dtype = s.dtype
        if self.op == "Mul":
            s2 = (s.astype(np.float64) * vec).astype(dtype)
            b2 = None if b is None else (b.astype(np.float64) * vec).astype(dtype)
        else:
            s2 = s
            b2 = (vec.astype(np.float64) if b is None else b.astype(np.float64) + vec).astype(dtype)
        inputs: list[Value | None] = [ln.inputs[0], add_constant(graph, f"{ln.name}_scale", s2)]
        if b2 is not None:
            inputs.append(add_constant(graph, f"{ln.name}_bias", b2))
        prov = merge_provenance([ln, root])
        node = replace_with(graph, [ln, root], root, "LayerNormalization", inputs, dict(ln.attrs), name=ln.name)
        node.meta["provenance"] = prov
        return node


def layernorm_pass(disabled: tuple[str, ...] = (), allow_raise: bool = True) -> RulePass:
    """The fuse_layernorm rule set (``allow_raise``: may raise the opset to 17)."""
    return RulePass("fuse_layernorm", [LayerNormCore(allow_raise), LayerNormAffine("Mul"), LayerNormAffine("Add")],
                    "Decomposed LayerNorm -> LayerNormalization (opset 17)", disabled=disabled)


# -- GELU ----------------------------------------------------------------------------------------------
_ERF_ARG = Alt(Op("Div", Var("x"), Const("sqrt2", math.sqrt(2.0)), name="scale_in"),
               Op("Mul", Var("x"), Const("inv_sqrt2", 1 / math.sqrt(2.0)), name="scale_in"))
_CUBE = Alt(Op("Pow", Var("x"), Const("three", 3.0), name="cube"),
            Op("Mul", Op("Mul", Var("x"), Var("x"), name="sq"), Var("x"), name="cube"))
_TANH_ARG = Op("Mul", Op("Add", Var("x"), Op("Mul", _CUBE, Const("k", 0.044715), name="kx3"), name="inner"),
               Const("c", math.sqrt(2.0 / math.pi)), name="scale_in")


def _mul_factors(v: Value, inside: list[Node]) -> list[Value]:
    """The factors of ``v`` through single-use Mul nodes (those nodes go to ``inside``)."""
    p = v.producer()
    if p is not None and p.op_type == "Mul" and p.domain == "" and len(v.uses()) == 1 and not v.is_graph_output:
        inside.append(p)
        return _mul_factors(p.inputs[0], inside) + _mul_factors(p.inputs[1], inside)  # type: ignore[arg-type]
    return [v]


def _classify(factors: list[Value | None], x: Value, one_plus: Value) -> str:
    """"done" when the factors are exactly x, 0.5 and (1 + ..); "more" when some are still
    missing; "bad" when anything else is multiplied in."""
    n_x = sum(1 for f in factors if f is x)
    n_add = sum(1 for f in factors if f is one_plus)
    n_half = sum(1 for f in factors if f is None or is_scalar_close(const_value(f), 0.5))
    if len(factors) != n_x + n_add + n_half or n_x > 1 or n_add != 1 or n_half > 1:
        return "bad"
    return "done" if n_x == 1 and n_half == 1 else "more"


class GeluRule(Rule):
    """x * 0.5 * (1 + erf(x/sqrt2)) -> Gelu(x); the tanh form -> Gelu(x, approximate="tanh")."""

    def __init__(self, kind: str, allow_raise: bool = True) -> None:
        self.kind = kind
        self.allow_raise = allow_raise
        self.name = f"fuse_gelu.{kind}"
        self.anchors = ("Erf",) if kind == "erf" else ("Tanh",)
        super().__init__()

    def matches(self, node: Node) -> Iterator[Match]:
        """From the Erf/Tanh: its argument, then 1 + .., then the product with x and 0.5."""
        arg_pat = _ERF_ARG if self.kind == "erf" else _TANH_ARG
        src = node.inputs[0]
        if src is None or src.producer() is None:
            return
        for inner in match_pattern(arg_pat, src.producer()):  # type: ignore[arg-type]
            found = self._outer(node, inner.bindings["x"])
            if found is None:
                continue
            root, outer_nodes = found
            yield Match(root, [root, *[n for n in outer_nodes if n is not root], node, *inner.nodes],
                        {"x": inner.bindings["x"]})

    def _outer(self, act: Node, x: Value) -> tuple[Node, list[Node]] | None:
        out = act.outputs[0]
        uses = out.uses()  # type: ignore[union-attr]
        if len(uses) != 1 or out.is_graph_output:  # type: ignore[union-attr]
            return None
        add = uses[0][0]
        if add.op_type != "Add" or add.domain != "":
            return None
        other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
        if not is_scalar_close(const_value(other), 1.0):
            return None
        climbed: list[Node] = [add]
        cur = add.outputs[0]
        # Climb through single-use Mul nodes (or a final Div by 2) until the product's factors
        # are exactly {x, 0.5, 1 + ..}; 0.5 may come as a Div by 2 (marked None).
        for _ in range(4):
            users = cur.uses()
            if len(users) != 1 or cur.is_graph_output:
                return None
            top = users[0][0]
            inside: list[Node] = []
            if top.op_type == "Mul" and top.domain == "":
                factors: list[Value | None] = [*_mul_factors(top.inputs[0], inside),  # type: ignore[arg-type]
                                               *_mul_factors(top.inputs[1], inside)]  # type: ignore[arg-type]
            elif top.op_type == "Div" and top.domain == "" and top.inputs[0] is cur \
                    and is_scalar_close(const_value(top.inputs[1]), 2.0):
                factors = [*_mul_factors(cur, inside), None]
            else:
                return None
            climbed.append(top)
            kind = _classify(factors, x, add.outputs[0])  # type: ignore[arg-type]
            if kind == "done":
                nodes: list[Node] = []
                for n in climbed + inside:
                    if n not in nodes:
                        nodes.append(n)
                return top, nodes
            if kind == "bad":
                return None
            cur = top.outputs[0]
        return None

    def check(self, graph: Graph, m: Match) -> str | None:
        """Floating input; Gelu needs opset 20."""
        x = m["x"]
        if x.type.dtype is not None and np.dtype(x.type.dtype).kind != "f":
            return "the input is not floating point"
        return ensure_opset(graph, 20, self.allow_raise, ignore=m.nodes)

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """One Gelu node."""
        attrs = {"approximate": "tanh"} if self.kind == "tanh" else {}
        return replace_with(graph, m.nodes, m.root, "Gelu", [m["x"]], attrs, name=fused_name(graph, "Gelu", m.nodes))


def gelu_pass(disabled: tuple[str, ...] = (), allow_raise: bool = True) -> RulePass:
    """The fuse_gelu rule set (``allow_raise``: may raise the opset to 20)."""
    return RulePass("fuse_gelu", [GeluRule("erf", allow_raise), GeluRule("tanh", allow_raise)], "erf/tanh GELU -> Gelu (opset 20)",
                    disabled=disabled)
