"""The optimizer driver: the default pipeline in one list, and ``optimize()``.

Every pass can be switched off by name (``disable=("fuse_gelu",)`` or ``--disable fuse_gelu``);
rule names such as ``fuse_batchnorm.gemm`` switch off single rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.diagnostics import Diagnostic
from engine.ir.clone import clone_graph
from engine.ir.graph import Graph
from engine.passes.base import (
    Pass,
    PassManager,
    PassRecord,
    PipelineItem,
    Repeat,
    count_nodes,
    subgraphs,
)
from engine.passes.eliminate import (
    EliminateCommonSubexpressions,
    EliminateDeadCode,
    identity_pass,
    noop_pass,
)
from engine.passes.fold_constants import DEFAULT_MAX_BYTES, FoldConstants
from engine.passes.fuse_activation import activation_pass, hardswish_pass
from engine.passes.fuse_bn import batchnorm_pass
from engine.passes.fuse_linear import matmul_add_pass, mul_add_pass, pad_conv_pass
from engine.passes.fuse_transformer import gelu_pass, layernorm_pass
from engine.passes.hoist import HoistCommonBranchNodes
from engine.passes.opset import min_ir_version
from nodes.types import is_tensor_type

# The default pipeline, in order. A tuple (group name, [passes]) runs to a fixed point.
DEFAULT_PIPELINE: list[str | tuple[str, list[str]]] = [
    "fold_constants",                       # Constant nodes, constant expressions, static shape subgraphs
    "eliminate_identity",                   # Identity, inference-time Dropout
    ("cleanup", [                           # repeated until nothing changes:
        "fold_constants",
        "eliminate_noop",                   #   no-op Reshape/Transpose/Cast/Pad/Slice; merged Transposes/Reshapes
        "eliminate_dead_code",              #   unread nodes and initializers
    ]),
    "fuse_pad_conv",                        # zero Pad -> the Conv's own pads
    "fuse_batchnorm",                       # BatchNormalization -> Conv/ConvTranspose/Gemm weights
    "fuse_mul_add",                         # Mul/Add by constants -> Conv/Gemm/BatchNormalization
    "fuse_matmul_add",                      # MatMul + Add -> Gemm (2-D only)
    "fuse_layernorm",                       # decomposed LayerNorm -> LayerNormalization (opset 17)
    "fuse_gelu",                            # erf/tanh GELU -> Gelu (opset 20)
    "fuse_hardswish",                       # Clip(x+3,0,6)/6 -> HardSigmoid; x*HardSigmoid(x) -> HardSwish
    "fuse_activation",                      # Relu/Clip/LeakyRelu/HardSwish/Sigmoid/SiLU.. -> producer
    ("final_cleanup", [                     # repeated until nothing changes:
        "fold_constants",
        "eliminate_noop",
        "hoist_if_common",                  #   what both If branches compute from outer values, once before it
        "eliminate_common_subexpressions",  #   equal initializers and duplicate computations (after the
        "eliminate_dead_code",              #   fusions, so a Conv shared by two BatchNorms cannot block them)
    ]),
]


@dataclass(frozen=True)
class OptimizeOptions:
    """Knobs of one optimization run (passed explicitly; no globals)."""

    disable: tuple[str, ...] = ()
    max_fold_bytes: int = DEFAULT_MAX_BYTES
    freeze_initializer_inputs: bool = True
    allow_opset_raise: bool = True
    verify: bool = True
    check_onnx: bool = False
    pipeline: tuple[Any, ...] | None = None


def _factories(o: OptimizeOptions) -> dict[str, Callable[[], Pass]]:
    d = tuple(o.disable)
    raise_ok = o.allow_opset_raise
    return {
        "fold_constants": lambda: FoldConstants(o.max_fold_bytes, o.freeze_initializer_inputs),
        "eliminate_identity": lambda: identity_pass(d),
        "eliminate_noop": lambda: noop_pass(d),
        "eliminate_common_subexpressions": EliminateCommonSubexpressions,
        "eliminate_dead_code": EliminateDeadCode,
        "hoist_if_common": HoistCommonBranchNodes,
        "fuse_pad_conv": lambda: pad_conv_pass(d),
        "fuse_batchnorm": lambda: batchnorm_pass(d),
        "fuse_mul_add": lambda: mul_add_pass(d),
        "fuse_matmul_add": lambda: matmul_add_pass(d),
        "fuse_layernorm": lambda: layernorm_pass(d, raise_ok),
        "fuse_gelu": lambda: gelu_pass(d, raise_ok),
        "fuse_hardswish": lambda: hardswish_pass(d, raise_ok),
        "fuse_activation": lambda: activation_pass(d),
    }


def pass_names() -> list[str]:
    """Every pass name the pipeline knows."""
    return list(_factories(OptimizeOptions()))


def known_names() -> set[str]:
    """Every pass and rule name that ``disable`` accepts (the target lowerings' too)."""
    from engine.passes.lower_npu import lowering_names

    names: set[str] = lowering_names()
    for make in _factories(OptimizeOptions()).values():
        names |= make().names()
    return names


def build_pipeline(options: OptimizeOptions | None = None) -> list[PipelineItem]:
    """The pipeline's pass objects (disabled passes still listed; the manager skips them)."""
    o = options or OptimizeOptions()
    unknown = sorted(set(o.disable) - known_names())
    if unknown:
        raise ValueError(f"unknown pass or rule {unknown[0]!r} (passes: {', '.join(pass_names())})")
    make = _factories(o)
    items: list[PipelineItem] = []
    for entry in o.pipeline or DEFAULT_PIPELINE:
        if isinstance(entry, tuple):
            group, names = entry
            items.append(Repeat([make[n]() for n in names], name=group))
        else:
            items.append(make[entry]())
    return items


@dataclass
class OptimizeResult:
    """The optimized graph, the trace of every pass run and the diagnostics."""

    graph: Graph
    trace: list[PassRecord]
    diagnostics: list[Diagnostic]
    nodes_before: int
    nodes_after: int
    op_histogram_before: dict[str, int] = field(default_factory=dict)

    def fused(self) -> list[dict[str, Any]]:
        """Every node that stands for more than one original node (or carries an activation)."""
        out = []
        for g in (self.graph, *subgraphs(self.graph)):
            for n in g.toposort():
                prov = n.meta.get("provenance")
                if (prov and (len(prov) > 1 or prov != [n.name])) or n.activation:
                    entry: dict[str, Any] = {"node": n.name, "op_type": n.op_type, "from": list(prov or [n.name])}
                    if n.activation:
                        entry["activation"] = n.activation.describe()
                    out.append(entry)
        return out

    def report(self) -> dict[str, Any]:
        """The ``optimize --report`` document (CONTRACTS.md keys plus per-pass details)."""
        after = Counter(n.op_type for n in self.graph.all_nodes())
        onnx_nodes = self.nodes_after + sum(n.activation.onnx_nodes for n in self.graph.all_nodes() if n.activation)
        return {
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "nodes_after_onnx": onnx_nodes,
            "opset": self.graph.opset(""),
            "passes": [r.to_json() for r in self.trace],
            "fused": self.fused(),
            "op_histogram_before": dict(sorted(self.op_histogram_before.items())),
            "op_histogram_after": dict(sorted(after.items())),
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


def optimize(graph: Graph, options: OptimizeOptions | None = None, copy: bool = True,
             disable: Iterable[str] = ()) -> OptimizeResult:
    """Run the pipeline on ``graph`` (on a clone unless ``copy`` is False).

    ``nodes_after`` counts IR nodes: a Conv with a fused activation is one node (the written
    ONNX file has the activation as a node again; the report's ``nodes_after_onnx``)."""
    o = options or OptimizeOptions()
    if disable:
        o = OptimizeOptions(**{**o.__dict__, "disable": tuple(o.disable) + tuple(disable)})
    manager = PassManager(build_pipeline(o), disabled=o.disable, verify=o.verify, check_onnx=o.check_onnx)
    g = clone_graph(graph) if copy else graph
    before = count_nodes(g)
    hist = Counter(n.op_type for n in g.all_nodes())
    run = manager.run(g)
    g = run.graph
    finalize(g)
    return OptimizeResult(g, run.trace, run.diagnostics, before, count_nodes(g), dict(hist))


def finalize(graph: Graph) -> None:
    """Refresh inferred types, drop orphan values and make the IR version fit the opset and the
    initializer layout (IR < 4 requires every initializer to be an input)."""
    from engine.ir.infer import infer_shapes

    for g in (graph, *subgraphs(graph)):
        g.prune_values()
    if any(v is not None and v.type.dtype is None and is_tensor_type(v.type) for n in graph.nodes for v in n.outputs):
        infer_shapes(graph)
    need = min_ir_version(graph.opset(""))
    over = set(graph.overridable)
    if any(name not in over for name in graph.initializers):
        need = max(need, 4)
    if graph.ir_version < need:
        graph.ir_version = need
