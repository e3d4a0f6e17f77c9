"""Editing on the canvas: each gesture is one undoable command through the engine."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QMenu

from app import commands
from app.canvas.view import OP_MIME
from tests.app._helpers import item_of, node_named, serialized

pytestmark = pytest.mark.gui


def _drop_op(win, op_type: str, scene_pos: QPointF) -> None:
    item = win.palette.item_for(op_type)
    assert item is not None, f"{op_type} is not in the palette"
    mime = win.palette.tree.mimeData([item])
    assert mime.hasFormat(OP_MIME)
    view = win.view
    pos = view.mapFromScene(scene_pos)
    event = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    view.dropEvent(event)


def test_dragging_op_from_palette_adds_node(window):
    before = len(window.doc.graph)
    center = window.view.mapToScene(window.view.viewport().rect().center())
    _drop_op(window, "Sigmoid", center)
    assert len(window.doc.graph) == before + 1
    added = window.doc.graph.nodes[-1]
    assert added.op_type == "Sigmoid"
    item = window.scene.node_items[id(added)]
    assert item.sceneBoundingRect().contains(center)
    window.undo()
    assert len(window.doc.graph) == before
    assert id(added) not in window.scene.node_items


def test_palette_search_filters_ops_by_name(window):
    window.palette.search.setText("pool")
    shown = window.palette.visible_ops()
    assert shown
    assert all("pool" in op.lower() or "pooling" in op.lower() for op in shown) or "MaxPool" in shown
    window.palette.search.setText("")


def test_dragging_from_output_port_to_input_port_connects(window):
    doc, scene = window.doc, window.scene
    center = window.view.mapToScene(window.view.viewport().rect().center())
    _drop_op(window, "Sigmoid", center)
    sig = doc.graph.nodes[-1]
    sig_item = scene.node_items[id(sig)]
    relu_item = item_of(window, "relu1")
    out_port = relu_item.out_ports[0]
    in_port = sig_item.in_ports[0]
    scene.begin_connection(out_port, out_port.scenePos())
    scene.update_connection(in_port.scenePos() + QPointF(0, -20))
    scene.finish_connection(in_port.scenePos())
    assert sig.input(0) is node_named(window, "relu1").output(0)
    assert (id(sig), 0) in scene.edges
    window.undo()
    assert sig.input(0) is None
    assert (id(sig), 0) not in scene.edges


def test_connecting_that_would_create_a_cycle_is_refused(window):
    doc = window.doc
    relu2 = node_named(window, "relu2")
    conv1 = node_named(window, "conv1")
    before = serialized(doc.graph)
    why = commands.connect(doc, relu2.output(0), conv1, 0)
    assert why is not None
    assert "cycle" in why
    assert serialized(doc.graph) == before


def test_deleting_node_removes_its_edges(window):
    _doc, scene = window.doc, window.scene
    relu1 = node_named(window, "relu1")
    conv2, add = node_named(window, "conv2"), node_named(window, "add")
    scene.clearSelection()
    item_of(window, "relu1").setSelected(True)
    window.act_delete.trigger()
    assert relu1.graph is None
    assert conv2.input(0) is None
    assert add.input(1) is None
    assert id(relu1) not in scene.node_items
    assert (id(conv2), 0) not in scene.edges
    assert (id(add), 1) not in scene.edges


def test_undo_restores_deleted_edges(window):
    doc, scene = window.doc, window.scene
    original = serialized(doc.graph)
    relu1 = node_named(window, "relu1")
    conv2, add = node_named(window, "conv2"), node_named(window, "add")
    commands.delete_nodes(doc, [relu1])
    window.undo()
    assert relu1.graph is doc.graph
    assert conv2.input(0) is relu1.output(0)
    assert add.input(1) is relu1.output(0)
    assert (id(conv2), 0) in scene.edges
    assert (id(add), 1) in scene.edges
    assert (id(relu1), 0) in scene.edges
    doc.flush()
    assert serialized(doc.graph) == original
    window.redo()
    assert relu1.graph is None


def test_deleting_a_selected_edge_disconnects_only_that_input(window):
    scene = window.scene
    add = node_named(window, "add")
    scene.clearSelection()
    scene.edges[(id(add), 1)].setSelected(True)
    window.delete_selection()
    assert add.input(1) is None
    assert add.input(0) is not None
    window.undo()
    assert add.input(1) is node_named(window, "relu1").output(0)


def test_context_menu_offers_pin_and_delete(window):
    menu = QMenu()
    window.view.build_context_menu(menu, item_of(window, "conv2"))
    texts = [a.text() for a in menu.actions() if a.text()]
    assert "Pin to CPU" in texts
    assert "Delete node" in texts
    next(a for a in menu.actions() if a.text() == "Pin to CPU").trigger()
    assert node_named(window, "conv2").meta["pin"] == "cpu"


def test_pinning_node_to_cpu_recolors_it(window, qtbot):
    from PySide6.QtGui import QColor, QImage, QPainter

    from app import style

    doc, view = window.doc, window.view
    item = item_of(window, "conv2")
    view.set_zoom(1.0, item.sceneBoundingRect().center())

    def fill_color() -> QColor:
        rect = item.sceneBoundingRect()
        img = QImage(200, 80, QImage.Format.Format_ARGB32)
        img.fill(0)
        p = QPainter(img)
        window.scene.render(p, source=rect.adjusted(3, 3, 3, 3))
        p.end()
        return img.pixelColor(100, 52)

    assert fill_color() == style.PLACEMENT_COLORS["unplaced"][1]
    with qtbot.waitSignal(doc.analysis_changed, timeout=3000):
        window.scene.clearSelection()
        window.view._pin([item.node], "cpu")
    assert window.scene.status_of(item.node).device == "cpu"
    assert fill_color() == style.PLACEMENT_COLORS["cpu"][1]
    window.undo()
    doc.flush()
    assert window.scene.status_of(item.node).device == "unplaced"


def test_moving_node_is_undoable(window):
    scene = window.scene
    item = item_of(window, "add")
    old = item.pos()
    new = old + QPointF(140, 30)
    window.doc.push(commands.MoveItemsCommand(window.doc, {item.key: (old, new)}))
    assert item.pos() == new
    edge = scene.edges[(id(item.node), 0)]
    assert edge.boundingRect().united(edge.sceneBoundingRect()).contains(edge.mapFromScene(item.port_scene_pos(True, 0)))
    window.undo()
    assert item.pos() == old


def test_copy_paste_duplicates_selection_with_internal_edges(window):
    doc, scene = window.doc, window.scene
    scene.clearSelection()
    item_of(window, "conv2").setSelected(True)
    item_of(window, "add").setSelected(True)
    window.copy_selection()
    before = len(doc.graph)
    window.paste()
    assert len(doc.graph) == before + 2
    conv_copy, add_copy = doc.graph.nodes[-2], doc.graph.nodes[-1]
    assert (conv_copy.op_type, add_copy.op_type) == ("Conv", "Add")
    assert add_copy.input(0) is conv_copy.output(0)  # the internal edge survived
    assert conv_copy.input(1) is node_named(window, "conv2").input(1)  # weights are shared
    assert conv_copy.input(0) is None  # external activations are left open
    assert {n.name for n in scene.selected_nodes()} == {conv_copy.name, add_copy.name}
    window.undo()
    assert len(doc.graph) == before


def test_select_all_and_find_centers_the_match(window):
    window.select_all()
    assert len(window.scene.selected_nodes()) == len(window.doc.graph)
    window.find_edit.setText("conv2")
    hit = window.find_next()
    assert hit is not None
    assert hit.node.name == "conv2"
    assert hit.isSelected()
    center = window.view.mapToScene(window.view.viewport().rect().center())
    assert (hit.sceneBoundingRect().center() - center).manhattanLength() < 5
