"""The sweep results dock: a results.csv of ``npu-studio sweep`` as a Pareto chart.

Each point is one row (latency on x, output SQNR on y, one color per hardware configuration);
hovering shows the row, and clicking applies that row's target (the YAML the sweep wrote under
OUTDIR/targets/) and quantization setting to the open model. The change goes through the
analysis controller like any setting, inside an undoable command on the document's stack, so
Ctrl+Z returns to the previous target and setting. The panel keeps no model state of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtGui import QAction, QColor, QUndoCommand
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app import style
from app.panels.chart_base import make_plot
from engine.sweep.html import PALETTE, config_label, pareto_front
from engine.sweep.results import parse_row, read_rows


class ApplySweepPointCommand(QUndoCommand):
    """Switch the document to one sweep point's target and quantization setting."""

    def __init__(self, controller: Any, target: str, quant: dict[str, Any], label: str) -> None:
        super().__init__(f"Apply sweep point: {label}")
        self.controller = controller
        self.new = (target, quant)
        q = controller.settings.quant
        self.old = (controller.settings.target, {k: getattr(q, k) for k in quant})

    def _apply(self, target: str | None, quant: dict[str, Any]) -> None:
        import dataclasses

        ctl = self.controller
        ctl.update_settings(target=target, quant=dataclasses.replace(ctl.settings.quant, **quant))

    def redo(self) -> None:
        self._apply(*self.new)

    def undo(self) -> None:
        self._apply(*self.old)


class SweepPanel(QDockWidget):
    """See the module docstring."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Sweep", parent)
        self.setObjectName("SweepPanel")
        self.controller: Any = None
        self.path: Path | None = None
        self.rows: list[dict[str, Any]] = []
        self.varied: list[str] = []
        self._scatter: pg.ScatterPlotItem | None = None
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(6, 6, 6, 6)
        top = QHBoxLayout()
        self.open_button = QPushButton("Open results.csv…")
        self.open_button.clicked.connect(self.open_dialog)
        top.addWidget(self.open_button)
        self.title = QLabel("Open the results.csv of npu-studio sweep to compare its points.")
        self.title.setWordWrap(True)
        top.addWidget(self.title, 1)
        lay.addLayout(top)
        self.plot = make_plot()
        pi = self.plot.getPlotItem()
        pi.setLabel("bottom", "latency (µs)")
        pi.setLabel("left", "output SQNR (dB)")
        pi.showGrid(x=True, y=True, alpha=0.15)
        lay.addWidget(self.plot, 1)
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        lay.addWidget(self.legend)
        self.setWidget(body)

    def set_controller(self, controller: Any) -> None:
        """Apply points through this AnalysisController."""
        self.controller = controller

    # -- loading ---------------------------------------------------------------------------------
    def open_dialog(self) -> None:
        """Ask for a results.csv."""
        path, _ = QFileDialog.getOpenFileName(self, "Open sweep results", "", "Sweep results (results.csv *.csv)")
        if path:
            self.open_results(path)

    def open_results(self, path: str | Path) -> bool:
        """Show a results.csv; False (with the reason in the title) when it cannot be read."""
        p = Path(path)
        try:
            raw = read_rows(p)
        except ValueError as exc:
            self.title.setText(str(exc).splitlines()[0])
            return False
        self.path = p
        self.rows = [parse_row(r) for r in raw]
        header = list(raw[0]) if raw else []
        fixed = {"model", "target", "symmetric", "method", "per_channel", "dtype", "target_sqnr", "latency_us",
                 "npu_ops", "cpu_ops", "sram_peak_kib", "output_sqnr_db", "cosine", "seconds", "error", "key",
                 "target_file"}
        self.varied = [c for c in header if c not in fixed]
        self._draw()
        self.show()
        self.raise_()
        return True

    def plotted(self) -> list[dict[str, Any]]:
        """The rows drawn as points (both a latency and an SQNR)."""
        return [r for r in self.rows if r.get("latency_us") is not None and r.get("output_sqnr_db") is not None]

    def _draw(self) -> None:
        pi = self.plot.getPlotItem()
        pi.clear()
        rows = self.plotted()
        labels = list(dict.fromkeys(config_label(r, self.varied) for r in rows))
        colors = {lab: QColor(PALETTE[i % len(PALETTE)]) for i, lab in enumerate(labels)}
        front = set(pareto_front([(r["latency_us"], r["output_sqnr_db"], i) for i, r in enumerate(rows)]))
        spots = [{"pos": (r["latency_us"], r["output_sqnr_db"]), "data": i, "size": 13 if i in front else 10,
                  "brush": pg.mkBrush(colors[config_label(r, self.varied)]),
                  "pen": pg.mkPen(style.TEXT if i in front else style.TEXT_DIM, width=2 if i in front else 1)}
                 for i, r in enumerate(rows)]
        self._scatter = pg.ScatterPlotItem(spots=spots, hoverable=True, tip=self._tip)
        self._scatter.sigClicked.connect(self._on_points_clicked)
        pi.addItem(self._scatter)
        failed = sum(1 for r in self.rows if r.get("error"))
        self.title.setText(f"<b>{style.count(len(rows), 'point')}</b> from {self.path}" + (f", {failed} failed" if failed else "")
                           + ". Click a point to apply its target and quantization (Ctrl+Z undoes it).")
        self.legend.setText("  ".join(f'<span style="color:{c.name()}">●</span> {lab}' for lab, c in colors.items()))

    def _tip(self, x: float, y: float, data: Any) -> str:
        r = self.plotted()[int(data)]
        return (f"{r['model']} on {config_label(r, self.varied)}\n{r['method']} {r['dtype']}"
                f"{' per-channel' if r.get('per_channel') else ''}\n{x:.4g} µs, {y:.3g} dB")

    def _on_points_clicked(self, _item: Any, points: Any, _ev: Any = None) -> None:
        if len(points):
            self.apply_point(int(points[0].data()))

    # -- applying ----------------------------------------------------------------------------------
    def point_position(self, index: int) -> tuple[float, float]:
        """Data coordinates of plotted point ``index`` (tests click there)."""
        r = self.plotted()[index]
        return r["latency_us"], r["output_sqnr_db"]

    def apply_point(self, index: int) -> bool:
        """Apply plotted point ``index``'s target and quantization to the open model."""
        ctl = self.controller
        if ctl is None or ctl.doc is None or self.path is None:
            self.title.setText("Open a model first: a point applies to the open model.")
            return False
        r = self.plotted()[index]
        target = str((self.path.parent / r["target_file"]).resolve()) if r.get("target_file") else r["target"]
        quant = {"method": r["method"], "per_channel": bool(r["per_channel"]), "symmetric": bool(r["symmetric"]),
                 "dtype": r["dtype"]}
        ctl.doc.push(ApplySweepPointCommand(ctl, target, quant, f"{config_label(r, self.varied)}, {r['method']}"))
        return True


