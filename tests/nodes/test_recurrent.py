"""LSTM / GRU / RNN: inferred shapes per layout and direction, MACs, numerics, sequence_lens."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import engine
from engine.ir.infer import node_context
from engine.ir.onnx_io import to_onnx
from tests.nodes._build import load_graph

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(op, x_shape, hid, inp, nd=1, inits=None, inputs=("X", "W", "R", "B"), outputs=("Y", "Y_h"),
           opset=14, **attrs):
    rng = np.random.default_rng(0)
    g = GATES[op]
    weights = {"W": rng.standard_normal((nd, g * hid, inp)).astype(np.float32) * 0.4,
               "R": rng.standard_normal((nd, g * hid, hid)).astype(np.float32) * 0.4,
               "B": rng.standard_normal((nd, 2 * g * hid)).astype(np.float32) * 0.4}
    weights.update(inits or {})
    node = helper.make_node(op, list(inputs), list(outputs), hidden_size=hid, **attrs)
    graph = load_graph([node], [("X", TensorProto.FLOAT, x_shape)], [o for o in outputs if o],
                       [(k, v) for k, v in weights.items() if k in inputs], opset=opset)
    return graph, weights


def _types(graph):
    return {v.name: v.type.shape for v in graph.outputs}


def test_lstm_infer_symbolic_bidirectional_layouts():
    g, _ = _model("LSTM", ("T", "B", 8), 16, 8, nd=2, direction="bidirectional", outputs=("Y", "Y_h", "Y_c"))
    assert _types(g) == {"Y": ("T", 2, "B", 16), "Y_h": (2, "B", 16), "Y_c": (2, "B", 16)}
    g1, _ = _model("LSTM", ("B", "T", 8), 16, 8, nd=2, direction="bidirectional", layout=1,
                   outputs=("Y", "Y_h", "Y_c"))
    assert _types(g1) == {"Y": ("B", "T", 2, 16), "Y_h": ("B", 2, 16), "Y_c": ("B", 2, 16)}


def test_gru_hidden_size_from_r_and_optional_outputs():
    rng = np.random.default_rng(1)
    r = rng.standard_normal((1, 3 * 5, 5)).astype(np.float32)
    g, _ = _model("GRU", (7, 2, 3), 5, 3, inits={"R": r}, outputs=("", "Y_h"))
    assert _types(g) == {"Y_h": (1, 2, 5)}
    out = engine.execute(g, {"X": np.zeros((7, 2, 3), np.float32)})
    assert out["Y_h"].shape == (1, 2, 5)
    assert out["Y_h"].dtype == np.float32


@pytest.mark.parametrize(("op", "expect"), [("LSTM", 5 * 3 * 4 * 6 * (4 + 6)), ("GRU", 5 * 3 * 3 * 6 * (4 + 6)),
                                            ("RNN", 5 * 3 * 6 * (4 + 6))])
def test_macs_count_all_gate_matmuls(op, expect):
    g, _ = _model(op, (5, 3, 4), 6, 4)
    ctx = node_context(g.nodes[0])
    assert ctx.spec.work(ctx).macs == expect
    g2, _ = _model(op, (5, 3, 4), 6, 4, nd=2, direction="bidirectional")
    ctx2 = node_context(g2.nodes[0])
    assert ctx2.spec.work(ctx2).macs == 2 * expect


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _gru_naive(x, w, r, b, lbr):
    hid = r.shape[-1]
    h = np.zeros((x.shape[1], hid), np.float64)
    wz, wr, wh = np.split(w[0], 3)
    rz, rr, rh = np.split(r[0], 3)
    wbz, wbr, wbh, rbz, rbr, rbh = np.split(b[0], 6)
    ys = []
    for xt in x:
        z = _sig(xt @ wz.T + h @ rz.T + wbz + rbz)
        rg = _sig(xt @ wr.T + h @ rr.T + wbr + rbr)
        if lbr:
            hh = np.tanh(xt @ wh.T + rg * (h @ rh.T + rbh) + wbh)
        else:
            hh = np.tanh(xt @ wh.T + (rg * h) @ rh.T + rbh + wbh)
        h = (1 - z) * hh + z * h
        ys.append(h)
    return np.stack(ys)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset_matches_equations(lbr):
    g, wts = _model("GRU", (6, 2, 3), 4, 3, linear_before_reset=lbr)
    x = np.random.default_rng(5).standard_normal((6, 2, 3)).astype(np.float32)
    out = engine.execute(g, {"X": x})
    expect = _gru_naive(x.astype(np.float64), wts["W"], wts["R"], wts["B"], lbr)
    np.testing.assert_allclose(out["Y"][:, 0], expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["Y_h"][0], expect[-1], rtol=1e-5, atol=1e-5)


def test_rnn_sequence_lens_pads_y_with_zeros_and_holds_state():
    lens = np.array([4, 2], np.int32)
    g, _ = _model("RNN", (4, 2, 3), 5, 3, nd=2, direction="bidirectional",
                  inits={"L": lens}, inputs=("X", "W", "R", "B", "L"))
    x = np.random.default_rng(6).standard_normal((4, 2, 3)).astype(np.float32)
    out = engine.execute(g, {"X": x})
    y, yh = out["Y"], out["Y_h"]
    assert np.all(y[2:, :, 1] == 0)  # batch 1 has only 2 valid steps
    np.testing.assert_allclose(yh[0, 1], y[1, 0, 1])  # forward: state after step 1
    np.testing.assert_allclose(yh[1, 1], y[0, 1, 1])  # reverse: state after (reversed) step 0
    # the short sequence alone gives the same result as inside the padded batch
    g2, _ = _model("RNN", (2, 1, 3), 5, 3, nd=2, direction="bidirectional")
    alone = engine.execute(g2, {"X": x[:2, 1:2]})
    np.testing.assert_allclose(alone["Y"][:, :, 0], y[:2, :, 1], rtol=1e-6, atol=1e-6)


def test_lstm_clip_and_activations_change_the_result():
    x = np.random.default_rng(7).standard_normal((3, 1, 2)).astype(np.float32) * 5
    base, _ = _model("LSTM", (3, 1, 2), 3, 2)
    clipped, _ = _model("LSTM", (3, 1, 2), 3, 2, clip=0.1)
    relu, _ = _model("LSTM", (3, 1, 2), 3, 2, activations=["HardSigmoid", "Relu", "Tanh"],
                     activation_alpha=[0.3], activation_beta=[0.4])
    y0 = engine.execute(base, {"X": x})["Y"]
    y1 = engine.execute(clipped, {"X": x})["Y"]
    y2 = engine.execute(relu, {"X": x})["Y"]
    assert not np.allclose(y0, y1)
    assert not np.allclose(y0, y2)
    assert np.all(np.abs(y1) < 1)


def test_lstm_peepholes_lens_and_initial_state_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(8)
    nd, hid, inp, batch, seq = 2, 4, 3, 3, 5
    feeds = {"X": rng.standard_normal((seq, batch, inp)).astype(np.float32),
             "L": np.array([5, 1, 3], np.int32),
             "H0": rng.standard_normal((nd, batch, hid)).astype(np.float32),
             "C0": rng.standard_normal((nd, batch, hid)).astype(np.float32),
             "P": rng.standard_normal((nd, 3 * hid)).astype(np.float32)}
    g, _ = _model("LSTM", (seq, batch, inp), hid, inp, nd=2, inits={k: v for k, v in feeds.items() if k != "X"},
                    inputs=("X", "W", "R", "B", "L", "H0", "C0", "P"), outputs=("Y", "Y_h", "Y_c"),
                    direction="bidirectional", clip=2.0)
    ours = engine.execute(g, {"X": feeds["X"]})
    model = to_onnx(g)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = dict(zip(["Y", "Y_h", "Y_c"], sess.run(["Y", "Y_h", "Y_c"], {"X": feeds["X"]})))
    for k in ("Y", "Y_h", "Y_c"):
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_a_wide_layer_over_a_few_steps_matches_onnxruntime_on_every_run(op):
    """A recognizer's bidirectional layer (input 512, hidden 256, 8 steps of batch 2): the input
    projection of all steps is a few rows by a large constant W, the shape that runs on the
    direct kernel; onnxruntime's values on the first run and on the plan's later runs."""
    ort = pytest.importorskip("onnxruntime")
    hid, inp, seq, batch = 256, 512, 8, 2
    rng = np.random.default_rng(4)
    g_ = GATES[op]
    weights = {"W": (rng.standard_normal((2, g_ * hid, inp)) * 0.05).astype(np.float32),  # not chaotic:
               "R": (rng.standard_normal((2, g_ * hid, hid)) * 0.05).astype(np.float32)}  # |R| < 1
    g, _ = _model(op, (seq, batch, inp), hid, inp, nd=2, inits=weights, direction="bidirectional")
    sess = ort.InferenceSession(to_onnx(g).SerializeToString(), providers=["CPUExecutionProvider"])
    for _ in range(2):
        x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
        ours = engine.execute(g, {"X": x})
        theirs = dict(zip(["Y", "Y_h"], sess.run(["Y", "Y_h"], {"X": x})))
        for k in ("Y", "Y_h"):
            np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-4, atol=1e-4)
