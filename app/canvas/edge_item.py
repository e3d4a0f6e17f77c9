"""Edges: a tensor flowing from an output port to an input port, drawn as a smooth curve
through the bend points the layout chose; hovering shows the tensor's name, shape and dtype.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QPainter, QPainterPath, QPainterPathStroker, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsSimpleTextItem, QStyleOptionGraphicsItem

from app import style
from app.canvas.node_item import value_label

if TYPE_CHECKING:
    from app.canvas.layout import LayoutResult
    from app.canvas.snapshot import GraphSnapshot


def box_size(key: Any) -> tuple[float, float]:
    """(width, height) of the item of a layout key (an IO item for ``("in"/"out", ...)``)."""
    return (style.IO_WIDTH, style.IO_HEIGHT) if isinstance(key, tuple) else (style.NODE_WIDTH, style.NODE_HEIGHT)


def edge_path(snapshot: GraphSnapshot, result: LayoutResult, j: int) -> tuple[QPainterPath, QRectF]:
    """The curve (and its bounding rectangle) of edge ``j`` of a laid-out snapshot: what
    ``EdgeItem.refresh`` would compute from the items, computed from the layout (QPainterPath
    is usable off the GUI thread too)."""
    keys, positions, offsets = snapshot.keys, result.positions, snapshot.offsets
    u, v = snapshot.data.edges[j]
    ku, kv = keys[u], keys[v]
    (wu, hu), (wv, _hv) = box_size(ku), box_size(kv)
    dxu, dyu = offsets.get(ku, (0.0, 0.0))
    dxv, dyv = offsets.get(kv, (0.0, 0.0))
    out_dx, in_dx = snapshot.data.ports[j] if snapshot.data.ports else (0.0, 0.0)
    a = QPointF(positions[u][0] + dxu + wu / 2 + out_dx, positions[u][1] + dyu + hu)
    b = QPointF(positions[v][0] + dxv + wv / 2 + in_dx, positions[v][1] + dyv)
    path = smooth_path([a, *(QPointF(x, y) for x, y in result.routes.get((u, v), ())), b])
    return path, path.controlPointRect().adjusted(-6, -6, 6, 6)


def edge_paths(snapshot: GraphSnapshot, result: LayoutResult) -> dict[tuple[Any, int], tuple[QPainterPath, QRectF]]:
    """``edge_path`` of every edge, by input slot."""
    return {snapshot.slots[j]: edge_path(snapshot, result, j) for j in range(len(snapshot.data.edges))}


def smooth_path(points: list[QPointF]) -> QPainterPath:
    """Cubic segments with vertical tangents at every point (a top-to-bottom flow)."""
    path = QPainterPath(points[0])
    for a, b in itertools.pairwise(points):
        dy = max(abs(b.y() - a.y()) * 0.5, 12.0)
        path.cubicTo(QPointF(a.x(), a.y() + dy), QPointF(b.x(), b.y() - dy), b)
    return path


class EdgeItem(QGraphicsItem):
    """One input slot's connection: ``source`` output ``out_index`` -> ``target`` input ``in_index``."""

    def __init__(self, source: QGraphicsItem, out_index: int, target: QGraphicsItem, in_index: int,
                 route: list[tuple[float, float]] | None = None,
                 path: tuple[QPainterPath, QRectF] | None = None) -> None:
        super().__init__()
        self.source = source
        self.out_index = out_index
        self.target = target
        self.in_index = in_index
        self.route = route or []
        self._hover = False
        self._path = QPainterPath()
        self._bounds = QRectF()
        self._shape: QPainterPath | None = None
        self.setAcceptHoverEvents(True)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable)
        if path is not None:  # computed by the layout worker (edge_paths)
            self._path, self._bounds = path
        else:
            self.refresh()

    def value(self):
        """The IR value this edge carries (read from the target, never stored)."""
        t = self.target
        if getattr(t, "kind", "") == "node":
            return t.node.input(self.in_index)  # type: ignore[attr-defined]
        return getattr(t, "value", None)

    def refresh(self) -> None:
        """Recompute the curve after an end moved."""
        a = self.source.port_scene_pos(False, self.out_index)  # type: ignore[attr-defined]
        b = self.target.port_scene_pos(True, self.in_index)  # type: ignore[attr-defined]
        pts = [a, *(QPointF(x, y) for x, y in self.route), b]
        self.prepareGeometryChange()
        self._path = smooth_path(pts)
        self._bounds = self._path.controlPointRect().adjusted(-6, -6, 6, 6)  # asked for often, by C++
        self._shape = None

    def path(self) -> QPainterPath:
        """The drawn curve, in scene coordinates."""
        return self._path

    def drop_route(self) -> None:
        """Forget the layout's bend points (an end was moved by hand)."""
        if self.route:
            self.route = []

    def boundingRect(self) -> QRectF:
        return self._bounds

    def shape(self) -> QPainterPath:
        if self._shape is None:
            s = QPainterPathStroker()
            s.setWidth(10)
            self._shape = s.createStroke(self._path)
        return self._shape

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())  # type: ignore[attr-defined]
        hot = self._hover or self.isSelected()
        color = style.EDGE_HOVER if hot else style.EDGE
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.setPen(QPen(color, (2.6 if hot else 1.4) if lod >= 0.3 else 0))
        painter.drawPath(self._path)
        if lod >= 0.45:
            # Arrow head at the input port.
            end = self._path.pointAtPercent(1.0)
            painter.setBrush(QBrush(color))
            painter.setPen(Qt.PenStyle.NoPen)
            head = QPainterPath(end)
            head.lineTo(end + QPointF(-4.5, -8))
            head.lineTo(end + QPointF(4.5, -8))
            head.closeSubpath()
            painter.drawPath(head)

    def hoverEnterEvent(self, event) -> None:
        self._hover = True
        scene = self.scene()
        if scene is not None and hasattr(scene, "show_edge_label"):
            scene.show_edge_label(self, event.scenePos())
        self.update()

    def hoverMoveEvent(self, event) -> None:
        scene = self.scene()
        if scene is not None and hasattr(scene, "show_edge_label"):
            scene.show_edge_label(self, event.scenePos())

    def hoverLeaveEvent(self, event) -> None:
        self._hover = False
        scene = self.scene()
        if scene is not None and hasattr(scene, "hide_edge_label"):
            scene.hide_edge_label(self)
        self.update()

    def label(self) -> str:
        return value_label(self.value())


class EdgeLabelItem(QGraphicsSimpleTextItem):
    """The floating label of the hovered edge (one per scene)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFont(style.font(8.5, bold=True))
        self.setBrush(QBrush(style.TEXT))
        self.setZValue(50)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIgnoresTransformations)
        self.owner: EdgeItem | None = None
        self.hide()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        r = self.boundingRect().adjusted(-5, -3, 5, 3)
        painter.setPen(QPen(style.EDGE_HOVER, 1))
        painter.setBrush(QBrush(style.PORT_FILL))
        painter.drawRoundedRect(r, 4, 4)
        super().paint(painter, option, widget)
