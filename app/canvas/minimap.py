"""Overlays on the canvas: the minimap (whole graph, the visible part framed; click or drag
to move there) and the placement legend."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PySide6.QtCore import QPointF, QRect, QRectF, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QImage, QMouseEvent, QPainter, QPaintEvent, QPen, QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QWidget

from app import style
from app.canvas.view import GraphView
from app.placement import FallbackCount
from app.stale import STALE_CSS, STALE_TEXT, STALE_TIP

MINIMAP_W = 190  # the largest it gets (a big canvas)
MINIMAP_H = 240
MINIMAP_MIN = 64  # the smallest side it gets (a small canvas, a very flat or very tall graph)
MINIMAP_SHARE = 0.2  # of the canvas's width and of its height, at most: it stays in its corner
MARGIN = 10


CHUNK = 300  # node items drawn per event-loop turn


@dataclass
class _Build:
    """A minimap picture in the making: the boxes still to draw (an iterator), the picture so far
    (each turn draws its boxes into it: 50,000 rectangles drawn at the end held the GUI thread
    80-110 ms) and the node centres."""

    scene: Any
    boxes: Iterator[tuple[float, float, float, float, Any]]
    bounds: QRectF
    size: tuple[int, int]
    scale: float
    offset: QPointF
    image: QImage
    dots: list[float] = field(default_factory=list)  # node centres, x and y in turn (minimap coordinates)


class MinimapWidget(QWidget):
    """A cached drawing of every node as a dot, plus the view's rectangle."""

    def __init__(self, view: GraphView) -> None:
        super().__init__(view)
        self.view = view
        self.setFixedSize(MINIMAP_W, MINIMAP_H)
        self._aspect = MINIMAP_W / MINIMAP_H  # width / height of the graph drawn (of the box until one is)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._pixmap: QPixmap | None = None
        self._bounds = QRectF()
        self._scale = 1.0
        self._offset = QPointF()
        self._dots = np.zeros((0, 2))  # the picture's node centres (minimap coordinates)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(400)
        self._timer.timeout.connect(self.rebuild)
        self._build: _Build | None = None  # the picture being drawn, a chunk per event-loop turn
        self._step_timer = QTimer(self)
        self._step_timer.setSingleShot(True)
        self._step_timer.setInterval(0)
        self._step_timer.timeout.connect(self._step)
        view.view_changed.connect(self._on_view_changed)
        self.hide()  # nothing to show before the first layout: no empty frame

    def _on_view_changed(self) -> None:
        """Show the minimap only when it has a picture of the graph and part of the graph is out of view."""
        sc = self.view.graph_scene()
        if sc is None or self._bounds.isEmpty() or self._pixmap is None:
            self.hide()
        else:
            self.setVisible(not self.view.visible_scene_rect().contains(sc.graph_bounds()))
            self.place()
        self.update()

    def box_size(self) -> tuple[int, int]:
        """The minimap's size for the canvas's current size: at most MINIMAP_SHARE of its width
        and of its height (and MINIMAP_W x MINIMAP_H), shaped like the graph."""
        vp = self.view.viewport().size()
        max_w = max(MINIMAP_MIN, min(MINIMAP_W, int(vp.width() * MINIMAP_SHARE)))
        max_h = max(MINIMAP_MIN, min(MINIMAP_H, int(vp.height() * MINIMAP_SHARE)))
        w, h = max_w, int(max_w / self._aspect)
        if h > max_h:
            w, h = int(max_h * self._aspect), max_h
        return max(MINIMAP_MIN, w), max(MINIMAP_MIN, h)

    def place(self) -> None:
        """Size it for the canvas and put it in the bottom corner that hides fewer nodes (the
        bottom-right one on a tie), never over the graph's centre (the view's centre never is)."""
        w, h = self.box_size()
        if (w, h) != (self.width(), self.height()):
            self.setFixedSize(w, h)
            if self._pixmap is not None and not self._timer.isActive():
                self.schedule_rebuild()
        vp = self.view.viewport().geometry()
        y = vp.bottom() - h - MARGIN
        corners = [vp.right() - w - MARGIN, vp.left() + MARGIN]
        sc = self.view.graph_scene()
        if sc is not None and not self._bounds.isEmpty():
            centre = QPointF(self.view.mapFromScene(sc.graph_bounds().center())) + QPointF(vp.topLeft())

            def cost(x: int) -> tuple[bool, int]:
                box = QRect(x - vp.left(), y - vp.top(), w, h)  # in viewport coordinates
                return QRectF(x, y, w, h).contains(centre), self._nodes_under(box)

            corners.sort(key=cost)
        self.move(corners[0], y)

    def _nodes_under(self, box: QRect) -> int:
        """How many of the nodes in the picture lie under ``box`` (viewport coordinates),
        counted from the picture's own node centres: asking the scene would call every item's
        bounding rectangle under the corner in Python (284 ms on 50,000 nodes)."""
        dots = self._dots
        if dots.size == 0:
            return 0
        r = self.view.mapToScene(box).boundingRect()
        a, b = self._map(r.topLeft()), self._map(r.bottomRight())
        xs, ys = dots[:, 0], dots[:, 1]
        return int(np.count_nonzero((xs >= a.x()) & (xs <= b.x()) & (ys >= a.y()) & (ys <= b.y())))

    def schedule_rebuild(self) -> None:
        """Redraw the cached picture soon (edits come in bursts)."""
        self._timer.start()

    def rebuild(self) -> None:
        """Draw every node item as a small box into a new picture, CHUNK items per event-loop
        turn (light_densenet121's 1,746 items took 36-83 ms in one go on a busy machine); the
        old picture stays up until the new one is complete."""
        self._build = None
        self._step_timer.stop()
        sc = self.view.graph_scene()
        bounds = sc.graph_bounds() if sc is not None and not sc.is_populating else QRectF()
        if sc is not None and sc.is_populating:  # the first layout is not done: draw when it is
            self._bounds = QRectF()
            self._on_view_changed()
            self.schedule_rebuild()
            return
        # A large graph's items are made on demand: the layout's boxes are read as they are drawn.
        boxes = sc.iter_node_boxes() if sc is not None else iter(())
        first = next(boxes, None)
        if bounds.isEmpty() or first is None:
            self._pixmap = QPixmap(self.size())
            self._pixmap.fill(QColor(255, 255, 255, 235))
            self._bounds = QRectF()
            self._on_view_changed()
            return
        self._aspect = bounds.width() / bounds.height()
        w, h = self.box_size()
        s = min((w - 8) / bounds.width(), (h - 8) / bounds.height())
        offset = QPointF((w - bounds.width() * s) / 2, (h - bounds.height() * s) / 2)
        image = QImage(w, h, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(QColor(255, 255, 255, 235))
        self._build = _Build(sc, itertools.chain((first,), boxes), bounds, (w, h), s, offset, image)
        self._step_timer.start()

    @property
    def building(self) -> bool:
        """A new picture is being drawn (or will be soon)."""
        return self._build is not None or self._timer.isActive()

    def finish(self) -> None:
        """Complete the picture now (a screenshot is taken next)."""
        if self._timer.isActive():
            self._timer.stop()
            self.rebuild()
        while self._build is not None:
            self._step(sys.maxsize)

    def _step(self, chunk: int = 0) -> None:
        b = self._build
        if b is None:
            return
        if self.view.graph_scene() is not b.scene:  # another document or view: start over
            self.rebuild()
            return
        s = b.scale
        ox, oy = b.offset.x() - b.bounds.left() * s, b.offset.y() - b.bounds.top() * s
        status_of = b.scene.status_of
        by_color: dict[str, list[QRectF]] = {}
        count = 0
        try:
            for x, y, bw, bh, node in itertools.islice(b.boxes, chunk or CHUNK):  # plain arithmetic: this runs over every node
                r = QRectF(x * s + ox, y * s + oy, max(bw * s, 1.5), max(bh * s, 1.5))
                by_color.setdefault(status_of(node).device, []).append(r)
                b.dots.append(x * s + ox + bw * s / 2)
                b.dots.append(y * s + oy + bh * s / 2)
                count += 1
        except RuntimeError:  # an item was deleted meanwhile (an edit): its rebuild follows
            self._build = None
            self.schedule_rebuild()
            return
        if by_color:
            p = QPainter(b.image)
            p.setPen(Qt.PenStyle.NoPen)
            for device, rects in by_color.items():
                p.setBrush(QBrush(style.PLACEMENT_COLORS.get(device, style.PLACEMENT_COLORS["unplaced"])[0]))
                p.drawRects(rects)
            p.end()
        if count == (chunk or CHUNK):  # there may be more
            self._step_timer.start()
            return
        self._build = None
        w, h = b.size
        self.setFixedSize(w, h)
        self._pixmap, self._bounds, self._scale, self._offset = QPixmap.fromImage(b.image), b.bounds, s, b.offset
        self._dots = np.fromiter(b.dots, dtype=float, count=len(b.dots)).reshape(-1, 2)
        self._on_view_changed()

    def _map(self, pt: QPointF) -> QPointF:
        return QPointF((pt.x() - self._bounds.left()) * self._scale + self._offset.x(),
                       (pt.y() - self._bounds.top()) * self._scale + self._offset.y())

    def _unmap(self, pt: QPointF) -> QPointF:
        return QPointF((pt.x() - self._offset.x()) / self._scale + self._bounds.left(),
                       (pt.y() - self._offset.y()) / self._scale + self._bounds.top())

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setPen(QPen(QColor("#c5cad6"), 1))
        p.setBrush(QBrush(QColor(255, 255, 255, 235)))
        p.drawRect(self.rect().adjusted(0, 0, -1, -1))
        if self._pixmap is not None:
            p.drawPixmap(0, 0, self._pixmap)
        if not self._bounds.isEmpty():
            vis = self.view.visible_scene_rect()
            r = QRectF(self._map(vis.topLeft()), self._map(vis.bottomRight())).intersected(QRectF(self.rect()))
            p.setPen(QPen(style.SELECTION, 1.5))
            p.setBrush(QBrush(QColor(37, 99, 235, 30)))
            p.drawRect(r)
        p.end()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self._jump(event.position())

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if event.buttons() & Qt.MouseButton.LeftButton:
            self._jump(event.position())

    def _jump(self, pos: QPointF) -> None:
        if not self._bounds.isEmpty():
            self.view.centerOn(self._unmap(pos))
            self.update()


OPTIONAL_KEYS = ("error", "group")  # legend keys that step aside when they count nothing and room is short


class LegendWidget(QFrame):
    """Colour key of the canvas: NPU, CPU fallback, not placed, optimized away, problem, fused group."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("legend")
        self.setStyleSheet("QFrame#legend { background: rgba(255,255,255,235); border: 1px solid #c5cad6;"
                           " border-radius: 6px; } QLabel { color: #2b3140; font-size: 11px; }")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(8, 4, 8, 4)
        lay.setSpacing(10)
        self.labels: dict[str, QLabel] = {}
        self.swatches: dict[str, QLabel] = {}
        self._counts: dict[str, int] = {}
        self.source = QLabel("")  # whose placement the colours show: the compile's or the edited graph's
        self.source.setStyleSheet("font-weight: 600;")
        lay.addWidget(self.source)
        self.stale = QLabel(STALE_TEXT)  # the colours and counts are of the compile before the last change
        self.stale.setObjectName("staleMark")
        self.stale.setStyleSheet(STALE_CSS)
        self.stale.setToolTip(STALE_TIP)
        self.stale.hide()
        self.stale.ensurePolished()
        lay.addWidget(self.stale)
        entries = [(k, style.PLACEMENT_COLORS[k][0], style.PLACEMENT_LABELS[k]) for k in ("npu", "cpu", "unplaced", "removed")]
        entries += [("error", style.ERROR, "problem"), ("group", style.GROUP_FRAME, "fused group")]
        for key, color, text in entries:
            swatch = QLabel()
            swatch.setFixedSize(12, 12)
            swatch.setStyleSheet(f"background: {color.name()}; border-radius: 3px;")
            label = QLabel(text)
            self.labels[key] = label
            self.swatches[key] = swatch
            lay.addWidget(swatch)
            lay.addWidget(label)
        self._set_entry_visible("removed", False)
        self.adjustSize()

    def set_source(self, text: str) -> None:
        """Name the placement the colours show (e.g. "compiled" or "edited graph")."""
        self.source.setText(text)
        self.source.setVisible(bool(text))
        self._refit()

    def set_stale(self, stale: bool) -> None:
        """Mark the colours and counts as being recomputed (app/stale.py decides when)."""
        if stale != self.stale.isVisibleTo(self):
            self.stale.setVisible(stale)
            self._refit()

    def fit_width(self, width: int) -> None:
        """Wider than ``width`` (a narrow canvas): the keys with nothing to count step aside
        ("problem", "fused group" with no node), so the legend is never cut at the canvas edge."""
        for key in OPTIONAL_KEYS:
            self._set_entry_visible(key, True)
        self.adjustSize()
        for key in OPTIONAL_KEYS[::-1]:
            if self.sizeHint().width() <= width:
                break
            if not self._counts.get(key):
                self._set_entry_visible(key, False)
                self.adjustSize()

    def _set_entry_visible(self, key: str, visible: bool) -> None:
        self.labels[key].setVisible(visible)
        self.swatches[key].setVisible(visible)

    def set_counts(self, counts: dict[str, int], fallback: FallbackCount | None = None) -> None:
        """Show how many nodes each colour has (``fallback``: the CPU nodes and their compiled ops)."""
        self._counts = dict(counts)
        for key, label in self.labels.items():
            base = {"error": "problem", "group": "fused group"}.get(key, style.PLACEMENT_LABELS.get(key, key))
            n = counts.get(key)
            label.setText(f"{base} {n}" if n else base)
        self._set_entry_visible("removed", bool(counts.get("removed")))  # only when the optimizer removed some
        cpu = self.labels["cpu"]
        cpu.setToolTip(f"CPU fallback: {fallback.phrase()} of the graph run on the CPU" if fallback else "")
        self._refit()

    def _refit(self) -> None:
        parent = self.parentWidget()
        if isinstance(parent, GraphView):
            self.fit_width(parent.viewport().width() - 2 * MARGIN)
        else:
            self.adjustSize()
