"""Issue #21: bad input that is not a model keeps the one-line-error promise.

Each test feeds one bad project file, option value, calibration file, target YAML, output path or
model that passes the loader, and checks what a user sees: exit 2, exactly one `error:` line, no
traceback, nothing new written, an answer in under 5 seconds, and no file content echoed.
"""

from __future__ import annotations

import json
import signal
import struct
import time
import zlib
from io import StringIO
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.cli import Out, main
from tests.hostile.make_corpus import X_SHAPE, _conv_model, _model, _vi
from tests.models import ASSETS

LIMIT_S = 5.0


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def _run(argv: list[str], seconds: int = 20) -> tuple[int, str, str, float]:
    out, err = StringIO(), StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    t0 = time.monotonic()
    try:
        rc = main([str(a) for a in argv], Out(out, err))
    except _Timeout:
        pytest.fail(f"`{' '.join(map(str, argv))}` did not finish within {seconds} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue(), time.monotonic() - t0


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def assert_rejected(argv: list[str], work: Path, must_say: str | None = None) -> str:
    """Exit 2, one `error:` line, no traceback, under 5 s, nothing new in ``work``; returns the line."""
    before = _files(work)
    rc, _out, err, elapsed = _run(argv)
    assert "Traceback" not in err
    assert rc == 2, f"exit {rc}: {err.strip()[:300]}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert elapsed < LIMIT_S, f"rejected after {elapsed:.1f} s"
    new = _files(work) - before
    assert not new, f"left behind: {sorted(p.name for p in new)}"
    if must_say is not None:
        assert must_say in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("badinput")
    onnx.save(_conv_model(), d / "conv.onnx")
    rng = np.random.default_rng(0)
    np.savez(d / "calib.npz", x=rng.random((2, *X_SHAPE), dtype=np.float32))
    images = d / "images"
    images.mkdir()
    from PIL import Image

    for k in range(2):
        Image.fromarray((rng.random((8, 8, 3)) * 255).astype(np.uint8)).save(images / f"{k}.png")
    return d


@pytest.fixture
def work(tmp_path) -> Path:
    return tmp_path


# -- project files --------------------------------------------------------------------------------
def _project(root: Path, work: Path, **fields) -> Path:
    doc = {"format": "npu-studio-project", "version": 1, "model": {"path": str(root / "conv.onnx")},
           "target": "phone-npu", **fields}
    p = work / "p.npuproj"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("shapes", [{"x": 5}, {"x": ["a"]}, {"x": [None]}, {"x": [1, 3, -8, 8]},
                                    {"x": [1, 3, 10**12, 8]}],
                         ids=["int", "strings", "nulls", "negative", "huge"])
def test_project_with_a_bad_shapes_field_is_refused_naming_the_field(root, work, shapes):
    proj = _project(root, work, shapes=shapes)
    line = assert_rejected(["compile", proj, "-o", work / "out", "--allow-synthetic-calibration", "--quiet"], work,
                           must_say="shapes")
    assert "p.npuproj" in line


def test_project_nested_100000_deep_is_refused_without_recursion(root, work):
    p = work / "deep.npuproj"
    p.write_text('{"format": "npu-studio-project", "version": 1, "edits": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert_rejected(["compile", p, "-o", work / "out", "--quiet"], work, must_say="nested")


@pytest.mark.parametrize(("field", "value"), [("pins", {"conv": 3}), ("passes", {"fuse": "no"}),
                                         ("quantization", {"method": "bogus"}),
                                         ("quantization", {"percentile": float("nan")}),
                                         ("edits", {"removed": "conv"}), ("target", 7)])
def test_project_with_a_wrongly_typed_field_is_refused_naming_it(root, work, field, value):
    proj = _project(root, work, **{field: value})
    assert_rejected(["compile", proj, "-o", work / "out", "--allow-synthetic-calibration", "--quiet"], work,
                    must_say=field)


def test_project_over_the_size_limit_is_refused_before_parsing(root, work):
    p = work / "big.npuproj"
    with open(p, "wb") as fh:
        fh.truncate(100 * 2**20)
    assert_rejected(["compile", p, "-o", work / "out", "--quiet"], work, must_say="MB")


# -- option values --------------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "says"), [
    (["--thermal", "-1"], "--thermal"),
    (["--thermal", "1000000000"], "--thermal"),
    (["--stream", "1000000000"], "--stream"),
    (["--stream", "10", "--queue", "1000000000"], "--queue"),
    (["--stream", "10", "--fps", "nan"], "--fps"),
], ids=["thermal-negative", "thermal-huge", "stream-huge", "queue-huge", "fps-nan"])
def test_simulate_option_out_of_range_is_refused_at_once(root, work, argv, says):
    line = assert_rejected(["simulate", root / "conv.onnx", "--target", "phone-npu", *argv], work, must_say=says)
    assert "1000000000" not in line or "MB" in line or "GB" in line or "at most" in line


