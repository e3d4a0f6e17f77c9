"""Opening a large graph: the canvas shows its first view as soon as the items that view needs
exist (the rest are made in time slices afterwards, what the view shows first), zooming out
meanwhile draws every node from the layout, and the finished canvas is the same as one made
in a single pass (app/canvas/populate.py)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF, QRectF

from app.canvas.node_item import NodeItem
from tests.app._helpers import close_window, open_chain_window
from tests.app.analysis_support import wait_for
from tests.app.test_undo_property import assert_scene_matches_graph

pytestmark = pytest.mark.gui

NODES = 2000


def _open_until_first_view(qtbot, tmp_path):
    return open_chain_window(qtbot, tmp_path, NODES, "canvas_shown")


def _nodes_in(scene, rect: QRectF) -> set[str]:
    """Names of the nodes whose laid-out box meets ``rect`` (from the layout, items or not)."""
    pop = scene.pending_layout
    names = {it.node.name for it in scene.node_items.values() if it.sceneBoundingRect().intersects(rect)}
    if pop is not None:
        by_id = {id(n): n.name for n in scene.graph.nodes}
        names |= {by_id[k] for k, r in pop.pending_boxes() if k in by_id and r.intersects(rect)}
    return names


def test_a_large_graph_shows_its_first_view_before_every_item_exists_and_that_view_is_complete(qtbot, tmp_path):
    win = _open_until_first_view(qtbot, tmp_path)
    try:
        scene = win.scene
        assert scene.is_populating, "the first view waited for every item"
        assert len(scene.node_items) < NODES
        visible = win.view.visible_scene_rect()
        in_view = _nodes_in(scene, visible)
        assert in_view, "the first view shows no node"
        made = {it.node.name for it in scene.node_items.values()}
        assert in_view <= made, f"nodes in view without an item: {sorted(in_view - made)[:5]}"
        with qtbot.waitSignal(win.document_shown, timeout=60000):
            pass
        assert_scene_matches_graph(scene)
        bounds = scene.graph_bounds()
        assert all(bounds.contains(it.sceneBoundingRect().adjusted(3, 3, -3, -3)) for it in scene.node_items.values())
    finally:
        close_window(win)


def test_scrolling_while_the_items_are_made_makes_the_new_view_first(qtbot, tmp_path):
    win = _open_until_first_view(qtbot, tmp_path)
    try:
        scene = win.scene
        bottom = scene.graph_bounds().bottom()
        win.view.centerOn(QPointF(scene.graph_bounds().center().x(), bottom - 200))
        target = win.view.visible_scene_rect()
        wanted = _nodes_in(scene, target)
        assert wanted
        made = lambda: {it.node.name for it in scene.node_items.values()}  # noqa: E731
        assert not wanted <= made(), "the bottom of the graph was made before it was in view"
        wait_for(lambda: wanted <= made(), 20, "the items of the new view")
        assert scene.is_populating, "the new view waited for every other item"
    finally:
        close_window(win)


def test_zooming_out_while_the_items_are_made_draws_every_node(qtbot, tmp_path):
    win = _open_until_first_view(qtbot, tmp_path)
    try:
        scene = win.scene
        win.view.zoom_to_fit()
        assert scene.overview_mode
        assert scene.is_populating
        scene.overview.rebuild()
        boxes = scene.overview.box_count
        assert boxes == NODES + len(scene.graph.inputs) + len(scene.graph.outputs)
        with qtbot.waitSignal(win.document_shown, timeout=60000):
            pass
        win.view.zoom_100()
        assert not scene.overview_mode
        assert all(it.isVisible() for it in scene.node_items.values() if isinstance(it, NodeItem))
    finally:
        close_window(win)
