"""Decomposed LayerNorm -> LayerNormalization, erf/tanh GELU -> Gelu, opset raising."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from engine.ir.onnx_io import to_onnx
from engine.passes.fuse_transformer import gelu_pass, layernorm_pass
from engine.passes.opset import op_raise_reason, raise_reason
from tests.engine.passes_util import (
    assert_runs_in_onnxruntime,
    assert_same_numbers,
    fired,
    load,
    model,
    op_types,
    rand,
    refused,
    run_pass,
)

F = np.float32
LN_CONSTS = {"two": np.array(2.0, F), "eps": np.array(1e-5, F), "gamma": rand(16), "beta": rand(16)}


def _ln_body(sq: str = "p = Pow (d, two)", norm: str = "n = Div (d, sd)", tail: str = "g = Mul (n, gamma)\n y = Add (g, beta)",
             axes_attr: bool = True) -> str:
    rm = "ReduceMean <axes=[-1]>" if axes_attr else "ReduceMean"
    ax = "" if axes_attr else ", axes"
    return f"""
        agraph (float[2,5,16] x) => (float[2,5,16] y) {{
            mu = {rm} (x{ax})
            d = Sub (x, mu)
            {sq}
            var = {rm} (p{ax})
            ve = Add (var, eps)
            sd = Sqrt (ve)
            {norm}
            {tail}
        }}"""


@pytest.mark.parametrize(("sq", "norm", "tail"), [
    ("p = Pow (d, two)", "n = Div (d, sd)", "g = Mul (n, gamma)\n y = Add (g, beta)"),
    ("p = Mul (d, d)", "r = Reciprocal (sd)\n n = Mul (d, r)", "g = Mul (gamma, n)\n y = Add (beta, g)"),
    ("p = Pow (d, two)", "n = Div (d, sd)", "y = Mul (n, gamma)"),
    ("p = Pow (d, two)", "y = Div (d, sd)", ""),
], ids=["pow-div-affine", "mul-reciprocal-commuted", "scale-only", "bare"])
def test_decomposed_layernorm_becomes_one_node(sq, norm, tail):
    g = load(model(_ln_body(sq, norm, tail), **LN_CONSTS))
    after, res = run_pass(g, layernorm_pass)
    assert op_types(after) == ["LayerNormalization"]
    ln = after.nodes[0]
    assert ln.attrs["axis"] == -1 and abs(ln.attrs["epsilon"] - 1e-5) < 1e-12
    assert fired(res, "fuse_layernorm.core")
    assert after.outputs[0].name == "y"
    assert_same_numbers(g, after)
    assert_runs_in_onnxruntime(after, reference=g)


def test_layernorm_fusion_raises_opset_13_to_17():
    g = load(model(_ln_body(), opset=13, **LN_CONSTS))
    after, _ = run_pass(g, layernorm_pass)
    assert op_types(after) == ["LayerNormalization"]
    assert after.opset("") == 17
    onnx.checker.check_model(to_onnx(after), full_check=True)
    assert_same_numbers(g, after)


def test_layernorm_over_a_non_trailing_axis_stays():
    body = _ln_body().replace("<axes=[-1]>", "<axes=[1]>")
    g = load(model(body, **LN_CONSTS))
    after, res = run_pass(g, layernorm_pass)
    assert "LayerNormalization" not in op_types(after)
    (ev,) = refused(res, "fuse_layernorm.core")
    assert ev.reason == "reduces axes [1], not the trailing axes"


def test_layernorm_with_axes_input_at_opset_18():
    g = load(model(_ln_body(axes_attr=False), opset=18, axes=np.array([-1], np.int64), **LN_CONSTS))
    after, _ = run_pass(g, layernorm_pass)
    assert op_types(after) == ["LayerNormalization"]
    assert_same_numbers(g, after)


GELU_ERF = [
    "h = Mul (x, half)\n e = Div (x, sqrt2)\n f = Erf (e)\n o = Add (f, one)\n y = Mul (h, o)",
    "e = Div (x, sqrt2)\n f = Erf (e)\n o = Add (one, f)\n m = Mul (x, o)\n y = Mul (m, half)",
    "e = Mul (x, isqrt2)\n f = Erf (e)\n o = Add (f, one)\n m = Mul (o, half)\n y = Mul (x, m)",
    "e = Div (x, sqrt2)\n f = Erf (e)\n o = Add (f, one)\n m = Mul (x, o)\n y = Div (m, two)",
]
GELU_TANH = [
    "c = Pow (x, three)\n k = Mul (c, k1)\n i = Add (x, k)\n s = Mul (i, k2)\n t = Tanh (s)\n o = Add (t, one)\n"
    " m = Mul (x, o)\n y = Mul (m, half)",
    "q = Mul (x, x)\n c = Mul (q, x)\n k = Mul (k1, c)\n i = Add (k, x)\n s = Mul (k2, i)\n t = Tanh (s)\n"
    " o = Add (one, t)\n h = Mul (half, x)\n y = Mul (h, o)",
]
GELU_CONSTS = {"half": np.array(0.5, F), "one": np.array(1.0, F), "two": np.array(2.0, F),
               "three": np.array(3.0, F), "sqrt2": np.array(math.sqrt(2), F), "isqrt2": np.array(1 / math.sqrt(2), F),
               "k1": np.array(0.044715, F), "k2": np.array(math.sqrt(2 / math.pi), F)}


@pytest.mark.parametrize(("body", "approximate"), [(b, "none") for b in GELU_ERF] + [(b, "tanh") for b in GELU_TANH])
def test_gelu_patterns_become_one_node(body, approximate):
    g = load(model(f"agraph (float[4,32] x) => (float[4,32] y) {{ {body} }}", opset=20, **GELU_CONSTS))
    after, res = run_pass(g, gelu_pass)
    assert op_types(after) == ["Gelu"]
    assert after.nodes[0].attrs.get("approximate", "none") == approximate
    assert fired(res)
    assert_same_numbers(g, after)
    assert_runs_in_onnxruntime(after, reference=g)


def _gelu_then(tail: str, y_shape: str = "4,32") -> str:
    """An erf GELU of x (``gl``) followed by ``tail``, one node computing y from gl."""
    return f"""
        agraph (float[4,32] x) => (float[{y_shape}] y) {{
            e = Div (x, sqrt2)
            f = Erf (e)
            o = Add (f, one)
            m = Mul (x, o)
            gl = Mul (m, half)
            {tail}
        }}"""


def test_gelu_raises_opset_17_to_20_converting_reduce_mean():
    g = load(model(_gelu_then("y = ReduceMean <axes=[1]> (gl)", y_shape="4,1"), **GELU_CONSTS))
    after, _ = run_pass(g, gelu_pass)
    assert op_types(after) == ["Gelu", "ReduceMean"]
    assert after.opset("") == 20
    rm = after.toposort()[1]
    assert "axes" not in rm.attrs and rm.inputs[1].const.tolist() == [1]
    onnx.checker.check_model(to_onnx(after), full_check=True)
    assert_same_numbers(g, after)


def test_gelu_stays_decomposed_with_the_reason_when_opset_cannot_rise():
    g = load(model(_gelu_then("y = Softmax <axis=0> (gl)"), opset=11, **GELU_CONSTS))
    after, res = run_pass(g, gelu_pass)
    assert "Gelu" not in op_types(after)
    assert after.opset("") == 11
    (ev,) = refused(res, "fuse_gelu.erf")
    assert ev.reason.startswith("raising the opset from 11 to 20 would change Softmax node")


def test_gelu_partial_product_is_not_fused():
    g = load(model("""
        agraph (float[4,32] x) => (float[4,32] y) {
            e = Div (x, sqrt2)
            f = Erf (e)
            o = Add (f, one)
            y = Mul (x, o)
        }""", opset=20, **GELU_CONSTS))
    after, _ = run_pass(g, gelu_pass)
    assert "Gelu" not in op_types(after)


def test_opset_compatibility_judgement():
    assert op_raise_reason("MatMul", 13, 20) is None
    assert "lost attribute 'axes' at opset 18" in op_raise_reason("ReduceMean", 17, 20)
    assert "default of attribute 'axis'" in op_raise_reason("Softmax", 11, 13)
    g = load(model("agraph (float[2,3] x) => (float[2,3] y) { y = Softmax <axis=1> (x) }", opset=11))
    assert raise_reason(g, 13) is None  # axis 1 is the last axis: the adapter keeps the meaning
