"""The exact 8-bit integer GEMM (nodes/_cint8.c via nodes/int8_gemm.py): built, used, exact.

Every result is compared with float64 (exact at these sizes) or int64 arithmetic on the
centered operands, over the cases the kernel has branches for: both signednesses on each side
(the xor-0x80 flip), scalar and per-channel / per-row / per-column zero points, K not a multiple
of 4 (padding), N not a multiple of 16 and rows not a multiple of 6 (tile tails), strides,
dilations, pads, groups, batches, and operands at the ends of their ranges (the int32
wrap-around identity).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from nodes import int8_gemm
from nodes.quant_ops import IntOperand, int_conv, int_matmul_raw
from tests.nodes._build import load_graph
from tests.nodes.test_conv import naive_conv

_VNNI = "avx512_vnni" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else False
needs_kernel = pytest.mark.skipif(not int8_gemm.available(), reason="no AVX-512 VNNI here")


def test_the_kernel_is_built_and_runs_on_a_vnni_cpu():
    """make test compiles nodes/_cint8.c: a broken build fails here, not as integer models
    running 2-3x slower on the float fallback."""
    if not _VNNI:
        pytest.skip("this CPU has no AVX-512 VNNI")
    assert int8_gemm.available()


def _values(rng, dtype, shape, extreme=False):
    ii = np.iinfo(dtype)
    if extreme:
        return rng.choice(np.array([ii.min, ii.max], dtype), shape)
    return rng.integers(ii.min, int(ii.max) + 1, shape).astype(dtype)


def _conv_case(rng, xd, wd, n, c, m, h, w, kh, kw, strides, dils, pads, group, per_channel, extreme=False):
    x = _values(rng, xd, (n, c, h, w), extreme)
    wr = _values(rng, wd, (m, c // group, kh, kw), extreme)
    zx = int(_values(rng, xd, ()))
    zw = _values(rng, wd, (m,)) if per_channel else np.full(m, _values(rng, wd, ()), wd)
    wc = wr.astype(np.int32) - zw.astype(np.int32).reshape(-1, 1, 1, 1)
    attrs = {"strides": list(strides), "dilations": list(dils), "pads": list(pads), "group": group,
             "auto_pad": "NOTSET", "kernel_shape": [kh, kw]}
    y = int_conv(x, IntOperand(wc), attrs, np.array(zx, xd))
    ref = naive_conv(x.astype(np.float64) - zx, wc.astype(np.float64), None, list(strides), list(pads), list(dils), group)
    return y, ref


CONV_CASES = [
    # (x dtype, w dtype, n, c, m, h, w, kh, kw, strides, dils, pads, group, per-channel)
    (np.uint8, np.uint8, 1, 3, 4, 6, 6, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1, True),   # K = 27: padded
    (np.uint8, np.int8, 1, 24, 24, 9, 37, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 1, False),  # 24 rows, 333 px
    (np.int8, np.uint8, 2, 16, 7, 5, 5, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), 1, True),    # batch, 1x1
    (np.int8, np.int8, 1, 8, 13, 11, 17, 3, 3, (2, 1), (1, 2), (2, 0, 1, 3), 1, True),   # asym pads, dilation
    (np.uint8, np.uint8, 1, 12, 12, 10, 10, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1), 3, True),  # groups
    (np.uint8, np.uint8, 1, 1, 24, 16, 40, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1), 1, True),  # one input channel
    (np.uint8, np.uint8, 1, 5, 70, 4, 4, 2, 3, (3, 2), (1, 1), (0, 1, 2, 0), 1, False),   # 70 rows, stride 3
    (np.uint8, np.int8, 1, 4, 6, 7, 66, 1, 5, (1, 1), (1, 1), (0, 2, 0, 2), 1, True),    # 1x5, 66 columns
]


@needs_kernel
@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}" for i in range(len(CONV_CASES))])
def test_conv_equals_the_exact_convolution(case):
    y, ref = _conv_case(np.random.default_rng(len(case)), *case)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, ref)


@needs_kernel
def test_conv_random_geometries_are_exact():
    rng = np.random.default_rng(7)
    for _ in range(60):
        g = int(rng.choice([1, 1, 2, 3]))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        strides = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dils = (int(rng.integers(1, 3)), 1)
        pads = tuple(int(v) for v in rng.integers(0, 3, 4))
        case = (rng.choice([np.uint8, np.int8]), rng.choice([np.uint8, np.int8]), int(rng.integers(1, 3)),
                g * int(rng.integers(1, 6)), g * int(rng.integers(1, 15)), int(rng.integers(kh * dils[0], 14)),
                int(rng.integers(kw, 30)), kh, kw, strides, dils, pads, g, bool(rng.random() < 0.5))
        y, ref = _conv_case(rng, *case)
        np.testing.assert_array_equal(y, ref, err_msg=str(case))


@needs_kernel
def test_conv_at_the_ends_of_the_ranges_with_a_long_reduction():
    """K = 512 * 9: sums reach 3e8 and the folded zero-point terms pass int32's range on the way
    (the wrap-around identity); every value is 0/255 or -128/127."""
    for xd, wd in ((np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)):
        y, ref = _conv_case(np.random.default_rng(3), xd, wd, 1, 512, 20, 5, 5, 3, 3, (1, 1), (1, 1),
                            (1, 1, 1, 1), 1, True, extreme=True)
        np.testing.assert_array_equal(y, ref)


def _mm_case(rng, ad, bd, m, k, n, row_zp, col_zp, extreme=False):
    a = _values(rng, ad, (m, k), extreme)
    b = _values(rng, bd, (k, n), extreme)
    za = _values(rng, ad, (m, 1)) if row_zp else _values(rng, ad, ())
    zb = _values(rng, bd, (n,)) if col_zp else _values(rng, bd, ())
    bc = b.astype(np.int32) - zb.astype(np.int32)
    ref = (a.astype(np.int64) - za.astype(np.int64)) @ bc.astype(np.int64)
    return int_matmul_raw(a, za, IntOperand(bc)), ref


@needs_kernel
def test_matmul_random_shapes_are_exact():
    rng = np.random.default_rng(11)
    for _ in range(120):
        case = (rng.choice([np.uint8, np.int8]), rng.choice([np.uint8, np.int8]), int(rng.integers(1, 40)),
                int(rng.integers(1, 300)), int(rng.integers(1, 200)), bool(rng.random() < 0.5),
                bool(rng.random() < 0.5))
        y, ref = _mm_case(rng, *case)
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, ref, err_msg=str(case))


@needs_kernel
def test_matmul_at_the_ends_of_the_ranges():
    for ad, bd in ((np.uint8, np.uint8), (np.int8, np.int8), (np.int8, np.uint8)):
        y, ref = _mm_case(np.random.default_rng(5), ad, bd, 7, 8210, 33, True, True, extreme=True)
        np.testing.assert_array_equal(y, ref)


@needs_kernel
def test_what_the_kernel_cannot_take_falls_back_exactly(monkeypatch):
    """A reduction too long for exact int32 sums, a weight channel spanning more than 256 values
    and int32 activations take the float path, with the same exact result."""
    calls = []
    real = int8_gemm.MatMulWeights.__call__
    monkeypatch.setattr(int8_gemm.MatMulWeights, "__call__", lambda self, *a: calls.append(1) or real(self, *a))
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (3, int8_gemm.MAX_K + 1)).astype(np.uint8)
    b = rng.integers(-128, 128, (int8_gemm.MAX_K + 1, 5)).astype(np.int32)
    np.testing.assert_array_equal(int_matmul_raw(a, np.uint8(0), IntOperand(b)), a.astype(np.int64) @ b)
    wide = np.array([[-300], [300]], np.int32)  # 601 values in one column
    assert IntOperand(wide).int8_columns() is None
    np.testing.assert_array_equal(int_matmul_raw(np.array([[1, 2]], np.uint8), None, IntOperand(wide)), [[300]])
    a32 = np.array([[70000, -3]], np.int32)
    np.testing.assert_array_equal(int_matmul_raw(a32, None, IntOperand(np.array([[2], [5]], np.int32))), [[139985]])
    assert len(calls) == 1  # only the long reduction reached the kernel, which declined it


@needs_kernel
def test_integer_models_match_onnxruntime_bit_for_bit():
    """ConvInteger and MatMulInteger with uint8 weights and zero points (ddddocr's form) through
    the executor, against onnxruntime on the same model."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    w = rng.integers(0, 256, (32, 16, 3, 3)).astype(np.uint8)
    wzp = np.array(121, np.uint8)
    b = rng.integers(0, 256, (32 * 9, 40)).astype(np.uint8)
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])]
    inits = [("w", w), ("xzp", np.array(9, np.uint8)), ("wzp", wzp), ("b", b), ("azp", np.array(3, np.uint8)),
             ("bzp", np.array(119, np.uint8))]
    inputs = [("x", TensorProto.UINT8, (1, 16, 12, 20)), ("a", TensorProto.UINT8, (5, 288))]
    outputs = [("c", TensorProto.INT32, None), ("y", TensorProto.INT32, None)]
    feeds = {"x": rng.integers(0, 256, (1, 16, 12, 20)).astype(np.uint8),
             "a": rng.integers(0, 256, (5, 288)).astype(np.uint8)}
    ours = engine.execute(load_graph(nodes, inputs, outputs, inits, opset=13), feeds)
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(*v) for v in inputs],
        [helper.make_tensor_value_info(*v) for v in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits]), opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, ref in zip(("c", "y"), sess.run(["c", "y"], feeds)):
        np.testing.assert_array_equal(ours[k], ref)
