"""The overview drawing: zoomed far out, one item paints every node as a coloured box and
every edge as a polyline, in a few batched QPainter calls (level of detail for huge graphs).

It reads positions from the scene's items and colours from the document's analysis when it
is rebuilt; it holds only those drawing primitives, which are dropped on any change.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from PySide6.QtCore import QLineF, QRectF
from PySide6.QtGui import QBrush, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem

from app import style

if TYPE_CHECKING:
    from app.canvas.scene import GraphScene


class OverviewItem(QGraphicsItem):
    """Batched boxes and lines of the whole graph (see the module docstring)."""

    def __init__(self, scene: GraphScene) -> None:
        super().__init__()
        self._scene = scene
        self._rects: dict[str, list[QRectF]] = {}
        self._errors: list[QRectF] = []
        self._lines: list[QLineF] = []
        self._bounds = QRectF()
        self._stale = True
        self.setZValue(-5)

    def invalidate(self) -> None:
        """Drop the cached primitives (rebuilt on the next paint while visible)."""
        self._stale = True
        if self.isVisible():
            self.update()

    def rebuild(self, geometry: bool = True) -> None:
        """Collect boxes and edge segments from the scene's items."""
        sc = self._scene
        rects: dict[str, list[QRectF]] = {k: [] for k in style.PLACEMENT_COLORS}
        errors: list[QRectF] = []
        for it in sc.node_items.values():
            r = QRectF(it.pos().x(), it.pos().y(), it.width, it.height)
            st = sc.status_of(it.node)
            rects.setdefault(st.device, []).append(r)
            if st.errors:
                errors.append(r)
        for it in (*sc.input_items.values(), *sc.output_items.values()):
            rects["unplaced"].append(QRectF(it.pos().x(), it.pos().y(), it.width, it.height))
        pop = sc.pending_layout
        if pop is not None:  # items still to make are drawn where the layout puts them
            nodes = {id(n): n for n in sc.graph.nodes}
            for key, r in pop.pending_boxes():
                node = nodes.get(key)
                st = sc.status_of(node) if node is not None else None
                rects.setdefault(st.device if st is not None else "unplaced", []).append(r)
                if st is not None and st.errors:
                    errors.append(r)
        lines: list[QLineF] = pop.pending_lines() if pop is not None else []
        for e in sc.edges.values():
            a = e.source.port_scene_pos(False, e.out_index)  # type: ignore[attr-defined]
            pts = [a, *(a.__class__(x, y) for x, y in e.route), e.target.port_scene_pos(True, e.in_index)]  # type: ignore[attr-defined]
            lines.extend(QLineF(p, q) for p, q in itertools.pairwise(pts))
        if geometry:
            self.prepareGeometryChange()
        self._rects, self._errors, self._lines = rects, errors, lines
        self._bounds = sc.graph_bounds()
        self._stale = False

    def boundingRect(self) -> QRectF:
        return self._bounds.adjusted(-10, -10, 10, 10)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        if self._stale:
            self.rebuild(geometry=False)
        painter.setPen(QPen(style.EDGE, 0))
        painter.drawLines(self._lines)
        for device, rects in self._rects.items():
            strong, _ = style.PLACEMENT_COLORS.get(device, style.PLACEMENT_COLORS["unplaced"])
            painter.setPen(QPen(strong.darker(120), 0))
            painter.setBrush(QBrush(strong))
            painter.drawRects(rects)
        if self._errors:
            painter.setPen(QPen(style.ERROR, 0))
            painter.setBrush(QBrush(style.ERROR))
            painter.drawRects(self._errors)
