"""The op palette: every registered op, grouped by family, searchable; drag an op onto the
canvas (or double-click it) to add it. Generated from the op registry, nothing hard-coded."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QLineEdit,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.canvas.view import OP_MIME
from nodes import registry

_OP_ROLE = Qt.ItemDataRole.UserRole + 1


def op_key(domain: str, op_type: str) -> str:
    """The text an op travels as in a drag (``domain::op_type``)."""
    return f"{domain}::{op_type}"


class _OpTree(QTreeWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setHeaderHidden(True)
        self.setDragEnabled(True)
        self.setDragDropMode(QTreeWidget.DragDropMode.DragOnly)
        self.setRootIsDecorated(True)
        self.setUniformRowHeights(True)

    def mimeData(self, items: list[QTreeWidgetItem]) -> QMimeData:
        data = QMimeData()
        ops = [it.data(0, _OP_ROLE) for it in items if it.data(0, _OP_ROLE)]
        if ops:
            data.setData(OP_MIME, ops[0].encode("utf-8"))
            data.setText(ops[0].split("::")[-1])
        return data

    def mimeTypes(self) -> list[str]:
        return [OP_MIME]


class PalettePanel(QDockWidget):
    """Dock with the searchable, family-grouped op list."""

    op_activated = Signal(str, str)  # domain, op_type (double-click: add at the view center)

    def __init__(self, parent=None) -> None:
        super().__init__("Ops", parent)
        self.setObjectName("PalettePanel")
        body = QWidget(self)
        lay = QVBoxLayout(body)
        lay.setContentsMargins(4, 4, 4, 4)
        self.search = QLineEdit(body)
        self.search.setPlaceholderText("Search ops…")
        self.search.setClearButtonEnabled(True)
        self.tree = _OpTree(body)
        lay.addWidget(self.search)
        lay.addWidget(self.tree)
        self.setWidget(body)
        self.search.textChanged.connect(self._on_search_changed)
        self.tree.itemDoubleClicked.connect(self._on_item_activated)
        self.reload()

    def reload(self) -> None:
        """Rebuild the list from the op registry (families may register later)."""
        self.tree.clear()
        families: dict[str, QTreeWidgetItem] = {}
        for spec in registry.all_specs():
            fam = spec.family or "other"
            parent = families.get(fam)
            if parent is None:
                parent = QTreeWidgetItem(self.tree, [fam.replace("_", " ")])
                parent.setFlags(parent.flags() & ~Qt.ItemFlag.ItemIsDragEnabled)
                families[fam] = parent
            label = spec.op_type if not spec.domain else f"{spec.op_type}  ({spec.domain})"
            item = QTreeWidgetItem(parent, [label])
            item.setData(0, _OP_ROLE, op_key(spec.domain, spec.op_type))
            doc = (spec.doc or type(spec).__doc__ or "").strip()
            if doc:
                item.setToolTip(0, doc.splitlines()[0])
        self._on_search_changed(self.search.text())

    def _on_search_changed(self, text: str) -> None:
        t = text.strip().lower()
        for i in range(self.tree.topLevelItemCount()):
            fam = self.tree.topLevelItem(i)
            any_shown = False
            for k in range(fam.childCount()):
                child = fam.child(k)
                show = not t or t in child.text(0).lower() or t in fam.text(0).lower()
                child.setHidden(not show)
                any_shown |= show
            fam.setHidden(not any_shown)
            fam.setExpanded(bool(t) and any_shown)

    def _on_item_activated(self, item: QTreeWidgetItem, column: int) -> None:
        key = item.data(0, _OP_ROLE)
        if key:
            domain, _, op = key.rpartition("::")
            self.op_activated.emit(domain, op)

    def visible_ops(self) -> list[str]:
        """Op types currently shown (after the search filter)."""
        out = []
        for i in range(self.tree.topLevelItemCount()):
            fam = self.tree.topLevelItem(i)
            for k in range(fam.childCount()):
                child = fam.child(k)
                if not child.isHidden() and not fam.isHidden():
                    out.append(child.data(0, _OP_ROLE).split("::")[-1])
        return out

    def item_for(self, op_type: str) -> QTreeWidgetItem | None:
        """The list item of an op type."""
        for i in range(self.tree.topLevelItemCount()):
            fam = self.tree.topLevelItem(i)
            for k in range(fam.childCount()):
                child = fam.child(k)
                if child.data(0, _OP_ROLE).split("::")[-1] == op_type:
                    return child
        return None
