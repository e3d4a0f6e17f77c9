"""The sweep dock (issue 16): a sweep's results.csv as a Pareto chart; clicking a point applies
that point's target and quantization to the open model, undoably.

The results come from the real sweep code run in this process (no cluster): digits_cnn on
ethos-u55 over two SRAM sizes with two calibration methods."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from tests.app.analysis_support import close_analysed, open_analysed, settle, wait_for

pytestmark = pytest.mark.gui


def _sweep_results(folder: Path) -> Path:
    """Compute the 4 points with the sweep's own functions and write OUTDIR like the sweep does."""
    from engine.sweep import shard, worker
    from engine.sweep.results import ResultsFile, columns
    from engine.sweep.runner import base_row, write_targets
    from engine.sweep.spec import load_spec
    from tests.engine.sweep_util import digits_entry, write_spec

    spec = load_spec(write_spec(folder, [digits_entry(folder, calib_samples=32, eval_samples=4)],
                                [{"name": "ethos-u55", "vary": {"npu.sram_kib": [48, 512]}}],
                                [{"method": "minmax"}, {"method": "percentile", "per_channel": True}]))
    out = folder / "out"
    out.mkdir()
    write_targets(spec, out)
    graph, data, _ = worker.prepared(spec.models[0])
    cal = shard.calibrate_sharded(graph, data, histograms=True, shard_samples=16)
    rf = ResultsFile(out / "results.csv", columns(spec.varied_fields))
    for p in spec.points():
        rf.add({**base_row(p, out), **worker.run_point(p, cal), "error": None})
    return out / "results.csv"


@pytest.fixture(scope="module")
def digits(qapp, tmp_path_factory):
    win, dock = open_analysed("digits_cnn", "phone-npu", tmp_path_factory.mktemp("digits"))
    yield win, dock
    close_analysed(win)


def test_clicking_a_pareto_point_applies_its_target_and_quantization(digits, tmp_path):
    from app.panels.chart_base import view_point
    from app.panels.sweep_panel import open_sweep_results

    win, dock = digits
    assert getattr(win, "_sweep_panel", None) is None  # made on first use only
    panel = open_sweep_results(win, _sweep_results(tmp_path))
    assert panel.isVisible() and len(panel.plotted()) == 4
    assert len(panel._scatter.points()) == 4
    ctl = dock.controller
    before = (ctl.settings.target, ctl.settings.quant.method, ctl.settings.quant.per_channel)
    assert before[0] == "phone-npu" and before[2] is False
    index = next(i for i, r in enumerate(panel.plotted())
                 if r["npu.sram_kib"] == "512" and r["method"] == "percentile")
    settle(0.2)
    pt = view_point(panel.plot, *panel.point_position(index))
    QTest.mouseClick(panel.plot.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                     QPoint(round(pt.x()), round(pt.y())))
    wait_for(lambda: ctl.settings.quant.per_channel, 10, "the click to apply the point")
    assert ctl.settings.quant.method == "percentile"
    assert Path(ctl.settings.target).parent.name == "targets"
    assert ctl.base_target.name == "ethos-u55" and ctl.base_target.npu.sram_kib == 512
    assert win.doc.target_name == ctl.settings.target  # the document follows, like the target box
    assert win.doc.undo_stack.undoText().startswith("Apply sweep point")
    win.doc.undo()
    assert (ctl.settings.target, ctl.settings.quant.method, ctl.settings.quant.per_channel) == before
    assert ctl.base_target.name == "phone-npu"


def test_a_file_that_is_not_sweep_results_is_refused_with_a_reason(digits, tmp_path):
    from app.panels.sweep_panel import sweep_panel

    win, _ = digits
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    assert not sweep_panel(win).open_results(bad)
    assert "not a sweep results file" in sweep_panel(win).title.text()
