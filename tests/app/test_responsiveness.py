"""The GUI stays responsive: loading, laying out and compiling the demo models and the onnx
wheel's light densenet121, and the background analysis compile a target starts on opening (the
bundled demo, PP-OCRv6 det at a fixed shape), never block the event loop for more than 100 ms;
painting many items (zoomed in and out) does not crash.

Two figures per run, from a 5 ms timer: the longest wall-clock gap between its ticks, bounded by
100 ms plus the idle loop's own noise measured just before (stall_bound: on this shared 2-core
machine other programs alone hold the GUI thread up to ~80 ms), and the most CPU time the GUI
thread spent inside one gap, the work our code does there, held at 100 ms whatever the load."""

from __future__ import annotations

import gc
from pathlib import Path

import onnx
import pytest
from PySide6.QtGui import QImage, QPainter

from tests.app._helpers import chain_model, close_window, open_window
from tests.app.analysis_support import (
    MAX_STALL_MS,
    StallMeter,
    charts_current,
    idle_noise_ms,
    stall_bound,
    wait_for,
)
from tests.models import LIGHT_DIR, demo_model
from tests.zoo import BY_NAME, locate

pytestmark = pytest.mark.gui


def _demo_paths() -> list[Path]:
    paths = [demo_model(n) for n in ("mobilenet_demo", "transformer_demo", "digits_cnn")]
    paths.append(LIGHT_DIR / "light_densenet121.onnx")  # 1,746 nodes, from the onnx wheel
    return [p for p in paths if p.exists()]


def _measure(qtbot, settings, recovery_dir, path: Path, target: str | None, shapes=None) -> tuple[float, float, float]:
    """(wall ms, GUI-thread CPU ms, idle noise ms) of one open (+ Compile without a target, or the
    background analysis compile with one) in a fresh window."""
    from app.main_window import MainWindow

    win = MainWindow(settings=settings, recovery_dir=recovery_dir, restore_state=False, default_target=target)
    qtbot.addWidget(win)
    win.interactive = False
    win.show()
    qtbot.wait(50)
    gc.collect()  # start from a settled heap, as a fresh editor does (earlier tests leave garbage)
    noise = idle_noise_ms(0.5)
    try:
        with StallMeter() as meter:
            with qtbot.waitSignal(win.document_shown, timeout=90000):
                win.open_path(path, shapes=shapes)
            win.doc.flush()
            if target is None:
                with qtbot.waitSignal(win.compile_finished, timeout=90000):
                    win.compile()
            else:
                dock = win.analysis
                wait_for(lambda: charts_current(dock) or dock.controller.state == "failed", 180, "the analysis")
                assert dock.controller.state != "failed", dock.controller.message
            qtbot.wait(30)
    finally:
        close_window(win)
        win.analysis.controller.shutdown()
    return meter.worst, meter.worst_cpu, noise


def _assert_responsive(qtbot, settings, recovery_dir, name: str, path: Path, target: str | None, shapes=None):
    # Best of two runs: a stall of ours shows up in both, a burst from another process on this
    # shared 2-core machine rarely does.
    runs = []
    for _attempt in range(2):
        wall, cpu, noise = _measure(qtbot, settings, recovery_dir, path, target, shapes)
        runs.append((wall, cpu, noise))
        print(f"{name}: longest event-loop stall {wall:.0f} ms (bound {stall_bound(noise):.0f}, idle loop {noise:.0f} ms),"
              f" most GUI-thread CPU in one stall {cpu:.0f} ms")
        if wall < stall_bound(noise) and cpu < MAX_STALL_MS:
            return
    assert min(r[1] for r in runs) < MAX_STALL_MS, f"{name}: the GUI thread worked {min(r[1] for r in runs):.0f} ms in one go"
    assert any(w < stall_bound(n) for w, _c, n in runs), \
        f"{name}: the GUI thread stalled for {min(r[0] for r in runs):.0f} ms (best of {len(runs)})"


@pytest.mark.parametrize("path", _demo_paths(), ids=lambda p: p.stem)
def test_gui_thread_never_blocks_over_100ms_while_loading_laying_out_and_compiling(qtbot, settings, recovery_dir, path):
    # No target: loading, layout and Tools > Compile (optimize and place, in the worker process).
    _assert_responsive(qtbot, settings, recovery_dir, path.stem, path, None)


# PP-OCRv6 det at the zoo's 64x64: at 320x320 its background compile takes minutes on this machine (the
# walkthrough opens it there), beyond the suite's time budget.
# Its compile runs in the worker process (app/worker_process.py): before, in a worker thread, the GUI
# thread waited for the GIL that thread held (124-305 ms stalls for 58-73 ms of GUI-thread CPU).
# PP-OCRv6 det's first result drew its charts in 86-115 ms of GUI-thread CPU in one event-loop turn
# (111-115 ms in a fresh-clone CI run): two chart steps ran back to back, each chart painted twice
# (its title's new height resized it after the first paint), and a bar chart painted a brush per
# bar and 158 axis names. Now each step lays out before its paint, steps are STEP_MS apart, bars
# are drawn per colour and only the names in view are axis ticks.
BACKGROUND = [("mobilenet_demo", "phone-npu", None), ("ppocr_det", "phone-npu", {"x": (1, 3, 64, 64)})]


@pytest.mark.parametrize(("model", "target", "shapes"), BACKGROUND, ids=[c[0] for c in BACKGROUND])
def test_gui_thread_never_blocks_over_100ms_while_the_opening_analysis_compiles(qtbot, settings, recovery_dir, model,
                                                                                 target, shapes):
    """The first run's default target (phone-npu) compiles, quantizes and simulates the model in
    the background as soon as it opens: 261 and 360 ms stalls were measured there."""
    if model in BY_NAME:
        path, reason = locate(BY_NAME[model])
        if path is None:
            pytest.skip(reason)
    else:
        path = demo_model(model)
    _assert_responsive(qtbot, settings, recovery_dir, f"{model}@{target}", path, target, shapes)


def test_painting_many_items_at_every_zoom_does_not_crash(qtbot, tmp_path, settings, recovery_dir):
    path = tmp_path / "big.onnx"
    onnx.save(chain_model(2500), path)
    win = open_window(qtbot, path, settings, recovery_dir)
    try:
        img = QImage(800, 600, QImage.Format.Format_ARGB32)
        for zoom in (1.0, 0.5, 0.2, 0.05, 0.02, 0.4):
            win.view.set_zoom(zoom)
            assert win.scene.overview_mode == (zoom < 0.28)
            img.fill(0)
            p = QPainter(img)
            win.view.render(p)
            p.end()
        win.select_all()
        win.view.set_zoom(0.05)
        qtbot.wait(20)
    finally:
        close_window(win)
