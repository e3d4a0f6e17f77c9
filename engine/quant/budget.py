"""The output-noise budget of a quantized model: what each quantized tensor costs at the outputs.

Each quantized activation (and, when asked, each weight) is fake-quantized *alone* in the FP32
model, with the parameters the QDQ model gives it, and the error that reaches the model's outputs
is measured against the FP32 outputs: its noise energy sum (y_q - y)^2 over the samples and every
output. A tensor's share is its energy over the sum of every tensor's energy, and its "alone" SQNR
is the output SQNR it would leave by itself. Noise from different tensors adds roughly in energy
(their rounding errors are nearly independent), so the sum of the energies is close to the full
int8 model's noise, and the shares say where the dB go: halving the noise of tensors holding half
the budget buys 1.25 dB, removing it entirely 3 dB.

The budget costs one FP32 run per tensor and sample (a run with the one tensor replaced by its
fake-quantized value where the executor produces it), so it is measured on a few samples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from engine.ir.graph import Graph
from engine.quant.params import QuantParams, fake_quantize
from engine.quant.qdq import QuantizedModel


@dataclass
class TensorNoise:
    """One tensor's part of the output noise."""

    tensor: str
    kind: str
    """activation or weight"""
    noise: float
    """sum of squared output errors it causes alone, over the samples and outputs"""
    signal: float
    """sum of squared FP32 outputs over the same samples"""
    share: float = 0.0

    @property
    def alone_db(self) -> float:
        """The output SQNR with only this tensor quantized."""
        return float("inf") if self.noise == 0 else 10.0 * float(np.log10(self.signal / self.noise))

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"tensor": self.tensor, "kind": self.kind, "noise_share": round(self.share, 4),
                "alone_sqnr_db": round(self.alone_db, 2) if np.isfinite(self.alone_db) else None}


def _energy(want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> float:
    return sum(float(np.square(want[k].astype(np.float64) - np.asarray(got[k], np.float64)).sum()) for k in want)


def noise_budget(fp_graph: Graph, qm: QuantizedModel, samples: Sequence[Mapping[str, np.ndarray]],
                 tensors: Sequence[str] | None = None, weights: bool = False,
                 check: Callable[[], None] | None = None) -> list[TensorNoise]:
    """Every quantized activation of ``qm`` (only ``tensors`` when given; with ``weights`` every
    quantized weight too) quantized alone in ``fp_graph``, largest noise first, shares summing to 1.
    ``fp_graph`` is the float graph ``qm`` was built from (tensor names shared)."""
    from engine import executor_for
    from engine.sim.executor import Executor
    from engine.sim.feeds import check_feeds

    feeds = [check_feeds(fp_graph, s) for s in samples]
    ex = executor_for(fp_graph)
    refs = [ex.run(f) for f in feeds]
    signal = sum(float(np.square(r[k].astype(np.float64)).sum()) for r in refs for k in r)
    acts: dict[str, QuantParams] = {n: qp for n, qp in qm.activations.items() if n in fp_graph.values
                                    and (tensors is None or n in tensors)}
    rows: list[TensorNoise] = []
    for name, qp in acts.items():
        if check is not None:
            check()

        def hook(node, outs, name=name, qp=qp) -> None:
            for v, arr in zip(node.outputs, outs):
                if v is not None and v.name == name and arr is not None:
                    ex.scope()[name] = fake_quantize(arr, qp)  # a new array: views of arr stay FP32

        noise = 0.0
        for f, want in zip(feeds, refs):
            got = ex.run({**f, name: fake_quantize(f[name], qp)}) if name in f else ex.run(f, hook=hook)
            noise += _energy(want, got)
        rows.append(TensorNoise(name, "activation", noise, signal))
    if weights:
        for name, qp in qm.weights.items():
            v = fp_graph.values.get(name)
            if v is None or v.const is None or v.graph is not fp_graph:
                continue
            if check is not None:
                check()
            old = v.const
            v.const = fake_quantize(np.asarray(old, np.float32), qp).astype(old.dtype)
            try:
                wex = Executor(fp_graph)  # a fresh plan: the cached one holds the FP32 constants
                noise = sum(_energy(want, wex.run(f)) for f, want in zip(feeds, refs))
            finally:
                v.const = old
            rows.append(TensorNoise(name, "weight", noise, signal))
    total = sum(r.noise for r in rows)
    for r in rows:
        r.share = r.noise / total if total > 0 else 0.0
    return sorted(rows, key=lambda r: -r.noise)
