"""Linear folds: constants into Conv/Gemm/BatchNormalization, MatMul+Add -> Gemm, Pad -> Conv.

Per-channel constant after a Conv (output channel m; c broadcasts as [1, M, 1, ..] or a
scalar; Sub and Div are Add and Mul with -c and 1/c)::

    Conv(x)[m] * c[m] = sum (W[m] * c[m]) * x + b[m] * c[m]     W' = W * c[m],  b' = b * c
    Conv(x)[m] + c[m] = sum W[m] * x + (b[m] + c[m])            b' = b + c

Gemm (Y = alpha * A' B' + beta * C, c per output column n or a scalar; for Add any c that
broadcasts to Y's (M, N) without growing it)::

    Y * c[n] = alpha * A' (B'[:, n] * c[n]) + (beta * C * c)[n]     B' columns scaled, C' = beta C c, beta' = 1
    Y + c    = alpha * A' B' + (beta * C + c)                        C' = beta C + c, beta' = 1

Inference BatchNormalization is s * y + t per channel (s = gamma / sqrt(var + eps),
t = beta - s * mean), so a following per-channel Mul/Add is absorbed into gamma and beta::

    (s y + t) * c = (s c) y + t c        gamma' = gamma * c, beta' = beta * c
    (s y + t) + c = s y + (t + c)        beta'  = beta + c

MatMul + Add -> Gemm, only where Gemm's 2-D rule holds: A and B are 2-D and the addend
broadcasts unidirectionally to (M, N) (Gemm C): Y = 1.0 * A B + 1.0 * C.

Pad into Conv: a constant-mode Pad with value 0 that pads only spatial axes, followed by a
Conv with explicit pads (auto_pad NOTSET): Conv(Pad(x, p)) = Conv(x) with
pads'[begin_i] = pads[begin_i] + p[begin of axis 2+i], likewise for the ends. (Zero padding
adds zeros that a Conv's own padding adds too.)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from engine.ir.graph import Graph, Node
from engine.passes.pattern import Const, Match, Op, Rule, RulePass, Var
from engine.passes.rewrite import absorb, add_constant, const_value

_PRODUCERS = ("Conv", "Gemm", "BatchNormalization")


def _channel_vector(c: np.ndarray, out_rank: int | None, channels: int, axis: int = 1) -> np.ndarray | str:
    """``c`` as a length-``channels`` vector when it only varies along ``axis`` of the output
    (or is a scalar) and does not grow the output's rank; else the reason."""
    if c.size == 1:
        return np.full(channels, float(c.reshape(-1)[0]))
    if out_rank is None:
        return "the output rank is not known"
    if c.ndim > out_rank:
        return f"constant of rank {c.ndim} would grow the rank-{out_rank} output"
    shape = (1,) * (out_rank - c.ndim) + tuple(c.shape)
    for k, d in enumerate(shape):
        if k == axis:
            if d not in (1, channels):
                return f"constant shape {tuple(c.shape)} does not match {channels} channels"
        elif d != 1:
            return f"constant shape {tuple(c.shape)} varies along axis {k}, not only per channel"
    return np.broadcast_to(c.reshape(shape).reshape(-1) if c.size == channels else c.reshape(-1), (channels,))


