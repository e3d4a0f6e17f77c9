"""The compiled quantization kernels (nodes/quant_kernels.py) give the numpy paths' numbers bit
for bit: dynamic uint8 quantization and the quantized recurrent GEMM, over weights that fit int8
and ones that need int16, per-column scales, a constant (zero-range) input, and NaN/inf inputs,
which must take the numpy path."""

from __future__ import annotations

import numpy as np
import pytest

from nodes.contrib_quant import dynamic_quantize_u8
from nodes.quant_kernels import dynamic_quantize, narrow_transposed, qgemm_float
from nodes.quant_ops import IntOperand, _centered, int_matmul

_RNG = np.random.default_rng(7)


def _numpy_qgemm(x, b, mult_w, add):
    qx, sx, zx = dynamic_quantize_u8(x)
    acc = int_matmul(_centered(qx, np.asarray(zx)), IntOperand(b))
    y = acc.astype(np.float32) * (np.float32(sx) * mult_w)
    return y if add is None else add + y


def _bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("zp", [0, -37])  # zp 0: int8 weight copy; -37: centered values need int16
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("rows", [1, 3])
def test_quantized_gemm_kernel_equals_numpy_bit_for_bit(zp, per_column, rows):
    k, n = 96, 40
    w8 = _RNG.integers(-128, 128, (k, n)).astype(np.int8)
    b = _centered(w8, np.int32(zp))
    bt = narrow_transposed(b)
    assert bt.dtype == (np.int8 if zp == 0 else np.int16)
    mult_w = (_RNG.uniform(0.001, 0.02, n) if per_column else np.array(0.013)).astype(np.float32)
    x = (_RNG.standard_normal((rows, k)) * 3).astype(np.float32)
    add = _RNG.standard_normal((rows, n)).astype(np.float32)
    for addend in (None, add):
        ours = qgemm_float(x, bt, int(np.abs(b).max()), mult_w, addend)
        assert _bits_equal(ours, _numpy_qgemm(x, b, mult_w, addend))


def test_quantized_gemm_kernel_of_a_constant_input_uses_scale_one():
    b = _RNG.integers(-100, 100, (16, 8)).astype(np.int32)
    x = np.zeros((1, 16), np.float32)
    ours = qgemm_float(x, narrow_transposed(b), 100, np.array(0.5, np.float32))
    assert _bits_equal(ours, _numpy_qgemm(x, b, np.array(0.5, np.float32), None))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_quantized_gemm_kernel_leaves_nan_and_inf_to_numpy(bad):
    b = _RNG.integers(-100, 100, (16, 8)).astype(np.int32)
    x = _RNG.standard_normal((1, 16)).astype(np.float32)
    x[0, 3] = bad
    assert qgemm_float(x, narrow_transposed(b), 100, np.array(0.5, np.float32)) is None


@pytest.mark.parametrize("shape", [(1, 1), (3, 50, 7), (1000,)])
def test_dynamic_quantize_kernel_equals_numpy_bit_for_bit(shape):
    for x in (_RNG.standard_normal(shape).astype(np.float32) * 5,
              np.abs(_RNG.standard_normal(shape)).astype(np.float32),  # lo = 0: zero point 0
              -np.abs(_RNG.standard_normal(shape)).astype(np.float32)):  # hi = 0: zero point 255
        q, s, z = dynamic_quantize(x, 1.0)
        rq, rs, rz = dynamic_quantize_u8(x)
        assert _bits_equal(q, rq) and _bits_equal(np.asarray(s), np.asarray(rs))
        assert _bits_equal(np.asarray(z), np.asarray(rz))


def test_dynamic_quantize_kernel_of_zero_range_follows_the_given_scale():
    x = np.zeros((4, 4), np.float32)
    q, s, z = dynamic_quantize(x, 0.0)  # ONNX DynamicQuantizeLinear: scale 0, all zeros
    assert s == 0 and z == 0 and not q.any()
    q, s, z = dynamic_quantize(x, 1.0)  # onnxruntime's dynamic GEMMs: scale 1
    assert s == 1 and z == 0 and not q.any()
    x[1, 1] = np.nan
    assert dynamic_quantize(x, 1.0) is None


def test_integer_matmul_stays_exact_on_both_sides_of_float32s_exact_range():
    # sums just above 2**24 (odd, so float32 would round them) and a long K whose sums stay below
    a = np.array([[4097, 4097], [1, -1]], np.int32)
    b = np.array([[4097, 3], [4095, -5]], np.int32)
    np.testing.assert_array_equal(int_matmul(a, b), a.astype(np.int64) @ b.astype(np.int64))
    a = _RNG.integers(-128, 128, (8, 1024)).astype(np.int32)
    a[:, 64:] = 0  # K * max|a| * max|b| = 1.7e7 says chunk; the sums' bound (2e6) says float32
    b = _RNG.integers(-128, 128, (1024, 16)).astype(np.int32)
    b[0, 0] = 128
    np.testing.assert_array_equal(int_matmul(a, b), a.astype(np.int64) @ b.astype(np.int64))


def _dq_lstm_graph(seq, batch, inp, hid, r_zp):
    from onnx import TensorProto, helper, numpy_helper

    import engine

    dirs = 2
    consts = {"W": _RNG.integers(-128, 128, (dirs, inp, 4 * hid)).astype(np.int8),
              "R": _RNG.integers(-128, 128, (dirs, hid, 4 * hid)).astype(np.int8),
              "B": (_RNG.standard_normal((dirs, 8 * hid)) * 0.1).astype(np.float32),
              "ws": np.array([0.01, 0.02], np.float32), "wz": np.array([0, 3], np.int8),
              "rs": np.array([0.02, 0.015], np.float32), "rz": np.array(r_zp, np.int8)}
    names = ["x", "W", "R", "B", "", "", "", "", "ws", "wz", "rs", "rz"]
    node = helper.make_node("DynamicQuantizeLSTM", names, ["y", "yh", "yc"], domain="com.microsoft",
                            hidden_size=hid, direction="bidirectional")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (seq, batch, inp))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (seq, dirs, batch, hid))]
                          + [helper.make_tensor_value_info(o, TensorProto.FLOAT, (dirs, batch, hid)) for o in ("yh", "yc")],
                          initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return engine.load(m)


@pytest.mark.parametrize("r_zp", [[0, 0], [5, -9]])  # int8 copy of R; centered R needing int16
def test_dynamic_quantize_lstm_compiled_steps_equal_the_numpy_steps(monkeypatch, r_zp):
    import engine
    import nodes.contrib_quant as cq

    g = _dq_lstm_graph(6, 2, 10, 8, r_zp)
    x = {"x": (_RNG.standard_normal((6, 2, 10)) * 2).astype(np.float32)}
    fast = engine.execute(g, x)
    monkeypatch.setattr(cq, "_small_gemm", lambda wq, w_s: None)  # every step on numpy's path
    slow = engine.execute(g, x)
    assert all(_bits_equal(fast[k], slow[k]) for k in ("y", "yh", "yc"))