def test_quantize_resize_beyond_the_memory_budget_is_refused_naming_the_need(root, work):
    line = assert_rejected(["quantize", root / "conv.onnx", "--calib", root / "images", "--resize", "30000,30000",
                            "-o", work / "q.onnx", "--quiet"], work, must_say="--resize")
    assert "GB" in line or "MB" in line


@pytest.mark.parametrize("opt", ["--mean", "--std"])
def test_two_means_for_rgb_images_is_refused_naming_the_option(root, work, opt):
    assert_rejected(["quantize", root / "conv.onnx", "--calib", root / "images", opt, "1,2",
                     "-o", work / "q.onnx", "--quiet"], work, must_say=opt)


@pytest.mark.parametrize(("argv", "says"), [
    (["--scale", "nan"], "--scale"), (["--scale", "inf"], "--scale"), (["--max-samples", "-3"], "--max-samples"),
    (["--percentile", "150"], "--percentile"), (["--analysis-samples", "-1"], "--analysis-samples"),
    (["--mean", "nan,0,0"], "--mean"), (["--target-sqnr", "nan"], "--target-sqnr"),
])
def test_quantize_numeric_option_out_of_range_is_refused(root, work, argv, says):
    assert_rejected(["quantize", root / "conv.onnx", "--calib", root / "calib.npz", *argv,
                     "-o", work / "q.onnx", "--quiet"], work, must_say=says)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_optimize_max_fold_mb_must_be_a_finite_positive_number(root, work, value):
    assert_rejected(["optimize", root / "conv.onnx", "-o", work / "o.onnx", "--max-fold-mb", value], work,
                    must_say="--max-fold-mb")


def test_compile_disable_of_an_unknown_pass_is_refused_like_optimize(root, work):
    assert_rejected(["compile", root / "conv.onnx", "--target", "phone-npu", "--disable", "bogus",
                     "--allow-synthetic-calibration", "-o", work / "out", "--quiet"], work, must_say="bogus")


# -- calibration data -----------------------------------------------------------------------------
def _png_header(path: Path, w: int, h: int) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))


def test_png_claiming_100000_by_100000_pixels_is_refused_before_decoding(root, work):
    folder = work / "bomb"
    folder.mkdir()
    _png_header(folder / "bomb.png", 100_000, 100_000)
    assert_rejected(["quantize", root / "conv.onnx", "--calib", folder, "-o", work / "q.onnx", "--quiet"], work,
                    must_say="pixels")


def test_calib_from_dev_zero_is_refused(root, work):
    assert_rejected(["quantize", root / "conv.onnx", "--calib", "/dev/zero", "-o", work / "q.onnx", "--quiet"],
                    work, must_say="/dev/zero")


def test_npz_whose_member_is_garbage_bytes_is_refused(root, work):
    import zipfile

    p = work / "garbage.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("x.npy", b"\x93NUMPY garbage that is not an array header" * 10)
    assert_rejected(["quantize", root / "conv.onnx", "--calib", p, "-o", work / "q.onnx", "--quiet"], work,
                    must_say="garbage.npz")


