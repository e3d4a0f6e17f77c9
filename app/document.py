"""The open document: one graph, its undo stack, its analysis, its files.

The document is the only GUI object that talks to the graph: commands pushed here edit it,
and after every edit (coalesced) it re-verifies and re-infers the graph and places it on the
chosen target, publishing per-node statuses that the canvas paints. It also tracks the dirty
state, saves ONNX and project files atomically and autosaves a recovery file shortly after
the last change.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QPointF, QTimer, Signal
from PySide6.QtGui import QUndoCommand, QUndoStack

from app import placement
from app.placement import NODE_ERROR_CODES, EditAnalysis, node_errors  # noqa: F401 (the document's names)
from app.runtime import release_heap
from app.workers import Task, TaskControl, clone_unchanged
from engine import editing
from engine import project as projects
from engine.diagnostics import ERROR, Diagnostic
from engine.ir.events import GraphEvent
from engine.ir.graph import Graph
from engine.ir.onnx_io import to_onnx
from nodes.types import TensorType

log = logging.getLogger(__name__)

AUTOSAVE_DELAY_MS = 15_000  # recovery file written this long after the last change (< 1 minute)
ANALYSIS_DELAY_MS = 60  # edits within this window are analysed once


def _place_job(control: TaskControl, graph: Graph, target: Any, version: int) -> tuple[int, placement.PlacementOutcome]:
    control.progress(0.1, "placing")
    return version, placement.place_graph(graph, target)


def _baseline_types(graph: Graph, baseline: dict[int, tuple[Any, TensorType]]) -> dict[str, TensorType]:
    """The loader's types of the values still in ``graph`` (by name), read off the GUI thread."""
    base: dict[str, TensorType] = {}
    for n in tuple(graph._nodes.values()):
        for v in n.outputs:
            if v is not None:
                entry = baseline.get(id(v))
                if entry is not None and entry[0] is v:
                    base[v.name] = entry[1]
    return base


def _analysis_job(control: TaskControl, graph: Graph, baseline: dict[int, tuple[Any, TensorType]], reinfer: bool,
                  target: Any, version: int) -> EditAnalysis:
    """Re-verify and re-infer a clone of the document's graph (at ``version``), place it and derive
    the node statuses: everything the canvas shows after an edit, computed off the GUI thread."""
    control.progress(0.05, "copying the graph")
    base = clone_unchanged(graph, version, lambda g: _baseline_types(g, baseline)) if reinfer else {}
    clone = clone_unchanged(graph, version)
    control.progress(0.1, "checking the graph")
    types = None
    if reinfer:
        baseline = {}
        for n in clone.nodes:
            for v in n.outputs:
                if v is not None and v.name in base:
                    baseline[id(v)] = (v, base[v.name])
        diagnostics = editing.reinfer(clone, baseline)
        types = {v.name: v.type for n in clone.nodes for v in n.outputs if v is not None}
    else:
        diagnostics = list(clone.diagnostics)
    control.check()
    outcome = placement.PlacementOutcome()
    if target is not None:
        control.progress(0.5, "placing")
        outcome = placement.place_graph(clone, target)
    return EditAnalysis(version, types, diagnostics, outcome,
                          placement.statuses(clone, outcome, node_errors(diagnostics)))


_TARGETS: dict[tuple[str, float], Any] = {}


@dataclass
class CompiledPlacement:
    """The placement of a compile of the graph at ``version``: each node's device (the op it was
    compiled into), and the compile's diagnostics."""

    version: int
    device: dict[str, str]
    reason: dict[str, str]
    diagnostics: list[Diagnostic]
    cpu_ops: int = 0  # compiled ops on the CPU (the nodes on the CPU run as these)


def resolve_target_cached(name: str | None) -> Any:
    """``placement.resolve_target``, remembered: parsing a target's YAML costs tens of
    milliseconds, and opening each model (on the GUI thread) asks for one. Targets are frozen
    dataclasses, so documents can share them; a YAML file is read again when it changed."""
    if not name:
        return None
    path = Path(name)
    key = (name, path.stat().st_mtime if path.is_file() else 0.0)
    target = _TARGETS.get(key)
    if target is None:
        target = placement.resolve_target(name)
        if target is not None:
            _TARGETS[key] = target
    return target


def resolve_target_or_none(name: str | None) -> Any:
    """``resolve_target_cached``, None for a target that cannot be read (the document says why)."""
    try:
        return resolve_target_cached(name)
    except (ValueError, OSError):
        return None


