"""Sustained performance: latency over back-to-back iterations under the target's thermal
model (first run with the cold start, then throttling to the steady state), and the stream
mode's throughput (preprocessing overlapped with inference) against serial execution."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app import style
from app.panels.chart_base import GHOST, NPU, TRANSFER, fmt_us, make_plot


class SustainedView(QWidget):
    """Thermal latency per iteration (left) and stream throughput (right)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.thermal_title = QLabel("Thermal: latency per iteration")
        self.thermal_title.setObjectName("chartTitle")
        self.thermal_title.setWordWrap(True)
        self.thermal = make_plot(self)
        ti = self.thermal.getPlotItem()
        ti.setLabel("bottom", "iteration")
        ti.setLabel("left", "latency (µs)")
        ti.setLogMode(x=True, y=False)
        ti.showGrid(x=True, y=True, alpha=0.15)
        self.stream_title = QLabel("Stream: frames per second")
        self.stream_title.setObjectName("chartTitle")
        self.stream_title.setWordWrap(True)
        self.stream = make_plot(self)
        si = self.stream.getPlotItem()
        si.setLabel("left", "frames / s")
        si.getAxis("bottom").setTicks([[(0.0, "serial"), (1.0, "pipelined")]])
        si.vb.setMouseEnabled(x=False, y=False)
        self.stream_note = QLabel()
        self.stream_note.setWordWrap(True)
        left = QVBoxLayout()
        left.addWidget(self.thermal_title)
        left.addWidget(self.thermal, 1)
        right = QVBoxLayout()
        right.addWidget(self.stream_title)
        right.addWidget(self.stream, 1)
        right.addWidget(self.stream_note)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(left, 3)
        lay.addLayout(right, 2)
        self.has_data = False
        self._pending = None

    def clear(self, message: str = "computing…") -> None:
        self._pending = None
        self.thermal.getPlotItem().clear()
        self.stream.getPlotItem().clear()
        self.stream_note.setText(message)
        self.has_data = False

    def set_sustained(self, sustained) -> None:
        """Show a Sustained (app.analysis_jobs); drawn when the view is visible."""
        self._pending = sustained
        if self.isVisible():
            self._draw()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._pending is not None:
            self._draw()

    def _draw(self) -> None:
        sustained, self._pending = self._pending, None
        th, st = sustained.thermal, sustained.stream
        ti = self.thermal.getPlotItem()
        ti.clear()
        ti.plot(sustained.iterations, sustained.latency_us, pen=pg.mkPen(NPU, width=2))
        ti.addItem(pg.InfiniteLine(pos=th.steady_state_us, angle=0,
                                   pen=pg.mkPen(GHOST, width=1, style=Qt.PenStyle.DashLine),
                                   label=f"steady {fmt_us(th.steady_state_us)}",
                                   labelOpts={"position": 0.9, "color": style.TEXT_DIM}))
        ti.plot([1.0], [th.first_run_us], pen=None, symbol="o", symbolSize=8, symbolBrush=pg.mkBrush(TRANSFER),
                symbolPen=pg.mkPen(TRANSFER))
        top = max(th.first_run_us, float(sustained.latency_us.max()) if sustained.latency_us.size else 0.0)
        ti.setYRange(0, top * 1.15, padding=0)
        self.thermal_title.setText(
            f"<b>Thermal</b>: first run {fmt_us(th.first_run_us)} (cold start {fmt_us(th.cold_start_us)}), "
            f"steady state {fmt_us(th.steady_state_us)} after {th.runs} runs "
            f"(clock {th.peak_clock_mhz:.0f} → {th.steady_clock_mhz:.0f} MHz, ×{th.slowdown:.2f})")
        si = self.stream.getPlotItem()
        si.clear()
        bars = pg.BarGraphItem(x=[0.0, 1.0], height=[st.serial_fps, st.throughput_fps], width=0.6,
                               brushes=[pg.mkBrush(GHOST), pg.mkBrush(NPU)], pens=[pg.mkPen(None)] * 2)
        si.addItem(bars)
        for x, v in ((0.0, st.serial_fps), (1.0, st.throughput_fps)):
            t = pg.TextItem(f"{v:.0f}", color=style.TEXT, anchor=(0.5, 1.0))
            t.setPos(x, v)
            si.addItem(t)
        si.setYRange(0, max(st.serial_fps, st.throughput_fps) * 1.2, padding=0)
        si.setXRange(-0.6, 1.6, padding=0)
        self.stream_title.setText(f"<b>Stream</b>: {st.throughput_fps:.0f} frames/s pipelined "
                                  f"(×{st.speedup:.2f} over serial)")
        self.stream_note.setText(f"latency per frame p50 {fmt_us(st.p50_us)}, p99 {fmt_us(st.p99_us)}; "
                                 f"queue depth {st.queue_depth}, {st.frames} frames")
        self.has_data = True
