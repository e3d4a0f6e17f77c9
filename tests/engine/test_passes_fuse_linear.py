"""Mul/Add by constants into Conv/Gemm/BatchNormalization, MatMul+Add -> Gemm, Pad into Conv."""

from __future__ import annotations

import numpy as np
import pytest

from engine.passes.fuse_linear import matmul_add_pass, mul_add_pass, pad_conv_pass
from tests.engine.passes_util import (
    assert_same_numbers,
    fired,
    load,
    model,
    op_types,
    rand,
    refused,
    run_pass,
)

I64 = np.int64


@pytest.mark.parametrize(("op", "const"), [
    ("Mul", rand(1, 4, 1, 1)), ("Add", rand(4, 1, 1)), ("Sub", rand(1, 4, 1, 1)),
    ("Div", rand(4, 1, 1, positive=True)), ("Mul", np.array(1.5, dtype=np.float32)),
])
def test_per_channel_constant_folds_into_conv(op, const):
    g = load(model(f"""
        agraph (float[1,3,6,6] x) => (float[1,4,6,6] y) {{
            c = Conv <pads=[1,1,1,1]> (x, W, b)
            y = {op} (c, k)
        }}""", W=rand(4, 3, 3, 3), b=rand(4), k=const))
    after, res = run_pass(g, mul_add_pass)
    assert op_types(after) == ["Conv"]
    assert fired(res, f"fuse_mul_add.{op.lower()}_into_conv")
    assert_same_numbers(g, after)


def test_constant_on_the_left_of_a_commutative_op_folds_too():
    g = load(model("""
        agraph (float[1,3,6,6] x) => (float[1,4,6,6] y) {
            c = Conv (x, W)
            m = Mul (k, c)
            y = Add (k2, m)
        }""", W=rand(4, 3, 1, 1), k=rand(1, 4, 1, 1), k2=rand(1, 4, 1, 1)))
    after, _ = run_pass(g, mul_add_pass)
    assert op_types(after) == ["Conv"]
    assert after.nodes[0].meta["provenance"] == ["conv", "mul", "add"]  # unnamed nodes get op-type names
    assert_same_numbers(g, after)


def test_constant_varying_over_space_does_not_fold():
    g = load(model("""
        agraph (float[1,3,6,6] x) => (float[1,4,6,6] y) {
            c = Conv <pads=[1,1,1,1]> (x, W)
            y = Mul (c, k)
        }""", W=rand(4, 3, 3, 3), k=rand(1, 1, 6, 6)))
    after, res = run_pass(g, mul_add_pass)
    assert op_types(after) == ["Conv", "Mul"]
    (ev,) = refused(res, "fuse_mul_add.mul_into_conv")
    assert "varies along axis 2" in ev.reason


@pytest.mark.parametrize(("op", "const"), [("Mul", rand(6)), ("Add", rand(4, 6)), ("Add", rand(1, 6))])
def test_constant_folds_into_gemm(op, const):
    g = load(model(f"""
        agraph (float[4,5] a) => (float[4,6] y) {{
            t = Gemm <transB=1, beta=0.5> (a, B, C)
            y = {op} (t, k)
        }}""", B=rand(6, 5), C=rand(6), k=const))
    after, _ = run_pass(g, mul_add_pass)
    assert op_types(after) == ["Gemm"]
    assert_same_numbers(g, after)


def test_mul_add_fold_into_a_standalone_batchnorm():
    g = load(model("""
        agraph (float[1,4,5,5] x) => (float[1,4,5,5] y) {
            b = BatchNormalization (x, s, bb, m, v)
            c = Mul (b, k)
            y = Add (c, k2)
        }""", s=rand(4), bb=rand(4), m=rand(4), v=rand(4, positive=True), k=rand(4, 1, 1), k2=rand(1, 4, 1, 1)))
    after, res = run_pass(g, mul_add_pass)
    assert op_types(after) == ["BatchNormalization"]
    assert fired(res, "fuse_mul_add.mul_into_batchnormalization")
    assert_same_numbers(g, after)


def test_matmul_add_becomes_gemm_in_2d():
    g = load(model("""
        agraph (float[8,16] a) => (float[8,4] y) {
            m = MatMul (a, W)
            y = Add (m, bias)
        }""", W=rand(16, 4), bias=rand(4)))
    after, res = run_pass(g, matmul_add_pass)
    assert op_types(after) == ["Gemm"]
    assert fired(res, "fuse_matmul_add.gemm")
    assert_same_numbers(g, after)


def test_matmul_add_in_3d_stays_with_the_reason():
    g = load(model("""
        agraph (float[2,8,16] a) => (float[2,8,4] y) {
            m = MatMul (a, W)
            y = Add (m, bias)
        }""", W=rand(16, 4), bias=rand(4)))
    after, res = run_pass(g, matmul_add_pass)
    assert op_types(after) == ["MatMul", "Add"]
    (ev,) = refused(res, "fuse_matmul_add.gemm")
    assert ev.reason == "A 'a' has rank 3; Gemm takes 2-D A"


def test_matmul_add_with_a_full_size_non_constant_addend():
    g = load(model("""
        agraph (float[8,16] a, float[8,4] r) => (float[8,4] y) {
            m = MatMul (a, W)
            y = Add (r, m)
        }""", W=rand(16, 4)))
    after, _ = run_pass(g, matmul_add_pass)
    assert op_types(after) == ["Gemm"]
    assert_same_numbers(g, after)


@pytest.mark.parametrize("opset", [11, 18])
def test_zero_pad_folds_into_conv(opset):
    g = load(model("""
        agraph (float[1,3,6,6] x) => (float[1,4,8,7] y) {
            p = Pad (x, pads)
            y = Conv <pads=[0,1,0,0]> (p, W, b)
        }""", opset=opset, pads=np.array([0, 0, 2, 1, 0, 0, 2, 0], dtype=I64), W=rand(4, 3, 3, 3), b=rand(4)))
    after, res = run_pass(g, pad_conv_pass)
    assert op_types(after) == ["Conv"]
    assert after.nodes[0].attrs["pads"] == [2, 2, 2, 0]
    assert fired(res, "fuse_pad_conv.conv")
    assert_same_numbers(g, after)


def test_pad_of_channels_or_non_zero_value_stays():
    g = load(model("""
        agraph (float[1,3,6,6] x) => (float[1,4,6,6] y) {
            p = Pad (x, pads, val)
            y = Conv (p, W)
        }""", pads=np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=I64), val=np.array(1.0, dtype=np.float32),
        W=rand(4, 3, 3, 3)))
    after, res = run_pass(g, pad_conv_pass)
    assert op_types(after) == ["Pad", "Conv"]
    (ev,) = refused(res)
    assert ev.reason == "Pad value is 1.0, not 0"
