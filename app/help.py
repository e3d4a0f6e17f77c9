"""The Help menu: the documentation in docs/ opened offline, and the keyboard shortcuts.

The pages are the repository's own Markdown (docs/), shown in a QTextBrowser that follows the
relative links between them, so the help is the same text a forge shows and needs no network.
The shortcut list is read from the window's QActions when it is opened (menu by menu, then
any other action of the window that has a shortcut), so it can never disagree with the keys
that actually work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QImage, QKeySequence, QTextDocument
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
)

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"
PAGES = (  # (menu text, page under docs/)
    ("NPU Studio &Documentation", "README.md"),
    ("Why Is My Model &Slow on the NPU?", "guides/why-is-my-model-slow.md"),
    ("Why Did &INT8 Break?", "guides/why-did-int8-break.md"),
    ("&Command Line Reference", "cli.md"),
    ("&File Formats", "formats.md"),
    ("Hardware &Targets", "targets.md"),
)


def _plain(text: str) -> str:
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").rstrip(".").strip()


def shortcut_rows(window: QMainWindow) -> list[tuple[str, str, str]]:
    """(menu, action, shortcuts) of every action of ``window`` that has a shortcut, menu order."""
    rows: list[tuple[str, str, str]] = []
    seen: set[int] = set()

    def keys(act: QAction) -> str:
        texts = [s.toString(QKeySequence.SequenceFormat.NativeText) for s in act.shortcuts() if not s.isEmpty()]
        return ", ".join(dict.fromkeys(texts))  # a standard key may repeat an explicit one

    def walk(menu: QMenu, path: str) -> None:
        for act in menu.actions():
            if act.menu() is not None:
                walk(act.menu(), f"{path} > {_plain(act.menu().title())}")
            elif keys(act) and id(act) not in seen:
                seen.add(id(act))
                rows.append((path, _plain(act.text()), keys(act)))

    for act in window.menuBar().actions():
        if act.menu() is not None:
            walk(act.menu(), _plain(act.menu().title()))
    for act in window.findChildren(QAction):
        if keys(act) and id(act) not in seen and act.text():
            seen.add(id(act))
            rows.append(("Other", _plain(act.text()), keys(act)))
    return rows


class ShortcutsDialog(QDialog):
    """A table of the window's keyboard shortcuts, built from its actions when opened."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.setWindowTitle("Keyboard Shortcuts")
        rows = shortcut_rows(window)
        self.table = QTableWidget(len(rows), 3, self)
        self.table.setHorizontalHeaderLabels(["Menu", "Action", "Shortcut"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                self.table.setItem(r, c, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        self.resize(520, 480)


class DocsBrowser(QTextBrowser):
    """A QTextBrowser that scales the pages' screenshots down to the width it has."""

    max_image_width = 860

    def loadResource(self, kind: int, url: QUrl):  # Qt override
        """Images are read from disk (relative to the page) and scaled to ``max_image_width``."""
        data = super().loadResource(kind, url)
        if kind == QTextDocument.ResourceType.ImageResource.value and data is not None:
            image = data if isinstance(data, QImage) else QImage.fromData(data)
            if not image.isNull() and image.width() > self.max_image_width:
                return image.scaledToWidth(self.max_image_width, Qt.TransformationMode.SmoothTransformation)
            return image
        return data


class HelpViewer(QDialog):
    """The Markdown pages of docs/ with back, forward and contents; links between pages work."""

    def __init__(self, parent=None, docs: Path = DOCS_DIR) -> None:
        super().__init__(parent)
        self.setWindowTitle("NPU Studio Help")
        self.docs = docs
        self.browser = DocsBrowser(self)
        self.browser.setOpenExternalLinks(False)
        self.browser.setOpenLinks(True)
        self.browser.setSearchPaths([str(docs)])
        self.browser.sourceChanged.connect(lambda url: self.setWindowTitle(f"NPU Studio Help: {url.fileName()}"))
        bar = QHBoxLayout()
        for text, slot in (("Back", self.browser.backward), ("Forward", self.browser.forward),
                           ("Contents", lambda: self.open_page("README.md"))):
            button = QPushButton(text, self)
            button.clicked.connect(lambda _=False, s=slot: s())
            bar.addWidget(button)
        bar.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.browser)
        self.resize(900, 760)

    def open_page(self, page: str) -> None:
        """Show ``docs/PAGE`` (a path relative to docs/)."""
        self.browser.setSource(QUrl.fromLocalFile(str(self.docs / page)))


def open_local_file(path: str | Path, tell: Callable[[str], None]) -> bool:
    """Open ``path`` in the desktop's viewer; when that fails (a browser refusing to run as root,
    no desktop), ``tell`` the user where the file is."""
    path = Path(path)
    if not path.exists():
        tell(f"{path} does not exist")
        return False
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.resolve()))):
        return True
    tell(f"could not start a viewer for {path.resolve()}: open it yourself")
    return False


def install_help(window: QMainWindow) -> QMenu:
    """Add the Help menu to ``window``: the pages of docs/ and the shortcut list."""
    menu = window.menuBar().addMenu("&Help")
    window.help_viewer = None

    def show_page(page: str) -> HelpViewer:
        if window.help_viewer is None:
            window.help_viewer = HelpViewer(window)
        window.help_viewer.open_page(page)
        window.help_viewer.show()
        window.help_viewer.raise_()
        return window.help_viewer

    window.show_help_page = show_page
    for k, (text, page) in enumerate(PAGES):
        act = QAction(text, window)
        if k == 0:
            act.setShortcut(QKeySequence(QKeySequence.StandardKey.HelpContents))
        act.triggered.connect(lambda _=False, p=page: show_page(p))
        menu.addAction(act)
        if k == 2:
            menu.addSeparator()
    menu.addSeparator()
    act = QAction("&Keyboard Shortcuts", window)
    def show_shortcuts() -> ShortcutsDialog:
        window.shortcuts_dialog = ShortcutsDialog(window)  # rebuilt each time: actions may have changed
        window.shortcuts_dialog.show()
        return window.shortcuts_dialog

    window.show_shortcuts = show_shortcuts
    act.triggered.connect(lambda _=False: show_shortcuts())
    menu.addAction(act)
    about = QAction("&About NPU Studio", window)
    about.triggered.connect(lambda _=False: QMessageBox.about(
        window, "About NPU Studio",
        "<b>NPU Studio</b><br>Open an ONNX model, see where each op runs on an NPU target (teal: NPU, orange: "
        "CPU fallback), edit it, quantize it, and export a compiled bundle.<br><br>"
        f"Documentation: Help &gt; NPU Studio Documentation ({DOCS_DIR})<br>"
        "Command line: <tt>npu-studio --help</tt>"))
    menu.addAction(about)
    window.act_shortcuts = act
    return menu
