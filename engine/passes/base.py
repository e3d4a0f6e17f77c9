"""Passes and the PassManager: results, verification between passes, fixed points and a trace.

A pass is an object with a ``name`` and ``call(graph) -> PassResult(graph, modified,
diagnostics)``. Rule-based passes also report ``events``: which rewrite fired where, and which
rule matched its pattern but did not fire, with the reason (see ``pattern.py``).

The PassManager runs a pipeline (a list of passes and ``Repeat`` groups that run to a fixed
point), checks the graph after every pass that changed it (``engine.ir.verify`` plus the
bookkeeping checks below, optionally the ONNX checker) and, when a pass breaks the graph or
raises, reports a Diagnostic naming the pass and the node and continues from the graph as it
was before that pass. The trace records, per pass run: modified or not, nodes before/after,
milliseconds, the rewrites that fired and the rules that did not.

"Before that pass" is an ``engine.ir.clone.Checkpoint`` (field copies restored onto the same
objects, far cheaper than a clone), taken only when the graph changed since the last one.
After a pass that changed the graph the node table is re-sorted topologically, so the many
later toposorts take their linear fast path.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from engine.diagnostics import ERROR, Diagnostic
from engine.ir.clone import Checkpoint
from engine.ir.graph import Graph
from engine.ir.verify import verify


@dataclass
class RuleEvent:
    """A rule that fired at a node, or that matched its pattern there but did not fire."""

    rule: str
    node: str
    fired: bool
    reason: str | None = None
    result: str | None = None
    op_type: str | None = None
    nodes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict. Fired: rule, node (where it matched), result (the node or value
        that now computes the result, None when the match was removed), op_type, from (original
        node names). Not fired: rule, node, reason."""
        if self.fired:
            return {"rule": self.rule, "node": self.node, "result": self.result, "op_type": self.op_type,
                    "from": list(self.nodes)}
        return {"rule": self.rule, "node": self.node, "reason": self.reason}


@dataclass
class PassResult:
    """What a pass returns: the graph (usually the same object), whether it changed, findings."""

    graph: Graph
    modified: bool
    diagnostics: list[Diagnostic] = field(default_factory=list)
    events: list[RuleEvent] = field(default_factory=list)


class Pass:
    """Base class of a pass: subclasses set ``name``/``description`` and implement ``call``."""

    name: str = ""
    description: str = ""

    def call(self, graph: Graph) -> PassResult:
        """Transform ``graph`` (in place or into a new graph) and say what happened."""
        raise NotImplementedError

    def __call__(self, graph: Graph) -> PassResult:
        return self.call(graph)

    def names(self) -> set[str]:
        """Names this pass answers to when passes are switched off (its rules' names too)."""
        return {self.name}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


@dataclass
class Repeat:
    """A group of passes run again and again until none of them changes the graph."""

    passes: list[Pass]
    max_iterations: int = 8
    name: str = "repeat"


PipelineItem = Pass | Repeat


@dataclass
class PassRecord:
    """One entry of the trace: one run of one pass."""

    name: str
    modified: bool
    nodes_before: int
    nodes_after: int
    ms: float
    iteration: int = 0
    group: str | None = None
    restored: bool = False
    fired: list[RuleEvent] = field(default_factory=list)
    not_fired: list[RuleEvent] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The report's per-pass entry (CONTRACTS.md keys first, then the details)."""
        doc: dict[str, Any] = {"name": self.name, "modified": self.modified, "nodes_before": self.nodes_before,
                               "nodes_after": self.nodes_after, "ms": round(self.ms, 3)}
        if self.group:
            doc["group"] = self.group
            doc["iteration"] = self.iteration
        if self.restored:
            doc["restored"] = True
        doc["fired"] = [e.to_json() for e in self.fired]
        doc["not_fired"] = [e.to_json() for e in self.not_fired]
        if self.diagnostics:
            doc["diagnostics"] = [d.to_json() for d in self.diagnostics]
        return doc


@dataclass
class RunResult:
    """The outcome of a PassManager run: final graph, trace and every diagnostic."""

    graph: Graph
    trace: list[PassRecord]
    diagnostics: list[Diagnostic]

    @property
    def modified(self) -> bool:
        """True when any pass changed the graph (and was kept)."""
        return any(r.modified for r in self.trace)


def bookkeeping_errors(graph: Graph) -> list[Diagnostic]:
    """IR invariants that ``verify`` does not look at but a writer relies on: value names match
    their keys, constants read by nodes are registered initializers, node names are unique."""
    out: list[Diagnostic] = []
    for key, v in graph.values.items():
        if v.name != key:
            out.append(Diagnostic(ERROR, None, "value-name", f"value {v.name!r} is registered as {key!r}"))
    names: set[str] = set()
    for node in graph.nodes:
        if node.name in names:
            out.append(Diagnostic(ERROR, node.name, "duplicate-node", f"two nodes are named {node.name!r}"))
        names.add(node.name)
        for v in node.inputs:
            if v is not None and v.producer() is None and v.const is not None:
                g = v.graph
                if g is None or g.initializers.get(v.name) is not v:
                    out.append(Diagnostic(ERROR, node.name, "unregistered-constant",
                                          f"node {node.name!r} reads constant {v.name!r}, which is not an initializer"))
    for v in graph.outputs:
        if v.producer() is None and v.const is not None and graph.initializers.get(v.name) is not v:
            out.append(Diagnostic(ERROR, None, "unregistered-constant", f"graph output {v.name!r} is a lost constant"))
    return out


