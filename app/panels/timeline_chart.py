"""The timeline (Gantt) of one simulated inference: NPU, CPU and DMA lanes, one block per op,
conversions and dispatches in the light colours, transfers in the edge colour. Clicking an op
block picks its op; the selected ops are outlined; after a what-if the latency before it is
marked with a dashed line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app import style
from app.panels.chart_base import (
    CPU,
    CPU_LIGHT,
    GHOST,
    NPU,
    NPU_LIGHT,
    SELECTION,
    TRANSFER,
    fmt_us,
    make_plot,
    view_point,
)

LANE_ROWS = {"npu": 0, "cpu": 1, "dma": 2}
LANE_LABELS = {"npu": "NPU", "cpu": "CPU", "dma": "DMA"}
_KIND_COLORS = {("npu", "op"): NPU, ("cpu", "op"): CPU, ("npu", "dispatch"): NPU_LIGHT,
                ("cpu", "convert"): CPU_LIGHT, ("dma", "transfer"): TRANSFER}


@dataclass
class Block:
    """One drawn event."""

    lane: str
    kind: str
    name: str
    node: str | None
    start: float
    end: float


class TimelineChart(QWidget):
    """See the module docstring."""

    op_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel()
        self.title.setObjectName("chartTitle")
        self.title.setWordWrap(True)
        self.plot = make_plot(self)
        pi = self.plot.getPlotItem()
        pi.invertY(True)
        pi.vb.setMouseEnabled(x=True, y=False)
        pi.setLabel("bottom", "time (µs)")
        pi.getAxis("left").setWidth(44)
        pi.getAxis("left").setTicks([[(float(r), LANE_LABELS[k]) for k, r in LANE_ROWS.items()]])
        pi.showGrid(x=True, y=False, alpha=0.15)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(self.plot, 1)
        self.blocks: list[Block] = []
        self.selected: set[str] = set()
        self._items: list[pg.GraphicsObject] = []
        self._sel_item: pg.BarGraphItem | None = None
        self.plot.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)

    @property
    def op_blocks(self) -> list[Block]:
        """The blocks that are ops (one per op of the compiled graph)."""
        return [b for b in self.blocks if b.kind == "op"]

    def set_events(self, events: Sequence, latency_us: float, before_us: float | None = None,
                   title: str = "") -> None:
        """Draw a SimResult's events (``before_us``: the latency before a what-if)."""
        pi = self.plot.getPlotItem()
        for it in self._items:
            pi.removeItem(it)
        self._items = []
        self._sel_item = None
        self.title.setText(title)
        self.blocks = [Block(e.lane, e.kind, e.name, e.node, float(e.start_us), float(e.end_us)) for e in events]
        groups: dict[tuple[str, str], list[Block]] = {}
        for b in self.blocks:
            groups.setdefault((b.lane, b.kind), []).append(b)
        for (lane, kind), blocks in groups.items():
            color = _KIND_COLORS.get((lane, kind), GHOST)
            h = 0.62 if kind == "op" else 0.42
            item = pg.BarGraphItem(x0=[b.start for b in blocks], width=[max(b.end - b.start, 1e-6) for b in blocks],
                                   y=[float(LANE_ROWS.get(lane, 2))] * len(blocks), height=h,
                                   brush=pg.mkBrush(color), pen=pg.mkPen(QColor(color).darker(130), width=0.6))
            pi.addItem(item)
            self._items.append(item)
        end = max(latency_us, before_us or 0.0, 1e-3)
        if before_us is not None:
            line = pg.InfiniteLine(pos=before_us, angle=90, pen=pg.mkPen(GHOST, width=1.5, style=Qt.PenStyle.DashLine),
                                   label=f"before {fmt_us(before_us)}",
                                   labelOpts={"position": 0.93, "color": style.TEXT_DIM, "anchors": [(1, 0), (1, 0)]})
            pi.addItem(line)
            self._items.append(line)
        done = pg.InfiniteLine(pos=latency_us, angle=90, pen=pg.mkPen(style.TEXT_DIM, width=1))
        pi.addItem(done)
        self._items.append(done)
        pi.vb.setLimits(xMin=-end * 0.02, xMax=end * 1.1, minXRange=end * 1e-3)
        pi.setXRange(0, end * 1.03, padding=0)
        pi.setYRange(-0.6, 2.6, padding=0)
        self._draw_selection()

    def set_selected(self, names: Sequence[str]) -> None:
        """Outline the blocks of ``names``."""
        self.selected = set(names)
        self._draw_selection()

    def _draw_selection(self) -> None:
        pi = self.plot.getPlotItem()
        if self._sel_item is not None:
            pi.removeItem(self._sel_item)
            if self._sel_item in self._items:
                self._items.remove(self._sel_item)
            self._sel_item = None
        sel = [b for b in self.op_blocks if b.node in self.selected]
        if not sel:
            return
        self._sel_item = pg.BarGraphItem(x0=[b.start for b in sel], width=[max(b.end - b.start, 1e-6) for b in sel],
                                         y=[float(LANE_ROWS[b.lane]) for b in sel], height=0.86,
                                         brush=pg.mkBrush(None), pen=pg.mkPen(SELECTION, width=2.2))
        self._sel_item.setZValue(10)
        pi.addItem(self._sel_item)
        self._items.append(self._sel_item)

    def block_at(self, scene_pos: QPointF) -> Block | None:
        """The op block under a scene position (the nearest within a few pixels)."""
        vb = self.plot.getPlotItem().vb
        if not vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = vb.mapSceneToView(scene_pos)
        lane = next((k for k, r in LANE_ROWS.items() if abs(p.y() - r) <= 0.45), None)
        if lane is None:
            return None
        px = vb.viewPixelSize()[0] * 3
        hits = [b for b in self.op_blocks if b.lane == lane and b.start - px <= p.x() <= b.end + px]
        return min(hits, key=lambda b: 0 if b.start <= p.x() <= b.end else 1) if hits else None

    def _on_scene_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        b = self.block_at(ev.scenePos())
        if b is not None and b.node:
            ev.accept()
            self.op_clicked.emit(b.node)

    def _on_mouse_moved(self, pos: QPointF) -> None:
        b = self.block_at(pos)
        self.plot.setToolTip(f"{b.node}\n{fmt_us(b.start)} – {fmt_us(b.end)} ({fmt_us(b.end - b.start)})"
                             if b is not None else "")

    def block_point(self, node: str) -> QPointF:
        """Widget coordinates of the middle of ``node``'s block (tests click there)."""
        b = next(b for b in self.op_blocks if b.node == node)
        vb = self.plot.getPlotItem().vb
        mid = (b.start + b.end) / 2
        width = max(b.end - b.start, 1e-3)
        vb.setXRange(mid - width * 2, mid + width * 2, padding=0)
        return view_point(self.plot, mid, float(LANE_ROWS[b.lane]))
