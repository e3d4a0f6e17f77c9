"""``--output-ranges``: the ranges of the few tensors that hold most of the output noise, chosen
by the model's output error.

``--method auto`` (engine.quant.autorange) judges every tensor's range by the error of the ops
that read it, which is cheap but local: a clipped tail that a LayerNorm or a softmax downstream
depends on looks harmless at the next op. Here the judge is the model's outputs, and the cost is
bounded by judging only the tensors that matter:

1. the output-noise budget (engine.quant.budget) on a few decision samples ranks every quantized
   activation by the share of the output noise it causes alone;
2. for the WORST tensors with the largest shares (each at least MIN_SHARE), in that order, every
   candidate range the tensor's histogram gives (minmax, percentile 99.999 / 99.99 / 99.9, mse;
   ranges equal to the current one or to an earlier candidate skipped) is tried in the full int8
   model, every other tensor as chosen so far, and scored by the worst pooled output SQNR on the
   decision samples; the best candidate replaces the current range when it buys MIN_GAIN_DB.

Held-out samples take no part in a choice: the PTQ pipeline verifies the whole step on them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from engine.ir.graph import Graph
from engine.quant.budget import TensorNoise, noise_budget
from engine.quant.calibrate import Calibration
from engine.quant.config import QuantConfig
from engine.quant.observers import HistogramObserver
from engine.quant.params import type_limits
from engine.quant.qdq import build_qdq

CANDIDATES: tuple[tuple[str, float | None], ...] = (
    ("minmax", None), ("percentile", 99.999), ("percentile", 99.99), ("percentile", 99.9), ("mse", None))
"""The ranges each worst tensor may take (method, percentile)."""
WORST = 6
"""Tensors judged by the output error (the largest budget shares)."""
MIN_SHARE = 0.02
"""A tensor holding less of the output noise than this is not worth a judgement."""
BUDGET_SAMPLES = 1
"""Decision samples the noise budget is measured on (one FP32 run per tensor and sample)."""
MIN_GAIN_DB = 0.05


@dataclass
class RangeTrial:
    """One worst tensor: its budget share and what each candidate range scored."""

    tensor: str
    share: float
    alone_db: float
    before: str
    after: str
    scores_db: dict[str, float] = field(default_factory=dict)
    gain_db: float = 0.0

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"tensor": self.tensor, "noise_share": round(self.share, 4),
                "alone_sqnr_db": round(self.alone_db, 2) if np.isfinite(self.alone_db) else None,
                "from": self.before, "to": self.after, "gain_db": round(self.gain_db, 3),
                "tried_db": {k: round(v, 3) for k, v in self.scores_db.items()}}


def _label(method: str, pct: float | None) -> str:
    return f"{method} {pct:g}" if pct is not None else method


def _current(config: QuantConfig, tensor: str) -> tuple[str, float | None]:
    method = config.method_overrides.get(tensor, config.method)
    method = "minmax" if method == "auto" else method
    return method, (config.tensor_percentile(tensor) if method == "percentile" else None)


def _with(config: QuantConfig, tensor: str, method: str, pct: float | None) -> QuantConfig:
    pcts = {k: v for k, v in config.percentile_overrides.items() if k != tensor}
    if pct is not None:
        pcts[tensor] = pct
    return replace(config, method_overrides={**config.method_overrides, tensor: method}, percentile_overrides=pcts)


def choose_output_ranges(graph: Graph, calib: Calibration, config: QuantConfig,
                         samples: Sequence[Mapping[str, np.ndarray]], score: Callable[[QuantConfig], float],
                         start_db: float, check: Callable[[], None] | None = None
                         ) -> tuple[QuantConfig, float, list[RangeTrial], list[TensorNoise]]:
    """(config with the worst tensors' ranges chosen, its decision SQNR, the trials, the budget).
    ``score`` gives the decision SQNR of a config; ``start_db`` is ``config``'s."""
    hist = {k for k, o in calib.stats.items() if isinstance(o, HistogramObserver) and o.count}
    qm = build_qdq(graph, calib, config)
    budget = noise_budget(graph, qm, samples[:BUDGET_SAMPLES], tensors=sorted(hist), check=check)
    _, qmin, qmax = type_limits(config.dtype)
    nlevels = min(qmax - qmin + 1, 256) if config.dtype != "int16" else qmax - qmin + 1
    best, cfg, trials = start_db, config, []
    for row in [b for b in budget if b.share >= MIN_SHARE][:WORST]:
        obs = calib.stats[row.tensor]
        cur = _current(cfg, row.tensor)
        seen = {obs.range_for(cur[0], nlevels, cur[1] if cur[1] is not None else cfg.percentile)}
        trial = RangeTrial(row.tensor, row.share, row.alone_db, _label(*cur), _label(*cur))
        pick = None
        for method, pct in CANDIDATES:
            r = obs.range_for(method, nlevels, pct if pct is not None else cfg.percentile)
            if r in seen:
                continue
            seen.add(r)
            if check is not None:
                check()
            s = score(_with(cfg, row.tensor, method, pct))
            trial.scores_db[_label(method, pct)] = s
            if pick is None or s > pick[0]:
                pick = (s, method, pct)
        if pick is not None and pick[0] >= best + MIN_GAIN_DB:
            trial.after, trial.gain_db = _label(pick[1], pick[2]), pick[0] - best
            cfg, best = _with(cfg, row.tensor, pick[1], pick[2]), pick[0]
        trials.append(trial)
    return cfg, best, trials, budget
