"""Helpers of the GUI tests: small models, opening and closing a main window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def residual_cnn(channels: int = 4) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Conv -> Add(skip from Relu) -> Relu -> y, with weights."""
    rng = np.random.default_rng(0)
    c = channels
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.zeros(c, np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu2"),
    ]
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 16, 16])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def chain_model(n: int, width: int = 4) -> onnx.ModelProto:
    """A long chain of Relu/Add/Mul nodes with occasional skips (a synthetic large graph)."""
    nodes = []
    prev, skip = "x", "x"
    for i in range(n):
        out = f"t{i}"
        if i % 5 == 4:
            nodes.append(helper.make_node("Add", [prev, skip], [out], name=f"add{i}"))
            skip = out
        else:
            nodes.append(helper.make_node("Relu", [prev], [out], name=f"relu{i}"))
        prev = out
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, width])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def open_window(qtbot, path: Path, settings, recovery_dir: Path, target=None, default_target=None):
    """A shown main window with ``path`` open. Without a ``target`` the model opens on
    ``default_target`` (None here: unplaced, unlike the application's first run)."""
    from PySide6.QtWidgets import QMessageBox

    from app.main_window import MainWindow

    win = MainWindow(settings=settings, recovery_dir=recovery_dir, restore_state=False,
                     default_target=default_target)
    qtbot.addWidget(win)
    win.resize(1200, 800)
    win.show()
    win.ask_save = lambda: QMessageBox.StandardButton.Discard
    with qtbot.waitSignal(win.document_shown, timeout=20000):
        win.open_path(path, target=target)
    win.doc.flush()
    return win


def close_window(win) -> None:
    from PySide6.QtWidgets import QMessageBox

    win.ask_save = lambda: QMessageBox.StandardButton.Discard
    win.close()


def node_named(win, name: str):
    node = win.doc.graph.node_by_name(name)
    assert node is not None, name
    return node


def item_of(win, name: str):
    return win.scene.node_items[id(node_named(win, name))]


def serialized(graph) -> bytes:
    from engine.ir.onnx_io import to_onnx

    return to_onnx(graph).SerializeToString(deterministic=True)


def new_window(qtbot, tmp_path: Path):
    """A shown 1200x800 window with no target, its settings and recovery under ``tmp_path``, that
    discards unsaved work when asked."""
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QMessageBox

    from app.main_window import MainWindow

    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                     recovery_dir=tmp_path / "recovery", restore_state=False, default_target=None)
    qtbot.addWidget(win)
    win.resize(1200, 800)
    win.show()
    win.ask_save = lambda: QMessageBox.StandardButton.Discard
    return win


def open_chain_window(qtbot, tmp_path: Path, nodes: int, signal: str = "document_shown"):
    """A new_window opening a chain_model of ``nodes`` nodes; returns once its ``signal``
    (document_shown, or canvas_shown for the first view) fired."""
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(nodes), path)
    win = new_window(qtbot, tmp_path)
    with qtbot.waitSignal(getattr(win, signal), timeout=60000):
        win.open_path(path)
    return win
