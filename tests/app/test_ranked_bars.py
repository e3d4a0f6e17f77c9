"""The ranked bar charts (per-op latency, quantization error) with a real model's worth of rows:
each op's bar keeps its device colour, and the axis names the rows in view wherever the user
scrolls, while laying out only those names (158 of them cost the first result's paint ~8 ms)."""

from __future__ import annotations

import pyqtgraph as pg
import pytest

from app.panels.chart_base import BarRow, RankedBarsChart, device_color, short_name

pytestmark = pytest.mark.gui

N = 158  # PP-OCRv6 det's compiled ops


def _rows(two: bool = False) -> list[BarRow]:
    devices = ["cpu" if i % 7 == 0 else ("npu" if i % 3 else "unplaced") for i in range(N)]
    return [BarRow(f"/backbone/stage{i // 10}/block{i}/Conv_{i}", float(N - i), device_color(d), f"{N - i} µs", "",
                   value2=float(i % 11) if two else None, color2=device_color(d, True) if two else None)
            for i, d in enumerate(devices)]


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
    chart = RankedBarsChart("µs")
    qtbot.addWidget(chart)
    chart.resize(700, 420)
    chart.show()
    rows = _rows(two)
    chart.set_rows(rows)
    drawn = _bar_colours(chart)
    for i, r in enumerate(rows):
        want = {r.color.rgba()} | ({r.color2.rgba()} if two else set())
        got = drawn.get(i, set()) | (drawn.get(round(i + 0.19), set()) if two else set())
        assert want <= got, f"row {i} ({r.name}) drawn in {got}, not its device colour"


def test_axis_names_the_rows_in_view_wherever_the_chart_is_scrolled(qtbot):
    chart = RankedBarsChart("µs")
    qtbot.addWidget(chart)
    chart.resize(700, 420)
    chart.show()
    rows = _rows()
    chart.set_rows(rows)
    pi = chart.plot.getPlotItem()
    for first in (0, 60, N - 14):
        pi.vb.setYRange(first - 0.6, first + 13.6, padding=0)
        qtbot.wait(5)
        ticks = dict(pi.getAxis("left")._tickLevels[0])
        for i in range(first, first + 14):
            assert ticks.get(float(i)) == short_name(rows[i].name), f"row {i} unnamed after scrolling to {first}"
        assert len(ticks) <= 30, f"the axis lays out {len(ticks)} names for 14 rows in view"
    chart.set_rows(rows[:5])  # a smaller result after a scrolled one names its own rows
    ticks = dict(pi.getAxis("left")._tickLevels[0])
    assert [ticks.get(float(i)) for i in range(5)] == [short_name(r.name) for r in rows[:5]]
