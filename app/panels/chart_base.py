"""Shared pieces of the analysis charts: the canvas palette for devices, pyqtgraph plot set-up,
op names shortened for axes, a stacked share bar, and RankedBarsChart (horizontal bars, one
row per op, scrollable, clickable, with the selection outlined)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app import style

NPU = style.PLACEMENT_COLORS["npu"][0]
NPU_LIGHT = style.PLACEMENT_COLORS["npu"][1]
CPU = style.PLACEMENT_COLORS["cpu"][0]
CPU_LIGHT = style.PLACEMENT_COLORS["cpu"][1]
UNPLACED = style.PLACEMENT_COLORS["unplaced"][0]
TRANSFER = style.EDGE_HOVER  # tensors moving between devices: the canvas's edge highlight
TRANSFER_LIGHT = QColor("#c9d8fb")
SELECTION = style.SELECTION
GHOST = QColor("#9aa3b5")
BACKGROUND = QColor("#ffffff")


AXIS_TEXT_MARGIN = 16  # px of a name axis's width its tick and spacing take (pyqtgraph: 5 + 5, and rounding)
MAX_LABEL_SHARE = 0.8  # of a bar chart's width its labels may take (bars keep a fifth at least)


def label_font() -> QFont:
    """The application's UI font at label size (pyqtgraph text items default to another)."""
    from PySide6.QtGui import QGuiApplication

    f = QFont(QGuiApplication.font())
    f.setPointSizeF(8.0)
    return f
DEVICE_NAMES = {"npu": "NPU", "cpu": "CPU", "dma": "DMA"}


def device_color(device: str, light: bool = False) -> QColor:
    """The canvas colour of a device (``light``: the node fill)."""
    strong, fill = style.PLACEMENT_COLORS.get(device, style.PLACEMENT_COLORS["unplaced"])
    return fill if light else strong


def short_name(name: str, limit: int = 30) -> str:
    """An op name that fits an axis: exporter scopes that only repeat the next one dropped
    (``/features/features.1/block/block.0/block.0.0/Conv`` -> ``features.1/block.0.0/Conv``),
    then elided on the left."""
    parts = [p for p in name.split("/") if p]
    kept = [p for i, p in enumerate(parts) if not (i + 1 < len(parts) - 1 and parts[i + 1].startswith(p))]
    s = "/".join(kept) or name
    return s if len(s) <= limit else "…" + s[-(limit - 1):]


def fmt_us(us: float) -> str:
    """A duration with a unit that keeps it short."""
    if abs(us) >= 1000:
        return f"{us / 1000:.2f} ms"
    if abs(us) >= 10:
        return f"{us:.0f} µs"
    return f"{us:.1f} µs"


def make_plot(parent: QWidget | None = None, view_box: pg.ViewBox | None = None) -> pg.PlotWidget:
    """A white plot with the editor's text colours and small tick fonts."""
    w = pg.PlotWidget(parent, background=BACKGROUND, viewBox=view_box)
    pi = w.getPlotItem()
    pi.hideButtons()
    pi.setMenuEnabled(False)
    for name in ("left", "bottom"):
        ax = pi.getAxis(name)
        ax.setPen(pg.mkPen(style.TEXT_DIM))
        ax.setTextPen(pg.mkPen(style.TEXT))
        ax.setStyle(tickFont=label_font())
    return w


def view_point(plot: pg.PlotWidget, x: float, y: float) -> QPointF:
    """Widget (viewport) coordinates of a data point (tests click there)."""
    scene_pt = plot.getPlotItem().vb.mapViewToScene(QPointF(x, y))
    return QPointF(plot.mapFromScene(scene_pt))