@pytest.mark.parametrize("value", [3e38, -3e38, 1e-42], ids=["3e38", "-3e38", "denormal"])
def test_extreme_calibration_values_never_give_a_broken_qdq_model(root, work, value):
    p = work / "extreme.npz"
    arr = np.random.default_rng(1).random((2, *X_SHAPE), dtype=np.float32)
    arr[0, 0, 0, 0, 0] = value
    np.savez(p, x=arr)
    q = work / "q.onnx"
    for method in ("minmax", "percentile", "entropy", "mse"):
        rc, _, err, elapsed = _run(["quantize", root / "conv.onnx", "--calib", p, "-o", q, "--quiet",
                                    "--method", method])
        assert rc in (0, 2), err
        assert elapsed < LIMIT_S * 4
        if rc == 2:
            assert len(err.strip().splitlines()) == 1 and not q.exists()
        else:
            _assert_valid_scales(q)
            q.unlink()


def _assert_valid_scales(path: Path) -> None:
    m = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            s = inits.get(n.input[1])
            assert s is not None
            assert np.all(np.isfinite(s)) and np.all(s >= np.finfo(np.float32).tiny), f"{n.name}: scale {s}"


# -- target YAML ----------------------------------------------------------------------------------
def _target_text(**replace: str) -> str:
    text = (ASSETS / "targets" / "phone-npu.yaml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new, 1)
    return text


def test_target_with_nan_in_precisions_is_refused_naming_the_field(root, work):
    t = work / "nan.yaml"
    t.write_text(_target_text(**{"int8: 1024": "int8: .nan"}))
    assert_rejected(["simulate", root / "conv.onnx", "--target", t], work, must_say="precisions")


def test_target_nested_20000_deep_is_refused_without_recursion(root, work):
    t = work / "deep.yaml"
    t.write_text("name: x\nnpu: " + "[" * 20_000 + "]" * 20_000 + "\n")
    assert_rejected(["simulate", root / "conv.onnx", "--target", t], work, must_say="nested")


def test_target_of_100_mb_is_refused_in_well_under_5_seconds(root, work):
    t = work / "big.yaml"
    with open(t, "w") as fh:
        block = "# padding " + "x" * 1000 + "\n"
        for _ in range(100 * 2**20 // len(block) + 1):
            fh.write(block)
    t0 = time.monotonic()
    assert_rejected(["simulate", root / "conv.onnx", "--target", t], work, must_say="MB")
    assert time.monotonic() - t0 < 1.0


def test_target_with_200000_op_entries_is_refused_quickly(root, work):
    t = work / "ops.yaml"
    extra = "".join(f"    Op{k}: {{}}\n" for k in range(200_000))
    t.write_text(_target_text(**{"  ops:\n": "  ops:\n" + extra}))
    assert_rejected(["simulate", root / "conv.onnx", "--target", t], work)


def test_target_that_is_not_yaml_never_echoes_the_file(root, work):
    secret = work / "secret.txt"
    secret.write_text("root:x:0:0:topsecret-line:/root:/bin/bash\n{[: unbalanced\n" * 3)
    line = assert_rejected(["simulate", root / "conv.onnx", "--target", secret], work)
    assert "topsecret" not in line
    line = assert_rejected(["simulate", root / "conv.onnx", "--target", "/etc/passwd"], work)
    assert "/bin/" not in line.replace("/etc/passwd", "")


def test_error_quotes_at_most_a_short_excerpt_of_a_long_value(root, work):
    long = "Q" * 5000
    t = work / "long.yaml"
    t.write_text(_target_text(**{"name: phone-npu": f"name: phone-npu\n{long}: 1"}))
    line = assert_rejected(["simulate", root / "conv.onnx", "--target", t], work)
    assert "Q" * 60 not in line and len(line) < 400


# -- output paths ---------------------------------------------------------------------------------
def test_optimize_report_on_the_model_path_is_refused_before_work(root, work):
    out = work / "out.onnx"
    assert_rejected(["optimize", root / "conv.onnx", "-o", out, "--report", out], work, must_say="same")


def test_optimize_report_into_a_missing_folder_leaves_no_model_behind(root, work):
    assert_rejected(["optimize", root / "conv.onnx", "-o", work / "out.onnx", "--report", work / "nodir" / "r.json"],
                    work, must_say="nodir")


def test_quantize_report_into_a_missing_folder_leaves_no_model_behind(root, work):
    assert_rejected(["quantize", root / "conv.onnx", "--calib", root / "calib.npz", "-o", work / "q.onnx",
                     "--report", work / "nodir" / "r.json", "--quiet"], work, must_say="nodir")


def test_output_onto_the_input_model_is_refused(root, work):
    model = work / "m.onnx"
    model.write_bytes((root / "conv.onnx").read_bytes())
    before = model.read_bytes()
    rc, _, err, _ = _run(["optimize", model, "-o", model])
    assert rc == 2 and "same" in err
    assert model.read_bytes() == before


def test_run_out_into_a_missing_folder_is_refused_before_running(root, work):
    np.savez(work / "in.npz", x=np.zeros(X_SHAPE, np.float32))
    assert_rejected(["run", root / "conv.onnx", "--inputs", work / "in.npz", "--out", work / "nodir" / "o.npz"],
                    work, must_say="nodir")


# -- models that pass the loader and fail later --------------------------------------------------
def _save(work: Path, m: onnx.ModelProto, name: str = "m.onnx") -> Path:
    p = work.parent / f"{work.name}-{name}"
    onnx.save(m, p)
    return p


def test_double_graph_input_reaching_quantize_is_refused(root, work):
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], inputs=[_vi("x", X_SHAPE, TensorProto.DOUBLE)],
               outputs=[_vi("y", X_SHAPE, TensorProto.DOUBLE)])
    p = _save(work, m)
    np.savez(work.parent / f"{work.name}-c.npz", x=np.zeros((2, *X_SHAPE)))
    assert_rejected(["quantize", p, "--calib", work.parent / f"{work.name}-c.npz", "-o", work / "q.onnx", "--quiet"],
                    work)


