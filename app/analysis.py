"""The document-level analysis: a debounced background compile after every graph edit or
setting change, holding the latest result and the one before it.

The controller observes the document's graph (plain engine events), waits ``DEBOUNCE_MS``
after the last one, clones the graph on the GUI thread and compiles the clone in a worker
(app/analysis_jobs.py) with progress and cancel. Only the newest request's result is published
(``result_changed``); a newer request does not cancel the running compile here. The worker
decides (``compile_job``): a request whose compile is already running (an undo, a pin, a node
nothing reads) waits for it instead of compiling again, and a request that needs a compile of
its own stops the older ones. PP-OCRv6 det at 320x320 under load compiled for 130 s, and each
walkthrough edit threw the running compile away, so the cache never held one: Compile waited
for a fresh compile after every edit. The canvas colours are not written here: each result is handed to the
document (``Document.show_compiled``), the one owner of what the canvas shows, which shows the
compiled placement while it belongs to the current graph and the edited graph's otherwise.

What-ifs never edit the graph: hardware changes re-simulate the compiled graph on a modified
target, pin previews simulate extra pins. Applying a pin pushes the editor's SetPinCommand;
the compile that follows is shown against the one before it until the next edit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QTimer, Signal

from app import placement, quality, style
from app.analysis_jobs import (
    AnalysisCache,
    AnalysisRequest,
    AnalysisResult,
    AnalysisSettings,
    calibration_guess,
    compile_job,
    pin_preview_job,
    resimulate_job,
    sustained_job,
)
from app.document import CompiledPlacement
from app.worker_process import ProcessTask
from engine.hw.target import HardwareTarget
from engine.ir.events import GraphEvent, NodeChanged
from engine.quant.data import ImagePreprocess

log = logging.getLogger(__name__)

DEBOUNCE_MS = 150
TYPES_POLL_MS = 40  # a compile due while the document re-infers an edit's types looks again this often
LIVE_NODE_LIMIT = 5000  # above this, edits do not recompile by themselves (F5 does)
SUSTAINED_DELAY_MS = 400  # thermal/stream runs wait until the charts of a result are drawn
STATES = ("idle", "running", "ready", "failed")


class AnalysisController(QObject):
    """See the module docstring."""

    state_changed = Signal(str, str)  # state, message
    progress = Signal(float, str)
    result_changed = Signal(object)  # AnalysisResult
    sustained_changed = Signal(object)  # AnalysisResult with .sustained set
    selection_changed = Signal(object, str)  # compiled op names, origin ("canvas", "chart", ...)
    comparison_changed = Signal(object)  # (before, after) AnalysisResults or None
    pin_preview_ready = Signal(object)  # PinPreview
    settings_changed = Signal(object)  # AnalysisSettings
    hardware_changed = Signal(object)  # HardwareTarget in use (what-if or not)
    cleared = Signal()  # another document: nothing to show until its first compile

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.doc: Any = None
        self.settings = AnalysisSettings()
        self.cache = AnalysisCache()
        self.base_target: HardwareTarget | None = None
        self.hardware: HardwareTarget | None = None  # what-if override of the base target
        self.current: AnalysisResult | None = None
        self.previous: AnalysisResult | None = None
        self.comparison: tuple[AnalysisResult, AnalysisResult] | None = None
        self.selected: list[str] = []
        self.state = "idle"
        self.message = "open a model and choose a target"
        self.last_update_s: float | None = None
        self.enabled = True
        self.calibration_for_next: str | None = None  # used by the next attach (command line --calib)
        self._unsubscribe: Any = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._start_compile)
        self._task: ProcessTask | None = None
        self._superseded: list[ProcessTask] = []  # older compiles left to the worker (see the module docstring)
        self._owner = uuid.uuid4().hex  # this controller's requests, among every window's in the worker
        self._resim: ProcessTask | None = None
        self._resim_next: HardwareTarget | None = None
        self._preview: ProcessTask | None = None
        self._sustained: ProcessTask | None = None
        self._sustained_for: AnalysisResult | None = None
        self._request_id = 0
        self._compare_next = False
        self._dirty_since: float | None = None
        self._sustained_timer = QTimer(self)
        self._sustained_timer.setSingleShot(True)
        self._sustained_timer.setInterval(SUSTAINED_DELAY_MS)
        self._sustained_timer.timeout.connect(self._run_sustained)

    # -- the document ------------------------------------------------------------------------
    def attach(self, doc: Any) -> None:
        """Follow ``doc`` (None: nothing): read its settings, compile soon."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.doc is not None:
            with contextlib.suppress(RuntimeError, TypeError):
                self.doc.analysis_changed.disconnect(self._on_doc_analysis_changed)
        self.cancel()
        self.doc = doc
        self.current = self.previous = self.comparison = None
        self.selected = []
        self.hardware = None
        self.cleared.emit()
        if doc is None:
            self._set_state("idle", "open a model")
            return
        self.enabled = True
        self._unsubscribe = doc.graph.events.subscribe(self._on_graph_event)
        doc.analysis_changed.connect(self._on_doc_analysis_changed)
        self.settings = self._settings_from_project(doc)
        self._resolve_target()
        self.settings_changed.emit(self.settings)
        self.hardware_changed.emit(self.target)
        self.schedule(0)

    def _settings_from_project(self, doc: Any) -> AnalysisSettings:
        s = dataclasses.replace(self.settings, target=doc.target_name or None)
        q = dict(getattr(doc.project, "quantization", None) or {})
        fields = {k: q[k] for k in ("method", "per_channel", "symmetric", "dtype", "percentile", "reduce_range")
                  if k in q}
        quant = dataclasses.replace(s.quant, **fields, precision=dict(q.get("precision") or {}),
                                    method_overrides=dict(q.get("method_overrides") or {}))
        calib, self.calibration_for_next = self.calibration_for_next, None
        calib = calib or q.get("calibration") or calibration_guess(doc.model_path)
        disabled = tuple(k for k, on in (getattr(doc.project, "passes", None) or {}).items() if on is False)
        return dataclasses.replace(s, quant=quant, calibration=calib, disabled_passes=disabled or s.disabled_passes,
                                   analysis_samples=int(q.get("analysis_samples", s.analysis_samples)))

    def _save_to_project(self) -> None:
        doc = self.doc
        if doc is None or getattr(doc, "project", None) is None:
            return
        s, q = self.settings, self.settings.quant
        doc.project.quantization = {
            "method": q.method, "per_channel": q.per_channel, "symmetric": q.symmetric, "dtype": q.dtype,
            "percentile": q.percentile, "reduce_range": q.reduce_range,
            "calibration": str(Path(s.calibration).resolve()) if s.calibration else None,
            "precision": dict(sorted(q.precision.items())), "method_overrides": dict(sorted(q.method_overrides.items())),
            "analysis_samples": s.analysis_samples}
        doc.project.passes = dict.fromkeys(s.disabled_passes, False)

    def _on_graph_event(self, ev: GraphEvent) -> None:
        if self.doc is not None and len(self.doc.graph.nodes) > LIVE_NODE_LIMIT:
            if self.state != "idle" or "large graph" not in self.message:
                self._set_state("idle", f"large graph ({style.count(len(self.doc.graph.nodes), 'node')}): edits are analysed on "
                                        "request (Compile, or F5)")
            return
        if self._dirty_since is None:
            self._dirty_since = time.perf_counter()
        if isinstance(ev, NodeChanged) and getattr(ev, "key", "") == "meta:pin":
            self._compare_next = True
        else:
            self._compare_next = False
            self._clear_comparison()
        self.schedule()

    def _on_doc_analysis_changed(self, _names: object = None) -> None:
        if self.doc is None:
            return
        if (self.doc.target_name or None) != (self.settings.target or None):
            self.set_target(self.doc.target_name)

    # -- settings ----------------------------------------------------------------------------
    @property
    def target(self) -> HardwareTarget | None:
        """The target compiles and simulations use (the what-if hardware when set)."""
        return self.hardware if self.hardware is not None else self.base_target

    def _resolve_target(self) -> None:
        try:
            self.base_target = placement.resolve_target(self.settings.target)
        except (ValueError, OSError) as exc:
            self.base_target = None
            self._set_state("failed", str(exc).splitlines()[0])

    def update_settings(self, **changes: Any) -> None:
        """Change settings (AnalysisSettings fields) and recompile soon."""
        new = dataclasses.replace(self.settings, **changes)
        if new == self.settings:
            return
        self.settings = new
        if "target" in changes:
            self.hardware = None
            self._resolve_target()
            self.hardware_changed.emit(self.target)
            if self.doc is not None and (self.doc.target_name or None) != (new.target or None):
                self.doc.set_target(new.target)
        self._save_to_project()
        self._clear_comparison()
        self.settings_changed.emit(self.settings)
        self.schedule()

    def set_target(self, name: str | None) -> None:
        """Choose the target (bundled name or YAML path)."""
        self.update_settings(target=name or None)

    def set_calibration(self, path: str | None, preprocess: ImagePreprocess | None = None) -> None:
        """Choose calibration data (None: synthetic samples, with a warning)."""
        self.update_settings(calibration=path or None, preprocess=preprocess or self.settings.preprocess)

    def set_quant(self, **changes: Any) -> None:
        """Change QuantConfig fields (method, per_channel, symmetric, dtype, percentile ...)."""
        self.update_settings(quant=dataclasses.replace(self.settings.quant, **changes))

    def set_tensor_method(self, tensor: str, method: str | None) -> None:
        """Calibrate one tensor with another method (None: the global method)."""
        overrides = dict(self.settings.quant.method_overrides)
        if method is None or method == self.settings.quant.method:
            overrides.pop(tensor, None)
        else:
            overrides[tensor] = method
        self.set_quant(method_overrides=overrides)

    def set_node_precision(self, node: str, precision: str | None) -> None:
        """Run one node at another precision (None: the default)."""
        prec = dict(self.settings.quant.precision)
        if precision is None:
            prec.pop(node, None)
        else:
            prec[node] = precision
        self.set_quant(precision=prec)

    def set_pass_enabled(self, name: str, enabled: bool) -> None:
        """Switch an optimizer pass on or off."""
        disabled = [p for p in self.settings.disabled_passes if p != name]
        if not enabled:
            disabled.append(name)
        self.update_settings(disabled_passes=tuple(sorted(disabled)))

    # -- compiling ---------------------------------------------------------------------------
    def schedule(self, delay_ms: int | None = None) -> None:
        """Compile after ``delay_ms`` (default: the debounce delay) of quiet."""
        if not self.enabled:
            return
        self._timer.start(DEBOUNCE_MS if delay_ms is None else delay_ms)

    def compile_now(self) -> None:
        """Start a compile now (skipping the debounce)."""
        self._timer.stop()
        self._start_compile()

    def _start_compile(self) -> None:
        doc = self.doc
        if doc is None:
            return
        if doc.types_pending:  # compile the edit's types, not the copy's of before it: look again soon
            self._timer.start(TYPES_POLL_MS)
            return
        if getattr(doc, "analysis_in_worker", False):  # the worker places the graph as read: after that
            self._timer.start(TYPES_POLL_MS)
            return
        target = self.target
        if target is None:
            if self.state != "failed":
                self._set_state("idle", "choose a hardware target to compile for")
            return
        if self._task is not None:
            self._superseded.append(self._task)  # its result is no longer shown; the worker may still need it
            self._task = None
        self._superseded = [t for t in self._superseded if not t.done.is_set()]
        self._request_id += 1
        pins = {n.name: n.meta["pin"] for n in doc.graph.nodes if n.meta.get("pin") in placement.DEVICES}
        # The document's graph itself: a sender thread writes it for the worker process as it was at
        # this version (clone_unchanged), not the GUI thread.
        req = AnalysisRequest(self._request_id, doc.graph.version, doc.graph, self.settings, target,
                              pins, what_if_hardware=self.hardware is not None, owner=self._owner)
        task = ProcessTask(compile_job, req, self.cache, name="analysis", graph=doc.graph, graph_version=doc.graph.version)
        task.signals.progress.connect(self._on_compile_progress)
        task.signals.finished.connect(self._on_compile_finished)
        task.signals.failed.connect(self._on_compile_failed)
        task.signals.cancelled.connect(self._on_compile_cancelled)
        self._task = task.start()
        if self._dirty_since is None:
            self._dirty_since = time.perf_counter()
        self._set_state("running", "compiling")

    def _is_stale(self) -> bool:
        """True in a handler of a compile that is no longer the newest one (superseded, cancelled)."""
        return self._task is None or self.sender() is not self._task.signals

    def _on_compile_progress(self, fraction: float, text: str) -> None:
        if not self._is_stale():
            self.progress.emit(fraction, text)

    def _on_compile_finished(self, result: AnalysisResult) -> None:
        if self._is_stale():
            return
        self._task = None
        self._publish(result)

    def _on_compile_failed(self, message: str) -> None:
        if self._is_stale():
            return
        self._task = None
        self._dirty_since = None
        if self.doc is not None:
            self.doc.compile_failed(message)
        self._set_state("failed", message)

    def _on_compile_cancelled(self) -> None:
        if self._is_stale():
            return
        self._task = None
        if self.state == "running":
            self._set_state("idle", "compile cancelled")

    def cancel(self) -> None:
        """Stop the running compile, or the one due (the last result stays)."""
        due = self._timer.isActive()
        self._timer.stop()
        self._sustained_timer.stop()
        for task in (self._task, *self._superseded, self._resim, self._preview, self._sustained):
            if task is not None:
                task.cancel()
        self._task = None
        self._superseded = []
        if self.state == "running" or due:
            self._set_state("idle", "compile cancelled")

    def _publish(self, result: AnalysisResult) -> None:
        if self._dirty_since is not None:
            self.last_update_s = time.perf_counter() - self._dirty_since
        self._dirty_since = None
        self.previous, self.current = self.current, result
        if self._compare_next and self.previous is not None:
            # shown as "after the pin" only when nothing else changed (settings_changed_between)
            self.comparison = (self.previous, result)
            self._compare_next = False
            self.comparison_changed.emit(self.comparison)
        self._show_on_canvas(result)
        self.result_changed.emit(result)
        how = "cached" if result.cached else f"{result.seconds:.2f} s"
        poor = quality.low_sqnr_warnings(result)
        note = f" — ⚠ {poor[0].message}" if poor else ""
        self._set_state("ready", f"{result.latency_us / 1000:.3f} ms simulated on {result.compile.target.name} "
                                 f"({how}){note}")
        self._start_sustained(result)

    def _set_state(self, state: str, message: str) -> None:
        self.state, self.message = state, message
        self.state_changed.emit(state, message)

    def _clear_comparison(self) -> None:
        if self.comparison is not None:
            self.comparison = None
            self.comparison_changed.emit(None)

    def shutdown(self, timeout: float = 3.0) -> None:
        """Cancel everything and wait (bounded) for running jobs, before the window goes away."""
        tasks = [t for t in (self._task, *self._superseded, self._resim, self._preview, self._sustained)
                 if t is not None]
        self.cancel()
        self.enabled = False
        end = time.monotonic() + timeout
        for t in tasks:
            t.done.wait(max(0.0, end - time.monotonic()))

    @property
    def compiles_started(self) -> int:
        """How many compiles this controller started (re-simulations are not compiles)."""
        return self._request_id

    @property
    def busy(self) -> bool:
        """True while a compile is pending or running."""
        return self._timer.isActive() or self._task is not None

    def wait_until_idle(self, timeout: float = 60.0) -> bool:
        """Process events until no compile is pending or running (tests, screenshots)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            QCoreApplication.processEvents()
            if not self.busy and self._resim is None:
                return True
            time.sleep(0.005)
        return False

    # -- sustained figures ---------------------------------------------------------------------
    def _start_sustained(self, result: AnalysisResult) -> None:
        """Thermal and stream runs (pure-Python loops) start once the charts are drawn."""
        if self._sustained is not None:
            self._sustained.cancel()
            self._sustained = None
        self._sustained_for = result
        self._sustained_timer.start()

    def _run_sustained(self) -> None:
        result = self._sustained_for
        if result is None or result is not self.current:
            return
        task = ProcessTask(sustained_job, result.sim, name="sustained")
        task.signals.finished.connect(self._on_sustained)
        self._sustained = task.start()

    def _on_sustained(self, sustained: Any) -> None:
        result = self._sustained_for
        self._sustained = None
        if result is None:
            return
        result.sustained = sustained
        if result is self.current:
            self.sustained_changed.emit(result)

    # -- hardware what-if --------------------------------------------------------------------
    def set_hardware(self, target: HardwareTarget | None) -> None:
        """Simulate the compiled graph on a modified target (None: back to the chosen one)."""
        self.hardware = target
        self.hardware_changed.emit(self.target)
        if self.current is None or self.target is None:
            self.schedule()
            return
        self._resim_next = self.target
        if self._resim is None:
            self._start_resim()

    def _start_resim(self) -> None:
        target, self._resim_next = self._resim_next, None
        if target is None or self.current is None:
            self._resim = None
            return
        task = ProcessTask(resimulate_job, self.current, target, self.current.request_id, name="re-simulate")
        task.signals.finished.connect(self._on_resim_done)
        task.signals.failed.connect(self._on_resim_failed)
        task.signals.cancelled.connect(self._on_resim_failed)
        self._resim = task.start()

    def _on_resim_done(self, result: AnalysisResult) -> None:
        self._resim = None
        result.what_if_hardware = self.hardware is not None
        if self._resim_next is not None:
            self._start_resim()
            return
        if self.current is not None and result.request_id == self.current.request_id and not self.busy:
            self.current = result
            self._show_on_canvas(result)
            self.result_changed.emit(result)
            self._set_state("ready", f"{result.latency_us / 1000:.3f} ms simulated on "
                                     f"{'modified ' if result.what_if_hardware else ''}{result.compile.target.name}")
            self._start_sustained(result)

    def _on_resim_failed(self, message: str = "") -> None:
        self._resim = None
        if message:
            self._set_state("failed", message)
        if self._resim_next is not None:
            self._start_resim()

    # -- placement what-if ---------------------------------------------------------------------
    def preview_pin(self, ops: list[str], device: str | None) -> ProcessTask | None:
        """Predict what pinning ``ops`` to ``device`` would change (pin_preview_ready)."""
        if self.current is None:
            return None
        if self._preview is not None:
            self._preview.cancel()
        task = ProcessTask(pin_preview_job, self.current, list(ops), device, name="what-if")
        task.signals.finished.connect(self._on_preview_done)
        task.signals.failed.connect(self._on_preview_failed)
        self._preview = task.start()
        return task

    def _on_preview_failed(self, message: str) -> None:
        self._preview = None
        self._set_state(self.state, message)

    def _on_preview_done(self, preview: Any) -> None:
        self._preview = None
        self.pin_preview_ready.emit(preview)

    def apply_pin(self, ops: list[str], device: str | None) -> bool:
        """Pin the original nodes of ``ops`` with the editor's SetPinCommand (one undo step)."""
        from app.commands import SetPinCommand

        doc, res = self.doc, self.current
        if doc is None or res is None:
            return False
        names: list[str] = []
        for op in ops:
            names.extend(res.sources_of_op.get(op) or [op])
        nodes = [n for n in (doc.graph.node_by_name(x) for x in dict.fromkeys(names))
                 if n is not None and n.meta.get("pin") != device]
        if not nodes:
            return False
        if len(nodes) == 1:
            doc.push(SetPinCommand(doc, nodes[0], device))
        else:
            doc.undo_stack.beginMacro(f"Pin {style.count(len(nodes), 'node')} to {device.upper()}" if device else "Unpin nodes")
            for n in nodes:
                doc.push(SetPinCommand(doc, n, device))
            doc.undo_stack.endMacro()
        self._compare_next = True
        return True

    # -- selection -----------------------------------------------------------------------------
    def op_for_node(self, name: str) -> str | None:
        """The compiled op a node of the canvas belongs to (its own name when compiled as is)."""
        res = self.current
        if res is None:
            return None
        if res.op(name) is not None:
            return name
        return res.op_of_source.get(name)

    def nodes_for_op(self, op: str) -> list[str]:
        """The names a compiled op has on the canvas (itself, or the nodes fused into it)."""
        res = self.current
        if res is None:
            return [op]
        return [op, *[s for s in res.sources_of_op.get(op, []) if s != op]]

    def select_ops(self, ops: list[str], origin: str = "") -> None:
        """Make ``ops`` the analysis selection (charts highlight them)."""
        ops = list(dict.fromkeys(o for o in ops if o))
        if ops == self.selected:
            return
        self.selected = ops
        self.selection_changed.emit(ops, origin)

    # -- canvas colours --------------------------------------------------------------------------
    def _show_on_canvas(self, result: AnalysisResult) -> None:
        """Hand the compiled placement of every node of the edited graph to the document."""
        doc = self.doc
        if doc is None or not self.enabled:
            return
        doc.show_compiled(compiled_placement(result, doc.graph))


