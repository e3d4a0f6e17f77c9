"""Issue 17 and #18 (2): the editor opens placed on a default target, one owner decides what the
canvas shows, a model that cannot load ends ``gui --screenshot`` at once, and a clean quit leaves
no recovery prompt."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from PySide6.QtCore import QSettings

from tests.app._helpers import close_window, item_of, open_window, residual_cnn
from tests.app.analysis_support import wait_for
from tests.models import ROOT

pytestmark = pytest.mark.gui


def _unloadable_model(path: Path) -> Path:
    """A model file the loader refuses (a node reads a tensor nothing defines)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    g = helper.make_graph([helper.make_node("Add", ["x", "nowhere"], ["y"])], "broken", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_screenshot_of_a_model_that_cannot_load_exits_2_with_one_error_line(tmp_path):
    """It used to wait forever on a warning box nobody could click (and could miss the failure)."""
    model = _unloadable_model(tmp_path / "broken.onnx")
    shot = tmp_path / "shot.png"
    env = {"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "engine", "gui", str(model), "--screenshot", str(shot)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - t0
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:") and "broken.onnx" in lines[0]
    assert not shot.exists()
    assert seconds < 30  # the brief's bar is 10 s on an idle machine; a hang is 60 s and fails above


def _minus_one_batch_model(path: Path) -> Path:
    """A model whose batch dimension is stored as -1 (as PaddleOCR's exports store it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    x.type.tensor_type.shape.dim[0].dim_value = -1
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    y.type.tensor_type.shape.dim[0].dim_value = -1
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "minus_one", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _truncated_model(path: Path) -> Path:
    path.write_bytes((ROOT / "assets" / "models" / "mobilenet_demo.onnx").read_bytes()[:20000])
    return path


@pytest.mark.parametrize(("make", "says"), [(_minus_one_batch_model, "input 'x' dimension 0 is dynamic"),
                                            (_truncated_model, "not an ONNX model")], ids=["minus_one_dims", "truncated"])
def test_screenshot_refuses_a_model_it_cannot_compile_before_starting_the_editor(tmp_path, make, says):
    """A -1 batch without --shape drew an unplaced window and exited 0 (the CLI's rule is an
    error naming the input); a file that is no model took 33-39 s to say so (the window and the
    compiled kernels were made first), 5-7 s now on the same loaded machine."""
    model = make(tmp_path / "m.onnx")
    shot = tmp_path / "shot.png"
    env = {"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "engine", "gui", str(model), "--screenshot", str(shot)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - t0
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: {model}") and says in lines[0], lines[0]
    assert not shot.exists()
    assert seconds < 20  # no Qt, no window, no kernels: the import of the engine and one parse


def _window(qtbot, tmp_path: Path, **kw):
    from app.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    win = MainWindow(settings=settings, recovery_dir=tmp_path / "recovery", restore_state=False, **kw)
    qtbot.addWidget(win)
    return win, settings


def test_first_run_opens_on_phone_npu_and_the_last_target_after(qtbot, tmp_path):
    win, _ = _window(qtbot, tmp_path)
    assert win.target_box.currentData() == "phone-npu"
    win.target_box.setCurrentIndex(win.target_box.findData("ethos-u55"))
    win.close()
    again, _ = _window(qtbot, tmp_path)
    assert again.target_box.currentData() == "ethos-u55"
    again.target_box.setCurrentIndex(0)  # "(none)" is a choice too, remembered as such
    again.close()
    third, _ = _window(qtbot, tmp_path)
    assert third.target_box.currentData() is None
    third.close()


@pytest.fixture
def placed_window(qtbot, tmp_path):
    model = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), model)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    win = open_window(qtbot, model, settings, tmp_path / "recovery", default_target="phone-npu")
    ctl = win.analysis.controller
    wait_for(lambda: ctl.current is not None and not ctl.busy and win.doc.placement_source == "compiled", 60,
             "the first compile on the canvas")
    yield win
    close_window(win)
    ctl.shutdown()


def test_model_opened_without_a_target_is_placed_and_compiled(placed_window):
    doc = placed_window.doc
    assert doc.target_name == "phone-npu"
    assert all(st.device in ("npu", "cpu") for st in doc.statuses.values())


def test_one_edit_places_the_edited_graph_exactly_once(placed_window, monkeypatch):
    import threading

    from app import placement
    from app.commands import SetAttrCommand
    from engine.ir import clone

    calls = []
    real = placement.place_graph
    monkeypatch.setattr(placement, "place_graph", lambda g, t: calls.append(len(g)) or real(g, t))
    gui_clones, worker_clones = [], []
    real_clone = clone.clone_graph

    def counting_clone(g, *a, **kw):
        on_gui = threading.current_thread() is threading.main_thread()
        (gui_clones if on_gui else worker_clones).append(len(g))
        return real_clone(g, *a, **kw)

    monkeypatch.setattr(clone, "clone_graph", counting_clone)
    from app import wire

    gui_reads, sender_reads = [], []
    real_flat = wire._Flat.__init__

    def counting_flat(self, root):
        on_gui = threading.current_thread() is threading.main_thread()
        (gui_reads if on_gui else sender_reads).append(len(root))
        real_flat(self, root)

    monkeypatch.setattr(wire._Flat, "__init__", counting_flat)
    win = placed_window
    doc, ctl = win.doc, win.analysis.controller
    compiles = ctl.compiles_started
    node = doc.graph.node_by_name("relu2")
    doc.push(SetAttrCommand(doc, doc.graph.node_by_name("conv2"), "dilations", [1, 1]))
    wait_for(lambda: ctl.compiles_started > compiles and not ctl.busy and doc._place_task is None
             and doc.placement_source == "compiled", 60, "the edit's compile")
    assert node is not None
    assert calls == [len(doc.graph)]
    assert ctl.compiles_started == compiles + 1
    # One clone for the edited graph's analysis, made by a worker thread, and one read of it for the
    # compile in the worker process, made by the thread that sends it there: none on the GUI thread
    # (light_densenet121's clone took 40-100 ms there while a worker ran).
    assert gui_clones == [] and gui_reads == []
    assert worker_clones == [len(doc.graph)]
    assert sender_reads == [len(doc.graph)]


def test_canvas_color_of_every_node_is_the_placement_the_legend_names(placed_window):
    from app import style

    win = placed_window
    doc = win.doc
    legend = win.canvas.legend
    assert legend.source.text() == placement_label("compiled")
    res = win.analysis.controller.current
    ops = {o.node: o.device for o in res.sim.ops}
    counts: dict[str, int] = {}
    for n in doc.graph.nodes:
        item = item_of(win, n.name)
        device = ops[res.op_of_source[n.name]] if n.name in res.op_of_source else "removed"
        assert _painted_fill(win, item) == style.PLACEMENT_COLORS[device][1], \
            (n.name, win.scene.status_of(n), doc.placement_source, res is win.analysis.controller.current)
        counts[device] = counts.get(device, 0) + 1
    for device, n in counts.items():
        assert legend.labels[device].text().endswith(f" {n}")


def _painted_fill(win, item):
    """The colour the canvas paints inside a node's box."""
    from PySide6.QtGui import QImage, QPainter

    rect = item.sceneBoundingRect()
    img = QImage(200, 80, QImage.Format.Format_ARGB32)
    img.fill(0)
    p = QPainter(img)
    win.scene.render(p, source=rect.adjusted(3, 3, 3, 3))
    p.end()
    return img.pixelColor(100, 52)


def placement_label(source: str) -> str:
    from app import placement

    return placement.SOURCE_LABELS[source]


def test_an_edit_shows_the_edited_placement_labelled_until_its_compile_lands(placed_window):
    from app.commands import SetPinCommand

    win = placed_window
    doc, ctl = win.doc, win.analysis.controller
    node = doc.graph.node_by_name("add")
    doc.push(SetPinCommand(doc, node, "cpu"))
    assert doc.placement_source == "edited"  # the compile of the graph before the edit is stale
    assert win.canvas.legend.source.text() == placement_label("edited")
    wait_for(lambda: not ctl.busy and doc.placement_source == "compiled", 60, "the pin's compile")
    assert doc.statuses["add"].device == "cpu"


def test_clean_quit_after_save_as_leaves_no_recovery_prompt(qtbot, tmp_path):
    from app.commands import SetPinCommand
    from app.document import pending_recoveries

    model = tmp_path / "residual.onnx"
    onnx.save(residual_cnn(), model)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    recovery = tmp_path / "recovery"
    win = open_window(qtbot, model, settings, recovery)
    doc = win.doc
    doc.push(SetPinCommand(doc, doc.graph.node_by_name("add"), "cpu"))
    assert doc.autosave() is not None  # the recovery file written before the project has a name
    assert pending_recoveries(recovery)
    win._save_to(tmp_path / "project.npuproj")
    close_window(win)
    nxt, _ = _window(qtbot, tmp_path)
    assert not nxt.offer_recovery(ask=lambda path, d: pytest.fail(f"asked to restore {path}"))
    assert pending_recoveries(recovery) == []


def test_nodes_the_optimizer_removed_are_counted_as_optimized_away_not_as_not_placed(qtbot, tmp_path):
    """PP-OCRv6 det on phone-npu: the legend read "not placed 148" for 147 Identity nodes the
    optimizer eliminated (they do not run anywhere) and one dropped, unconnected op."""
    from app import style
    from app.commands import AddNodeCommand

    model = residual_cnn()
    graph = model.graph
    relu = next(n for n in graph.node if n.name == "relu1")
    relu.output[0] = "r1_raw"
    graph.node.insert(2, helper.make_node("Identity", ["r1_raw"], ["r1"], name="identity"))
    path = tmp_path / "with_identity.onnx"
    onnx.save(model, path)
    win = open_window(qtbot, path, QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                      tmp_path / "recovery", default_target="phone-npu")
    doc, ctl = win.doc, win.analysis.controller

    def compiled_now() -> bool:
        return ctl.current is not None and not ctl.busy and doc.placement_source == "compiled"

    wait_for(compiled_now, 60, "the first compile on the canvas")
    legend = win.canvas.legend
    assert doc.statuses["identity"].device == "removed"
    assert "removed by the optimizer" in doc.statuses["identity"].reason
    assert legend.labels["removed"].text() == "optimized away 1" and legend.labels["removed"].isVisibleTo(legend)
    assert legend.labels["unplaced"].text() == "not placed"  # nothing waits to be placed
    assert _painted_fill(win, item_of(win, "identity")) == style.PLACEMENT_COLORS["removed"][1]
    doc.push(AddNodeCommand(doc, "Relu", name="loose", inputs=[doc.graph.values["r1"]]))  # wired, read by nothing
    wait_for(lambda: doc.graph.node_by_name("loose") is not None and compiled_now()
             and "loose" in doc.statuses, 60, "the edit's compile")
    assert legend.labels["removed"].text() == "optimized away 2"  # an op whose output nobody reads does not run
    close_window(win)
    ctl.shutdown()
