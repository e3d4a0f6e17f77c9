"""The pass trace: what the optimizer did, pass by pass (modified or not, node counts before
and after, time) and which fused nodes came from which originals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import style


def _get(rec: Any, key: str, default: Any = None) -> Any:
    if isinstance(rec, Mapping):
        return rec.get(key, default)
    return getattr(rec, key, default)


class PassTracePanel(QDockWidget):
    """Dock with the optimizer's trace (empty until a compile or optimize ran)."""

    node_activated = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__("Pass trace", parent)
        self.setObjectName("PassTracePanel")
        body = QWidget(self)
        lay = QVBoxLayout(body)
        lay.setContentsMargins(4, 4, 4, 4)
        self.summary = QLabel("Run Compile (Ctrl+B) to see what each optimizer pass did.")
        self.summary.setWordWrap(True)
        self.tree = QTreeWidget(body)
        self.tree.setHeaderLabels(["Pass", "Changed", "Nodes", "ms"])
        self.tree.setColumnWidth(0, 200)
        self.tree.itemDoubleClicked.connect(self._on_item_activated)
        lay.addWidget(self.summary)
        lay.addWidget(self.tree)
        self.setWidget(body)

    def show_trace(self, passes: Sequence[Any], fused: Sequence[Any] = (), summary: str = "") -> None:
        """Show pass records (name, modified, nodes_before, nodes_after, ms[, rewrites]) and
        fusion records (node, op_type, from)."""
        self.tree.clear()
        for rec in passes:
            before, after = _get(rec, "nodes_before", "?"), _get(rec, "nodes_after", "?")
            ms = _get(rec, "ms", None)
            item = QTreeWidgetItem([str(_get(rec, "name", "?")), "yes" if _get(rec, "modified") else "",
                                    f"{before} → {after}", f"{ms:.1f}" if isinstance(ms, (int, float)) else ""])
            for rw in _get(rec, "rewrites", None) or []:
                text = rw if isinstance(rw, str) else f"{_get(rw, 'rule', '')} at {_get(rw, 'node', '')}"
                child = QTreeWidgetItem(item, [text])
                child.setData(0, Qt.ItemDataRole.UserRole, _get(rw, "node", "") if not isinstance(rw, str) else "")
            self.tree.addTopLevelItem(item)
        if fused:
            top = QTreeWidgetItem([f"Fused nodes ({len(fused)})"])
            for rec in fused:
                origin = ", ".join(_get(rec, "from", []) or [])
                child = QTreeWidgetItem(top, [f"{_get(rec, 'node', '?')} ({_get(rec, 'op_type', '')})", "", origin])
                child.setData(0, Qt.ItemDataRole.UserRole, _get(rec, "node", ""))
            self.tree.addTopLevelItem(top)
        self.summary.setText(summary or style.count(len(passes), "pass", "passes"))

    def _on_item_activated(self, item: QTreeWidgetItem, column: int) -> None:
        name = item.data(0, Qt.ItemDataRole.UserRole)
        if name:
            self.node_activated.emit(name)
