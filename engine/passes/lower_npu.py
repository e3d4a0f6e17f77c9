"""Lowerings before placement: ops the target's NPU cannot run rewritten into ops it can.

A compiler for an NPU such as Arm's vela rewrites some ops into equivalent forms its hardware
has before it decides what runs where. Each lowering here is a pass of one rule, driven by the
target: it fires only where the target's support rules reject the node as it is and list every
op of the lowered form (``check`` says which when it does not fire), so a target whose NPU runs
the original op keeps it. The maths (exact in real arithmetic; float results differ by
rounding only):

``lower_matmul``: a MatMul of an activation A[d0, .., dk, K] (rank >= 3) by a constant 2-D
weight W[K, N] is one matrix product over the rows of A (vela's FULLY_CONNECTED)::

    Y = Reshape(MatMul(Reshape(A, [d0*..*dk, K]), W), [d0, .., dk, N])

``lower_global_pool``: GlobalAveragePool(x)[n, c] = mean over h, w of x[n, c, h, w]
    = AveragePool(x, kernel=[h, w], no padding)        (vela's AVERAGE_POOL_2D) where the NPU runs it,
    = ReduceMean(x, axes=[2, ..., r-1], keepdims=1)    (vela's MEAN, a depthwise sum) otherwise

``lower_div``: Div(x, c) with a constant c without zeros = Mul(x, 1 / c)  (no int8 DIV on the
NPU; also for every target that exports TFLite, which has no int8 DIV vela runs).

``lower_batchnorm``: a BatchNormalization left standalone (no Conv/Gemm before it to fold into)
is a per-channel affine map::

    BN(x)[c] = s[c] * x[c] + t[c],   s = gamma / sqrt(var + eps),   t = beta - s * mean
             = Add(Mul(x, s'), t')  with s', t' shaped [C, 1, .., 1] to broadcast over axis 1

``lower_hardsigmoid``: a HardSigmoid not fused into the op before it (TFLite has no HARD_SIGMOID)::

    HardSigmoid(x) = max(0, min(1, alpha * x + beta)) = Clip(Add(Mul(x, alpha), beta), 0, 1)

``lower_lut``: Sigmoid, Tanh, HardSwish, HardSigmoid, Gelu, Exp, Log, Elu, LeakyRelu ... of an
int8 tensor are single-input functions of 256 possible values: vela evaluates them through a
256-entry lookup table (its LUT op). Where the target marks the op ``lut: true`` the node keeps
its op type and is marked ``meta["npu_form"] = "LUT"`` (shown in the trace and the plan).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from engine.ir.graph import Graph, Node, Value
from engine.passes.base import Pass, PassManager, RunResult
from engine.passes.fuse_bn import bn_scale_shift
from engine.passes.pattern import Const, Match, Op, Rule, RulePass, Var
from engine.passes.rewrite import add_constant, const_value, merge_provenance, remove_nodes
from nodes.types import TensorType

LUT_OPS = ("Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "Gelu", "Exp", "Log", "Elu", "LeakyRelu", "Softplus")
"""Single-input functions an int8 NPU can evaluate as a 256-entry lookup table."""


def _verdict(node: Node, target: Any) -> Any:
    from engine.place.support import node_verdict

    return node_verdict(node, target)


def _unsupported(node: Node, target: Any) -> str | None:
    """None when the NPU rejects ``node`` as it is (so lowering it helps), else the reason not to."""
    v = _verdict(node, target)
    if v.supported:
        return f"{node.op_type} already runs on the {target.name} NPU"
    return None


def _missing(target: Any, ops: Iterable[str]) -> str | None:
    """The reason the lowered form cannot run on the NPU either (an op it does not list)."""
    gone = [op for op in ops if not target.supports(op)]
    if gone:
        return f"the lowered form needs {', '.join(gone)}, which the {target.name} NPU does not list"
    return None


def _typed(v: Value, shape: tuple[int, ...], dtype: Any) -> Value:
    v.type = TensorType(np.dtype(dtype) if dtype is not None else None, tuple(int(d) for d in shape))
    return v


def _static(v: Value | None) -> tuple[int, ...] | None:
    if v is None or not v.type.is_static:
        return None
    return tuple(int(d) for d in v.type.shape)  # type: ignore[union-attr]


def _new_node(graph: Graph, op_type: str, inputs: list[Value | None], name: str, out_name: str,
              prov: list[str], attrs: dict[str, Any] | None = None, outputs: list[Value] | None = None) -> Node:
    """A node named ``name`` (the name of the node it replaces is reused once that one is gone)
    with the merged provenance of the nodes it replaces."""
    if outputs is None:
        outputs = [Value(graph.unique_name(out_name or f"{name}_out"))]
    chosen = name if name and graph.node_by_name(name) is None else graph.unique_name(name or op_type.lower())
    node = Node(op_type, inputs, outputs, attrs, name=chosen)
    graph.add_node(node)
    node.meta["provenance"] = list(prov)
    return node


class _Lowering(Rule):
    """A lowering rule bound to a target; subclasses list the ops of the lowered form."""

    lowered_ops: tuple[str, ...] = ()

    def __init__(self, target: Any) -> None:
        self.target = target
        super().__init__()

    def matches(self, node: Node) -> Any:
        """Matches only at nodes the NPU rejects as they are (a node it runs is no candidate,
        so the trace lists no refusal for it)."""
        if _unsupported(node, self.target) is None:
            yield from super().matches(node)

    def check(self, graph: Graph, m: Match) -> str | None:
        """The NPU lists the lowered ops and the node has a lowered form."""
        return _missing(self.target, self.lowered_ops) or self.check_form(graph, m)

    def check_form(self, graph: Graph, m: Match) -> str | None:
        """Why this node has no lowered form (None when it has)."""
        return None


class MatMulAsFullyConnected(_Lowering):
    """MatMul(A[.., K] rank >= 3, W[K, N] constant) -> Reshape -> 2-D MatMul -> Reshape."""

    name = "lower_matmul.rank3_weight"
    lowered_ops = ("Reshape", "MatMul")

    def __init__(self, target: Any) -> None:
        self.pattern = Op("MatMul", Var("a"), Const("w"), name="root")
        super().__init__(target)

    def check_form(self, graph: Graph, m: Match) -> str | None:
        """A static activation of rank >= 3 and a 2-D constant weight."""
        a, w = _static(m["a"]), const_value(m["w"])
        if a is None:
            return "the activation's shape is not static"
        if len(a) < 3:
            return f"the activation has rank {len(a)} (already a matrix)"
        if w is None or w.ndim != 2:
            return "the weight is not a 2-D constant"
        if m["root"].activation:
            return "the MatMul carries a fused activation"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """Rows of A through one 2-D product, then the original shape again."""
        mm: Node = m["root"]
        a, w = m["a"], m["w"]
        shape = _static(a)
        rows, k, n = int(np.prod(shape[:-1])), shape[-1], int(w.const.shape[1])  # type: ignore[index]
        prov = merge_provenance([mm])
        out = mm.outputs[0]
        dtype = a.type.dtype
        remove_nodes(graph, [mm])
        s_in = add_constant(graph, f"{mm.name}_rows_shape", np.asarray([rows, k], np.int64))
        r_in = _new_node(graph, "Reshape", [a, s_in], f"{mm.name}_rows", f"{a.name}_rows", prov)
        _typed(r_in.outputs[0], (rows, k), dtype)
        mat = _new_node(graph, "MatMul", [r_in.outputs[0], w], mm.name, f"{out.name}_rows", prov)
        _typed(mat.outputs[0], (rows, n), dtype)
        s_out = add_constant(graph, f"{mm.name}_out_shape", np.asarray([*shape[:-1], n], np.int64))  # type: ignore[index]
        _new_node(graph, "Reshape", [mat.outputs[0], s_out], f"{mm.name}_unrows", "", prov, outputs=[out])
        return mat


class BatchMatMulAsRank3(Rule):
    """MatMul(A[1, b, m, k], B[1, b, k, n]) of two activations -> Reshape both to rank 3, a rank-3
    MatMul, Reshape back, for TFLite targets whose graph has spatial ops: TFLite stores the 4-D
    tensors of such a graph as NHWC feature maps, where a BATCH_MATMUL would multiply the wrong
    axes; the rank-3 form is the BATCH_MATMUL vela runs."""

    name = "lower_matmul.batch_rank3"

    def __init__(self, target: Any) -> None:
        self.target = target
        self.pattern = Op("MatMul", Var("a"), Var("b"), name="root")
        super().__init__()

    def matches(self, node: Node) -> Any:
        """Only on TFLite targets, in graphs with spatial ops."""
        from engine.export.tflite_lower import SPATIAL

        g = node.graph
        if self.target.exports_tflite() and g is not None and any(n.op_type in SPATIAL for n in g.nodes):
            yield from super().matches(node)

    def check(self, graph: Graph, m: Match) -> str | None:
        """Two rank-4 activations with a leading 1 and the same batch."""
        a, b = _static(m["a"]), _static(m["b"])
        if m["a"].const is not None or m["b"].const is not None:
            return "an operand is a constant"
        if a is None or b is None or len(a) != 4 or len(b) != 4:
            return "the operands are not two static rank-4 tensors"
        if a[0] != 1 or b[0] != 1 or a[1] != b[1]:
            return f"the operands {a} and {b} do not share one leading 1 and the batch"
        if m["root"].activation:
            return "the MatMul carries a fused activation"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """Drop the leading 1 of both operands, multiply, put it back."""
        mm: Node = m["root"]
        a, b = m["a"], m["b"]
        sa, sb = _static(a), _static(b)
        out = mm.outputs[0]
        prov = merge_provenance([mm])
        remove_nodes(graph, [mm])
        three = []
        for v, shp, tag in ((a, sa, "a"), (b, sb, "b")):
            sv = add_constant(graph, f"{mm.name}_{tag}_rank3_shape", np.asarray(shp[1:], np.int64))  # type: ignore[index]
            r = _new_node(graph, "Reshape", [v, sv], f"{mm.name}_{tag}_rank3", f"{v.name}_rank3", prov)
            three.append(_typed(r.outputs[0], shp[1:], v.type.dtype))  # type: ignore[index]
        res = (sa[1], sa[2], sb[3])  # type: ignore[index]
        mat = _new_node(graph, "MatMul", three, mm.name, f"{out.name}_rank3", prov)
        _typed(mat.outputs[0], res, a.type.dtype)
        s_out = add_constant(graph, f"{mm.name}_rank4_shape", np.asarray((1, *res), np.int64))
        _new_node(graph, "Reshape", [mat.outputs[0], s_out], f"{mm.name}_rank4", "", prov, outputs=[out])
        return mat


class GlobalAveragePoolAsMean(_Lowering):
    """GlobalAveragePool(x) -> an unpadded AveragePool over the whole map where the NPU runs that
    (vela's AVERAGE_POOL_2D; quantized like the pool it replaces), else ReduceMean(x, spatial
    axes, keepdims=1) (vela's MEAN)."""

    name = "lower_global_pool.mean"
    lowered_ops = ()

    def __init__(self, target: Any) -> None:
        self.pattern = Op("GlobalAveragePool", Var("x"), name="root")
        super().__init__(target)

    def check_form(self, graph: Graph, m: Match) -> str | None:
        """The input's rank is known, it has spatial axes, the NPU lists AveragePool or ReduceMean."""
        r = m["x"].type.rank
        if r is None or r < 3:
            return "the input's rank is not known" if r is None else "the input has no spatial axes"
        if not (self.target.supports("AveragePool") or self.target.supports("ReduceMean")):
            return f"the lowered form needs AveragePool or ReduceMean, which the {self.target.name} NPU does not list"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """The AveragePool when its verdict is supported; else ReduceMean, axes as an attribute
        before opset 18, as an input from 18 on."""
        gap: Node = m["root"]
        x = m["x"]
        axes = list(range(2, int(x.type.rank)))
        prov = merge_provenance([gap])
        out, name = gap.outputs[0], gap.name
        remove_nodes(graph, [gap])
        shape = _static(x)
        if shape is not None and self.target.supports("AveragePool"):
            pool = _new_node(graph, "AveragePool", [x], name, "", prov, {"kernel_shape": list(shape[2:])},
                             outputs=[out])
            if _verdict(pool, self.target).supported:
                return pool
            remove_nodes(graph, [pool])
        if graph.opset("") >= 18:
            node = _new_node(graph, "ReduceMean", [x, add_constant(graph, f"{name}_axes", np.asarray(axes, np.int64))],
                             name, "", prov, {"keepdims": 1}, outputs=[out])
        else:
            node = _new_node(graph, "ReduceMean", [x], name, "", prov, {"axes": axes, "keepdims": 1}, outputs=[out])
        return node


class DivByConstantAsMul(_Lowering):
    """Div(x, c) -> Mul(x, 1/c) for a float constant c without zeros."""

    name = "lower_div.const"
    lowered_ops = ("Mul",)

    def __init__(self, target: Any, always: bool = False) -> None:
        self.always = always
        self.pattern = Op("Div", Var("x"), Const("c"), name="root")
        super().__init__(target)

    def matches(self, node: Node) -> Any:
        """As every lowering, except that a TFLite target always wants it (no int8 DIV)."""
        if self.always:
            yield from Rule.matches(self, node)
        else:
            yield from super().matches(node)

    def check_form(self, graph: Graph, m: Match) -> str | None:
        """A floating-point constant divisor without zeros."""
        c = const_value(m["c"])
        if c is None or c.dtype.kind != "f":
            return "the divisor is not a floating-point constant"
        if not np.all(c != 0):
            return "the divisor has zeros"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """The reciprocal in the constant's dtype."""
        div: Node = m["root"]
        c = const_value(m["c"])
        prov = merge_provenance([div])
        out, name, x = div.outputs[0], div.name, m["x"]
        remove_nodes(graph, [div])
        recip = add_constant(graph, f"{m['c'].name}_reciprocal", (1.0 / c).astype(c.dtype))  # type: ignore[operator, union-attr]
        return _new_node(graph, "Mul", [x, recip], f"{name}_as_Mul", "", prov, outputs=[out])


class BatchNormAsMulAdd(_Lowering):
    """A standalone BatchNormalization -> Mul(x, s) then Add(., t), per channel (axis 1)."""

    name = "lower_batchnorm.mul_add"
    lowered_ops = ("Mul", "Add")

    def __init__(self, target: Any) -> None:
        self.pattern = Op("BatchNormalization", Var("x"), name="root", extra=True)
        super().__init__(target)

    def check_form(self, graph: Graph, m: Match) -> str | None:
        """Inference mode, constant statistics, a known input rank >= 2."""
        st = bn_scale_shift(m["root"])
        if isinstance(st, str):
            return st
        r = m["x"].type.rank
        if r is None or r < 2:
            return "the input's rank is not known" if r is None else "the input has no channel axis"
        return None

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """s = gamma / sqrt(var + eps) and t = beta - s * mean, in float64, stored as the input's dtype."""
        bn: Node = m["root"]
        x = m["x"]
        s, beta, mean = bn_scale_shift(bn)  # type: ignore[misc]
        t = beta - s * mean
        rank = int(x.type.rank)
        dtype = x.type.dtype if x.type.dtype is not None else np.dtype(np.float32)
        bshape = (s.size,) + (1,) * (rank - 2)
        prov = merge_provenance([bn])
        out, name = bn.outputs[0], bn.name
        remove_nodes(graph, [bn])
        sv = add_constant(graph, f"{name}_scale", s.reshape(bshape).astype(dtype))
        tv = add_constant(graph, f"{name}_shift", t.reshape(bshape).astype(dtype))
        mul = _new_node(graph, "Mul", [x, sv], f"{name}_mul", f"{out.name}_scaled", prov)
        mul.outputs[0].type = x.type
        _new_node(graph, "Add", [mul.outputs[0], tv], f"{name}_add", "", prov, outputs=[out])
        return mul


class HardSigmoidAsMulAddClip(_Lowering):
    """HardSigmoid(x) = Clip(x * alpha + beta, 0, 1): Mul, Add, Clip (TFLite's MUL, ADD,
    RELU_0_TO_1; TFLite has no HARD_SIGMOID)."""

    name = "lower_hardsigmoid.mul_add_clip"
    lowered_ops = ("Mul", "Add", "Clip")

    def __init__(self, target: Any) -> None:
        self.pattern = Op("HardSigmoid", Var("x"), name="root")
        super().__init__(target)

    def check_form(self, graph: Graph, m: Match) -> str | None:
        """A floating-point input."""
        dt = m["x"].type.dtype
        return None if dt is not None and np.dtype(dt).kind == "f" else "the input is not floating point"

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """alpha and beta as scalars of the input's dtype; Clip bounds as inputs (opset >= 11)."""
        hs: Node = m["root"]
        x = m["x"]
        dt = np.dtype(x.type.dtype)
        alpha, beta = float(hs.attrs.get("alpha", 0.2)), float(hs.attrs.get("beta", 0.5))
        prov = merge_provenance([hs])
        out, name = hs.outputs[0], hs.name
        remove_nodes(graph, [hs])
        mul = _new_node(graph, "Mul", [x, add_constant(graph, f"{name}_alpha", np.asarray(alpha, dt))],
                        f"{name}_mul", f"{out.name}_scaled", prov)
        mul.outputs[0].type = x.type
        add = _new_node(graph, "Add", [mul.outputs[0], add_constant(graph, f"{name}_beta", np.asarray(beta, dt))],
                        f"{name}_add", f"{out.name}_shifted", prov)
        add.outputs[0].type = x.type
        if graph.opset("") >= 11:
            lo, hi = add_constant(graph, f"{name}_zero", np.asarray(0, dt)), add_constant(graph, f"{name}_one",
                                                                                          np.asarray(1, dt))
            _new_node(graph, "Clip", [add.outputs[0], lo, hi], f"{name}_clip", "", prov, outputs=[out])
        else:
            _new_node(graph, "Clip", [add.outputs[0]], f"{name}_clip", "", prov, {"min": 0.0, "max": 1.0},
                      outputs=[out])
        return mul


class MarkLut(Rule):
    """A unary function the target evaluates as a lookup table: marked ``npu_form = LUT``."""

    name = "lower_lut.mark"
    anchors = LUT_OPS
    contained = False

    def __init__(self, target: Any) -> None:
        self.target = target
        super().__init__()

    def matches(self, node: Node) -> Any:
        """Every node not yet marked of an op type the target lists with ``lut: true``."""
        if node.meta.get("npu_form") != "LUT" and self.target.ops.get(node.op_type, {}).get("lut"):
            yield Match(node, [node], {"root": node})

    def check(self, graph: Graph, m: Match) -> str | None:
        """The NPU accepts the node (a LUT of a tensor it cannot hold is no use)."""
        node = m["root"]
        v = _verdict(node, self.target)
        return None if v.supported else f"the NPU rejects the node: {v.reason}"

    def rewrite(self, graph: Graph, m: Match) -> Node:
        """Only the mark: the op type, its inputs and outputs stay."""
        node = m["root"]
        node.meta["npu_form"] = "LUT"
        node.meta.setdefault("provenance", [node.name])
        graph._touch()
        return node


LOWERING_PASSES = ("lower_matmul", "lower_global_pool", "lower_div", "lower_batchnorm", "lower_hardsigmoid",
                   "lower_lut")
"""The lowering passes in the order they run (after the optimizer, before placement)."""

_RULE_NAMES = {"lower_matmul": ["lower_matmul.rank3_weight", "lower_matmul.batch_rank3"], "lower_global_pool": ["lower_global_pool.mean"],
               "lower_div": ["lower_div.const"], "lower_batchnorm": ["lower_batchnorm.mul_add"],
               "lower_hardsigmoid": ["lower_hardsigmoid.mul_add_clip"], "lower_lut": ["lower_lut.mark"]}


def lowering_names() -> set[str]:
    """Every lowering pass and rule name (what ``disable`` accepts)."""
    return set(LOWERING_PASSES) | {r for rules in _RULE_NAMES.values() for r in rules}


def lowering_passes(target: Any, disabled: Iterable[str] = ()) -> list[Pass]:
    """The lowering passes for ``target`` (a HardwareTarget); ``disabled`` names passes or rules."""
    d = tuple(disabled)
    tflite = target.exports_tflite()
    return [
        RulePass("lower_matmul", [MatMulAsFullyConnected(target), BatchMatMulAsRank3(target)],
                 "rank-3 MatMul by a constant weight -> 2-D MatMul between Reshapes (FULLY_CONNECTED); "
                 "rank-4 MatMul of activations in a CNN -> rank 3 (BATCH_MATMUL)", disabled=d),
        RulePass("lower_global_pool", [GlobalAveragePoolAsMean(target)],
                 "GlobalAveragePool -> ReduceMean over the spatial axes (MEAN)", disabled=d),
        RulePass("lower_div", [DivByConstantAsMul(target, always=tflite)],
                 "Div by a constant -> Mul by its reciprocal", disabled=d),
        RulePass("lower_batchnorm", [BatchNormAsMulAdd(target)],
                 "standalone BatchNormalization -> per-channel Mul + Add", disabled=d),
        RulePass("lower_hardsigmoid", [HardSigmoidAsMulAddClip(target)],
                 "standalone HardSigmoid -> Mul, Add, Clip(0, 1)", disabled=d),
        RulePass("lower_lut", [MarkLut(target)], "unary functions the NPU evaluates as a lookup table",
                 max_sweeps=1, disabled=d),
    ]


def lower_for_target(graph: Graph, target: Any, disabled: Iterable[str] = (), verify: bool = True) -> RunResult:
    """Run the lowering passes on ``graph`` in place; the trace joins the optimizer's."""
    from engine.passes.pipeline import finalize

    disabled = set(disabled)
    run = PassManager(lowering_passes(target, disabled), disabled=disabled, verify=verify).run(graph)
    finalize(run.graph)
    return run


def lowered_copy(graph: Graph, target: Any) -> Graph:
    """A lowered clone of ``graph`` for ``target`` (the graph passed in is not modified)."""
    from engine.ir.clone import clone_graph

    return lower_for_target(clone_graph(graph), target).graph
