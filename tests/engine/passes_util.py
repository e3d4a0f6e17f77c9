"""Helpers of the optimizer tests (onnxscript style): tiny models from onnx.parser text plus
numpy initializers, run one pass, compare numbers with the executor."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

import engine
from engine.ir.graph import Graph
from engine.ir.onnx_io import to_onnx
from engine.passes.base import PassManager, PassResult, RuleEvent
from engine.passes.pipeline import OptimizeResult, optimize

RNG = np.random.default_rng(1234)


def model(text: str, opset: int = 17, ir_version: int | None = None, **inits: np.ndarray) -> onnx.ModelProto:
    """A ModelProto from an onnx.parser graph text (the ``agraph (...) => (...) {...}`` part)
    with the keyword arrays added as initializers."""
    ir = ir_version or (10 if opset >= 21 else 9 if opset >= 20 else 8)
    m = onnx.parser.parse_model(f'<ir_version: {ir}, opset_import: ["" : {opset}]>\n{text}')
    for name, arr in inits.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    return m


def load(m: onnx.ModelProto, **shapes: tuple[int, ...]) -> Graph:
    """engine.load with the checker on."""
    return engine.load(m, shapes=shapes or None)


def rand(*shape: int, positive: bool = False) -> np.ndarray:
    """Random float32 data (positive values when asked)."""
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def feeds_for(graph: Graph) -> dict[str, np.ndarray]:
    """Random inputs matching the graph's (static) inputs."""
    out = {}
    for v in graph.inputs:
        shape = tuple(d if isinstance(d, int) else 2 for d in (v.type.shape or ()))
        dt = v.type.dtype or np.dtype(np.float32)
        out[v.name] = RNG.standard_normal(shape).astype(dt) if dt.kind == "f" else RNG.integers(0, 3, shape).astype(dt)
    return out


def run_pass(graph: Graph, make: Callable[[], object]) -> tuple[Graph, PassResult]:
    """Run one pass through a PassManager (so verification applies) on a copy of ``graph``."""
    from engine.ir.clone import clone_graph

    g = clone_graph(graph)
    p = make()
    res = PassManager([p]).run(g)  # type: ignore[list-item]
    rec = res.trace[0]
    return res.graph, PassResult(res.graph, rec.modified, rec.diagnostics, rec.fired + rec.not_fired)


def op_types(graph: Graph) -> list[str]:
    """Op types in topological order."""
    return [n.op_type for n in graph.toposort()]


def assert_same_numbers(before: Graph, after: Graph, rtol: float = 1e-5, feeds: dict | None = None) -> None:
    """The executor gives the same outputs for both graphs on random inputs (relative to the
    largest output magnitude)."""
    feeds = feeds or feeds_for(before)
    a = engine.execute(before, feeds)
    b = engine.execute(after, feeds)
    assert list(a) == list(b)
    for name in a:
        scale = max(float(np.max(np.abs(a[name]))) if a[name].size else 0.0, 1e-6)
        assert a[name].shape == b[name].shape, name
        diff = float(np.max(np.abs(a[name].astype(np.float64) - b[name].astype(np.float64)))) if a[name].size else 0.0
        assert diff <= rtol * scale, f"{name}: max abs diff {diff} vs scale {scale}"


def assert_runs_in_onnxruntime(graph: Graph, reference: Graph | None = None, rtol: float = 1e-4) -> None:
    """The written-back model passes the full checker and onnxruntime agrees with our executor."""
    import onnxruntime as ort

    m = to_onnx(graph)
    onnx.checker.check_model(m, full_check=True)
    feeds = feeds_for(reference or graph)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)
    want = engine.execute(reference or graph, feeds)
    for (name, w), g in zip(want.items(), got):
        scale = max(float(np.max(np.abs(w))), 1e-6)
        assert float(np.max(np.abs(w - g))) <= rtol * scale, name


def fired(res: PassResult | OptimizeResult, rule: str | None = None) -> list[RuleEvent]:
    """Fired events (of one rule)."""
    events = res.events if isinstance(res, PassResult) else [e for r in res.trace for e in r.fired]
    return [e for e in events if e.fired and (rule is None or e.rule == rule)]


def refused(res: PassResult | OptimizeResult, rule: str | None = None) -> list[RuleEvent]:
    """Matched-but-not-fired events (of one rule)."""
    events = res.events if isinstance(res, PassResult) else [e for r in res.trace for e in r.not_fired]
    return [e for e in events if not e.fired and (rule is None or e.rule == rule)]


__all__ = ["assert_runs_in_onnxruntime", "assert_same_numbers", "feeds_for", "fired", "load", "model", "op_types",
           "optimize", "rand", "refused", "run_pass"]
