"""Canvas overlays and wording: at 1280x800 the minimap is a small corner box that never covers
the graph's centre and the legend fits the canvas; counts read "1 error", "1 node", never
"1 errors"."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, QRectF

from tests.app.analysis_support import demo, wait_for

pytestmark = pytest.mark.gui


def _minimap_settled(win) -> bool:
    mm = win.canvas.minimap
    return win.scene is not None and not win.scene.is_populating and not mm.building \
        and mm._pixmap is not None


@pytest.mark.parametrize("model", ["mobilenet_demo", "transformer_demo"])
def test_minimap_at_1280x800_is_a_small_corner_box_off_the_graph_centre(qtbot, tmp_path, model):
    from PySide6.QtCore import QSettings

    from app.main_window import MainWindow

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=tmp_path / "recovery", restore_state=False, default_target=None)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    try:
        win.open_path(demo(model)[0])
        wait_for(lambda: _minimap_settled(win), 60, "the first layout and minimap picture")
        view, mm = win.view, win.canvas.minimap
        win.view.set_zoom(1.0)  # zoomed in: part of the graph is out of view, the minimap shows
        wait_for(lambda: _minimap_settled(win) and mm.isVisible(), 10, "the minimap")
        vp = view.viewport().geometry()
        box = QRectF(mm.geometry())
        # Proportionate: it used to be a fixed 190x240, a third of this canvas's height.
        assert box.width() <= 0.2 * vp.width() + 1 and box.height() <= 0.2 * vp.height() + 1, (box, vp)
        assert box.width() * box.height() <= 0.05 * vp.width() * vp.height()
        assert not box.contains(QPointF(vp.center()))
        # The legend fits the narrow canvas with a compile's figures in it (PP-OCRv6 det at
        # 1280x800 ran past the canvas's right edge: "fused group" was cut).
        from app import placement

        win.canvas.legend.set_source(placement.SOURCE_LABELS["compiled"])
        win.canvas.legend.set_counts({"npu": 451, "cpu": 13, "unplaced": 1})
        qtbot.wait(20)
        legend = win.canvas.legend.geometry()
        assert legend.left() >= vp.left() and legend.right() <= vp.right(), (legend, vp)
        centre = QPointF(view.mapFromScene(win.scene.graph_bounds().center())) + QPointF(vp.topLeft())
        for x_scroll in (0.0, 0.5, 1.0):  # wherever the view is, the graph's centre stays uncovered
            bar = view.horizontalScrollBar()
            bar.setValue(int(bar.minimum() + x_scroll * (bar.maximum() - bar.minimum())))
            view.centerOn(win.scene.graph_bounds().center())
            qtbot.wait(20)
            box = QRectF(win.canvas.minimap.geometry())
            centre = QPointF(view.mapFromScene(win.scene.graph_bounds().center())) + QPointF(vp.topLeft())
            assert not (mm.isVisible() and box.contains(centre)), (box, centre)
    finally:
        win.close()


def test_counts_agree_with_their_number_one_error_one_node(qapp):
    from app import style
    from app.panels.diagnostics import DiagnosticsPanel
    from app.placement import FallbackCount
    from engine.diagnostics import Diagnostic

    panel = DiagnosticsPanel(None)
    panel.show_diagnostics([Diagnostic("error", "conv1", "x", "broken"), Diagnostic("warning", None, "y", "hm")])
    assert "1 error," in panel.windowTitle() and "1 warning" in panel.windowTitle()
    assert "errors" not in panel.windowTitle() and "warnings" not in panel.windowTitle()
    panel.show_diagnostics([Diagnostic("error", "a", "x", "m"), Diagnostic("error", "b", "x", "m")])
    assert "2 errors, 0 warnings" in panel.windowTitle()
    assert FallbackCount(1, 1).phrase() == "1 node"
    assert FallbackCount(1, 3).phrase() == "1 node (3 compiled ops)"
    assert style.count(1, "pass", "passes") == "1 pass" and style.count(2, "pass", "passes") == "2 passes"


def test_bar_labels_stay_inside_a_narrow_latency_chart(qtbot):
    """After a pin the latency bars read "476 µs · compute (was 32 µs on NPU)": at 1280x800 the
    chart is ~250 px wide and that label ran past its right edge."""
    from PySide6.QtGui import QColor

    from app.panels.chart_base import BarRow, RankedBarsChart

    chart = RankedBarsChart("latency (µs)")
    qtbot.addWidget(chart)
    chart.resize(440, 220)
    chart.show()
    rows = [BarRow("conv2", 476.0, QColor("#d9711c"), "476 µs · compute  (was 32 µs on NPU)", ghost=32.0),
            BarRow("conv1", 93.0, QColor("#d9711c"), "93 µs · compute  (was 17 µs on NPU)", ghost=17.0),
            BarRow("add1", 16.0, QColor("#d9711c"), "16 µs · memory  (was 2.0 µs on NPU)", ghost=2.0)]
    chart.set_rows(rows)
    qtbot.wait(50)
    from app.panels.chart_base import LabelsItem

    labels = next(it for it in chart._labels if isinstance(it, LabelsItem))
    chart.plot.grab()  # paint
    assert len(labels.drawn) == len(rows)
    for (text, end_px, edge_px), r in zip(labels.drawn, rows):
        assert end_px <= edge_px + 1, (text, end_px, edge_px)
        assert text.startswith(r.label.split(" ·")[0]), text  # the figure itself is always shown


def test_the_legend_of_a_newly_opened_model_never_shows_the_last_models_counts_or_failure(qtbot, tmp_path):
    """Opening a model right after another one: until the new model's placement lands, the legend
    showed the last model's counts and its "compile failed" (a 50,000-node model opened after a
    10,000-node one read "Edited graph (compile failed): NPU 10000")."""
    import onnx

    from tests.app._helpers import chain_model, close_window, new_window

    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    onnx.save(chain_model(40), first)
    onnx.save(chain_model(25), second)
    win = new_window(qtbot, tmp_path)
    win.analysis.controller.enabled = False
    try:
        with qtbot.waitSignal(win.document_shown, timeout=20000):
            win.open_path(first, target="phone-npu")
        win.doc.wait_for_placement()
        win.doc.compile_failed("the compile failed")
        legend = win.canvas.legend
        assert legend.labels["npu"].text() == "NPU 40" and "failed" in legend.source.text()
        seen = []
        win.canvas_shown.connect(lambda: seen.append((legend.source.text(), legend.labels["npu"].text())))
        with qtbot.waitSignal(win.document_shown, timeout=20000):
            win.open_path(second, target="phone-npu")
        assert seen and "failed" not in seen[0][0] and "40" not in seen[0][1]
        win.doc.wait_for_placement()
        wait_for(lambda: any(label.text().endswith(" 25") for label in legend.labels.values()), 10,
                 "the second model's counts in the legend")
    finally:
        close_window(win)
