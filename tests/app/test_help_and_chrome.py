"""Issue 17 (8): a Help menu, a report that cannot be opened says where it is, recent files
list each file once and tell same-named ones apart, and the toolbar's Undo keeps its width."""

from __future__ import annotations

import onnx
import pytest
from PySide6.QtGui import QDesktopServices

from tests.app._helpers import residual_cnn

pytestmark = pytest.mark.gui


def _menu(win, title: str):
    return next(a.menu() for a in win.menuBar().actions() if a.text().replace("&", "") == title)


def test_help_menu_has_about_keyboard_shortcuts_and_the_docs(window):
    from app.help import shortcut_rows

    texts = [a.text().replace("&", "") for a in _menu(window, "Help").actions() if not a.isSeparator()]
    assert {"NPU Studio Documentation", "Keyboard Shortcuts", "About NPU Studio"} <= set(texts)
    listed = {(menu, action): keys for menu, action, keys in shortcut_rows(window)}
    assert listed[("Edit", "Undo")] == "Ctrl+Z" and listed[("Tools", "Compile")] == "Ctrl+B"


def test_report_the_desktop_cannot_open_says_where_it_is(window, tmp_path, monkeypatch):
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: False))  # a browser refusing root
    (tmp_path / "report.html").write_text("<html></html>")
    exporter = window.analysis.exporter
    exporter.ask_open_report = lambda info: True
    exporter._on_dialog_export_done({"outdir": str(tmp_path), "files": ["report.html"], "latency_us": 1.0})
    assert str((tmp_path / "report.html").resolve()) in window.statusBar().currentMessage()


def test_recent_files_list_each_file_once_and_tell_same_named_ones_apart(window, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    onnx.save(residual_cnn(), other / "residual.onnx")
    first = window.doc.model_path
    window._add_recent(first.parent / "." / first.name)  # the same file, spelled differently
    window._add_recent(other / "residual.onnx")
    labels = [a.text() for a in window.recent_menu.actions()]
    assert len(window.recent_files()) == 2
    assert len(set(labels)) == 2 and all(lab.startswith("residual.onnx — ") for lab in labels)


def test_toolbar_undo_keeps_its_text_while_the_menu_names_the_step(window):
    from app.commands import SetPinCommand

    doc = window.doc
    doc.push(SetPinCommand(doc, doc.graph.node_by_name("add"), "cpu"))
    assert window.tb_undo.text() == "Undo" and window.tb_undo.isEnabled()
    assert "Pin add to CPU" in window.tb_undo.toolTip()
    assert window.act_undo.text().replace("&", "") == "Undo Pin add to CPU"


def test_node_positions_are_saved_in_the_project(qtbot, window, tmp_path, settings, recovery_dir):
    from PySide6.QtCore import QPointF

    from tests.app._helpers import close_window, item_of, open_window

    item = item_of(window, "add")
    moved = item.pos() + QPointF(173, 41)
    window.scene.apply_positions({id(item.node): moved})
    project = tmp_path / "layout.npuproj"
    assert window._save_to(project)
    close_window(window)
    again = open_window(qtbot, project, settings, recovery_dir)
    try:
        assert item_of(again, "add").pos() == moved
    finally:
        close_window(again)
