"""Precision trade-off: the layers that could be raised to a higher precision (int16, or FP16
where the NPU has no int16), each a point of latency cost (the layer simulated at that
precision) against accuracy gain (output SQNR with that layer raised alone). Layers already
raised are ringed. Clicking a point applies that raise as one undoable command."""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtGui import QUndoCommand
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app import style
from app.analysis_jobs import precision_job
from app.panels.chart_base import NPU, SELECTION, fmt_us, make_plot, short_name
from app.worker_process import ProcessTask


class RaisePrecisionCommand(QUndoCommand):
    """Run one layer at another precision (a quantization setting, undone like any edit)."""

    def __init__(self, controller: Any, node: str, precision: str | None) -> None:
        super().__init__(f"Raise {short_name(node, 40)} to {precision}" if precision else f"Reset {node}'s precision")
        self.controller = controller
        self.node = node
        self.precision = precision
        self.old = controller.settings.quant.precision.get(node)

    def redo(self) -> None:
        self.controller.set_node_precision(self.node, self.precision)

    def undo(self) -> None:
        self.controller.set_node_precision(self.node, self.old)


class PrecisionPanel(QDockWidget):
    """See the module docstring."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Precision", parent)
        self.setObjectName("PrecisionPanel")
        self.controller: Any = None
        self.result: Any = None
        self.found: Any = None  # PrecisionCandidates
        self._task: ProcessTask | None = None
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(6, 6, 6, 6)
        row = QHBoxLayout()
        self.find_button = QPushButton("Find candidates")
        self.find_button.clicked.connect(self.find_candidates)
        self.top_k = QSpinBox()
        self.top_k.setRange(2, 40)
        self.top_k.setValue(10)
        self.top_k.setPrefix("most sensitive ")
        self.top_k.setSuffix(" layers")
        row.addWidget(self.find_button)
        row.addWidget(self.top_k)
        row.addStretch(1)
        lay.addLayout(row)
        self.title = QLabel("Which layers are worth a higher precision? Find candidates measures each of the "
                            "most sensitive layers raised alone.")
        self.title.setWordWrap(True)
        lay.addWidget(self.title)
        self.plot = make_plot()
        pi = self.plot.getPlotItem()
        pi.setLabel("bottom", "latency cost (µs)")
        pi.setLabel("left", "output SQNR gain (dB)")
        pi.showGrid(x=True, y=True, alpha=0.15)
        lay.addWidget(self.plot, 1)
        self.setWidget(body)
        self._scatter: pg.ScatterPlotItem | None = None

    def set_controller(self, controller: Any) -> None:
        """Follow an AnalysisController."""
        self.controller = controller
        controller.result_changed.connect(self._on_result_changed)
        controller.settings_changed.connect(lambda _s: self._draw())

    def _on_result_changed(self, result: Any) -> None:
        self.result = result
        ok = result is not None and result.quant is not None and result.quant.analysis is not None
        self.find_button.setEnabled(ok)
        if not ok:
            self.title.setText("No quantization to refine on this target.")

    @property
    def candidates(self) -> list[Any]:
        """The last candidates found (mixed.Candidate: node, precision, gain_db, latency_cost_us)."""
        return list(self.found.candidates) if self.found is not None else []

    def find_candidates(self) -> ProcessTask | None:
        """Measure the candidates in a worker."""
        ctl = self.controller
        res = ctl.current if ctl is not None else None
        if res is None or res.quant is None:
            return None
        if self._task is not None:
            self._task.cancel()
        self.title.setText("measuring each candidate…")
        self.find_button.setEnabled(False)
        task = ProcessTask(precision_job, res, ctl.cache, self.top_k.value(), name="precision candidates")
        task.signals.finished.connect(self._on_found)
        task.signals.failed.connect(self._on_failed)
        task.signals.progress.connect(lambda f, t: self.title.setText(f"{t} ({100 * f:.0f}%)"))
        self._task = task.start()
        return task

    def _on_failed(self, message: str) -> None:
        self._task = None
        self.find_button.setEnabled(True)
        self.title.setText(message)

    def _on_found(self, found: Any) -> None:
        self._task = None
        self.find_button.setEnabled(True)
        self.found = found
        self._draw()

    def _draw(self) -> None:
        pi = self.plot.getPlotItem()
        pi.clear()
        found = self.found
        if found is None or self.controller is None:
            return
        raised = self.controller.settings.quant.precision
        if not found.candidates:
            self.title.setText(f"No layer left to raise to {found.precision}.")
            return
        spots = []
        for c in found.candidates:
            on = raised.get(c.node) == c.precision
            spots.append({"pos": (c.latency_cost_us or 0.0, c.gain_db), "data": c.node, "size": 15 if on else 10,
                          "brush": pg.mkBrush(SELECTION if on else NPU),
                          "pen": pg.mkPen(style.TEXT if on else NPU.darker(130), width=2 if on else 1),
                          "symbol": "star" if on else "o"})
        self._scatter = pg.ScatterPlotItem(spots=spots, hoverable=True, tip=self._tip)
        self._scatter.sigClicked.connect(self._on_points_clicked)
        pi.addItem(self._scatter)
        xs = [c.latency_cost_us or 0.0 for c in found.candidates]
        ys = [c.gain_db for c in found.candidates]
        dx = (max(xs) - min(xs)) or 1.0
        dy = (max(ys) - min(ys)) or 1.0
        placed: list[tuple[float, float, str]] = []  # labels drawn so far: x, y, side of the point
        for c, x, y in sorted(zip(found.candidates, xs, ys), key=lambda t: -t[2]):
            near = [p for p in placed if abs(x - p[0]) < 0.08 * dx and abs(y - p[1]) < 0.09 * dy]
            side = "left" if any(p[2] == "right" for p in near) else "right"
            t = pg.TextItem(short_name(c.node, 22), color=style.TEXT_DIM,
                            anchor=(1.05, 1) if side == "left" else (-0.05, 1))
            t.setPos(x, y)
            pi.addItem(t)
            placed.append((x, y, side))
        chosen = [c for c in found.candidates if raised.get(c.node) == c.precision]
        cost = sum(c.latency_cost_us or 0.0 for c in chosen)
        self.title.setText(
            f"<b>{len(found.candidates)} candidates at {found.precision}</b> (output SQNR now "
            f"{found.base_sqnr_db:.1f} dB). Click a point to raise that layer (Ctrl+Z undoes it)."
            + (f"<br>Raised: {style.count(len(chosen), 'layer')}, about +{fmt_us(cost)} per inference." if chosen else ""))

    def _tip(self, x: float, y: float, data: Any) -> str:
        return f"{data}\n+{fmt_us(x)} latency, {y:+.2f} dB output SQNR"

    def _on_points_clicked(self, _item: Any, points: Any, _ev: Any = None) -> None:
        if len(points):
            self.apply_candidate(points[0].data())

    def apply_candidate(self, node: str) -> None:
        """Raise ``node`` to the candidates' precision (toggle back if it is raised already)."""
        ctl, found = self.controller, self.found
        if ctl is None or found is None or ctl.doc is None:
            return
        already = ctl.settings.quant.precision.get(node) == found.precision
        ctl.doc.push(RaisePrecisionCommand(ctl, node, None if already else found.precision))
