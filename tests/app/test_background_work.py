"""Long work leaves the GUI thread: re-verification after an edit and the layout of the
optimized graph run in workers, and their results land on the canvas when they are done."""

from __future__ import annotations

import threading

import pytest

from app import commands
from engine import editing
from tests.app._helpers import node_named

pytestmark = pytest.mark.gui


def test_reinference_after_an_edit_runs_in_a_worker_and_updates_the_shapes(window, qtbot, monkeypatch):
    doc = window.doc
    threads: list[str] = []
    real = editing.reinfer

    def spy(graph, baseline):
        threads.append(threading.current_thread().name)
        return real(graph, baseline)

    monkeypatch.setattr(editing, "reinfer", spy)
    conv1 = node_named(window, "conv1")
    out = conv1.output(0)
    assert out.type.shape == (1, 4, 16, 16)
    doc.push(commands.SetAttrCommand(doc, conv1, "strides", [2, 2]))
    # No flush: the document's own timer starts the analysis, a worker does it.
    qtbot.waitUntil(lambda: out.type.shape == (1, 4, 8, 8), timeout=10_000)
    assert threads and threading.main_thread().name not in threads
    doc.undo()
    qtbot.waitUntil(lambda: out.type.shape == (1, 4, 16, 16), timeout=10_000)


def test_a_result_for_an_older_graph_is_dropped(window, qtbot):
    doc = window.doc
    doc.request_analysis()
    task = doc._place_task
    assert task is not None
    task.done.wait(10)
    result = task.fn(task.control, *task.args)  # what the worker computed, for that version
    relu1 = node_named(window, "relu1")
    doc.push(commands.SetPinCommand(doc, relu1, "cpu"))  # the graph moves on
    doc.flush()
    statuses, diagnostics = doc.statuses, doc.diagnostics
    doc._place_task = task
    doc._on_analysis_done(task, result)
    assert doc.statuses is statuses and doc.diagnostics is diagnostics
    assert doc.statuses["relu1"].device == "cpu"


def test_showing_the_optimized_graph_lays_it_out_in_a_worker_and_back(window, qtbot):
    with qtbot.waitSignal(window.compile_finished, timeout=30_000):
        window.compile()
    assert window.compiled is not None
    if window.compiled.optimized is None:
        pytest.skip("the optimizer is not available")
    editing_scene = window.scene
    window.toggle_optimized_view()
    assert window.scene is editing_scene  # the layout runs in a worker first
    assert not window.act_delete.isEnabled()  # no edits while the view switches
    qtbot.waitUntil(lambda: window.scene is not editing_scene and not window.scene.is_populating, timeout=20_000)
    assert window.scene.read_only
    assert window.showing_optimized
    assert len(window.scene.node_items) == len(window.compiled.optimized)
    window.toggle_optimized_view()
    optimized_scene = window.scene
    qtbot.waitUntil(lambda: window.scene is not optimized_scene and not window.scene.is_populating, timeout=20_000)
    assert not window.scene.read_only
    assert not window.showing_optimized
    assert window.act_delete.isEnabled()
    assert len(window.scene.node_items) == len(window.doc.graph)


def test_edges_drawn_by_the_layout_worker_match_the_items_own_geometry(window):
    scene = window.scene
    assert scene.edges
    for key, e in scene.edges.items():
        made = e.path()
        e.refresh()  # what the item computes from its ends and route
        again = e.path()
        assert made.elementCount() == again.elementCount(), key
        for i in range(made.elementCount()):
            a, b = made.elementAt(i), again.elementAt(i)
            assert abs(a.x - b.x) < 1e-6 and abs(a.y - b.y) < 1e-6, key


def test_a_task_ending_after_its_signals_are_destroyed_prints_no_traceback(qapp, capfd):
    """A job that finishes while the editor quits (its signal object already deleted) printed
    "RuntimeError: Signal source has been deleted" from the worker thread at exit."""
    import shiboken6

    from app.workers import Task

    def job(control):
        control.progress(1.0, "done")
        return 42

    task = Task(job, name="late")
    shiboken6.delete(task.signals)
    task.run()
    assert task.done.is_set() and task.result == 42
    assert "Signal source has been deleted" not in capfd.readouterr().err