class ConstIntoProducer(Rule):
    """Mul/Add/Sub/Div of a Conv, Gemm or BatchNormalization output by a constant."""

    contained = True

    def __init__(self, op: str, producer: str) -> None:
        self.op = op
        self.producer = producer
        self.name = f"fuse_mul_add.{op.lower()}_into_{producer.lower()}"
        inner = Op(producer, name="prod", any_inputs=True)
        self.pattern = Op(op, inner, Const("c"), name="root")
        super().__init__()

    def check(self, graph: Graph, m: Match) -> str | None:
        """A constant on the right side, per output channel, constant weights."""
        root, prod = m["root"], m["prod"]
        if self.op in ("Sub", "Div") and root.inputs[0] is not prod.outputs[0]:
            return f"{self.op} has the {prod.op_type} output as its second operand"
        c = const_value(m["c"])
        if c is None:
            return f"{m['c'].name!r} is not a constant"
        if c.dtype.kind != "f":
            return "the constant is not floating point"
        if self.op == "Div" and np.any(c == 0):
            return "division by a constant that contains zeros"
        if prod.op_type == "BatchNormalization" and any(o is not None and (o.uses() or o.is_graph_output)
                                                        for o in prod.outputs[1:]):
            return "BatchNormalization's statistics outputs are read"
        params = self._params(prod)
        if isinstance(params, str):
            return params
        vec = self._vector(prod, c)
        return vec if isinstance(vec, str) else None

    def _params(self, prod: Node) -> str | None:
        if prod.op_type == "BatchNormalization":
            for i in (1, 2, 3, 4):
                if const_value(prod.input(i)) is None:
                    return "BatchNormalization parameters are not constants"
            if int(prod.attrs.get("training_mode", 0)):
                return "BatchNormalization is in training mode"
            return None
        if const_value(prod.input(1)) is None:
            return f"{prod.op_type} weight {prod.input(1).name!r} is not a constant"  # type: ignore[union-attr]
        if prod.input(2) is not None and const_value(prod.input(2)) is None:
            return f"{prod.op_type} bias {prod.input(2).name!r} is not a constant"  # type: ignore[union-attr]
        return None

    def _channels(self, prod: Node) -> int:
        w = const_value(prod.input(1))
        if prod.op_type == "Gemm":
            return int(w.shape[0] if int(prod.attrs.get("transB", 0)) else w.shape[1])  # type: ignore[union-attr]
        return int(w.shape[0])  # type: ignore[union-attr]

    def _vector(self, prod: Node, c: np.ndarray) -> np.ndarray | str:
        out = prod.outputs[0]
        rank = out.type.rank  # type: ignore[union-attr]
        channels = self._channels(prod)
        if prod.op_type == "Gemm":
            if self.op in ("Add", "Sub") and c.size != 1:
                shape = out.type.shape  # type: ignore[union-attr]
                if shape is None or not all(isinstance(d, int) for d in shape):
                    return "Gemm output shape is not known"
                if c.ndim > 2 or np.broadcast_shapes(tuple(c.shape), tuple(shape)) != tuple(shape):  # type: ignore[arg-type]
                    return f"constant shape {tuple(c.shape)} grows the Gemm output"
                return c
            return _channel_vector(c, 2, channels, axis=1)
        return _channel_vector(c, rank, channels, axis=1)

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """New weights/bias (or gamma/beta) in float64 stored in the original dtype."""
        root, prod = m["root"], m["prod"]
        c = const_value(m["c"]).astype(np.float64)  # type: ignore[union-attr]
        vec = np.asarray(self._vector(prod, c), dtype=np.float64)
        if self.op == "Sub":
            vec, op = -vec, "Add"
        elif self.op == "Div":
            vec, op = 1.0 / vec, "Mul"
        else:
            op = self.op
        if prod.op_type == "BatchNormalization":
            return self._into_bn(graph, root, prod, vec, op)
        if prod.op_type == "Gemm":
            return self._into_gemm(graph, root, prod, vec, op)
        w = const_value(prod.input(1))
        dtype = w.dtype  # type: ignore[union-attr]
        b = const_value(prod.input(2))
        b64 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)  # type: ignore[union-attr]
        inputs = list(prod.inputs) + [None] * (3 - len(prod.inputs))
        if op == "Mul":
            w2 = w.astype(np.float64) * vec.reshape((-1,) + (1,) * (w.ndim - 1))  # type: ignore[union-attr]
            inputs[1] = add_constant(graph, f"{prod.name}_W", w2.astype(dtype))
            b64 = b64 * vec
            if b is not None:
                inputs[2] = add_constant(graph, f"{prod.name}_B", b64.astype(dtype))
        else:
            inputs[2] = add_constant(graph, f"{prod.name}_B", (b64 + vec).astype(dtype))
        return absorb(graph, prod, [root], root, inputs)

    def _into_gemm(self, graph: Graph, root: Node, gemm: Node, vec: np.ndarray, op: str) -> Node:
        w = const_value(gemm.input(1))
        dtype = w.dtype  # type: ignore[union-attr]
        c = const_value(gemm.input(2))
        beta = float(gemm.attrs.get("beta", 1.0))
        c64 = None if c is None else c.astype(np.float64) * beta
        inputs = list(gemm.inputs) + [None] * (3 - len(gemm.inputs))
        attrs = dict(gemm.attrs)
        if op == "Mul":
            trans_b = int(gemm.attrs.get("transB", 0))
            w2 = w.astype(np.float64) * (vec[:, None] if trans_b else vec[None, :])  # type: ignore[union-attr]
            inputs[1] = add_constant(graph, f"{gemm.name}_B", w2.astype(dtype))
            if c64 is not None:
                inputs[2] = add_constant(graph, f"{gemm.name}_C", (c64 * vec).astype(dtype))
                attrs["beta"] = 1.0
        else:
            c2 = vec if c64 is None else c64 + vec
            inputs[2] = add_constant(graph, f"{gemm.name}_C", np.asarray(c2).astype(dtype))
            attrs["beta"] = 1.0
        return absorb(graph, gemm, [root], root, inputs, attrs)

    def _into_bn(self, graph: Graph, root: Node, bn: Node, vec: np.ndarray, op: str) -> Node:
        gamma = const_value(bn.input(1))
        beta = const_value(bn.input(2))
        dtype = gamma.dtype  # type: ignore[union-attr]
        inputs = list(bn.inputs)
        if op == "Mul":
            inputs[1] = add_constant(graph, f"{bn.name}_scale", (gamma.astype(np.float64) * vec).astype(dtype))  # type: ignore[union-attr]
            inputs[2] = add_constant(graph, f"{bn.name}_bias", (beta.astype(np.float64) * vec).astype(dtype))  # type: ignore[union-attr]
        else:
            inputs[2] = add_constant(graph, f"{bn.name}_bias", (beta.astype(np.float64) + vec).astype(dtype))  # type: ignore[union-attr]
        return absorb(graph, bn, [root], root, inputs)

    def _channels_bn(self, bn: Node) -> int:
        return int(const_value(bn.input(1)).size)  # type: ignore[union-attr]


