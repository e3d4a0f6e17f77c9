"""Tools > Compile (Ctrl+B): the compile the live analysis shows, made the window's "compiled".

Compile used to optimize and place the float graph on its own, while the live analysis
(app/analysis.py) compiles what the CLI's ``compile`` would: quantized for an integer target,
on the calibration set or, without one, on random samples it says it used. The two disagreed
(walkthrough step 09: "0 on the NPU, 6 on the CPU" beside charts of an int8 compile), so with
a target and the analysis installed Compile takes the analysis result for the current graph
(the one shown when it is current, else the next one, compiled now) and shows its pass trace,
placement and fusions. Without a target the window's own optimize job still runs
(app/jobs.py: nothing to place).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject

from app import placement, quality, style
from app.jobs import CompileOutcome


def compile_document(window: Any) -> Any:
    """What Tools > Compile runs for ``window``'s document: an AnalysisCompile with a target
    and the analysis installed, else the float optimize job in the worker process (a ProcessTask); None
    without a document."""
    doc = window.doc
    if doc is None:
        return None
    doc.flush()
    analysis = getattr(window, "analysis", None)
    if analysis is not None and doc.target is not None:
        return AnalysisCompile(window, analysis.controller).start()
    from app import jobs
    from app.worker_process import ProcessTask

    task = ProcessTask(jobs.optimize_and_place_job, doc.graph, doc.graph.version, doc.target, name="compile",
                       graph=doc.graph, graph_version=doc.graph.version)
    task.signals.progress.connect(window._show_progress)
    task.signals.finished.connect(window._on_compile_done)
    task.signals.failed.connect(window._on_task_failed)
    task.signals.cancelled.connect(lambda: doc is window.doc and window.compile())  # edited while copied
    window._show_progress(0.0, "compiling")
    return task.start()


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
            self._fail(f"compile stopped: {message}")

    def _on_progress(self, fraction: float, text: str) -> None:
        if not self.done.is_set():
            self.window._show_progress(fraction, text)

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
        self.setParent(None)  # the window no longer keeps it; whoever waits on ``done`` may
