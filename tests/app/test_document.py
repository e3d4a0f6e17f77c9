"""The inspector, re-analysis after edits, saving, autosave and crash recovery."""

from __future__ import annotations

import json

import onnx
import pytest
from PySide6.QtWidgets import QMessageBox

from app import commands
from nodes.types import TensorType
from tests.app._helpers import close_window, node_named, open_window, serialized

pytestmark = pytest.mark.gui


def test_editing_attribute_reinfers_shapes(window):
    conv1 = node_named(window, "conv1")
    assert conv1.output(0).type.shape == (1, 4, 16, 16)
    window.scene.clearSelection()
    window.scene.node_items[id(conv1)].setSelected(True)
    field = window.inspector.fields["strides"]
    field.setText("2, 2")
    field.editingFinished.emit()
    window.doc.flush()
    assert conv1.attrs["strides"] == [2, 2]
    assert conv1.output(0).type.shape == (1, 4, 8, 8)
    assert node_named(window, "relu1").output(0).type.shape == (1, 4, 8, 8)
    window.undo()
    window.doc.flush()
    assert "strides" not in conv1.attrs
    assert conv1.output(0).type.shape == (1, 4, 16, 16)


def test_invalid_attribute_value_is_refused_with_a_message(window):
    conv1 = node_named(window, "conv1")
    window.inspector.show_node(conv1)
    field = window.inspector.fields["strides"]
    field.setText("two")
    field.editingFinished.emit()
    assert "strides" not in conv1.attrs
    assert "not integers" in window.inspector.error.text()
    assert window.doc.undo_stack.count() == 0


def test_editing_input_shape_in_inspector_reinfers_the_graph(window):
    window.inspector.show_node(None)
    field = window.inspector.fields["shape:x"]
    field.setText("1, 3, 32, 32")
    field.editingFinished.emit()
    window.doc.flush()
    assert window.doc.graph.inputs[0].type.shape == (1, 3, 32, 32)
    assert node_named(window, "relu2").output(0).type.shape == (1, 4, 32, 32)
    window.undo()
    window.doc.flush()
    assert node_named(window, "relu2").output(0).type.shape == (1, 4, 16, 16)


def test_node_whose_inputs_no_longer_fit_is_marked_with_the_reason(window):
    doc = window.doc
    conv2 = node_named(window, "conv2")
    # Feed conv2 the 3-channel graph input instead of relu1's 4 channels: the weights no longer fit.
    doc.push(commands.SetInputCommand(doc, conv2, 0, doc.graph.inputs[0]))
    doc.flush()
    status = window.scene.status_of(conv2)
    assert status.errors, "the node should carry the reason it no longer fits"
    assert any(d.node == "conv2" for d in doc.all_diagnostics())
    assert window.diagnostics.row_count() >= 1
    window.undo()
    doc.flush()
    assert not window.scene.status_of(conv2).errors


def test_save_and_open_roundtrip_as_project(window, tmp_path, qtbot, settings, recovery_dir):
    doc = window.doc
    commands.delete_nodes(doc, [node_named(window, "relu2")])
    doc.push(commands.SetAttrCommand(doc, node_named(window, "conv1"), "strides", [2, 2]))
    doc.push(commands.SetPinCommand(doc, node_named(window, "add"), "cpu"))
    assert doc.is_dirty
    assert window.windowTitle().startswith("residual.onnx *")
    path = tmp_path / "edited.npuproj"
    assert window._save_to(path)
    assert not doc.is_dirty
    assert "*" not in window.windowTitle()
    saved = json.loads(path.read_text())
    assert saved["pins"] == {"add": "cpu"}
    assert saved["edits"]["removed"] == ["relu2"]
    doc.flush()
    expected = serialized(doc.graph)
    close_window(window)
    other = open_window(qtbot, path, settings, recovery_dir)
    try:
        assert serialized(other.doc.graph) == expected
        assert other.doc.graph.node_by_name("add").meta["pin"] == "cpu"
        assert not other.doc.is_dirty
        assert str(path.resolve()) == other.recent_files()[0]
    finally:
        close_window(other)


def test_save_as_onnx_writes_a_valid_model(window, tmp_path):
    doc = window.doc
    center = window.view.mapToScene(window.view.viewport().rect().center())
    window.view.add_op_at("Sigmoid", "", center)
    sig = doc.graph.nodes[-1]
    doc.push(commands.SetInputCommand(doc, sig, 0, node_named(window, "relu2").output(0)))
    path = tmp_path / "out.onnx"
    assert window._save_to(path)
    model = onnx.load(path)
    assert [n.op_type for n in model.graph.node].count("Sigmoid") == 1
    onnx.checker.check_model(model)
    assert not doc.is_dirty
    assert not list(tmp_path.glob(".out.onnx.*"))  # the atomic write left no temporary file


def test_autosave_file_appears_after_edit(window, qtbot):
    doc = window.doc
    doc.autosave_delay_ms = 50
    assert doc.recovery_path is not None
    assert not doc.recovery_path.exists()
    doc.push(commands.SetPinCommand(doc, node_named(window, "conv2"), "cpu"))
    qtbot.waitUntil(doc.recovery_path.exists, timeout=3000)
    saved = json.loads(doc.recovery_path.read_text())
    assert saved["pins"] == {"conv2": "cpu"}
    assert "recovery" in saved
    window.undo()  # back to the saved state: the recovery file goes away
    assert not doc.recovery_path.exists()


def test_restore_is_offered_after_a_crash(window, qtbot, settings, recovery_dir):
    doc = window.doc
    commands.delete_nodes(doc, [node_named(window, "relu2")])
    assert doc.autosave() is not None
    expected = serialized(doc.graph)
    # A crash: the window goes away without closing the document.
    doc._autosave_timer.stop()
    window.doc = None
    window.close()
    from app.main_window import MainWindow

    win = MainWindow(settings=settings, recovery_dir=recovery_dir, restore_state=False, default_target=None)
    qtbot.addWidget(win)
    asked = []
    with qtbot.waitSignal(win.document_shown, timeout=20000):
        assert win.offer_recovery(ask=lambda path, d: asked.append(path) or True)
    try:
        assert asked
        assert serialized(win.doc.graph) == expected
        assert win.doc.is_dirty
        assert win.doc.graph.node_by_name("relu2") is None
    finally:
        close_window(win)
    assert not list(recovery_dir.glob("*.npuproj"))


def test_closing_with_unsaved_changes_asks_first(window):
    doc = window.doc
    doc.push(commands.SetPinCommand(doc, node_named(window, "conv2"), "npu"))
    asked = []
    window.ask_save = lambda: asked.append(1) or QMessageBox.StandardButton.Cancel
    assert not window.close()
    assert asked
    assert window.isVisible()
    window.ask_save = lambda: QMessageBox.StandardButton.Discard
    assert window.close()


def test_input_type_command_changes_dtype_and_undoes(doc):
    x = doc.graph.inputs[0]
    old = x.type
    doc.push(commands.SetInputTypeCommand(doc, x, TensorType(old.dtype, (2, 3, 16, 16))))
    doc.flush()
    assert doc.graph.node_by_name("relu2").output(0).type.shape == (2, 4, 16, 16)
    doc.undo_stack.undo()
    assert x.type == old
