"""Models as exporters in the wild write them: -1 dimensions, unknown ops and domains,
float16/bfloat16 weights and activations, external data beside the model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from engine.ir.onnx_io import to_onnx
from engine.quant.data import CalibrationSet
from tests.engine.cli_util import run_cli


def _conv_model(batch_dim, elem=TensorProto.FLOAT, np_dt=np.float32) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", elem, [batch_dim, 3, 8, 8])
    y = helper.make_tensor_value_info("y", elem, [batch_dim, 4, 8, 8])
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np_dt), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np_dt), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [x], [y], initializer=[w, b])
    opset = 22 if elem == TensorProto.BFLOAT16 else 17  # Conv takes bfloat16 from opset 22
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def test_minus_one_dimension_is_named_in_inspect_and_fixed_by_shape(tmp_path):
    path = _save(_conv_model(-1), tmp_path / "m.onnx")
    rc, out, err = run_cli(["inspect", path, "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    batch = doc["inputs"][0]["shape"][0]
    assert isinstance(batch, str) and batch not in ("", "?")
    rc, out, err = run_cli(["simulate", path, "--target", "phone-npu", "--shape", "x=2,3,8,8", "--json"])
    assert rc == 0, err
    g = engine.load(path, shapes={"x": (2, 3, 8, 8)})
    assert g.inputs[0].type.shape == (2, 3, 8, 8)


def test_negative_dimension_other_than_minus_one_has_its_own_message(tmp_path):
    path = _save(_conv_model(-3), tmp_path / "m.onnx")
    rc, _out, err = run_cli(["inspect", path])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:")
    assert "-3" in lines[0] and "-1 means any size" in lines[0] and "'x'" in lines[0]


def _with_foreign_ops(tmp_path) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("NoSuchOp", ["a"], ["b"], domain="com.microsoft", name="n1"),
             helper.make_node("NoSuchOp", ["b"], ["c"], domain="com.microsoft", name="n2"),
             helper.make_node("Frobnicate", ["c"], ["y"], domain="com.example.vendor", name="f")]
    g = helper.make_graph(nodes, "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1),
                                            helper.make_opsetid("com.example.vendor", 1)])
    return _save(m, tmp_path / "foreign.onnx")


def test_inspect_lists_unknown_ops_with_domain_and_node_count(tmp_path):
    path = _with_foreign_ops(tmp_path)
    rc, out, err = run_cli(["inspect", path, "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert {"NoSuchOp", "Frobnicate"} <= set(doc["unsupported_ops"])
    rows = {u["op_type"]: u for u in doc["unsupported"]}
    assert rows["NoSuchOp"]["nodes"] == 2 and rows["NoSuchOp"]["domain"] == "com.microsoft"
    assert rows["Frobnicate"]["domain_known"] is False
    rc, out, err = run_cli(["inspect", path])
    assert rc == 0 and "NoSuchOp (com.microsoft): 2 nodes" in out


def test_running_an_unknown_op_is_one_error_naming_op_domain_and_count(tmp_path):
    path = _with_foreign_ops(tmp_path)
    np.savez(tmp_path / "in.npz", x=np.ones((1, 4), np.float32))
    rc, _out, err = run_cli(["run", path, "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert "'NoSuchOp'" in lines[0] and "com.microsoft" in lines[0] and "2 nodes" in lines[0]
    assert not (tmp_path / "o.npz").exists()


def test_an_unknown_domain_gets_its_own_message():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example.vendor", name="f")],
                          "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.vendor", 1)])
    graph = engine.load(m)
    with pytest.raises(engine.ExecutionError, match=r"domain 'com.example.vendor' is unknown.*Frobnicate x1"):
        engine.execute(graph, {"x": np.ones((1, 4), np.float32)})


def _ort(model: onnx.ModelProto, feed):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize(("elem", "np_dt"), [(TensorProto.FLOAT16, np.float16), (TensorProto.BFLOAT16, None)])
def test_low_precision_float_models_load_run_optimize_and_quantize(elem, np_dt):
    import ml_dtypes

    dt = np_dt or ml_dtypes.bfloat16
    model = _conv_model(1, elem, dt)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(dt)
    g = engine.load(model)
    ours = engine.execute(g, {"x": x})["y"]
    assert ours.dtype == np.dtype(dt)
    ref = engine.execute(engine.load(_conv_model(1)), {"x": x.astype(np.float32)})["y"]
    tol = 0.02 if np_dt is np.float16 else 0.1
    assert np.abs(ours.astype(np.float32) - ref).max() <= tol * np.abs(ref).max()
    if np_dt is np.float16:  # onnxruntime's CPU provider has no bfloat16 Conv
        theirs = _ort(model, {"x": x})[0]
        assert np.abs(ours.astype(np.float32) - theirs.astype(np.float32)).max() <= 0.01 * np.abs(theirs).max() + 1e-3
    opt = engine.optimize(g).graph
    np.testing.assert_array_equal(engine.execute(opt, {"x": x})["y"].astype(np.float32), ours.astype(np.float32))
    calib = CalibrationSet("x", 2, lambda i: {"x": x})
    q = engine.quantize(opt, calib, analysis_samples=1)
    qproto = to_onnx(q.graph)
    onnx.checker.check_model(qproto, full_check=True)
    got = engine.execute(q.graph, {"x": x})["y"].astype(np.float32)
    cos = float(np.dot(got.ravel(), ref.ravel()) / (np.linalg.norm(got) * np.linalg.norm(ref) + 1e-12))
    assert cos > 0.98
    if np_dt is np.float16:
        theirs = _ort(qproto, {"x": x})[0].astype(np.float32)
        assert theirs.shape == ref.shape and np.isfinite(theirs).all()


def test_external_data_model_loads_from_its_folder(tmp_path):
    """As torch.onnx.export writes a model over 2 GB: weights in files beside the .onnx."""
    model = _conv_model(1)
    folder = tmp_path / "exported"
    folder.mkdir()
    onnx.save_model(_conv_model(1), str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=False,
                    size_threshold=0, convert_attribute=True)
    assert len(list(folder.iterdir())) > 1  # the weights went to their own files
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    g = engine.load(folder / "model.onnx")
    np.testing.assert_allclose(engine.execute(g, {"x": x})["y"], engine.execute(engine.load(model), {"x": x})["y"])
    rc, _out, err = run_cli(["optimize", str(folder / "model.onnx"), "-o", str(tmp_path / "opt.onnx")])
    assert rc == 0, err
    one = tmp_path / "one"
    one.mkdir()
    onnx.save_model(_conv_model(1), str(one / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    assert engine.load(one / "m.onnx").initializers["w"].const.shape == (4, 3, 3, 3)


def test_symbolic_output_dims_written_as_expressions_are_kept_as_text(tmp_path):
    """nudenet's exporter writes output dims such as '(floor(height/2 - 1/2) + 1)*...'."""
    expr = "(floor(floor(height/2 - 1/2)/2) + 1)*(floor(floor(width/2 - 1/2)/2) + 1)"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "height", "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, expr])
    shape = numpy_helper.from_array(np.array([0, 4, -1], np.int64), "s")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")], "g", [x], [y],
                          initializer=[shape])
    path = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "e.onnx")
    rc, out, err = run_cli(["inspect", path, "--json"])
    assert rc == 0, err
    assert json.loads(out)["outputs"][0]["shape"] == ["batch", 4, expr]


