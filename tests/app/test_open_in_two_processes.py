"""Opening an .onnx file while the worker process takes jobs: the worker lays the graph out (and
runs onnx's checker) while the editor's thread verifies and infers it (app/jobs.py). The user
sees the same picture as a layout made in the editor, and a model onnx's checker refuses is
still refused with its one-line reason."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from app.canvas.layout import layered_layout
from app.canvas.snapshot import take_snapshot
from app.worker_process import worker
from tests.app._helpers import chain_model, close_window, new_window
from tests.app.analysis_support import wait_for

pytestmark = pytest.mark.gui


@pytest.fixture
def window(qtbot, tmp_path):
    win = new_window(qtbot, tmp_path)
    win.interactive = False  # a refusal goes to the status bar, not to a modal box
    wait_for(lambda: worker().accepting.is_set(), 120, "the worker process to take jobs")
    yield win
    close_window(win)


def test_the_worker_lays_out_an_opened_model_and_the_picture_is_the_editors_own_layout(window, qtbot, tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(1500), path)
    with qtbot.waitSignal(window.document_shown, timeout=60000):
        task = window.open_path(path)
    assert "worker layout" in task.result.seconds, "the editor laid the model out itself"
    scene, graph = window.scene, window.doc.graph
    snapshot = take_snapshot(graph)
    here = layered_layout(snapshot.data)
    for i, key in enumerate(snapshot.keys):
        if isinstance(key, int):
            pos = scene.node_items[key].pos() if key in scene.node_items else None
            if pos is not None:
                assert (pos.x(), pos.y()) == pytest.approx(here.positions[i]), f"node {i} is not where the layout put it"
    assert task.result.layout.routes == here.routes


def test_a_model_onnxs_checker_refuses_is_refused_when_the_worker_checks_it(window, qtbot, tmp_path):
    # A Relu whose attribute onnx does not define: the graph reads, verifies and infers, and
    # only onnx's checker refuses it.
    node = helper.make_node("Relu", ["x"], ["y"], name="r", bogus=3)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "bogus.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with qtbot.waitSignal(window.statusBar().messageChanged, timeout=60000,
                          check_params_cb=lambda m: "invalid model" in m):
        window.open_path(path)
    assert window.doc is None
    message = window.statusBar().currentMessage()
    assert str(path) in message and "invalid model" in message and "\n" not in message
