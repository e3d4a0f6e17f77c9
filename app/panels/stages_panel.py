"""The stage breakdown of one inference, in the field notes' table form: stage, time, share,
notes (input load/decode, preprocess, layout conversion and copies, NPU inference, CPU
fallback, postprocess), with the end-to-end total last."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QDockWidget,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.panels.chart_base import CPU_LIGHT, NPU_LIGHT, TRANSFER_LIGHT, fmt_us

COLUMNS = ("Stage", "Time", "Share", "Notes")
_ROW_COLORS = {"NPU inference": NPU_LIGHT, "CPU fallback": CPU_LIGHT, "layout conversion / copies": TRANSFER_LIGHT}


class StagesPanel(QDockWidget):
    """Dock with the stage table of the current simulation."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Stages", parent)
        self.setObjectName("StagesPanel")
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(4, 4, 4, 4)
        self.title = QLabel("No simulation yet.")
        self.title.setWordWrap(True)
        lay.addWidget(self.title)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        h = self.table.horizontalHeader()
        h.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        h.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        h.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        h.setStretchLastSection(True)
        lay.addWidget(self.table, 1)
        self.setWidget(body)

    def rows(self) -> list[tuple[str, str, str, str]]:
        """The table's text, row by row (tests read it)."""
        return [tuple(self.table.item(r, c).text() for c in range(len(COLUMNS)))  # type: ignore[misc]
                for r in range(self.table.rowCount())]

    def show_result(self, result) -> None:
        """Fill the table from an AnalysisResult's simulation."""
        sim = result.sim
        stages = list(sim.stages)
        self.table.setRowCount(len(stages) + 1)
        for r, s in enumerate(stages):
            cells = (s.name, fmt_us(s.us), f"{100 * s.share:.1f}%", s.note)
            for c, text in enumerate(cells):
                it = QTableWidgetItem(text)
                if c in (1, 2):
                    it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                color = _ROW_COLORS.get(s.name)
                if color is not None:
                    it.setBackground(QBrush(QColor(color)))
                it.setToolTip(s.note)
                self.table.setItem(r, c, it)
        total = sum(s.us for s in stages)
        bold = QFont()
        bold.setBold(True)
        for c, text in enumerate(("end to end", fmt_us(total), "100%", f"model latency {fmt_us(sim.latency_us)}")):
            it = QTableWidgetItem(text)
            it.setFont(bold)
            if c in (1, 2):
                it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(len(stages), c, it)
        src = result.compile.source
        name = Path(src.source_path).stem or src.name or "model"
        self.title.setText(f"<b>{name}</b> on {result.compile.target.name}: "
                           f"where one inference's time goes, host pipeline included")
