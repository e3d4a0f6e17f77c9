"""Tools > Compile compiles what the live analysis shows, and a before/after comparison credits a
pin only with what the pin changed (walkthrough step 09: Compile placed the float graph alone,
"0 on the NPU, 6 on the CPU", beside the int8 analysis's charts)."""

from __future__ import annotations

import re

import onnx
import pytest
from PySide6.QtCore import QSettings

from tests.app._helpers import close_window, node_named, open_window, residual_cnn
from tests.app.analysis_support import charts_current, wait_for

pytestmark = pytest.mark.gui


@pytest.fixture
def analysed(qtbot, tmp_path):
    model = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), model)
    win = open_window(qtbot, model, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                      tmp_path / "recovery", default_target="phone-npu")
    dock = win.analysis
    wait_for(lambda: charts_current(dock) and win.doc.placement_source == "compiled", 60, "the first compile")
    yield win, dock
    close_window(win)
    dock.controller.shutdown()


def _compile(win, dock) -> str:
    compiled = []
    win.compile_finished.connect(compiled.append)
    job = win.compile()
    wait_for(lambda: bool(compiled) or getattr(job, "error", None) is not None, 60, "the compile")
    wait_for(lambda: charts_current(dock), 60, "the charts")
    assert compiled, getattr(job, "error", None)
    return win.statusBar().currentMessage()


def test_compile_without_calibration_reports_the_placement_and_precision_the_analysis_shows(analysed):
    win, dock = analysed
    res = dock.controller.current
    assert res.quant is not None  # phone-npu is int8: the analysis quantized on random inputs
    message = _compile(win, dock)
    summ = dock.controller.current.sim.summary()
    assert f"{summ['npu_ops']} on the NPU, {summ['cpu_ops']} on the CPU" in message
    assert "int8, calibrated on random inputs (no calibration set)" in message
    assert "float" not in message
    assert win.compiled.optimized is dock.controller.current.compile.optimized
    ops = {o.node: o.device for o in dock.controller.current.sim.ops}
    assert win.compiled.placement.device == ops  # the read-only optimized view colours as the charts do
    assert dock.controller.current is res  # nothing had changed: no second compile of the same graph


def _pin(win, name: str, device: str) -> None:
    from app.commands import SetPinCommand

    win.doc.push(SetPinCommand(win.doc, node_named(win, name), device))


def test_latency_chart_credits_the_pin_alone_only_when_nothing_else_changed(analysed):
    win, dock = analysed
    ctl = dock.controller
    before = ctl.current
    _pin(win, "conv2", "cpu")
    wait_for(lambda: ctl.current is not before and charts_current(dock), 60, "the pin's compile")
    title = dock.charts.latency.title.text()
    assert re.search(r"after the pin: [\d.]+ .s →", title), title
    message = _compile(win, dock)  # Compile after the pin changes nothing the chart credits
    assert "after the pin: " in dock.charts.latency.title.text()
    assert "on the NPU" in message


def test_a_pin_and_a_quantization_change_in_one_compile_say_both_changed(analysed):
    win, dock = analysed
    ctl = dock.controller
    before = ctl.current
    _pin(win, "conv2", "cpu")
    ctl.set_quant(method="minmax")  # before the pin's compile ran: one compile carries both
    wait_for(lambda: ctl.current is not before and charts_current(dock), 60, "the compile")
    title = dock.charts.latency.title.text()
    assert "after the pin: " not in title
    assert "after the pin and a change of the quantization (both changed" in title, title
