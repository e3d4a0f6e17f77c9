"""``install_analysis(window)``: the analysis of issue 8 added to the editor's main window.

It creates the AnalysisController and the docks (compile settings, charts, op analysis,
hardware what-if, precision trade-off, stage table), the File -> Export compiled... action,
View toggles and a status-bar progress with cancel, and links the selection both ways:
clicking a bar, block or row selects the node(s) on the canvas (through the scene's items and
the view's ``center_on_item``), and selecting nodes on the canvas outlines their ops in every
chart. Canvas colours follow each compile through the document's statuses (app/analysis.py).
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMainWindow, QMenu, QToolButton

from app import runtime, style
from app.analysis import AnalysisController
from app.export import ExportController
from app.panels.charts import ChartsPanel
from app.panels.compile_panel import CompilePanel
from app.panels.precision_panel import PrecisionPanel
from app.panels.quant_inspector import QuantInspectorPanel
from app.panels.stages_panel import StagesPanel
from app.panels.target_panel import TargetPanel
from app.progress import ProgressStrip
from app.stale import StaleMark, StaleWatch

log = logging.getLogger(__name__)


_CLI_SHAPE_FIX = re.compile(r"fix it with --shape \S+")


def gui_wording(message: str) -> str:
    """The engine's message in the editor's terms: its CLI remedy (``--shape x=...``) becomes the
    menu item that does the same here."""
    return _CLI_SHAPE_FIX.sub("set it in View > Input Shapes… (Ctrl+Shift+I)", message)


def _menu(window: QMainWindow, title: str) -> QMenu | None:
    for act in window.menuBar().actions():
        m = act.menu()
        if m is not None and m.title().replace("&", "") == title:
            return m
    return None


class AnalysisDock(QObject):
    """Everything install_analysis adds to a window (kept as ``window.analysis``)."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.window = window
        self._failure_note = ""  # the status-bar line of the last failed analysis, while shown
        self.controller = AnalysisController(self)
        self.charts = ChartsPanel(window)
        self.compile_panel = CompilePanel(window)
        self.op_panel = QuantInspectorPanel(window)
        self.hardware_panel = TargetPanel(window)
        self.precision_panel = PrecisionPanel(window)
        self.stages_panel = StagesPanel(window)
        self.exporter = ExportController(self.controller, window)
        self._scene: Any = None
        self._syncing = False
        # Deferred work runs on timers owned by this object, so none fires after the window is gone.
        self._side_timer = self._zero_timer(self._show_side_panels)
        self._close_timer = self._zero_timer(self._after_close)
        self._place_timer = self._zero_timer(self._place_docks)
        for panel in (self.compile_panel, self.op_panel, self.hardware_panel, self.precision_panel):
            panel.set_controller(self.controller)
        self._placed = False
        for dock in self.docks:
            dock.hide()
        if window.isVisible():
            self._place_docks()
        self._build_actions()
        self._build_status()
        ctl = self.controller
        ctl.result_changed.connect(self._on_result_changed)
        ctl.sustained_changed.connect(self.charts.show_sustained)
        ctl.comparison_changed.connect(self._on_comparison_changed)
        ctl.state_changed.connect(self._on_state_changed)
        ctl.selection_changed.connect(self._on_selection_changed)
        ctl.progress.connect(self._on_progress)
        ctl.settings_changed.connect(self._on_settings_changed)
        ctl.cleared.connect(self._on_cleared)
        self.charts.op_clicked.connect(self.select_op)
        # "stale, recomputing" over every panel's old numbers, from one decision (app/stale.py).
        self.stale = StaleWatch(ctl, self)
        self.stale_marks = {p: StaleMark(p) for p in (self.compile_panel, self.op_panel, self.stages_panel,
                                                      self.hardware_panel, self.precision_panel)}
        self.stale.changed.connect(self._on_stale_changed)
        window.document_shown.connect(self._on_document_shown)
        window.installEventFilter(self)
        if getattr(window, "doc", None) is not None and getattr(window, "scene", None) is not None:
            self._on_document_shown()

    # -- layout --------------------------------------------------------------------------------
    def _zero_timer(self, slot) -> QTimer:
        t = QTimer(self)
        t.setSingleShot(True)
        t.setInterval(0)
        t.timeout.connect(slot)
        return t

    @property
    def docks(self) -> tuple:
        """The docks install_analysis adds."""
        return (self.compile_panel, self.op_panel, self.charts, self.stages_panel, self.hardware_panel,
                self.precision_panel)

    def _place_docks(self) -> None:
        """Dock the panels once the window is on screen.

        Qt 6.11's QMainWindow leaves a stale, visible copy of a tab bar behind when a second tab
        group is formed before the window is first shown (the copy keeps painting over whatever
        later occupies its place), so the panels are tabified after the first show. A window
        state restored earlier (QSettings) still places them: restoreDockWidget reads it.
        """
        if self._placed:
            return
        self._placed = True
        w = self.window
        left, right, bottom = (Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea,
                               Qt.DockWidgetArea.BottomDockWidgetArea)
        # The right column (inspector, op analysis) runs down to the status bar: the op analysis is
        # tall (figures, histogram, what-if), the charts are wide.
        w.setCorner(Qt.Corner.BottomRightCorner, right)
        restored = {d for d in self.docks if w.restoreDockWidget(d)}
        palette, inspector, diagnostics = (getattr(w, n, None) for n in ("palette", "inspector", "diagnostics"))
        defaults = [(self.compile_panel, left, palette), (self.op_panel, right, inspector),
                    (self.charts, bottom, diagnostics), (self.stages_panel, bottom, self.charts),
                    (self.hardware_panel, bottom, self.charts), (self.precision_panel, bottom, self.charts)]
        for dock, area, group in defaults:
            if dock in restored:
                continue
            w.addDockWidget(area, dock)
            if isinstance(group, QDockWidget):
                w.tabifyDockWidget(group, dock)
            dock.show()
        if not restored:
            self.charts.raise_()
            self.op_panel.raise_()
            w.resizeDocks([self.charts], [340], Qt.Orientation.Vertical)
            w.resizeDocks([self.op_panel, self.compile_panel], [380, 280], Qt.Orientation.Horizontal)

    def _build_actions(self) -> None:
        w = self.window
        self.act_export = QAction("Export &Compiled…", w)
        self.act_export.setShortcut(QKeySequence("Ctrl+Shift+E"))
        self.act_export.triggered.connect(lambda _=False: self.exporter.export_dialog())
        file_menu = _menu(w, "File")
        if file_menu is not None:
            acts = file_menu.actions()
            anchor = getattr(w, "act_export", None)
            idx = acts.index(anchor) + 1 if anchor in acts else len(acts)
            if idx < len(acts):
                file_menu.insertAction(acts[idx], self.act_export)
            else:
                file_menu.addAction(self.act_export)
        view_menu = _menu(w, "View")
        if view_menu is not None:
            view_menu.addSeparator()
            for dock in (self.charts, self.compile_panel, self.op_panel, self.hardware_panel, self.precision_panel,
                         self.stages_panel):
                view_menu.addAction(dock.toggleViewAction())
        tools = _menu(w, "Tools")
        if tools is not None:
            tools.addSeparator()
            act = QAction("Re&analyze Now", w)
            act.setShortcut(QKeySequence("F5"))
            act.triggered.connect(lambda _=False: self.controller.compile_now())
            tools.addAction(act)
            act = QAction("Cancel Analysis", w)
            act.triggered.connect(lambda _=False: self.controller.cancel())
            tools.addAction(act)

    def _build_status(self) -> None:
        self.progress = ProgressStrip()  # never a synchronous repaint (app/progress.py)
        self.progress.setRange(0, 1000)
        self.progress.setMaximumWidth(140)
        self.progress.setMaximumHeight(14)
        self.progress.setToolTip("background analysis (compile, quantize, simulate)")
        self.cancel_button = QToolButton()
        self.cancel_button.setText("✕")
        self.cancel_button.setToolTip("Cancel the analysis")
        self.cancel_button.clicked.connect(lambda: self.controller.cancel())
        sb = self.window.statusBar()
        sb.addPermanentWidget(self.progress)
        sb.addPermanentWidget(self.cancel_button)
        self.cancel_button.setEnabled(False)  # both stay visible: showing them would re-lay out the window

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() == QEvent.Type.Close:
            self._close_timer.start()
        elif watched is self.window and event.type() == QEvent.Type.Show and not self._placed:
            self._place_timer.start()
        return False

    def _after_close(self) -> None:
        if not self.window.isVisible():  # the close was not cancelled: stop the workers
            self.controller.shutdown()

    # -- following the window --------------------------------------------------------------------
    def _on_document_shown(self) -> None:
        w = self.window
        if w.doc is not self.controller.doc:
            self.controller.attach(w.doc)
        self.stale.follow(w.doc)
        scene = w.scene
        if scene is not self._scene:
            if self._scene is not None:
                with contextlib.suppress(RuntimeError, TypeError):
                    self._scene.selectionChanged.disconnect(self._on_canvas_selection_changed)
            self._scene = scene
            if scene is not None:
                scene.selectionChanged.connect(self._on_canvas_selection_changed)

    def _on_state_changed(self, state: str, message: str) -> None:
        message = gui_wording(message)
        running = state == "running"
        self.cancel_button.setEnabled(running)
        if not running:
            self.progress.setValue(0)
        self.charts.show_state(state, message)
        bar = self.window.statusBar()
        if state == "failed":
            self._failure_note = f"analysis: {message}"
            bar.showMessage(self._failure_note, 10000)
        elif self._failure_note and bar.currentMessage() == self._failure_note:
            bar.clearMessage()  # the edit that fixed it is in; the old complaint must not outlive it
            self._failure_note = ""

    def _on_stale_changed(self, stale: bool) -> None:
        for mark in self.stale_marks.values():
            mark.set_stale(stale)
        self.charts.set_stale(stale)
        legend = getattr(getattr(self.window, "canvas", None), "legend", None)
        if legend is not None:
            legend.set_stale(stale)

    def _on_cleared(self) -> None:
        self.charts.show_empty("compiling the new model…")
        self.op_panel.show_op(None)

    def _on_settings_changed(self, settings: Any) -> None:
        """Keep the toolbar's target box on the analysis target (a file target is added to it)."""
        box = getattr(self.window, "target_box", None)
        if box is None or box.currentData() == settings.target:
            return
        idx = box.findData(settings.target) if settings.target else 0
        if idx < 0:
            box.addItem(Path(settings.target).stem, settings.target)
            idx = box.count() - 1
        box.blockSignals(True)
        box.setCurrentIndex(idx)
        box.blockSignals(False)

    def _on_progress(self, fraction: float, _text: str) -> None:
        self.progress.setValue(int(1000 * max(0.0, min(1.0, fraction))))

    def _on_result_changed(self, result: Any) -> None:
        self.charts.show_result(result, self.controller.comparison)
        self._side_timer.start()

    def _show_side_panels(self) -> None:
        """The stage table and the pass trace, one event-loop turn after the charts start."""
        result = self.controller.current
        if result is None:
            return
        self.stages_panel.show_result(result)
        trace = getattr(self.window, "pass_trace", None)
        if trace is not None and not result.what_if_hardware:
            from engine.export.artifacts import fused_groups

            comp = result.compile
            summary = (f"live analysis: {len(comp.source.nodes)} → {style.count(len(comp.optimized.nodes), 'node')}, "
                       f"{style.count(result.sim.summary()['npu_ops'], 'op')} on the NPU, {result.sim.summary()['cpu_ops']} on the CPU")
            trace.show_trace([r.to_json() for r in comp.optimize_trace], fused_groups(comp), summary)

    def _on_comparison_changed(self, _comparison: Any) -> None:
        if self.controller.current is not None:
            self.charts.show_result(self.controller.current, self.controller.comparison)
            self.charts.set_selected(self.controller.selected)

    # -- selection, both ways ----------------------------------------------------------------------
    def _on_selection_changed(self, ops: list[str], _origin: str) -> None:
        self.charts.set_selected(ops)

    def _on_canvas_selection_changed(self) -> None:
        if self._syncing or self._scene is None:
            return
        try:
            nodes = self._scene.selected_nodes()
        except RuntimeError:  # the scene is being destroyed
            return
        ctl = self.controller
        ops = [op for op in (ctl.op_for_node(n.name) for n in nodes) if op is not None]
        ctl.select_ops(ops, "canvas")

    def select_op(self, op: str) -> None:
        """Select a compiled op everywhere: the charts and its node(s) on the canvas."""
        self.controller.select_ops([op], "chart")
        scene, view = self.window.scene, self.window.view
        if scene is None:
            return
        names = self.controller.nodes_for_op(op)
        items = scene.items_named(names)  # a large graph's items are made on demand
        if not items:
            return
        self._syncing = True
        try:
            view.center_on_item(items[0])
            for it in items[1:]:
                it.setSelected(True)
        finally:
            self._syncing = False


    def wait_for_screenshot(self, timeout: float = 120.0) -> list[str]:
        """Wait for the analysis, draw every chart and show the costliest quantized op (the
        ``--screenshot`` of ``npu-studio gui``); returns what did not finish within ``timeout``
        seconds (an empty list when the picture is complete)."""
        import time

        from PySide6.QtCore import QCoreApplication

        end = time.monotonic() + timeout
        ctl = self.controller
        if not ctl.wait_until_idle(timeout):
            self.charts.flush()
            return ["the analysis"]
        self.compile_panel.raise_()  # the settings the charts come from: target, calibration
        res = ctl.current
        if res is None:
            return []
        self.charts.flush()
        ops = sorted(res.sim.ops, key=lambda o: -o.latency_us)
        q = res.quant

        def shows_both(op: str) -> bool:  # a quantized op whose output has FP32 and quantized values
            node = res.compile.optimized.node_by_name(op)
            out = node.outputs[0] if node is not None and node.outputs else None
            return q is not None and out is not None and out.name in q.model.activations

        pick = next((o.node for o in ops if shows_both(o.node)),
                    next((o.node for o in ops if res.layer_row(o.node) is not None), ops[0].node if ops else None))
        if pick is not None:
            self.select_op(pick)
        panel = self.op_panel

        def pending() -> list[str]:
            return [what for what, busy in (("the analysis", ctl.busy), ("the histogram", panel.histogram_pending),
                                            ("the sustained figures", res.sustained is None)) if busy]

        while time.monotonic() < end and (pending() or self.charts.is_updating):
            QCoreApplication.processEvents()
            time.sleep(0.01)
        self.charts.flush()
        QCoreApplication.processEvents()
        return pending()


def install_analysis(window: QMainWindow) -> AnalysisDock:
    """Add the analysis docks, actions and links to ``window`` (once); returns them."""
    existing = getattr(window, "analysis", None)
    if isinstance(existing, AnalysisDock):
        return existing
    runtime.start_up()  # interpreter settings and the preloaded engine (app/runtime.py), once
    dock = AnalysisDock(window)
    window.analysis = dock  # type: ignore[attr-defined]
    return dock
