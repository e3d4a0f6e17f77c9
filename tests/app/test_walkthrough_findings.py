"""What the Xvfb walkthrough (tools/walkthrough.py) showed a user, each as the behaviour they
would notice."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


def test_analysis_failure_leaves_the_status_bar_once_the_analysis_runs_again(window):
    """Deleting a node made the analysis fail ("input 0 of gap is not connected"); after undo the
    status bar kept saying so for 10 s over the recomputed, valid graph."""
    analysis = window.analysis
    bar = window.statusBar()
    analysis.controller.state_changed.emit("failed", "input 0 (X) of gap is not connected")
    assert "not connected" in bar.currentMessage()
    analysis.controller.state_changed.emit("running", "")
    assert bar.currentMessage() == ""


def test_other_status_messages_survive_an_analysis_run(window):
    bar = window.statusBar()
    bar.showMessage("compiled: 6 ops", 10000)
    window.analysis.controller.state_changed.emit("running", "")
    assert bar.currentMessage() == "compiled: 6 ops"


def test_dynamic_shape_failure_names_the_menu_item_not_the_cli_flag(window):
    """Behind the shape dialog (walkthrough 01) the status bar and the Analysis panel said
    "fix it with --shape x=D0,D1,...", a command-line flag the editor has no field for."""
    window.analysis.controller.state_changed.emit(
        "failed", "input 'x' dimension 0 is dynamic ('N'); fix it with --shape x=D0,D1,...")
    shown = window.statusBar().currentMessage()
    assert "--shape" not in shown
    assert "Input Shapes" in shown
    assert any(a.text().replace("&", "") == "Input Shapes…" for a in window.findChildren(type(window.act_shapes)))


def test_a_model_waiting_for_its_input_shapes_is_shown_unplaced_not_as_cpu_fallback(qtbot, tmp_path):
    """Walkthrough 01: behind the shape dialog every op was orange "CPU fallback 7" while the
    banner said nothing can be placed until the shapes are set."""
    from tests.app.test_shape_dialog import _dynamic_model, _window

    path = _dynamic_model(tmp_path / "dyn.onnx")
    win = _window(qtbot, tmp_path)
    win.ask_shapes = lambda name, inputs, last: None  # cancelled
    with qtbot.waitSignal(win.document_shown, timeout=30000):
        win.open_path(path)
    doc = win.doc
    doc.wait_for_placement()
    qtbot.wait(50)
    assert doc.statuses and {st.device for st in doc.statuses.values()} == {"unplaced"}
    assert doc.fallback_count() == 0
    assert any("Input Shapes" in d.message for d in doc.all_diagnostics())
    win.close()
