"""The charts dock: per-op latency (sorted, coloured by device, with the bound), the NPU / CPU /
transfer share and the timeline; the CPU fallbacks; the per-layer quantization error (worst
first, accumulated and isolated); and sustained performance (thermal, stream).

Every chart reads the published AnalysisResult and nothing else; clicking a bar, a block or a
row emits ``op_clicked`` with the compiled op's name, and ``set_selected`` outlines ops."""

from __future__ import annotations

from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import placement, quality, style
from app.analysis import settings_changed_between
from app.panels.chart_base import (
    CPU,
    NPU,
    TRANSFER,
    BarRow,
    RankedBarsChart,
    ShareBar,
    device_color,
    fmt_us,
)
from app.panels.fallback_view import FallbackView
from app.panels.sustained_view import SustainedView
from app.panels.timeline_chart import TimelineChart
from app.stale import STALE_TEXT

STEP_MS = 8  # between two charts' drawing steps: the first one's paint happens in between

QUANT_METRICS = {"sqnr": "SQNR (dB), lower is worse", "cosine": "1 − cosine similarity, higher is worse"}


def latency_rows(result, before=None) -> list[BarRow]:
    """One bar per op of a result, slowest first (``before``: the result before a what-if)."""
    old = {o.node: o for o in before.sim.ops} if before is not None else {}
    vela = getattr(getattr(result, "compile", None), "vela", None)
    vela_cycles = {}
    if vela is not None:
        from engine.export.vela import node_cycles

        vela_cycles = node_cycles(vela)
    rows = []
    for o in sorted(result.sim.ops, key=lambda o: -o.latency_us):
        c = o.cost
        was = old.get(o.node)
        label = f"{fmt_us(o.latency_us)} · {o.bound}"
        if was is not None and (abs(was.latency_us - o.latency_us) > 1e-9 or was.device != o.device):
            label += f"  (was {fmt_us(was.latency_us)} on {was.device.upper()})"
        tip = (f"{o.node} ({o.op_type}) on the {o.device.upper()}\nlatency {fmt_us(o.latency_us)}, "
               f"bound: {o.bound}\ncompute {fmt_us(c.compute_us)}, memory {fmt_us(c.memory_us)}, "
               f"overhead {fmt_us(c.overhead_us)}")
        if o.fallback_reason:
            tip += f"\nwhy the CPU: {o.fallback_reason}"
        if o.node in vela_cycles:
            label += f" · vela {vela_cycles[o.node]:,} cyc"
            tip += f"\nvela: {vela_cycles[o.node]:,} cycles"
        rows.append(BarRow(o.node, o.latency_us, device_color(o.device), label, tip,
                           ghost=was.latency_us if was is not None else None))
    return rows


def quant_rows(result, metric: str = "sqnr") -> list[BarRow]:
    """One row per quantized layer, worst first: accumulated (strong) and isolated (light)."""
    q = result.quant
    if q is None or q.analysis is None:
        return []
    dev = {o.node: o.device for o in result.sim.ops}
    rows = []
    for le in q.analysis.layers:
        a, i = le.accumulated, le.isolated
        d = dev.get(le.node, "unplaced")
        if metric == "cosine":
            v, v2 = max(0.0, 1.0 - a.cosine), max(0.0, 1.0 - i.cosine)
            label = f"cos {a.cosine:.5f} / {i.cosine:.5f}"
            key = a.cosine
        else:
            v, v2 = a.sqnr_db, i.sqnr_db
            label = f"{a.sqnr_db:.1f} / {i.sqnr_db:.1f} dB"
            key = a.sqnr_db
        tip = (f"{le.node} ({le.op_type}, {le.dtype})\naccumulated: cosine {a.cosine:.6f}, max abs "
               f"{a.max_abs:.4g}, SQNR {a.sqnr_db:.2f} dB\nisolated: cosine {i.cosine:.6f}, max abs "
               f"{i.max_abs:.4g}, SQNR {i.sqnr_db:.2f} dB")
        rows.append((key, BarRow(le.node, v, device_color(d), label, tip, value2=v2, color2=device_color(d, True))))
    rows.sort(key=lambda kr: kr[0])
    return [r for _, r in rows]


