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
