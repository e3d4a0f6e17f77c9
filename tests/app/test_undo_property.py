"""Property: any sequence of edits, undone completely, gives back the original model
(serialized ONNX byte-equal), and the canvas follows every step without crashing."""

from __future__ import annotations

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
from app.document import Document
from nodes import registry
from nodes.types import TensorType
from tests.app._helpers import chain_model, residual_cnn, serialized

pytestmark = pytest.mark.gui

EDITS = 220
OPS = ["Relu", "Sigmoid", "Add", "Mul", "Conv", "Concat", "Transpose", "Flatten", "MaxPool"]


def _values(graph):
    vals = list(graph.inputs)
    for n in graph.nodes:
        vals.extend(v for v in n.outputs if v is not None)
    return vals


def _random_edit(rng: random.Random, doc: Document, scene: GraphScene | None) -> None:
    g = doc.graph
    nodes = list(g.nodes)
    kind = rng.choice(["add", "add", "delete", "connect", "connect", "disconnect", "attr", "attr", "pin",
                       "shape", "move", "paste", "undo_redo"])
    if kind == "add" or not nodes:
        op = rng.choice([o for o in OPS if registry.get(o) is not None])
        vals = _values(g)
        n_in = rng.randint(0, 2)
        ins = [rng.choice(vals) for _ in range(n_in)] if vals else []
        doc.push(commands.AddNodeCommand(doc, op, inputs=ins, pos=QPointF(rng.uniform(0, 800), rng.uniform(0, 800))))
    elif kind == "delete":
        commands.delete_nodes(doc, rng.sample(nodes, k=min(len(nodes), rng.randint(1, 2))))
    elif kind == "connect":
        node = rng.choice(nodes)
        vals = [v for v in _values(g) if v.producer() is not node]
        if vals:
            commands.connect(doc, rng.choice(vals), node, rng.randint(0, max(len(node.inputs), 1)))
    elif kind == "disconnect":
        edges = [(n, i) for n in nodes for i, v in enumerate(n.inputs) if v is not None]
        if edges:
            commands.delete_edges(doc, rng.sample(edges, k=min(len(edges), rng.randint(1, 2))))
    elif kind == "attr":
        node = rng.choice(nodes)
        spec = registry.get(node.op_type, node.domain)
        schema = [a for a in (spec.attrs if spec else ()) if a.kind in ("int", "ints", "float")]
        if schema:
            a = rng.choice(schema)
            value = {"int": lambda: rng.randint(0, 3), "float": lambda: rng.uniform(0, 2),
                     "ints": lambda: [rng.randint(1, 3) for _ in range(2)]}[a.kind]()
            doc.push(commands.SetAttrCommand(doc, node, a.name, rng.choice([value, value, None])))
    elif kind == "pin":
        doc.push(commands.SetPinCommand(doc, rng.choice(nodes), rng.choice(["npu", "cpu", None])))
    elif kind == "shape":
        x = g.inputs[0]
        shape = list(x.type.shape or (1,))
        shape[-1] = rng.randint(4, 20)
        doc.push(commands.SetInputTypeCommand(doc, x, TensorType(x.type.dtype, tuple(shape))))
    elif kind == "move":
        item = scene.node_items.get(id(rng.choice(nodes))) if scene is not None else None
        if item is not None:
            doc.push(commands.MoveItemsCommand(doc, {item.key: (item.pos(), item.pos() + QPointF(rng.uniform(-50, 50), 40))}))
    elif kind == "paste":
        picked = rng.sample(nodes, k=min(len(nodes), 2))
        positions = scene.node_positions() if scene is not None else {}
        commands.paste_nodes(doc, commands.copy_nodes(picked, positions), QPointF(900, 100))
    else:
        for _ in range(rng.randint(1, 3)):
            doc.undo()
        for _ in range(rng.randint(0, 3)):
            doc.redo()


@pytest.mark.parametrize(("seed", "model"), [(1, "residual"), (2, "residual"), (3, "chain"), (4, "residual"),
                                             (5, "chain")])
def test_random_edits_then_undo_all_restore_the_model_exactly(qapp, tmp_path, seed, model):
    import engine

    proto = residual_cnn() if model == "residual" else chain_model(40)
    path = tmp_path / f"{model}.onnx"
    onnx.save(proto, path)
    doc = Document(engine.load(path), path)
    doc.analyze()
    original = serialized(doc.graph)
    snap = take_snapshot(doc.graph)
    scene = GraphScene(doc)  # the canvas observes every edit, as in the application
    scene.populate(snap, layered_layout(snap.data), chunked=False)
    rng = random.Random(seed)
    edits = steps = 0
    while edits < EDITS and steps < 4 * EDITS:
        before = doc.undo_stack.index()
        _random_edit(rng, doc, scene)
        steps += 1
        edits += doc.undo_stack.index() > before  # a real edit (not refused, not an undo)
        if steps % 7 == 0:
            doc.analyze()
            qapp.processEvents()
            assert_scene_matches_graph(scene)
        if steps % 29 == 0:
            _paint(scene)

    assert edits >= EDITS
    while doc.undo_stack.canUndo():
        doc.undo()
    doc.analyze()
    qapp.processEvents()
    assert serialized(doc.graph) == original
    assert_scene_matches_graph(scene)
    _paint(scene)
    scene.detach()
    doc.close()


def _paint(scene: GraphScene) -> None:
    img = QImage(600, 400, QImage.Format.Format_ARGB32)
    img.fill(0)
    painter = QPainter(img)
    scene.render(painter)
    painter.end()


def assert_scene_matches_graph(scene: GraphScene) -> None:
    """One item per node, one edge item per connected input, all alive, ends at the ports."""
    g = scene.graph
    assert set(scene.node_items) == {id(n) for n in g.nodes}
    want = {(id(n), i) for n in g.nodes for i, v in enumerate(n.inputs)
            if v is not None and (v.producer() is not None or v.name in scene.input_items)}
    assert {k for k in scene.edges if not isinstance(k[0], tuple)} == want
    for key, e in scene.edges.items():
        assert shiboken6.isValid(e) and e.scene() is scene, key
        assert shiboken6.isValid(e.source) and shiboken6.isValid(e.target), key
        assert e.target.port_scene_pos(True, e.in_index) == e.path().pointAtPercent(1.0), key
    for item in scene.node_items.values():
        assert shiboken6.isValid(item) and item.scene() is scene
        n_in, n_out = item.counts()
        assert n_in >= len(item.node.inputs)
        assert n_out >= len(item.node.outputs)