class ConstIntoBatchNorm(ConstIntoProducer):
    """The BatchNormalization flavour: channels come from gamma."""

    def _channels(self, prod: Node) -> int:
        return self._channels_bn(prod)

    def _vector(self, prod: Node, c: np.ndarray) -> np.ndarray | str:
        return _channel_vector(c, prod.outputs[0].type.rank, self._channels(prod), axis=1)  # type: ignore[union-attr]


def mul_add_pass(disabled: tuple[str, ...] = ()) -> RulePass:
    """The fuse_mul_add rule set."""
    rules: list[Rule] = []
    for producer in _PRODUCERS:
        for op in ("Mul", "Add", "Sub", "Div"):
            cls = ConstIntoBatchNorm if producer == "BatchNormalization" else ConstIntoProducer
            rules.append(cls(op, producer))
    return RulePass("fuse_mul_add", rules, "Mul/Add/Sub/Div by constants folded into Conv/Gemm/BatchNormalization",
                    disabled=disabled)


# -- MatMul + Add -> Gemm -----------------------------------------------------------------------------
class MatMulAddToGemm(Rule):
    """Add(MatMul(A, B), C) -> Gemm(A, B, C) where A and B are 2-D and C broadcasts to (M, N)."""

    name = "fuse_matmul_add.gemm"

    def __init__(self) -> None:
        self.pattern = Op("Add", Op("MatMul", Var("a"), Var("b"), name="matmul"), Var("c"), name="add")
        super().__init__()

    def check(self, graph: Graph, m: Match) -> str | None:
        """Gemm's 2-D rule: rank-2 A and B, C unidirectionally broadcastable to (M, N)."""
        a, b, c = m["a"], m["b"], m["c"]
        if a.type.rank != 2:
            return f"A {a.name!r} has rank {a.type.rank if a.type.rank is not None else 'unknown'}; Gemm takes 2-D A"
        if b.type.rank != 2:
            return f"B {b.name!r} has rank {b.type.rank if b.type.rank is not None else 'unknown'}; Gemm takes 2-D B"
        dt = m["matmul"].outputs[0].type.dtype or a.type.dtype
        if dt is None or np.dtype(dt).kind != "f":
            return "not a floating-point MatMul"
        out = m["matmul"].outputs[0].type.shape
        cs = c.type.shape
        if cs is None:
            return f"the shape of the addend {c.name!r} is not known"
        if len(cs) > 2:
            return f"the addend {c.name!r} has rank {len(cs)}; Gemm's C is at most 2-D"
        if out is None or len(out) != 2:
            return "the MatMul output shape is not known"
        for dc, do in zip(reversed(cs), reversed(out)):
            if dc != 1 and dc != do:
                return f"the addend shape {tuple(cs)} does not broadcast to the MatMul output {tuple(out)}"
        if c.type.dtype is not None and dt is not None and np.dtype(c.type.dtype) != np.dtype(dt):
            return "the addend has another element type"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """The MatMul becomes the Gemm (keeping its name) and absorbs the Add."""
        mm, add = m["matmul"], m["add"]
        mm.op_type = "Gemm"
        return absorb(graph, mm, [add], add, [m["a"], m["b"], m["c"]], {"alpha": 1.0, "beta": 1.0})


