"""The overview drawing: zoomed far out, one item paints every node as a coloured box and
every edge as a line, in a few batched QPainter calls (level of detail for huge graphs).

Its geometry is numbers: the boxes and edge segments of the items that exist, and those the
layout keeps for the nodes without items (app/canvas/populate.py, computed once per layout),
as numpy arrays. A paint builds rectangles only for what the exposed rectangle shows and asks
each of those nodes for its colour then, so zooming out on 50,000 nodes costs what the view
shows, not a pass over the graph. Any change drops the arrays (rebuilt on the next paint).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
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
        self._boxes = np.zeros((0, 4))  # x, y, width, height
        self._owners: list = []  # per box: its node (None for graph inputs and outputs)
        self._segments = np.zeros((0, 4))  # x1, y1, x2, y2
        self._bounds = QRectF()
        self._stale = True
        self.setZValue(-5)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemUsesExtendedStyleOption)  # exposedRect

    def invalidate(self) -> None:
        """Drop the cached geometry (rebuilt on the next paint while visible)."""
        self._stale = True
        if self.isVisible():
            self.update()

    @property
    def box_count(self) -> int:
        """How many boxes the overview draws (every node, graph input and output)."""
        return len(self._owners)

    def rebuild(self, geometry: bool = True) -> None:
        """Collect the boxes and edge segments of the items and of the layout's pending nodes."""
        sc = self._scene
        rows: list[tuple[float, float, float, float]] = []
        owners: list = []
        for it in sc.node_items.values():
            rows.append((it.pos().x(), it.pos().y(), it.width, it.height))
            owners.append(it.node)
        for it in (*sc.input_items.values(), *sc.output_items.values()):
            rows.append((it.pos().x(), it.pos().y(), it.width, it.height))
            owners.append(None)
        lines: list[tuple[float, float, float, float]] = []
        for e in sc.edges.values():
            a = e.source.port_scene_pos(False, e.out_index)  # type: ignore[attr-defined]
            z = e.target.port_scene_pos(True, e.in_index)  # type: ignore[attr-defined]
            pts = [(a.x(), a.y()), *e.route, (z.x(), z.y())]  # type: ignore[attr-defined]
            lines.extend((p[0], p[1], q[0], q[1]) for p, q in itertools.pairwise(pts))
        boxes = [np.asarray(rows, dtype=float).reshape(-1, 4)]
        segments = [np.asarray(lines, dtype=float).reshape(-1, 4)]
        pop = sc.pending_layout
        if pop is not None:  # nodes without items are drawn where the layout puts them
            idx = np.flatnonzero(pop.pending)
            boxes.append(pop.item_boxes()[idx])
            nodes = sc._pop_context[0]
            owners.extend(nodes[i] for i in idx.tolist())
            seg, of_edge = pop.edge_segments()
            segments.append(seg[pop.edge_pending[of_edge]])
        if geometry:
            self.prepareGeometryChange()
        self._boxes, self._owners = np.concatenate(boxes), owners
        self._segments = np.concatenate(segments)
        self._bounds = sc.graph_bounds()
        self._stale = False

    def boundingRect(self) -> QRectF:
        return self._bounds.adjusted(-10, -10, 10, 10)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        if self._stale:
            self.rebuild(geometry=False)
        r = option.exposedRect  # type: ignore[attr-defined]
        inverse, ok = painter.worldTransform().inverted()
        device = painter.device()
        if ok and device is not None:  # a render into a picture exposes the whole item: its device's area
            r = r.intersected(inverse.mapRect(QRectF(0, 0, device.width(), device.height())))
        left, top, right, bottom = r.left(), r.top(), r.right(), r.bottom()
        s = self._segments
        near = ((np.minimum(s[:, 0], s[:, 2]) <= right) & (np.maximum(s[:, 0], s[:, 2]) >= left)
                & (np.minimum(s[:, 1], s[:, 3]) <= bottom) & (np.maximum(s[:, 1], s[:, 3]) >= top))
        painter.setPen(QPen(style.EDGE, 0))
        painter.drawLines([QLineF(*row) for row in s[near].tolist()])
        b = self._boxes
        shown = np.flatnonzero((b[:, 0] <= right) & (b[:, 0] + b[:, 2] >= left)
                               & (b[:, 1] <= bottom) & (b[:, 1] + b[:, 3] >= top))
        by_device: dict[str, list[QRectF]] = {}
        errors: list[QRectF] = []
        status_of, owners, node_alive = self._scene.status_of, self._owners, self._scene.graph
        for i, row in zip(shown.tolist(), b[shown].tolist()):
            rect = QRectF(*row)
            node = owners[i]
            st = status_of(node) if node is not None and node.graph is node_alive else None
            by_device.setdefault(st.device if st is not None else "unplaced", []).append(rect)
            if st is not None and st.errors:
                errors.append(rect)
        for device, rects in by_device.items():
            strong, _ = style.PLACEMENT_COLORS.get(device, style.PLACEMENT_COLORS["unplaced"])
            painter.setPen(QPen(strong.darker(120), 0))
            painter.setBrush(QBrush(strong))
            painter.drawRects(rects)
        if errors:
            painter.setPen(QPen(style.ERROR, 0))
            painter.setBrush(QBrush(style.ERROR))
            painter.drawRects(errors)
