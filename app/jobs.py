"""The long jobs of the editor, run in worker threads (see app/workers.py): loading a model
or project and laying it out, laying out again, and compiling (optimize + place).

Opening an .onnx file runs on both cores: the worker process (app/worker_process.py) runs
onnx's checker on the file while a thread of the editor reads it (``open_check_job``; the checker
holds the GIL for its whole run, 0.2-0.3 s on 50,000 nodes, which the GUI thread would wait for),
then lays the graph out from the snapshot that thread took as soon as the graph was read
(``open_layout_job``) while the thread verifies and infers it. Snapshot and layout cross as a few
arrays. The editor checks and lays out itself when the worker cannot (still starting, or gone).

A graph of REMOTE_PLACE_MIN_NODES nodes or more is also placed there, once the editor has read it
(``open_place_job``): the worker reads the file itself, so nothing but its name crosses, and the
opening analysis (2 s of Python on 50,000 nodes, and its garbage: one 220-390 ms collection) no
longer holds the editor's GIL. Its statuses come back for the document to adopt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app import placement, style
from app.canvas.layout import (
    LayoutCancelled,
    LayoutIndex,
    LayoutInput,
    LayoutResult,
    layered_layout,
)
from app.canvas.snapshot import GraphSnapshot, routes_by_key, take_snapshot
from app.runtime import collections_paused, settle_heap
from app.workers import TaskControl, clone_unchanged
from engine import project as projects
from engine.diagnostics import Diagnostic
from engine.errors import Cancelled
from engine.ir.graph import Graph

log = logging.getLogger(__name__)


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
    placing: Any = None  # the worker's placement of the graph as read (a ProcessTask), when it places it
    fingerprint: Any = None  # of the graph as read (projects.fingerprint), taken here off the GUI thread
    baseline: Any = None  # the types as read (engine.editing.snapshot_types), also taken here


def load_job(control: TaskControl, path: str | Path, shapes: dict[str, tuple[int, ...]] | None = None,
             remote: Any = None) -> LoadedModel:
    """Read ``path`` (.onnx or .npuproj), then lay it out; ``remote``, when given, is the worker
    process's part of opening an .onnx file (a ``WorkerOpen``; see the module docstring)."""
    with collections_paused():
        try:
            return _load(control, Path(path), shapes, remote)
        except BaseException:
            if remote is not None:
                remote.cancel()
            raise
        finally:
            settle_heap()  # the new graph is not visited by later collections (app/runtime.py)


def _pairs_out(pairs: Any, dtype: Any) -> np.ndarray:
    return np.array(pairs, dtype=dtype).reshape(-1, 2)


def _pairs(a: np.ndarray) -> list[tuple[Any, Any]]:
    return list(zip(a[:, 0].tolist(), a[:, 1].tolist()))


@dataclass
class PackedInput:
    """A ``LayoutInput`` as arrays (50,000 tuples in lists cost ~100x an array to send and read)."""

    sizes: np.ndarray
    edges: np.ndarray
    pinned_top: np.ndarray
    ports: np.ndarray | None

    @classmethod
    def of(cls, data: LayoutInput) -> PackedInput:
        return cls(_pairs_out(data.sizes, float), _pairs_out(data.edges, np.int64),
                   np.array(sorted(data.pinned_top), dtype=np.int64),
                   None if data.ports is None else _pairs_out(data.ports, float))

    def unpacked(self) -> LayoutInput:
        return LayoutInput(_pairs(self.sizes), _pairs(self.edges), set(self.pinned_top.tolist()),
                           None if self.ports is None else _pairs(self.ports))


@dataclass
class PackedLayout:
    """A ``LayoutResult`` as arrays, and how long the worker laid out and checked."""

    positions: np.ndarray
    layers: np.ndarray
    route_ends: np.ndarray
    route_counts: np.ndarray
    route_points: np.ndarray
    width: float
    height: float
    crossings: int | None
    index: LayoutIndex | None
    seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, result: LayoutResult) -> PackedLayout:
        ends = list(result.routes)
        bends = [result.routes[e] for e in ends]
        return cls(_pairs_out(result.positions, float), np.array(result.layers, dtype=np.int64),
                   _pairs_out(ends, np.int64), np.array([len(b) for b in bends], dtype=np.int64),
                   _pairs_out([p for b in bends for p in b], float), result.width, result.height,
                   result.crossings, result.index)

    def unpacked(self) -> LayoutResult:
        pts = _pairs(self.route_points)
        routes: dict[tuple[int, int], list[tuple[float, float]]] = {}
        at = 0
        for e, c in zip(_pairs(self.route_ends), self.route_counts.tolist()):
            routes[e] = pts[at:at + c]
            at += c
        return LayoutResult(_pairs(self.positions), routes, self.layers.tolist(), self.width, self.height,
                            self.crossings, self.index)


class WorkerOpen:
    """The worker process's part of an open: onnx's checker on the file (sent at once, so it runs
    while the editor reads), the layout (``layout.args`` set and sent once the graph is read) and,
    for a large graph and a target, its placement (``place``, which the document sends)."""

    def __init__(self, check: Any, layout: Any, place: Any = None) -> None:
        self.check, self.layout, self.place = check, layout, place
        self.placing = False  # the placement was sent

    def cancel(self) -> None:
        self.check.cancel()
        self.layout.cancel()
        if self.place is not None:
            self.place.cancel()