def matmul_add_pass(disabled: tuple[str, ...] = ()) -> RulePass:
    """The fuse_matmul_add rule set."""
    return RulePass("fuse_matmul_add", [MatMulAddToGemm()], "MatMul followed by Add becomes Gemm (2-D only)",
                    disabled=disabled)


# -- Pad into Conv ------------------------------------------------------------------------------------
class PadIntoConv(Rule):
    """Conv(Pad(x, p)) -> Conv(x) with the spatial pads added to the Conv's own pads."""

    name = "fuse_pad_conv.conv"
    anchors = ("Conv",)

    def matches(self, node: Node) -> Iterator[Match]:
        """The Conv reading a Pad (with or without bias)."""
        src = node.input(0)
        pad = src.producer() if src is not None else None
        if pad is not None and pad.op_type == "Pad" and pad.domain == "" and pad.inputs and pad.inputs[0] is not None:
            yield Match(node, [node, pad], {"conv": node, "pad": pad, "x": pad.inputs[0]})

    def _pad_amounts(self, pad: Node, rank: int) -> np.ndarray | str:
        if "pads" in pad.attrs:
            pads = np.asarray(pad.attrs["pads"], dtype=np.int64)
            value = float(pad.attrs.get("value", 0.0))
            axes = None
        else:
            pads = const_value(pad.input(1))
            if pads is None:
                return "pads are not constant"
            cv = pad.input(2)
            value = 0.0
            if cv is not None:
                arr = const_value(cv)
                if arr is None:
                    return "the pad value is not constant"
                value = float(arr.reshape(-1)[0]) if arr.size else 0.0
            axes_arr = const_value(pad.input(3)) if pad.input(3) is not None else None
            if pad.input(3) is not None and axes_arr is None:
                return "pad axes are not constant"
            axes = None if axes_arr is None else [int(a) + rank if int(a) < 0 else int(a) for a in axes_arr.reshape(-1)]
        if pad.attrs.get("mode", "constant") not in ("constant", b"constant"):
            return f"Pad mode is {pad.attrs.get('mode')!r}, not constant"
        if value != 0.0:
            return f"Pad value is {value}, not 0"
        pads = np.asarray(pads, dtype=np.int64).reshape(-1)
        axes = list(range(rank)) if axes is None else axes
        if pads.size != 2 * len(axes):
            return "pads do not match the axes"
        full = np.zeros(2 * rank, dtype=np.int64)
        for k, a in enumerate(axes):
            full[a], full[a + rank] = pads[k], pads[k + len(axes)]
        if np.any(full < 0):
            return "Pad crops (negative pads)"
        if full[0] or full[1] or full[rank] or full[rank + 1]:
            return "Pad pads the batch or channel axis"
        return full

    def check(self, graph: Graph, m: Match) -> str | None:
        """Zero constant padding of spatial axes only; the Conv pads explicitly."""
        conv, pad = m["conv"], m["pad"]
        if conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
            return f"Conv uses auto_pad={conv.attrs.get('auto_pad')}"
        rank = m["x"].type.rank
        if rank is None:
            rank = conv.inputs[0].type.rank  # type: ignore[union-attr]
        if rank is None:
            return "the input rank is not known"
        amounts = self._pad_amounts(pad, rank)
        return amounts if isinstance(amounts, str) else None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """Add the Pad's spatial amounts to the Conv's pads."""
        conv, pad = m["conv"], m["pad"]
        rank = m["x"].type.rank or conv.inputs[0].type.rank  # type: ignore[union-attr]
        full = self._pad_amounts(pad, rank)
        spatial = rank - 2
        own = [int(p) for p in conv.attrs.get("pads", [0] * (2 * spatial))]
        new = [own[i] + int(full[2 + i]) for i in range(spatial)] + \
              [own[spatial + i] + int(full[rank + 2 + i]) for i in range(spatial)]  # type: ignore[index]
        attrs = dict(conv.attrs)
        attrs["pads"] = new
        attrs.pop("auto_pad", None)
        inputs = [m["x"], *conv.inputs[1:]]
        return absorb(graph, conv, [pad], conv, inputs, attrs)


def pad_conv_pass(disabled: tuple[str, ...] = ()) -> RulePass:
    """The fuse_pad_conv rule set."""
    return RulePass("fuse_pad_conv", [PadIntoConv()], "Zero Pad folded into the following Conv's pads",
                    disabled=disabled)
