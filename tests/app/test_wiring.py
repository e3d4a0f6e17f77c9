"""Issue 17 (6): a wire dropped on an input that already has an edge replaces that edge (one
undoable command), a drop a few pixels beside a port still lands on it, and a refused drop
says why in the status bar."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF

from tests.app._helpers import item_of, node_named

pytestmark = pytest.mark.gui


def _drag(scene, out_port, drop: QPointF) -> None:
    scene.begin_connection(out_port, out_port.scenePos())
    scene.update_connection(drop + QPointF(0, -20))
    scene.finish_connection(drop)


def test_drop_on_connected_port_replaces_edge(window):
    doc, scene = window.doc, window.scene
    add = node_named(window, "add")
    old = add.input(1)  # r1, the skip connection
    conv1_out = node_named(window, "conv1").output(0)
    steps = doc.undo_stack.count()
    _drag(scene, item_of(window, "conv1").out_ports[0], item_of(window, "add").in_ports[1].scenePos())
    assert add.input(1) is conv1_out
    assert doc.undo_stack.count() == steps + 1
    assert "replaced" in window.statusBar().currentMessage()
    window.undo()
    assert add.input(1) is old


def test_drop_a_few_pixels_beside_a_port_still_connects_to_it(window):
    scene = window.scene
    add = node_named(window, "add")
    target = item_of(window, "add").in_ports[1].sceneBoundingRect().center()
    _drag(scene, item_of(window, "conv1").out_ports[0], target + QPointF(7, -6))
    assert add.input(1) is node_named(window, "conv1").output(0)


def test_refused_drop_says_why_in_the_status_bar(window):
    doc, scene = window.doc, window.scene
    steps = doc.undo_stack.count()
    _drag(scene, item_of(window, "relu2").out_ports[0], item_of(window, "conv1").in_ports[0].scenePos())
    assert "cycle" in window.statusBar().currentMessage()
    far = scene.itemsBoundingRect().bottomRight() + QPointF(500, 500)
    _drag(scene, item_of(window, "relu1").out_ports[0], far)
    assert "drop the wire on an input port" in window.statusBar().currentMessage()
    assert doc.undo_stack.count() == steps


def test_press_on_a_port_before_any_hover_starts_a_wire_not_an_edge_selection(window):
    """A hand (or xdotool) that lands straight on an output port from below, where the node's
    outline does not reach, never hovered the node: the press must still start the wire."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    view, scene = window.view, window.scene
    conv1, add = item_of(window, "conv1"), item_of(window, "add")
    scene.clearSelection()
    view.centerOn(conv1)
    start = view.mapFromScene(conv1.port_scene_pos(False, 0) + QPointF(0, 3))  # the port's lower half
    end = view.mapFromScene(add.port_scene_pos(True, 1))
    vp = view.viewport()
    QTest.mousePress(vp, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    for k in range(1, 6):
        QTest.mouseMove(vp, start + (end - start) * k / 5)
    QTest.mouseRelease(vp, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, end)
    assert node_named(window, "add").input(1) is node_named(window, "conv1").output(0)
    assert not scene.selectedItems()


def test_drop_on_the_port_of_a_node_never_hovered_connects(window, qapp):
    """Dragging a wire grabs the mouse: the node it is dropped on was never hovered, so its
    port items did not exist yet; a drop on the upper half of its input port (outside the
    node's outline) must still connect."""
    from tests.app.test_editing import _drop_op

    doc, scene = window.doc, window.scene
    center = window.view.mapToScene(window.view.viewport().rect().center())
    _drop_op(window, "Sigmoid", center)
    sig = doc.graph.nodes[-1]
    sig_item = scene.node_items[id(sig)]
    assert not sig_item._ports_made  # the state a real drag meets (no hover reached the node)
    _drag(scene, item_of(window, "relu1").out_ports[0], sig_item.port_scene_pos(True, 0) + QPointF(1, -3))
    assert sig.input(0) is node_named(window, "relu1").output(0)
