"""Tools > Compile on a model whose compile is long finishes with the analysis's own result, says
how far it is, and can be cancelled (issue 17: on PP-OCRv6 det at 320x320 under load the
walkthrough's Compile did not finish within 600 s: every edit threw the running compile away,
an undo compiled the copy's stale value types, and nothing ever reached the cache)."""

from __future__ import annotations

import re

import onnx
import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox

from app.commands import AddNodeCommand, SetPinCommand, delete_nodes
from tests.app._helpers import close_window, node_named, open_window, residual_cnn
from tests.app.analysis_support import charts_current, wait_for

pytestmark = pytest.mark.gui

PROGRESS = re.compile(r"^compiling: (starting|optimizing|calibrating \d+/\d+|measuring the int8 error \d+/\d+|"
                      r"simulating) \((\d+)%\)$")


@pytest.fixture
def analysed(qtbot, tmp_path, monkeypatch):
    boxes: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: boxes.append(str(a[2] if len(a) > 2 else a)))
    model = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), model)
    win = open_window(qtbot, model, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                      tmp_path / "recovery", default_target="phone-npu")
    win.boxes = boxes
    dock = win.analysis
    wait_for(lambda: charts_current(dock) and win.doc.placement_source == "compiled", 60, "the first compile")
    yield win, dock
    close_window(win)
    dock.controller.shutdown()


def _compile(win, timeout: float = 60):
    done: list[object] = []
    win.compile_finished.connect(done.append)
    job = win.compile()
    wait_for(lambda: bool(done) or job.error is not None, timeout, "the compile")
    assert done, job.error
    return done[0]


def test_compile_after_edits_finishes_with_the_analysis_result(analysed):
    """A wired node nothing reads, a pin, a delete and its undo: Compile shows the opening compile's
    optimization and quantization again (the optimizer drops the unread node), simulated with the
    pin, without compiling the model a second time."""
    win, dock = analysed
    ctl, doc = dock.controller, win.doc
    first = ctl.current
    doc.push(AddNodeCommand(doc, "Relu", name="unread", inputs=[doc.graph.values["c2"]]))
    doc.push(SetPinCommand(doc, node_named(win, "conv2"), "cpu"))
    delete_nodes(doc, [node_named(win, "relu1")])
    doc.undo_stack.undo()
    outcome = _compile(win)
    res = ctl.current
    assert res is not first and res.graph_version == doc.graph.version
    assert res.cached, "Compile compiled the model again instead of reusing the analysis's compile"
    assert res.compile.quant is first.compile.quant
    assert {o.node: o.device for o in res.sim.ops}["conv2"] == "cpu"
    assert outcome.placement.device == {o.node: o.device for o in res.sim.ops}
    assert f"{res.sim.summary()['cpu_ops']} on the CPU" in outcome.summary
    assert doc.statuses["unread"].device == "removed"


def test_compile_after_an_edit_and_its_undo_compiles_the_re_inferred_shapes(analysed, monkeypatch):
    """The document re-infers an edit's value types in a thread and assigns them without events; a
    compile copied before that finished compiled the types of before the edit (here the 16x16
    shapes after the input became 32x32; mobilenet_demo: 1x64x1x1 for 1x64x12x12 after a delete and
    its undo, a cache miss: undo -> charts 9.65 s)."""
    import time

    import app.document as document
    from app.commands import SetInputTypeCommand
    from nodes.types import TensorType

    win, dock = analysed
    ctl, doc = dock.controller, win.doc
    first = ctl.current
    types = {v.name: v.type for v in doc.graph.values.values()}
    slow_job = document._analysis_job

    def slow(control, *args):
        time.sleep(0.6)  # a re-inference on a loaded machine
        return slow_job(control, *args)

    monkeypatch.setattr(document, "_analysis_job", slow)
    x = doc.graph.values["x"]
    doc.push(SetInputTypeCommand(doc, x, TensorType(x.type.dtype, (1, 3, 32, 32))))
    wait_for(lambda: ctl.current is not first and not ctl.busy, 60, "the 32x32 compile")
    bigger = ctl.current
    assert bigger.compile.source.values["c2"].type.shape == (1, 4, 32, 32)
    doc.undo_stack.undo()
    wait_for(lambda: ctl.current is not bigger and not ctl.busy, 60, "the undo's compile")
    compiled = {v.name: v.type for v in ctl.current.compile.source.values.values()}
    assert {k: compiled.get(k) for k in types} == types
    assert ctl.current.cached
    assert ctl.current.latency_us == pytest.approx(first.latency_us)


def test_compile_shows_its_stage_and_fraction_while_it_runs(analysed):
    win, dock = analysed
    ctl = dock.controller
    messages: list[str] = []
    shown: list[tuple[bool, bool]] = []
    win.statusBar().messageChanged.connect(messages.append)
    ctl.progress.connect(lambda *_: shown.append((win.progress.isVisible(), win.cancel_compile_button.isVisible())))
    ctl.set_quant(method="minmax")  # a quantization the cache does not hold: a compile of its own
    outcome = _compile(win)
    steps = [m for m in messages if m.startswith("compiling: ")]
    assert len(steps) >= 2, messages
    for m in steps:
        assert PROGRESS.match(m), m
    percents = [int(PROGRESS.match(m).group(2)) for m in steps]
    assert percents == sorted(percents) and percents[-1] > percents[0]
    assert any(" calibrating " in f" {m} " or "measuring" in m or "simulating" in m for m in steps)
    assert shown and all(bar and button for bar, button in shown)  # the strip and its Cancel while it runs
    assert not win.progress.isVisible() and not win.cancel_compile_button.isVisible()
    assert win.statusBar().currentMessage() == f"compiled: {outcome.summary}"


@pytest.mark.parametrize("how", ["escape", "button"])
def test_cancel_compile_keeps_previous_result(analysed, how):
    win, dock = analysed
    ctl = dock.controller
    before = _compile(win)
    trace = win.pass_trace.summary.text()
    ctl.set_quant(method="minmax")
    job = win.compile()
    assert not job.done.is_set() and win.cancel_compile_button.isVisible()
    if how == "escape":
        win.activateWindow()
        QTest.keyClick(win.view, Qt.Key.Key_Escape)
    else:
        QTest.mouseClick(win.cancel_compile_button, Qt.MouseButton.LeftButton)
    assert job.done.is_set() and job.error == "compile cancelled"
    assert win.statusBar().currentMessage() == "compile cancelled"
    assert win.compiled is before
    assert win.pass_trace.summary.text() == trace
    assert not win.progress.isVisible() and not win.cancel_compile_button.isVisible()
    assert not ctl.busy and ctl.state == "idle"
    assert win.boxes == []  # no "compile failed" box for a cancel
    after = _compile(win)  # the window goes on: the next Compile compiles the new settings
    assert after is not before and ctl.current.settings.quant.method == "minmax"
    assert not win.act_cancel_compile.isEnabled()
