"""Colours, fonts and sizes of the editor in one place (the stylesheet lives in assets/styles)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QColor, QFont

ROOT = Path(__file__).resolve().parents[1]
STYLESHEET = ROOT / "assets" / "styles" / "studio.qss"

# Placement: (strong colour for bars and the legend, light fill of the node body).
PLACEMENT_COLORS: dict[str, tuple[QColor, QColor]] = {
    "npu": (QColor("#12877a"), QColor("#d3efe9")),
    "cpu": (QColor("#d9711c"), QColor("#fbe2cc")),
    "unplaced": (QColor("#7b8598"), QColor("#eceef2")),
}
PLACEMENT_LABELS = {"npu": "NPU", "cpu": "CPU fallback", "unplaced": "not placed"}

CANVAS_BG = QColor("#f7f8fa")
GRID = QColor("#eceef2")
TEXT = QColor("#1f2430")
TEXT_DIM = QColor("#5d6575")
EDGE = QColor("#8d95a5")
EDGE_HOVER = QColor("#2563eb")
SELECTION = QColor("#2563eb")
ERROR = QColor("#d23c3c")
IO_FILL = QColor("#e3e8f4")
IO_BORDER = QColor("#6b7894")
GROUP_FRAME = QColor("#7a5cc7")
GROUP_FILL = QColor(122, 92, 199, 22)
PORT_FILL = QColor("#ffffff")
PORT_BORDER = QColor("#59627a")
CONST_PORT = QColor("#9aa3b5")

NODE_WIDTH = 176.0
NODE_HEIGHT = 58.0
IO_WIDTH = 150.0
IO_HEIGHT = 34.0
PORT_RADIUS = 4.5


def font(point_size: float, bold: bool = False) -> QFont:
    """The UI font at a size (bold for op types)."""
    f = QFont()
    f.setPointSizeF(point_size)
    f.setBold(bold)
    return f


def stylesheet() -> str:
    """The application stylesheet (empty when the file is missing)."""
    try:
        return STYLESHEET.read_text()
    except OSError:
        return ""
