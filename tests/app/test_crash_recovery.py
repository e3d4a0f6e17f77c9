"""Autosave recovery after a killed editor: an editor process deletes a node through the real
Delete action, autosaves, and is killed with SIGKILL; the next editor offers the recovery (the
real question dialog), and accepting it restores exactly that edit, as unsaved changes to the
file the killed editor had open (a model, or a project that Save then writes)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from tests.app._helpers import close_window, serialized
from tests.models import ROOT, demo_model

pytestmark = [pytest.mark.gui, pytest.mark.timeout(120, method="thread")]

VICTIM = "/body/body.2/Relu"  # a node in the middle: its consumer is left with an open input
PINNED = "/body/body.0/Conv"
AUTOSAVE_MS = 200

# The editor as `npu-studio gui MODEL` starts it (offer recovery, else open the model), with a
# short autosave delay; once the model is shown it selects VICTIM and triggers Edit > Delete.
EDITOR = """
import os, sys
from PySide6.QtCore import QSettings, QTimer
from app.__main__ import make_app
from app.main_window import MainWindow

model, recovery, settings, victim = sys.argv[1:5]
app = make_app()
win = MainWindow(settings=QSettings(settings, QSettings.Format.IniFormat), recovery_dir=recovery,
                 restore_state=False, autosave_delay_ms=int(sys.argv[5]))
win.show()
done = []

def edit():
    if done:
        return
    done.append(True)
    item = next(it for it in win.scene.node_items.values() if it.node.name == victim)
    win.scene.clearSelection()
    item.setSelected(True)
    win.act_delete.trigger()
    sys.stdout.write(f"edited {len(win.doc.graph)} {win.doc.is_dirty}\\n")
    sys.stdout.flush()

win.document_shown.connect(edit)
if not win.offer_recovery(ask=lambda path, doc: False):
    win.open_path(model)
QTimer.singleShot(90_000, lambda: os._exit(3))  # never outlive the test
app.exec()
"""


def _run_editor_until_autosaved(path: Path, recovery: Path, settings: Path) -> str:
    """Start the editor process on ``path``, wait for its recovery file, SIGKILL it; returns
    its stdout."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", EDITOR, str(path), str(recovery), str(settings), VICTIM,
                             str(AUTOSAVE_MS)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 60
        while not list(recovery.glob("*.npuproj")) and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        alive = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    assert alive, f"the editor exited on its own ({proc.returncode}): {stderr}"
    assert proc.returncode == -signal.SIGKILL
    assert "Traceback" not in stderr, stderr
    return stdout


class AnswerYes:
    """Clicks Yes on the recovery question when it shows up (the real modal dialog)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def arm(self, tries: int = 500) -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            self.texts.append(box.text())
            box.button(QMessageBox.StandardButton.Yes).click()
        elif tries > 0:
            QTimer.singleShot(10, lambda: self.arm(tries - 1))


def _restore_in_a_new_window(qtbot, tmp_path: Path, recovery: Path):
    """The next start of the editor, as `npu-studio gui` does it: offer, answer Yes."""
    from app.main_window import MainWindow

    settings = QSettings(str(tmp_path / "next.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=recovery, restore_state=False)
    qtbot.addWidget(win)
    win.show()
    answer = AnswerYes()
    QTimer.singleShot(0, answer.arm)
    with qtbot.waitSignal(win.document_shown, timeout=20_000):
        assert win.offer_recovery()
    return win, answer.texts


def test_a_killed_editors_unsaved_edit_is_offered_and_restored(qtbot, tmp_path):
    import engine
    from app import commands
    from app.document import Document

    model = tmp_path / "digits.onnx"
    shutil.copy(demo_model("digits_cnn"), model)
    pristine = model.read_bytes()
    recovery = tmp_path / "recovery"

    t0 = time.monotonic()
    stdout = _run_editor_until_autosaved(model, recovery, tmp_path / "crashed.ini")
    crashed_s = time.monotonic() - t0
    assert stdout.startswith("edited 8 True"), stdout  # 9 nodes, one deleted, unsaved
    assert model.read_bytes() == pristine  # the edit lives only in the recovery file
    leftovers = list(recovery.iterdir())
    assert [p.suffix for p in leftovers] == [".npuproj"], leftovers

    # What the edit must look like: the pristine model with VICTIM deleted by the same command.
    ref = Document(engine.load(model), model)
    commands.delete_nodes(ref, [ref.graph.node_by_name(VICTIM)])
    expected = serialized(ref.graph)
    ref.close()
    pristine_names = {n.name for n in engine.load(model).nodes}

    win, asked = _restore_in_a_new_window(qtbot, tmp_path, recovery)
    try:
        assert len(asked) == 1
        assert model.name in asked[0]
        doc = win.doc
        assert doc.model_path.resolve() == model.resolve()
        assert doc.path is None  # restored as unsaved changes to the model, not as a project
        assert doc.is_dirty
        assert pristine_names - {n.name for n in doc.graph.nodes} == {VICTIM}
        assert {n.name for n in doc.graph.nodes} <= pristine_names
        assert serialized(doc.graph) == expected
        assert "*" in win.windowTitle()
    finally:
        close_window(win)
    assert not list(recovery.glob("*.npuproj"))  # closed on purpose: nothing to offer next time
    assert crashed_s < 60


def test_a_killed_editors_project_is_restored_as_that_project_and_saved_back_to_it(qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    from app import commands
    from app.document import Document
    from engine import project as projects

    model = tmp_path / "digits.onnx"
    shutil.copy(demo_model("digits_cnn"), model)
    proj_path = tmp_path / "digits.npuproj"  # the user's project: a pin saved earlier
    projects.save_project(proj_path, projects.Project(model, projects.sha256_of(model), pins={PINNED: "cpu"}))
    saved_before = projects.load_project(proj_path)
    recovery = tmp_path / "recovery"

    stdout = _run_editor_until_autosaved(proj_path, recovery, tmp_path / "crashed.ini")
    assert stdout.startswith("edited 8 True"), stdout
    assert projects.load_project(proj_path) == saved_before  # the edit was never saved

    graph, proj = projects.open_project(proj_path)
    ref = Document(graph, model, project=proj, project_path=proj_path)
    commands.delete_nodes(ref, [ref.graph.node_by_name(VICTIM)])
    expected = serialized(ref.graph)
    ref.close()

    save_as = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: save_as.append(a) or ("", "")))
    win, asked = _restore_in_a_new_window(qtbot, tmp_path, recovery)
    try:
        assert len(asked) == 1
        doc = win.doc
        # Unsaved changes to the project (not to a detached copy of the model).
        assert doc.path == proj_path
        assert win.windowTitle().startswith(f"{proj_path.name} *")
        assert serialized(doc.graph) == expected
        assert doc.graph.node_by_name(PINNED).meta.get("pin") == "cpu"
        # Save writes the project itself, without asking where, and without the recovery marker.
        assert win.save()
        assert not save_as
        assert not doc.is_dirty
        saved = projects.load_project(proj_path)
        assert "recovery" not in saved.extra
        assert saved.pins == {PINNED: "cpu"}
        assert VICTIM in saved.edits.get("removed", [])
        assert not list(recovery.glob("*.npuproj"))
        # The saved project opens as that project again.
        with qtbot.waitSignal(win.document_shown, timeout=20_000):
            win.open_path(proj_path)
        assert win.doc.path == proj_path
        assert serialized(win.doc.graph) == expected
    finally:
        close_window(win)
    assert not list(recovery.glob("*.npuproj"))
