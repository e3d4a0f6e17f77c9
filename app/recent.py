"""Open Recent: the last MAX_RECENT files opened or saved, each listed once (by resolved path);
files of the same name in different folders are told apart by their folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QMenu

MAX_RECENT = 10
KEY = "recent/files"


def recent_files(settings: Any) -> list[str]:
    """The remembered paths, newest first."""
    value = settings.value(KEY, [])
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in (value or [])]


def add_recent(settings: Any, path: str | Path) -> None:
    """Put ``path`` first (once, however it is spelled)."""
    p = str(Path(path).resolve())
    files = [p] + [f for f in recent_files(settings) if f != p and str(Path(f).resolve()) != p]
    settings.setValue(KEY, files[:MAX_RECENT])


def fill_menu(menu: QMenu, settings: Any, open_file: Callable[[str], Any]) -> None:
    """Rebuild ``menu`` from the remembered paths; choosing one calls ``open_file(path)``."""
    menu.clear()
    files = recent_files(settings)
    names = [Path(f).name for f in files]
    for f, name in zip(files, names, strict=True):
        act = menu.addAction(name if names.count(name) == 1 else f"{name} — {Path(f).parent}")
        act.setToolTip(f)
        act.triggered.connect(lambda _=False, p=f: open_file(p))
    menu.setEnabled(bool(files))