class Document(QObject):
    """See the module docstring."""

    analysis_changed = Signal(object)  # names whose status changed, or None for all
    dirty_changed = Signal(bool)
    path_changed = Signal()
    positions_requested = Signal(object)  # dict: layout key -> QPointF (MoveItemsCommand)
    message = Signal(str)
    autosaved = Signal(str)
    graph_edited = Signal()

    def __init__(self, graph: Graph, model_path: str | Path | None = None, *, sha256: str = "",
                 project: projects.Project | None = None, project_path: str | Path | None = None,
                 recovery_dir: str | Path | None = None, target: str | None = None, parent: QObject | None = None,
                 fingerprint: Any = None, baseline: editing.Baseline | None = None) -> None:
        super().__init__(parent)
        self.graph = graph
        self.source_graph = graph  # provenance of fused nodes is looked up here
        self.model_path = Path(model_path) if model_path else None
        self.model_sha256 = sha256
        self.path: Path | None = Path(project_path) if project_path else None
        self.project = project or projects.Project(self.model_path or Path("model.onnx"), sha256)
        self.target_name = target if target is not None else self.project.target
        self.target: Any = None
        self.recovery_dir = Path(recovery_dir) if recovery_dir else None
        self.autosave_delay_ms = AUTOSAVE_DELAY_MS
        self.statuses: dict[str, placement.NodeStatus] = {}  # what the canvas shows (see _compose)
        self.placement_source = "edited"  # which placement ``statuses`` shows: "edited" or "compiled"
        self.diagnostics: list[Diagnostic] = []
        self.placement_diagnostics: list[Diagnostic] = []
        self.compile_diagnostics: list[Diagnostic] = []  # of the compile the canvas shows (or why it failed)
        self._placement = placement.PlacementOutcome()
        self._edited_statuses: dict[str, placement.NodeStatus] = {}
        self._compiled: CompiledPlacement | None = None
        self._autosaved: set[Path] = set()  # recovery files this document wrote (Save As moves the name)
        # (the loader takes it off the GUI thread: 50,000 nodes hold the GUI thread 30-60 ms)
        self._baseline = baseline if baseline is not None else editing.snapshot_types(graph)
        base = project.base if project is not None else None
        if base is None:  # the loader may have taken it already, off the GUI thread
            base = fingerprint if fingerprint is not None else projects.fingerprint(graph)
        self._fingerprint = base
        self._pending_pos: QPointF | None = None
        self._command_error: BaseException | None = None
        self._place_task: Task | None = None
        self._adopted: Any = None  # the worker's analysis of the graph as read (adopt_analysis)
        self._edited_version = -1  # the graph version ``_edited_statuses`` has every node of
        self.undo_stack = QUndoStack(self)
        self.undo_stack.cleanChanged.connect(self._on_clean_changed)
        self._analysis_timer = QTimer(self)
        self._analysis_timer.setSingleShot(True)
        self._analysis_timer.setInterval(ANALYSIS_DELAY_MS)
        self._analysis_timer.timeout.connect(self.request_analysis)
        self._delayed_analysis = QTimer(self)
        self._delayed_analysis.setSingleShot(True)
        self._delayed_analysis.timeout.connect(lambda: self.request_analysis(self._delayed_reinfer))
        self._delayed_reinfer = False
        self._autosave_timer = QTimer(self)
        self._autosave_timer.setSingleShot(True)
        self._autosave_timer.timeout.connect(self.autosave)
        self._unsubscribe = graph.events.subscribe(self._on_graph_event)
        self._restored = False
        self._closed = False
        self.positions_restored = False  # the project's saved node positions were applied
        if self.target_name:
            self.set_target(self.target_name, analyze=False)

    # -- editing ---------------------------------------------------------------------------
    def push(self, command: QUndoCommand) -> None:
        """Run a command through the undo stack (the only way the GUI edits the graph)."""
        self.undo_stack.push(command)
        self._raise_command_error()

    def undo(self) -> None:
        """Undo one step (menus and shortcuts come here)."""
        self.undo_stack.undo()
        self._raise_command_error()

    def redo(self) -> None:
        """Redo one step."""
        self.undo_stack.redo()
        self._raise_command_error()

    def command_failed(self, command: QUndoCommand, exc: BaseException) -> None:
        """A command's step raised inside QUndoStack (C++): keep the error to raise it after."""
        log.error("%s failed: %s", command.text(), exc, exc_info=exc)
        if self._command_error is None:
            self._command_error = exc

    def _raise_command_error(self) -> None:
        exc, self._command_error = self._command_error, None
        if exc is not None:
            self.message.emit(f"edit failed: {exc}")
            raise exc

    def place_next_at(self, pos: QPointF | None) -> None:
        """Where the canvas should draw the next node that appears (palette drops, paste)."""
        self._pending_pos = pos

    def take_pending_position(self) -> QPointF | None:
        """The position set by place_next_at, once."""
        pos, self._pending_pos = self._pending_pos, None
        return pos

    def _on_graph_event(self, ev: GraphEvent) -> None:
        self._delayed_analysis.stop()  # the edit's own analysis (re-inferring) replaces it
        self._analysis_timer.start()
        if self.placement_source == "compiled":  # that compile is of the graph before this edit
            self._set_statuses(self._edited_statuses)
        if self.recovery_dir is not None:
            self._autosave_timer.start(self.autosave_delay_ms)
        self.graph_edited.emit()

    def _on_clean_changed(self, clean: bool) -> None:
        if clean and not self._restored:
            self._autosave_timer.stop()
            self.discard_recovery()
        self.dirty_changed.emit(not clean or self._restored)

    @property
    def is_dirty(self) -> bool:
        """True when there are changes not saved to ``path``."""
        return not self.undo_stack.isClean() or self._restored

    def mark_restored(self) -> None:
        """The graph came from a recovery file: it differs from every saved file."""
        self._restored = True
        self.dirty_changed.emit(True)

    # -- analysis --------------------------------------------------------------------------
    def set_target(self, name: str | None, analyze: bool = True) -> None:
        """Choose the hardware target (bundled name or YAML path; None: no placement). The
        compiled placement on screen was for the other target: it goes at once."""
        changed = (name or None) != self.target_name
        self.target_name = name or None
        try:
            self.target = resolve_target_cached(self.target_name)
        except (ValueError, OSError) as exc:
            self.target = None
            self.message.emit(str(exc).splitlines()[0])
        if changed and self._compiled is not None:
            self._compiled = None
            self._set_statuses(self._edited_statuses)
        if analyze:
            self.request_analysis()

    def flush(self) -> None:
        """Bring types and diagnostics up to date now (tests and saving use this): run a
        pending analysis, or wait for the re-inference a worker is doing. Placement may
        still be running afterwards (``wait_for_placement``)."""
        if self._analysis_timer.isActive():
            self.analyze()
            return
        task = self._place_task
        if task is not None and task.fn is _analysis_job and task.args[2]:  # re-inferring
            if task.done.wait(60) and isinstance(task.result, EditAnalysis):
                self._on_analysis_done(task, task.result)
            else:
                self.analyze()

    @property
    def types_pending(self) -> bool:
        """True while an edit's re-inference has not written the graph's value types yet (they
        are assigned without events, so a copy taken meanwhile has the types of before the edit:
        after a delete and its undo, mobilenet_demo's copy read 1x64x1x1 for a 1x64x12x12 tensor)."""
        task = self._place_task
        return (self._analysis_timer.isActive() or (self._delayed_analysis.isActive() and self._delayed_reinfer)
                or (task is not None and task.fn is _analysis_job and bool(task.args[2]) and task.error is None))

    def request_analysis(self, reinfer: bool = True, delay_ms: int = 0) -> None:
        """Re-verify, re-infer and place the graph in a worker; the statuses follow when it is
        done (the GUI's path after edits: only a clone is made on the GUI thread).

        ``reinfer=False`` trusts the loader's inference (the first analysis after opening);
        ``delay_ms`` starts it later (``wait_for_placement`` and ``flush`` do not wait for that)."""
        if delay_ms > 0:
            self._delayed_reinfer = reinfer
            self._delayed_analysis.start(delay_ms)
            return
        self._delayed_analysis.stop()
        reinfer = reinfer or self._analysis_timer.isActive()  # an edit is waiting to be analysed
        self._analysis_timer.stop()
        if self._place_task is not None:
            self._place_task.cancel()
        graph = self.graph
        # The worker copies the graph (clone_unchanged): nothing proportional to its size runs here.
        task = Task(_analysis_job, graph, self._baseline, reinfer, self.target, graph.version, name="analysis")
        task.signals.finished.connect(lambda result, t=task: self._on_analysis_done(t, result))
        task.signals.failed.connect(self.message)
        self._place_task = task.start()

    def adopt_analysis(self, task: Any) -> None:
        """Send ``task`` (app/jobs.py ``open_place_job``; None: none): the worker process analyses
        the graph as it was read. Its result is this document's opening analysis, unless the graph
        or the target changed meanwhile (an edit or a new target requests its own); should it
        fail, the editor analyses the graph itself."""
        if task is None:
            return
        if task.args[2] != self.target or self._place_task is not None:  # (path, shapes, target)
            task.cancel()
            return
        version = self.graph.version
        self._adopted = task
        self._place_task = task

        def done(result: Any) -> None:
            if isinstance(result, EditAnalysis):
                result.version = version
                self._on_analysis_done(task, result)

        def fell_through(*_: Any) -> None:
            if task is self._place_task and not self._closed:
                self._place_task = None
                self._adopted = None
                self.request_analysis(reinfer=False)

        task.signals.finished.connect(done)
        task.signals.failed.connect(fell_through)
        task.signals.cancelled.connect(fell_through)
        task.start()

    @property
    def analysis_adopted(self) -> bool:
        """True when the worker's opening analysis is this document's (running or landed)."""
        return self._adopted is not None

    @property
    def analysis_in_worker(self) -> bool:
        """True while the worker process places the graph as read (adopt_analysis): a compile
        started now would share that process with it."""
        return self._adopted is not None and self._place_task is self._adopted

    def _on_analysis_done(self, task: Task, result: EditAnalysis) -> None:
        if self._closed or task is not self._place_task or result.version != self.graph.version:
            return  # superseded (a newer analysis is on its way), or the document closed
        self._place_task = None
        reshaped: set[str] = set()  # nodes whose output types changed: their items repaint too
        if result.types is not None:
            types = result.types
            for n in self.graph.nodes:
                for v in n.outputs:
                    if v is not None:
                        t = types.get(v.name)
                        if t is not None and t != v.type:
                            v.type = t  # derived data: assigned directly, no events
                            reshaped.add(n.name)
        self.diagnostics = result.diagnostics
        self._placement = result.placement
        self.placement_diagnostics = result.placement.diagnostics
        self._set_statuses(result.statuses, reshaped, version=result.version)

    def analyze(self, reinfer: bool = True) -> None:
        """Re-verify and re-infer the graph now; placement follows (in a worker with a target).

        ``reinfer=False`` trusts the loader's inference (the first analysis after opening)."""
        self._analysis_timer.stop()
        self._delayed_analysis.stop()
        t0 = time.perf_counter()
        if reinfer:
            self.diagnostics = editing.reinfer(self.graph, self._baseline)
        else:
            self.diagnostics = list(self.graph.diagnostics)
        log.debug("reinfer of %d nodes took %.1f ms", len(self.graph), 1000 * (time.perf_counter() - t0))
        if self.target is not None:
            self._start_placement()
        else:
            self._placement = placement.PlacementOutcome()
            self.placement_diagnostics = []
        self._publish(everything=reinfer)

    def _start_placement(self) -> None:
        from engine.ir.clone import clone_graph

        if self._place_task is not None:
            self._place_task.cancel()
        task = Task(_place_job, clone_graph(self.graph), self.target, self.graph.version, name="placement")
        task.signals.finished.connect(lambda result, t=task: self._on_placement_done(t, result))
        task.signals.failed.connect(self.message)
        self._place_task = task.start()

    def _on_placement_done(self, task: Task, result: tuple[int, placement.PlacementOutcome]) -> None:
        version, outcome = result
        if self._closed or task is not self._place_task or version != self.graph.version:
            return  # superseded: a newer analysis is on its way
        self._place_task = None
        self._placement = outcome
        self.placement_diagnostics = outcome.diagnostics
        self._publish()

    def wait_for_placement(self, timeout: float = 30.0) -> None:
        """Block until a running placement finished (tests, screenshots, headless use)."""
        from PySide6.QtCore import QCoreApplication

        if self._delayed_analysis.isActive():
            self.request_analysis(self._delayed_reinfer)
        task = self._place_task
        end = time.monotonic() + timeout
        while task is not None and not task.done.is_set() and time.monotonic() < end:
            task.done.wait(0.02)
        QCoreApplication.processEvents()

    def _publish(self, everything: bool = False) -> None:
        self._set_statuses(placement.statuses(self.graph, self._placement, node_errors(self.diagnostics)),
                           everything=everything, version=self.graph.version)

    def show_compiled(self, compiled: CompiledPlacement | None) -> None:
        """The analysis compiled the graph at ``compiled.version`` (None: no compile to show).
        The canvas shows it while it is the compile of the current graph; a compile of an older
        version than the one shown never replaces it (graph versions only grow)."""
        held = self._compiled
        if compiled is not None and held is not None and compiled.version < held.version:
            return
        self._compiled = compiled
        self.compile_diagnostics = []  # a failure before this compile no longer applies
        self._set_statuses(self._edited_statuses)

    def compile_failed(self, message: str) -> None:
        """The analysis could not compile the current graph: say so in the diagnostics."""
        self._compiled = None
        self.compile_diagnostics = [Diagnostic(ERROR, None, "compile-blocked", message)]
        self._set_statuses(self._edited_statuses)

    def _compose(self, edited: dict[str, placement.NodeStatus]) -> dict[str, placement.NodeStatus]:
        """The one decision of what the canvas shows, for every node of the current graph: the
        compiled placement while it belongs to the current graph, else the edited graph's own.

        ``edited`` may lack nodes: the document's placement of this version has not landed yet
        (an analysis compile can finish first) or an edit added them. Those nodes still get their
        compiled device, or their pin and problems. Composed over ``edited`` alone, a compile that
        came first painted every node "unplaced" under a "Compiled placement" legend."""
        comp = self._compiled
        if comp is None or comp.version != self.graph.version:
            self.placement_source = "edited"
            if comp is None and not any(d.code == "compile-blocked" for d in self.compile_diagnostics):
                self.compile_diagnostics = []
            comp = None
        else:
            self.placement_source = "compiled"
            self.compile_diagnostics = list(comp.diagnostics)
        if comp is None and self._edited_version == self.graph.version:
            return edited  # it has every node of this graph: composing would copy it (50,000 nodes: 30 ms)
        unplaced, errors = placement.PlacementOutcome(), None
        out: dict[str, placement.NodeStatus] = {}
        for n in self.graph.nodes:
            st = edited.get(n.name)
            if st is None:
                if errors is None:
                    errors = node_errors(self.diagnostics)
                st = placement.node_status(n, unplaced, errors)
            dev = comp.device.get(n.name) if comp is not None else None
            out[n.name] = st if dev is None else placement.NodeStatus(dev, comp.reason.get(n.name, ""),  # type: ignore[union-attr]
                                                                      st.pinned, st.errors)
        return out

    def _set_statuses(self, new: dict[str, placement.NodeStatus], also: set[str] = frozenset(),  # type: ignore[assignment]
                      everything: bool = False, version: int | None = None) -> None:
        """Publish statuses (the only writer of ``statuses``); listeners hear which names changed
        (``also`` adds nodes whose shapes changed) or None when anything may have. ``version``:
        the graph version ``new`` has a status of every node of (None: it may lack some)."""
        if new is not self._edited_statuses:
            self._edited_version = -1 if version is None else version
        self._edited_statuses = new
        new = self._compose(new)
        old = self.statuses
        if new is old:  # the same statuses again (a compile that failed, one for another version)
            changed = set(also)
        elif not old:
            changed = set(new) | set(also)
        else:
            changed = {k for k, v in new.items() if (o := old.get(k)) is not v and o != v}
            changed |= (old.keys() - new.keys()) | set(also)
        self.statuses = new
        self.analysis_changed.emit(None if everything else changed)

    @property
    def compile_blocked(self) -> bool:
        """True when the last compile of this graph failed (the diagnostics say why)."""
        return self.placement_source == "edited" and any(d.code == "compile-blocked" for d in self.compile_diagnostics)

    def fallback_count(self) -> int:
        """Nodes of the canvas that run on the CPU (the legend's "CPU fallback" figure)."""
        return sum(1 for st in self.statuses.values() if st.device == "cpu")

    def fallback(self) -> placement.FallbackCount:
        """The canvas's fallback: its nodes on the CPU, and the compiled ops they run as (each
        node is its own op while the canvas shows the edited graph's placement)."""
        nodes = self.fallback_count()
        comp = self._compiled
        ops = comp.cpu_ops if self.placement_source == "compiled" and comp is not None else nodes
        return placement.FallbackCount(nodes, ops)

    def all_diagnostics(self) -> list[Diagnostic]:
        """Verify and inference findings, then the placement's the canvas shows (the compile's
        when it shows the compiled placement, with why a compile failed)."""
        if self.placement_source == "compiled":
            return [*self.diagnostics, *self.compile_diagnostics]
        return [*self.diagnostics, *self.compile_diagnostics, *self.placement_diagnostics]

    # -- files -----------------------------------------------------------------------------
    def title(self) -> str:
        """The name shown in the window title."""
        p = self.path or self.model_path
        return p.name if p is not None else "untitled"

    def save(self, path: str | Path) -> None:
        """Save as ONNX (``.onnx``) or as a project (anything else, ``.npuproj`` suggested)."""
        path = Path(path)
        if path.suffix.lower() == ".onnx":
            self.save_onnx(path)
        else:
            self.save_project(path)

    def save_onnx(self, path: str | Path) -> None:
        """Write the edited model as ONNX (atomic); it becomes the document's model file."""
        path = Path(path)
        self.flush()
        data = to_onnx(self.graph).SerializeToString()
        projects.atomic_write(path, data)
        self.model_path = path
        self.model_sha256 = hashlib.sha256(data).hexdigest()
        self.project.model_path = path
        self.project.model_sha256 = self.model_sha256
        self._fingerprint = projects.fingerprint(self.graph)
        self._set_saved(path)

    def project_doc(self) -> projects.Project:
        """The project as it would be saved now (model path, edits, pins, target)."""
        p = self.project
        p.model_path = self.model_path or p.model_path
        p.model_sha256 = self.model_sha256 or p.model_sha256
        p.target = self.target_name
        p.pins = {n.name: n.meta["pin"] for n in self.graph.nodes if n.meta.get("pin") in placement.DEVICES}
        p.edits = projects.edits_since(self._fingerprint, self.graph)
        return p

    def save_project(self, path: str | Path) -> None:
        """Write a project file (atomic) referring to the model file with the edits as a diff."""
        path = Path(path)
        if self.model_path is None:
            raise ValueError("the document has no model file; save it as .onnx first")
        projects.save_project(path, self.project_doc())
        self._set_saved(path)

    def _set_saved(self, path: Path) -> None:
        self.path = path
        self._restored = False
        self.undo_stack.setClean()
        self.discard_recovery()
        self.dirty_changed.emit(False)
        self.path_changed.emit()

    # -- crash recovery --------------------------------------------------------------------
    @property
    def recovery_path(self) -> Path | None:
        """Where this document autosaves (None when autosave is off)."""
        if self.recovery_dir is None:
            return None
        key = str((self.path or self.model_path or Path("untitled")).resolve())
        stem = (self.path or self.model_path or Path("untitled")).stem
        return self.recovery_dir / f"{stem}-{hashlib.sha1(key.encode()).hexdigest()[:10]}{projects.SUFFIX}"

    def autosave(self) -> Path | None:
        """Write the recovery file now (when there are unsaved changes); returns its path."""
        path = self.recovery_path
        if path is None or not self.is_dirty or self.model_path is None:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        proj = self.project_doc()
        proj.extra = {**proj.extra, "recovery": {"document": str(self.path) if self.path else None,
                                                 "saved_at": time.time()}}
        try:
            projects.save_project(path, proj)
        except (ValueError, OSError) as exc:
            self.message.emit(f"autosave failed: {exc}")
            return None
        finally:
            proj.extra.pop("recovery", None)
        self._autosaved.add(path)
        self.autosaved.emit(str(path))
        return path

    def discard_recovery(self) -> None:
        """Remove this document's recovery files (after a save or a clean close): the one named
        after its current path and any written under an earlier name (before a Save As)."""
        paths = set(self._autosaved)
        if self.recovery_path is not None:
            paths.add(self.recovery_path)
        for path in paths:
            if path.exists():
                try:
                    path.unlink()
                except OSError:
                    log.warning("could not remove recovery file %s", path)
                    continue
            self._autosaved.discard(path)

    def close(self) -> None:
        """Stop observing the graph; a clean document leaves no recovery file."""
        self._closed = True
        self._delayed_analysis.stop()
        self._autosave_timer.stop()
        self._analysis_timer.stop()
        self._unsubscribe()
        release_heap()
        if self._place_task is not None:
            self._place_task.cancel()
        if not self.is_dirty:
            self.discard_recovery()


def pending_recoveries(recovery_dir: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """Recovery files left behind by a session that did not close cleanly (newest first)."""
    folder = Path(recovery_dir)
    if not folder.is_dir():
        return []
    out = []
    for p in folder.glob(f"*{projects.SUFFIX}"):
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("recovery"), dict):
            out.append((p, doc))
    out.sort(key=lambda item: -float(item[1]["recovery"].get("saved_at") or 0))
    return out