def _if_model_with_branch_invalid_at(n_name: str) -> onnx.ModelProto:
    """y = If(flag) then ReduceSum(x, axis 1) else Squeeze(x, axis 1): the else branch is valid only
    when dim 1 is 1 (as silero VAD's 8 kHz branch is valid only for 256-sample windows)."""
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    then_g = helper.make_graph([helper.make_node("ReduceSum", ["x", "one"], ["t"], keepdims=0, name="sum")],
                               "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["a"])])
    axes = helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([1], np.int64)),
                            name="axes")
    else_g = helper.make_graph([axes, helper.make_node("Squeeze", ["x", "axes"], ["e"], name="sq")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["a"])])
    g = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g, name="if")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n_name]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a"])], initializer=[one])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_compile_at_shapes_where_an_if_branch_is_invalid_is_one_clean_error(tmp_path):
    path = _save(_if_model_with_branch_invalid_at("n"), tmp_path / "if.onnx")
    np.savez(tmp_path / "c.npz", x=np.ones((1, 2, 3), np.float32), flag=np.ones((1,), bool))
    out_dir = tmp_path / "bundle"
    rc, _out, err = run_cli(["compile", path, "--shape", "x=2,3", "--target", "phone-npu",
                             "--calib", str(tmp_path / "c.npz"), "-o", str(out_dir)])
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert "fixed input shapes" in lines[0] and "Squeeze" in lines[0]
    assert not out_dir.exists()


def test_default_domain_ops_onnx_does_not_define_load_and_are_named_when_run(tmp_path):
    """onnxruntime's optimizer writes SimplifiedLayerNormalization in the default domain; an op
    nobody defines loads too, so inspect lists it and running names it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y"], epsilon=1e-5, name="rms"),
             helper.make_node("Frobnicate", ["y"], ["z"], name="frob")]
    g = helper.make_graph(nodes, "g", [x], [z], initializer=[numpy_helper.from_array(np.ones(8, np.float32), "s")])
    path = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "d.onnx")
    rc, out, err = run_cli(["inspect", path, "--json"])
    assert rc == 0, err
    assert json.loads(out)["unsupported_ops"] == ["Frobnicate"]
    np.savez(tmp_path / "in.npz", x=np.ones((2, 8), np.float32))
    rc, _out, err = run_cli(["run", path, "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o.npz")])
    assert rc == 2 and err.strip() == "error: op 'Frobnicate' of domain 'ai.onnx' is not supported (1 node uses it)"
