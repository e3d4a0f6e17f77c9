"""Overlays on the canvas: the minimap (whole graph, the visible part framed; click or drag
to move there) and the placement legend."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QMouseEvent, QPainter, QPaintEvent, QPen, QPixmap
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QWidget

from app import style
from app.canvas.view import GraphView

MINIMAP_W = 190
MINIMAP_H = 240


class MinimapWidget(QWidget):
    """A cached drawing of every node as a dot, plus the view's rectangle."""

    def __init__(self, view: GraphView) -> None:
        super().__init__(view)
        self.view = view
        self.setFixedSize(MINIMAP_W, MINIMAP_H)
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

    def _on_view_changed(self) -> None:
        """Show the minimap only when part of the graph is out of view."""
        sc = self.view.graph_scene()
        if sc is not None and not self._bounds.isEmpty():
            self.setVisible(not self.view.visible_scene_rect().contains(sc.graph_bounds()))
        self.update()

    def schedule_rebuild(self) -> None:
        """Redraw the cached picture soon (edits come in bursts)."""
        self._timer.start()

    def rebuild(self) -> None:
        """Draw every node item as a small box into the cached pixmap."""
        sc = self.view.graph_scene()
        pm = QPixmap(self.size())
        pm.fill(QColor(255, 255, 255, 235))
        self._pixmap = pm
        if sc is None:
            self.update()
            return
        bounds = sc.graph_bounds()
        if bounds.isEmpty():
            self.update()
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

    def set_counts(self, counts: dict[str, int]) -> None:
        """Show how many nodes each colour has."""
        for key, label in self.labels.items():
            base = {"error": "problem", "group": "fused group"}.get(key, style.PLACEMENT_LABELS.get(key, key))
            n = counts.get(key)
            label.setText(f"{base} {n}" if n else base)
        self.adjustSize()
