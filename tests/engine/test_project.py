"""Project files: atomic save, load, edits as a structural diff, versions and migration."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine import project as P
from engine.ir.onnx_io import to_onnx


def _model(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "x"], ["y"], name="add")],
        "p", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], initializer=[w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _edit(graph):
    relu = graph.node_by_name("relu")
    add = graph.node_by_name("add")
    add.set_input(0, None)
    graph.remove_node(relu)
    neg = graph.make_node("Neg", [graph.node_by_name("mm").output(0)], name="neg")
    add.set_input(0, neg.output(0))
    graph.node_by_name("mm").set_attr("note", "kept")
    graph.node_by_name("mm").meta["pin"] = "cpu"


def test_project_roundtrip_replays_edits_and_pins(tmp_path):
    model = _model(tmp_path)
    g = engine.load(model)
    base = P.fingerprint(g)
    _edit(g)
    proj = P.Project(model, P.sha256_of(model), target="phone", pins={"mm": "cpu"}, edits=P.edits_since(base, g))
    path = tmp_path / "p.npuproj"
    P.save_project(path, proj)
    doc = json.loads(path.read_text())
    assert doc["version"] == P.VERSION
    assert doc["model"]["path"] == "m.onnx"
    assert doc["edits"]["removed"] == ["relu"]
    g2, proj2 = P.open_project(path)
    assert proj2.target == "phone"
    assert g2.node_by_name("mm").meta["pin"] == "cpu"
    assert to_onnx(g2).graph.node == to_onnx(g).graph.node


def test_save_is_atomic_and_leaves_no_temporary_file(tmp_path):
    model = _model(tmp_path)
    path = tmp_path / "p.npuproj"
    P.save_project(path, P.Project(model))
    P.save_project(path, P.Project(model, target="x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "p.npuproj"]
    assert P.load_project(path).target == "x"


def test_newer_version_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "p.npuproj"
    path.write_text(json.dumps({"format": P.FORMAT, "version": P.VERSION + 1, "model": {"path": "m.onnx"}}))
    with pytest.raises(P.ProjectError, match="newer"):
        P.load_project(path)


def test_truncated_project_is_refused(tmp_path):
    model = _model(tmp_path)
    path = tmp_path / "p.npuproj"
    P.save_project(path, P.Project(model))
    path.write_text(path.read_text()[:40])
    with pytest.raises(P.ProjectError, match="truncated"):
        P.load_project(path)


def test_older_version_is_migrated(tmp_path):
    _model(tmp_path)
    path = tmp_path / "p.npuproj"
    path.write_text(json.dumps({"format": P.FORMAT, "version": 0, "model": "m.onnx", "pins": [["mm", "cpu"]]}))
    proj = P.load_project(path)
    assert proj.model_path == (tmp_path / "m.onnx").resolve()
    assert proj.pins == {"mm": "cpu"}


def test_changed_model_is_detected_by_its_hash(tmp_path):
    model = _model(tmp_path)
    path = tmp_path / "p.npuproj"
    P.save_project(path, P.Project(model, P.sha256_of(model)))
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(P.ProjectError, match="changed"):
        P.open_project(path)
