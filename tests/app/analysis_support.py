"""Helpers of the analysis GUI tests: a main window with the analysis installed, opened on a demo
model with a target and calibration data and compiled; waiting; an event-loop stall meter."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QSettings, QTimer

from tests.models import ASSETS

CALIB = {"mobilenet_demo": "mobilenet_calib", "transformer_demo": "transformer_calib", "digits_cnn": "digits_calib"}


def demo(name: str) -> tuple[Path, Path]:
    """(model path, calibration path) of a bundled demo model."""
    return ASSETS / "models" / f"{name}.onnx", ASSETS / "data" / f"{CALIB[name]}.npz"


def wait_for(condition, timeout: float = 30.0, message: str = "condition") -> float:
    """Process events until ``condition()`` holds; returns the seconds it took."""
    t0 = time.perf_counter()
    end = t0 + timeout
    while not condition():
        if time.perf_counter() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {message}")
        QCoreApplication.processEvents()
        time.sleep(0.002)
    return time.perf_counter() - t0


def settle(seconds: float) -> None:
    """Process events for a while."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        QCoreApplication.processEvents()
        time.sleep(0.002)


def charts_current(dock) -> bool:
    """True when a compile is published and every chart shows it."""
    ctl = dock.controller
    return ctl.current is not None and not ctl.busy and not dock.charts.is_updating


def ethos_u55_without_gelu(tmp: Path) -> str:
    """A target YAML: ethos-u55 without Gelu and Pow, on which transformer_demo keeps CPU
    fallbacks, fused ones among them (on ethos-u55 itself every op runs on the NPU, as in vela)."""
    from engine.hw.target import TARGETS_DIR

    text = (TARGETS_DIR / "ethos-u55.yaml").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith(("Gelu:", "Pow:"))]
    path = tmp / "ethos-u55-no-gelu.yaml"
    path.write_text("\n".join(lines).replace("name: ethos-u55", "name: ethos-u55-no-gelu") + "\n", encoding="utf-8")
    return str(path)


def open_analysed(model: str, target: str, tmp: Path):
    """A shown main window on demo ``model`` for ``target``, analysed; returns (window, dock)."""
    from PySide6.QtWidgets import QMessageBox

    from app.analysis_dock import install_analysis
    from app.main_window import MainWindow

    path, calib = demo(model)
    settings = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=tmp / "recovery", restore_state=False)
    dock = getattr(win, "analysis", None) or install_analysis(win)
    dock.controller.calibration_for_next = str(calib)
    win.ask_save = lambda: QMessageBox.StandardButton.Discard
    win.resize(1500, 950)
    win.show()
    win.open_path(path, target=target)
    wait_for(lambda: win.doc is not None and win.scene is not None and not win.scene.is_populating, 60, "the model")
    wait_for(lambda: charts_current(dock), 90, "the first compile")
    return win, dock


def close_analysed(win) -> None:
    from PySide6.QtWidgets import QMessageBox

    win.ask_save = lambda: QMessageBox.StandardButton.Discard
    win.close()
    win.analysis.controller.shutdown()
    win.deleteLater()
    settle(0.05)


class StallMeter:
    """The longest gap between ticks of a 5 ms timer: how long the event loop was blocked
    (``worst``, wall clock), and the most CPU time the GUI thread spent within one such gap
    (``worst_cpu``: the work our code did there, whatever else the machine was running)."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setInterval(5)
        self.timer.timeout.connect(self._tick)
        self.last = 0.0
        self.last_cpu = 0.0
        self.worst = 0.0
        self.worst_cpu = 0.0

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        if self.last:
            self.worst = max(self.worst, (now - self.last) * 1000)
            self.worst_cpu = max(self.worst_cpu, (cpu - self.last_cpu) * 1000)
        self.last, self.last_cpu = now, cpu

    def __enter__(self) -> StallMeter:
        self.last = 0.0
        self.worst = 0.0
        self.worst_cpu = 0.0
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.stop()


MAX_STALL_MS = 100.0


def stall_bound(idle_ms: float) -> float:
    """100 ms plus what an idle event loop showed just before (capped at 100 ms): on a loaded
    machine the OS alone holds the GUI thread that long, on a quiet one the bound is 100 ms."""
    return MAX_STALL_MS + min(max(idle_ms - 10.0, 0.0), 100.0)


def idle_noise_ms(seconds: float = 1.0) -> float:
    """The longest gap an idle event loop shows here (other processes' load, the OS scheduler):
    the part of a measured stall that no code of ours caused."""
    with StallMeter() as meter:
        settle(seconds)
    return meter.worst
