"""The diagnostics list: verify errors, inference problems and placement decisions of the
open graph, one row each; double-clicking a row centers its node on the canvas.

The rows live in a table model that the view asks only for the rows it shows, so replacing a
list of a thousand fallbacks after each analysis costs the GUI thread next to nothing.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QDockWidget, QTreeView

from app import style
from app.placement import FallbackCount
from engine.diagnostics import Diagnostic

_COLORS = {"error": QColor("#c0392b"), "warning": QColor("#b9770e"), "info": QColor("#5d6575")}
_ORDER = {"error": 0, "warning": 1, "info": 2}
_HEADERS = ("", "Node", "Code", "Message")
_Index = QModelIndex | QPersistentModelIndex


class DiagnosticsModel(QAbstractTableModel):
    """Diagnostics as rows of (severity, node, code, message)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Diagnostic] = []
        self._brushes = {k: QBrush(c) for k, c in _COLORS.items()}

    def set_rows(self, rows: list[Diagnostic]) -> None:
        """Replace every row."""
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(_HEADERS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return _HEADERS[section]
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        d = self.rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (d.severity, d.node or "", d.code, d.message)[col]
        if role == Qt.ItemDataRole.ForegroundRole and col == 0:
            return self._brushes.get(d.severity)
        if role == Qt.ItemDataRole.ToolTipRole and col == 3:
            return d.message
        if role == Qt.ItemDataRole.UserRole:
            return d.node or ""
        return None


class DiagnosticsPanel(QDockWidget):
    """Dock listing diagnostics (severity, node, code, message)."""

    node_activated = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__("Diagnostics", parent)
        self.setObjectName("DiagnosticsPanel")
        self.model = DiagnosticsModel()
        self.tree = QTreeView(self)
        self.tree.setModel(self.model)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setColumnWidth(0, 60)
        self.tree.setColumnWidth(1, 160)
        self.tree.setColumnWidth(2, 130)
        self.tree.doubleClicked.connect(self._on_row_activated)
        self.setWidget(self.tree)

    def show_diagnostics(self, diagnostics: list[Diagnostic], fallback: FallbackCount | None = None,
                         limit: int = 2000) -> None:
        """Replace the rows (errors first; at most ``limit`` rows). ``fallback``: the canvas's CPU
        nodes, named in the title (the fallback warnings are one per compiled op, not per node)."""
        rows = sorted(diagnostics, key=lambda d: _ORDER.get(d.severity, 3))[:limit]
        if rows != self.model.rows:
            self.model.set_rows(rows)
        n_err = sum(1 for d in diagnostics if d.severity == "error")
        n_warn = sum(1 for d in diagnostics if d.severity == "warning")
        title = f"Diagnostics ({style.count(n_err, 'error')}, {style.count(n_warn, 'warning')})" if diagnostics else "Diagnostics"
        if fallback is not None:
            title += f" · CPU fallback: {fallback.phrase()}"
        self.setWindowTitle(title)

    def row_count(self) -> int:
        """Rows shown."""
        return self.model.rowCount()

    def row_node(self, row: int) -> str:
        """The node name of a row ("" for graph-level diagnostics)."""
        return self.model.data(self.model.index(row, 0), Qt.ItemDataRole.UserRole)

    def _on_row_activated(self, index: QModelIndex) -> None:
        name = self.model.data(index, Qt.ItemDataRole.UserRole)
        if name:
            self.node_activated.emit(name)