def onnx_errors(graph: Graph) -> list[Diagnostic]:
    """What ``onnx.checker.check_model(full_check=True)`` says about the graph (empty when fine)."""
    import onnx

    from engine.ir.onnx_io import to_onnx

    try:
        onnx.checker.check_model(to_onnx(graph), full_check=True)
    except Exception as exc:  # the checker raises ValidationError, InferenceError and others
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [Diagnostic(ERROR, None, "onnx-checker", first)]
    return []


class PassManager:
    """Runs a pipeline with verification between passes, fixed points and a trace.

    ``disabled`` holds pass (or rule) names to skip. With ``check_onnx`` the ONNX checker also
    runs after every pass that changed the graph (slower; the CLI uses it to find a culprit).
    """

    def __init__(self, pipeline: Sequence[PipelineItem], disabled: Iterable[str] = (),
                 verify: bool = True, check_onnx: bool = False) -> None:
        self.pipeline = list(pipeline)
        self.disabled = set(disabled)
        self.verify = verify
        self.check_onnx = check_onnx

    def run(self, graph: Graph) -> RunResult:
        """Run every enabled pass on ``graph`` (which may be changed in place)."""
        return self._run(graph)

    def _run(self, graph: Graph) -> RunResult:
        self._graph = graph
        self._snapshot: Checkpoint | None = None
        self._snapshot_key: tuple[int, int] | None = None
        trace: list[PassRecord] = []
        diags: list[Diagnostic] = []
        for item in self.pipeline:
            if isinstance(item, Repeat):
                passes = [p for p in item.passes if p.name not in self.disabled]
                for it in range(1, item.max_iterations + 1):
                    changed = False
                    for p in passes:
                        rec = self._run_one(p, trace, diags)
                        rec.group, rec.iteration = item.name, it
                        changed |= rec.modified
                    if not changed:
                        break
            elif item.name not in self.disabled:
                self._run_one(item, trace, diags)
        return RunResult(self._graph, trace, diags)

    def _take_snapshot(self) -> None:
        key = (id(self._graph), self._graph.version)
        if self._snapshot is None or self._snapshot_key != key:
            self._snapshot = Checkpoint(self._graph)
            self._snapshot_key = key

    def _run_one(self, p: Pass, trace: list[PassRecord], diags: list[Diagnostic]) -> PassRecord:
        if self.verify:
            self._take_snapshot()
        before = len(self._graph)
        version = (id(self._graph), self._graph.version)
        t0 = time.perf_counter()
        failure: list[Diagnostic] = []
        result: PassResult | None = None
        try:
            result = p.call(self._graph)
        except Exception as exc:  # a crashing pass must not take the optimizer down
            node = getattr(exc, "node", None)
            failure.append(Diagnostic(ERROR, node, "pass-failed",
                                      f"pass {p.name!r} raised {type(exc).__name__}: {exc}; "
                                      "the graph from before this pass is kept"))
        ms = (time.perf_counter() - t0) * 1000.0
        if result is not None:
            changed = result.modified or (id(result.graph), result.graph.version) != version
            if changed:
                # Keep the node table topological so every later toposort takes its fast path
                # (a cycle raises here; verification below names it).
                with suppress(ValueError):
                    result.graph.sort_nodes()
            if changed and self.verify:
                errors = verify(result.graph) + bookkeeping_errors(result.graph)
                if not errors and self.check_onnx:
                    errors = onnx_errors(result.graph)
                if errors:
                    first = errors[0]
                    where = f" at node {first.node!r}" if first.node else ""
                    failure.append(Diagnostic(ERROR, first.node, "pass-broke-graph",
                                              f"pass {p.name!r} broke the graph{where}: {first.message}; "
                                              "the graph from before this pass is kept"))
        rec = PassRecord(p.name, False, before, before, ms)
        if failure or result is None:
            rec.restored = self._restore()
            rec.diagnostics = failure
            rec.nodes_after = len(self._graph)
        else:
            self._graph = result.graph
            rec.modified = bool(result.modified)
            rec.nodes_after = len(self._graph)
            rec.diagnostics = list(result.diagnostics)
            rec.fired = [e for e in result.events if e.fired]
            rec.not_fired = [e for e in result.events if not e.fired]
        diags.extend(rec.diagnostics)
        trace.append(rec)
        return rec

    def _restore(self) -> bool:
        if self._snapshot is None:
            return False
        self._graph = self._snapshot.restore()
        self._snapshot_key = (id(self._graph), self._graph.version)
        return True
