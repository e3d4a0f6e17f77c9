"""The fallback view: every op on the CPU with the reason, its own time, the transfers it
causes, the total, and the fix the placer suggests (with the time it would save)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.panels.chart_base import CPU, CPU_LIGHT, fmt_us, short_name
from app.placement import FallbackCount

COLUMNS = ["Op", "Type", "Reason", "Op time", "Transfers", "Total", "Suggested fix"]


@dataclass
class FallbackRow:
    """One CPU op and what it costs."""

    node: str
    op_type: str
    reason: str
    op_us: float
    transfer_us: float
    transfers: int
    fix: str

    @property
    def total_us(self) -> float:
        """Own time plus the transfers into and out of it."""
        return self.op_us + self.transfer_us


def fallback_rows(sim) -> list[FallbackRow]:
    """The CPU ops of a SimResult, costliest first (transfers counted at both ends)."""
    fixes: dict[str, str] = {}
    for s in sim.placement.suggestions:
        text = "; ".join(s.fixes) + (f" (saves about {fmt_us(s.saving_us)})" if s.saving_us > 0 else "")
        for n in s.nodes:
            fixes.setdefault(n, text)
    rows = []
    for o in sim.ops:
        if o.device != "cpu":
            continue
        mine = [t for t in sim.transfers if o.node in (t.transfer.src, t.transfer.dst)]
        cost = sum(t.transfer.latency_us + t.transfer.conversion_us for t in mine)
        rows.append(FallbackRow(o.node, o.op_type, o.fallback_reason or "", o.latency_us, cost, len(mine),
                                fixes.get(o.node, "")))
    rows.sort(key=lambda r: -r.total_us)
    return rows


class FallbackView(QWidget):
    """Table of CPU fallbacks; clicking a row picks its op."""

    op_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.tree = QTreeWidget(self)
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        h = self.tree.header()
        h.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        h.setStretchLastSection(True)
        for col, width in enumerate((210, 110, 360, 80, 110, 80)):
            self.tree.setColumnWidth(col, width)
        self.tree.itemClicked.connect(self._on_item_clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.summary)
        lay.addWidget(self.tree, 1)
        self.rows: list[FallbackRow] = []

    def set_sim(self, sim, count: FallbackCount | None = None) -> None:
        """Show the CPU ops of a SimResult (``count``: the graph nodes they run, one row per op)."""
        self.rows = fallback_rows(sim)
        self.tree.clear()
        items = []
        for r in self.rows:
            it = QTreeWidgetItem([short_name(r.node, 40), r.op_type, r.reason, fmt_us(r.op_us),
                                  f"{fmt_us(r.transfer_us)} ({r.transfers})" if r.transfers else "–", fmt_us(r.total_us),
                                  r.fix or "– (its neighbours run on the CPU too)"])
            it.setData(0, Qt.ItemDataRole.UserRole, r.node)
            it.setToolTip(0, r.node)
            it.setToolTip(2, r.reason)
            it.setToolTip(6, r.fix)
            it.setForeground(0, QBrush(CPU.darker(125)))
            for col in (3, 4, 5):
                it.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            items.append(it)
        self.tree.addTopLevelItems(items)
        total = sum(r.total_us for r in self.rows)
        share = 100 * total / sim.latency_us if sim.latency_us else 0
        self.summary.setText(
            f"<b>{count.nodes if count else len(self.rows)} graph nodes fall back to the CPU</b> as "
            f"{len(self.rows)} compiled ops (one row each), costing {fmt_us(total)} with their transfers "
            f"({share:.0f}% of the {fmt_us(sim.latency_us)} latency). Select one to see the what-if of pinning it."
            if self.rows else "<b>Every op runs on the NPU</b>: nothing falls back to the CPU.")
        self.summary.setStyleSheet(f"background: {CPU_LIGHT.name()}; padding: 4px;" if self.rows else "padding: 4px;")

    def set_selected(self, names: Sequence[str]) -> None:
        """Select the rows of ``names``."""
        wanted = set(names)
        self.tree.blockSignals(True)
        first = None
        for i in range(self.tree.topLevelItemCount()):
            it = self.tree.topLevelItem(i)
            on = it.data(0, Qt.ItemDataRole.UserRole) in wanted
            it.setSelected(on)
            if on and first is None:
                first = it
        if first is not None:
            self.tree.scrollToItem(first)
        self.tree.blockSignals(False)

    def _on_item_clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        name = item.data(0, Qt.ItemDataRole.UserRole)
        if name:
            self.op_clicked.emit(name)
