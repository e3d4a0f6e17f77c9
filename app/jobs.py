"""The long jobs of the editor, run in worker threads (see app/workers.py): loading a model
or project and laying it out, laying out again, and compiling (optimize + place).

Each job gets its own graph (freshly loaded, or a clone) and returns plain results; the GUI
thread installs them. Nothing here touches Qt widgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app import placement, style
from app.canvas.layout import LayoutResult, layered_layout
from app.canvas.snapshot import GraphSnapshot, routes_by_key, take_snapshot
from app.runtime import collections_paused, settle_heap
from app.workers import TaskControl, clone_unchanged
from engine import project as projects
from engine.diagnostics import Diagnostic
from engine.ir.graph import Graph


@dataclass
class LoadedModel:
    """A model (or project) read and laid out, ready for the GUI thread to show."""

    graph: Graph
    model_path: Path
    sha256: str
    project: projects.Project | None
    project_path: Path | None
    snapshot: GraphSnapshot
    layout: LayoutResult
    seconds: dict[str, float] = field(default_factory=dict)
    fingerprint: Any = None  # of the graph as read (projects.fingerprint), taken here off the GUI thread
    baseline: Any = None  # the types as read (engine.editing.snapshot_types), also taken here


def load_job(control: TaskControl, path: str | Path, shapes: dict[str, tuple[int, ...]] | None = None) -> LoadedModel:
    """Read ``path`` (.onnx or .npuproj), then lay it out."""
    with collections_paused():
        try:
            return _load(control, Path(path), shapes)
        finally:
            settle_heap()  # the new graph is not visited by later collections (app/runtime.py)


def _load(control: TaskControl, path: Path, shapes: dict[str, tuple[int, ...]] | None) -> LoadedModel:
    import time

    import engine

    t0 = time.perf_counter()
    control.progress(0.02, f"reading {path.name}")
    project = None
    project_path = None
    if path.suffix.lower() == projects.SUFFIX:
        graph, project = projects.open_project(path)
        model_path = project.model_path
        project_path = path
        recovery = project.extra.pop("recovery", None)  # never carried into a saved project
        if recovery is not None:  # a crash-recovery file: its edits belong to the file then open
            document = recovery.get("document") if isinstance(recovery, dict) else None
            project_path = Path(document) if document else None
    else:
        graph = engine.load(path, shapes=shapes or None)
        model_path = path
    control.check()
    sha = projects.sha256_of(model_path)
    base = project.base if project is not None and project.base is not None else projects.fingerprint(graph)
    t1 = time.perf_counter()
    control.progress(0.35, "laying out")
    snapshot, result = layout_job(control, graph, (), base=0.35)
    t2 = time.perf_counter()
    from engine import editing

    return LoadedModel(graph, model_path, sha, project, project_path, snapshot, result,
                       {"load": t1 - t0, "layout": t2 - t1}, base, editing.snapshot_types(graph))


def layout_job(control: TaskControl, graph: Graph | GraphSnapshot, expanded=(), base: float = 0.0) -> tuple[GraphSnapshot, LayoutResult]:
    """Lay out a graph (or a snapshot taken on the GUI thread)."""
    snapshot = graph if isinstance(graph, GraphSnapshot) else take_snapshot(graph, expanded)
    span = 1.0 - base
    result = layered_layout(snapshot.data, progress=lambda f, t: control.progress(base + span * 0.9 * f, t),
                            cancelled=control.cancelled)
    control.check()
    result.key_routes = routes_by_key(snapshot, result)  # here, off the GUI thread
    return snapshot, result


@dataclass
class CompileOutcome:
    """What Compile shows: the optimized graph, the pass trace, fusions and its placement."""

    optimized: Graph | None
    passes: list[dict[str, Any]]
    fused: list[dict[str, Any]]
    placement: placement.PlacementOutcome
    diagnostics: list[Diagnostic]
    summary: str


def optimize_and_place_job(control: TaskControl, graph: Graph, version: int, target: Any) -> CompileOutcome:
    """Optimize a clone of the document's graph (at ``version``) and place the result on ``target``."""
    control.progress(0.02, "copying the graph")
    graph = clone_unchanged(graph, version)
    control.progress(0.05, "optimizing")
    from engine.passes.pipeline import optimize

    res = optimize(graph, copy=False)
    if target is not None:  # the lowerings compile runs for this target, so both place the same graph
        from engine.passes.lower_npu import lower_for_target

        lower_for_target(res.graph, target)
    control.check()
    control.progress(0.6, "placing")
    placed = placement.place_graph(res.graph, target) if target is not None else placement.PlacementOutcome()
    control.progress(0.95, "summarizing")
    npu = sum(1 for d in placed.device.values() if d == "npu")
    cpu = sum(1 for d in placed.device.values() if d == "cpu")
    # These are ops of the optimized float graph placed on their own, not the analysis compile
    # (quantized, with inserted ops) whose CPU fallback the legend and panels count: say so.
    where = (f"; its {style.count(npu + cpu, 'op')} placed alone (float, before quantization): {npu} on the NPU, {cpu} on the CPU"
             if placed.available else "; choose a target to place it")
    summary = f"{res.nodes_before} → {style.count(res.nodes_after, 'node')}, {len(res.fused())} fused{where}"
    return CompileOutcome(res.graph, [r.to_json() for r in res.trace], res.fused(), placed,
                          list(res.diagnostics) + placed.diagnostics, summary)
