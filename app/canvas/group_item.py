"""Fused groups: a node the optimizer made from several (``node.meta["provenance"]``) is drawn
inside a frame; clicking the frame's title expands it to show the original ops beside the
fused one, so fused and unfused can be compared side by side.
"""

from __future__ import annotations

import functools
from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsSceneMouseEvent, QStyleOptionGraphicsItem

from app import style
from app.canvas.node_item import canvas_font

MARGIN = 8.0
TITLE = 16.0
CHIP_W = 150.0
CHIP_H = 30.0
CHIP_GAP = 10.0


@functools.cache
def _fonts() -> tuple[QFont, QFont, QFontMetricsF]:
    """Title font, chip font and its metrics, made on first paint (after the QApplication)."""
    chip = canvas_font(7.5)
    return canvas_font(7.5, bold=True), chip, QFontMetricsF(chip)



def provenance_of(node: Any) -> list[str]:
    """Names of the original nodes a fused node came from (accepts names or records)."""
    prov = node.meta.get("provenance") if hasattr(node, "meta") else None
    if not prov or not isinstance(prov, (list, tuple)):
        return []
    out = []
    for p in prov:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, dict) and "name" in p:
            out.append(str(p["name"]))
    if out == [getattr(node, "name", None)]:
        return []  # rewritten in place, not a fusion of several ops
    return out


class GroupItem(QGraphicsItem):
    """The frame of a fused node (a child of its NodeItem, drawn behind it)."""

    def __init__(self, node_item: QGraphicsItem, originals: list[tuple[str, str]]) -> None:
        super().__init__(node_item)
        self.node_item = node_item
        self.originals = originals  # (op_type, name) of each original op, in order
        self.expanded = False
        self.setZValue(-1)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemStacksBehindParent)
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def extra_size(self) -> tuple[float, float]:
        """How much the frame adds to the node's width and height (for the layout)."""
        w, h = 2 * MARGIN, MARGIN + TITLE
        if self.expanded:
            chips_h = len(self.originals) * (CHIP_H + CHIP_GAP) - CHIP_GAP
            w += CHIP_W + 3 * MARGIN
            h = max(h, chips_h + TITLE + 2 * MARGIN - self.node_item.height)  # type: ignore[attr-defined]
        return w, h

    def frame_rect(self) -> QRectF:
        ni = self.node_item
        w, h = self.extra_size()
        return QRectF(-MARGIN, -TITLE, ni.width + w, ni.height + h)  # type: ignore[attr-defined]

    def boundingRect(self) -> QRectF:
        return self.frame_rect().adjusted(-2, -2, 2, 2)

    def title_rect(self) -> QRectF:
        r = self.frame_rect()
        return QRectF(r.left(), r.top(), r.width(), TITLE)

    def chip_rect(self, i: int) -> QRectF:
        x = self.node_item.width + 2 * MARGIN  # type: ignore[attr-defined]
        return QRectF(x, 4 + i * (CHIP_H + CHIP_GAP), CHIP_W, CHIP_H)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())  # type: ignore[attr-defined]
        r = self.frame_rect()
        pen = QPen(style.GROUP_FRAME, 1.3, Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.setBrush(QBrush(style.GROUP_FILL))
        painter.drawRoundedRect(r, 9, 9)
        if lod < 0.45:
            return
        painter.setPen(style.GROUP_FRAME)
        painter.setFont(_fonts()[0])
        arrow = "▾" if self.expanded else "▸"
        ops = "+".join(op for op, _ in self.originals)
        painter.drawText(self.title_rect().adjusted(8, 0, -6, 0), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         f"{arrow} fused {style.count(len(self.originals), 'op')}: {ops}")
        if not self.expanded:
            return
        painter.setFont(_fonts()[1])
        for i, (op, name) in enumerate(self.originals):
            c = self.chip_rect(i)
            painter.setPen(QPen(style.GROUP_FRAME, 1))
            painter.setBrush(QBrush(style.PORT_FILL))
            painter.drawRoundedRect(c, 5, 5)
            painter.setPen(style.TEXT)
            painter.drawText(c.adjusted(6, 2, -6, -CHIP_H / 2), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, op)
            painter.setPen(style.TEXT_DIM)
            painter.drawText(c.adjusted(6, CHIP_H / 2 - 2, -6, -2), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                             _fonts()[2].elidedText(name, Qt.TextElideMode.ElideMiddle, CHIP_W - 12))
            if i:
                prev = self.chip_rect(i - 1)
                painter.setPen(QPen(style.GROUP_FRAME, 1))
                painter.drawLine(QPointF(c.center().x(), prev.bottom()), QPointF(c.center().x(), c.top()))

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        if self.title_rect().contains(event.pos()):
            self.set_expanded(not self.expanded)
            event.accept()
            return
        event.ignore()

    def set_expanded(self, on: bool) -> None:
        """Show or hide the original ops; the scene re-lays the graph out to make room."""
        if on == self.expanded:
            return
        self.prepareGeometryChange()
        self.expanded = on
        scene = self.scene()
        if scene is not None and hasattr(scene, "on_group_toggled"):
            scene.on_group_toggled(self)
