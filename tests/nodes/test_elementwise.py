"""Elementwise, logical and cast ops: broadcasting inference, dtype rules, opset-dependent forms."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from nodes.cast import cast_array
from nodes.elementwise import _erf_poly, erf
from tests.nodes._build import load_graph as _load


def _run1(op, arrays, opset=17, **attrs):
    """Load a one-node model with the given inputs, run it and return (output type, value)."""
    names = [f"x{i}" for i in range(len(arrays))]
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, arrays)]
    g = _load([helper.make_node(op, names, ["y"], **attrs)], inputs, ["y"], opset=opset)
    return g.outputs[0].type, engine.execute(g, dict(zip(names, arrays)))["y"]


@pytest.mark.parametrize(("a", "b", "out"), [
    (("N", 3, 1, 5), (4, 1), ("N", 3, 4, 5)),
    (("batch", "seq", 768), (768,), ("batch", "seq", 768)),
    ((1,), ("S",), ("S",)),
    ((2, 1), (1, 7), (2, 7)),
])
def test_binary_broadcast_shapes_keep_symbols(a, b, out):
    g = _load([helper.make_node("Add", ["a", "b"], ["y"])],
              [("a", TensorProto.FLOAT16, a), ("b", TensorProto.FLOAT16, b)], ["y"])
    assert g.outputs[0].type.shape == out
    assert g.outputs[0].type.dtype == np.float16


def test_comparisons_give_bool_and_variadic_ops_broadcast():
    g = _load([helper.make_node("Less", ["a", "b"], ["c"]), helper.make_node("Max", ["a", "b", "d"], ["m"])],
              [("a", TensorProto.INT32, ("N", 4)), ("b", TensorProto.INT32, (4,)), ("d", TensorProto.INT32, (1, 1))],
              ["c", "m"])
    types = {v.name: v.type for v in g.outputs}
    assert types["c"].dtype == np.bool_
    assert types["c"].shape == ("N", 4)
    assert types["m"].dtype == np.int32
    assert types["m"].shape == ("N", 4)


def test_mismatched_dtypes_are_reported_not_crashing():
    g = _load([helper.make_node("Add", ["a", "b"], ["y"])],
              [("a", TensorProto.FLOAT, (2,)), ("b", TensorProto.INT64, (2,))], ["y"])
    assert any("one element type" in d.message for d in g.diagnostics)


def test_integer_div_truncates_and_mod_follows_fmod():
    a = np.array([7, -7, 7, -7, -9223372036854775807], np.int64)
    b = np.array([2, 2, -2, -2, 2], np.int64)
    _, q = _run1("Div", [a, b])
    np.testing.assert_array_equal(q, [3, -3, -3, 3, -4611686018427387903])
    _, m0 = _run1("Mod", [a[:4], b[:4]])
    _, m1 = _run1("Mod", [a[:4], b[:4]], fmod=1)
    np.testing.assert_array_equal(m0, [1, 1, -1, -1])  # sign of the divisor
    np.testing.assert_array_equal(m1, [1, -1, 1, -1])  # sign of the dividend


def test_pow_keeps_base_dtype():
    t, y = _run1("Pow", [np.array([1, 2, 3], np.int64), np.array([2.0, 0.5, 2.0], np.float32)], opset=15)
    assert y.dtype == np.int64
    assert t.dtype == np.int64
    np.testing.assert_array_equal(y, [1, 1, 9])
    _, y = _run1("Pow", [np.array([2, 4], np.float16), np.array([-1, 2], np.int32)], opset=15)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, np.array([0.5, 16], np.float16))


def test_float16_stays_float16_through_math():
    x = np.array([0.1, 1.0, 4.0], np.float16)
    for op in ("Exp", "Log", "Sqrt", "Erf", "Tan", "Reciprocal"):
        t, y = _run1(op, [x])
        assert y.dtype == np.float16, op
        assert t.dtype == np.float16, op
    _, y = _run1("Round", [np.array([0.5, 1.5, 2.5, -2.5, 2.6], np.float32)])
    np.testing.assert_array_equal(y, [0, 2, 2, -2, 3])  # halves to even


def test_clip_attribute_form_before_opset_11_and_input_form_after():
    x = np.array([-5.0, 0.5, 9.0], np.float32)
    _, y6 = _run1("Clip", [x], opset=6, min=-1.0, max=1.0)
    np.testing.assert_array_equal(y6, [-1, 0.5, 1])
    names = ["x", "lo", "hi"]
    g = _load([helper.make_node("Clip", names, ["y"])], [("x", TensorProto.INT8, (3,))], ["y"],
              inits=[("lo", np.array(-2, np.int8)), ("hi", np.array(3, np.int8))], opset=13)
    y = engine.execute(g, {"x": np.array([-100, 1, 100], np.int8)})["y"]
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, [-2, 1, 3])
    # Only a max: min is omitted with an empty name.
    g = _load([helper.make_node("Clip", ["x", "", "hi"], ["y"])], [("x", TensorProto.FLOAT, (3,))], ["y"],
              inits=[("hi", np.array(0.0, np.float32))], opset=13)
    np.testing.assert_array_equal(engine.execute(g, {"x": x})["y"], [-5, 0, 0])


def test_where_and_logic_and_bitshift():
    c = np.array([[True], [False]])
    _, y = _run1("Where", [c, np.array([1, 2, 3], np.int64), np.array([[-1, -2, -3]], np.int64)])
    np.testing.assert_array_equal(y, [[1, 2, 3], [-1, -2, -3]])
    _, y = _run1("Xor", [np.array([True, False]), np.array([True, True])])
    np.testing.assert_array_equal(y, [False, True])
    _, y = _run1("BitShift", [np.array([-16, 16, 1], np.int32), np.array([2, 40, -1], np.int32)], opset=11,
                 direction="RIGHT")
    np.testing.assert_array_equal(y, [-4, 0, 0])


def test_equal_on_strings():
    a = np.array(["cat", "dog"], dtype=object)
    b = np.array(["cat", "cow"], dtype=object)
    g = _load([helper.make_node("Equal", ["a", "b"], ["y"])],
              [("a", TensorProto.STRING, (2,)), ("b", TensorProto.STRING, (2,))], ["y"], opset=19)
    np.testing.assert_array_equal(engine.execute(g, {"a": a, "b": b})["y"], [True, False])


def test_isinf_respects_detect_flags():
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    _, y = _run1("IsInf", [x], detect_negative=0)
    np.testing.assert_array_equal(y, [True, False, False, False])
    _, y = _run1("IsNaN", [x])
    np.testing.assert_array_equal(y, [False, False, False, True])


def test_cast_infers_target_dtype_and_converts():
    t, y = _run1("Cast", [np.array([1.7, -1.7, 300.0], np.float32)], to=TensorProto.INT16)
    assert t.dtype == np.int16
    np.testing.assert_array_equal(y, [1, -1, 300])
    t, y = _run1("Cast", [np.array([1.0, 2.0], np.float32)], to=TensorProto.BFLOAT16)
    assert y.dtype == ml_dtypes.bfloat16
    assert t.dtype == ml_dtypes.bfloat16
    _, y = _run1("CastLike", [np.array([0, 2], np.int64), np.zeros(1, np.float16)], opset=15)
    assert y.dtype == np.float16


def test_cast_float8_saturate_and_strings():
    x = np.array([1000.0, -1e6, np.inf, 0.3], np.float32)
    sat = cast_array(x, np.dtype(ml_dtypes.float8_e4m3fn), saturate=True).astype(np.float32)
    np.testing.assert_array_equal(sat[:3], [448, -448, 448])
    raw = cast_array(x, np.dtype(ml_dtypes.float8_e4m3fn), saturate=False).astype(np.float32)
    assert np.isnan(raw[:3]).all()
    e5 = cast_array(x, np.dtype(ml_dtypes.float8_e5m2), saturate=False).astype(np.float32)
    assert e5[2] == np.inf
    s = cast_array(np.array([0.5, 3.0, np.inf, np.nan, 1e-7], np.float32), np.dtype(object))
    assert s.tolist() == ["0.5", "3", "INF", "NaN", "1e-07"]
    back = cast_array(np.array(["1e3", "-INF", "nan", " 2.5"], dtype=object), np.dtype(np.float32))
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back[[0, 1, 3]], [1000, -np.inf, 2.5])
    assert np.isnan(back[2])
    np.testing.assert_array_equal(cast_array(np.array(["42", "-7"], dtype=object), np.dtype(np.int8)), [42, -7])


def test_cast_to_int4_truncates_in_range_wraps_integers_and_e8m0_rounds_up():
    y = cast_array(np.array([-7.9, 7.0, 3.5, -0.5], np.float32), np.dtype(ml_dtypes.int4))
    np.testing.assert_array_equal(y.astype(np.int8), [-7, 7, 3, 0])
    # integers out of range wrap (ONNX: discard higher bits); floats out of range are undefined in
    # ONNX and follow ml_dtypes, as onnx's reference evaluator does
    w = cast_array(np.array([-9, 8, 20], np.int64), np.dtype(ml_dtypes.int4))
    np.testing.assert_array_equal(w.astype(np.int8), [7, -8, 4])
    oor = np.array([-9.0, 8.0], np.float32)
    np.testing.assert_array_equal(cast_array(oor, np.dtype(ml_dtypes.int4)).astype(np.int8),
                                  oor.astype(ml_dtypes.int4).astype(np.int8))
    e = cast_array(np.array([0.124, 1.1, 4.0], np.float32), np.dtype(ml_dtypes.float8_e8m0fnu))
    np.testing.assert_array_equal(e.astype(np.float32), [0.125, 2.0, 4.0])


def test_erf_fallback_matches_math_erf():
    import math

    x = np.array([-7.0, -2.5, -1.0, -0.3, 0.0, 1e-8, 0.7, 1.0, 3.3, 5.9, np.inf])
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(_erf_poly(x), want, rtol=1e-14, atol=1e-300)
    assert erf(x.astype(np.float32)).dtype == np.float32


def test_zero_rank_inputs_give_arrays():
    _, y = _run1("Exp", [np.array(0.0, np.float32)])
    assert isinstance(y, np.ndarray)
    assert y.shape == ()


def test_opset6_broadcast_axis_aligns_b_at_the_axis():
    g = _load([helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)],
              [("x", TensorProto.FLOAT, ("N", 3, 2, 2))], ["y"], inits=[("b", np.array([1, 2, 3], np.float32))], opset=6)
    assert g.outputs[0].type.shape == ("N", 3, 2, 2)
    y = engine.execute(g, {"x": np.zeros((1, 3, 2, 2), np.float32)})["y"]
    np.testing.assert_array_equal(y[0, :, 1, 1], [1, 2, 3])
