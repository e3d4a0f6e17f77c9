"""What a script driving the real window needs to know, written to a JSON file.

When ``NPU_STUDIO_WALKTHROUGH=/path/state.json`` is set, ``npu-studio gui`` installs a probe
that rewrites that file (atomically, every ``INTERVAL_MS``) with the window's title and
geometry, the dock and toolbar rectangles, the palette's visible op rows, every node on the
canvas (screen rectangle, port positions, device, pin), the undo stack, the last compile, the
active modal dialog and the status-bar message, all in screen coordinates, plus a readiness
signal: ``busy`` (what the window is still doing: loading, laying out, drawing the scene,
placing, compiling, drawing the charts, computing the histogram) and ``still_ms`` (how long
the canvas has not moved: no scroll, zoom or node rectangle change between writes). tools/walkthrough.py aims only when ``busy`` is empty and the
canvas has held still, and
then moves the mouse by these figures and checks each step's effect in them, so it finds widgets
however the layout turns out and fails with a reason instead of clicking blind.
The probe only reads: it never changes the window, and it takes at most ``MAX_SHARE`` of the
GUI thread: it waits longer between writes when a write costs more (PP-OCRv6 det's 464 nodes:
writing every 200 ms, the editor process used 20% of a core, mostly this probe (py-spy), and the
worker process, nicer than the editor, yields the CPU to it; throttled, 5%).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QPoint, QRect, QTimer
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QApplication, QMainWindow, QWidget

ENV = "NPU_STUDIO_WALKTHROUGH"
INTERVAL_MS = 200
MAX_SHARE = 0.05  # of the GUI thread's time the probe may take (it waits longer between writes)
log = logging.getLogger(__name__)


def _rect(widget: QWidget) -> list[int] | None:
    if widget is None or not widget.isVisible():
        return None
    top_left = widget.mapToGlobal(QPoint(0, 0))
    return [top_left.x(), top_left.y(), widget.width(), widget.height()]


def _global_rect(widget: QWidget, r: QRect) -> list[int]:
    p = widget.mapToGlobal(r.topLeft())
    return [p.x(), p.y(), r.width(), r.height()]


class WalkthroughProbe(QObject):
    """Writes the window's state to ``path`` on a timer (see the module docstring)."""

    def __init__(self, window: QMainWindow, path: str | Path) -> None:
        super().__init__(window)
        self.window = window
        self.path = Path(path)
        self.timer = QTimer(self)
        self.timer.setInterval(INTERVAL_MS)
        self.timer.timeout.connect(self.write)
        self.timer.start()
        self.seq = 0  # writes so far: a reader can wait for a state written after its action
        self._moved_at = time.monotonic()
        self._geometry: str | None = None
        window.view.view_changed.connect(self._on_moved)

    def _on_moved(self) -> None:
        self._moved_at = time.monotonic()

    def _busy(self) -> list[str]:
        """What the window is still doing that can move or recolour the canvas."""
        w = self.window
        out = []
        if getattr(w, "_task", None) is not None:
            out.append("loading")
        if getattr(w, "_view_task", None) is not None:
            out.append("laying out")
        scene = getattr(w, "scene", None)
        if scene is not None and scene.is_populating:
            out.append("drawing the scene")
        doc = getattr(w, "doc", None)
        if doc is not None and getattr(doc, "_place_task", None) is not None:
            out.append("placing")
        if doc is not None and (doc._analysis_timer.isActive() or doc._delayed_analysis.isActive()):
            out.append("analysis due")
        analysis = getattr(w, "analysis", None)
        if analysis is not None and getattr(analysis.controller, "busy", False):
            out.append("compiling")
        if analysis is not None and getattr(analysis.charts, "is_updating", False):
            out.append("drawing the charts")
        if analysis is not None and getattr(analysis.op_panel, "histogram_pending", False):
            out.append("computing the histogram")
        return out

    def state(self) -> dict[str, Any]:
        w = self.window
        app = QApplication.instance()
        modal = app.activeModalWidget() if app is not None else None
        popup = app.activePopupWidget() if app is not None else None
        doc = getattr(w, "doc", None)
        stack = doc.undo_stack if doc is not None else None
        compiled = getattr(w, "compiled", None)
        analysis = getattr(w, "analysis", None)
        nodes = self._nodes()
        geometry = json.dumps([(n["name"], n["rect"]) for n in nodes])
        if geometry != self._geometry:
            self._geometry = geometry
            self._moved_at = time.monotonic()
        self.seq += 1
        return {
            "pid": os.getpid(),
            "seq": self.seq,
            "busy": self._busy(),
            "still_ms": int(1000 * (time.monotonic() - self._moved_at)),
            "title": w.windowTitle(),
            "window": _rect(w),
            "docks": self._docks(),
            "modal": None if modal is None else self._modal(modal),
            "popup": None if popup is None else {"class": type(popup).__name__, "rect": _rect(popup)},
            "status": w.statusBar().currentMessage(),
            "banner": w.canvas.banner.text() if w.canvas.banner.isVisible() else "",
            "canvas": _rect(w.view.viewport()),
            "palette_search": _rect(w.palette.search),
            "palette": self._palette_rows(),
            "doc": None if doc is None else {
                "title": doc.title(), "dirty": doc.is_dirty, "nodes": len(doc.graph),
                "inputs": {v.name: list(v.type.shape) if v.type.shape is not None else None
                           for v in doc.graph.inputs},
                "target": getattr(doc, "target", None) and getattr(doc.target, "name", str(doc.target)),
                "fallback": doc.fallback_count(),
            },
            "undo": None if stack is None else {"index": stack.index(), "count": stack.count(),
                                                "clean": stack.isClean(), "undo_text": stack.undoText()},
            "nodes": nodes,
            "cursor": [QCursor.pos().x(), QCursor.pos().y()],
            "under_cursor": self._under_cursor(),
            "wiring": getattr(getattr(w, "scene", None), "_drag", None) is not None,
            "selected_items": [type(i).__name__ for i in w.scene.selectedItems()] if getattr(w, "scene", None) else [],
            "compiled": None if compiled is None else {"summary": str(getattr(compiled, "summary", ""))},
            "analysis_state": None if analysis is None else getattr(analysis.controller, "state", None),
            "export": self._export_state(analysis),
        }

    def _modal(self, modal: QWidget) -> dict[str, Any]:
        from PySide6.QtWidgets import QAbstractButton, QLineEdit

        text = modal.text() if callable(getattr(modal, "text", None)) else ""
        return {"class": type(modal).__name__, "title": modal.windowTitle(), "rect": _rect(modal), "text": text,
                "edits": {e.objectName() or f"edit{k}": {"rect": _rect(e), "text": e.text()}
                          for k, e in enumerate(modal.findChildren(QLineEdit)) if e.isVisible()},
                "buttons": {b.text().replace("&", ""): _rect(b) for b in modal.findChildren(QAbstractButton)
                            if b.isVisible() and b.text()}}

    def _under_cursor(self) -> list[str]:
        w = self.window
        if getattr(w, "scene", None) is None:
            return []
        p = w.view.mapToScene(w.view.viewport().mapFromGlobal(QCursor.pos()))
        return [type(i).__name__ for i in w.scene.items(p)]

    def _docks(self) -> dict[str, list[int] | None]:
        from PySide6.QtWidgets import QDockWidget, QToolBar

        out: dict[str, list[int] | None] = {}
        for d in self.window.findChildren(QDockWidget):
            out[d.objectName() or d.windowTitle()] = _rect(d)
        for t in self.window.findChildren(QToolBar):
            out[t.objectName() or t.windowTitle()] = _rect(t)
        return out

    def _palette_rows(self) -> dict[str, list[int]]:
        tree = self.window.palette.tree
        vp = tree.viewport()
        out: dict[str, list[int]] = {}
        for i in range(tree.topLevelItemCount()):
            fam = tree.topLevelItem(i)
            if fam.isHidden() or not fam.isExpanded():
                continue
            for k in range(fam.childCount()):
                child = fam.child(k)
                if child.isHidden():
                    continue
                r = tree.visualItemRect(child)
                if r.isValid() and vp.rect().intersects(r):
                    out[child.text(0).split()[0]] = _global_rect(vp, r)
        return out

    def _nodes(self) -> list[dict[str, Any]]:
        w = self.window
        scene = getattr(w, "scene", None)
        if scene is None:
            return []
        view, vp = w.view, w.view.viewport()
        doc = getattr(w, "doc", None)
        statuses = doc.statuses if doc is not None else {}
        out = []
        for item in list(scene.node_items.values()):
            node = item.node
            poly = view.mapFromScene(item.sceneBoundingRect()).boundingRect()

            def port(is_input: bool, k: int, item=item) -> list[int]:
                p = vp.mapToGlobal(view.mapFromScene(item.port_scene_pos(is_input, k)))
                return [p.x(), p.y()]

            n_in, n_out = item.port_counts()
            st = statuses.get(node.name)
            out.append({
                "name": node.name, "op": node.op_type, "rect": _global_rect(vp, poly),
                "visible": vp.rect().intersects(poly), "selected": item.isSelected(),
                "pin": node.meta.get("pin"), "device": st.device if st is not None else None,
                "inputs": [port(True, k) for k in range(n_in)],
                "connected": [k < len(node.inputs) and node.inputs[k] is not None for k in range(n_in)],
                "outputs": [port(False, k) for k in range(n_out)],
            })
        return out

    def _export_state(self, analysis: Any) -> dict[str, Any] | None:
        exporter = getattr(analysis, "exporter", None) if analysis is not None else None
        if exporter is None:
            return None
        return {"busy": exporter.task is not None}

    def write(self) -> None:
        """Write the state now (to a temporary file, then renamed: a reader never sees half)."""
        t0 = time.thread_time()  # CPU time: under load a write's wall time is mostly the OS's
        try:
            data = json.dumps(self.state(), default=str)
        except Exception:  # a probe must never take the editor down
            log.exception("walkthrough probe: cannot read the window state")
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, self.path)
        cost_ms = 1000 * (time.thread_time() - t0)
        self.timer.setInterval(max(INTERVAL_MS, int(cost_ms / MAX_SHARE)))


def install_if_asked(window: QMainWindow) -> WalkthroughProbe | None:
    """Install the probe when ``NPU_STUDIO_WALKTHROUGH`` names a file (see the module docstring)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    return WalkthroughProbe(window, path)
