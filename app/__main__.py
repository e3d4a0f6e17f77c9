"""``python -m app [MODEL] [--target T] ...``: the editor (same as ``npu-studio gui``)."""

from __future__ import annotations

import sys
from pathlib import Path


def make_app(argv: list[str] | None = None):
    """The QApplication with NPU Studio's name and stylesheet."""
    from PySide6.QtWidgets import QApplication

    from app import style

    app = QApplication.instance() or QApplication(argv or [sys.argv[0]])
    app.setApplicationName("NPU Studio")
    app.setOrganizationName("NPU Studio")
    app.setStyleSheet(style.stylesheet())
    _route_qt_messages()
    return app


_QT_NOISE = ("propagateSizeHints",)  # the offscreen platform's notes about features it lacks


def _route_qt_messages() -> None:
    """Send Qt's own messages to Python logging: the offscreen platform's notes go to the debug
    log instead of stderr, where a command's one ``error:`` line must stand alone."""
    import logging

    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    log = logging.getLogger("qt")

    def handler(kind, _context, message: str) -> None:
        if any(n in message for n in _QT_NOISE) or kind == QtMsgType.QtDebugMsg:
            log.debug("%s", message)
        elif kind == QtMsgType.QtInfoMsg:
            log.info("%s", message)
        else:
            log.warning("%s", message)

    qInstallMessageHandler(handler)


def recovery_dir() -> Path:
    """Where autosaved recovery files go (the per-user application data folder)."""
    from PySide6.QtCore import QStandardPaths

    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".npu-studio") / "recovery"


def main(argv: list[str] | None = None) -> int:
    """Run ``npu-studio gui`` with these arguments."""
    from engine.cli import main as cli_main

    args = list(sys.argv[1:] if argv is None else argv)
    return cli_main(["gui", *args])


if __name__ == "__main__":
    sys.exit(main())
