"""BatchNormalization folded into Conv, ConvTranspose and Gemm."""

from __future__ import annotations

import numpy as np
import pytest

from engine.passes.fuse_bn import batchnorm_pass
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


def _bn(c: int) -> dict[str, np.ndarray]:
    return {"s": rand(c), "bb": rand(c), "m": rand(c), "v": rand(c, positive=True)}


def test_bn_folds_into_conv_and_keeps_provenance():
    g = load(model("""
        agraph (float[1,3,8,8] x) => (float[1,4,8,8] y) {
            c = Conv <pads=[1,1,1,1]> (x, W, b)
            y = BatchNormalization <epsilon=0.001> (c, s, bb, m, v)
        }""", W=rand(4, 3, 3, 3), b=rand(4), **_bn(4)))
    after, res = run_pass(g, batchnorm_pass)
    assert op_types(after) == ["Conv"]
    conv = after.nodes[0]
    assert len(conv.meta["provenance"]) == 2
    assert fired(res, "fuse_batchnorm.conv")
    assert after.outputs[0].name == "y"
    assert_same_numbers(g, after)


def test_bn_folds_into_conv_without_bias():
    g = load(model("""
        agraph (float[2,3,6,6] x) => (float[2,5,4,4] y) {
            c = Conv (x, W)
            y = BatchNormalization (c, s, bb, m, v)
        }""", W=rand(5, 3, 3, 3), **_bn(5)))
    after, _ = run_pass(g, batchnorm_pass)
    assert op_types(after) == ["Conv"]
    assert len(after.nodes[0].inputs) == 3
    assert_same_numbers(g, after)


@pytest.mark.parametrize("group", [1, 2])
def test_bn_folds_into_conv_transpose(group):
    cin, mg = 4, 3
    g = load(model(f"""
        agraph (float[1,{cin},5,5] x) => (float[1,{mg * group},10,10] y) {{
            c = ConvTranspose <strides=[2,2], group={group}, output_padding=[1,1], pads=[1,1,1,1]> (x, W, b)
            y = BatchNormalization (c, s, bb, m, v)
        }}""", W=rand(cin, mg, 3, 3), b=rand(mg * group), **_bn(mg * group)))
    after, res = run_pass(g, batchnorm_pass)
    assert op_types(after) == ["ConvTranspose"]
    assert fired(res, "fuse_batchnorm.conv_transpose")
    assert_same_numbers(g, after)


@pytest.mark.parametrize(("trans_b", "with_c", "beta"), [(0, True, 1.0), (1, True, 0.5), (1, False, 1.0)])
def test_bn_folds_into_gemm(trans_b, with_c, beta):
    w = rand(6, 5) if trans_b else rand(5, 6)
    c_in = ", C" if with_c else ""
    g = load(model(f"""
        agraph (float[4,5] a) => (float[4,6] y) {{
            t = Gemm <transB={trans_b}, beta={beta}, alpha=0.7> (a, B{c_in})
            y = BatchNormalization (t, s, bb, m, v)
        }}""", B=w, **({"C": rand(6)} if with_c else {}), **_bn(6)))
    after, res = run_pass(g, batchnorm_pass)
    assert op_types(after) == ["Gemm"]
    assert after.nodes[0].attrs["beta"] == 1.0
    assert fired(res, "fuse_batchnorm.gemm")
    assert_same_numbers(g, after)


def test_bn_does_not_fire_when_conv_output_has_a_second_reader():
    g = load(model("""
        agraph (float[1,3,8,8] x) => (float[1,4,8,8] y, float[1,4,8,8] z) {
            c = Conv <pads=[1,1,1,1]> (x, W, b)
            y = BatchNormalization (c, s, bb, m, v)
            z = Relu (c)
        }""", W=rand(4, 3, 3, 3), b=rand(4), **_bn(4)))
    after, res = run_pass(g, batchnorm_pass)
    assert op_types(after) == ["Conv", "BatchNormalization", "Relu"]
    (ev,) = refused(res, "fuse_batchnorm.conv")
    assert "is also read by" in ev.reason and "Relu" in ev.reason
    assert not res.modified


def test_bn_does_not_fire_into_gemm_with_non_constant_weights():
    g = load(model("""
        agraph (float[4,5] a, float[5,6] w) => (float[4,6] y) {
            t = Gemm (a, w)
            y = BatchNormalization (t, s, bb, m, v)
        }""", **_bn(6)))
    after, res = run_pass(g, batchnorm_pass)
    assert op_types(after) == ["Gemm", "BatchNormalization"]
    (ev,) = refused(res, "fuse_batchnorm.gemm")
    assert ev.reason == "Gemm weight 'w' is not a constant"


def test_bn_does_not_fire_with_non_constant_statistics():
    g = load(model("""
        agraph (float[1,3,4,4] x, float[4] mean) => (float[1,4,4,4] y) {
            c = Conv (x, W)
            y = BatchNormalization (c, s, bb, mean, v)
        }""", W=rand(4, 3, 1, 1), s=rand(4), bb=rand(4), v=rand(4, positive=True)))
    after, res = run_pass(g, batchnorm_pass)
    assert "BatchNormalization" in op_types(after)
    (ev,) = refused(res, "fuse_batchnorm.conv")
    assert ev.reason == "BatchNormalization mean is not a constant"
