"""The Help menu (About, keyboard shortcuts, where the documentation is) and opening local
files in the desktop's viewer, which says where the file is when no viewer starts (a browser
refuses to run as root, or there is no desktop)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMessageBox

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CONTRACTS = ROOT.parent / "shared" / "CONTRACTS.md"


def open_local_file(path: str | Path, tell: Callable[[str], None]) -> bool:
    """Open ``path`` in the desktop's viewer; when that fails, ``tell`` the user where it is."""
    path = Path(path)
    if not path.exists():
        tell(f"{path} does not exist")
        return False
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.resolve()))):
        return True
    tell(f"could not start a viewer for {path.resolve()}: open it yourself")
    return False


def shortcuts(window: QMainWindow) -> list[tuple[str, str]]:
    """(action, keys) of every menu action that has a shortcut, in menu order."""
    out: list[tuple[str, str]] = []
    for top in window.menuBar().actions():
        menu = top.menu()
        if menu is None:
            continue
        for act in menu.actions():
            keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in act.shortcuts())
            if keys:
                text = act.text().replace("&", "")
                if text.startswith(("Undo ", "Redo ")):  # "Undo Pin add to CPU": the action, not the step
                    text = text.split(" ", 1)[0]
                out.append((f"{top.text().replace('&', '')} > {text}", keys))
    return out


def install_help(window: QMainWindow, tell: Callable[[str], None]) -> QAction:
    """Add the Help menu to ``window``; returns its About action."""
    menu = window.menuBar().addMenu("&Help")
    about = QAction("&About NPU Studio", window)
    about.triggered.connect(lambda _=False: QMessageBox.about(
        window, "About NPU Studio",
        "<b>NPU Studio</b><br>Open an ONNX model, see where each op runs on an NPU target (teal: NPU, orange: "
        "CPU fallback), edit it, quantize it, and export a compiled bundle.<br><br>"
        f"Documentation: {README}<br>Command line: <tt>npu-studio --help</tt>"))
    keys = QAction("&Keyboard Shortcuts", window)
    keys.setShortcut(QKeySequence("F1"))
    keys.triggered.connect(lambda _=False: QMessageBox.information(
        window, "Keyboard shortcuts",
        "<table>" + "".join(f"<tr><td>{name}</td><td>&nbsp;&nbsp;<b>{k}</b></td></tr>" for name, k in shortcuts(window))
        + "</table>"))
    docs = QAction("&Documentation (README)", window)
    docs.triggered.connect(lambda _=False: open_local_file(README, tell))
    for act in (keys, docs, about):
        menu.addAction(act)
    return about