class LabelsItem(pg.GraphicsObject):
    """Many short texts at data positions, drawn by one item at a fixed pixel size (one
    pyqtgraph TextItem per bar costs milliseconds each; this costs one paint)."""

    def __init__(self, labels: Sequence[tuple[float, float, str]], color: QColor = style.TEXT_DIM,
                 dx_px: float = 4.0) -> None:
        super().__init__()
        self.labels = list(labels)
        self.color = QColor(color)
        self.dx_px = dx_px
        self.font = label_font()
        self.drawn: list[tuple[str, float, float]] = []  # (text as drawn, its right end, the plot's edge) in px
        xs = [x for x, _, _ in self.labels] or [0.0]
        ys = [y for _, y, _ in self.labels] or [0.0]
        self._bounds = QRectF(min(xs), min(ys) - 0.5, max(max(xs) - min(xs), 1e-9), max(ys) - min(ys) + 1.0)

    def boundingRect(self) -> QRectF:
        return self._bounds

    def paint(self, painter: QPainter, *args) -> None:
        tr = painter.transform()
        painter.save()
        painter.resetTransform()
        painter.setFont(self.font)
        painter.setPen(QPen(self.color))
        fm = painter.fontMetrics()
        clip = painter.viewport()
        vb = self.getViewBox()
        right = tr.map(QPointF(vb.viewRange()[0][1], 0.0)).x() if vb is not None else float(clip.width())
        self.drawn = []
        for x, y, text in self.labels:
            p = tr.map(QPointF(x, y))
            if -20 <= p.y() <= clip.height() + 20:
                left = p.x() + self.dx_px
                if fm.horizontalAdvance(text) > right - left:  # a narrow chart: cut it, never past the edge
                    text = fm.elidedText(text, Qt.TextElideMode.ElideRight, max(0, int(right - left)))
                painter.drawText(QPointF(left, p.y() + fm.ascent() / 2 - 1), text)
                self.drawn.append((text, left + fm.horizontalAdvance(text), right))
        painter.restore()


class ScrollViewBox(pg.ViewBox):
    """A view box whose wheel scrolls rows instead of zooming (long op lists)."""

    def wheelEvent(self, ev, axis=None) -> None:
        rows = -ev.delta() / 120.0 * 3.0
        (y0, y1) = self.viewRange()[1]
        lim = self.state["limits"]["yLimits"]
        lo, hi = (lim[0] if lim[0] is not None else -1e9), (lim[1] if lim[1] is not None else 1e9)
        shift = max(lo - y0, min(hi - y1, rows))
        self.setYRange(y0 + shift, y1 + shift, padding=0)
        ev.accept()


@dataclass
class BarRow:
    """One row of a RankedBarsChart."""

    name: str
    value: float
    color: QColor
    label: str = ""
    tooltip: str = ""
    value2: float | None = None  # a second bar in the row (e.g. isolated error)
    color2: QColor | None = None
    ghost: float | None = None  # the value before a what-if, drawn as an outline


