"""Issue 17: after an edit every panel showing numbers says "stale, recomputing" until the new
compile lands, and the canvas never shows a mix of old and new placement without that mark."""

from __future__ import annotations

import onnx
import pytest
from PySide6.QtCore import QSettings

from tests.app._helpers import close_window, open_window, residual_cnn
from tests.app.analysis_support import wait_for
from tests.app.test_canvas_paint import compiled_devices, painted_bar

pytestmark = pytest.mark.gui


def stale_marks(win) -> dict[str, bool]:
    """Which panels show their stale mark (a hidden tab's mark counts as shown: it is not hidden)."""
    dock = win.analysis
    marks = {mark.host.parentWidget().windowTitle() or type(panel).__name__: not mark.isHidden()
             for panel, mark in dock.stale_marks.items()}
    marks["Analysis charts"] = dock.charts.banner.toolTip().startswith("stale, recomputing")
    marks["legend"] = not win.canvas.legend.stale.isHidden()
    return marks


def painted_devices(win) -> dict[str, str]:
    """The device each node's placement bar shows, read back from the painted colour."""
    from app import style

    by_color = {strong.name(): device for device, (strong, _light) in style.PLACEMENT_COLORS.items()}
    return {n.name: by_color.get(painted_bar(win.scene, win.scene.node_items[id(n)]).name(), "?")
            for n in win.doc.graph.nodes}


def test_an_edit_marks_every_panel_stale_until_its_compile_lands_and_the_canvas_never_mixes_unmarked(qtbot, tmp_path):
    """Before, only the charts said so, and only once the compile started after its debounce;
    after a target switch the canvas kept the old target's compile as "Compiled placement"."""
    from app.commands import SetPinCommand

    model = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), model)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = open_window(qtbot, model, settings, tmp_path / "recovery", default_target="phone-npu")
    doc, ctl = win.doc, win.analysis.controller
    try:
        wait_for(lambda: ctl.current is not None and not ctl.busy and doc.placement_source == "compiled"
                 and doc._place_task is None, 60, "the first compile")
        assert not any(stale_marks(win).values()), stale_marks(win)
        before = compiled_devices(win)
        assert painted_devices(win) == before
        doc.push(SetPinCommand(doc, doc.graph.node_by_name("conv1"), "npu"))
        # At once, in the debounce before the compile even starts, every panel says so.
        marks = stale_marks(win)
        assert all(marks.values()), marks
        frames: list[tuple[dict[str, str], dict[str, bool], str]] = []

        def landed() -> bool:
            if ctl.current.graph_version == doc.graph.version and not ctl.busy:
                return True
            frames.append((painted_devices(win), stale_marks(win), win.canvas.legend.source.text()))
            return False

        wait_for(landed, 60, "the edit's compile")
        after = compiled_devices(win)
        assert after["conv1"] == "npu" != before["conv1"]  # the edit moved a node: old and new differ
        assert len(frames) >= 3
        for painted, marks, source in frames:
            assert all(marks.values()), marks  # stale until the new compile landed
            assert source != "Compiled placement:"  # the compile before the edit is not this graph's
            if painted not in (before, after):  # a mix of old and new colours: the canvas says so
                assert marks["legend"]
        assert not any(stale_marks(win).values()), stale_marks(win)
        assert painted_devices(win) == after
        assert win.canvas.legend.source.text().startswith("Compiled placement")
        # A target switch: the compile for the old target is not the placement on the new one.
        win.target_box.setCurrentIndex(win.target_box.findData("ethos-u55"))
        assert doc.placement_source == "edited"
        assert all(stale_marks(win).values()), stale_marks(win)
        wait_for(lambda: not ctl.busy and ctl.current.settings.target == "ethos-u55"
                 and doc.placement_source == "compiled", 60, "the ethos-u55 compile")
        assert not any(stale_marks(win).values()), stale_marks(win)
        assert painted_devices(win) == compiled_devices(win)
        # A hardware what-if re-simulates: its numbers are stale until the re-simulation lands.
        import dataclasses

        base = ctl.current
        t = ctl.target
        ctl.set_hardware(dataclasses.replace(t, npu=dataclasses.replace(t.npu, clock_mhz=t.npu.clock_mhz * 2)))
        assert all(stale_marks(win).values()), stale_marks(win)
        wait_for(lambda: ctl.current is not base and ctl._resim is None, 60, "the re-simulation")
        assert not any(stale_marks(win).values()), stale_marks(win)
    finally:
        close_window(win)
        ctl.shutdown()