REMOTE_PLACE_MIN_NODES = 3000  # below this the editor's thread places the graph in a few 100 ms


def open_check_job(control: TaskControl, path: str) -> float:
    """In the worker process, while the editor reads ``path``: onnx's checker on it (seconds taken)."""
    import time

    from engine import loader

    t0 = time.perf_counter()
    loader.check_file(path)
    return time.perf_counter() - t0


def open_layout_job(control: TaskControl, data: PackedInput) -> PackedLayout:
    """In the worker process, while the editor verifies and infers the graph: lay out the snapshot
    it took (see the module docstring)."""
    return _open_layout(control, data)


def _open_layout(control: TaskControl, data: PackedInput) -> PackedLayout:
    import time

    with collections_paused():
        t0 = time.perf_counter()
        try:
            result = layered_layout(data.unpacked(), cancelled=control.cancelled)
        except LayoutCancelled:
            raise Cancelled() from None
        packed = PackedLayout.of(result)
        packed.seconds = {"layout": time.perf_counter() - t0}
        return packed


def open_place_job(control: TaskControl, path: str, shapes: dict[str, tuple[int, ...]] | None, target: Any
                   ) -> placement.EditAnalysis:
    """In the worker process, sent once the editor has read the graph (its first view is being
    made; earlier, this read of the file took CPU the editor's own read needed: a 10,000-node
    model's first view came 0.3-0.5 s later): read ``path`` as the editor did and place it on
    ``target``: the opening analysis, which trusts the loader's inference
    (``Document.request_analysis(reinfer=False)``). Its version is the editor's to stamp
    (``Document.adopt_analysis``); statuses that are equal are one object, so they cross as one."""
    import engine

    with collections_paused():
        graph = engine.load(path, shapes=shapes or None, check=False)  # the editor's read checked it
        control.check()
        outcome = placement.place_graph(graph, target)
        diagnostics = list(graph.diagnostics)
        same: dict[placement.NodeStatus, placement.NodeStatus] = {}
        statuses = {k: same.setdefault(v, v)
                    for k, v in placement.statuses(graph, outcome, placement.node_errors(diagnostics)).items()}
        return placement.EditAnalysis(-1, None, diagnostics, outcome, statuses)


def _remote_layout(control: TaskControl, remote: WorkerOpen, path: Path) -> LayoutResult | None:
    """The worker process's layout (None when it has none: the editor lays out); its refusal of
    the model (onnx's checker) is raised here."""
    from engine import loader
    from engine.errors import ModelError

    for task in (remote.check, remote.layout):
        while not task.done.wait(0.02):
            control.check()
    check = remote.check
    if check.error is not None and not check.internal_error:
        raise ModelError(check.error)
    if not isinstance(check.result, float):  # cancelled, or the worker failed (logged there)
        loader.check_file(path)
    packed = remote.layout.result
    return packed.unpacked() if isinstance(packed, PackedLayout) else None


def _load(control: TaskControl, path: Path, shapes: dict[str, tuple[int, ...]] | None, remote: Any = None
          ) -> LoadedModel:
    import time

    import engine

    t0 = time.perf_counter()
    control.progress(0.02, f"reading {path.name}")
    project = None
    project_path = None
    snapshots: list[GraphSnapshot] = []  # taken as soon as the graph is read, when the worker lays out
    if path.suffix.lower() == projects.SUFFIX:
        graph, project = projects.open_project(path)
        model_path = project.model_path
        project_path = path
        recovery = project.extra.pop("recovery", None)  # never carried into a saved project
        if recovery is not None:  # a crash-recovery file: its edits belong to the file then open
            document = recovery.get("document") if isinstance(recovery, dict) else None
            project_path = Path(document) if document else None
    else:
        def structure(graph: Graph) -> None:  # read, not yet verified nor inferred: the worker lays it out
            snapshots.append(take_snapshot(graph))
            remote.layout.args = (PackedInput.of(snapshots[0].data),)
            remote.layout.start()
            if remote.place is not None and len(graph) >= REMOTE_PLACE_MIN_NODES:  # sent by the document
                remote.place.args = (str(path), shapes or None, *remote.place.args)
                remote.placing = True

        graph = engine.load(path, shapes=shapes or None, check=remote is None,  # else the worker checks
                            structure=structure if remote is not None else None)
        model_path = path
    control.check()
    sha = projects.sha256_of(model_path)
    base = project.base if project is not None and project.base is not None else projects.fingerprint(graph)
    t1 = time.perf_counter()
    control.progress(0.35, "laying out")
    result = _remote_layout(control, remote, path) if snapshots else None
    if result is None:
        snapshot, result = layout_job(control, graph, (), base=0.35)
    else:
        snapshot = snapshots[0]
        result.key_routes = routes_by_key(snapshot, result)
    t2 = time.perf_counter()
    seconds = {"load": t1 - t0, "layout": t2 - t1}
    if snapshots and isinstance(remote.layout.result, PackedLayout):  # laid out there
        seconds.update({f"worker {k}": v for k, v in remote.layout.result.seconds.items()})
        if isinstance(remote.check.result, float):
            seconds["worker check"] = remote.check.result
    from engine import editing

    placing = remote.place if remote is not None and remote.placing else None
    return LoadedModel(graph, model_path, sha, project, project_path, snapshot, result,
                       seconds, placing, base, editing.snapshot_types(graph))


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
