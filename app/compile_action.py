"""Tools > Compile (Ctrl+B): the compile the live analysis shows, made the window's "compiled".

Compile used to optimize and place the float graph on its own, while the live analysis
(app/analysis.py) compiles what the CLI's ``compile`` would: quantized for an integer target,
on the calibration set or, without one, on random samples it says it used. The two disagreed
(walkthrough step 09: "0 on the NPU, 6 on the CPU" beside charts of an int8 compile), so with
a target and the analysis installed Compile takes the analysis result for the current graph
(the one shown when it is current, else the next one, compiled now) and shows its pass trace,
placement and fusions. Without a target the window's own optimize job still runs
(app/jobs.py: nothing to place).

While a compile runs, the status bar says its stage and how far it is ("compiling: calibrating
3/8 (27%)") beside the progress strip and a Cancel button; Esc (Tools > Cancel Compile) cancels
too. A cancelled compile leaves the window as it was (the previous compile's pass trace and
``window.compiled``) and says "compile cancelled".
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QToolButton

from app import placement, quality, style
from app.jobs import CompileOutcome

CANCELLED = "compile cancelled"


def install(window: Any) -> None:
    """The Cancel button beside the window's progress strip and Tools > Cancel Compile (Esc),
    both live only while a compile runs."""
    window.compile_job = None
    button = QToolButton()
    button.setText("Cancel")
    button.setToolTip("Cancel the compile (Esc)")
    button.setObjectName("CancelCompileButton")
    button.clicked.connect(lambda: cancel_compile(window))
    button.hide()
    window.statusBar().insertPermanentWidget(1, button)  # right of the window's progress strip (the first)
    act = QAction("Cancel Compile", window)
    act.setShortcut(QKeySequence(Qt.Key.Key_Escape))
    act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    act.setEnabled(False)  # Esc belongs to the widgets (a wire being drawn, the find box) otherwise
    act.triggered.connect(lambda _=False: cancel_compile(window))
    window.addAction(act)
    from app.analysis_dock import _menu

    menu = _menu(window, "Tools")
    if menu is not None:
        menu.addAction(act)
    window.cancel_compile_button, window.act_cancel_compile = button, act


def _running(window: Any, job: Any) -> None:
    window.compile_job = job
    live = job is not None
    window.cancel_compile_button.setVisible(live)
    window.act_cancel_compile.setEnabled(live)


def compile_running(window: Any) -> bool:
    """True while Tools > Compile waits for its result."""
    job = getattr(window, "compile_job", None)
    return job is not None and not job.done.is_set()


def cancel_compile(window: Any) -> bool:
    """Stop the running compile (Esc, the Cancel button): the window keeps what it showed."""
    job = getattr(window, "compile_job", None)
    if job is None or job.done.is_set():
        return False
    job.cancel()
    return True


def compile_document(window: Any) -> Any:
    """What Tools > Compile runs for ``window``'s document: an AnalysisCompile with a target
    and the analysis installed, else the float optimize job in the worker process (a
    FloatCompile); None without a document. A compile already running is the one returned."""
    doc = window.doc
    if doc is None:
        return None
    if compile_running(window):
        return window.compile_job
    doc.flush()
    analysis = getattr(window, "analysis", None)
    if analysis is not None and doc.target is not None:
        job: Any = AnalysisCompile(window, analysis.controller)
    else:
        job = FloatCompile(window)
    _running(window, job)
    return job.start()


class FloatCompile:
    """The float optimize job of a document without a target, in the worker process."""

    def __init__(self, window: Any) -> None:
        self.window, self.doc = window, window.doc
        self.done = threading.Event()
        self.outcome: CompileOutcome | None = None
        self.error: str | None = None
        self.task: Any = None
        self._user_cancelled = False

    def start(self) -> FloatCompile:
        from app import jobs
        from app.worker_process import ProcessTask

        doc, window = self.doc, self.window
        task = ProcessTask(jobs.optimize_and_place_job, doc.graph, doc.graph.version, doc.target, name="compile",
                           graph=doc.graph, graph_version=doc.graph.version)
        task.signals.progress.connect(lambda f, text: window._show_progress(f, f"compiling: {text}" if text else ""))
        task.signals.finished.connect(self._on_done)
        task.signals.failed.connect(self._on_failed)
        task.signals.cancelled.connect(self._on_cancelled)
        window._show_progress(0.0, "compiling")
        self.task = task.start()
        return self

    def cancel(self) -> None:
        self._user_cancelled = True
        if self.task is not None:
            self.task.cancel()

    def _end(self) -> None:
        self.done.set()
        if self.window.compile_job is self:
            _running(self.window, None)

    def _on_done(self, outcome: CompileOutcome) -> None:
        self.outcome = outcome
        self._end()
        self.window._on_compile_done(outcome)

    def _on_failed(self, message: str) -> None:
        self.error = message
        self._end()
        self.window._on_task_failed(message)

    def _on_cancelled(self) -> None:
        self._end()
        if self._user_cancelled:
            self.error = CANCELLED
            _say_cancelled(self.window)
        elif self.doc is self.window.doc:
            self.window.compile()  # edited while its graph was copied: compile the edited one


def _say_cancelled(window: Any) -> None:
    window._hide_progress()
    window.statusBar().showMessage(CANCELLED, 10000)


def outcome_of(result: Any) -> CompileOutcome:
    """The CompileOutcome (what Compile shows) of a published AnalysisResult."""
    from engine.export.artifacts import fused_groups

    comp = result.compile
    sim = result.sim
    placed = placement.PlacementOutcome({o.node: o.device for o in sim.ops},
                                        {o.node: o.fallback_reason or "" for o in sim.ops},
                                        list(sim.placement.diagnostics), True)
    fused = fused_groups(comp)
    npu = sum(1 for o in sim.ops if o.device == "npu")
    cpu = len(sim.ops) - npu
    summary = (f"{len(comp.source.nodes)} → {style.count(len(comp.optimized.nodes), 'node')}, {len(fused)} fused; "
               f"{style.count(len(sim.ops), 'op')} on {comp.target.name}"
               f"{' (modified)' if result.what_if_hardware else ''}: {npu} on the NPU, {cpu} on the CPU "
               f"({precision_phrase(result)}, as the analysis shows)")
    return CompileOutcome(comp.optimized, [r.to_json() for r in comp.optimize_trace], fused, placed,
                          list(comp.diagnostics), summary)


def precision_phrase(result: Any) -> str:
    """How the compile ran its ops: "int8, calibrated on random inputs (no calibration set)",
    "int8, calibrated on images/", or the float precision of a float target."""
    q = result.quant
    if q is None:
        return result.compile.precision
    if quality.synthetic(result):
        return f"{q.config.dtype}, calibrated on random inputs (no calibration set)"
    return f"{q.config.dtype}, calibrated on {Path(result.settings.calibration).name}"


class AnalysisCompile(QObject):
    """One Compile request answered by the analysis controller; ``done`` is set when it ended
    (with ``outcome``, or ``error``), as a worker Task's is (``npu-studio gui --screenshot``
    waits on it)."""

    def __init__(self, window: Any, controller: Any) -> None:
        super().__init__(window)
        self.window, self.controller, self.doc = window, controller, window.doc
        self.done = threading.Event()
        self.outcome: CompileOutcome | None = None
        self.error: str | None = None
        ctl = controller
        ctl.result_changed.connect(self._on_result)
        ctl.state_changed.connect(self._on_state)
        ctl.progress.connect(self._on_progress)
        ctl.cleared.connect(self._abandon)

    def start(self) -> AnalysisCompile:
        ctl = self.controller
        res = ctl.current
        if res is not None and not ctl.busy and self._covers(res):
            self._finish(res)  # the analysis already shows this graph compiled with these settings
        else:
            self.window._show_progress(0.0, "compiling")
            if not ctl.busy:
                ctl.compile_now()
            if ctl.state == "failed" and not ctl.busy:
                self._fail(ctl.message)
        return self

    def cancel(self) -> None:
        """Stop the compile this waits for (the analysis keeps its last result) and say so."""
        if self.done.is_set():
            return
        self._end()
        self.controller.cancel()
        self.error = CANCELLED
        _say_cancelled(self.window)

    def _covers(self, result: Any) -> bool:
        ctl = self.controller
        return (self.doc is ctl.doc and result.graph_version == self.doc.graph.version
                and result.settings == ctl.settings)

    def _on_result(self, result: Any) -> None:
        if not self.done.is_set() and not self.controller.busy and self._covers(result):
            self._finish(result)

    def _on_state(self, state: str, message: str) -> None:
        if self.done.is_set():
            return
        if state == "failed":
            self._fail(message)
        elif state == "idle" and not self.controller.busy:
            if message == CANCELLED:  # the analysis's own cancel (its ✕, Tools > Cancel Analysis)
                self._end()
                self.error = CANCELLED
                _say_cancelled(self.window)
            else:
                self._fail(f"compile stopped: {message}")

    def _on_progress(self, fraction: float, text: str) -> None:
        if not self.done.is_set():
            self.window._show_progress(fraction, f"compiling: {text or 'starting'} ({fraction:.0%})")

    def _finish(self, result: Any) -> None:
        self.outcome = outcome_of(result)
        self._end()
        self.window._on_compile_done(self.outcome)

    def _fail(self, message: str) -> None:
        from app.analysis_dock import gui_wording

        self.error = gui_wording(message)
        self._end()
        self.window._on_task_failed(f"compile failed: {self.error}")

    def _abandon(self) -> None:
        if not self.done.is_set():
            self._end()
            self.window._hide_progress()

    def _end(self) -> None:
        self.done.set()
        ctl = self.controller
        for sig, slot in ((ctl.result_changed, self._on_result), (ctl.state_changed, self._on_state),
                          (ctl.progress, self._on_progress), (ctl.cleared, self._abandon)):
            sig.disconnect(slot)
        if getattr(self.window, "compile_job", None) is self:
            _running(self.window, None)
        self.setParent(None)  # the window no longer keeps it; whoever waits on ``done`` may