def settings_changed_between(before: AnalysisResult, after: AnalysisResult) -> list[str]:
    """What else differs between two compiles of a comparison besides the pins: the settings
    whose change moves the figures too (empty: the pins alone made the difference)."""
    a, b = before.settings, after.settings
    out = []
    if a.target != b.target or before.compile.target != after.compile.target \
            or before.what_if_hardware != after.what_if_hardware:
        out.append("the hardware")
    if a.calibration != b.calibration or (a.calibration and a.preprocess != b.preprocess):
        out.append("the calibration data")
    if a.quant != b.quant or (before.quant is None) != (after.quant is None) or a.analysis_samples != b.analysis_samples:
        out.append("the quantization")
    if a.disabled_passes != b.disabled_passes:
        out.append("the optimizer passes")
    return out


def compiled_placement(result: AnalysisResult, graph: Any) -> CompiledPlacement:
    """Each node of ``graph`` placed as the op it was compiled into (a node the optimizer removed
    does not run: "removed", which the legend counts apart from nodes not placed)."""
    ops = {o.node: o for o in result.sim.ops}
    device: dict[str, str] = {}
    reason: dict[str, str] = {}
    for n in graph.nodes:
        op = result.op_of_source.get(n.name)
        if op is not None:
            rec = ops[op]
            why = rec.fallback_reason or ""
            if op != n.name:
                why = f"fused into {op}" + (f"; {why}" if why else "")
            device[n.name], reason[n.name] = rec.device, why
        else:
            device[n.name] = "removed"
            reason[n.name] = "removed by the optimizer (folded or eliminated): it does not run"
    return CompiledPlacement(result.graph_version, device, reason,
                             [*quality.low_sqnr_warnings(result),
                              *(d for d in result.compile.diagnostics if d.code != quality.LOW_SQNR),
                              *result.sim.placement.diagnostics],
                             placement.fallback_of_result(result).ops)
