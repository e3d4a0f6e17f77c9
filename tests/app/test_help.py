"""The Help menu opens the bundled docs offline and lists the shortcuts from the actions."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


def _help_menu(win):
    menus = [a.menu() for a in win.menuBar().actions() if a.menu() is not None]
    help_menus = [m for m in menus if m.title().replace("&", "") == "Help"]
    assert len(help_menus) == 1
    assert menus[-1] is help_menus[0], "Help is the last menu"
    return help_menus[0]


def _action(menu, text: str):
    for act in menu.actions():
        if act.text().replace("&", "") == text:
            return act
    raise AssertionError(f"no action {text!r} in {[a.text() for a in menu.actions()]}")


def test_help_menu_opens_the_docs_index_from_the_repository_offline(window, qtbot):
    from app.help import DOCS_DIR

    act = _action(_help_menu(window), "NPU Studio Documentation")
    act.trigger()
    viewer = window.help_viewer
    qtbot.waitUntil(viewer.isVisible)
    url = viewer.browser.source()
    assert url.isLocalFile() and url.toLocalFile() == str(DOCS_DIR / "README.md")
    text = viewer.browser.toPlainText()
    assert "Why did INT8 break?" in text and "Command line" in text
    assert "# NPU Studio" not in text, "the page is rendered as Markdown, not shown as source"


def test_guide_entry_opens_the_int8_guide_and_its_links_lead_to_other_pages(window, qtbot):
    from PySide6.QtCore import QUrl

    _action(_help_menu(window), "Why Did INT8 Break?").trigger()
    browser = window.help_viewer.browser
    assert browser.source().fileName() == "why-did-int8-break.md"
    assert "accumulated" in browser.toPlainText() and "isolated" in browser.toPlainText()
    from PySide6.QtGui import QTextDocument

    shot = browser.loadResource(QTextDocument.ResourceType.ImageResource.value, QUrl("../img/int8-digits-phone-npu.png"))
    assert not shot.isNull() and 0 < shot.width() <= browser.max_image_width, "the guide's screenshot loads offline"
    browser.setSource(QUrl("../formats.md"))  # a relative link as the page writes it
    assert browser.source().fileName() == "formats.md"
    assert "simulate --json" in browser.toPlainText()
    browser.backward()
    assert browser.source().fileName() == "why-did-int8-break.md"


def test_shortcut_list_is_read_from_the_window_actions(window, qtbot):
    from PySide6.QtGui import QAction, QKeySequence

    _action(_help_menu(window), "Keyboard Shortcuts").trigger()
    dialog = window.shortcuts_dialog
    table = dialog.table
    rows = {(table.item(r, 0).text(), table.item(r, 1).text()): table.item(r, 2).text()
            for r in range(table.rowCount())}
    native = QKeySequence.SequenceFormat.NativeText
    assert rows[("Edit", "Undo")] == window.act_undo.shortcut().toString(native)
    assert rows[("Tools", "Compile")] == QKeySequence("Ctrl+B").toString(native)
    assert rows[("Help", "NPU Studio Documentation")] == QKeySequence(QKeySequence.StandardKey.HelpContents).toString(native)
    dialog.close()

    # A shortcut added later (another feature's action) shows up the next time the list opens,
    # and a changed shortcut shows its new keys: the list is never a copy kept by hand.
    tools = next(a.menu() for a in window.menuBar().actions() if a.menu() and a.menu().title() == "&Tools")
    extra = QAction("Frobnicate", window)
    extra.setShortcut(QKeySequence("Ctrl+Alt+K"))
    tools.addAction(extra)
    window.act_compile.setShortcut(QKeySequence("Ctrl+Shift+B"))
    window.show_shortcuts()
    table = window.shortcuts_dialog.table
    rows = {(table.item(r, 0).text(), table.item(r, 1).text()): table.item(r, 2).text()
            for r in range(table.rowCount())}
    assert rows[("Tools", "Frobnicate")] == QKeySequence("Ctrl+Alt+K").toString(native)
    assert rows[("Tools", "Compile")] == QKeySequence("Ctrl+Shift+B").toString(native)
    window.shortcuts_dialog.close()
