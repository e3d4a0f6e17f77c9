"""Ports: where edges attach to a node. Output ports start a connection drag.

A port knows its node item, its direction and its index; it holds no model state (whether
the input is a constant or connected is read from the node when painting).
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QPainter, QPen
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsSceneHoverEvent,
    QGraphicsSceneMouseEvent,
    QStyleOptionGraphicsItem,
)

from app import style

PORT_HIT = 7.0  # half size of the clickable square around a port


def port_x(width: float, count: int, index: int) -> float:
    """x of port ``index`` of ``count`` spread over a node of ``width``."""
    if count <= 1:
        return width / 2
    margin = min(26.0, width / (count + 1))
    return margin + (width - 2 * margin) * index / (count - 1)


class PortItem(QGraphicsItem):
    """One input (top edge) or output (bottom edge) port of a node or IO item."""

    def __init__(self, owner: QGraphicsItem, is_input: bool, index: int) -> None:
        super().__init__(owner)
        self.owner = owner
        self.is_input = is_input
        self.index = index
        self._hover = False
        self.setAcceptHoverEvents(True)
        self.setZValue(2)
        self.setCursor(Qt.CursorShape.CrossCursor if not is_input else Qt.CursorShape.PointingHandCursor)

    def boundingRect(self) -> QRectF:
        return QRectF(-PORT_HIT, -PORT_HIT, 2 * PORT_HIT, 2 * PORT_HIT)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())  # type: ignore[attr-defined]
        if lod < 0.45 or not self._hover:
            return  # the node paints the resting port; the item adds the hover highlight
        r = style.PORT_RADIUS * (1.35 if self._hover else 1.0)
        const = self.is_input and self.owner.input_is_constant(self.index)  # type: ignore[attr-defined]
        painter.setPen(QPen(style.EDGE_HOVER if self._hover else style.PORT_BORDER, 1.2))
        if const:
            painter.setBrush(QBrush(style.CONST_PORT))
            painter.drawRect(QRectF(-r * 0.8, -r * 0.8, 1.6 * r, 1.6 * r))
        else:
            painter.setBrush(QBrush(style.EDGE_HOVER if self._hover else style.PORT_FILL))
            painter.drawEllipse(QPointF(0, 0), r, r)

    def hoverEnterEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self._hover = True
        self.setToolTip(self.owner.port_tooltip(self.is_input, self.index))  # type: ignore[attr-defined]
        self.update()

    def hoverLeaveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self._hover = False
        self.update()

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        scene = self.scene()
        if event.button() == Qt.MouseButton.LeftButton and not self.is_input and hasattr(scene, "begin_connection"):
            scene.begin_connection(self, event.scenePos())
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        scene = self.scene()
        if hasattr(scene, "update_connection"):
            scene.update_connection(event.scenePos())

    def mouseReleaseEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        scene = self.scene()
        if hasattr(scene, "finish_connection"):
            scene.finish_connection(event.scenePos())
