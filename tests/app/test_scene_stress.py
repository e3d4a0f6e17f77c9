"""Crash guards for the canvas under PySide: many items painted, moved, removed and added
again, ports created lazily on hover, the wrappers collected in between; and an exception in
a graph listener during an undo-stack call surfaces as a Python exception, never a segfault."""

from __future__ import annotations

import gc
import random

import onnx
import pytest
import shiboken6
from PySide6.QtCore import QPointF
from PySide6.QtGui import QImage, QPainter

from app import commands
from app.canvas.layout import layered_layout
from app.canvas.scene import GraphScene
from app.canvas.snapshot import take_snapshot
from app.canvas.view import GraphView
from app.document import Document
from tests.app._helpers import chain_model, serialized
from tests.app.test_undo_property import assert_scene_matches_graph

pytestmark = pytest.mark.gui


def _open(tmp_path, proto):
    import engine

    path = tmp_path / "model.onnx"
    onnx.save(proto, path)
    doc = Document(engine.load(path), path)
    doc.analyze()
    snap = take_snapshot(doc.graph)
    scene = GraphScene(doc)
    scene.populate(snap, layered_layout(snap.data), chunked=False)
    return doc, scene


def _render(view: GraphView) -> None:
    img = QImage(640, 480, QImage.Format.Format_ARGB32)
    img.fill(0)
    painter = QPainter(img)
    view.render(painter)
    painter.end()


def test_exception_in_a_graph_listener_during_push_raises_instead_of_crashing(qapp, tmp_path):
    doc, scene = _open(tmp_path, chain_model(6))
    node = doc.graph.nodes[0]

    def broken_listener(_event) -> None:
        [].index(1)  # a ValueError raised by C code: PySide 6.11 segfaults if it reaches C++

    unsubscribe = doc.graph.events.subscribe(broken_listener)
    with pytest.raises(ValueError, match="not in list"):
        doc.push(commands.SetPinCommand(doc, node, "cpu"))
    with pytest.raises(ValueError, match="not in list"):
        doc.undo()
    unsubscribe()
    doc.redo()
    assert node.meta.get("pin") == "cpu"
    doc.undo()
    assert "pin" not in node.meta
    scene.detach()
    doc.close()


def test_connecting_to_a_new_input_slot_draws_the_edge_at_its_port(qapp, tmp_path):
    doc, scene = _open(tmp_path, chain_model(6))
    g = doc.graph
    relu = g.node_by_name("relu0")
    item = scene.node_items[id(relu)]
    assert item.counts()[0] == 1
    # Relu has one input: connecting slot 1 appends a slot the item has not counted yet.
    commands.connect(doc, g.inputs[0], relu, 1)
    assert (id(relu), 1) in scene.edges
    assert_scene_matches_graph(scene)
    doc.undo()  # set_inputs drops the slot again (after its event): the scene settles
    qapp.processEvents()
    assert (id(relu), 1) not in scene.edges
    assert item.counts()[0] == 1
    assert_scene_matches_graph(scene)
    scene.detach()
    doc.close()


def test_many_paint_move_remove_add_cycles_do_not_crash(qapp, tmp_path):
    doc, scene = _open(tmp_path, chain_model(400))
    original = serialized(doc.graph)
    view = GraphView()
    view.setScene(scene)
    view.resize(640, 480)
    view.show()
    rng = random.Random(7)
    for cycle in range(60):
        nodes = list(doc.graph.nodes)
        # moves: through the command (as a drag ends) and directly (as a drag runs)
        moved = rng.sample(nodes, 8)
        doc.push(commands.MoveItemsCommand(doc, {
            id(n): (scene.node_items[id(n)].pos(),
                    scene.node_items[id(n)].pos() + QPointF(rng.uniform(-80, 80), rng.uniform(-80, 80)))
            for n in moved}))
        for n in rng.sample(nodes, 8):
            it = scene.node_items[id(n)]
            it.setPos(it.pos() + QPointF(5, -5))
            scene.on_item_moved(it)
            it.ensure_ports()  # what the first hover does
        # remove some nodes with their edges, paint, bring them back, paint
        commands.delete_nodes(doc, rng.sample(nodes, rng.randint(1, 12)))
        view.set_zoom(0.05 if cycle % 10 == 9 else rng.choice([1.0, 0.6, 0.3]))
        _render(view)
        doc.undo()
        if cycle % 3 == 0:
            doc.redo()
            doc.undo()
        if cycle % 10 == 0:
            if cycle % 30 == 0:
                gc.collect()  # drop the wrappers of removed items now (a full collection is slow)
            qapp.processEvents()
            assert_scene_matches_graph(scene)
    while doc.undo_stack.canUndo():
        doc.undo()
    qapp.processEvents()
    gc.collect()
    assert serialized(doc.graph) == original
    assert_scene_matches_graph(scene)
    assert all(shiboken6.isValid(it) for it in scene.items())
    view.close()
    scene.detach()
    doc.close()