def sweep_panel(window: QMainWindow) -> SweepPanel:
    """The window's sweep dock, made on first use (a window that never opens sweep results
    pays nothing for it)."""
    from PySide6.QtCore import Qt

    panel = getattr(window, "_sweep_panel", None)
    if isinstance(panel, SweepPanel):
        return panel
    panel = SweepPanel(window)
    window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, panel)
    analysis = getattr(window, "analysis", None)
    if analysis is not None:
        panel.set_controller(analysis.controller)
    view = _menu(window, "View")
    if view is not None:
        view.addAction(panel.toggleViewAction())
    window._sweep_panel = panel  # type: ignore[attr-defined]
    return panel


def open_sweep_results(window: QMainWindow, path: str | Path | None = None) -> SweepPanel:
    """Show a results.csv in the window's sweep dock (ask for it when ``path`` is None)."""
    panel = sweep_panel(window)
    if path is None:
        panel.show()
        panel.open_dialog()
    else:
        panel.open_results(path)
    return panel


def _menu(window: QMainWindow, title: str) -> Any:
    for act in window.menuBar().actions():
        if act.menu() is not None and act.text().replace("&", "") == title:
            return act.menu()
    return None


def install_sweep_panel(window: QMainWindow) -> None:
    """Add Tools > Open Sweep Results… to ``window`` (the dock itself is made when first used)."""
    tools = _menu(window, "Tools")
    if tools is None:
        return
    act = QAction("Open &Sweep Results…", window)
    act.triggered.connect(lambda: open_sweep_results(window))
    tools.addAction(act)
