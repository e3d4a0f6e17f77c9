"""File -> Export compiled...: the bundle ``npu-studio compile`` writes, for the document's graph
and the analysis settings (target, calibration, quantization, passes, pins).

The export runs the engine's own compile driver (``engine.compiler.compile_model``) and bundle
writer (``engine.export.artifacts.write_bundle``) in the worker process (app/worker_process.py), with progress and cancel, so the
files and their manifest hashes are exactly those of the command line with the same settings.
When it is done it offers to open the report."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressDialog, QWidget

from app import style
from app.help import open_local_file
from app.worker_process import ProcessTask
from app.workers import TaskControl

log = logging.getLogger(__name__)


def export_job(control: TaskControl, graph: Any, target: Any, calibration: str | None, preprocess: Any,
               options: Any, outdir: str, force: bool) -> dict[str, Any]:
    """Compile ``graph`` as the CLI does and write the bundle; returns the file hashes."""
    from engine.compiler import compile_model
    from engine.export.artifacts import check_outdir, write_bundle
    from engine.quant.data import load_calibration

    out = Path(outdir)
    check_outdir(out, force)
    control.progress(0.02, "loading calibration data")
    data = load_calibration(calibration, graph, preprocess) if calibration else None
    stages = {"optimize": 0.05, "calibrate": 0.1, "analyze": 0.5, "simulate": 0.85}

    def progress(stage: str, done: int, total: int) -> None:
        base = stages.get(stage, 0.0)
        nxt = min([v for v in stages.values() if v > base], default=0.9)
        control.progress(base + (nxt - base) * (done / total if total else 1.0), stage)

    result = compile_model(graph, target, data, options, progress=progress, cancel=control.cancelled)
    control.check()
    control.progress(0.92, "writing the bundle")
    hashes = write_bundle(result, out, force=force)
    control.progress(1.0, "done")
    return {"outdir": str(out), "files": hashes, "latency_us": float(result.sim.latency_us)}


class ExportController(QObject):
    """Runs exports for an AnalysisController's document and settings."""

    finished = Signal(object)  # {"outdir", "files", "latency_us"}
    failed = Signal(str)
    message = Signal(str)  # something to tell the user (e.g. where the report is)

    def __init__(self, controller: Any, parent_widget: QWidget | None = None) -> None:
        super().__init__(parent_widget)
        self.controller = controller
        self.parent_widget = parent_widget
        self.task: ProcessTask | None = None
        self._dialog: QProgressDialog | None = None
        self.ask_open_report = self._ask_open_report

    def export_to(self, outdir: str | Path, force: bool = False, show_progress: bool = True) -> ProcessTask | None:
        """Start exporting to ``outdir`` (the signals report the end)."""
        ctl = self.controller
        doc = ctl.doc
        if doc is None or ctl.target is None:
            self.failed.emit("open a model and choose a target first")
            return None
        doc.flush()
        from app.analysis_jobs import effective_pins

        pins = {n.name: n.meta["pin"] for n in doc.graph.nodes if n.meta.get("pin") in ("npu", "cpu")}
        graph = doc.graph  # written for the worker process as it is now, off the GUI thread
        s = ctl.settings
        cur = ctl.current
        valid = cur.compile.optimized if cur is not None else graph
        options = s.options(effective_pins(valid, pins) if cur is not None else pins)
        target = ctl.hardware if ctl.hardware is not None else s.target
        task = ProcessTask(export_job, graph, target, s.calibration, s.preprocess, options, str(outdir), force,
                           name="export", graph=graph, graph_version=graph.version)
        task.signals.finished.connect(self._on_finished)
        task.signals.failed.connect(self._on_failed)
        task.signals.cancelled.connect(lambda: self._on_failed("export cancelled"))
        if show_progress and self.parent_widget is not None:
            dlg = QProgressDialog("Compiling and writing the bundle…", "Cancel", 0, 1000, self.parent_widget)
            dlg.setWindowTitle("Export compiled")
            dlg.setWindowModality(Qt.WindowModality.WindowModal)
            dlg.setMinimumDuration(300)
            dlg.canceled.connect(task.cancel)
            task.signals.progress.connect(lambda f, t: (dlg.setValue(int(1000 * f)), dlg.setLabelText(t or "")))
            self._dialog = dlg
        self.task = task.start()
        return self.task

    def _close_dialog(self) -> None:
        if self._dialog is not None:
            self._dialog.reset()
            self._dialog.deleteLater()
            self._dialog = None

    def _on_finished(self, info: dict[str, Any]) -> None:
        self.task = None
        self._close_dialog()
        self.finished.emit(info)

    def _on_failed(self, message: str) -> None:
        self.task = None
        self._close_dialog()
        self.failed.emit(message)

    # -- the menu action -----------------------------------------------------------------------
    def export_dialog(self) -> None:
        """Ask for a folder, export there, then offer to open the report."""
        ctl = self.controller
        doc = ctl.doc
        if doc is None:
            return
        stem = (doc.model_path or Path("model")).stem
        start = str((doc.model_path.parent if doc.model_path else Path.home()) / f"{stem}-{ctl.settings.target or 'bundle'}")
        path, _ = QFileDialog.getSaveFileName(self.parent_widget, "Export compiled bundle (a new folder)", start,
                                              "Folder (*)")
        if not path:
            return
        out = Path(path)
        force = False
        if out.exists() and any(out.iterdir()):
            answer = QMessageBox.question(self.parent_widget, "Replace folder?",
                                          f"{out} is not empty. Replace its contents with the bundle?")
            if answer != QMessageBox.StandardButton.Yes:
                return
            force = True
        self.finished.connect(self._on_dialog_export_done, Qt.ConnectionType.SingleShotConnection)
        self.failed.connect(self._on_dialog_export_failed, Qt.ConnectionType.SingleShotConnection)
        self.export_to(out, force)

    def _on_dialog_export_done(self, info: dict[str, Any]) -> None:
        with contextlib.suppress(RuntimeError, TypeError):
            self.failed.disconnect(self._on_dialog_export_failed)
        report = Path(info["outdir"]) / "report.html"
        if self.ask_open_report(info):
            open_local_file(report, self._tell)

    def _tell(self, message: str) -> None:
        """Say something the user must see (the report could not be opened: where it is)."""
        w = self.parent_widget
        if w is not None and hasattr(w, "statusBar"):
            w.statusBar().showMessage(message, 30000)
        self.message.emit(message)

    def _on_dialog_export_failed(self, message: str) -> None:
        with contextlib.suppress(RuntimeError, TypeError):
            self.finished.disconnect(self._on_dialog_export_done)
        QMessageBox.warning(self.parent_widget, "Export compiled", message)

    def _ask_open_report(self, info: dict[str, Any]) -> bool:
        answer = QMessageBox.question(
            self.parent_widget, "Export compiled",
            f"Wrote {style.count(len(info['files']), 'file')} to {info['outdir']} (simulated latency "
            f"{info['latency_us'] / 1000:.3f} ms). Open the report?")
        return answer == QMessageBox.StandardButton.Yes
