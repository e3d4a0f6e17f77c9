"""Memory estimate of one execution, made before running, so a huge declared shape is refused.

Types are propagated with the op specs for the actual input shapes (without touching the
graph's own inferred types), then the executor's freeing order gives the peak of live bytes.
Values whose size depends on data (NonZero, Unique ...) count as unknown, not as zero bytes
in a way that hides the rest: the estimate is a lower bound and says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.ir.graph import Graph
from engine.ir.infer import KNOWN_VALUE_LIMIT
from nodes import registry
from nodes.spec import NodeContext, OpError, RunContext
from nodes.types import TensorType


def default_memory_limit() -> int:
    """Half of physical memory (bytes)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024**3


@dataclass
class MemoryEstimate:
    """Peak live bytes of one run, and the largest single value."""

    peak_bytes: int
    largest_value: str
    largest_bytes: int
    unknown_values: int


def _nbytes(t: TensorType) -> int | None:
    n = t.numel()
    if n is None or t.dtype is None:
        return None
    return n * (np.dtype(t.dtype).itemsize if t.dtype != np.dtype(object) else 8)


def estimate(graph: Graph, input_shapes: Mapping[str, tuple[int, ...]]) -> MemoryEstimate:
    """Estimate the peak memory of executing ``graph`` with inputs of these shapes."""
    types: dict[str, TensorType] = {}
    known: dict[str, np.ndarray] = {}
    for v in graph.inputs:
        shape = input_shapes.get(v.name)
        types[v.name] = TensorType(v.type.dtype, tuple(shape)) if shape is not None else v.type
    for name, v in graph.initializers.items():
        types[name] = v.type
        if v.const is not None and v.const.size <= KNOWN_VALUE_LIMIT:
            known[name] = v.const
    try:
        order = graph.toposort()
    except ValueError:
        return MemoryEstimate(0, "", 0, 0)
    live = sum(_nbytes(t) or 0 for name, t in types.items())
    peak, largest, largest_name, unknown = live, 0, "", 0
    last_use: dict[str, int] = {}
    for k, node in enumerate(order):
        for v in node.inputs:
            if v is not None:
                last_use[v.name] = k
    outputs = {v.name for v in graph.outputs}
    for k, node in enumerate(order):
        spec = registry.get(node.op_type, node.domain)
        in_types = [types.get(v.name, v.type) if v is not None else None for v in node.inputs]
        consts = [None if v is None else (v.const if v.const is not None else known.get(v.name)) for v in node.inputs]
        out_types: list[TensorType | None] = [None] * len(node.outputs)
        if spec is not None:
            try:
                ctx = NodeContext(node, spec, in_types, consts)
                out_types = list(spec.infer(ctx))
                static = spec.static_value(ctx)
                if static is None and node.inputs and all(c is not None for c, v in zip(consts, node.inputs)
                                                          if v is not None) and spec.deterministic \
                        and not any(True for _ in node.subgraphs()):
                    sizes = [t.numel() if t is not None else None for t in out_types]
                    if all(s is not None and s <= KNOWN_VALUE_LIMIT for s in sizes):
                        res = spec.reference(RunContext(node, ctx.attrs, ctx.opset), *consts)
                        static = [np.asarray(res)] if isinstance(res, (np.ndarray, np.generic)) else list(res)
                for out, arr in zip(node.outputs, static or []):
                    if out is not None and arr is not None and np.asarray(arr).size <= KNOWN_VALUE_LIMIT:
                        known[out.name] = np.asarray(arr)
            except (OpError, ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError):
                out_types = [None] * len(node.outputs)
            except Exception:  # a kernel that cannot evaluate constant inputs: sizes stay unknown
                pass
        for out, t in zip(node.outputs, out_types):
            if out is None:
                continue
            t = t if t is not None and t.shape is not None else out.type
            types[out.name] = t
            nb = _nbytes(t)
            if nb is None:
                unknown += 1
                continue
            live += nb
            if nb > largest:
                largest, largest_name = nb, out.name
        peak = max(peak, live)
        for v in node.inputs:
            if v is not None and last_use.get(v.name) == k and v.name not in outputs and v.const is None:
                live -= _nbytes(types.get(v.name, v.type)) or 0
    return MemoryEstimate(peak, largest_name, largest, unknown)


def check_memory(graph: Graph, feeds: Mapping[str, np.ndarray], limit: int) -> MemoryEstimate:
    """Raise ExecutionError when the estimated peak exceeds ``limit`` bytes."""
    from engine.errors import ExecutionError

    est = estimate(graph, {k: tuple(np.shape(v)) for k, v in feeds.items() if isinstance(v, np.ndarray)})
    if est.peak_bytes > limit:
        raise ExecutionError(
            f"running this model would need about {est.peak_bytes / 2**30:.1f} GiB (largest tensor "
            f"{est.largest_value!r}: {est.largest_bytes / 2**30:.1f} GiB), over the limit of "
            f"{limit / 2**30:.1f} GiB")
    return est