def test_int64_matmul_weight_reaching_quantize_is_refused_or_kept_float(root, work):
    w = numpy_helper.from_array(np.ones((8, 8), np.int64), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
               inputs=[_vi("x", [2, 8], TensorProto.INT64)], outputs=[_vi("y", [2, 8], TensorProto.INT64)], inits=[w])
    p = _save(work, m)
    c = work.parent / f"{work.name}-c.npz"
    np.savez(c, x=np.ones((2, 2, 8), np.int64))
    assert_rejected(["quantize", p, "--calib", c, "-o", work / "q.onnx", "--quiet"], work)


def _bn_model(var_dtype=TensorProto.INT4) -> onnx.ModelProto:
    c = X_SHAPE[1]
    inits = [numpy_helper.from_array(np.ones(c, np.float32), n) for n in ("s", "b", "mean")]
    var = helper.make_tensor("var", var_dtype, [c], [1] * c)
    return _model([helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"], name="bn")],
                  inits=[*inits, var], opset=21)


@pytest.mark.parametrize("cmd", ["optimize", "quantize", "run"])
def test_int4_batchnorm_variance_is_refused_cleanly(root, work, cmd):
    p = _save(work, _bn_model())
    np.savez(work.parent / f"{work.name}-in.npz", x=np.zeros(X_SHAPE, np.float32))
    argv = {"optimize": ["optimize", p, "-o", work / "o.onnx"],
            "quantize": ["quantize", p, "--calib", root / "calib.npz", "-o", work / "q.onnx", "--quiet"],
            "run": ["run", p, "--inputs", work.parent / f"{work.name}-in.npz", "--out", work / "o.npz"]}[cmd]
    assert_rejected(argv, work)


def test_conv_pads_of_2_pow_62_are_refused_in_optimize(root, work):
    m = _conv_model()
    for a in m.graph.node[0].attribute:
        if a.name == "pads":
            a.ints[:] = [2**62] * 4
    p = _save(work, m)
    assert_rejected(["optimize", p, "-o", work / "o.onnx"], work)


@pytest.mark.parametrize("cmd", ["inspect", "run"])
def test_reshape_shape_initializer_typed_string_is_refused(root, work, cmd):
    shape = helper.make_tensor("shape", TensorProto.STRING, [2], [b"1", b"192"])
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
               outputs=[_vi("y", [1, 192])], inits=[shape])
    p = _save(work, m)
    np.savez(work.parent / f"{work.name}-in.npz", x=np.zeros(X_SHAPE, np.float32))
    argv = ["inspect", p] if cmd == "inspect" else ["run", p, "--inputs", work.parent / f"{work.name}-in.npz",
                                                     "--out", work / "o.npz"]
    assert_rejected(argv, work)


