"""Sustained performance: latency over back-to-back iterations under the target's thermal
model (first run with the cold start, then throttling to the steady state), and the stream
mode's throughput (preprocessing overlapped with inference) against serial execution."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app import style
from app.panels.chart_base import GHOST, NPU, TRANSFER, fmt_us, label_font, make_plot

_LOG_STEPS = ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 5, 7))
_LABEL_PX = 44  # room one iteration label needs ("100k" plus a gap)


def compact_count(v: float) -> str:
    """1, 20, 500, 1k, 20k, 1M: an iteration count short enough for an axis label."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            q = v / div
            return f"{q:.0f}{suffix}" if q >= 10 or q == int(q) else f"{q:.1f}{suffix}"
    return f"{v:.0f}"


class LogCountAxis(pg.AxisItem):
    """A log-scale axis of counts whose labels never overlap: ticks at 1-2-5 (or sparser: every
    decade, every other decade...) steps as many as the axis length has room for, written
    compactly (1, 10, 100, 1k ...). pyqtgraph's own log axis also labels the minor ticks, which
    collide when a panel is narrow or the range spans few decades."""

    def tickValues(self, minVal: float, maxVal: float, size: float):
        if not self.logMode:
            return super().tickValues(minVal, maxVal, size)
        return [(1.0, log_ticks(minVal, maxVal, size))]

    def tickStrings(self, values, scale, spacing):
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        return [compact_count(10 ** v) for v in values]


def log_ticks(lo: float, hi: float, pixels: float) -> list[float]:
    """log10 positions of the round counts in [10**lo, 10**hi] to label along ``pixels``."""
    import math

    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return []
    room = max(1, int(pixels // _LABEL_PX))
    first, last = math.floor(lo), math.ceil(hi)
    best: list[float] = []
    for steps in _LOG_STEPS:
        vals = [math.log10(m * 10.0 ** e) for e in range(first, last + 1) for m in steps]
        vals = [v for v in vals if lo - 1e-9 <= v <= hi + 1e-9]
        if len(vals) > room:
            break
        best = vals
        if len(vals) * 2 > room:
            break
    if not best:  # even one label per decade is too many: every k-th decade
        k = 2
        while True:
            best = [float(e) for e in range(first, last + 1) if e % k == 0 and lo - 1e-9 <= e <= hi + 1e-9]
            if len(best) <= room:
                break
            k *= 2
    # Labels are spaced by pixels, not positions: drop any closer than a label's width.
    span = hi - lo
    kept: list[float] = []
    for v in best:
        if not kept or (v - kept[-1]) / span * pixels >= _LABEL_PX:
            kept.append(v)
    return kept


class SustainedView(QWidget):
    """Thermal latency per iteration (left) and stream throughput (right)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.thermal_title = QLabel("Thermal: latency per iteration")
        self.thermal_title.setObjectName("chartTitle")
        self.thermal_title.setWordWrap(True)
        self.thermal = make_plot(self)
        ti = self.thermal.getPlotItem()
        axis = LogCountAxis("bottom")
        old_axis = ti.getAxis("bottom")
        axis.setPen(old_axis.pen())
        axis.setTextPen(old_axis.textPen())
        axis.setStyle(tickFont=label_font())
        ti.setAxisItems({"bottom": axis})
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
            f"steady state {fmt_us(th.steady_state_us)} after {style.count(th.runs, 'run')} "
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
