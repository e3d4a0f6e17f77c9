"""Colours, fonts and sizes of the editor in one place (the stylesheet lives in assets/styles)."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtGui import QColor, QFont

from nodes.types import TensorType

ROOT = Path(__file__).resolve().parents[1]
STYLESHEET = ROOT / "assets" / "styles" / "studio.qss"

# Placement: (strong colour for bars and the legend, light fill of the node body).
PLACEMENT_COLORS: dict[str, tuple[QColor, QColor]] = {
    "npu": (QColor("#12877a"), QColor("#d3efe9")),
    "cpu": (QColor("#d9711c"), QColor("#fbe2cc")),
    "unplaced": (QColor("#7b8598"), QColor("#eceef2")),
    # a node the optimizer folded or eliminated (an Identity, a constant subgraph): it does not
    # run, so it is neither a fallback nor waiting to be placed
    "removed": (QColor("#b7bdc9"), QColor("#f7f8fa")),
}
PLACEMENT_LABELS = {"npu": "NPU", "cpu": "CPU fallback", "unplaced": "not placed", "removed": "optimized away"}
UNBADGED = ("unplaced", "removed")  # placements drawn without a device badge



def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with ``noun`` agreeing ("1 error", "2 errors", "0 warnings"): the one place the
    editor's text puts a number before a noun."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


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


# A symbolic dim a person named (batch, seq_len, height) reads as itself; one a converter
# generated (DynamicDimension.0, unk__12) or an expression the inference derived
# (floor(DynamicDimension.1/2 - 1/2) + 1) reads as "?".
_NAMED_DIM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GENERATED_DIM = re.compile(r"(?i)(unk__?\d+|dim_?\d+|\w*dynamic\w*|n\d+|d\d+|sym\d+|s\d+)")
DIM_NAME_CHARS = 10


def dim_text(d: object) -> str:
    """One dimension as a label shows it: a size, a short human name, or "?"."""
    if isinstance(d, int):
        return str(d)
    if not isinstance(d, str) or not _NAMED_DIM.fullmatch(d) or _GENERATED_DIM.fullmatch(d):
        return "?"
    return d if len(d) <= DIM_NAME_CHARS else d[:DIM_NAME_CHARS - 1] + "…"


def shape_text(shape: tuple | None) -> str:
    """``1x3x?x?``: a shape as a label shows it (the full symbolic dims belong in a tooltip)."""
    return "?" if shape is None else "x".join(dim_text(d) for d in shape)


def type_text(t) -> str:
    """``float32[?x3x?x?]``: a TensorType as a label shows it (``str(t)`` is the full type)."""
    if t.shape is None or type(t) is not TensorType:
        return str(t)
    name = str(t).split("[", 1)[0]
    return f"{name}[{shape_text(t.shape)}]"