@pytest.mark.parametrize("value", [-np.inf, np.nan, 3e38], ids=["-inf", "nan", "3e38"])
def test_extreme_weights_never_give_a_qdq_model_with_a_broken_scale(root, work, value):
    m = _conv_model()
    b = np.zeros(3, np.float32)
    b[1] = value
    m.graph.initializer.append(numpy_helper.from_array(b, "bias"))
    m.graph.node[0].input.append("bias")
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    if value == 3e38:
        w[0, 0, 0, 0] = 3e38
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    p = _save(work, m)
    q = work / "q.onnx"
    for extra in ([], ["--per-channel"]):
        rc, _, err, _ = _run(["quantize", p, "--calib", root / "calib.npz", "-o", q, "--quiet", *extra])
        assert rc in (0, 2), err
        if rc == 2:
            assert len(err.strip().splitlines()) == 1 and not q.exists()
        else:
            _assert_valid_scales(q)
            q.unlink()


# -- internal errors are not user errors (#18 item 8) ---------------------------------------------
def test_a_kernel_bug_exits_1_as_an_internal_error_not_as_bad_input(root, work, monkeypatch):
    from nodes import registry

    spec = registry.get("Conv", "")  # the model's first op (its Relu runs inside the Conv)

    def broken(ctx, *args):
        raise IndexError("index 3 is out of bounds (a bug in our kernel)")

    monkeypatch.setattr(spec, "reference", broken)
    np.savez(work / "in.npz", x=np.zeros(X_SHAPE, np.float32))
    rc, _, err, _ = _run(["run", root / "conv.onnx", "--inputs", work / "in.npz", "--out", work / "o.npz"])
    assert rc == 1, err
    assert err.startswith("internal error") and "--debug" in err
    assert not (work / "o.npz").exists()


def test_a_deliberate_op_check_stays_exit_2(root, work, monkeypatch):
    from nodes import registry
    from nodes.spec import OpError

    spec = registry.get("Conv", "")  # the model's first op (its Relu runs inside the Conv)

    def refusing(ctx, *args):
        raise OpError("input holds a value this op does not accept")

    monkeypatch.setattr(spec, "reference", refusing)
    np.savez(work / "in.npz", x=np.zeros(X_SHAPE, np.float32))
    assert_rejected(["run", root / "conv.onnx", "--inputs", work / "in.npz", "--out", work / "o.npz"], work,
                    must_say="conv")


def test_compile_into_the_folder_holding_the_model_is_refused_even_with_force(root, work):
    model = work / "m.onnx"
    model.write_bytes((root / "conv.onnx").read_bytes())
    assert_rejected(["compile", model, "--target", "phone-npu", "--allow-synthetic-calibration", "--quiet",
                     "-o", work, "--force"], work, must_say="holds the input")
    assert model.exists()
