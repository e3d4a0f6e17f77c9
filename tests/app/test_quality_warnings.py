"""Issue 17 (5, 7, 8): a poor compile says so (output SQNR below 20 dB, naming the worst layers
and the fix to try), error figures say when they come from random inputs, and a graph that
cannot be compiled is an error in the diagnostics, not "0 errors"."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PySide6.QtCore import QSettings

from tests.app._helpers import close_window, open_window, residual_cnn
from tests.app.analysis_support import charts_current, wait_for

pytestmark = pytest.mark.gui


def _outlier_model() -> onnx.ModelProto:
    """Conv -> Relu -> Mul where one output channel of the Conv spans 1000x the others (the Mul
    scales it back): one int8 scale for that tensor rounds the other channels to nothing."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[0] *= 1000.0
    s = np.ones((1, 8, 1, 1), np.float32)
    s[0, 0] = 1e-3
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "s"], ["y"], name="rescale")]
    g = helper.make_graph(nodes, "outlier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(s, "s")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _compiled(qtbot, tmp_path, model: onnx.ModelProto):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = open_window(qtbot, path, settings, tmp_path / "recovery", default_target="phone-npu")
    wait_for(lambda: charts_current(win.analysis) and win.doc.placement_source == "compiled", 60, "the compile")
    return win


def _rows(win, code: str):
    return [d for d in win.diagnostics.model.rows if d.code == code]


def test_poor_output_sqnr_warns_naming_the_worst_layers_and_the_fix_to_try(qtbot, tmp_path):
    win = _compiled(qtbot, tmp_path, _outlier_model())
    try:
        sqnr = win.analysis.controller.current.quant.analysis.outputs["y"].sqnr_db
        assert sqnr < 20
        (warning,) = _rows(win, "low-sqnr")  # engine.quant.api's one definition, in the editor's words
        assert warning.severity == "warning"
        assert f"{sqnr:.1f} dB" in warning.message and "rescale" in warning.message
        assert "(Compile > per channel)" in warning.message  # the first fix, where the editor has it
        assert "calibrate on real data" in warning.message  # and these samples were random
        assert "below 20 dB" in win.analysis.charts.banner.toolTip()
    finally:
        close_window(win)
        win.analysis.controller.shutdown()


def test_a_good_compile_raises_no_sqnr_alarm_and_says_its_samples_are_random(qtbot, tmp_path):
    win = _compiled(qtbot, tmp_path, residual_cnn())
    try:
        res = win.analysis.controller.current
        assert min(e.sqnr_db for e in res.quant.analysis.outputs.values()) >= 20
        assert _rows(win, "low-sqnr") == []
        assert "synthetic random samples (no calibration set)" in win.analysis.charts.quant.title.text()
        win.analysis.select_op("conv2")
        qtbot.waitUntil(lambda: win.analysis.op_panel.errors_note.text() != "", timeout=10000)
        assert "synthetic random samples" in win.analysis.op_panel.errors_note.text()
    finally:
        close_window(win)
        win.analysis.controller.shutdown()


def test_a_graph_that_cannot_compile_is_an_error_in_the_diagnostics(qtbot, tmp_path):
    from app import commands

    win = _compiled(qtbot, tmp_path, residual_cnn())
    try:
        ctl = win.analysis.controller
        commands.delete_nodes(win.doc, [win.doc.graph.node_by_name("relu1")])
        wait_for(lambda: ctl.state == "failed" and not ctl.busy, 30, "the failed compile")
        win.doc.flush()
        qtbot.waitUntil(lambda: bool(_rows(win, "compile-blocked")), timeout=10000)
        assert "cannot be compiled" in _rows(win, "compile-blocked")[0].message
        assert win.diagnostics.windowTitle().startswith("Diagnostics (") and "(0 errors" not in win.diagnostics.windowTitle()
    finally:
        close_window(win)
        win.analysis.controller.shutdown()


def test_charts_say_stale_recomputing_over_old_numbers_while_an_edit_compiles(qtbot, tmp_path):
    from app.commands import SetPinCommand

    win = _compiled(qtbot, tmp_path, residual_cnn())
    try:
        doc, ctl, charts = win.doc, win.analysis.controller, win.analysis.charts
        doc.push(SetPinCommand(doc, doc.graph.node_by_name("add"), "cpu"))
        wait_for(lambda: ctl.state == "running", 30, "the edit's compile to start")
        assert charts.banner.toolTip().startswith("stale, recomputing")
        wait_for(lambda: charts_current(win.analysis), 60, "the edit's compile")
        assert not charts.banner.toolTip().startswith("stale")
    finally:
        close_window(win)
        win.analysis.controller.shutdown()
