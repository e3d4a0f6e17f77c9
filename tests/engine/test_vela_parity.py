"""Placement parity with vela: a small CNN compiled for ethos-u55, exported to TFLite and
compiled by vela; no node is on our CPU that vela runs on the NPU, and an op vela sends to the
CPU for a constraint we model is on our CPU too."""

from __future__ import annotations

import numpy as np
import pytest

from engine.compiler import CompileOptions, compile_model
from engine.export.vela import vela_available
from engine.place.parity import compare
from tests.engine.passes_util import load, model, rand

pytestmark = pytest.mark.skipif(not vela_available(), reason="vela (the ethos-u extra) is not installed")


def _fixture():
    # a standalone BatchNormalization on the input, GlobalAveragePool, a rank-3 MatMul by a
    # weight, a Div by a constant and a Sigmoid: every lowering; the 9x9 SAME AveragePool is
    # what vela puts on the CPU (kernel > 8 with padding)
    return load(model("""
        agraph (float[1,3,16,16] x) => (float[1,1,4] y, float[1,8,16,16] p) {
            n = BatchNormalization (x, s, b, m, v)
            c = Conv <pads=[1,1,1,1]> (n, W, B)
            r = Relu (c)
            p = AveragePool <kernel_shape=[9,9], pads=[4,4,4,4]> (r)
            g = GlobalAveragePool (r)
            f = Reshape (g, shp)
            h = MatMul (f, Wf)
            d = Div (h, k)
            y = Sigmoid (d)
        }""", s=rand(3), b=rand(3), m=rand(3), v=rand(3, positive=True), W=rand(8, 3, 3, 3), B=rand(8),
        shp=np.asarray([1, 1, 8], np.int64), Wf=rand(8, 4), k=np.asarray(3.0, np.float32)))


def test_our_cpu_ops_are_the_ones_vela_puts_on_the_cpu():
    r = compile_model(_fixture(), "ethos-u55", None,
                      CompileOptions(allow_synthetic_calibration=True, analysis_samples=0, vela=True))
    p = compare(r.sim, r.vela)
    assert p.ours_cpu_vela_npu == []
    assert p.vela_cpu_ours_npu == []
    # the lowerings ran and vela ran their results on the NPU
    lowered = {e.rule for rec in r.optimize_trace for e in rec.fired}
    assert {"lower_batchnorm.mul_add", "lower_global_pool.mean", "lower_matmul.rank3_weight",
            "lower_div.const", "lower_lut.mark"} <= lowered
    # vela's one CPU op (the padded 9x9 average pool) is on our CPU, with our reason
    assert [(c["tflite_op"], c["ours"]) for c in p.vela_cpu_ops] == [("AVERAGE_POOL_2D", "cpu")]
    assert "at most 8" in p.vela_cpu_ops[0]["our_reason"]
    assert p.ours_cpu == 1 and p.vela_cpu == 1


def test_vela_and_we_agree_on_large_strides_unpadded_pools_and_resize_factors():
    # a 4x4/4 patch conv (stride > 3, unpadded: NPU), a 10x10 unpadded average pool (NPU), a x3
    # nearest resize (CPU: vela scales by 2, 4 or 8) and a standalone HardSigmoid (lowered: NPU)
    g = load(model("""
        agraph (float[1,3,40,40] x) => (float[1,8,1,1] p, float[1,8,30,30] z, float[1,8,10,10] q) {
            c = Conv <strides=[4,4], kernel_shape=[4,4]> (x, W, B)
            y = Relu (c)
            p = AveragePool <kernel_shape=[10,10]> (y)
            z = Resize <mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"> (y, , sc)
            h = HardSigmoid (y)
            q = Mul (h, y)
        }""", W=rand(8, 3, 4, 4), B=rand(8), sc=np.asarray([1, 1, 3, 3], np.float32)))
    r = compile_model(g, "ethos-u55", None,
                      CompileOptions(allow_synthetic_calibration=True, analysis_samples=0, vela=True))
    p = compare(r.sim, r.vela)
    assert p.ours_cpu_vela_npu == [] and p.vela_cpu_ours_npu == []
    assert [(c["node"], c["ours"]) for c in p.vela_cpu_ops] == [("resize", "cpu")]
    devices = {o.node: o.device for o in r.sim.ops}
    assert devices["conv"] == devices["averagepool"] == "npu"
    assert [o.op_type for o in r.sim.ops if o.node.startswith("hardsigmoid")] == ["Mul", "Add", "Clip"]
