"""The main window: the canvas in the middle, docks around it, menus and shortcuts.

Loading, layout and compile run in workers (app/jobs.py); their results are installed here.
Every edit goes through the document's undo stack (app/commands.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QPointF, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app import commands, compile_action, jobs, placement, recent, runtime, style
from app.analysis_dock import install_analysis
from app.canvas.minimap import MARGIN, LegendWidget, MinimapWidget
from app.canvas.node_item import IOItem, NodeItem
from app.canvas.scene import GraphScene
from app.canvas.snapshot import take_snapshot
from app.canvas.view import GraphView
from app.document import Document, pending_recoveries, resolve_target_or_none
from app.help import install_help
from app.panels.diagnostics import DiagnosticsPanel
from app.panels.inspector import InspectorPanel
from app.panels.palette import PalettePanel
from app.panels.pass_trace import PassTracePanel
from app.panels.sweep_panel import install_sweep_panel
from app.progress import ProgressStrip
from app.runtime import settle_heap
from app.shape_dialog import ShapeDialog, dynamic_inputs, remember, remembered
from app.worker_process import ProcessTask, worker
from app.workers import Task

log = logging.getLogger(__name__)
FIRST_LOOK_SCALE = 0.65  # a model opens at least this zoomed in: labels stay readable
FIRST_ANALYSIS_DELAY_MS = 80  # placement of a freshly opened model starts after its first frame
POSITIONS_KEY = "positions"  # node name -> [x, y] on the canvas, in a saved project
DEFAULT_TARGET = "phone-npu"  # a first run opens placed, compiled and charted (issue 17)
FILE_FILTER = "Models and projects (*.onnx *.npuproj);;ONNX models (*.onnx);;NPU Studio projects (*.npuproj)"


class _CanvasArea(QWidget):
    """The view with its overlays (legend top-left, minimap bottom-right, banner on top)."""

    def __init__(self, view: GraphView) -> None:
        super().__init__()
        self.view = view
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.banner = QLabel()
        self.banner.setObjectName("banner")
        self.banner.setWordWrap(True)
        self.banner.hide()
        lay.addWidget(self.banner)
        lay.addWidget(view)
        self.legend = LegendWidget(view)
        self.minimap = MinimapWidget(view)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.place_overlays()

    def first_look(self) -> None:
        """Fit the graph, but never below a readable zoom (then show its top, below the legend)."""
        self.place_overlays()
        self.view.zoom_to_fit(min_scale=FIRST_LOOK_SCALE, top_margin=self.legend.height() + 16)
        self.place_overlays()

    def place_overlays(self) -> None:
        vp = self.view.viewport().geometry()
        self.legend.fit_width(vp.width() - 2 * MARGIN)
        self.legend.move(vp.left() + 10, vp.top() + 10)
        self.minimap.place()


class MainWindow(QMainWindow):
    """NPU Studio's editor window."""

    document_shown = Signal()  # a model is on screen and laid out, every canvas item made
    canvas_shown = Signal()  # the first view of a model is drawn (other items may still be in the making)
    compile_finished = Signal(object)

    def __init__(self, settings: QSettings | None = None, recovery_dir: str | Path | None = None,
                 restore_state: bool = True, autosave_delay_ms: int | None = None,
                 default_target: str | None = DEFAULT_TARGET) -> None:
        super().__init__()
        runtime.start_up()  # the process-wide interpreter settings, once (app/runtime.py)
        self.settings = settings if settings is not None else QSettings("NPU Studio", "NPU Studio")
        self.recovery_dir = Path(recovery_dir) if recovery_dir else None
        self.autosave_delay_ms = autosave_delay_ms  # None: the document's default (AUTOSAVE_DELAY_MS)
        self.doc: Document | None = None
        self.scene: GraphScene | None = None
        self.compiled: jobs.CompileOutcome | None = None
        self.showing_optimized = False
        self._task: Task | None = None
        self._view_task: Task | None = None  # the layout of "show optimized graph" (or back)
        self._clipboard: list[commands.ClipNode] = []
        self._find_hits: list[NodeItem] = []
        self._find_index = -1
        self._counts = placement.LegendCounts()
        self.interactive = True  # False: errors go to the status bar and the log, never a modal box
        self.ask_shapes: Callable[[str, list, dict], dict | None] = self._ask_shapes
        self._shape_banner = False  # the banner offers the shape dialog (dynamic inputs, no shapes yet)
        self.ask_save: Callable[[], QMessageBox.StandardButton] = self._ask_save
        self.view = GraphView()
        self.canvas = _CanvasArea(self.view)
        self.canvas.banner.linkActivated.connect(lambda _link: self.ask_for_shapes())
        self.setCentralWidget(self.canvas)
        self.palette = PalettePanel(self)
        self.inspector = InspectorPanel(self)
        self.diagnostics = DiagnosticsPanel(self)
        self.pass_trace = PassTracePanel(self)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.palette)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.inspector)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.pass_trace)
        self.tabifyDockWidget(self.inspector, self.pass_trace)
        self.inspector.raise_()
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.diagnostics)
        self.progress = ProgressStrip()  # a QProgressBar repaints the window synchronously (app/progress.py)
        self.progress.setMaximumWidth(220)
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.zoom_label = QLabel("")
        self.statusBar().addPermanentWidget(self.progress)
        self.statusBar().addPermanentWidget(self.zoom_label)
        self._build_actions()
        compile_action.install(self)  # Cancel (Esc) beside the progress while Tools > Compile runs
        self._select_target_box(self._initial_target(default_target))
        self.palette.op_activated.connect(self._on_palette_op_activated)
        self.diagnostics.node_activated.connect(self.reveal_node)
        self.pass_trace.node_activated.connect(self.reveal_node)
        self.view.zoom_changed.connect(lambda z: self.zoom_label.setText(f"{z * 100:.0f}%"))
        self.resize(1500, 940)
        self.resizeDocks([self.diagnostics], [150], Qt.Orientation.Vertical)
        self.resizeDocks([self.palette, self.inspector], [210, 290], Qt.Orientation.Horizontal)
        install_analysis(self)  # issue 8: analysis docks, Export compiled..., chart <-> canvas selection
        install_sweep_panel(self)  # issue 16: a sweep's results.csv as a Pareto chart; a click applies a point
        if restore_state:
            geo = self.settings.value("window/geometry")
            state = self.settings.value("window/state")
            if isinstance(geo, QByteArray):
                self.restoreGeometry(geo)
            if isinstance(state, QByteArray):
                self.restoreState(state)
        self._update_title()
        install_help(self)  # issue 20: the docs/ pages offline and the shortcut list (the last menu)

    # -- actions and menus ---------------------------------------------------------------------
    def _action(self, text: str, slot: Callable[[], Any], shortcut: Any = None, menu=None) -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
        act.triggered.connect(lambda _=False: slot())
        if menu is not None:
            menu.addAction(act)
        return act

    def _build_actions(self) -> None:
        mb = self.menuBar()
        m = mb.addMenu("&File")
        self.act_open = self._action("&Open…", self.open_dialog, QKeySequence.StandardKey.Open, m)
        self.recent_menu = m.addMenu("Open &Recent")
        self.act_save = self._action("&Save", self.save, QKeySequence.StandardKey.Save, m)
        self.act_save_as = self._action("Save &As…", self.save_as, QKeySequence.StandardKey.SaveAs, m)
        self.act_export = self._action("&Export ONNX…", self.export_onnx, "Ctrl+E", m)
        m.addSeparator()
        self._action("&Quit", self.close, QKeySequence.StandardKey.Quit, m)
        m = mb.addMenu("&Edit")
        self.edit_menu = m
        self.act_undo = QAction("&Undo", self)
        self.act_undo.setShortcut(QKeySequence.StandardKey.Undo)
        self.act_undo.triggered.connect(self.undo)
        self.act_redo = QAction("&Redo", self)
        self.act_redo.setShortcuts([QKeySequence.StandardKey.Redo, QKeySequence("Ctrl+Y")])
        self.act_redo.triggered.connect(self.redo)
        m.addAction(self.act_undo)
        m.addAction(self.act_redo)
        m.addSeparator()
        self.act_copy = self._action("&Copy", self.copy_selection, QKeySequence.StandardKey.Copy, m)
        self.act_paste = self._action("&Paste", self.paste, QKeySequence.StandardKey.Paste, m)
        self.act_delete = self._action("&Delete", self.delete_selection, QKeySequence.StandardKey.Delete, m)
        self.act_select_all = self._action("Select &All", self.select_all, QKeySequence.StandardKey.SelectAll, m)
        m.addSeparator()
        self.act_find = self._action("&Find…", self.focus_find, QKeySequence.StandardKey.Find, m)
        m = mb.addMenu("&View")
        self.act_fit = self._action("Zoom to &Fit", self.view.zoom_to_fit, "Ctrl+0", m)
        self.act_zoom100 = self._action("Zoom &100%", self.view.zoom_100, "Ctrl+1", m)
        self._action("Zoom &In", lambda: self.view.set_zoom(self.view.scale_factor() * 1.25), QKeySequence.StandardKey.ZoomIn, m)
        self._action("Zoom &Out", lambda: self.view.set_zoom(self.view.scale_factor() / 1.25), QKeySequence.StandardKey.ZoomOut, m)
        self.act_relayout = self._action("&Lay Out Again", self.relayout, "Ctrl+L", m)
        self.act_shapes = self._action("Input &Shapes…", self.ask_for_shapes, "Ctrl+Shift+I", m)
        self.act_optimized = self._action("Show &Optimized Graph", self.toggle_optimized_view, "Ctrl+Shift+O", m)
        self.act_optimized.setCheckable(True)
        self.act_optimized.setEnabled(False)
        m.addSeparator()
        for dock in (self.palette, self.inspector, self.diagnostics, self.pass_trace):
            m.addAction(dock.toggleViewAction())
        m = mb.addMenu("&Tools")
        self.act_compile = self._action("&Compile", self.compile, "Ctrl+B", m)
        tb = QToolBar("Main", self)
        tb.setObjectName("MainToolBar")
        tb.setMovable(False)
        self.addToolBar(tb)
        # The toolbar's Undo/Redo keep their width: the step they would undo is in the tooltip
        # (the Edit menu's items carry it in their text).
        self.tb_undo = self._action("Undo", self.undo)
        self.tb_redo = self._action("Redo", self.redo)
        for act in (self.act_open, self.act_save, self.tb_undo, self.tb_redo, self.act_fit, self.act_compile):
            tb.addAction(act)
        tb.addSeparator()
        tb.addWidget(QLabel(" Target "))
        self.target_box = QComboBox()
        self.target_box.addItem("(none)", None)
        for name, desc in placement.list_targets():
            self.target_box.addItem(name, name)
            self.target_box.setItemData(self.target_box.count() - 1, desc, Qt.ItemDataRole.ToolTipRole)
        self.target_box.currentIndexChanged.connect(self._on_target_changed)
        tb.addWidget(self.target_box)
        tb.addSeparator()
        self.find_edit = QLineEdit()
        self.find_edit.setPlaceholderText("Find node (Ctrl+F)")
        self.find_edit.setClearButtonEnabled(True)
        self.find_edit.setMaximumWidth(260)
        self.find_edit.returnPressed.connect(self.find_next)
        self.find_edit.textChanged.connect(self._on_find_text_changed)
        tb.addWidget(self.find_edit)
        self._update_recent_menu()
        self._update_actions()

    def _update_actions(self) -> None:
        has = self.doc is not None
        editable = has and not self.showing_optimized
        for act in (self.act_save, self.act_save_as, self.act_export, self.act_relayout, self.act_compile,
                    self.act_select_all, self.act_copy):
            act.setEnabled(has)
        for act in (self.act_paste, self.act_delete):
            act.setEnabled(editable)
        stack = self.doc.undo_stack if self.doc is not None else None
        for act, tb, can, text, word in ((self.act_undo, self.tb_undo, stack and stack.canUndo(),
                                          stack.undoText() if stack else "", "Undo"),
                                         (self.act_redo, self.tb_redo, stack and stack.canRedo(),
                                          stack.redoText() if stack else "", "Redo")):
            act.setEnabled(bool(can and editable))
            tb.setEnabled(bool(can and editable))
            act.setText(f"&{word} {text}".rstrip())
            tb.setToolTip(f"{word} {text}".rstrip())

    # -- opening -------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        if not self.maybe_save():
            return
        start = str(self.settings.value("paths/last_dir", str(Path.home())))
        path, _ = QFileDialog.getOpenFileName(self, "Open model or project", start, FILE_FILTER)
        if path:
            self.open_path(path)

    def open_path(self, path: str | Path, target: str | None = None, shapes: dict | None = None,
                  restored: bool = False) -> Task:
        """Load a model or project in a worker, then show it (document_shown fires)."""
        path = Path(path)
        if self._task is not None:
            self._task.cancel()
        if shapes:
            remember(self.settings, path, shapes)
        self._show_progress(0.0, f"opening {path.name}")
        # The worker process lays an .onnx file out while a thread here reads it (app/jobs.py); not
        # while that process is still starting (a model given at start-up): then the thread does.
        remote = None
        if path.suffix.lower() == ".onnx" and worker().accepting.is_set():  # a large graph is placed there too
            on = None if restored else resolve_target_or_none(target if target is not None else self._current_target())
            remote = jobs.WorkerOpen(ProcessTask(jobs.open_check_job, str(path), name="open check").start(),
                                     ProcessTask(jobs.open_layout_job, name="open layout"),
                                     None if on is None else ProcessTask(jobs.open_place_job, on, name="open place"))
        task = Task(jobs.load_job, path, shapes, remote, name="load")
        task.signals.progress.connect(self._show_progress)
        task.signals.finished.connect(lambda loaded: self._on_model_loaded(loaded, target, restored))
        task.signals.failed.connect(self._on_task_failed)
        self._task = task.start()
        return task

    def _on_model_loaded(self, loaded: jobs.LoadedModel, target: str | None, restored: bool) -> None:
        self._task = None
        old = self.doc
        if old is not None:
            old.close()
        proj = loaded.project
        doc = Document(loaded.graph, loaded.model_path, sha256=loaded.sha256, project=proj,
                       project_path=loaded.project_path, recovery_dir=self.recovery_dir,
                       target=target if target is not None else (proj.target if proj else self._current_target()),
                       parent=self, fingerprint=loaded.fingerprint, baseline=loaded.baseline)
        if self.autosave_delay_ms is not None:
            doc.autosave_delay_ms = self.autosave_delay_ms
        if restored:
            doc.mark_restored()
        doc.adopt_analysis(loaded.placing)  # the worker's placement of the graph as read (a large one)
        self._install_document(doc, loaded.snapshot, loaded.layout)
        if not restored:
            self._add_recent(loaded.project_path or loaded.model_path)
        self.settings.setValue("paths/last_dir", str((loaded.project_path or loaded.model_path).parent))
        self.statusBar().showMessage(f"opened {self.doc.title() if self.doc else ''}: {style.count(len(loaded.graph), 'node')} "
                                     f"(read {loaded.seconds.get('load', 0):.2f} s, layout {loaded.seconds.get('layout', 0):.2f} s)", 8000)
        self._shape_banner = bool(dynamic_inputs(loaded.graph)) and loaded.project is None
        self._show_banner()
        if self._shape_banner and self.interactive and self.isVisible():
            self.ask_for_shapes()

    def _install_document(self, doc: Document, snapshot, layout) -> None:
        self.doc = doc
        self.compiled = None
        self.showing_optimized = False
        self.act_optimized.setChecked(False)
        self.act_optimized.setEnabled(False)
        doc.dirty_changed.connect(self._on_dirty_changed)
        doc.path_changed.connect(self._update_title)
        doc.message.connect(self._on_message)
        doc.analysis_changed.connect(self._on_analysis_changed)
        doc.undo_stack.indexChanged.connect(self._on_undo_index_changed)
        doc.graph_edited.connect(self.canvas.minimap.schedule_rebuild)
        self._select_target_box(doc.target_name)
        self._on_analysis_changed()  # the legend and diagnostics of this document (none yet), not the last one's
        self._set_scene(GraphScene(doc), snapshot, layout)
        self.inspector.set_document(doc)
        self.pass_trace.show_trace([], summary="Run Compile (Ctrl+B) to see what each optimizer pass did.")
        self._update_title()
        self._update_actions()

    def _set_scene(self, scene: GraphScene, snapshot, layout) -> None:
        old = self.scene
        self.scene = scene
        scene.populate_progress.connect(self._show_progress)
        scene.populated.connect(self._on_scene_populated)
        scene.view_ready.connect(self.canvas_shown)
        scene.message.connect(self._on_message)
        scene.selectionChanged.connect(self._on_selection_changed)
        scene.relayout_requested.connect(self.relayout)
        self.view.setScene(scene)
        if old is not None:
            old.detach()
            old.deleteLater()
        self._show_banner()
        scene.populate(snapshot, layout)
        self.canvas.first_look()  # the layout's extent is known: the first slices make what it shows

    def _show_banner(self) -> None:
        """The banner over the canvas: the read-only optimized view, or the offer to set the
        shapes of a model with dynamic inputs (which stays open, unplaced, until they are set)."""
        banner, scene = self.canvas.banner, self.scene
        if scene is not None and scene.read_only:
            banner.show()
        elif self._shape_banner and self.doc is not None:
            names = ", ".join(n for n, _ in dynamic_inputs(self.doc.graph))
            banner.setText(f"This model has dynamic input dimensions ({names}): it cannot be placed or simulated "
                           "until they are fixed. <a href='shapes'>Set input shapes…</a>")
            banner.show()
        else:
            banner.hide()

    def ask_for_shapes(self) -> bool:
        """Ask for the shapes of the open model's dynamic inputs and reopen it with them."""
        doc = self.doc
        if doc is None or doc.model_path is None:
            return False
        inputs = dynamic_inputs(doc.graph)
        if not inputs:
            self.statusBar().showMessage("every input of this model has a fixed shape", 6000)
            return False
        shapes = self.ask_shapes(doc.model_path.name, inputs, remembered(self.settings, doc.model_path))
        if not shapes:
            self._show_banner()
            return False
        self.open_path(doc.model_path, target=doc.target_name, shapes=shapes)
        return True

    def _ask_shapes(self, name: str, inputs: list, last: dict) -> dict | None:
        dlg = ShapeDialog(name, inputs, last, self)
        return dlg.shapes() if dlg.exec() == ShapeDialog.DialogCode.Accepted else None

    def _on_scene_populated(self) -> None:
        self._hide_progress()
        if self.doc is not None and self.scene is not None and not self.scene.read_only:
            # Once the first frame is up: its clone of the graph should not add to that frame.
            if not self.doc.analysis_adopted:  # else the worker placed the graph as read (app/jobs.py)
                self.doc.request_analysis(reinfer=self.doc.is_dirty, delay_ms=FIRST_ANALYSIS_DELAY_MS)
            settle_heap()
        self._restore_positions()
        self.canvas.minimap.schedule_rebuild()
        self.document_shown.emit()

    def _restore_positions(self) -> None:
        """A project saved node positions: put the nodes back where they were (once per document)."""
        doc, sc = self.doc, self.scene
        saved = doc.project.extra.get(POSITIONS_KEY) if doc is not None else None
        if sc is None or doc is None or sc.read_only or not isinstance(saved, dict) or doc.positions_restored:
            return
        doc.positions_restored = True
        by_name = {n.name: n for n in doc.graph.nodes}
        sc.apply_positions({id(by_name[k]): QPointF(float(v[0]), float(v[1])) for k, v in saved.items()
                            if k in by_name and isinstance(v, list) and len(v) == 2})

    def _on_message(self, message: str) -> None:
        self.statusBar().showMessage(message, 8000)

    def _on_dirty_changed(self, _dirty: bool) -> None:
        self._update_title()

    def _on_undo_index_changed(self, _index: int) -> None:
        self._update_actions()

    def _on_task_failed(self, message: str) -> None:
        self._task = None
        self._hide_progress()
        self.statusBar().showMessage(message, 15000)
        if self.interactive and self.isVisible():
            QMessageBox.warning(self, "NPU Studio", message)
        else:  # a screenshot or a script reports it: a modal box would wait for a click forever
            log.info("%s", message)

    # -- progress ------------------------------------------------------------------------------
    def _show_progress(self, fraction: float, text: str = "") -> None:
        self.progress.show()
        self.progress.setValue(int(1000 * max(0.0, min(1.0, fraction))))
        if text:
            self.statusBar().showMessage(text)

    def _hide_progress(self) -> None:
        self.progress.hide()
        self.statusBar().clearMessage()

    # -- analysis ------------------------------------------------------------------------------
    def _on_analysis_changed(self, _names: object = None) -> None:
        doc = self.doc
        if doc is None:
            return
        fallback = doc.fallback()
        self.diagnostics.show_diagnostics(doc.all_diagnostics(), fallback if doc.target else None)
        self.canvas.legend.set_counts(self._counts.of(doc.statuses, doc.graph), fallback)
        source = "failed" if doc.compile_blocked else doc.placement_source
        self.canvas.legend.set_source(placement.SOURCE_LABELS.get(source, "") if doc.target else "")
        self.canvas.minimap.schedule_rebuild()

    def _current_target(self) -> str | None:
        return self.target_box.currentData()

    def _select_target_box(self, name: str | None) -> None:
        self.target_box.blockSignals(True)
        idx = self.target_box.findData(name) if name else 0
        if idx < 0 and name:
            self.target_box.addItem(Path(name).stem, name)
            idx = self.target_box.count() - 1
        self.target_box.setCurrentIndex(max(idx, 0))
        self.target_box.blockSignals(False)

    def _initial_target(self, default: str | None) -> str | None:
        """The target a model opens with: the last one chosen (even "(none)"), else ``default``."""
        last = self.settings.value("target/last")
        if last is None:
            return default
        last = str(last)
        if not last:
            return None
        return last if self.target_box.findData(last) >= 0 else default

    def _on_target_changed(self, _index: int) -> None:
        self.settings.setValue("target/last", self._current_target() or "")
        if self.doc is not None:
            self.doc.set_target(self._current_target())

    # -- editing -------------------------------------------------------------------------------
    def undo(self) -> None:
        if self.doc is not None and not self.showing_optimized:
            self.doc.undo()

    def redo(self) -> None:
        if self.doc is not None and not self.showing_optimized:
            self.doc.redo()

    def delete_selection(self) -> None:
        """Delete the selected nodes (with their edges) and edges, as one undo step."""
        sc, doc = self.scene, self.doc
        if sc is None or doc is None or sc.read_only:
            return
        nodes = sc.selected_nodes()
        edges = [(n, i) for n, i in sc.selected_edges() if all(n is not m for m in nodes)]
        if nodes and edges:
            doc.undo_stack.beginMacro("Delete selection")
            commands.delete_edges(doc, edges)
            commands.delete_nodes(doc, nodes)
            doc.undo_stack.endMacro()
        elif nodes:
            commands.delete_nodes(doc, nodes)
        elif edges:
            commands.delete_edges(doc, edges)

    def select_all(self) -> None:
        if self.scene is not None:
            self.scene.select_all()

    def copy_selection(self) -> None:
        if self.scene is None:
            return
        nodes = self.scene.selected_nodes()
        self._clipboard = commands.copy_nodes(nodes, self.scene.node_positions())
        QApplication.clipboard().setText("\n".join(f"{n.op_type} {n.name}" for n in nodes))
        self.statusBar().showMessage(f"copied {style.count(len(nodes), 'node')}", 4000)

    def paste(self) -> None:
        if self.scene is None or self.doc is None or self.scene.read_only or not self._clipboard:
            return
        at = self.view.mapToScene(self.view.viewport().rect().center()) - QPointF(80, 80)
        new = commands.paste_nodes(self.doc, self._clipboard, at)
        self.scene.clearSelection()
        for n in new:
            item = self.scene.node_items.get(id(n))
            if item is not None:
                item.setSelected(True)

    def _on_palette_op_activated(self, domain: str, op_type: str) -> None:
        center = self.view.mapToScene(self.view.viewport().rect().center())
        self.view.add_op_at(op_type, domain, center)

    def _on_selection_changed(self) -> None:
        sc = self.scene
        if sc is None:
            return
        try:
            sel = sc.selectedItems()
        except RuntimeError:  # the scene is being destroyed
            return
        node = next((it.node for it in sel if isinstance(it, NodeItem)), None)
        io = next((it for it in sel if isinstance(it, IOItem)), None)
        if node is not None:
            self.inspector.show_node(node)
        elif io is not None:
            self.inspector.show_value(io.value)
        else:
            self.inspector.show_node(None)

    # -- find ----------------------------------------------------------------------------------
    def focus_find(self) -> None:
        self.find_edit.setFocus()
        self.find_edit.selectAll()

    def _on_find_text_changed(self, _text: str) -> None:
        self._find_hits = []
        self._find_index = -1

    def find_next(self) -> NodeItem | None:
        """Center the next node matching the find text; returns it."""
        if self.scene is None:
            return None
        if not self._find_hits:
            self._find_hits = self.scene.find(self.find_edit.text())
            self._find_index = -1
        if not self._find_hits:
            self.statusBar().showMessage(f"no node matches {self.find_edit.text()!r}", 4000)
            return None
        self._find_index = (self._find_index + 1) % len(self._find_hits)
        item = self.scene.ensure_item(id(self._find_hits[self._find_index]))  # on demand: made now
        if not isinstance(item, NodeItem):  # removed since the search
            self._find_hits = []
            return self.find_next()
        self.view.center_on_item(item)
        self.statusBar().showMessage(f"match {self._find_index + 1} of {len(self._find_hits)}: {item.node.name}", 4000)
        return item

    def reveal_node(self, name: str) -> None:
        """Center and select the node called ``name``."""
        if self.scene is None:
            return
        items = self.scene.items_named([name])
        if items:
            self.view.center_on_item(items[0])

    # -- layout --------------------------------------------------------------------------------
    def relayout(self) -> None:
        """Lay the graph out again in a worker (manual moves are dropped)."""
        sc = self.scene
        if sc is None:
            return
        snapshot = take_snapshot(sc.graph, sc.expanded)
        task = Task(jobs.layout_job, snapshot, name="layout")
        task.signals.finished.connect(lambda res: self._on_relayout_done(sc, res))
        task.signals.failed.connect(self._on_task_failed)
        task.signals.progress.connect(self._show_progress)
        task.start()

    def _on_relayout_done(self, scene: GraphScene, result) -> None:
        self._hide_progress()
        if scene is not self.scene:
            return
        snapshot, layout = result
        if len(snapshot.keys) != scene.node_count() + len(scene.input_items) + len(scene.output_items):
            return  # the graph changed meanwhile; the user can lay out again
        scene.apply_layout(snapshot, layout)
        self.canvas.minimap.rebuild()

    # -- compile -------------------------------------------------------------------------------
    def compile(self) -> Task | compile_action.AnalysisCompile | None:
        """Compile and show the pass trace (app/compile_action.py: as the live analysis does)."""
        return compile_action.compile_document(self)

    def _on_compile_done(self, outcome: jobs.CompileOutcome) -> None:
        self._hide_progress()
        self.compiled = outcome
        self.pass_trace.show_trace(outcome.passes, outcome.fused, outcome.summary)
        self.act_optimized.setEnabled(outcome.optimized is not None)
        self.statusBar().showMessage(f"compiled: {outcome.summary}", 10000)
        self.compile_finished.emit(outcome)

    def toggle_optimized_view(self) -> None:
        """Switch the canvas between the editable graph and the (read-only) optimized one."""
        doc, outcome = self.doc, self.compiled
        if doc is None:
            return
        want = not self.showing_optimized and outcome is not None and outcome.optimized is not None
        graph = outcome.optimized if want and outcome is not None and outcome.optimized is not None else doc.graph
        # Lay out in a worker; the switch happens when the layout is there (editing stays off
        # meanwhile, so the snapshot cannot go stale).
        self.showing_optimized = True
        self._update_actions()
        self._show_progress(0.0, "laying out")
        task = Task(jobs.layout_job, take_snapshot(graph), name="layout")
        task.signals.progress.connect(self._show_progress)
        task.signals.finished.connect(lambda res, t=task: self._on_view_layout_done(t, doc, outcome, want, res))
        task.signals.failed.connect(self._on_task_failed)
        self._view_task = task.start()

    def _on_view_layout_done(self, task: Task, doc: Document, outcome: jobs.CompileOutcome | None, want: bool,
                             result) -> None:
        if task is not self._view_task:
            return  # toggled again meanwhile
        self._view_task = None
        self._hide_progress()
        if doc is not self.doc or outcome is not self.compiled:
            return  # another model was opened or compiled meanwhile
        self.showing_optimized = want
        self.act_optimized.setChecked(want)
        if want:
            assert outcome is not None
            assert outcome.optimized is not None
            st = placement.statuses(outcome.optimized, outcome.placement, {})
            scene = GraphScene(doc, outcome.optimized, read_only=True,
                               status_of=lambda n: st.get(n.name, placement.NodeStatus()))
            self.canvas.banner.setText("Optimized graph (read-only): fused groups are framed; click a frame's "
                                       "title to show the original ops. Ctrl+Shift+O returns to editing.")
        else:
            scene = GraphScene(doc)
        self._set_scene(scene, *result)
        self._update_actions()

    # -- saving --------------------------------------------------------------------------------
    def save(self) -> bool:
        doc = self.doc
        if doc is None:
            return False
        if doc.path is None:
            return self.save_as()
        return self._save_to(doc.path)

    def save_as(self) -> bool:
        doc = self.doc
        if doc is None:
            return False
        base = doc.path or (doc.model_path.with_suffix(".npuproj") if doc.model_path else Path("model.npuproj"))
        path, _ = QFileDialog.getSaveFileName(self, "Save as", str(base),
                                              "NPU Studio project (*.npuproj);;ONNX model (*.onnx)")
        return self._save_to(Path(path)) if path else False

    def export_onnx(self) -> bool:
        doc = self.doc
        if doc is None:
            return False
        base = (doc.model_path or Path("model.onnx")).with_name((doc.model_path or Path("model")).stem + ".edited.onnx")
        path, _ = QFileDialog.getSaveFileName(self, "Export ONNX", str(base), "ONNX model (*.onnx)")
        if not path:
            return False
        try:
            from engine import project as projects
            from engine.ir.onnx_io import to_onnx

            doc.flush()
            projects.atomic_write(path, to_onnx(doc.graph).SerializeToString())
        except (ValueError, OSError) as exc:
            self._on_task_failed(str(exc))
            return False
        self.statusBar().showMessage(f"exported {path}", 6000)
        return True

    def _save_to(self, path: Path) -> bool:
        assert self.doc is not None
        if self.scene is not None and not self.scene.read_only:  # the project keeps the canvas layout
            names = {id(n): n.name for n in self.doc.graph.nodes}
            self.doc.project.extra[POSITIONS_KEY] = {names[k]: [round(p.x(), 1), round(p.y(), 1)]
                                                     for k, p in self.scene.node_positions().items() if k in names}
        try:
            self.doc.save(path)
        except (ValueError, OSError) as exc:
            self._on_task_failed(f"could not save {path}: {exc}")
            return False
        self._add_recent(path)
        self.statusBar().showMessage(f"saved {path}", 6000)
        return True

    def _ask_save(self) -> QMessageBox.StandardButton:
        assert self.doc is not None
        return QMessageBox.question(
            self, "Unsaved changes", f"Save the changes to {self.doc.title()}?",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Save)

    def maybe_save(self) -> bool:
        """Ask about unsaved changes; False when the user cancels."""
        if self.doc is None or not self.doc.is_dirty:
            return True
        answer = self.ask_save()
        if answer == QMessageBox.StandardButton.Cancel:
            return False
        if answer == QMessageBox.StandardButton.Save:
            return self.save()
        return True

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.maybe_save():
            event.ignore()
            return
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        if self.doc is not None:
            if self.doc.is_dirty:  # discarded on purpose: no recovery offer next time
                self.doc.undo_stack.setClean()
                self.doc._restored = False
            self.doc.close()
            self.doc.discard_recovery()
        if self._task is not None:
            self._task.cancel()
        event.accept()

    def frame_for_screenshot(self) -> None:
        """Frame the graph as a first look: fit, but never smaller than readable."""
        self.canvas.first_look()

    # -- recent files and recovery ------------------------------------------------------------
    def recent_files(self) -> list[str]:
        return recent.recent_files(self.settings)

    def _add_recent(self, path: Path) -> None:
        recent.add_recent(self.settings, path)
        self._update_recent_menu()

    def _update_recent_menu(self) -> None:
        recent.fill_menu(self.recent_menu, self.settings, lambda p: self.maybe_save() and self.open_path(p))

    def offer_recovery(self, ask: Callable[[Path, dict], bool] | None = None) -> bool:
        """If a previous session crashed with unsaved changes, offer to restore them."""
        if self.recovery_dir is None:
            return False
        found = pending_recoveries(self.recovery_dir)
        if not found:
            return False
        path, doc = found[0]
        ask = ask or self._ask_restore
        if ask(path, doc):
            self.open_path(path, restored=True)
            return True
        for p, _ in found:
            p.unlink(missing_ok=True)
        return False

    def _ask_restore(self, path: Path, doc: dict) -> bool:
        model = Path(str(doc.get("model", {}).get("path", "?"))).name
        answer = QMessageBox.question(
            self, "Restore unsaved changes?",
            f"NPU Studio did not close cleanly last time. Restore the unsaved changes to {model}?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes)
        return answer == QMessageBox.StandardButton.Yes

    def _update_title(self) -> None:
        doc = self.doc
        title = "NPU Studio"
        if doc is not None:
            title = f"{doc.title()}{' *' if doc.is_dirty else ''} — NPU Studio"
        self.setWindowTitle(title)
        self._update_actions()

