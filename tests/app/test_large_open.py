"""Opening a large graph: the canvas shows its first view as soon as the items that view needs
exist (the rest are made in time slices afterwards, what the view shows first), zooming out
meanwhile draws every node from the layout, and the finished canvas is the same as one made
in a single pass (app/canvas/populate.py)."""

from __future__ import annotations

import onnx
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


STALL_NODES = 12000


def _open_stall(qtbot, tmp_path) -> tuple[float, float, float]:
    """(wall ms, GUI-thread CPU ms, idle noise ms) of the longest stall from the open of a
    STALL_NODES chain until its opening analysis landed."""

    from app.worker_process import worker
    from tests.app._helpers import chain_model, new_window
    from tests.app.analysis_support import StallMeter, idle_noise_ms

    tmp_path.mkdir()
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(STALL_NODES), path)
    win = new_window(qtbot, tmp_path)
    wait_for(worker().accepting.is_set, 120, "the worker process")  # the editor's start-up is not opening
    noise = idle_noise_ms(0.5)
    try:
        with StallMeter() as meter:
            with qtbot.waitSignal(win.document_shown, timeout=60000):
                win.open_path(path)
            doc = win.doc
            wait_for(lambda: doc._place_task is None and not doc._delayed_analysis.isActive(), 60, "the analysis")
            qtbot.wait(30)
    finally:
        close_window(win)
    return meter.worst, meter.worst_cpu, noise


def test_the_event_loop_never_stalls_over_100ms_while_a_12000_node_model_opens_and_is_analysed(qtbot, tmp_path):
    """onnx's checker (one C++ call holding the GIL) and the layout run in the worker process,
    and the editor's read thread leaves the GIL every switch interval (main stalled the event loop
    192-206 ms for 20-26 ms of GUI-thread CPU on this graph at load 3-6; 172 ms wall for 41 ms of
    GUI CPU here at load ~5, within the noise bound)."""
    from tests.app.analysis_support import MAX_STALL_MS, stall_bound

    runs = []
    for attempt in range(2):  # best of two: a burst from another process rarely repeats
        wall, cpu, noise = _open_stall(qtbot, tmp_path / str(attempt))
        runs.append((wall, cpu, noise))
        print(f"{STALL_NODES} nodes: longest stall {wall:.0f} ms (bound {stall_bound(noise):.0f}), GUI CPU {cpu:.0f} ms")
        if wall < stall_bound(noise) and cpu < MAX_STALL_MS:
            return
    assert min(r[1] for r in runs) < MAX_STALL_MS, f"the GUI thread worked {min(r[1] for r in runs):.0f} ms in one go"
    assert any(w < stall_bound(n) for w, _c, n in runs), f"the event loop stalled {min(r[0] for r in runs):.0f} ms"


PLACED_NODES = 3000  # app/jobs.REMOTE_PLACE_MIN_NODES: from this size on the worker places an open


def test_a_large_graph_is_placed_in_the_worker_process_with_the_colours_the_editor_would_give(qtbot, tmp_path,
                                                                                             monkeypatch):
    """The opening analysis of a large graph runs in the worker process, which reads the file
    itself: in an editor thread, 50,000 nodes held the GIL 2 s in slices and the job's garbage
    one 220-390 ms collection (the GUI thread waited for both). No editor thread analyses the
    graph, and every node gets the status the editor's own analysis gives it."""
    from app import document, placement
    from app.worker_process import worker
    from engine.ir.clone import clone_graph
    from tests.app._helpers import chain_model, new_window

    ran_here = []
    real = document._analysis_job

    def counted(control, *args):
        ran_here.append(args[2])
        return real(control, *args)

    monkeypatch.setattr(document, "_analysis_job", counted)
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(PLACED_NODES), path)
    win = new_window(qtbot, tmp_path)
    wait_for(worker().accepting.is_set, 120, "the worker process")
    win.analysis.controller.enabled = False  # the compile is not under test
    try:
        with qtbot.waitSignal(win.document_shown, timeout=60000):
            win.open_path(path, target="phone-npu")
        doc = win.doc
        wait_for(lambda: doc._place_task is None and not doc._delayed_analysis.isActive() and doc.statuses, 60,
                 "the opening analysis")
        assert ran_here == [], "a thread of the editor analysed the graph"
        assert doc.analysis_adopted
        graph = clone_graph(doc.graph)
        outcome = placement.place_graph(graph, doc.target)
        assert doc.statuses == placement.statuses(graph, outcome, placement.node_errors(doc.graph.diagnostics))
        assert {st.device for st in doc.statuses.values()} == {"npu"}
        assert win.canvas.legend.labels["npu"].text().endswith(str(PLACED_NODES))
    finally:
        close_window(win)
