"""The compiled kernels (nodes/kernels.py) give the numbers the numpy paths gave.

Depthwise and small-group convolutions take the direct kernel: checked against the obviously
right loop (tests/nodes/test_conv.py's naive_conv) and onnxruntime over strides, dilations,
pads, channel multipliers and batch. erf/Gelu against float64 erf; HardSwish against its
formula; the JIT cache lands where NUMBA_CACHE_DIR says. Dense convs with few outputs (the
shifted per-tap GEMMs) against the naive loop and onnxruntime; Relu, Clip, HardSigmoid and
arithmetic by one value per channel against numpy, bit for bit (NaN, signed zeros, zero divisors).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine
from nodes.conv import DIRECT_GROUP_WIDTH, SHIFTED_MAX_OUT, SHIFTED_MIN_RATIO
from nodes.kernels import (
    add_relu_,
    clip_,
    erf32_,
    gelu32_,
    hard_sigmoid_,
    hard_swish_,
    logistic32_,
    per_channel_,
    relu_,
    silu32_,
)
from tests.nodes.test_conv import _conv_graph, naive_conv

# (x shape, group, channels out per group, kernel, attrs): all take the direct kernel
_DIRECT = [
    ((1, 8, 11, 13), 8, 1, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 6, 10, 9), 6, 1, (3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 0]}),
    ((1, 4, 12, 12), 4, 1, (5, 5), {"dilations": [2, 1], "pads": [4, 2, 4, 2]}),
    ((1, 4, 9, 9), 4, 2, (3, 3), {"strides": [1, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 8, 7, 8), 4, 2, (3, 1), {}),
    ((1, 5, 6, 20), 5, 4, (1, 7), {"strides": [3, 3], "pads": [0, 3, 0, 3]}),
    # odd sizes, uneven pads and a dilated strided tap: every stride phase edge case
    ((1, 3, 13, 11), 3, 1, (3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0], "dilations": [1, 2]}),
    # stride 3 down the rows from an odd top pad: the row phases wrap by counting (_phase_fill)
    ((1, 3, 14, 10), 3, 1, (3, 3), {"strides": [3, 1], "pads": [2, 1, 1, 1]}),
    # planes larger than one band of the kernel (PHASE_BAND output positions), at stride 1 and 2
    ((1, 3, 100, 90), 3, 1, (5, 5), {"pads": [2, 2, 2, 2]}),
    ((1, 2, 131, 120), 2, 1, (7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    # many channels on small planes: the channels-last kernel (nodes.kernels.NHWC_PLANE)
    ((2, 64, 14, 14), 64, 1, (5, 5), {"strides": [2, 2], "pads": [2, 1, 2, 1], "dilations": [1, 2]}),
    ((1, 40, 5, 7), 40, 1, (3, 3), {"pads": [1, 0, 1, 0]}),
]


@pytest.mark.parametrize(("x_shape", "group", "mg", "kernel", "attrs"), _DIRECT)
def test_depthwise_and_small_group_convs_match_the_naive_loop_and_onnxruntime(x_shape, group, mg, kernel, attrs):
    cg = x_shape[1] // group
    assert cg * mg <= DIRECT_GROUP_WIDTH  # the case really takes the compiled kernel
    rng = np.random.default_rng(sum(x_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((group * mg, cg, *kernel)).astype(np.float32)
    b = rng.standard_normal(group * mg).astype(np.float32)
    g = _conv_graph(list(x_shape), w, b, group=group, **attrs)
    ours = engine.execute(g, {"x": x})["y"]
    if "auto_pad" not in attrs:
        want = naive_conv(x, w, b, attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"), group)
        np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, **attrs)
    model = helper.make_model(
        helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ours, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


# (x shape, out channels, kernel, attrs): dense stride-1 convs that take the shifted per-tap GEMMs
_SHIFTED = [
    ((1, 16, 12, 13), 8, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 12, 9, 10), 4, (2, 2), {"pads": [0, 0, 1, 1]}),  # batch 2, PaddleOCR's uneven 2x2 pads
    ((1, 8, 11, 9), 3, (3, 2), {"dilations": [2, 3], "pads": [2, 1, 0, 2]}),
    ((1, 64, 40, 40), 32, (3, 3), {"pads": [1, 1, 1, 1]}),  # more than one band of per-tap products
]


@pytest.mark.parametrize(("x_shape", "m", "kernel", "attrs"), _SHIFTED)
def test_dense_convs_with_few_outputs_match_the_naive_loop_and_onnxruntime(x_shape, m, kernel, attrs):
    assert x_shape[1] >= SHIFTED_MIN_RATIO * m and m <= SHIFTED_MAX_OUT  # the case takes the shifted form
    rng = np.random.default_rng(sum(x_shape) + m)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((m, x_shape[1], *kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ours = engine.execute(_conv_graph(list(x_shape), w, b, **attrs), {"x": x})["y"]
    want = naive_conv(x, w, b, None, attrs.get("pads"), attrs.get("dilations"))
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-4)
    model = helper.make_model(
        helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ours, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-4)


def _special(dtype) -> np.ndarray:
    edge = [-0.0, 0.0, np.nan, -np.inf, np.inf, 1e-45, -1e-45, 1.0, -1.0, 6.0, 2.5, -2.5]
    rest = np.random.default_rng(3).standard_normal(500) * 5
    return np.concatenate([edge, rest]).astype(dtype)


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(a, b)  # NaN equals NaN here
    np.testing.assert_array_equal(np.signbit(a), np.signbit(b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_clip_and_hard_sigmoid_give_numpys_values_bit_for_bit(dtype):
    x = _special(dtype)
    _same_bits(relu_(x), np.maximum(x, dtype(0)))
    for lo, hi in ((0, 6), (-1, 1), (2, 1), (-0.0, 0.0), (0, np.inf)):  # min > max gives max everywhere
        _same_bits(clip_(x, lo, hi), np.clip(x, dtype(lo), dtype(hi)))
    y = x * dtype(0.2)
    y += dtype(0.5)
    _same_bits(hard_sigmoid_(x, 0.2, 0.5), np.clip(y, 0, 1))
    z = x.copy()
    assert relu_(z, out=z) is z
    _same_bits(z, np.maximum(x, dtype(0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_pass_kernels_in_place_give_the_bits_of_a_new_buffer(dtype):
    # in place, the kernels run a loop of their own (nodes._kernels_jit._IN_PLACE): the same values
    x = _special(dtype)
    x = np.concatenate([x, np.linspace(-8, 8, 4097, dtype=dtype)])  # 4K: the vectorized body runs, not only its tail
    other = x[::-1].copy()
    passes = [lambda a, out: relu_(a, out=out), lambda a, out: clip_(a, 0, 6, out=out),
              lambda a, out: clip_(a, -0.0, 0.0, out=out), lambda a, out: hard_sigmoid_(a, 0.2, 0.5, out=out),
              lambda a, out: hard_swish_(a, out=out)]
    for f in passes:
        want = f(x, None)
        buf = x.copy()
        assert f(buf, buf) is buf
        _same_bits(buf, want)
    want = add_relu_(x, other)
    for into in (0, 1):
        a, b = x.copy(), other.copy()
        out = (a, b)[into]
        assert add_relu_(a, b, out=out) is out
        _same_bits(out, want)


@pytest.mark.parametrize(("op", "fn"), [("Mul", np.multiply), ("Add", np.add), ("Sub", np.subtract), ("Div", np.divide)])
def test_arithmetic_by_one_value_per_channel_gives_numpys_values_and_divides_by_zero_like_numpy(op, fn):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    x[0, 0, 0, :2] = (0.0, np.nan)
    p = rng.standard_normal((1, 5, 1, 1)).astype(np.float32)
    p[0, 1] = 0.0
    with np.errstate(all="ignore"):
        for x_first in (True, False):
            want = fn(x, p) if x_first else fn(p, x)
            _same_bits(per_channel_(op, x.copy(), p, x_first), want)
            _same_bits(per_channel_(op, x.copy(), p.reshape(5, 1, 1), x_first), want)
    assert per_channel_(op, x.copy(), p.reshape(1, 1, 5, 1), True) is None  # not one value per channel


def test_depthwise_conv_in_float64_stays_float64_and_exact():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 8, 8))
    w = rng.standard_normal((3, 1, 3, 3))
    g = _conv_graph([1, 3, 8, 8], w, dtype=TensorProto.DOUBLE, group=3, pads=[1, 1, 1, 1])
    y = engine.execute(g, {"x": x})["y"]
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, naive_conv(x, w, None, None, [1, 1, 1, 1], None, 3), rtol=1e-12, atol=1e-12)


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) for v in x.ravel()]).reshape(x.shape)


def test_erf_is_float64_erf_rounded_to_float32_within_one_ulp():
    x = np.concatenate([np.linspace(-5, 5, 40001, dtype=np.float32),
                        np.float32(10.0) ** np.linspace(-30, 0, 301, dtype=np.float32)])
    x = np.concatenate([x, -x])
    want = _erf64(x)
    got = erf32_(x)
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps.max() <= 1.0
    assert np.mean(got == want.astype(np.float32)) > 0.9999  # correctly rounded almost everywhere


def test_erf_keeps_signed_zero_nan_and_infinities():
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 4.0, -7.5], np.float32)
    y = erf32_(x)
    assert y[0] == 0 and not np.signbit(y[0]) and np.signbit(y[1])
    assert np.isnan(y[2])
    np.testing.assert_array_equal(y[3:], [1.0, -1.0, 1.0, -1.0])


def test_gelu_in_one_pass_is_as_close_to_the_exact_value_as_the_float32_op_chain():
    x = np.linspace(-8, 8, 20001, dtype=np.float32)
    exact = 0.5 * x.astype(np.float64) * (1.0 + _erf64(x.astype(np.float64) / math.sqrt(2.0)))
    chain = 0.5 * x * (np.float32(1) + erf32_(x * np.float32(1 / math.sqrt(2.0))))  # Div, Erf, Add, Mul, Mul
    fused = gelu32_(x)
    assert np.abs(fused - exact).max() <= np.abs(chain - exact).max() + 1e-7


def test_hard_swish_in_place_matches_its_formula():
    x = np.linspace(-5, 5, 1001, dtype=np.float32)
    want = x * np.clip(x / np.float32(6) + np.float32(0.5), 0, 1)
    buf = x.copy()
    assert hard_swish_(buf, out=buf) is buf
    np.testing.assert_allclose(buf, want, rtol=1e-6, atol=1e-7)


def _logistic64(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def test_float32_sigmoid_and_silu_are_as_close_to_the_exact_value_as_numpys_float32_chain():
    x = np.concatenate([np.linspace(-80, 80, 200001, dtype=np.float32),
                        np.float32(10.0) ** np.linspace(-30, 1, 311, dtype=np.float32)])
    x = np.concatenate([x, -x])
    exact = _logistic64(x)
    e = np.exp(-x)  # the op chain Sigmoid ran before: exp, + 1, reciprocal, in float32
    chain = np.reciprocal(e + np.float32(1))
    got = logistic32_(x)
    assert got.dtype == np.float32
    normal = exact > 1e-30
    rel = np.abs(got - exact)[normal] / exact[normal]
    assert rel.max() <= 1.5e-7
    assert rel.max() <= (np.abs(chain - exact)[normal] / exact[normal]).max()
    silu_exact = x * exact
    silu = silu32_(x)
    big = np.abs(silu_exact) > 1e-30
    assert (np.abs(silu - silu_exact)[big] / np.abs(silu_exact[big])).max() <= 2e-7
    assert np.abs(silu - silu_exact)[~big].max() <= 1e-36  # where the result is ~0


def test_sigmoid_and_silu_in_place_keep_nan_infinities_and_the_limits():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0, 30.0], np.float32)
    buf = x.copy()
    assert logistic32_(buf, out=buf) is buf
    assert np.isnan(buf[0])
    np.testing.assert_allclose(buf[1:], [1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 1.0], atol=1e-38, rtol=0)
    buf = x.copy()
    assert silu32_(buf, out=buf) is buf
    assert np.isnan(buf[0])
    np.testing.assert_allclose(buf[[1, 3, 5, 7]], [np.inf, 0.0, 100.0, 30.0], rtol=0)
    assert buf[6] == 0 and np.isnan(buf[2])  # -100 * sigmoid(-100) ~ -4e-42; -inf * 0 is NaN, as numpy gives


def test_a_fresh_copy_compiles_its_kernels_and_caches_them_where_numba_cache_dir_says(tmp_path):
    """A fresh clone has no compiled code: the first import compiles, and the machine code goes
    to NUMBA_CACHE_DIR when set (how a read-only install is run), so the next process loads it."""
    import shutil

    import nodes

    shutil.copytree(os.path.dirname(nodes.__file__), tmp_path / "src" / "nodes",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    code = ("import numpy as np; from nodes.kernels import hard_swish_; "
            "assert float(hard_swish_(np.array([1.5], np.float32))[0]) == 1.5 * (1.5 / 6 + 0.5)")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "NUMBA_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path, timeout=300)
    assert any(p.suffix == ".nbi" for p in cache.rglob("*")), "nothing was cached"
    assert not list((tmp_path / "src").rglob("*.nbi")), "the cache went into the source folder"


def test_loading_a_model_does_not_import_numba():
    """numba's import takes 1-2 s: a command that runs no compiled kernel (inspect, compile of a
    graph without depthwise convs) must not pay it."""
    code = ("import sys, engine; from tests.models import demo_model; "
            "engine.load(demo_model('transformer_demo')); assert 'numba' not in sys.modules, 'numba imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), timeout=120)
