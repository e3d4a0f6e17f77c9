"""Issue 17: the canvas paints the placement the legend names, whatever order the document's own
placement, the analysis compile and the items' creation happen in."""

from __future__ import annotations

import threading

import onnx
import pytest
from PySide6.QtCore import QSettings

from tests.app._helpers import close_window, open_window, residual_cnn
from tests.app.analysis_support import wait_for

pytestmark = pytest.mark.gui


def painted_fill(scene, item):
    """The colour the canvas paints inside a node's box (left of its badge, below its title)."""
    from PySide6.QtGui import QImage, QPainter

    rect = item.sceneBoundingRect()
    img = QImage(200, 80, QImage.Format.Format_ARGB32)
    img.fill(0)
    p = QPainter(img)
    scene.render(p, source=rect.adjusted(3, 3, 3, 3))
    p.end()
    return img.pixelColor(100, 52)


def compiled_devices(win) -> dict[str, str]:
    """Each node's device in the analysis compile on screen: the op it was compiled into, or
    "removed" (what the legend counts)."""
    res = win.analysis.controller.current
    ops = {o.node: o.device for o in res.sim.ops}
    return {n.name: ops[res.op_of_source[n.name]] if n.name in res.op_of_source else "removed"
            for n in win.doc.graph.nodes}


def mispainted(win, devices: dict[str, str]) -> list[tuple[str, str, str]]:
    """(node, device, what its item paints) of every node painted in another colour than its
    device's; nodes without an item yet count as mispainted."""
    from app import style

    scene, by_name = win.scene, {n.name: n for n in win.doc.graph.nodes}
    out = []
    for name, device in devices.items():
        item = scene.node_items.get(id(by_name[name]))
        fill = painted_fill(scene, item).name() if item is not None else "no item"
        if fill != style.PLACEMENT_COLORS[device][1].name():
            out.append((name, device, f"{fill} ({scene.status_of(by_name[name]).device})"))
    return out


def device_counts(devices: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for device in devices.values():
        counts[device] = counts.get(device, 0) + 1
    return counts


def legend_counts(win) -> dict[str, int]:
    """The node count the legend writes after each placement key ("NPU 3"; none: no count)."""
    counts = {}
    for device in ("npu", "cpu", "unplaced", "removed"):
        tail = win.canvas.legend.labels[device].text().rsplit(" ", 1)[-1]
        if tail.isdigit():
            counts[device] = int(tail)
    return counts


def test_a_compile_that_lands_before_the_documents_own_placement_still_colours_every_node(qtbot, tmp_path,
                                                                                           monkeypatch):
    """The flaky ordering of test_canvas_color_of_every_node_is_the_placement_the_legend_names,
    forced: the document's own placement of the opened graph is held until the analysis compile
    has landed. The compiled placement was composed over the document's statuses of no node at
    all, so the canvas read "Compiled placement" with every node grey ("unplaced")."""
    from app import document

    release = threading.Event()
    real = document._analysis_job

    def held(control, *args):
        release.wait(60)
        return real(control, *args)

    monkeypatch.setattr(document, "_analysis_job", held)
    model = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), model)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = open_window(qtbot, model, settings, tmp_path / "recovery", default_target="phone-npu")
    ctl = win.analysis.controller
    try:
        wait_for(lambda: ctl.current is not None and not ctl.busy and win.doc.placement_source == "compiled", 60,
                 "the first compile, with the document's placement still held")
        assert win.doc._place_task is not None  # the ordering under test: the compile came first
        devices = compiled_devices(win)
        assert mispainted(win, devices) == []
        assert device_counts(devices) == legend_counts(win)
        release.set()
        wait_for(lambda: win.doc._place_task is None, 60, "the document's own placement")
        assert win.doc.placement_source == "compiled"
        assert mispainted(win, devices) == []
    finally:
        release.set()
        close_window(win)
        ctl.shutdown()
