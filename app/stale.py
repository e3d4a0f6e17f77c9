"""Whether the analysis numbers on screen are stale, and the mark each panel shows over them.

The panels (charts, Compile, Op analysis, stages, hardware, precision) and the legend counts keep
the last compile's numbers while the next one runs. They are stale from the edit or setting
change that makes them so (the debounce before the compile starts included) until the compile of
the current graph with the current settings lands: ``StaleWatch`` is the one place that decides,
from the controller's result and the document's graph version, and every panel follows it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDockWidget, QLabel, QWidget

STALE_TEXT = "stale, recomputing"
STALE_TIP = ("The numbers (and the canvas colours) are from the compile before the last change; "
             "the new compile replaces them when it lands.")
STALE_CSS = "background:#fff4d6; color:#6b4e00; border:1px solid #e3c66b; border-radius:3px; padding:1px 6px;"


def numbers_are_stale(controller: Any) -> bool:
    """True while the controller's result is not the compile of the document's current graph with
    the current settings on the current (what-if) hardware, or a compile is pending or running
    (nothing shown: not stale)."""
    res, doc = controller.current, controller.doc
    if res is None or doc is None:
        return False
    return bool(controller.busy or res.graph_version != doc.graph.version or res.settings != controller.settings
                or res.compile.target != controller.target)


class StaleWatch(QObject):
    """Follows the controller and its document; ``changed(stale)`` when the answer flips."""

    changed = Signal(bool)

    def __init__(self, controller: Any, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.stale = False
        self._doc: Any = None
        for sig in (controller.state_changed, controller.result_changed, controller.settings_changed,
                    controller.cleared, controller.hardware_changed):
            sig.connect(self.refresh)

    def follow(self, doc: Any) -> None:
        """Hear the edits of ``doc`` (the window's document; called when it changes)."""
        if doc is self._doc:
            return
        if self._doc is not None:
            with contextlib.suppress(RuntimeError, TypeError):
                self._doc.graph_edited.disconnect(self.refresh)
        self._doc = doc
        if doc is not None:
            doc.graph_edited.connect(self.refresh)
        self.refresh()

    def refresh(self, *_args: object) -> None:
        """Decide again (any signal that may change the answer comes here)."""
        stale = numbers_are_stale(self.controller)
        if stale != self.stale:
            self.stale = stale
            self.changed.emit(stale)


class StaleMark(QLabel):
    """The "stale, recomputing" tag over the top right corner of a panel's content (an overlay:
    showing it lays nothing out again). It is placed each time it shows; no event filter follows
    the panel's resizes (a Python filter on a widget being destroyed at exit is a crash risk)."""

    def __init__(self, panel: QWidget) -> None:
        host = panel.widget() if isinstance(panel, QDockWidget) and panel.widget() is not None else panel
        super().__init__(STALE_TEXT, host)
        self.setObjectName("staleMark")
        self.setStyleSheet(STALE_CSS)
        self.setToolTip(STALE_TIP)
        self.host = host
        self.hide()
        self.ensurePolished()  # the style sheet now, not in the slice of the edit that shows it
        self.adjustSize()

    def set_stale(self, stale: bool) -> None:
        """Show or hide the mark."""
        if stale:
            self.move(max(0, self.host.width() - self.width() - 6), 4)
            self.raise_()
        self.setVisible(stale)
