"""Issue 17 (2, 7, 8): one definition of "fallback" in the legend, the Fallback tab and
Diagnostics; readable labels for symbolic dims; the minimap, Sustained chart and Inspector
drawn whole."""

from __future__ import annotations

import re

import pytest

from tests.app.analysis_support import (
    close_analysed,
    ethos_u55_without_gelu,
    open_analysed,
    wait_for,
)

pytestmark = pytest.mark.gui


def _number(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return int(m.group(1))


def test_legend_fallback_tab_and_diagnostics_count_the_same_cpu_fallback(qtbot, tmp_path):
    """transformer_demo on an ethos-u55 without Gelu: Gelu is fused, so fewer compiled ops than
    graph nodes run on the CPU; the three panels used to show three different figures."""
    win, dock = open_analysed("transformer_demo", ethos_u55_without_gelu(tmp_path), tmp_path)
    try:
        wait_for(lambda: win.doc.placement_source == "compiled", 60, "the compiled placement")
        win._on_analysis_changed()
        dock.charts.flush()
        cpu_nodes = sum(1 for st in win.doc.statuses.values() if st.device == "cpu")
        cpu_ops = sum(1 for o in dock.charts.result.sim.ops if o.device == "cpu")
        assert cpu_nodes > cpu_ops > 0  # the model has fallbacks, and fused ones

        legend = _number(r"CPU fallback (\d+)", win.canvas.legend.labels["cpu"].text())
        tab_text = dock.charts.tabs.tabText(1)
        tab = _number(r"(\d+) nodes", tab_text)
        diag_title = win.diagnostics.windowTitle()
        diag = _number(r"CPU fallback: (\d+) nodes", diag_title)
        assert legend == tab == diag == cpu_nodes, (legend, tab_text, diag_title)
        # Where a panel lists compiled ops instead of graph nodes, its label says how many ops.
        assert f"{cpu_ops} compiled ops" in tab_text and f"{cpu_ops} compiled ops" in diag_title
        assert len(dock.charts.fallback.rows) == cpu_ops
        assert f"{cpu_nodes} graph nodes" in dock.charts.fallback.summary.text()
        assert sum(1 for d in win.doc.all_diagnostics() if d.code == "npu-fallback") == cpu_ops
    finally:
        close_analysed(win)


def _converter_dims_model(path):
    """Like PP-OCRv6 det: input dims named DynamicDimension.N by the exporter, and a strided Conv
    whose output dims the inference derives as floor(...) expressions of them."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                      ["DynamicDimension.0", 3, "DynamicDimension.1", "DynamicDimension.2"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["DynamicDimension.0", 4, "h_out", "w_out"])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "dyn", [x], [y], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_unplaced_dynamic_model_labels_read_question_marks_not_dynamic_dimension(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app import style
    from app.canvas.node_item import detail_line
    from app.main_window import MainWindow

    path = _converter_dims_model(tmp_path / "dyn.onnx")
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=tmp_path / "recovery", restore_state=False)
    qtbot.addWidget(win)
    win.show()
    win.interactive = False  # a failed open logs instead of waiting on a message box
    win.ask_shapes = lambda name, inputs, last: None  # the user cancels the shape dialog
    with qtbot.waitSignal(win.document_shown, timeout=30000):
        win.open_path(path)
    try:
        conv = win.doc.graph.node_by_name("conv")
        assert "DynamicDimension" in str(conv.output(0).type)  # the IR keeps the symbols
        item = win.scene.node_items[id(conv)]
        line = detail_line(conv, item.width - 26)
        assert "Dynamic" not in line and "floor" not in line, line
        assert line.endswith("→ ?x4x?x?"), line
        assert style.type_text(win.doc.graph.inputs[0].type) == "float32[?x3x?x?]"
        # Names a person gave stay readable, long ones shortened.
        assert style.shape_text(("batch", 3, "sequence_length", None)) == "batchx3xsequence_…x?"
    finally:
        win.close()


def test_minimap_shows_no_empty_box_before_the_first_layout_and_the_graph_after(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from app.main_window import MainWindow
    from tests.app.analysis_support import demo

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=tmp_path / "recovery", restore_state=False, default_target=None)
    qtbot.addWidget(win)
    win.resize(1500, 940)
    win.show()
    minimap = win.canvas.minimap
    assert not minimap.isVisible()  # no model, no layout: it used to draw an empty frame here
    win.open_path(demo("mobilenet_demo")[0])
    seen_empty = []
    def check() -> bool:
        if minimap.isVisible() and minimap._bounds.isEmpty():
            seen_empty.append(True)
        return win.scene is not None and not win.scene.is_populating and not minimap.building \
            and minimap._pixmap is not None
    wait_for(check, 60, "the first layout and minimap picture")
    assert not seen_empty
    # mobilenet_demo is taller than the view at a readable zoom: the minimap shows it, with nodes drawn.
    assert minimap.isVisible() and not minimap._bounds.isEmpty()
    img = minimap._pixmap.toImage()
    colors = {img.pixelColor(x, y).name() for x in range(0, img.width(), 3) for y in range(0, img.height(), 3)}
    assert len(colors) > 1  # more than the background
    win.close()


@pytest.mark.parametrize("width", [180, 330, 560, 1000])
@pytest.mark.parametrize("decades", [1.3, 2.5, 5.2])
def test_sustained_iteration_axis_labels_do_not_overlap(qapp, width, decades):
    """The thermal chart's log iteration axis: every label it draws has room (it used to
    label the minor ticks too, which collided in a narrow panel)."""
    from PySide6.QtGui import QFontMetrics

    from app.panels.chart_base import label_font
    from app.panels.sustained_view import SustainedView

    view = SustainedView()
    axis = view.thermal.getPlotItem().getAxis("bottom")
    assert axis.logMode
    fm = QFontMetrics(label_font())
    lo, hi = 0.0, decades
    levels = axis.tickValues(lo, hi, width)
    drawn = sorted(v for _spacing, vals in levels for v in vals)
    strings = axis.tickStrings(drawn, 1.0, 1.0)
    assert drawn, "no labels at all"
    xs = [(v - lo) / (hi - lo) * width for v in drawn]
    for (x0, s0), (x1, s1) in zip(zip(xs, strings), zip(xs[1:], strings[1:])):
        gap = (x1 - x0) - (fm.horizontalAdvance(s0) + fm.horizontalAdvance(s1)) / 2
        assert gap >= 4, (width, decades, strings)
    assert all(len(s) <= 4 for s in strings), strings  # 1, 10, 100, 1k ... not 10⁴


def test_inspector_of_a_long_named_node_fits_its_dock_without_cutting_off(qtbot, tmp_path):
    """Node and tensor names are paths without spaces; they used to widen the Inspector's form
    past the dock, cutting its right side off at the default window size."""
    import onnx
    from onnx import TensorProto, helper
    from PySide6.QtCore import QSettings

    from tests.app._helpers import close_window, open_window

    name = "/encoder/layers.11/self_attention/output_projection/dense_layer_with_a_long_name/MatMul_output_0"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], [name], name=name)], "long", [x], [y])
    path = tmp_path / "long.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = open_window(qtbot, path, settings, tmp_path / "recovery")
    try:
        win.resize(1500, 940)
        win.inspector.show_node(win.doc.graph.node_by_name(name))
        win.inspector.raise_()
        qtbot.wait(100)
        body = win.inspector._scroll.widget()
        viewport = win.inspector._scroll.viewport().width()
        assert body.minimumSizeHint().width() <= viewport, (body.minimumSizeHint().width(), viewport)
        assert body.width() <= viewport
    finally:
        close_window(win)
