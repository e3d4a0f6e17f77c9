"""A progress bar that never paints synchronously.

QProgressBar.setValue calls repaint() whenever the bar moves by a pixel, and a synchronous
repaint paints every dirty widget of the window on the spot: on light_densenet121 one
setValue painted the canvas and the charts, 35-65 ms on the GUI thread in the middle of a slot
(measured with cProfile: open_path, the analysis dock's state change). This bar only schedules
a paint (update()), so Qt coalesces it with the window's next frame."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from app import style


class ProgressStrip(QWidget):
    """A thin bar: ``setRange``/``setValue``/``value`` as QProgressBar has them (no text)."""

    def __init__(self, parent: QWidget | None = None, height: int = 12) -> None:
        super().__init__(parent)
        self._min, self._max, self._value = 0, 100, 0
        self._height = height
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(120, self._height)

    def setRange(self, minimum: int, maximum: int) -> None:
        self._min, self._max = int(minimum), max(int(minimum) + 1, int(maximum))
        self.update()

    def setValue(self, value: int) -> None:
        value = max(self._min, min(self._max, int(value)))
        if value != self._value:
            self._value = value
            self.update()  # never repaint(): see the module docstring

    def value(self) -> int:
        return self._value

    def minimum(self) -> int:
        return self._min

    def maximum(self) -> int:
        return self._max

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        h = min(self._height, self.height())
        r = QRectF(0.5, (self.height() - h) / 2 + 0.5, self.width() - 1.0, h - 1.0)
        p.setPen(QColor("#c5cad6"))
        p.setBrush(QColor("#eceef2"))
        p.drawRoundedRect(r, 3, 3)
        frac = (self._value - self._min) / (self._max - self._min)
        if frac > 0:
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(style.SELECTION)
            p.drawRoundedRect(QRectF(r.left(), r.top(), max(r.height(), r.width() * frac), r.height()), 3, 3)
        p.end()