class ChartsPanel(QDockWidget):
    """See the module docstring."""

    op_clicked = Signal(str)
    updated = Signal()  # every chart shows the latest result

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Analysis", parent)
        self.setObjectName("ChartsPanel")
        self.result = None
        self.before = None
        self._steps: list = []
        # One chart per step, STEP_MS apart: with no gap, Qt ran two steps and their paints in one
        # event-loop turn (timers yield to posted events), 100-115 ms of GUI-thread work on
        # PP-OCRv6 det's first result.
        self._step_timer = QTimer(self)
        self._step_timer.setSingleShot(True)
        self._step_timer.setInterval(STEP_MS)
        self._step_timer.timeout.connect(self._on_step)
        # One line of fixed height: showing a failure never re-lays out the window.
        self.banner = QLabel()
        self.banner.setObjectName("analysisBanner")
        self.banner.setFixedHeight(self.banner.fontMetrics().height() + 8)
        self.failure: str | None = None
        self.stale = False  # the numbers are not of the current graph and settings (app/stale.py)
        self._state = ("idle", "")
        self.latency = RankedBarsChart("latency (µs)")
        self.share = ShareBar()
        self.timeline = TimelineChart()
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(2)
        self.share_title = QLabel("<b>Time share</b>")
        self.share_title.setWordWrap(True)
        rl.addWidget(self.share_title)
        rl.addWidget(self.share)
        rl.addWidget(self.timeline, 1)
        overview = QSplitter(Qt.Orientation.Horizontal)
        overview.addWidget(self.latency)
        overview.addWidget(right)
        overview.setStretchFactor(0, 1)
        overview.setStretchFactor(1, 1)
        self._overview = overview
        self._sized = False
        self.fallback = FallbackView()
        self.quant_metric = QComboBox()
        for key, text in QUANT_METRICS.items():
            self.quant_metric.addItem(text, key)
        self.quant_metric.currentIndexChanged.connect(self._on_quant_metric_changed)
        self.quant = RankedBarsChart("SQNR (dB)")
        qtab = QWidget()
        ql = QVBoxLayout(qtab)
        ql.setContentsMargins(2, 2, 2, 2)
        top = QHBoxLayout()
        top.addWidget(QLabel("Show"))
        top.addWidget(self.quant_metric)
        top.addStretch(1)
        ql.addLayout(top)
        ql.addWidget(self.quant, 1)
        self.sustained = SustainedView()
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(overview, "Latency && timeline")
        self.tabs.addTab(self.fallback, "Fallback")
        self.tabs.addTab(qtab, "Quantization error")
        self.tabs.addTab(self.sustained, "Sustained")
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(2)
        lay.addWidget(self.banner)
        lay.addWidget(self.tabs, 1)
        self.setWidget(body)
        for chart in (self.latency, self.timeline, self.fallback, self.quant):
            chart.op_clicked.connect(self.op_clicked)
        self.show_empty("Open a model and choose a target: the charts follow every edit.")

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if not self._sized:  # half and half, once the splitter knows its width
            self._sized = True
            QTimer.singleShot(0, self._split_evenly)

    def _split_evenly(self) -> None:
        w = self._overview.width()
        if w > 0:
            self._overview.setSizes([w // 2, w - w // 2])

    # -- content ---------------------------------------------------------------------------------
    def show_empty(self, message: str) -> None:
        """No result (yet): pending drawing is dropped."""
        self._steps = []
        self._step_timer.stop()
        self.result = self.before = None
        self.latency.set_rows([])
        self.latency.set_title(message)
        self.quant.set_rows([])
        self.share.set_parts([])
        self.timeline.set_events([], 0.0)
        self.fallback.rows = []
        self.fallback.tree.clear()
        self.sustained.clear("")

    def show_result(self, result, comparison=None) -> None:
        """Draw a published AnalysisResult (``comparison``: (before, after) of a pin).

        The charts are drawn one per event-loop turn (slowest-first latency bars first), so a
        new result never holds the GUI thread for long; ``is_updating`` is True meanwhile."""
        self.result = result
        before = comparison[0] if comparison is not None and comparison[1] is result else None
        self.before = before
        self._steps = [self._draw_latency, self._draw_timeline, self._draw_fallback, self._draw_quant,
                       self._draw_sustained]
        if not self._step_timer.isActive():
            self._step_timer.start()

    @property
    def is_updating(self) -> bool:
        """True while some charts still show the previous result."""
        return bool(self._steps)

    def flush(self) -> None:
        """Draw every pending chart now."""
        while self._steps:
            self._steps.pop(0)()

    def _on_step(self) -> None:
        if self._steps:
            self._steps.pop(0)()
            # Titles changed: lay the charts out now and let each plot settle its view transform,
            # so the paint that follows is the only one (a layout pass after it resized the plots,
            # and pyqtgraph's transform update at paint time asked for a second paint).
            QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
            for plot in self.findChildren(pg.GraphicsView):
                if plot.isVisible():
                    plot.scene().prepareForPaint()
        if self._steps:
            self._step_timer.start()
        else:
            self.set_selected(self.latency.selected)
            self.updated.emit()

    def _draw_latency(self) -> None:
        result, before = self.result, self.before
        sim = result.sim
        summ = sim.summary()
        rows = latency_rows(result, before)
        self.latency.set_rows(rows)
        head = (f"<b>Per-op latency</b>: {style.count(len(rows), 'op')}, {fmt_us(sim.latency_us)} on "
                f"{result.compile.target.name}{' (modified)' if result.what_if_hardware else ''}"
                f" · {summ['npu_ops']} NPU, {summ['cpu_ops']} CPU, {style.count(summ['transfers'], 'transfer')}")
        vela = getattr(result.compile, "vela", None)
        if vela is not None:
            head += f" · vela: {vela.total_cycles:,} cycles ({fmt_us(vela.latency_us)}), {vela.cpu_ops} CPU ops"
        if before is not None:
            d = sim.latency_us - before.sim.latency_us
            also = settings_changed_between(before, result)
            what = ("after the pin" if not also else
                    f"after the pin and a change of {' and '.join(also)} (both changed: not the pin's effect alone)")
            head += (f"<br><span style='color:#2563eb'>{what}: {fmt_us(before.sim.latency_us)} → "
                     f"{fmt_us(sim.latency_us)} ({'+' if d >= 0 else '−'}{fmt_us(abs(d))}); dashed outlines "
                     "show each op before</span>")
        self.latency.set_title(head)

    def _draw_timeline(self) -> None:
        result, before = self.result, self.before
        sim = result.sim
        summ = sim.summary()
        cpu_us = summ["cpu_us"] + summ["conversion_us"]
        self.share.set_parts([("NPU", summ["npu_us"], NPU), ("CPU", cpu_us, CPU),
                              ("transfers", summ["transfer_us"], TRANSFER)])
        self.share_title.setText(f"<b>Time share</b> (busy time per lane; end to end with the host pipeline "
                                 f"{fmt_us(sim.end_to_end_us)})")
        self.timeline.set_events(sim.events, sim.latency_us, before.sim.latency_us if before is not None else None,
                                 f"<b>Timeline</b>: {style.count(len(sim.ops), 'op')} on 3 lanes, done at {fmt_us(sim.latency_us)}; "
                                 "light blocks are dispatches and conversions, blue ones DMA transfers")

    def _draw_fallback(self) -> None:
        sim = self.result.sim
        count = placement.fallback_of_result(self.result)
        self.fallback.set_sim(sim, count)
        self.tabs.setTabText(1, f"Fallback · {count.phrase()}")

    def _draw_sustained(self) -> None:
        if self.result.sustained is not None:
            self.sustained.set_sustained(self.result.sustained)
        else:
            self.sustained.clear("computing thermal and stream figures…")

    def _draw_quant(self) -> None:
        res = self.result
        if res is None:
            return
        metric = self.quant_metric.currentData()
        rows = quant_rows(res, metric)
        self.quant.set_rows(rows)
        self.quant.plot.getPlotItem().setLabel("bottom", "SQNR (dB)" if metric == "sqnr" else "1 − cosine")
        q = res.quant
        if q is None:
            self.quant.set_title(f"<b>No quantization</b>: target {res.compile.target.name} runs "
                                 f"{res.compile.precision}.")
        else:
            self.quant.set_title(
                f"<b>Quantization error per layer</b>, worst first ({q.config.method}, {q.config.dtype}, "
                f"{quality.samples_phrase(res, q.analysis.samples if q.analysis else 0)}): strong bar = accumulated (the quantized "
                "model end to end), light bar = isolated (only this layer quantized)")

    def _on_quant_metric_changed(self, _index: int) -> None:
        self._draw_quant()
        self.quant.set_selected(self.latency.selected)

    def show_sustained(self, result) -> None:
        """The thermal/stream figures of the shown result arrived."""
        if result is self.result and result.sustained is not None and self._draw_sustained not in self._steps:
            self.sustained.set_sustained(result.sustained)

    def show_state(self, state: str, message: str) -> None:
        """The analysis state on the status line; a failure keeps the last charts and says why."""
        if self.result is None and state in ("idle", "failed"):
            self.latency.set_title(f"<b>No analysis yet</b>: {message}.")
        self._state = (state, message)
        self.failure = message if state == "failed" else None
        self._show_banner(state, message)

    def _show_banner(self, state: str, message: str) -> None:
        if state == "failed":
            text = f"⚠ {message}" + (" — the charts show the last compiled result" if self.result is not None else "")
            css = "background:#fdecea; color:#8a1f11; padding:2px 6px;"
        elif (state == "running" or self.stale) and self.result is not None:
            # The charts keep the last compile's numbers until the new one lands: say so over them.
            text, css = (f"{STALE_TEXT}: the charts show the compile before the last change",
                         "background:#fff4d6; color:#6b4e00; padding:2px 6px;")
        elif state == "running":
            text, css = "compiling…", "color:#5d6575; padding:2px 6px;"
        else:
            text, css = message, "color:#5d6575; padding:2px 6px;"
        metrics = self.banner.fontMetrics()
        self.banner.setText(metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(self.banner.width() - 16, 200)))
        self.banner.setToolTip(text)
        self.banner.setStyleSheet(css)

    def set_stale(self, stale: bool) -> None:
        """The numbers shown became stale (an edit, a setting) or current again: say so at once,
        not only once the compile starts after its debounce."""
        self.stale = stale
        self._show_banner(*self._state)

    def set_selected(self, ops: Sequence[str]) -> None:
        """Outline ``ops`` in every chart."""
        for chart in (self.latency, self.timeline, self.fallback, self.quant):
            chart.set_selected(ops)
