"""The first look at a model that is narrow at the top and wide further down (a detector's
backbone over its multi-scale head): the view opens on the input, not on the empty left part of
the graph's full width (nudenet opened with its backbone cut off at the right edge)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from tests.app._helpers import close_window, open_window

pytestmark = pytest.mark.gui


def _narrow_then_wide(chain: int = 30, branches: int = 16) -> onnx.ModelProto:
    nodes, prev = [], "x"
    for i in range(chain):
        nodes.append(helper.make_node("Relu", [prev], [f"c{i}"], name=f"chain{i}"))
        prev = f"c{i}"
    heads = []
    for b in range(branches):
        nodes.append(helper.make_node("Sigmoid", [prev], [f"h{b}"], name=f"head{b}"))
        nodes.append(helper.make_node("Relu", [f"h{b}"], [f"r{b}"], name=f"head{b}_relu"))
        heads.append(f"r{b}")
    nodes.append(helper.make_node("Concat", heads, ["y"], axis=1, name="cat"))
    g = helper.make_graph(nodes, "narrow_then_wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 * branches])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_first_look_of_a_graph_wide_only_further_down_shows_its_input(qtbot, tmp_path, settings, recovery_dir):
    path = tmp_path / "narrow_then_wide.onnx"
    onnx.save(_narrow_then_wide(), path)
    win = open_window(qtbot, path, settings, recovery_dir)
    try:
        sc, view = win.scene, win.view
        win.frame_for_screenshot()
        vis = view.visible_scene_rect()
        assert sc.graph_bounds().width() > vis.width(), "the graph must be wider than the view for this case"
        inp = next(iter(sc.input_items.values())).sceneBoundingRect()
        assert vis.contains(inp), f"the input {inp} is outside the first look {vis}"
    finally:
        close_window(win)
