"""Sensitivity of a quantized model: every quantized tensor, and the groups a raise must move together.

Per tensor (each activation, each weight) two figures, as RKNN's accuracy analysis separates them:
- isolated: the tensor quantized alone against its own FP32 value (the error its parameters make);
- accumulated: the tensor as the full int8 model computes it, against FP32 (everything upstream).
Both come from one forward pass of the FP32 and the QDQ model over a few samples.

A raise only removes a tensor's error when the op writing it *and* every op reading it run at the
higher precision: an int8 reader requantizes an int16 tensor to int8 at its input. So the units
of a precision search are tensors with their producer and readers (``Group`` kind "tensor"),
merged where ops go together:
- a squeeze-excite block: GlobalAveragePool/ReduceMean -> Conv/Gemm ... -> Sigmoid/HardSigmoid ->
  Mul with the block's input;
- an attention softmax: the MatMul (and scale/mask ops) feeding a Softmax and the MatMul after it;
- a residual add: an Add of two activations with the branch ops only it reads.
How much output quality a group costs (dB lost) is measured, not guessed: engine.quant.search
raises it in the int8 model and measures the outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from engine.ir.graph import Graph, Node, Value
from engine.quant.analysis import ErrorStats, _visible_output
from engine.quant.params import QuantParams, fake_quantize
from engine.quant.qdq import QuantizedModel

_PASS_THROUGH = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast"})
_SE_CHAIN = frozenset({"Conv", "Gemm", "MatMul", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish",
                       "Add", "Mul", "Div"}) | _PASS_THROUGH
_SE_POOL = frozenset({"GlobalAveragePool", "ReduceMean"})
_SCORE_OPS = frozenset({"Mul", "Div", "Add", "Where"}) | _PASS_THROUGH


@dataclass(frozen=True)
class Group:
    """Nodes a raise moves together: ``kind`` is tensor, squeeze_excite, attention or residual;
    ``name`` is the node (or tensor) users know the group by."""

    name: str
    kind: str
    nodes: tuple[str, ...]

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"group": self.name, "kind": self.kind, "nodes": list(self.nodes)}


def _activations(node: Node) -> list[Value]:
    return [v for v in node.inputs if v is not None and v.const is None]


def _single_source(node: Node) -> Value | None:
    """The one activation input of ``node`` (None when it has none or several)."""
    acts = _activations(node)
    return acts[0] if len(acts) == 1 else None


def _squeeze_excite(mul: Node) -> list[Node] | None:
    """The block whose gate ``mul`` applies: [pool, ..., gate] when one of its inputs reaches,
    through a chain of one-input ops, a global pool of the other input."""
    acts = _activations(mul)
    if len(acts) != 2:
        return None
    for x, gate in (acts, acts[::-1]):
        chain: list[Node] = []
        v: Value | None = gate
        for _ in range(10):
            p = v.producer() if v is not None else None
            if p is None or p.graph is not mul.graph:
                break
            if p.op_type in _SE_POOL:
                if p.inputs and p.inputs[0] is x:
                    return [p, *chain[::-1]]
                break
            if p.op_type not in _SE_CHAIN:
                break
            chain.append(p)
            v = _single_source(p)
    return None


def _attention(softmax: Node) -> list[Node] | None:
    """[QK MatMul, scale/mask ops..., Softmax, ..., AV MatMul] around one Softmax."""
    before: list[Node] = []
    v = _single_source(softmax) or (softmax.inputs[0] if softmax.inputs else None)
    qk = None
    for _ in range(6):
        p = v.producer() if v is not None else None
        if p is None:
            break
        if p.op_type == "MatMul":
            qk = p
            break
        if p.op_type not in _SCORE_OPS:
            break
        before.append(p)
        v = p.inputs[0]
    after: list[Node] = []
    av = None
    out = softmax.outputs[0]
    for _ in range(4):
        users = out.consumers() if out is not None else []
        if len(users) != 1:
            break
        u = users[0]
        if u.op_type == "MatMul":
            av = u
            break
        if u.op_type not in _PASS_THROUGH:
            break
        after.append(u)
        out = u.outputs[0]
    if qk is None and av is None:
        return None
    return [n for n in (qk, *before[::-1], softmax, *after, av) if n is not None]


def _residual(add: Node) -> list[Node] | None:
    """[branch ops only this Add reads..., Add] for an Add of two activations."""
    acts = _activations(add)
    if len(acts) < 2:
        return None
    branch = [p for v in acts if (p := v.producer()) is not None and len(v.uses()) == 1 and not v.is_graph_output]
    return [*branch, add]


def find_groups(graph: Graph, quantized: Iterable[str]) -> list[Group]:
    """The raise units of a quantized model, pattern groups first (squeeze-excite blocks,
    attention softmaxes, residual adds), then one per quantized activation tensor (its producer
    and readers); each restricted to ``quantized`` nodes, duplicates dropped."""
    qset = set(quantized)
    nodes = [n for n in graph.toposort()]
    groups: list[Group] = []
    seen: set[tuple[str, ...]] = set()
    taken: set[str] = set()

    def add(name: str, kind: str, members: Iterable[Node | str], exclusive: bool) -> None:
        names = tuple(dict.fromkeys(m if isinstance(m, str) else m.name for m in members))
        names = tuple(n for n in names if n in qset)
        if not names or names in seen or (exclusive and taken.intersection(names)):
            return
        seen.add(names)
        if exclusive:
            taken.update(names)
        groups.append(Group(name, kind, names))

    for n in nodes:
        if n.op_type == "Mul" and n.name in qset and (se := _squeeze_excite(n)):
            add(n.name, "squeeze_excite", [*se, n], True)
    for n in nodes:
        if n.op_type == "Softmax" and n.name in qset and (att := _attention(n)):
            add(n.name, "attention", att, True)
    for n in nodes:
        if n.op_type in ("Add", "Sum") and n.name in qset and (res := _residual(n)):
            add(n.name, "residual", res, True)
    for n in graph.all_nodes():
        if n.name not in qset:
            continue
        outs = [v for v in n.outputs if v is not None]
        for v in outs:  # known by the op that writes it (by the tensor when the op writes several)
            add(n.name if len(outs) == 1 else v.name, "tensor", [n, *(u for u in v.consumers())], False)
    for v in graph.inputs:  # a model input's readers quantize it
        add(v.name, "tensor", list(v.consumers()), False)
    return groups


@dataclass
class TensorSensitivity:
    """One quantized tensor: isolated (alone) and accumulated (in the int8 model) error."""

    tensor: str
    kind: str  # "activation" or "weight"
    dtype: str
    isolated: ErrorStats
    accumulated: ErrorStats

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"tensor": self.tensor, "kind": self.kind, "dtype": self.dtype,
                "isolated_sqnr_db": round(self.isolated.sqnr_db, 3),
                "accumulated_sqnr_db": round(self.accumulated.sqnr_db, 3)}


def tensor_sensitivity(fp_graph: Graph, qm: QuantizedModel, samples: list[Mapping[str, np.ndarray]]
                       ) -> list[TensorSensitivity]:
    """Isolated and accumulated SQNR of every quantized activation and weight of ``qm`` over
    ``samples`` (one FP32 and one QDQ pass each), least isolated SQNR first. A weight's
    accumulated figure is its isolated one (a constant has no upstream)."""
    from engine import executor_for
    from engine.sim.feeds import check_feeds

    rows: dict[str, TensorSensitivity] = {}
    for name, qp in qm.weights.items():
        v = fp_graph.values.get(name)
        if v is None or v.const is None:
            continue
        st = ErrorStats()
        st.update(v.const, fake_quantize(np.asarray(v.const, np.float32), qp))
        rows[name] = TensorSensitivity(name, "weight", _dtype_name(qp), st, st)
    main_values = set(fp_graph.values)
    acts = {n: qp for n, qp in qm.activations.items() if n in main_values}
    for name, qp in acts.items():
        rows[name] = TensorSensitivity(name, "activation", _dtype_name(qp), ErrorStats(), ErrorStats())
    if acts and samples:
        fp_ex, q_ex = executor_for(fp_graph), executor_for(qm.graph)
        fp_keep, q_keep = set(acts), {_visible_output(qm, n) for n in acts}  # the fused plans, these kept
        for feeds in samples:
            feeds = check_feeds(fp_graph, feeds)
            ref = fp_ex.run(feeds, keep=fp_keep)
            got = q_ex.run(check_feeds(qm.graph, feeds), keep=q_keep)
            for name, qp in acts.items():
                want = ref.get(name, feeds.get(name))
                if want is None:
                    continue
                rows[name].isolated.update(want, fake_quantize(want, qp))
                seen = got.get(_visible_output(qm, name))
                if seen is not None and np.shape(seen) == np.shape(want):
                    rows[name].accumulated.update(want, seen)
    return sorted(rows.values(), key=lambda r: r.isolated.sqnr_db)


def _dtype_name(qp: QuantParams) -> str:
    return qp.dtype
