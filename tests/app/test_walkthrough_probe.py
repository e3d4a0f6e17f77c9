"""The walkthrough's readiness signal: the probe says what the editor is still doing and how long
the canvas has held still, so tools/walkthrough.py aims when the canvas is ready instead of after
a sleep (PP-OCRv6 det: a click landed before the canvas had moved to where it aimed)."""

from __future__ import annotations

import pytest

from tests.app.analysis_support import settle, wait_for

pytestmark = pytest.mark.gui


def test_probe_reports_busy_while_loading_and_how_long_the_canvas_held_still(qtbot, tmp_path, model_file, settings,
                                                                              recovery_dir):
    from app.main_window import MainWindow
    from app.walkthrough_probe import WalkthroughProbe

    win = MainWindow(settings=settings, recovery_dir=recovery_dir, restore_state=False, default_target=None)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    probe = WalkthroughProbe(win, tmp_path / "state.json")
    try:
        win.open_path(model_file)
        assert "loading" in probe.state()["busy"]
        wait_for(lambda: win.doc is not None and not probe.state()["busy"], 30, "the editor to be idle")
        settle(0.5)
        first = probe.state()
        assert first["still_ms"] >= 400 and first["seq"] >= 1
        win.view.set_zoom(win.view.transform().m11() * 1.5)  # the canvas moves: the clock restarts
        moved = probe.state()
        assert moved["still_ms"] < 100 and moved["seq"] > first["seq"]
        settle(0.3)
        assert probe.state()["still_ms"] >= 250
    finally:
        probe.timer.stop()
        win.close()
