"""Overlays on the canvas: the minimap (whole graph, the visible part framed; click or drag
to move there) and the placement legend."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QMouseEvent, QPainter, QPaintEvent, QPen, QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QWidget

from app import style
from app.canvas.view import GraphView
from app.placement import FallbackCount

MINIMAP_W = 190  # the largest it gets (a big canvas)
MINIMAP_H = 240
MINIMAP_MIN = 64  # the smallest side it gets (a small canvas, a very flat or very tall graph)
MINIMAP_SHARE = 0.2  # of the canvas's width and of its height, at most: it stays in its corner
MARGIN = 10


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
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(400)
        self._timer.timeout.connect(self.rebuild)
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
        """Size it for the canvas and put it in the bottom-right corner, or the bottom-left one
        when the graph's centre would be under it there (the view's centre never is)."""
        w, h = self.box_size()
        if (w, h) != (self.width(), self.height()):
            self.setFixedSize(w, h)
            if self._pixmap is not None and not self._timer.isActive():
                self.schedule_rebuild()
        vp = self.view.viewport().geometry()
        x, y = vp.right() - w - MARGIN, vp.bottom() - h - MARGIN
        sc = self.view.graph_scene()
        if sc is not None and not self._bounds.isEmpty():
            centre = self.view.mapFromScene(sc.graph_bounds().center())
            if QRectF(x, y, w, h).contains(QPointF(centre)):
                x = vp.left() + MARGIN
        self.move(x, y)

    def schedule_rebuild(self) -> None:
        """Redraw the cached picture soon (edits come in bursts)."""
        self._timer.start()

    def rebuild(self) -> None:
        """Draw every node item as a small box into the cached pixmap."""
        sc = self.view.graph_scene()
        bounds = sc.graph_bounds() if sc is not None and not sc.is_populating else QRectF()
        if not bounds.isEmpty():
            self._aspect = bounds.width() / bounds.height()
            w, h = self.box_size()
            self.setFixedSize(w, h)
        pm = QPixmap(self.size())
        pm.fill(QColor(255, 255, 255, 235))
        self._pixmap = pm
        if sc is not None and sc.is_populating:  # the first layout is not done: draw when it is
            self._bounds = QRectF()
            self._on_view_changed()
            self.schedule_rebuild()
            return
        if bounds.isEmpty() or not sc.node_items:
            self._bounds = QRectF()
            self._on_view_changed()
            return
        self._bounds = bounds
        s = min((self.width() - 8) / bounds.width(), (self.height() - 8) / bounds.height())
        self._scale = s
        self._offset = QPointF((self.width() - bounds.width() * s) / 2, (self.height() - bounds.height() * s) / 2)
        p = QPainter(pm)
        p.setPen(Qt.PenStyle.NoPen)
        by_color: dict[str, list[QRectF]] = {}
        ox, oy = self._offset.x() - bounds.left() * s, self._offset.y() - bounds.top() * s
        status_of = sc.status_of
        for it in sc.node_items.values():  # plain arithmetic: this runs over every node
            pos = it.pos()
            r = QRectF(pos.x() * s + ox, pos.y() * s + oy, max(it.width * s, 1.5), max(it.height * s, 1.5))
            by_color.setdefault(status_of(it.node).device, []).append(r)
        for device, rects in by_color.items():
            p.setBrush(QBrush(style.PLACEMENT_COLORS.get(device, style.PLACEMENT_COLORS["unplaced"])[0]))
            p.drawRects(rects)
        p.end()
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


class LegendWidget(QFrame):
    """Colour key of the canvas: NPU, CPU fallback, not placed, problem, fused group."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("legend")
        self.setStyleSheet("QFrame#legend { background: rgba(255,255,255,235); border: 1px solid #c5cad6;"
                           " border-radius: 6px; } QLabel { color: #2b3140; font-size: 11px; }")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(8, 4, 8, 4)
        lay.setSpacing(10)
        self.labels: dict[str, QLabel] = {}
        self.source = QLabel("")  # whose placement the colours show: the compile's or the edited graph's
        self.source.setStyleSheet("font-weight: 600;")
        lay.addWidget(self.source)
        entries = [(k, style.PLACEMENT_COLORS[k][0], style.PLACEMENT_LABELS[k]) for k in ("npu", "cpu", "unplaced")]
        entries += [("error", style.ERROR, "problem"), ("group", style.GROUP_FRAME, "fused group")]
        for key, color, text in entries:
            swatch = QLabel()
            swatch.setFixedSize(12, 12)
            swatch.setStyleSheet(f"background: {color.name()}; border-radius: 3px;")
            label = QLabel(text)
            self.labels[key] = label
            lay.addWidget(swatch)
            lay.addWidget(label)
        self.adjustSize()

    def set_source(self, text: str) -> None:
        """Name the placement the colours show (e.g. "compiled" or "edited graph")."""
        self.source.setText(text)
        self.source.setVisible(bool(text))
        self.adjustSize()

    def set_counts(self, counts: dict[str, int], fallback: FallbackCount | None = None) -> None:
        """Show how many nodes each colour has (``fallback``: the CPU nodes and their compiled ops)."""
        for key, label in self.labels.items():
            base = {"error": "problem", "group": "fused group"}.get(key, style.PLACEMENT_LABELS.get(key, key))
            n = counts.get(key)
            label.setText(f"{base} {n}" if n else base)
        cpu = self.labels["cpu"]
        cpu.setToolTip(f"CPU fallback: {fallback.phrase()} of the graph run on the CPU" if fallback else "")
        self.adjustSize()
