"""Issue 17 (2, 7, 8): one definition of "fallback" in the legend, the Fallback tab and
Diagnostics; readable labels for symbolic dims; the minimap, Sustained chart and Inspector
drawn whole."""

from __future__ import annotations

import re

import pytest

from tests.app.analysis_support import close_analysed, open_analysed, wait_for

pytestmark = pytest.mark.gui


def _number(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return int(m.group(1))


def test_legend_fallback_tab_and_diagnostics_count_the_same_cpu_fallback(qtbot, tmp_path):
    """transformer_demo on ethos-u55: LayerNorm and Gelu are fused, so 21 compiled ops on the CPU
    run 69 graph nodes; the three panels used to show three different figures."""
    win, dock = open_analysed("transformer_demo", "ethos-u55", tmp_path)
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
