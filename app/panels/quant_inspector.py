"""The op analysis panel: what the compile made of the op picked on the canvas or in a chart.

Placement and its reason, cost and bound; the what-if of pinning it (predicted latency change
and the transfers it adds or removes, before anything is applied); its quantization
parameters (scale and zero point, per-channel weight scales as a bar chart); its error
against FP32 (cosine, max abs error, SQNR; accumulated and isolated, the figures of the
quantization report); and a histogram of FP32 vs quantized values with the MinMax /
Percentile / Entropy ranges drawn, plus a control that switches this tensor's calibration
method (the analysis recompiles and re-simulates)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import quality, style
from app.analysis_jobs import THRESHOLD_METHODS, op_tensors, tensor_view_job
from app.panels.chart_base import (
    CPU_LIGHT,
    GHOST,
    NPU_LIGHT,
    TRANSFER,
    device_color,
    fmt_us,
    make_plot,
    short_name,
)
from app.worker_process import ProcessTask
from engine.quant.observers import METHODS

_THRESHOLD_PENS = {"minmax": Qt.PenStyle.SolidLine, "percentile": Qt.PenStyle.DashLine,
                   "entropy": Qt.PenStyle.DotLine}
_THRESHOLD_COLORS = {"minmax": "#5d6575", "percentile": "#7a5cc7", "entropy": "#d23c3c"}
FIGURE_KEYS = ("cosine", "max_abs_err", "sqnr_db")
VIEW_DELAY_MS = 200


def _fmt_params(qp) -> tuple[str, str]:
    sc = np.asarray(qp.scale, np.float64)
    zp = np.asarray(qp.zero_point, np.int64)
    if sc.ndim:
        return (f"per channel ({sc.size}): {sc.min():.4g} … {sc.max():.4g}",
                f"{int(zp.min())} … {int(zp.max())}" if zp.size else "")
    return f"{float(sc):.6g}", str(int(zp))


class QuantInspectorPanel(QDockWidget):
    """See the module docstring."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Op analysis", parent)
        self.setObjectName("QuantInspectorPanel")
        self.controller: Any = None
        self.op: str | None = None
        self.figures: dict[str, dict[str, Any]] = {}
        self.view = None  # the TensorView on the histogram
        self._view_for: Any = None  # the result the running histogram job reads
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.setInterval(0)
        self._refresh_timer.timeout.connect(self._refresh)
        self._view_timer = QTimer(self)
        self._view_timer.setSingleShot(True)
        self._view_timer.setInterval(VIEW_DELAY_MS)
        self._view_timer.timeout.connect(self._start_view)
        self._task: ProcessTask | None = None
        self.last_preview: Any = None
        self._applied_at: tuple | None = None  # (undo stack, its index) after Apply pin
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(6, 6, 6, 6)
        self.header = QLabel("Pick an op on the canvas or in a chart.")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.header)
        errors, hist, quant, whatif = (self._build_errors(), self._build_histogram(), self._build_quant(),
                                       self._build_whatif())
        for box in (errors, hist, whatif, quant):
            lay.addWidget(box)
        self._quant_boxes = (errors, hist)  # hidden when the target runs float (no quantization)
        lay.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        self.setWidget(scroll)
        self._set_enabled(False)

    # -- layout ----------------------------------------------------------------------------------
    def _build_whatif(self) -> QGroupBox:
        box = QGroupBox("What if it were pinned?")
        lay = QVBoxLayout(box)
        row = QHBoxLayout()
        self.pin_buttons = {}
        for dev, text in (("npu", "Pin to NPU"), ("cpu", "Pin to CPU"), (None, "Unpin")):
            b = QPushButton(text)
            b.clicked.connect(lambda _=False, d=dev: self._on_preview_requested(d))
            row.addWidget(b)
            self.pin_buttons[dev] = b
        lay.addLayout(row)
        self.preview = QLabel("Predicts the latency change and the transfers added or removed, before applying.")
        self.preview.setWordWrap(True)
        self.preview.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.preview)
        row = QHBoxLayout()
        self.apply_button = QPushButton("Apply pin")
        self.apply_button.setEnabled(False)
        self.apply_button.clicked.connect(self._on_apply_clicked)
        row.addWidget(self.apply_button)
        row.addStretch(1)
        lay.addLayout(row)
        return box

    def _build_quant(self) -> QGroupBox:
        box = QGroupBox("Quantization parameters")
        lay = QVBoxLayout(box)
        self.params = QLabel()
        self.params.setWordWrap(True)
        self.params.setTextFormat(Qt.TextFormat.RichText)
        self.params.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.params)
        self.channel_plot = make_plot()
        self.channel_plot.setFixedHeight(120)
        ci = self.channel_plot.getPlotItem()
        ci.setLabel("bottom", "output channel")
        ci.setLabel("left", "scale")
        lay.addWidget(self.channel_plot)
        return box

    def _build_errors(self) -> QGroupBox:
        box = QGroupBox("Error against FP32")
        grid = QGridLayout(box)
        self.figure_labels: dict[tuple[str, str], QLabel] = {}
        for c, text in enumerate(("", "cosine", "max abs error", "SQNR (dB)")):
            h = QLabel(f"<b>{text}</b>")
            grid.addWidget(h, 0, c)
        for r, kind in enumerate(("accumulated", "isolated"), start=1):
            grid.addWidget(QLabel(kind), r, 0)
            for c, key in enumerate(FIGURE_KEYS, start=1):
                lab = QLabel("–")
                lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                grid.addWidget(lab, r, c)
                self.figure_labels[(kind, key)] = lab
        self.errors_note = QLabel()
        self.errors_note.setWordWrap(True)
        grid.addWidget(self.errors_note, 3, 0, 1, 4)
        return box

    def _build_histogram(self) -> QGroupBox:
        box = QGroupBox("Values: FP32 vs quantized")
        lay = QVBoxLayout(box)
        row = QHBoxLayout()
        self.tensor_box = QComboBox()
        self.tensor_box.currentIndexChanged.connect(self._on_tensor_changed)
        self.method_box = QComboBox()
        for m in METHODS:
            self.method_box.addItem(m, m)
        self.method_box.activated.connect(self._on_method_chosen)
        row.addWidget(QLabel("Tensor"))
        row.addWidget(self.tensor_box, 1)
        row.addWidget(QLabel("Method"))
        row.addWidget(self.method_box)
        lay.addLayout(row)
        self.hist = make_plot()
        self.hist.setMinimumHeight(180)
        hi = self.hist.getPlotItem()
        hi.setLabel("bottom", "value")
        # Counts are never negative: the wheel zooms the value axis only, the count axis follows
        # the data; the "A" button (pyqtgraph's auto-range) brings the value axis back.
        hi.getViewBox().setMouseEnabled(x=True, y=False)
        hi.getViewBox().setLimits(yMin=0)
        hi.showButtons()
        lay.addWidget(self.hist)
        self.hist_note = QLabel()
        self.hist_note.setWordWrap(True)
        lay.addWidget(self.hist_note)
        return box

    def _set_enabled(self, on: bool) -> None:
        for b in self.pin_buttons.values():
            b.setEnabled(on)
        self.tensor_box.setEnabled(on)
        self.method_box.setEnabled(on and self.tensor_box.count() > 0)

    # -- following the analysis ------------------------------------------------------------------
    def set_controller(self, controller: Any) -> None:
        """Follow an AnalysisController."""
        self.controller = controller
        controller.result_changed.connect(self._on_result_changed)
        controller.pin_preview_ready.connect(self._on_preview_ready)
        controller.selection_changed.connect(self._on_selection_changed)

    def _on_selection_changed(self, ops: list[str], _origin: str) -> None:
        self.show_op(ops[0] if ops else None)

    def _on_result_changed(self, _result: Any) -> None:
        self.apply_button.setEnabled(False)
        self._refresh_timer.start()  # next event-loop turn: after the charts' first step

    def _refresh(self) -> None:
        self.show_op(self.op, keep_tensor=True)

    def show_op(self, op: str | None, keep_tensor: bool = False) -> None:
        """Show what the current result says about the compiled op ``op``."""
        ctl = self.controller
        res = ctl.current if ctl is not None else None
        rec = res.op(op) if res is not None and op else None
        prev_tensor = self.tensor_box.currentData() if keep_tensor else None
        if op != self.op:
            self.preview.setText("Predicts the latency change and the transfers added or removed, before applying.")
            self.apply_button.setEnabled(False)
        self.op = op if rec is not None else None
        self.figures = {}
        if rec is None:
            self.header.setText("Pick an op on the canvas or in a chart." if res is not None else
                                "The analysis has no result yet.")
            self._set_enabled(False)
            self._show_quant(None, None)
            return
        self._show_header(res, rec)
        self._show_quant(res, rec)
        self._set_enabled(True)
        tensors = op_tensors(res, rec.node)
        self.tensor_box.blockSignals(True)
        self.tensor_box.clear()
        for t, role in tensors:
            self.tensor_box.addItem(f"{role}: {t}", t)
            self.tensor_box.setItemData(self.tensor_box.count() - 1, role, Qt.ItemDataRole.UserRole + 1)
        idx = self.tensor_box.findData(prev_tensor) if prev_tensor else -1
        if idx < 0:
            idx = next((i for i, (_, r) in enumerate(tensors) if r == "output"), 0 if tensors else -1)
        self.tensor_box.setCurrentIndex(idx)
        self.tensor_box.blockSignals(False)
        self.method_box.setEnabled(bool(tensors))
        self._on_tensor_changed()

    def _show_header(self, res: Any, rec: Any) -> None:
        c = rec.cost
        color = device_color(rec.device).name()
        fused = [s for s in res.sources_of_op.get(rec.node, []) if s != rec.node]
        html = (f"<b style='font-size:11pt'>{short_name(rec.node, 40)}</b><br>{rec.op_type} on the "
                f"<b style='color:{color}'>{rec.device.upper()}</b> · {fmt_us(rec.latency_us)}, {rec.bound}-bound "
                f"(compute {fmt_us(c.compute_us)}, memory {fmt_us(c.memory_us)}, overhead {fmt_us(c.overhead_us)})")
        if rec.fallback_reason:
            html += f"<br><span style='color:{color}'>Why the CPU: {rec.fallback_reason}</span>"
        if fused:
            html += f"<br>Fused from {len(fused) + 1} ops: " + ", ".join(short_name(x, 28) for x in fused[:2]) + \
                    (f" and {len(fused) - 2} more" if len(fused) > 2 else "")
        pin = res.compile.options.pins.get(rec.node)
        if pin:
            html += f"<br>Pinned to the {pin.upper()}."
        self.header.setText(html)

    def _show_quant(self, res: Any, rec: Any) -> None:
        ci = self.channel_plot.getPlotItem()
        ci.clear()
        self.channel_plot.setVisible(False)
        for lab in self.figure_labels.values():
            lab.setText("–")
        q = res.quant if res is not None else None
        for box in self._quant_boxes:
            if box.isVisibleTo(self) != (q is not None or res is None):
                box.setVisible(q is not None or res is None)
        if q is None or rec is None:
            self.params.setText(f"No quantization: {res.compile.target.name} runs {res.compile.precision}."
                                if res is not None and q is None else "")
            self.errors_note.setText("")
            return
        node = res.compile.optimized.node_by_name(rec.node)
        precision = q.model.node_precision.get(rec.node)
        if precision is None:
            self.params.setText(f"{rec.node} is not quantized: it runs in float.")
            self.errors_note.setText("")
            return
        rows = [f"precision <b>{precision}</b> ({q.config.method}"
                f"{', per channel' if q.config.per_channel else ''}{', symmetric' if q.config.symmetric else ''})"]
        for t, qp in q.model.node_params.get(rec.node, {}).items():
            sc, zp = _fmt_params(qp)
            rows.append(f"input <i>{t}</i>: scale {sc}, zero point {zp}")
        out = node.outputs[0].name if node is not None and node.outputs and node.outputs[0] is not None else None
        if out in q.model.activations:
            sc, zp = _fmt_params(q.model.activations[out])
            rows.append(f"output <i>{out}</i>: scale {sc}, zero point {zp}")
        weights = [v.name for v in (node.inputs if node is not None else []) if v is not None and v.name in q.model.weights]
        for w in weights:
            qp = q.model.weights[w]
            sc, zp = _fmt_params(qp)
            rows.append(f"weight <i>{w}</i> ({qp.dtype}): scale {sc}, zero point {zp}")
            scales = np.atleast_1d(np.asarray(qp.scale, np.float64))
            if scales.size > 1:
                ci.addItem(pg.BarGraphItem(x=np.arange(scales.size), height=scales, width=0.8,
                                           brush=pg.mkBrush(device_color(rec.device)), pen=pg.mkPen(None)))
                self.channel_plot.setVisible(True)
        self.params.setText("<br>".join(rows))
        row = res.layer_row(rec.node)
        if row is not None:
            self.figures = {"accumulated": {k: row[k] for k in FIGURE_KEYS}, "isolated": dict(row["isolated"])}
            for kind, vals in self.figures.items():
                for key in FIGURE_KEYS:
                    self.figure_labels[(kind, key)].setText(f"{vals[key]:g}")
            self.errors_note.setText(f"on {quality.samples_phrase(res, q.analysis.samples)}")
            self.errors_note.setToolTip("accumulated: the quantized model run end to end (this layer's error includes "
                                        "everything upstream); isolated: only this layer quantized")

    # -- histogram and method ----------------------------------------------------------------------
    def _on_tensor_changed(self, _index: int = -1) -> None:
        ctl = self.controller
        tensor = self.tensor_box.currentData()
        res = ctl.current if ctl is not None else None
        self.hist.getPlotItem().clear()
        if res is None or res.quant is None or tensor is None or self.op is None:
            self.hist_note.setText("")
            return
        cfg = res.quant.config
        method = cfg.method_overrides.get(tensor, cfg.method)
        self.method_box.setCurrentIndex(max(self.method_box.findData(method), 0))
        self.hist_note.setText("running the FP32 and quantized models…")
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._view_for = res
        self._view_timer.start()  # the executors run once the charts of a new result are drawn

    def _start_view(self) -> None:
        ctl, res = self.controller, self._view_for
        tensor = self.tensor_box.currentData()
        if ctl is None or res is None or res is not ctl.current or tensor is None or self.op is None:
            return
        role = self.tensor_box.currentData(Qt.ItemDataRole.UserRole + 1) or ""
        task = ProcessTask(tensor_view_job, res, self.op, tensor, role, ctl.cache, name="tensor values")
        task.signals.finished.connect(self._on_view_ready)
        task.signals.failed.connect(self.hist_note.setText)
        self._task = task.start()

    def _on_view_ready(self, view: Any) -> None:
        self._task = None
        ctl, res = self.controller, self._view_for
        if ctl is None or res is not ctl.current or view.tensor != self.tensor_box.currentData():
            return
        self.view = view
        hi = self.hist.getPlotItem()
        hi.clear()
        hi.plot(view.edges, view.fp32, stepMode="center", fillLevel=0, brush=pg.mkBrush(NPU_LIGHT),
                pen=pg.mkPen(style.PLACEMENT_COLORS["npu"][0], width=1))
        if view.quantized is not None:
            hi.plot(view.edges, view.quantized, stepMode="center", pen=pg.mkPen(TRANSFER, width=1.5),
                    )
        top = float(max(view.fp32.max(initial=0), view.quantized.max(initial=0) if view.quantized is not None else 0))
        for m in THRESHOLD_METHODS:
            lo, hi_ = view.thresholds.get(m, (None, None))
            if lo is None:
                continue
            pen = pg.mkPen(_THRESHOLD_COLORS[m], width=1.6, style=_THRESHOLD_PENS[m])
            hi.plot([lo, lo, np.nan, hi_, hi_], [0, top * 1.05, np.nan, 0, top * 1.05], pen=pen, connect="finite")
        hi.setYRange(0, top * 1.12 or 1.0, padding=0)
        hi.getViewBox().enableAutoRange(axis="x")  # a new tensor or method shows its whole histogram
        npu = style.PLACEMENT_COLORS["npu"][0].name()
        legend = [f"<span style='color:{npu}'>■</span> FP32"]
        if view.quantized is not None:
            legend.append(f"<span style='color:{TRANSFER.name()}'>▬</span> quantized")
        for m in THRESHOLD_METHODS:
            if m in view.thresholds:
                lo, hi_ = view.thresholds[m]
                legend.append(f"<span style='color:{_THRESHOLD_COLORS[m]}'><b>{m}</b></span> "
                              f"[{lo:.3g}, {hi_:.3g}]")
        self.hist_note.setText(f"{view.role} <i>{short_name(view.tensor, 36)}</i> is calibrated with "
                               f"<b>{view.method}</b>. Lines: the range each method picks from the same histogram "
                               "(MinMax solid, Percentile dashed, Entropy dotted).<br>" + " &nbsp; ".join(legend))

    def _on_method_chosen(self, _index: int) -> None:
        ctl = self.controller
        tensor = self.tensor_box.currentData()
        if ctl is None or tensor is None:
            return
        method = self.method_box.currentData()
        old = ctl.settings.quant.method_overrides.get(tensor)
        if (old or ctl.settings.quant.method) == method:
            return  # the method it already has: no override, nothing to undo
        self.hist_note.setText(f"recompiling with {method} for {tensor}… (Edit > Undo takes it back)")
        if ctl.doc is not None:
            from app.commands import SetTensorMethodCommand

            ctl.doc.push(SetTensorMethodCommand(ctl, tensor, method, old))
        else:
            ctl.set_tensor_method(tensor, method)

    @property
    def histogram_pending(self) -> bool:
        """True while the histogram of the shown tensor is being computed."""
        return self._task is not None or self._view_timer.isActive()

    def _on_undo_index_changed(self, index: int) -> None:
        """An applied pin was undone: the what-if box must not keep saying "applied"."""
        applied = self._applied_at
        if applied is None or index >= applied[1]:
            return
        self._applied_at = None
        self.last_preview = None
        self.preview.setText("The pin was undone. Pick an op and a device to predict again.")
        self.apply_button.setEnabled(False)

    def choose_method(self, method: str) -> None:
        """Switch the shown tensor's calibration method (what picking it in the box does)."""
        self.method_box.setCurrentIndex(self.method_box.findData(method))
        self._on_method_chosen(self.method_box.currentIndex())

    # -- what-if ---------------------------------------------------------------------------------
    def _on_preview_requested(self, device: str | None) -> None:
        ctl = self.controller
        if ctl is None or self.op is None:
            return
        self.apply_button.setEnabled(False)
        self.preview.setText("simulating…")
        ctl.preview_pin([self.op], device)

    def _on_preview_ready(self, pv: Any) -> None:
        if self.op not in pv.ops:
            return
        d = pv.delta_us
        sign = "+" if d > 0 else "−"
        color = "#d23c3c" if d > 0 else "#12877a"
        where = pv.device.upper() if pv.device else "automatic placement"
        html = (f"Pinned to {where}: latency {fmt_us(pv.before_us)} → <b>{fmt_us(pv.after_us)}</b> "
                f"(<span style='color:{color}'>{sign}{fmt_us(abs(d))}</span>)")
        if pv.ignored:
            html += "<br>The NPU cannot run it: the pin would be ignored."
        if pv.moved:
            html += "<br>Moves: " + ", ".join(f"{m[0].lstrip('/')} {m[1].upper()}→{m[2].upper()}" for m in pv.moved[:5])
            if len(pv.moved) > 5:
                html += f" and {len(pv.moved) - 5} more"
        for what, items, bg in (("adds", pv.added, CPU_LIGHT), ("removes", pv.removed, NPU_LIGHT)):
            if items:
                html += (f"<br><span style='background:{bg.name()}'>{what} {style.count(len(items), 'transfer')}"
                         "</span>: " +
                         ", ".join(f"{t[0]} {t[1].upper()}→{t[2].upper()} ({fmt_us(t[3])})" for t in items[:4]))
        if not pv.added and not pv.removed:
            html += "<br>No transfer is added or removed."
        self.preview.setText(html)
        self.apply_button.setEnabled(not pv.ignored and bool(pv.moved or pv.device is None))
        self.last_preview = pv

    def _on_apply_clicked(self) -> None:
        ctl = self.controller
        pv = self.last_preview
        if ctl is None or pv is None:
            return
        stack = ctl.doc.undo_stack if ctl.doc is not None else None
        if ctl.apply_pin(pv.ops, pv.device):
            self.preview.setText(self.preview.text() + f"<br><span style='color:{GHOST.name()}'>applied; the charts "
                                 "compare before and after until the next edit</span>")
            if stack is not None:
                self._applied_at = (stack, stack.index())
                stack.indexChanged.connect(self._on_undo_index_changed, Qt.ConnectionType.UniqueConnection)
        self.apply_button.setEnabled(False)
