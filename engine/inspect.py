"""Model summary: inputs, outputs, op histogram, parameters and MACs (``npu-studio inspect``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine.ir.graph import Graph, Node
from engine.ir.infer import node_context
from nodes import registry
from nodes.spec import OpError, Work
from nodes.types import TensorType, dtype_name


def _dims(t: TensorType) -> list[Any] | None:
    if t.shape is None:
        return None
    return [d if d is not None else "?" for d in t.shape]


def node_work(node: Node) -> Work | None:
    """The work of one node from its inferred types (None when unknown)."""
    ctx = node_context(node)
    if ctx is None:
        return None
    try:
        return ctx.spec.work(ctx)
    except (OpError, ValueError, TypeError, IndexError, KeyError):
        return None


def summarize(graph: Graph) -> dict[str, Any]:
    """The document ``inspect --json`` prints (see CONTRACTS.md)."""
    hist = Counter(n.op_type for n in graph.nodes)
    params = sum(int(v.const.size) for v in graph.initializers.values() if v.const is not None)
    macs = 0
    unknown_work = 0
    for n in graph.nodes:
        w = node_work(n)
        if w is None:
            unknown_work += 1
        else:
            macs += int(w.macs)
    supported = registry.op_types()
    from engine.unsupported import known_domains, unknown_ops

    missing = unknown_ops(graph)
    unsupported = sorted({op for _, op in missing})
    domains = known_domains()
    return {
        "name": graph.name,
        "opset": int(graph.opset("")),
        "ir_version": graph.ir_version,
        "producer": graph.producer_name,
        "inputs": [{"name": v.name, "shape": _dims(v.type), "dtype": dtype_name(v.type.dtype)} for v in graph.inputs],
        "outputs": [{"name": v.name, "shape": _dims(v.type), "dtype": dtype_name(v.type.dtype)} for v in graph.outputs],
        "nodes": len(graph.nodes),
        "op_histogram": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
        "params": params,
        "macs": macs,
        "unsupported_ops": unsupported,
        "unsupported": [{"op_type": op, "domain": dom, "nodes": n, "domain_known": dom in domains}
                        for (dom, op), n in sorted(missing.items())],
        "nodes_without_work": unknown_work,
        "diagnostics": [d.to_json() for d in graph.diagnostics],
        "supported_op_count": len(supported),
    }


def format_summary(doc: dict[str, Any]) -> str:
    """The human-readable text of ``inspect``."""

    def shape(s: list | None) -> str:
        return "?" if s is None else "x".join(str(d) for d in s) or "scalar"

    lines = [f"model    {doc['name']}  (opset {doc['opset']}, ir {doc['ir_version']}"
             + (f", from {doc['producer']}" if doc["producer"] else "") + ")"]
    for io in ("inputs", "outputs"):
        for v in doc[io]:
            lines.append(f"{io[:-1]:8} {v['name']}: {v['dtype']}[{shape(v['shape'])}]")
    lines.append(f"nodes    {doc['nodes']}")
    lines.append(f"params   {doc['params']:,}")
    lines.append(f"MACs     {doc['macs']:,}")
    hist = ", ".join(f"{k} {v}" for k, v in doc["op_histogram"].items())
    lines.append(f"ops      {hist}")
    for u in doc.get("unsupported", []):
        what = "op" if u["domain_known"] else "op of an unknown domain"
        lines.append(f"unknown  {u['op_type']} ({u['domain']}): {u['nodes']} node{'s' if u['nodes'] != 1 else ''}, "
                     f"{what} not supported by NPU Studio")
    for d in doc["diagnostics"][:20]:
        lines.append(f"{d['severity']:8} {d['node'] or ''}: {d['message']}")
    return "\n".join(lines)
