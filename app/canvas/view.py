"""The canvas view: pan, zoom, fit, rubber-band selection, drops from the op palette and the
context menu. Edits it starts go through commands on the document's undo stack."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import (
    QAction,
    QContextMenuEvent,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QPainter,
    QWheelEvent,
)
from PySide6.QtWidgets import QGraphicsView, QMenu

from app import commands, style
from app.canvas.edge_item import EdgeItem
from app.canvas.node_item import NodeItem
from app.canvas.scene import GraphScene

OP_MIME = "application/x-npu-studio-op"
MIN_SCALE = 0.01
MAX_SCALE = 4.0


class GraphView(QGraphicsView):
    """Shows a GraphScene; see the module docstring."""

    view_changed = Signal()
    zoom_changed = Signal(float)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setOptimizationFlags(QGraphicsView.OptimizationFlag.DontSavePainterState
                                  | QGraphicsView.OptimizationFlag.DontAdjustForAntialiasing)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        self.setDragMode(QGraphicsView.DragMode.RubberBandDrag)
        self.setAcceptDrops(True)
        self._pan_from: QPointF | None = None
        self.horizontalScrollBar().valueChanged.connect(self.view_changed)
        self.verticalScrollBar().valueChanged.connect(self.view_changed)
        self.view_changed.connect(self._on_view_changed)

    def _on_view_changed(self) -> None:
        sc = self.graph_scene()
        if sc is not None:
            sc.on_view_moved()  # a large graph makes the items of what is now in view

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._on_view_changed()

    def graph_scene(self) -> GraphScene | None:
        sc = self.scene()
        return sc if isinstance(sc, GraphScene) else None

    # -- zoom ----------------------------------------------------------------------------------
    def scale_factor(self) -> float:
        """Current zoom (1.0 = 100%)."""
        return self.transform().m11()

    def set_zoom(self, scale: float, anchor: QPointF | None = None) -> None:
        """Zoom to ``scale`` keeping ``anchor`` (scene point) or the center in place."""
        scale = max(MIN_SCALE, min(MAX_SCALE, scale))
        center = anchor if anchor is not None else self.mapToScene(self.viewport().rect().center())
        self.resetTransform()
        self.scale(scale, scale)
        self.centerOn(center)
        self._after_zoom()

    def _after_zoom(self) -> None:
        sc = self.graph_scene()
        if sc is not None:
            sc.set_view_scale(self.scale_factor())
        self.zoom_changed.emit(self.scale_factor())
        self.view_changed.emit()

    def wheelEvent(self, event: QWheelEvent) -> None:
        steps = event.angleDelta().y() / 120.0
        if not steps:
            return super().wheelEvent(event)
        factor = 1.15 ** steps
        new = max(MIN_SCALE, min(MAX_SCALE, self.scale_factor() * factor))
        factor = new / self.scale_factor()
        self.scale(factor, factor)
        self._after_zoom()
        event.accept()

    def zoom_to_fit(self, min_scale: float = MIN_SCALE, top_margin: float = 0.0) -> None:
        """Fit the whole graph (not below ``min_scale``; then show its top, ``top_margin``
        viewport pixels below the upper edge so an overlay does not hide it)."""
        sc = self.graph_scene()
        if sc is None:
            return
        rect = sc.graph_bounds()
        if rect.isEmpty():
            return
        rect = rect.adjusted(-30, -30, 30, 30)
        self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
        if self.scale_factor() > 1.0:
            self.set_zoom(1.0, rect.center())
        elif self.scale_factor() < min_scale:
            self.set_zoom(min_scale, rect.center())
            vis = self.visible_scene_rect()
            top = rect.top() - top_margin / min_scale
            # Centre the nodes this view of the top shows, not the graph's whole width: a
            # detector's wide head at the bottom put its narrow backbone at the right edge, cut
            # off (nudenet's first look); a band wider than the view shows its left end.
            left, right = (rect.left(), rect.right()) if rect.width() <= vis.width() else \
                (sc.band_extent(top, top + vis.height()) or (rect.left(), rect.right()))
            x = (left + right) / 2 if right - left <= vis.width() else left + vis.width() / 2 - 30
            self.centerOn(QPointF(x, top + vis.height() / 2))
            self.view_changed.emit()
            return
        self._after_zoom()

    def zoom_100(self) -> None:
        """Zoom to 100% around the view's center."""
        self.set_zoom(1.0)

    def center_on_item(self, item) -> None:
        """Center an item, zooming in to a readable scale if needed, and select it."""
        if self.scale_factor() < 0.6:
            self.set_zoom(0.8, item.sceneBoundingRect().center())
        self.centerOn(item)
        sc = self.scene()
        if sc is not None:
            sc.clearSelection()
        item.setSelected(True)
        self.view_changed.emit()

    def visible_scene_rect(self) -> QRectF:
        """The part of the scene the viewport shows."""
        return self.mapToScene(self.viewport().rect()).boundingRect()

    # -- panning with the middle button (or space + drag) -------------------------------------
    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.MiddleButton:
            self._pan_from = event.position()
            self.setCursor(Qt.CursorShape.ClosedHandCursor)
            event.accept()
            return
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:
        if self._pan_from is not None:
            delta = event.position() - self._pan_from
            self._pan_from = event.position()
            self.horizontalScrollBar().setValue(int(self.horizontalScrollBar().value() - delta.x()))
            self.verticalScrollBar().setValue(int(self.verticalScrollBar().value() - delta.y()))
            event.accept()
            return
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:
        if self._pan_from is not None and event.button() == Qt.MouseButton.MiddleButton:
            self._pan_from = None
            self.unsetCursor()
            event.accept()
            return
        super().mouseReleaseEvent(event)

    # -- drops from the palette ----------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        sc = self.graph_scene()
        if event.mimeData().hasFormat(OP_MIME) and sc is not None and not sc.read_only:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if event.mimeData().hasFormat(OP_MIME):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        sc = self.graph_scene()
        if sc is None or not event.mimeData().hasFormat(OP_MIME):
            event.ignore()
            return
        op = bytes(event.mimeData().data(OP_MIME).data()).decode("utf-8")
        domain, _, op_type = op.rpartition("::")
        pos = self.mapToScene(event.position().toPoint())
        self.add_op_at(op_type, domain, pos)
        event.acceptProposedAction()

    def add_op_at(self, op_type: str, domain: str, pos: QPointF) -> None:
        """Add a new op centered at ``pos`` (the palette's drop and double-click)."""
        sc = self.graph_scene()
        if sc is None or sc.read_only:
            return
        from app import style

        top_left = QPointF(pos.x() - style.NODE_WIDTH / 2, pos.y() - style.NODE_HEIGHT / 2)
        sc.doc.push(commands.AddNodeCommand(sc.doc, op_type, domain, pos=top_left))

    # -- context menu ----------------------------------------------------------------------
    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        sc = self.graph_scene()
        if sc is None:
            return
        item = self.itemAt(event.pos())
        while item is not None and not isinstance(item, (NodeItem, EdgeItem)) and item.parentItem() is not None:
            item = item.parentItem()
        menu = QMenu(self)
        self.build_context_menu(menu, item)
        if not menu.isEmpty():
            menu.exec(event.globalPos())

    def build_context_menu(self, menu: QMenu, item) -> None:
        """Fill ``menu`` with the actions for ``item`` (a node, an edge, or None)."""
        sc = self.graph_scene()
        if sc is None:
            return
        doc = sc.doc
        if isinstance(item, NodeItem):
            if not item.isSelected():
                sc.clearSelection()
                item.setSelected(True)
            nodes = sc.selected_nodes() or [item.node]
            if not sc.read_only:
                for dev, label in (("npu", "Pin to NPU"), ("cpu", "Pin to CPU"), (None, "Unpin")):
                    act = QAction(label, menu)
                    act.triggered.connect(lambda _=False, d=dev: self._pin(nodes, d))
                    menu.addAction(act)
                menu.addSeparator()
                act = QAction("Delete node" if len(nodes) == 1 else f"Delete {style.count(len(nodes), 'node')}", menu)
                act.triggered.connect(lambda: commands.delete_nodes(doc, nodes))
                menu.addAction(act)
        elif isinstance(item, EdgeItem) and isinstance(item.target, NodeItem) and not sc.read_only:
            node, idx = item.target.node, item.in_index
            act = QAction("Delete edge", menu)
            act.triggered.connect(lambda: commands.delete_edges(doc, [(node, idx)]))
            menu.addAction(act)

    def _pin(self, nodes, device: str | None) -> None:
        sc = self.graph_scene()
        if sc is None:
            return
        doc = sc.doc
        todo = [n for n in nodes if n.meta.get("pin") != device]
        if not todo:
            return
        if len(todo) == 1:
            doc.push(commands.SetPinCommand(doc, todo[0], device))
            return
        doc.undo_stack.beginMacro(f"Pin {style.count(len(todo), 'node')}")
        for n in todo:
            doc.push(commands.SetPinCommand(doc, n, device))
        doc.undo_stack.endMacro()
