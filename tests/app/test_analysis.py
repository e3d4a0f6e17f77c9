"""The editor's analysis (issue 8): live charts of the compiled model, linked to the canvas; the
op analysis with its quantization error; placement and hardware what-ifs; export.

Each module-scoped window is opened once on a demo model and compiled in the background, the
way a user sees it; tests drive real clicks on the charts or the panels' own controls."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from tests.app.analysis_support import (
    charts_current,
    close_analysed,
    demo,
    ethos_u55_without_gelu,
    open_analysed,
    settle,
    wait_for,
)

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def mobilenet(qapp, tmp_path_factory):
    win, dock = open_analysed("mobilenet_demo", "ethos-u55", tmp_path_factory.mktemp("mobilenet"))
    yield win, dock
    close_analysed(win)


@pytest.fixture(scope="module")
def transformer(qapp, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transformer")
    win, dock = open_analysed("transformer_demo", ethos_u55_without_gelu(tmp), tmp)
    yield win, dock
    close_analysed(win)


def _click(widget, point) -> None:
    QTest.mouseClick(widget, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                     QPoint(round(point.x()), round(point.y())))


def _selected_names(win) -> set[str]:
    return {n.name for n in win.scene.selected_nodes()}


def _next_result(dock, before, timeout: float = 60.0):
    wait_for(lambda: dock.controller.current is not before and charts_current(dock), timeout, "a new compile")
    return dock.controller.current


# -- charts ---------------------------------------------------------------------------------------
def test_latency_chart_has_one_bar_per_op_and_timeline_one_block_per_op(mobilenet):
    _win, dock = mobilenet
    ops = [o.node for o in dock.controller.current.sim.ops]
    assert len(ops) > 20
    assert sorted(dock.charts.latency.row_names()) == sorted(ops)
    assert sorted(b.node for b in dock.charts.timeline.op_blocks) == sorted(ops)
    lat = [r.value for r in dock.charts.latency.rows]
    assert lat == sorted(lat, reverse=True)
    shares = dock.charts.share.shares()
    assert set(shares) >= {"NPU", "CPU"} and abs(sum(shares.values()) - 1.0) < 1e-9


def test_clicking_a_latency_bar_selects_its_node_on_the_canvas(mobilenet):
    win, dock = mobilenet
    chart = dock.charts.latency
    # a bar of a node on the canvas (a node the compiler made, e.g. /Div_as_Mul from /Div, has none)
    on_canvas = {n.name for n in win.scene.graph.nodes}
    op = [n for n in chart.row_names() if n in on_canvas][3]
    _click(chart.plot.viewport(), chart.bar_point(op))
    assert dock.controller.selected == [op]
    assert op in _selected_names(win)
    assert chart.selected == {op}


def test_clicking_a_timeline_block_selects_its_node_on_the_canvas(mobilenet):
    win, dock = mobilenet
    dock.charts.tabs.setCurrentIndex(0)
    on_canvas = {n.name for n in win.scene.graph.nodes}  # not a node the compiler made (/Div_as_Mul)
    op = max((o for o in dock.controller.current.sim.ops if o.device == "npu" and o.node in on_canvas),
             key=lambda o: o.latency_us).node
    tl = dock.charts.timeline
    _click(tl.plot.viewport(), tl.block_point(op))
    assert dock.controller.selected == [op]
    assert op in _selected_names(win)


def _click_compiler_made_bar(win, dock, op: str) -> None:
    on_canvas = {n.name for n in win.scene.graph.nodes}
    assert op not in on_canvas  # the compiler made it: no node of the canvas has its name
    chart = dock.charts.latency
    win.scene.clearSelection()
    _click(chart.plot.viewport(), chart.bar_point(op))
    assert dock.controller.selected == [op]
    assert chart.selected == {op}


def test_clicking_the_latency_bar_of_a_lowered_op_selects_the_node_it_came_from(mobilenet):
    """lower_div made /Div_as_Mul from /Div (a Div by a constant, ethos-u55)."""
    win, dock = mobilenet
    _click_compiler_made_bar(win, dock, "/Div_as_Mul")
    assert _selected_names(win) == {"/Div"}


def test_clicking_the_latency_bar_of_a_layernorm_rsqrt_selects_the_nodes_it_came_from(transformer):
    """A TFLite target writes a decomposed LayerNorm's Div(x, Sqrt(v)) as Mul(x, Pow(v, -0.5)):
    clicking the bar of that Mul or Pow selected nothing on the canvas (no provenance)."""
    win, dock = transformer
    wait_for(lambda: charts_current(dock), 90, "the compile")
    _click_compiler_made_bar(win, dock, "/layers.0/norm1/Div_as_Mul")
    assert _selected_names(win) == {"/layers.0/norm1/Div"}
    _click_compiler_made_bar(win, dock, "/layers.0/norm1/Sqrt_as_rsqrt")
    assert _selected_names(win) == {"/layers.0/norm1/Sqrt"}
    # and the canvas shows those nodes where their ops run, not as removed
    assert win.doc.statuses["/layers.0/norm1/Sqrt"].device == dock.controller.current.op(
        "/layers.0/norm1/Sqrt_as_rsqrt").device


def test_selecting_fused_nodes_on_the_canvas_outlines_their_op_in_the_charts(mobilenet):
    win, dock = mobilenet
    res = dock.controller.current
    op, sources = next((op, s) for op, s in res.sources_of_op.items() if len(s) >= 3)
    bn = next(s for s in sources if "BatchNormalization" in s)
    item = next(it for it in win.scene.node_items.values() if it.node.name == bn)
    win.scene.clearSelection()
    item.setSelected(True)
    assert dock.controller.selected == [op]
    assert dock.charts.latency.selected == {op}
    assert dock.charts.timeline.selected == {op}
    assert dock.op_panel.op == op


def test_canvas_colours_follow_the_compiled_placement(mobilenet):
    win, dock = mobilenet
    res = dock.controller.current
    device = {o.node: o.device for o in res.sim.ops}
    for src, op in res.op_of_source.items():
        assert win.doc.statuses[src].device == device[op], src
    # ethos-u55 cannot run BatchNormalization, but folded into its Conv it runs on the NPU
    bn = next(s for s, op in res.op_of_source.items() if "BatchNormalization" in s and device[op] == "npu")
    assert win.doc.statuses[bn].device == "npu"
    assert "fused into" in win.doc.statuses[bn].reason


def test_stage_table_shows_the_simulators_stages(mobilenet):
    _win, dock = mobilenet
    settle(0.05)
    rows = dock.stages_panel.rows()
    stages = dock.controller.current.sim.stages
    assert [r[0] for r in rows[:-1]] == [s.name for s in stages]
    assert rows[-1][0] == "end to end" and all(r[2].endswith("%") for r in rows)


# -- the op analysis and its quantization ----------------------------------------------------------
def _quantized_op_with_output(res) -> str:
    q = res.quant
    for le in sorted(q.analysis.layers, key=lambda e: e.accumulated.sqnr_db):
        node = res.compile.optimized.node_by_name(le.node)
        if node.outputs[0].name in q.model.activations and le.op_type == "Conv":
            return le.node
    raise AssertionError("no quantized Conv with a quantized output")


def test_clicking_a_quantized_op_shows_the_error_figures_of_the_quantization_report(mobilenet):
    _win, dock = mobilenet
    res = dock.controller.current
    op = _quantized_op_with_output(res)
    chart = dock.charts.latency
    _click(chart.plot.viewport(), chart.bar_point(op))
    panel = dock.op_panel
    assert panel.op == op
    row = next(r for r in res.quant.report()["layers"] if r["node"] == op)
    assert panel.figures["accumulated"] == {k: row[k] for k in ("cosine", "max_abs_err", "sqnr_db")}
    assert panel.figures["isolated"] == row["isolated"]
    assert panel.figure_labels[("accumulated", "sqnr_db")].text() == f"{row['sqnr_db']:g}"
    assert all(v not in ("", "–") for v in (lab.text() for lab in panel.figure_labels.values()))
    wait_for(lambda: panel.view is not None and panel.view.tensor == panel.tensor_box.currentData(), 30,
             "the histogram")
    assert set(panel.view.thresholds) == {"minmax", "percentile", "entropy"}
    assert panel.view.fp32.sum() > 0 and panel.view.quantized is not None and panel.view.quantized.sum() > 0


def test_switching_one_tensors_calibration_method_changes_its_reported_error(mobilenet):
    _win, dock = mobilenet
    ctl, panel = dock.controller, dock.op_panel
    op = _quantized_op_with_output(ctl.current)
    dock.select_op(op)
    tensor = panel.tensor_box.currentData()
    assert panel.tensor_box.currentData(Qt.ItemDataRole.UserRole + 1) == "output"
    before = dict(panel.figures["accumulated"])
    requests = ctl.compiles_started
    panel.choose_method("minmax")
    res = _next_result(dock, ctl.current)
    try:
        assert ctl.compiles_started > requests  # recompiled (re-quantized and re-simulated)
        assert res.quant.config.method_overrides == {tensor: "minmax"}
        after = panel.figures["accumulated"]
        assert after != before
        assert after == {k: res.layer_row(op)[k] for k in after}
    finally:
        panel.choose_method("percentile")
        _next_result(dock, res)
    assert ctl.current.quant.config.method_overrides == {}
    assert panel.figures["accumulated"] == before


# -- what-ifs ------------------------------------------------------------------------------------
def test_pinning_a_cpu_fallback_op_changes_the_simulated_latency_shown(transformer):
    win, dock = transformer
    ctl, panel = dock.controller, dock.op_panel
    before = ctl.current
    op = next(o.node for o in before.sim.ops if o.device == "cpu" and "island" in (o.fallback_reason or ""))
    dock.select_op(op)
    assert panel.op == op
    panel.pin_buttons["npu"].click()
    wait_for(lambda: panel.apply_button.isEnabled(), 30, "the what-if prediction")
    pv = panel.last_preview
    assert pv.ops == [op] and abs(pv.after_us - before.latency_us) > 1.0
    assert (op, "cpu", "npu") in pv.moved
    assert "→" in panel.preview.text()
    panel.apply_button.click()
    after = _next_result(dock, before)
    assert after.op(op).device == "npu"
    assert after.latency_us == pytest.approx(pv.after_us)
    assert ctl.comparison == (before, after)
    assert "after the pin" in dock.charts.latency.title.text()
    assert any(r.ghost is not None for r in dock.charts.latency.rows)
    win.doc.undo_stack.undo()  # the pin was one undoable command
    restored = _next_result(dock, after)
    assert restored.latency_us == pytest.approx(before.latency_us)
    assert ctl.comparison is not None  # an unpin is a pin change too: still compared
    ctl.update_settings(analysis_samples=ctl.settings.analysis_samples)  # no change: nothing happens
    assert ctl.current is restored


def test_fallback_view_lists_every_cpu_op_with_its_reason_and_cost(transformer):
    _win, dock = transformer
    sim = dock.controller.current.sim
    rows = dock.charts.fallback.rows
    assert sorted(r.node for r in rows) == sorted(o.node for o in sim.ops if o.device == "cpu")
    assert all(r.reason for r in rows)
    assert [r.total_us for r in rows] == sorted((r.total_us for r in rows), reverse=True)
    assert any(r.fix for r in rows)
    item = dock.charts.fallback.tree.topLevelItem(0)
    dock.charts.fallback._on_item_clicked(item, 0)
    assert dock.controller.selected == [rows[0].node]


def test_moving_a_hardware_slider_resimulates_live_and_sweeps_its_range(mobilenet, tmp_path):
    from engine.hw.target import load_target

    _win, dock = mobilenet
    ctl, hw = dock.controller, dock.hardware_panel
    base = ctl.current
    requests = ctl.compiles_started
    hw.set_value("dram", 0.5)
    wait_for(lambda: ctl.current is not base and ctl.current.what_if_hardware and not dock.charts.is_updating, 30,
             "the re-simulation")
    slow = ctl.current
    assert ctl.compiles_started == requests  # re-simulated, not recompiled
    assert slow.compile.target.npu.dram_bandwidth_gbps == 0.5
    assert slow.latency_us > base.latency_us
    assert "(modified)" in dock.charts.latency.title.text()
    wait_for(lambda: not hw.sweeping and len(hw.sweep) == hw.sliders["dram"].maximum() + 1, 60, "the sweep")
    lat = {v: t for v, t, _ in hw.sweep}
    assert lat[0.5] == pytest.approx(slow.latency_us)
    assert lat[min(lat)] >= lat[max(lat)]
    saved = hw.save(tmp_path / "slow-ethos.yaml")
    assert load_target(tmp_path / "slow-ethos.yaml").npu.dram_bandwidth_gbps == 0.5 == saved.npu.dram_bandwidth_gbps
    hw.reset()
    wait_for(lambda: ctl.hardware is None and not ctl.current.what_if_hardware and not dock.charts.is_updating, 30,
             "the reset")
    assert ctl.current.latency_us == pytest.approx(base.latency_us)


def test_raising_a_layer_from_the_precision_chart_is_one_undoable_step(mobilenet):
    win, dock = mobilenet
    ctl, panel = dock.controller, dock.precision_panel
    panel.top_k.setValue(3)
    task = panel.find_candidates()
    wait_for(lambda: task.done.is_set() and panel.found is not None, 90, "the candidates")
    cands = panel.candidates
    assert len(cands) == 3 and all(c.precision == "int16" and c.latency_cost_us is not None for c in cands)
    node = cands[0].node
    before = ctl.current
    panel.apply_candidate(node)
    raised = _next_result(dock, before)
    assert raised.quant.model.node_precision[node] == "int16"
    assert win.doc.undo_stack.undoText().startswith("Raise")
    win.doc.undo_stack.undo()
    back = _next_result(dock, raised)
    assert back.quant.model.node_precision[node] == "int8"
    assert ctl.settings.quant.precision == {}


# -- export ---------------------------------------------------------------------------------------
def test_export_writes_the_bundle_of_npu_studio_compile_with_the_same_settings(qapp, tmp_path):
    from engine.cli import Out
    from engine.cli import main as cli_main

    win, dock = open_analysed("digits_cnn", "ethos-u55", tmp_path)
    try:
        ctl = dock.controller
        ctl.set_quant(per_channel=True, method="minmax")
        res = _next_result(dock, ctl.current)
        op = res.sim.ops[0].node
        assert ctl.apply_pin([op], "cpu")
        res = _next_result(dock, res)
        assert res.op(op).device == "cpu"
        done: list = []
        dock.exporter.finished.connect(done.append)
        dock.exporter.failed.connect(done.append)
        dock.exporter.export_to(tmp_path / "gui", show_progress=False)
        wait_for(lambda: bool(done), 60, "the export")
        assert isinstance(done[0], dict), done[0]
    finally:
        close_analysed(win)
    model, calib = demo("digits_cnn")
    out = Out(io.StringIO(), io.StringIO())
    status = cli_main(["compile", str(model), "--target", "ethos-u55", "--calib", str(calib), "--method", "minmax",
                       "--per-channel", "--pin", f"{op}=cpu", "-o", str(tmp_path / "cli"), "--quiet"], out)
    assert status == 0, out.stderr.getvalue()
    gui = json.loads((tmp_path / "gui" / "manifest.json").read_text())
    cli = json.loads((tmp_path / "cli" / "manifest.json").read_text())
    assert gui["files"] == cli["files"]
    assert gui == cli
    assert sorted(p.name for p in Path(tmp_path / "gui").iterdir()) == sorted(p.name for p in (tmp_path / "cli").iterdir())


# -- issue 17 (4, 7): no silent settings, no stale "applied" --------------------------------------
def test_choosing_a_tensors_method_is_one_undo_step_that_undo_takes_back(mobilenet):
    win, dock = mobilenet
    ctl, panel = dock.controller, dock.op_panel
    op = _quantized_op_with_output(ctl.current)
    dock.select_op(op)
    tensor = panel.tensor_box.currentData()
    stack = win.doc.undo_stack
    steps = stack.index()
    panel.choose_method(ctl.settings.quant.method)  # the method it has: no override, no step
    assert stack.index() == steps and ctl.settings.quant.method_overrides == {}
    panel.choose_method("entropy")
    assert stack.index() == steps + 1 and "entropy" in stack.undoText()
    res = _next_result(dock, ctl.current)
    assert res.quant.config.method_overrides == {tensor: "entropy"}
    win.undo()
    assert ctl.settings.quant.method_overrides == {}
    _next_result(dock, res)


def test_wheel_over_the_histogram_never_shows_negative_counts(mobilenet):
    from PySide6.QtCore import QPointF

    _win, dock = mobilenet
    panel = dock.op_panel
    dock.select_op(_quantized_op_with_output(dock.controller.current))
    wait_for(lambda: panel.view is not None, 30, "the histogram")
    vb = panel.hist.getPlotItem().getViewBox()
    before_y = vb.viewRange()[1]
    vb.scaleBy(s=(4.0, 4.0), center=QPointF(0, 0))  # what wheel-zooming out does
    assert vb.state["mouseEnabled"] == [True, False]
    assert vb.viewRange()[1][0] >= 0  # the limit holds the count axis at zero
    assert before_y[0] >= 0


def test_undoing_an_applied_pin_clears_applied_from_the_what_if_box(transformer):
    win, dock = transformer
    ctl, panel = dock.controller, dock.op_panel
    before = ctl.current
    op = next(o.node for o in before.sim.ops if o.device == "cpu" and "island" in (o.fallback_reason or ""))
    dock.select_op(op)
    panel.pin_buttons["npu"].click()
    wait_for(lambda: panel.apply_button.isEnabled(), 30, "the what-if prediction")
    panel.apply_button.click()
    assert "applied" in panel.preview.text()
    after = _next_result(dock, before)
    win.undo()
    assert "applied" not in panel.preview.text() and "undone" in panel.preview.text()
    _next_result(dock, after)
