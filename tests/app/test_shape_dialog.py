"""Issue 17 (2): a model with dynamic input dimensions asks for its shapes when opened; the
rows are prefilled (the model's hints, then the last shapes used for that file) and validated
live; cancelling keeps the model open, unplaced, with a banner that offers the dialog again."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PySide6.QtCore import QSettings

from tests.app.analysis_support import wait_for

pytestmark = pytest.mark.gui


def _dynamic_model(path):
    import numpy as np

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "height", "width"])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "dyn", [x], [y], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_shape_rows_are_prefilled_from_hints_and_validated_live(qapp):
    from PySide6.QtWidgets import QDialogButtonBox

    from app.shape_dialog import ShapeDialog

    dlg = ShapeDialog("dyn.onnx", [("x", ("batch", 3, "height", "width"))], {})
    ok = dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)
    edit = dlg.edits["x"]
    assert edit.text() == "1,3,224,224" and ok.isEnabled()
    edit.setText("1,4,224,224")
    assert not ok.isEnabled() and "fixed at 3" in dlg.errors["x"].text()
    edit.setText("1,3,224")
    assert not ok.isEnabled() and "4 dimensions" in dlg.errors["x"].text()
    edit.setText("1,3,0,8")
    assert not ok.isEnabled()
    edit.setText("2, 3, 320, 320")
    assert ok.isEnabled() and dlg.shapes() == {"x": (2, 3, 320, 320)}
    again = ShapeDialog("dyn.onnx", [("x", ("batch", 3, "height", "width"))], {"x": (1, 3, 640, 640)})
    assert again.edits["x"].text() == "1,3,640,640"  # the last shapes used for the file come first


def _window(qtbot, tmp_path):
    from app.main_window import MainWindow

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=tmp_path / "recovery", restore_state=False)
    qtbot.addWidget(win)
    win.resize(1200, 800)
    win.show()
    return win


def test_opening_a_dynamic_model_asks_for_shapes_and_places_it_with_them(qtbot, tmp_path):
    path = _dynamic_model(tmp_path / "dyn.onnx")
    win = _window(qtbot, tmp_path)
    asked = []
    win.ask_shapes = lambda name, inputs, last: asked.append((name, inputs, last)) or {"x": (1, 3, 32, 32)}
    win.open_path(path)
    wait_for(lambda: win.doc is not None and win.doc.graph.inputs[0].type.shape == (1, 3, 32, 32)
             and win.scene is not None and not win.scene.is_populating, 30, "the model with its shapes")
    assert asked and asked[0][1] == [("x", ("batch", 3, "height", "width"))]
    wait_for(lambda: all(st.device in ("npu", "cpu") for st in win.doc.statuses.values()) and win.doc.statuses,
             60, "the placement")
    assert not win.canvas.banner.isVisible()
    win.close()
    # The next time this file opens, the dialog starts from the shapes used last.
    nxt = _window(qtbot, tmp_path)
    seen = []
    nxt.ask_shapes = lambda name, inputs, last: seen.append(last)
    nxt.open_path(path)
    wait_for(lambda: bool(seen), 30, "the dialog")
    assert seen[0] == {"x": (1, 3, 32, 32)}
    nxt.close()


def test_cancelling_the_shape_dialog_keeps_the_model_unplaced_with_a_banner_that_offers_it(qtbot, tmp_path):
    path = _dynamic_model(tmp_path / "dyn.onnx")
    win = _window(qtbot, tmp_path)
    win.ask_shapes = lambda name, inputs, last: None
    with qtbot.waitSignal(win.document_shown, timeout=30000):
        win.open_path(path)
    assert win.doc is not None and win.canvas.banner.isVisible()
    assert "Set input shapes" in win.canvas.banner.text()
    win.ask_shapes = lambda name, inputs, last: {"x": (1, 3, 16, 16)}
    win.canvas.banner.linkActivated.emit("shapes")
    wait_for(lambda: win.doc.graph.inputs[0].type.shape == (1, 3, 16, 16), 30, "the reopened model")
    win.close()
