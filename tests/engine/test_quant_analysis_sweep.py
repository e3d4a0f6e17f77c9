"""The per-layer analysis in one sweep per sample (one FP32 run, one int8 run, each layer run
alone on the FP32 inputs of that sweep, its quantized constants and shared activations made
once) gives exactly the figures of the layer-by-layer definition: for every layer and sample,
that layer's inputs quantized on their own, the layer run, its output compared with FP32."""

from __future__ import annotations

import pytest

import engine
from engine import executor_for
from engine.quant.analysis import ErrorStats, _visible_output, analyze, isolated_args, run_node
from engine.quant.api import quantize
from engine.quant.cli import optimize_for_quantization
from engine.quant.config import QuantConfig
from engine.quant.data import load_calibration
from engine.quant.params import FLOAT_PRECISIONS, fake_quantize
from tests.models import ASSETS, demo_model

SAMPLES = 4


def _one_layer_at_a_time(fp_graph, qm, samples) -> dict[str, tuple[ErrorStats, ErrorStats]]:
    """(accumulated, isolated) per layer, every layer computed on its own for every sample."""
    by_name = {n.name: n for n in fp_graph.nodes}
    fp_ex, q_ex = executor_for(fp_graph), executor_for(qm.graph)
    out: dict[str, tuple[ErrorStats, ErrorStats]] = {}
    for feeds in samples:
        ref = fp_ex.run(feeds, keep_all=True)
        got = q_ex.run(feeds, keep_all=True)
        for name, precision in qm.node_precision.items():
            node = by_name[name]
            acc, iso = out.setdefault(name, (ErrorStats(), ErrorStats()))
            v = node.outputs[0].name
            alone = run_node(fp_graph, node, isolated_args(qm, node, ref))
            if v in qm.activations and precision not in FLOAT_PRECISIONS:
                alone = fake_quantize(alone, qm.activations[v])
            acc.update(ref[v], got[_visible_output(qm, v)])
            iso.update(ref[v], alone)
    return out


@pytest.mark.parametrize(("model", "calib", "precision"), [
    ("digits_cnn", "digits_calib.npz", {}),
    ("transformer_demo", "transformer_calib.npz", None),  # mixed: every third layer fp16 or int16
])
def test_the_one_sweep_analysis_equals_the_layer_by_layer_figures(model, calib, precision):
    g = optimize_for_quantization(engine.load(demo_model(model)))
    data = load_calibration(ASSETS / "data" / calib, g).take(SAMPLES)
    config = QuantConfig(per_channel=True)
    if precision is None:
        base = quantize(g, data, config, analysis_samples=0).model
        names = list(base.node_precision)
        config = QuantConfig(per_channel=True, precision={n: ("fp16", "int16")[k % 2]
                                                          for k, n in enumerate(names[::3])})
    qm = quantize(g, data, config, analysis_samples=0).model
    samples = [data.sample(i) for i in range(SAMPLES)]
    if precision is None:
        assert {"fp16", "int16"} <= set(qm.node_precision.values())
    swept = analyze(g, qm, samples, max_samples=SAMPLES)
    want = _one_layer_at_a_time(g, qm, samples)
    assert len(swept.layers) == len(want) >= 4
    for le in swept.layers:
        acc, iso = want[le.node]
        assert le.accumulated == acc, le.node
        assert le.isolated == iso, le.node
