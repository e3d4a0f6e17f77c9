"""The editor opening every hostile corpus file (tests/hostile/make_corpus.py): a broken file
shows an error dialog and the window keeps the document it had, unsaved edit included; a
legal-but-odd file may open, but never executes the model nor stalls the GUI thread; and the
bundled demo model opens fine afterwards, every time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app import commands
from tests.app._helpers import serialized
from tests.hostile.make_corpus import CASES, write_corpus
from tests.models import demo_model

# The thread method of pytest-timeout fires even when the GUI thread is stuck in C++.
pytestmark = [pytest.mark.gui, pytest.mark.timeout(60, method="thread")]

DEMO = demo_model("digits_cnn")
TARGET = "phone-npu"  # legal files are placed too (in a worker)
OPEN_TIMEOUT_MS = 10_000
MAX_GUI_STALL_S = 2.0  # a model executed or a huge tensor allocated on the GUI thread shows here


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, tuple[str, Path]]:
    return {name: (expect, path) for name, expect, path in write_corpus(tmp_path_factory.mktemp("corpus"))}


@pytest.fixture(scope="module")
def editor(qapp, tmp_path_factory):
    """One window for the whole corpus (as a person would use it), the demo model open."""
    from PySide6.QtCore import QSettings

    from app.main_window import MainWindow

    tmp = tmp_path_factory.mktemp("editor")
    settings = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=tmp / "recovery", restore_state=False, default_target=None)
    win.resize(1200, 800)
    win.show()
    win.shown_count = 0
    win.document_shown.connect(lambda: setattr(win, "shown_count", win.shown_count + 1))
    yield win
    win.ask_save = lambda: QMessageBox.StandardButton.Discard
    win.close()
    win.deleteLater()


class ErrorDialogs:
    """Records every QMessageBox.warning; the real modal dialog is shown, then closed by a timer."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[object, str, str]] = []
        self._real = QMessageBox.warning
        monkeypatch.setattr(QMessageBox, "warning", staticmethod(self._warning))

    def _warning(self, parent, title, text, *args, **kwargs):
        self.calls.append((parent, title, text))
        QTimer.singleShot(0, lambda: self._close_modal(200))
        return self._real(parent, title, text, *args, **kwargs)

    def _close_modal(self, tries: int) -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            box.done(QMessageBox.StandardButton.Ok)
        elif tries > 0:
            QTimer.singleShot(10, lambda: self._close_modal(tries - 1))


@pytest.fixture
def error_dialogs(monkeypatch) -> ErrorDialogs:
    return ErrorDialogs(monkeypatch)


@pytest.fixture
def executions(monkeypatch) -> list[str]:
    """Loading a model must never run it, and nothing may run one on the GUI thread: the
    executor records (and refuses) such runs. (The analysis docks run the opened model in
    their own workers afterwards; that is allowed.)"""
    from app import jobs
    from engine.sim.executor import Executor

    runs: list[str] = []
    loading = threading.local()
    real_load, real_run = jobs.load_job, Executor.run

    def load_job(*args, **kwargs):
        loading.active = True
        try:
            return real_load(*args, **kwargs)
        finally:
            loading.active = False

    def run(self, *args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            runs.append("on the GUI thread")
        elif getattr(loading, "active", False):
            runs.append("while loading")
        else:
            return real_run(self, *args, **kwargs)
        raise AssertionError(f"a model was executed {runs[-1]}")

    monkeypatch.setattr(jobs, "load_job", load_job)
    monkeypatch.setattr(Executor, "run", run)
    return runs


class StallMeter:
    """The longest gap between ticks of a 10 ms GUI-thread timer."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._last = time.monotonic()
        self._timer = QTimer()
        self._timer.timeout.connect(self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        self.worst = max(self.worst, now - self._last)
        self._last = now

    def __enter__(self) -> StallMeter:
        self._last = time.monotonic()
        self._timer.start(10)
        return self

    def __exit__(self, *exc) -> None:
        self._timer.stop()
        self._tick()


def _open_demo(win, qtbot) -> None:
    with qtbot.waitSignal(win.document_shown, timeout=OPEN_TIMEOUT_MS):
        win.open_path(DEMO)
    assert win.doc.model_path == DEMO
    assert len(win.doc.graph) == 9
    assert len(win.scene.node_items) == 9


def _state(win) -> dict[str, object]:
    doc = win.doc
    return {"doc": doc, "scene": win.scene, "graph": serialized(doc.graph), "dirty": doc.is_dirty,
            "undo": (doc.undo_stack.count(), doc.undo_stack.index()), "title": win.windowTitle(),
            "items": len(win.scene.node_items)}


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_opening_a_hostile_file_reports_it_and_the_window_stays_usable(
        editor, corpus, name, qtbot, error_dialogs, executions):
    win = editor
    expect, path = corpus[name]
    if win.doc is None or win.doc.model_path != DEMO:
        _open_demo(win, qtbot)
    doc = win.doc
    # Unsaved work that a failed open must not touch.
    commands.delete_nodes(doc, [doc.graph.nodes[-1]])
    doc.flush()
    before = _state(win)
    assert before["dirty"]
    shown = win.shown_count

    with StallMeter() as stall:
        win.open_path(path, target=TARGET)
        qtbot.waitUntil(lambda: bool(error_dialogs.calls) or win.shown_count > shown, timeout=OPEN_TIMEOUT_MS)
    assert stall.worst < MAX_GUI_STALL_S, f"{name}: the GUI thread stalled {stall.worst:.2f} s while opening"
    assert not executions, f"{name}: a model was executed {executions}"

    if error_dialogs.calls:
        assert len(error_dialogs.calls) == 1, error_dialogs.calls
        parent, _title, text = error_dialogs.calls[0]
        assert parent is win
        assert "\n" not in text
        assert str(path) in text, text  # names the file
        assert not text.startswith("internal error"), text
        assert "Traceback" not in text
        qtbot.waitUntil(lambda: QApplication.activeModalWidget() is None, timeout=2000)
        # Everything as before the attempt, unsaved edit included.
        assert _state(win) == before
        assert win._task is None
        assert not win.progress.isVisible()
    else:
        assert expect == "legal", f"{name}: a broken file opened without an error dialog"
        assert win.doc is not doc
        assert win.doc.model_path == path
        assert len(win.scene.node_items) == len(win.doc.graph)
        win.doc.wait_for_placement(timeout=OPEN_TIMEOUT_MS / 1000)
        assert not error_dialogs.calls
        assert not executions

    # The window still works: the demo model opens and can be edited.
    error_dialogs.calls.clear()
    _open_demo(win, qtbot)
    assert not error_dialogs.calls
    demo = win.doc
    commands.delete_nodes(demo, [demo.graph.nodes[-1]])
    assert len(demo.graph) == 8
    demo.undo()
    assert len(demo.graph) == 9