class RankedBarsChart(QWidget):
    """Horizontal bars ranked top-down with op names on the axis; click a bar to pick its op."""

    op_clicked = Signal(str)

    def __init__(self, unit: str, visible_rows: int = 14, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.unit = unit
        self.visible_rows = visible_rows
        self.rows: list[BarRow] = []
        self.selected: set[str] = set()
        self.title = QLabel()
        self.title.setObjectName("chartTitle")
        self.title.setWordWrap(True)
        self.plot = make_plot(self, ScrollViewBox())
        pi = self.plot.getPlotItem()
        pi.invertY(True)
        pi.vb.setMouseEnabled(x=False, y=True)
        pi.getAxis("left").setWidth(190)
        pi.setLabel("bottom", unit)
        pi.showGrid(x=True, y=False, alpha=0.15)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.setSpacing(2)
        lay.addWidget(self.title)
        lay.addWidget(self.plot, 1)
        self._bars: list[pg.GraphicsObject] = []
        self._labels: list[pg.GraphicsObject] = []
        self._highlight: pg.BarGraphItem | None = None
        self._top = 1.0
        self.plot.scene().sigMouseClicked.connect(self._on_scene_clicked)
        self.plot.scene().sigMouseMoved.connect(self._on_mouse_moved)
        pi.vb.sigResized.connect(self._fit_x)
        self._tick_span: tuple[int, int] | None = None
        pi.vb.sigYRangeChanged.connect(self._update_ticks)

    # -- data ----------------------------------------------------------------------------------
    def set_title(self, text: str) -> None:
        self.title.setText(text)

    def set_rows(self, rows: Sequence[BarRow]) -> None:
        """Replace every bar (rows in display order, top first)."""
        pi = self.plot.getPlotItem()
        for it in (*self._bars, *self._labels):
            pi.removeItem(it)
        self._bars, self._labels = [], []
        self._highlight = None
        self.rows = list(rows)
        n = len(self.rows)
        if n == 0:
            pi.getAxis("left").setTicks([[]])
            return
        two = any(r.value2 is not None for r in self.rows)
        h = 0.38 if two else 0.72
        ys = [float(i) - (h / 2 if two else 0.0) for i in range(n)]
        ghosts = [(i, r.ghost) for i, r in enumerate(self.rows) if r.ghost is not None]
        if ghosts:
            g = pg.BarGraphItem(x0=[0.0] * len(ghosts), width=[max(v, 0.0) for _, v in ghosts],
                                y=[ys[i] for i, _ in ghosts], height=h + 0.1, brush=pg.mkBrush(None),
                                pen=pg.mkPen(GHOST, width=1.2, style=Qt.PenStyle.DashLine))
            pi.addItem(g)
            self._bars.append(g)
        self._add_bars([(ys[i], r.value, r.color, 115) for i, r in enumerate(self.rows)], h)
        if two:
            self._add_bars([(float(i) + h / 2, r.value2 or 0.0, r.color2 or GHOST, 125)
                            for i, r in enumerate(self.rows) if r.value2 is not None], h)
        top = max(max(r.value, r.value2 or 0.0, r.ghost or 0.0) for r in self.rows) or 1.0
        labels = LabelsItem([(max(r.value, r.value2 or 0.0, r.ghost or 0.0), float(i), r.label)
                             for i, r in enumerate(self.rows) if r.label])
        pi.addItem(labels)
        self._labels.append(labels)
        self._tick_span = None
        pi.vb.setLimits(yMin=-0.6, yMax=max(n, self.visible_rows) - 0.4, xMin=0)
        self._top = top
        self._fit_x()
        pi.setYRange(-0.6, min(n, self.visible_rows) - 0.4, padding=0)
        self._update_ticks()
        self._draw_selection()

    def _add_bars(self, bars: Sequence[tuple[float, float, QColor, int]], height: float) -> None:
        """(y, length, colour, outline darkness) per bar, as one item per colour: a single brush
        and pen draw as one call, where a brush per bar replays a picture bar by bar (a chart of
        158 ops painted in 13 ms instead of 5)."""
        groups: dict[int, list[tuple[float, float, QColor, int]]] = {}
        for bar in bars:
            groups.setdefault(bar[2].rgba(), []).append(bar)
        pi = self.plot.getPlotItem()
        for group in groups.values():
            color, dark = group[0][2], group[0][3]
            item = pg.BarGraphItem(x0=[0.0] * len(group), width=[max(v, 0.0) for _, v, _, _ in group],
                                   y=[y for y, _, _, _ in group], height=height, brush=pg.mkBrush(color),
                                   pen=pg.mkPen(color.darker(dark)))
            pi.addItem(item)
            self._bars.append(item)

    def _update_ticks(self, *_args) -> None:
        """Name only the rows in view (and a few beyond): the axis lays out and measures every
        tick it holds on each paint, 158 names where 14 show."""
        pi = self.plot.getPlotItem()
        y0, y1 = pi.vb.viewRange()[1]
        span = (max(0, int(y0) - 4), min(len(self.rows), int(y1) + 6))
        if span == self._tick_span:
            return
        self._tick_span = span
        # Each name shortened (short_name), then elided on the left to the axis's width: pyqtgraph
        # silently drops a tick label that does not fit its axis (9 of magika's 14 rows in view
        # had no name, the slowest among them).
        fm = QFontMetricsF(label_font())
        room = pi.getAxis("left").width() - AXIS_TEXT_MARGIN
        pi.getAxis("left").setTicks([[(float(i), fm.elidedText(short_name(self.rows[i].name, 80),
                                                                Qt.TextElideMode.ElideLeft, room))
                                      for i in range(*span)]])

    def _fit_x(self, *_args) -> None:
        """Leave room right of every bar for its own label, whatever the chart's width (the
        longest label beside the top bar was not enough: "476 µs · compute (was 32 µs on NPU)" on a
        shorter bar ran past the edge of a narrow chart)."""
        pi = self.plot.getPlotItem()
        width_px = pi.vb.width()
        if width_px <= 0:
            return
        fm = QFontMetricsF(label_font())
        right = self._top
        for r in self.rows:
            end = max(r.value, r.value2 or 0.0, r.ghost or 0.0)
            if r.label and end > 0:
                share = min((fm.horizontalAdvance(r.label) + 12) / width_px, MAX_LABEL_SHARE)
                right = max(right, end / (1.0 - share))
        pi.setXRange(0, right, padding=0)

    def row_names(self) -> list[str]:
        """Op names in display order."""
        return [r.name for r in self.rows]

    def set_selected(self, names: Sequence[str]) -> None:
        """Outline the rows of ``names`` and scroll the first into view."""
        self.selected = set(names)
        self._draw_selection()
        idx = [i for i, r in enumerate(self.rows) if r.name in self.selected]
        if idx:
            vb = self.plot.getPlotItem().vb
            y0, y1 = vb.viewRange()[1]
            if not (y0 <= idx[0] <= y1):
                span = y1 - y0
                start = max(-0.6, min(idx[0] - span / 2, len(self.rows) - span - 0.4))
                vb.setYRange(start, start + span, padding=0)

    def _draw_selection(self) -> None:
        pi = self.plot.getPlotItem()
        if self._highlight is not None:
            pi.removeItem(self._highlight)
            self._highlight = None
        idx = [i for i, r in enumerate(self.rows) if r.name in self.selected]
        if not idx:
            return
        x1 = self.plot.getPlotItem().vb.viewRange()[0][1]
        self._highlight = pg.BarGraphItem(x0=[0.0] * len(idx), width=[x1] * len(idx), y=[float(i) for i in idx],
                                          height=0.96, brush=pg.mkBrush(QColor(37, 99, 235, 28)),
                                          pen=pg.mkPen(SELECTION, width=1.5))
        self._highlight.setZValue(-5)
        pi.addItem(self._highlight)
        self._bars.append(self._highlight)

    # -- mouse -----------------------------------------------------------------------------------
    def row_at(self, scene_pos: QPointF) -> int | None:
        """The row under a scene position (the bars or the name axis), or None."""
        pi = self.plot.getPlotItem()
        rect = pi.vb.sceneBoundingRect().united(pi.getAxis("left").sceneBoundingRect())
        if not rect.contains(scene_pos):
            return None
        y = pi.vb.mapSceneToView(scene_pos).y()
        i = round(y)
        return i if 0 <= i < len(self.rows) and abs(y - i) <= 0.5 else None

    def _on_scene_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        i = self.row_at(ev.scenePos())
        if i is not None:
            ev.accept()
            self.op_clicked.emit(self.rows[i].name)

    def _on_mouse_moved(self, pos: QPointF) -> None:
        i = self.row_at(pos)
        self.plot.setToolTip(self.rows[i].tooltip or self.rows[i].name if i is not None else "")

    def bar_point(self, name: str) -> QPointF:
        """Widget coordinates of the middle of ``name``'s bar (tests click there)."""
        i = self.row_names().index(name)
        self.set_selected([])
        vb = self.plot.getPlotItem().vb
        y0, y1 = vb.viewRange()[1]
        if not (y0 <= i <= y1):
            span = y1 - y0
            vb.setYRange(i - span / 2, i + span / 2, padding=0)
        r = self.rows[i]
        return view_point(self.plot, max(r.value, 1e-9) / 2, float(i))


class ShareBar(QWidget):
    """One stacked horizontal bar of time shares with a label per segment."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.parts: list[tuple[str, float, QColor]] = []
        self.setMinimumHeight(44)
        self.setToolTip("Where the inference time goes: NPU busy time, CPU fallback ops (with "
                        "conversions), and DMA transfers between the two")

    def set_parts(self, parts: Sequence[tuple[str, float, QColor]]) -> None:
        """(label, microseconds, colour) per segment."""
        self.parts = [p for p in parts if p[1] > 0]
        self.update()

    def shares(self) -> dict[str, float]:
        """Label -> fraction of the total."""
        total = sum(p[1] for p in self.parts) or 1.0
        return {p[0]: p[1] / total for p in self.parts}

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(4, 4, -4, -22)
        total = sum(x[1] for x in self.parts)
        p.setPen(Qt.PenStyle.NoPen)
        if total <= 0:
            p.setBrush(style.GRID)
            p.drawRoundedRect(r, 4, 4)
            return
        x = r.left()
        p.setFont(label_font())
        fm = p.fontMetrics()
        full = [f"{label} {100 * us / total:.0f}% ({fmt_us(us)})" for label, us, _ in self.parts]
        if sum(fm.horizontalAdvance(t) + 22 for t in full) > r.width():  # too narrow: drop the times
            full = [f"{label} {100 * us / total:.0f}%" for label, us, _ in self.parts]
        legend_x = r.left()
        for (_label, us, color), text in zip(self.parts, full):
            w = r.width() * us / total
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(color)
            p.drawRect(QRectF(x, r.top(), max(w, 1.0), r.height()))
            p.setPen(QPen(style.TEXT))
            p.setBrush(color)
            p.drawRect(QRectF(legend_x, r.bottom() + 6, 10, 10))
            p.drawText(QPointF(legend_x + 14, r.bottom() + 15), text)
            legend_x += 22 + fm.horizontalAdvance(text)
            x += w
        p.end()
