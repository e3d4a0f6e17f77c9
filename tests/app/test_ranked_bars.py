"""The ranked bar charts (per-op latency, quantization error) with a real model's worth of rows:
each op's bar keeps its device colour, and the axis names every row in view wherever the user
scrolls, long exporter names too (elided to fit: pyqtgraph drops a label that does not), while
laying out only those names (158 of them cost the first result's paint ~8 ms)."""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QImage, QPainter

from app.panels.chart_base import BarRow, RankedBarsChart, device_color

pytestmark = pytest.mark.gui

N = 158  # PP-OCRv6 det's compiled ops


def _rows(two: bool = False) -> list[BarRow]:
    devices = ["cpu" if i % 7 == 0 else ("npu" if i % 3 else "unplaced") for i in range(N)]
    return [BarRow(f"/backbone/stage{i // 10}/block{i}/Conv_{i}", float(N - i), device_color(d), f"{N - i} µs", "",
                   value2=float(i % 11) if two else None, color2=device_color(d, True) if two else None)
            for i, d in enumerate(devices)]


def _chart(qtbot) -> RankedBarsChart:
    chart = RankedBarsChart("µs")
    qtbot.addWidget(chart)
    chart.resize(700, 420)
    chart.show()
    return chart


def _drawn_names(chart: RankedBarsChart) -> dict[float, str]:
    """Row position -> the name the axis draws there (pyqtgraph drops labels it cannot fit)."""
    axis = chart.plot.getPlotItem().getAxis("left")
    img = QImage(8, 8, QImage.Format.Format_ARGB32)
    p = QPainter(img)
    p.setFont(axis.style["tickFont"])
    _, _, texts = axis.generateDrawSpecs(p)
    p.end()
    values = {t: v for v, t in axis._tickLevels[0]}
    return {values[t]: t for _, _, t in texts}


def _bar_colours(chart: RankedBarsChart) -> dict[float, set[int]]:
    """Row position -> the fill colours drawn there."""
    drawn: dict[float, set[int]] = {}
    for item in chart.plot.getPlotItem().items:
        if not isinstance(item, pg.BarGraphItem) or item is chart._highlight:
            continue
        o = item.opts
        brushes = o.get("brushes") or [o["brush"]] * len(o["y"])
        for y, brush in zip(o["y"], brushes):
            colour = pg.mkBrush(brush).color()
            if colour.alpha():
                drawn.setdefault(round(float(y)), set()).add(colour.rgba())
    return drawn


@pytest.mark.parametrize("two", [False, True], ids=["latency", "accumulated-and-isolated"])
def test_every_bar_keeps_its_ops_device_colour(qtbot, two):
    chart = _chart(qtbot)
    rows = _rows(two)
    chart.set_rows(rows)
    drawn = _bar_colours(chart)
    for i, r in enumerate(rows):
        want = {r.color.rgba()} | ({r.color2.rgba()} if two else set())
        got = drawn.get(i, set()) | (drawn.get(round(i + 0.19), set()) if two else set())
        assert want <= got, f"row {i} ({r.name}) drawn in {got}, not its device colour"


# magika's op names (a jax2tf export): 9 of its 14 rows in view lost their axis name, the slowest first
LONG = ["jax2tf_get_logits_/MagikaV2/Conv_0/Conv2D", "jax2tf_get_logits_/pjit__one_hot_/Cast_1",
        "jax2tf_get_logits_/MagikaV2/ApplyActivation_1/Mul_2", "jax2tf_get_logits_/pjit__one_hot_/Equal"]


@pytest.mark.parametrize("long_names", [False, True], ids=["short-names", "magika-names"])
def test_axis_names_every_row_in_view_wherever_the_chart_is_scrolled(qtbot, long_names):
    chart = _chart(qtbot)
    rows = _rows()
    if long_names:
        for i, r in enumerate(rows):
            r.name = f"{LONG[i % len(LONG)]}_{i}"
    chart.set_rows(rows)
    pi = chart.plot.getPlotItem()
    for first in (0, 60, N - 14):
        pi.vb.setYRange(first - 0.6, first + 13.6, padding=0)
        qtbot.wait(5)
        drawn = _drawn_names(chart)
        for i in range(first, first + 14):
            name = drawn.get(float(i))
            assert name, f"row {i} ({rows[i].name}) has no name on the axis after scrolling to {first}"
            assert rows[i].name.endswith(name.lstrip("…").split("/")[-1]), (name, rows[i].name)  # elided on the left
        assert len(pi.getAxis("left")._tickLevels[0]) <= 30, "the axis lays out names far out of view"
    chart.set_rows(rows[:5])  # a smaller result after a scrolled one names its own rows
    assert sorted(_drawn_names(chart)) == [0.0, 1.0, 2.0, 3.0, 4.0]
