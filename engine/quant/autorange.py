"""``--method auto``: each activation tensor's range method chosen by the error it causes.

For every calibrated tensor t and every range method m (minmax, percentile, entropy, mse; each
read from the same histogram, no recalibration), t is fake-quantized with m's range and the
quantizable ops that read t are run with that input (their other inputs FP32). The error those
consumers' outputs show against FP32, summed as err^2 / ref^2 over a few samples, is what the
range costs downstream: clipping a heavy-tailed tensor can look cheap on the tensor itself (MSE)
yet ruin a LayerNorm or an attention score that depends on its outliers, and a minmax range on
a ReLU output can waste levels a Conv would have used. A tensor nothing quantized reads (a model
output) is judged by its own error. The method with the least error wins, per tensor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.ir.graph import Graph, Node
from engine.quant.analysis import run_node
from engine.quant.calibrate import Calibration, fused_into_producer, quantizable_nodes
from engine.quant.config import QuantConfig, quant_spec
from engine.quant.observers import HistogramObserver
from engine.quant.params import fake_quantize, params_from_range, type_limits

RANGE_METHODS = ("minmax", "percentile", "mse")
"""The methods ``auto`` weighs. Entropy is left out: its KL search costs 0.1-0.3 s per tensor
(minutes on a 200-tensor model) and it lost to minmax on every model measured (mobilenet_demo
26.3 vs 36.4 dB, PP-OCRv6 rec); ask for it explicitly with ``--method entropy``."""


@dataclass
class RangeChoice:
    """The method chosen for one tensor and the relative error each candidate gave."""

    tensor: str
    method: str
    errors: dict[str, float]


def _readers(graph: Graph, config: QuantConfig) -> dict[str, list[tuple[Node, int]]]:
    """tensor -> the (quantizable node, input index) pairs that read it as quantized data."""
    out: dict[str, list[tuple[Node, int]]] = {}
    for n in quantizable_nodes(graph, config):
        if n.graph is not graph or fused_into_producer(n, config):
            continue
        q = quant_spec(n)
        skip = {q.weight_input, q.bias_input, *q.float_inputs} if q is not None else set()
        for i, v in enumerate(n.inputs):
            if v is not None and v.const is None and i not in skip:
                out.setdefault(v.name, []).append((n, i))
    return out


def _candidates(obs: HistogramObserver, dtype: str, config: QuantConfig) -> dict[str, tuple[float, float]]:
    """method -> range, methods giving the same range as an earlier one dropped."""
    _, qmin, qmax = type_limits(dtype)
    nlevels = qmax - qmin + 1
    seen: dict[tuple[float, float], str] = {}
    for m in RANGE_METHODS:
        lo, hi = obs.range_for(m, min(nlevels, 256) if dtype != "int16" else nlevels, config.percentile)
        seen.setdefault((float(lo), float(hi)), m)
    return {m: r for r, m in seen.items()}


def choose_ranges(graph: Graph, calib: Calibration, config: QuantConfig,
                  envs: Sequence[Mapping[str, np.ndarray]]) -> list[RangeChoice]:
    """The best range method of every histogram-calibrated tensor of ``graph`` (main graph),
    judged on the FP32 values ``envs`` (one dict of every tensor per sample)."""
    readers = _readers(graph, config)
    symmetric = config.symmetric or config.dtype == "int16"
    out = []
    for name, obs in calib.stats.items():
        if not isinstance(obs, HistogramObserver) or obs.count == 0 or not all(name in e for e in envs):
            continue
        cands = _candidates(obs, config.dtype, config)
        if len(cands) == 1:
            out.append(RangeChoice(name, next(iter(cands)), {}))
            continue
        errors: dict[str, float] = {}
        for m, (lo, hi) in cands.items():
            qp = params_from_range(lo, hi, config.dtype, symmetric)
            err = 0.0
            for node, idx in readers.get(name, []) or [(None, -1)]:
                e2 = r2 = 0.0
                for env in envs:
                    xq = fake_quantize(env[name], qp)
                    if node is None:
                        ref, got = env[name], xq
                    else:
                        args = [None if v is None else (xq if k == idx else v.const if v.const is not None else env[v.name])
                                for k, v in enumerate(node.inputs)]
                        ref, got = env[node.outputs[0].name], run_node(graph, node, args)  # type: ignore[union-attr]
                    d = np.asarray(ref, np.float64) - got
                    e2 += float(np.vdot(d, d))
                    r2 += float(np.vdot(ref, ref))
                err += e2 / r2 if r2 > 0 else 0.0
            errors[m] = err
        best = min(errors, key=lambda m: (errors[m], RANGE_METHODS.index(m)))
        out.append(RangeChoice(name, best, errors))
    return out


def resolve_auto(graph: Graph, calib: Calibration, config: QuantConfig,
                 envs: Sequence[Mapping[str, np.ndarray]]) -> tuple[QuantConfig, list[RangeChoice]]:
    """``config`` with a method override for every tensor (explicit overrides kept)."""
    choices = choose_ranges(graph, calib, config, envs)
    chosen = {c.tensor: c.method for c in choices}
    for name in calib.stats:
        chosen.setdefault(name, "minmax")  # not judged (a body tensor, MinMax statistics): its extremes
    return replace(config, method_overrides={**chosen, **config.method_overrides}), choices
