"""MatMul / Gemm / Det: numpy semantics, shape inference with symbolic dims and MAC counts."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from engine.ir.infer import node_context
from nodes.matmul import matmul_shape
from nodes.spec import OpError
from tests.nodes._build import load_graph as _load


def _work(graph):
    node = graph.nodes[0]
    ctx = node_context(node)
    return ctx.spec.work(ctx)


@pytest.mark.parametrize(("a", "b", "out"), [
    (("N", "S", 64), (64, 128), ("N", "S", 128)),
    ((4,), ("B", 4, 5), ("B", 5)),
    (("B", 3, 4), (4,), ("B", 3)),
    ((4,), (4,), ()),
    ((2, 1, 3, 4), (5, 4, 6), (2, 5, 3, 6)),
    (("batch", 8, "S", 64), ("batch", 8, 64, "S"), ("batch", 8, "S", "S")),
])
def test_matmul_infer_shapes(a, b, out):
    g = _load([helper.make_node("MatMul", ["a", "b"], ["y"])],
              [("a", TensorProto.FLOAT, a), ("b", TensorProto.FLOAT, b)], ["y"])
    assert g.outputs[0].type.shape == out
    assert g.outputs[0].type.dtype == np.float32


def test_matmul_inner_dim_mismatch_is_an_error():
    with pytest.raises(OpError, match="inner dimensions"):
        matmul_shape((2, 3), (4, 5))


def test_matmul_values_match_numpy_and_keep_dtype():
    rng = np.random.default_rng(0)
    g = _load([helper.make_node("MatMul", ["a", "b"], ["y"])],
              [("a", TensorProto.FLOAT16, (2, 1, 3, 4)), ("b", TensorProto.FLOAT16, (5, 4, 6))], ["y"])
    a = rng.standard_normal((2, 1, 3, 4)).astype(np.float16)
    b = rng.standard_normal((5, 4, 6)).astype(np.float16)
    y = engine.execute(g, {"a": a, "b": b})["y"]
    assert y.dtype == np.float16
    assert y.shape == (2, 5, 3, 6)
    np.testing.assert_allclose(y, np.matmul(a.astype(np.float32), b.astype(np.float32)), rtol=2e-3, atol=2e-3)


def test_matmul_vector_vector_gives_scalar():
    g = _load([helper.make_node("MatMul", ["a", "b"], ["y"])],
              [("a", TensorProto.FLOAT, (3,)), ("b", TensorProto.FLOAT, (3,))], ["y"])
    y = engine.execute(g, {"a": np.array([1, 2, 3], np.float32), "b": np.array([4, 5, 6], np.float32)})["y"]
    assert isinstance(y, np.ndarray)
    assert y.shape == ()
    assert float(y) == 32.0


def test_matmul_macs():
    g = _load([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", TensorProto.FLOAT, (8, 16, 32))], ["y"],
              inits=[("w", np.zeros((32, 64), np.float32))])
    w = _work(g)
    assert w.macs == 8 * 16 * 32 * 64
    assert w.weight_bytes == 32 * 64 * 4


def test_gemm_transposes_alpha_beta_and_broadcast_c():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 3)).astype(np.float32)  # transA -> (3, 5)
    b = rng.standard_normal((4, 5)).astype(np.float32)  # transB -> (5, 4)
    c = rng.standard_normal((4,)).astype(np.float32)
    g = _load([helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0, transA=1, transB=1)],
              [("a", TensorProto.FLOAT, (5, 3)), ("b", TensorProto.FLOAT, (4, 5)), ("c", TensorProto.FLOAT, (4,))],
              ["y"])
    assert g.outputs[0].type.shape == (3, 4)
    y = engine.execute(g, {"a": a, "b": b, "c": c})["y"]
    np.testing.assert_allclose(y, 0.5 * a.T @ b.T + 2.0 * c, rtol=1e-5, atol=1e-6)
    assert y.dtype == np.float32


def test_gemm_without_c_and_macs():
    g = _load([helper.make_node("Gemm", ["a", "w"], ["y"], transB=1)], [("a", TensorProto.FLOAT, ("N", 20))],
              ["y"], inits=[("w", np.ones((30, 20), np.float32))])
    assert g.outputs[0].type.shape == ("N", 30)
    y = engine.execute(g, {"a": np.ones((2, 20), np.float32)})["y"]
    assert y.shape == (2, 30)
    assert np.all(y == 20)

    g2 = _load([helper.make_node("Gemm", ["a", "w"], ["y"], transB=1)], [("a", TensorProto.FLOAT, (10, 20))],
               ["y"], inits=[("w", np.ones((30, 20), np.float32))])
    assert _work(g2).macs == 10 * 20 * 30


def test_gemm_integer_stays_integer():
    g = _load([helper.make_node("Gemm", ["a", "b", "c"], ["y"])],
              [("a", TensorProto.INT32, (2, 2)), ("b", TensorProto.INT32, (2, 2)), ("c", TensorProto.INT32, (1, 2))],
              ["y"])
    a = np.array([[1, 2], [3, 4]], np.int32)
    y = engine.execute(g, {"a": a, "b": a, "c": np.array([[10, 20]], np.int32)})["y"]
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, a @ a + np.array([[10, 20]]))


def test_det_batched():
    x = np.array([[[2, 0], [0, 3]], [[1, 2], [3, 4]]], np.float32)
    g = _load([helper.make_node("Det", ["x"], ["y"])], [("x", TensorProto.FLOAT, ("B", 2, 2))], ["y"])
    assert g.outputs[0].type.shape == ("B",)
    np.testing.assert_allclose(engine.execute(g, {"x": x})["y"], [6.0, -2.0], rtol=1e-6)


def _float64_product(a, w, trans_b):
    return a.astype(np.float64) @ (w.T if trans_b else w).astype(np.float64)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("rows", [2, 5, 17, 64])
def test_gemm_of_a_few_rows_by_a_constant_weight_matches_float64(rows, trans_b):
    """A text recognizer's classifier: a few time steps by a (1024 x 600) constant weight, the
    shape that runs on the direct kernel; the values are the float64 product's to float32
    accuracy on every run of the plan, bias, alpha and NaN/inf rows included."""
    from nodes import direct_conv

    rng = np.random.default_rng(rows)
    k, n = 1024, 600
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    g = _load([helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=trans_b, alpha=0.5)],
              [("a", TensorProto.FLOAT, ("M", k))], ["y"], inits=[("w", w), ("c", c)])
    for run in range(3):
        a = rng.standard_normal((rows, k)).astype(np.float32)
        a[0, run] = [np.nan, np.inf, -np.inf][run]
        y = engine.execute(g, {"a": a})["y"]
        want = 0.5 * _float64_product(a, w, trans_b) + c
        assert y.shape == (rows, n) and y.dtype == np.float32
        np.testing.assert_allclose(y[1:], want[1:], rtol=1e-4, atol=1e-3)
        np.testing.assert_array_equal(np.isnan(y[0]), np.isnan(want[0]))
        np.testing.assert_array_equal(y[0][~np.isnan(want[0])], want[0][~np.isnan(want[0])].astype(np.float32))
    assert direct_conv.lanes() == 0 or direct_conv.dense_suits(rows, k, n)


def test_matmul_of_a_constant_weight_folds_batch_rows_and_a_fed_weight_is_used():
    """MatMul by a constant (512 x 1024) weight with batch dims folded into rows, then the same
    product with the weight as a graph input (BLAS): both are the float64 product's values."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((512, 1024)).astype(np.float32)
    a = rng.standard_normal((2, 8, 512)).astype(np.float32)
    g = _load([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", TensorProto.FLOAT, (2, 8, 512))], ["y"],
              inits=[("w", w)])
    y = engine.execute(g, {"a": a})["y"]
    np.testing.assert_allclose(y, _float64_product(a, w, False), rtol=1e-4, atol=1e-3)
    fed = _load([helper.make_node("MatMul", ["a", "w"], ["y"])],
                [("a", TensorProto.FLOAT, (2, 8, 512)), ("w", TensorProto.FLOAT, (512, 1024))], ["y"])
    for _ in range(2):
        w2 = rng.standard_normal((512, 1024)).astype(np.float32)
        np.testing.assert_allclose(engine.execute(fed, {"a": a, "w": w2})["y"], _float64_product(a, w2, False),
                                   rtol=1e-4, atol=1e-3)
