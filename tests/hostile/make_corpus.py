"""Generate the hostile-input corpus: malformed, malicious and merely odd ONNX files.

`python -m tests.hostile.make_corpus DIR` writes every case into DIR/<case>/model.onnx (each in
its own folder, so external-data escapes have a folder to escape from) and plants
DIR/secret.bin, whose bytes must never show up in anything NPU Studio prints or writes.

Every case is (name, expectation): "error" when the file must be refused with exit 2, "legal"
when it is a valid model that may load (with a warning) and must then not crash anything.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SECRET = np.full(64, 1234.5678, np.float32)  # a value no model here computes by accident
X_SHAPE = [1, 3, 8, 8]
OPSET = 17


def _vi(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs=None, outputs=None, inits=(), opset=OPSET, **kw) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "hostile", inputs if inputs is not None else [_vi("x", X_SHAPE)],
                          outputs if outputs is not None else [_vi("y", X_SHAPE)], initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], **kw)
    m.ir_version = 8
    return m


def _conv_model() -> onnx.ModelProto:
    """A small legal model: Conv 3->3 + Relu (quantizable, placeable)."""
    w = numpy_helper.from_array(np.full((3, 3, 3, 3), 0.1, np.float32), "w")
    return _model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                   helper.make_node("Relu", ["c"], ["y"], name="relu")], inits=[w])


def _external(model: onnx.ModelProto, tensor: TensorProto, location: str, offset=0, length=None) -> onnx.ModelProto:
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length if length is not None else 324))):
        e = tensor.external_data.add()
        e.key, e.value = k, v
    return model


def _ext_case(location: str, offset=0, length=None):
    def make(d: Path) -> onnx.ModelProto:
        m = _conv_model()
        return _external(m, m.graph.initializer[0], location, offset, length)

    return make


def _symlink_case(d: Path) -> onnx.ModelProto:
    link = d / "weights.bin"
    if not link.exists():
        os.symlink(d.parent / "secret.bin", link)
    m = _conv_model()
    return _external(m, m.graph.initializer[0], "weights.bin", 0, 256)


def _ext_ok_file(d: Path, size: int) -> None:
    (d / "w.bin").write_bytes(b"\0" * size)


def _offset_past_end(d: Path) -> onnx.ModelProto:
    _ext_ok_file(d, 100)
    m = _conv_model()
    return _external(m, m.graph.initializer[0], "w.bin", 4096, 324)


def _length_past_end(d: Path) -> onnx.ModelProto:
    _ext_ok_file(d, 100)
    m = _conv_model()
    return _external(m, m.graph.initializer[0], "w.bin", 0, 324)


def _negative_offset(d: Path) -> onnx.ModelProto:
    _ext_ok_file(d, 400)
    m = _conv_model()
    return _external(m, m.graph.initializer[0], "w.bin", -8, 324)


def _subgraph_ext(location: str):
    def make(d: Path) -> onnx.ModelProto:
        t = numpy_helper.from_array(np.zeros(X_SHAPE, np.float32), "")
        branch = helper.make_graph([helper.make_node("Constant", [], ["k"], name="k", value=t)], "then", [],
                                   [_vi("k", X_SHAPE)])
        m = _if_model(branch)
        branch_attr = next(a for a in m.graph.node[2].attribute if a.name == "then_branch")
        const = branch_attr.g.node[0].attribute[0].t
        _external(m, const, location, 0, 768)
        return m

    return make


def _if_model(then_branch, else_branch=None) -> onnx.ModelProto:
    """y = If(sum(x) > 0, then_branch, else_branch)."""
    else_branch = else_branch or helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"], name="e_id")], "else", [], [_vi("e", X_SHAPE)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch)]
    return _model(nodes, inits=[numpy_helper.from_array(np.array(0.0, np.float32), "zero")])


def _relu(inp="x", out="y", name="relu"):
    return helper.make_node("Relu", [inp], [out], name=name)


def _bytes_case(data: bytes):
    return lambda d: data


def _truncated(frac: float):
    def make(d: Path) -> bytes:
        data = _conv_model().SerializeToString()
        return data[: max(1, int(len(data) * frac))]

    return make


def _mutate(fn: Callable[[onnx.ModelProto], None], base: Callable[[], onnx.ModelProto] = _conv_model):
    def make(d: Path) -> onnx.ModelProto:
        m = base()
        fn(m)
        return m

    return make


def _set_dim(m: onnx.ModelProto, value: int) -> None:
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = value


def _nested_ifs(depth: int) -> onnx.ModelProto:
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"], name="leaf")], "b0", [], [_vi("o0", X_SHAPE)])
    for k in range(1, depth):
        leaf = helper.make_graph([helper.make_node("Identity", ["x"], [f"l{k}"], name=f"leaf{k}")], f"l{k}", [],
                                 [_vi(f"l{k}", X_SHAPE)])
        body = helper.make_graph([helper.make_node("If", ["cond"], [f"o{k}"], name=f"if{k}", then_branch=body,
                                                   else_branch=leaf)], f"b{k}", [], [_vi(f"o{k}", X_SHAPE)])
    return _if_model(body)


def _loop(trip: int) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"], name="keep"), helper.make_node("Identity", ["v_in"], ["v_out"], name="carry")],
        "body", [_vi("i", [], TensorProto.INT64), _vi("c_in", [], TensorProto.BOOL), _vi("v_in", X_SHAPE)],
        [_vi("c_out", [], TensorProto.BOOL), _vi("v_out", X_SHAPE)])
    nodes = [helper.make_node("Loop", ["M", "cond", "x"], ["y"], name="loop", body=body)]
    inits = [numpy_helper.from_array(np.array(trip, np.int64), "M"), numpy_helper.from_array(np.array(True), "cond")]
    return _model(nodes, inits=inits)


CASES: list[tuple[str, str, Callable[[Path], onnx.ModelProto | bytes]]] = [
    # -- not a model at all
    ("empty", "error", _bytes_case(b"")),
    ("random_bytes", "error", _bytes_case(np.random.default_rng(7).bytes(4096))),
    ("text_file", "error", _bytes_case(b"name,value\n" * 200)),
    ("png_magic", "error", _bytes_case(b"\x89PNG\r\n\x1a\n" + b"\0" * 200)),
    ("zip_magic", "error", _bytes_case(b"PK\x03\x04" + b"\x01" * 300)),
    ("header_only", "error", _bytes_case(b"\x08\x07")),
    ("truncated_10", "error", _truncated(0.1)),
    ("truncated_50", "error", _truncated(0.5)),
    ("truncated_95", "error", _truncated(0.95)),
    # -- structurally broken graphs
    ("cycle", "error", lambda d: _model([helper.make_node("Relu", ["b"], ["a"], name="first"),
                                        helper.make_node("Relu", ["a"], ["b"], name="second"),
                                        helper.make_node("Add", ["x", "a"], ["y"], name="out")])),
    ("self_loop", "error", lambda d: _model([helper.make_node("Add", ["x", "y"], ["y"], name="selfish")])),
    ("missing_initializer", "error", lambda d: _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv",
                                                                          pads=[1, 1, 1, 1])])),
    ("undefined_input", "error", lambda d: _model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")])),
    ("undefined_output", "error", lambda d: _model([_relu(out="z")])),
    ("duplicate_output_names", "error", lambda d: _model([_relu()], outputs=[_vi("y", X_SHAPE), _vi("y", X_SHAPE)])),
    ("value_produced_twice", "error", lambda d: _model([_relu(), _relu(name="relu2")])),
    ("empty_op_type", "error", lambda d: _model([helper.make_node("", ["x"], ["y"], name="blank")])),
    ("wrong_attribute_type", "error", _mutate(lambda m: m.graph.node[0].attribute[0].CopyFrom(
        helper.make_attribute("pads", 1.5)))),
    ("bad_elem_type", "error", _mutate(lambda m: setattr(m.graph.input[0].type.tensor_type, "elem_type", 99))),
    ("raw_data_size_mismatch", "error", _mutate(lambda m: setattr(m.graph.initializer[0], "raw_data", b"\0" * 7))),
    ("negative_dims", "error", _mutate(lambda m: _set_dim(m, -5))),
    # -- opsets and domains
    ("opset_99", "error", lambda d: _model([_relu()], opset=99)),
    ("opset_0", "error", lambda d: _model([_relu()], opset=0)),
    ("unknown_domain", "legal", lambda d: _unknown_domain()),
    ("ir_version_99", "error", _mutate(lambda m: setattr(m, "ir_version", 99))),
    # -- resource exhaustion
    ("huge_input_dims", "legal", _mutate(lambda m: _set_dim(m, 10**12))),
    ("constant_of_shape_1e12", "legal", lambda d: _model(
        [helper.make_node("ConstantOfShape", ["s"], ["big"], name="huge"),
         helper.make_node("Relu", ["big"], ["y"], name="relu")],
        outputs=[_vi("y", [1, 3, 1_000_000, 1_000_000])],
        inits=[numpy_helper.from_array(np.array([1, 3, 1_000_000, 1_000_000], np.int64), "s")])),
    ("broadcast_mismatch", "legal", lambda d: _model(
        [helper.make_node("Add", ["x", "b"], ["y"], name="add")],
        inits=[numpy_helper.from_array(np.ones((1, 5, 8, 8), np.float32), "b")])),
    ("loop_1e12_iterations", "legal", lambda d: _loop(10**12)),
    ("nested_ifs_25", "legal", lambda d: _nested_ifs(25)),
    # -- legal but suspicious
    ("nan_weights", "legal", _mutate(lambda m: m.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.full((3, 3, 3, 3), np.nan, np.float32), "w")))),
    ("inf_weights", "legal", _mutate(lambda m: m.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.full((3, 3, 3, 3), np.inf, np.float32), "w")))),
    ("empty_graph", "legal", lambda d: _model([], outputs=[])),
    ("conv_channel_mismatch", "legal", _mutate(lambda m: m.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.full((3, 5, 3, 3), 0.1, np.float32), "w")))),
    # -- external data escapes
    ("ext_dotdot", "error", _ext_case("../secret.bin", 0, 256)),
    ("ext_absolute", "error", lambda d: _ext_case(str(d.parent / "secret.bin"), 0, 256)(d)),
    ("ext_nested_escape", "error", _ext_case("sub/../../secret.bin", 0, 256)),
    ("ext_symlink_out", "error", _symlink_case),
    ("ext_offset_past_end", "error", _offset_past_end),
    ("ext_length_past_end", "error", _length_past_end),
    ("ext_negative_offset", "error", _negative_offset),
    ("ext_missing_file", "error", _ext_case("nope.bin", 0, 324)),
    ("ext_backslash_escape", "error", _ext_case("..\\secret.bin", 0, 256)),
    ("ext_subgraph_dotdot", "error", _subgraph_ext("../secret.bin")),
    # -- subgraph variants
    ("subgraph_undefined_input", "error", lambda d: _if_model(helper.make_graph(
        [helper.make_node("Add", ["x", "phantom"], ["t"], name="t_add")], "then", [], [_vi("t", X_SHAPE)]))),
    ("subgraph_cycle", "error", lambda d: _if_model(helper.make_graph(
        [helper.make_node("Relu", ["q"], ["p"], name="p"), helper.make_node("Relu", ["p"], ["q"], name="q")],
        "then", [], [_vi("p", X_SHAPE)]))),
    ("subgraph_undefined_output", "error", lambda d: _if_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"], name="t_relu")], "then", [], [_vi("nowhere", X_SHAPE)]))),
]


def _unknown_domain() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Evil", ["x"], ["y"], name="evil", domain="com.evil")], "hostile",
                          [_vi("x", X_SHAPE)], [_vi("y", X_SHAPE)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.evil", 1)])
    m.ir_version = 8
    return m


def write_corpus(root: Path) -> list[tuple[str, str, Path]]:
    """Write every case; returns (name, expectation, model path)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "secret.bin").write_bytes(SECRET.tobytes())
    out = []
    for name, expect, make in CASES:
        d = root / name
        d.mkdir(exist_ok=True)
        (d / "sub").mkdir(exist_ok=True)
        model = make(d)
        data = model if isinstance(model, bytes) else model.SerializeToString()
        path = d / "model.onnx"
        path.write_bytes(data)
        out.append((name, expect, path))
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "hostile_corpus")
    cases = write_corpus(target)
    sys.stdout.write(f"wrote {len(cases)} cases to {target}\n")
