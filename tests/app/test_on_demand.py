"""A graph too large to itemise (app/canvas/scene.LAZY_MIN_ITEMS nodes and more): the canvas
makes items only for what a view shows, and panning, find, Select All and edits reach the
nodes that have no item yet (app/canvas/on_demand.py)."""

from __future__ import annotations

import pytest
import shiboken6
from PySide6.QtCore import QPointF, QRectF

from app.canvas.scene import LAZY_MIN_ITEMS
from tests.app._helpers import close_window, open_chain_window
from tests.app.analysis_support import wait_for

pytestmark = pytest.mark.gui

NODES = 5000
assert NODES >= LAZY_MIN_ITEMS


def _open(qtbot, tmp_path):
    return open_chain_window(qtbot, tmp_path, NODES, "document_shown")


def _laid_out_in(scene, rect: QRectF) -> set[str]:
    """Names of the nodes whose laid-out box meets ``rect`` (items or not)."""
    return {n.name for x, y, w, h, n in scene.node_boxes() if QRectF(x, y, w, h).intersects(rect)}


def _made(scene) -> set[str]:
    return {it.node.name for it in scene.node_items.values()}


def _assert_items_consistent(scene) -> None:
    """Every edge between two nodes with items is drawn, and every edge item joins live items."""
    want = {(id(n), i) for n in scene.graph.nodes if id(n) in scene.node_items for i, v in enumerate(n.inputs)
            if v is not None and ((v.producer() is not None and id(v.producer()) in scene.node_items)
                                  or v.name in scene.input_items)}
    assert {k for k in scene.edges if not isinstance(k[0], tuple)} == want
    for key, e in scene.edges.items():
        assert shiboken6.isValid(e.source) and shiboken6.isValid(e.target), key
        assert e.target.port_scene_pos(True, e.in_index) == e.path().pointAtPercent(1.0), key


def test_a_huge_graph_opens_with_only_its_view_itemised_and_a_far_region_gets_its_nodes_when_panned_to(qtbot, tmp_path):
    win = _open(qtbot, tmp_path)
    try:
        scene, view = win.scene, win.view
        assert not scene.is_populating
        assert len(scene.node_items) < NODES // 10, "the whole graph was itemised"
        in_view = _laid_out_in(scene, view.visible_scene_rect())
        assert in_view and in_view <= _made(scene), "the first view lacks nodes"
        bounds = scene.graph_bounds()
        assert bounds.height() > 50 * view.visible_scene_rect().height(), "the bounds ignore the nodes without items"
        view.centerOn(QPointF(bounds.center().x(), bounds.bottom() - 200))
        wanted = _laid_out_in(scene, view.visible_scene_rect())
        assert wanted and not wanted & _made(scene)
        wait_for(lambda: wanted <= _made(scene), 20, "the items of the far region")
        assert len(scene.node_items) < NODES // 5, "panning itemised more than the regions seen"
        _assert_items_consistent(scene)
        view.zoom_to_fit()  # far out: the overview draws every node from the layout
        assert scene.overview_mode
        scene.overview.rebuild()
        assert scene.overview.box_count == NODES + 2
        view.zoom_100()
        shown = []
        win.document_shown.connect(lambda: shown.append(1))
        applied = []
        apply_layout = scene.apply_layout
        scene.apply_layout = lambda *a: (applied.append(1), apply_layout(*a))
        win.relayout()  # Lay out again: the items are made again where the views look
        wait_for(lambda: applied and not scene.is_populating
                 and _laid_out_in(scene, view.visible_scene_rect()) <= _made(scene), 30, "the new layout")
        _assert_items_consistent(scene)
        assert len(scene.node_items) < NODES // 5 and not shown
    finally:
        close_window(win)


def test_find_select_all_and_delete_reach_nodes_without_an_item_and_undo_puts_them_back(qtbot, tmp_path):
    win = _open(qtbot, tmp_path)
    try:
        scene, graph = win.scene, win.doc.graph
        far = graph.nodes[-3]
        assert id(far) not in scene.node_items
        win.select_all()
        assert len(scene.selected_nodes()) == NODES, "Select All missed the nodes without items"
        win.find_edit.setText(far.name)
        hit = win.find_next()
        assert hit is not None and hit.node is far and hit.isSelected()
        assert win.view.visible_scene_rect().contains(hit.sceneBoundingRect().center())
        assert scene.selected_nodes() == [far], "Select All outlived a new selection"
        qtbot.waitUntil(lambda: not scene.is_populating, timeout=20000)
        producer = far.input(0).producer()
        assert id(producer) in scene.node_items, "the found node's neighbour in view has no item"
        where = hit.pos()
        win.delete_selection()
        assert graph.node_by_name(far.name) is None and id(far) not in scene.node_items
        win.undo()
        back = graph.node_by_name(far.name)
        assert back is not None and id(back) in scene.node_items
        assert scene.node_items[id(back)].pos() == where
        _assert_items_consistent(scene)
        assert (id(back), 0) in scene.edges, "the restored node's edge from its producer is missing"
    finally:
        close_window(win)


def test_items_far_from_every_view_are_dropped_and_made_again_when_the_view_returns(qtbot, tmp_path, monkeypatch):
    from app.canvas import scene as scene_module

    monkeypatch.setattr(scene_module, "ITEM_BUDGET", 40)
    win = _open(qtbot, tmp_path)
    try:
        scene, view = win.scene, win.view
        top_rect = view.visible_scene_rect()
        top = _laid_out_in(scene, top_rect)
        first = next(iter(top))
        moved = scene.items_named([first])[0]
        scene.apply_positions({moved.key: moved.pos() + QPointF(30, 0)})  # the user's own position: kept
        bounds = scene.graph_bounds()
        for frac in (0.25, 0.5, 0.75, 1.0):  # down the graph, one region after another
            view.centerOn(QPointF(bounds.center().x(), bounds.top() + frac * bounds.height() - 200))
            wanted = _laid_out_in(scene, view.visible_scene_rect())
            wait_for(lambda wanted=wanted: wanted <= _made(scene) and not scene.is_populating, 20, "the region's items")
        assert not (top - {first}) & _made(scene), "the items of the first view stayed after it was left"
        assert first in _made(scene) and shiboken6.isValid(moved), "an item the user moved was dropped"
        assert len(scene.node_items) < 4 * 40
        _assert_items_consistent(scene)
        view.centerOn(top_rect.center())
        wait_for(lambda: top <= _made(scene) and not scene.is_populating, 20, "the first view's items again")
        _assert_items_consistent(scene)
    finally:
        close_window(win)
