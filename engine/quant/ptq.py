"""PTQ algorithms in one pipeline, each kept only where it measurably helps.

Order: cross-layer equalization (engine.quant.equalize), SmoothQuant (same module), the range
method of every tensor (engine.quant.autorange, ``--method auto``), the ranges of the tensors
holding most of the output noise by the output error (engine.quant.outrange), AdaRound weight rounding
(engine.quant.adaround), then empirical bias correction (engine.quant.bias_correction). Each step is measured: the worst pooled output SQNR
of the QDQ model against FP32 before and after it, on "decision" samples (calibration samples
spread over the set) and on held-out samples (the last quarter of the calibration set when it has at least 4
samples: a step is kept only if the held-out SQNR does not fall, but no choice between
candidates is made on them). Ranges are calibrated on every sample, held-out ones
included: a rare outlier in the last samples must be seen by the decisions that clip it, not
appear only in the final ranges. In ``auto`` mode a step is kept when it raises the decision
SQNR; ``on`` keeps it regardless; ``off`` skips it. Every step records what it changed and the
dB it bought in the quantize report (``"ptq"``).

CLE and SmoothQuant return a float graph that computes what the input graph computes (up to
float rounding): it is the reference the analysis compares with, so layer errors stay
meaningful. AdaRound and bias correction change only the graph that is quantized, never the
reference (bias correction measures its shifts against the reference's weights).
Memory stays flat in the number of samples: calibration keeps histograms, and the FP32 values
the decisions need are held for a fixed handful of samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from engine.errors import Cancelled
from engine.ir.graph import Graph
from engine.quant.calibrate import Calibration, calibrate
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.qdq import build_qdq

DECISION_SAMPLES = 8
"""Samples each decision is scored on, spread evenly over the calibration part (PP-OCRv6 rec's
first 8 text crops scored minmax 17.7 dB and percentile 99.999 17.2, every third crop 14.9 and
15.7, all 24 15.7 and 16.7, held-out crops 12.7 and 13.8: the first ones were the easy ones)."""
VALUE_SAMPLES = 4
"""Samples whose every FP32 tensor is held, for per-tensor range choices and bias shifts."""
HELDOUT_SAMPLES = 8
MIN_GAIN_DB = 0.05
"""A step must buy at least this much on the decision samples to be kept in auto mode."""
SMOOTH_ALPHAS = (0.25, 0.5, 0.75)
EQUALIZE_ALPHAS = (0.5, 1.0)
"""Activation equalization strengths the CLE step weighs beside the weight-balanced scaling."""
RANGE_SAMPLES = 2
"""Samples the per-tensor range proposals are judged on (each runs every consumer per method)."""
RANGE_CHUNKS = 6
TAIL_PERCENTILES = (99.999,)
"""Percentiles ``--method auto`` also tries on every tensor at once, beside ``--percentile``."""
"""Proposals are tried in this many groups, each kept only if the output SQNR rises."""

Stage = Callable[[str, int, int], None]


@dataclass
class PTQStep:
    """One algorithm's outcome."""

    algorithm: str
    mode: str
    applied: bool
    changed: list | dict
    calib_db: tuple[float, float]
    """Worst output SQNR (dB) on the decision samples without and with the step."""
    heldout_db: tuple[float, float] | None
    seconds: float
    note: str = ""
    detail: dict | None = None
    """What the step chose between, when it weighed alternatives (report ``detail``)."""

    @property
    def gain_db(self) -> float:
        """dB the step bought on the decision samples."""
        return self.calib_db[1] - self.calib_db[0]

    def to_json(self) -> dict:
        """The report entry."""
        doc = {"algorithm": self.algorithm, "mode": self.mode, "applied": self.applied,
               "changed": self.changed,
               "calib_sqnr_db": {"before": round(self.calib_db[0], 3), "after": round(self.calib_db[1], 3),
                                 "gain": round(self.gain_db, 3)},
               "heldout_sqnr_db": None if self.heldout_db is None else {
                   "before": round(self.heldout_db[0], 3), "after": round(self.heldout_db[1], 3),
                   "gain": round(self.heldout_db[1] - self.heldout_db[0], 3)},
               "seconds": round(self.seconds, 3)}
        if self.note:
            doc["note"] = self.note
        if self.detail:
            doc["detail"] = self.detail
        return doc


@dataclass
class Prepared:
    """What the pipeline hands to build_qdq and to the analysis."""

    reference: Graph
    build: Graph
    calibration: Calibration
    config: QuantConfig
    steps: list[PTQStep] = field(default_factory=list)
    calib_samples: int = 0
    """Samples decisions may be scored on (the held-out ones excluded)."""
    heldout_samples: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        """The report's ``"ptq"`` document."""
        return {"calibration_samples": self.calib_samples, "heldout_samples": self.heldout_samples,
                "decision_samples": min(self.calib_samples, DECISION_SAMPLES),
                "seconds": round(self.seconds, 3), "steps": [s.to_json() for s in self.steps]}


def wants_pipeline(config: QuantConfig) -> bool:
    """True when any PTQ algorithm may run."""
    return config.method == "auto" or any(m != "off" for m in (config.cle, config.smoothquant, config.adaround,
                                                               config.bias_correction, config.output_ranges))


def decision_indices(usable: int) -> list[int]:
    """Indices of the decision samples among the ``usable`` calibration samples: DECISION_SAMPLES
    of them (all when fewer) evenly spaced from the first to the last."""
    k = min(usable, DECISION_SAMPLES)
    return sorted({int(x) for x in np.rint(np.linspace(0, usable - 1, k))}) if k else []


def split(data: CalibrationSet) -> tuple[int, list[dict[str, np.ndarray]]]:
    """(number of samples decisions may use, held-out samples): the last quarter (at most
    HELDOUT_SAMPLES of it) is held out when there are >= 4 samples."""
    n = len(data)
    hold = n // 4 if n >= 4 else 0
    return n - hold, [data.sample(i) for i in range(n - hold, n)][:HELDOUT_SAMPLES]


def _fp_values(graph: Graph, samples: list[dict[str, np.ndarray]]) -> list[Mapping[str, np.ndarray]]:
    from engine import executor_for
    from engine.sim.feeds import check_feeds

    ex = executor_for(graph)
    return [ex.run(check_feeds(graph, s), keep_all=True) for s in samples]


class _Pipeline:
    def __init__(self, graph: Graph, data: CalibrationSet, config: QuantConfig, stage: Stage | None,
                 cancel: Callable[[], bool] | None) -> None:
        self.calib_data = data
        self.usable, self.heldout = split(data)
        self.decide = [data.sample(i) for i in decision_indices(self.usable)]
        self.config = config
        self.stage = stage
        self.cancel = cancel
        # Provisional ranges while CLE/SmoothQuant are judged: the explicit method, or minmax.
        self.provisional = config if config.method != "auto" else replace(config, method="minmax")
        self.graph = graph
        self.calib = self.calibrate(graph)
        self.ref_outputs: dict[tuple[int, bool], tuple[Graph, list]] = {}

    def check(self) -> None:
        if self.cancel is not None and self.cancel():
            raise Cancelled("quantization cancelled")

    def calibrate(self, graph: Graph, tensors: list[str] | None = None) -> Calibration:
        self.check()
        prog = (lambda d, t: self.stage("calibrate", d, t)) if self.stage else None  # type: ignore[misc]
        return calibrate(graph, self.calib_data, self.provisional, tensors=tensors, histograms=True,
                         progress=prog, cancel=self.cancel)

    def outputs(self, ref: Graph, held: bool) -> list[dict[str, np.ndarray]]:
        """FP32 outputs of ``ref`` on the decision (or held-out) samples, computed once per graph."""
        from engine import executor_for
        from engine.sim.feeds import check_feeds

        key = (id(ref), held)
        if key not in self.ref_outputs or self.ref_outputs[key][0] is not ref:
            ex = executor_for(ref)
            self.ref_outputs[key] = (ref, [ex.run(check_feeds(ref, f)) for f in (self.heldout if held else self.decide)])
        return self.ref_outputs[key][1]

    def score(self, ref: Graph, build: Graph, calib: Calibration, config: QuantConfig, held: bool = False) -> float:
        """Worst pooled output SQNR (dB) of the QDQ model of ``build`` against ``ref``."""
        from engine import executor_for
        from engine.quant.analysis import ErrorStats
        from engine.sim.feeds import check_feeds

        self.check()
        samples = self.heldout if held else self.decide
        if not samples:
            return float("nan")
        qm = build_qdq(build, calib, config)
        ex = executor_for(qm.graph)
        stats: dict[str, ErrorStats] = {}
        for feeds, want in zip(samples, self.outputs(ref, held)):
            got = ex.run(check_feeds(qm.graph, feeds))
            for name, r in want.items():
                stats.setdefault(name, ErrorStats()).update(r, got[name])
        return min(st.sqnr_db for st in stats.values())

    def scores(self, ref: Graph, build: Graph, calib: Calibration, config: QuantConfig) -> tuple[float, float | None]:
        """(decision SQNR, held-out SQNR or None without held-out samples)."""
        dec = self.score(ref, build, calib, config)
        return dec, (self.score(ref, build, calib, config, held=True) if self.heldout else None)

    @staticmethod
    def pair(before: tuple[float, float | None], after: tuple[float, float | None]):
        held = None if before[1] is None or after[1] is None else (before[1], after[1])
        return (before[0], after[0]), held

    def keep(self, mode: str, before: tuple[float, float | None], after: tuple[float, float | None]) -> bool:
        """``on``: always; ``auto``: the decision SQNR rises and the held-out one does not fall."""
        if mode == "on":
            return True
        verified = before[1] is None or after[1] is None or after[1] >= before[1]
        return after[0] >= before[0] + MIN_GAIN_DB and verified


def prepare(graph: Graph, data: CalibrationSet, config: QuantConfig, progress: Stage | None = None,
            cancel: Callable[[], bool] | None = None) -> Prepared:
    """Run the PTQ pipeline that ``config`` asks for; see the module docstring."""
    t_all = time.perf_counter()
    p = _Pipeline(graph, data, config, progress, cancel)
    steps: list[PTQStep] = []
    cur = p.scores(p.graph, p.graph, p.calib, p.provisional)
    if config.cle != "off":
        cur = _cle_step(p, steps, cur)
    if config.smoothquant != "off":
        cur = _smooth_step(p, steps, cur)
    values = _fp_values(p.graph, p.decide[:VALUE_SAMPLES])
    cfg = p.provisional
    if config.method == "auto":
        cfg, cur = _range_step(p, steps, cur, values)
    if config.output_ranges != "off":
        cfg, cur = _output_range_step(p, steps, cur, cfg)
    build = p.graph
    if config.adaround != "off":
        build, cur = _adaround_step(p, steps, cur, cfg)
    if config.bias_correction != "off":
        build, cur = _bias_step(p, steps, cur, cfg, values, build)
    del values
    return Prepared(p.graph, build, p.calib, cfg, steps, p.usable, len(p.heldout),
                    time.perf_counter() - t_all)


def _cle_step(p: _Pipeline, steps: list[PTQStep], cur):
    """Weight-balanced CLE and activation equalization (alpha in EQUALIZE_ALPHAS) of the same
    pairs, each calibrated and scored on the decision samples; the best is verified."""
    from engine.quant.equalize import (
        channel_absmax_axis1,
        cle_pairs,
        equalize,
        equalize_activations,
    )

    t = time.perf_counter()
    found = cle_pairs(p.graph)
    if not found:
        steps.append(PTQStep("cle", p.config.cle, False, [], (cur[0], cur[0]), None, time.perf_counter() - t,
                             "no Conv -> [ReLU] -> Conv chain to equalize"))
        return cur
    amax = channel_absmax_axis1(_fp_values(p.graph, p.decide[:VALUE_SAMPLES]),
                                [a.outputs[0].name for a, _ in found])  # type: ignore[union-attr]
    candidates = {"weights": equalize(p.graph)}
    for alpha in EQUALIZE_ALPHAS:
        candidates[f"activations {alpha:g}"] = equalize_activations(p.graph, amax, alpha)
    def scaled(label: str, cand: tuple) -> tuple | None:
        g, pairs = cand
        if not pairs:
            return None
        cal = p.calibrate(g)
        return p.score(g, g, cal, p.provisional), label, g, cal, pairs

    (dec, label, g, cal, pairs), tried = _best_candidate(candidates.items(), scaled)
    new = (dec, p.score(g, g, cal, p.provisional, held=True) if p.heldout else None)
    kept = p.keep(p.config.cle, cur, new)
    calib_db, held = p.pair(cur, new)
    steps.append(PTQStep("cle", p.config.cle, kept, [x.to_json() for x in pairs], calib_db, held,
                         time.perf_counter() - t, detail={"scaling": label, "decision_sqnr_db": tried}))
    if kept:
        p.graph, p.calib = g, cal
        return new
    return cur


def _best_candidate(candidates, evaluate) -> tuple[tuple, dict]:
    """(the best evaluation, decision SQNR by label) over (label, candidate) pairs: ``evaluate``
    returns (decision SQNR, ...) or None for a candidate that does not apply."""
    tried: dict = {}
    best: tuple | None = None
    for label, cand in candidates:
        r = evaluate(label, cand)
        if r is None:
            continue
        tried[label] = round(r[0], 3)
        if best is None or r[0] > best[0]:
            best = r
    assert best is not None
    return best, tried


def _smooth_step(p: _Pipeline, steps: list[PTQStep], cur):
    from engine.quant.equalize import channel_absmax, smooth, smooth_scales, smooth_sites

    t = time.perf_counter()
    sites = smooth_sites(p.graph)
    if not sites:
        steps.append(PTQStep("smoothquant", p.config.smoothquant, False, [], (cur[0], cur[0]), None,
                             time.perf_counter() - t, "no LayerNormalization feeding MatMul/Gemm only"))
        return cur
    outs = [n.outputs[0].name for n, _ in sites]  # type: ignore[union-attr]
    amax = channel_absmax(_fp_values(p.graph, p.decide[:VALUE_SAMPLES]), outs)
    scales = {a: smooth_scales(p.graph, amax, a) for a in SMOOTH_ALPHAS}
    stats = _observe_scaled(p, scales)
    def smoothed(alpha: float, _cand: None) -> tuple:
        g, pairs = smooth(p.graph, scales[alpha], alpha, amax)
        cal = Calibration({**p.calib.stats, **stats[alpha]}, p.calib.samples, p.calib.source, True)
        return p.score(g, g, cal, p.provisional), g, cal, pairs, alpha

    (dec, g, cal, pairs, alpha), tried = _best_candidate(((a, None) for a in SMOOTH_ALPHAS), smoothed)
    score = (dec, p.score(g, g, cal, p.provisional, held=True) if p.heldout else None)
    kept = p.keep(p.config.smoothquant, cur, score)
    calib_db, held = p.pair(cur, score)
    steps.append(PTQStep("smoothquant", p.config.smoothquant, kept,
                         {"alpha": alpha, "alphas_tried": tried, "sites": [x.to_json() for x in pairs]},
                         calib_db, held, time.perf_counter() - t))
    if kept:
        p.graph, p.calib = g, cal
        return score
    return cur


def _observe_scaled(p: _Pipeline, scales: dict[float, dict[str, np.ndarray]]) -> dict[float, dict]:
    """Histograms of every norm output divided by each alpha's s, from one pass over the
    calibration samples (x / s is what the smoothed graph computes there)."""
    from engine import executor_for
    from engine.quant.observers import HistogramObserver
    from engine.sim.feeds import check_feeds

    obs = {a: {k: HistogramObserver(p.config.bins) for k in sc} for a, sc in scales.items()}
    wanted = {k for sc in scales.values() for k in sc}

    def hook(node, outs) -> None:
        for v, arr in zip(node.outputs, outs):
            if v is not None and v.name in wanted and arr is not None:
                for a, sc in scales.items():
                    obs[a][v.name].update((arr / sc[v.name]).astype(np.float32))

    ex = executor_for(p.graph)
    for i in range(len(p.calib_data)):
        p.check()
        ex.run(check_feeds(p.graph, p.calib_data.sample(i)), hook=hook)
    return obs


def _range_step(p: _Pipeline, steps: list[PTQStep], cur, values):
    """Uniform methods first (the best one is the start), then the per-tensor proposals of
    engine.quant.autorange accepted chunk by chunk (topological order) where the output SQNR
    on the decision samples rises: never worse than the best single method on those samples.
    The uniform candidates are minmax, percentile at ``--percentile``, percentile at each of
    TAIL_PERCENTILES (a tail clipped 10x finer: PP-OCRv6 rec measured +1.1 dB on held-out crops
    at 99.999 where 99.99 clipped its softmax logits to ruin) and mse."""
    from engine.quant.autorange import RANGE_METHODS, choose_ranges

    t = time.perf_counter()
    fixed = p.config.method_overrides
    names = _topological_tensors(p.graph, p.calib)

    def with_methods(methods: dict[str, str], pcts: dict[str, float]) -> QuantConfig:
        return replace(p.config, method="auto", method_overrides={**methods, **fixed},
                       percentile_overrides={**pcts, **p.config.percentile_overrides})

    uniform: dict[str, tuple[dict[str, str], dict[str, float]]] = {m: ({k: m for k in names}, {})
                                                                    for m in RANGE_METHODS}
    for pct in TAIL_PERCENTILES:
        if pct != p.config.percentile:
            uniform[f"percentile {pct:g}"] = ({k: "percentile" for k in names}, dict.fromkeys(names, pct))
    scored = {m: p.score(p.graph, p.graph, p.calib, with_methods(*u)) for m, u in uniform.items()}
    start = max(uniform, key=lambda m: scored[m])
    methods, pcts = dict(uniform[start][0]), dict(uniform[start][1])
    best = scored[start]
    proposals = {c.tensor: c.method for c in choose_ranges(p.graph, p.calib, p.config, values[:RANGE_SAMPLES])}
    differ = [k for k in names if proposals.get(k, methods[k]) != methods[k]]
    accepted = 0
    size = max(1, -(-len(differ) // RANGE_CHUNKS))
    chunks = [differ[i:i + size] for i in range(0, len(differ), size)]
    for chunk in chunks:
        trial = {**methods, **{k: proposals[k] for k in chunk}}
        trial_pcts = {k: v for k, v in pcts.items() if k not in chunk}  # a proposal's percentile is --percentile
        score = p.score(p.graph, p.graph, p.calib, with_methods(trial, trial_pcts))
        if score >= best + MIN_GAIN_DB:
            methods, pcts, best, accepted = trial, trial_pcts, score, accepted + len(chunk)
    # the per-tensor refinement is verified against its uniform start like any step: it must not
    # lower the held-out SQNR (PP-OCRv6 rec: decision 17.1 -> 21.0 dB, held-out crops 13.8 -> 13.3)
    refined_held = p.score(p.graph, p.graph, p.calib, with_methods(methods, pcts), held=True) if p.heldout else None
    start_held, refinement = None, "accepted" if accepted else "none"
    if accepted and refined_held is not None:
        start_held = p.score(p.graph, p.graph, p.calib, with_methods(*uniform[start]), held=True)
        if refined_held < start_held:
            refinement = f"reverted: held-out {refined_held:.2f} dB < {start_held:.2f} dB of the start"
            (methods, pcts), best, accepted, refined_held = (
                (dict(uniform[start][0]), dict(uniform[start][1])), scored[start], 0, start_held)
    # cur is minmax on every tensor (the provisional ranges): the choice must beat it on the
    # decision samples and hold on the held-out ones, else every tensor keeps minmax
    chosen = (best, refined_held)
    kept = p.keep("auto", cur, chosen)
    if not kept and accepted and start != "minmax":  # the per-tensor refinement did not hold: the best uniform?
        (methods, pcts), accepted = (dict(uniform[start][0]), dict(uniform[start][1])), 0
        chosen = (scored[start], start_held if start_held is not None else
                  p.score(p.graph, p.graph, p.calib, with_methods(methods, pcts), held=True) if p.heldout else None)
        kept = p.keep("auto", cur, chosen)
    counts: dict[str, int] = {}
    for k, m in methods.items():
        label = f"percentile {pcts[k]:g}" if m == "percentile" and k in pcts else m
        counts[label] = counts.get(label, 0) + 1
    calib_db, held = p.pair(cur, chosen)
    steps.append(PTQStep("auto_range", "auto", kept,
                         {"start": start, "proposed_changes": len(differ), "accepted_changes": accepted,
                          "refinement": refinement,
                          "per_tensor_methods": dict(sorted(counts.items())),
                          "uniform_sqnr_db": {k: round(v, 3) for k, v in scored.items()}},
                         calib_db, held, time.perf_counter() - t,
                         "gain is against minmax on every tensor" + ("" if kept else "; not verified: minmax kept")))
    if not kept:
        return with_methods(*uniform["minmax"]), cur
    return with_methods(methods, pcts), chosen


def _output_range_step(p: _Pipeline, steps: list[PTQStep], cur, cfg: QuantConfig):
    """The worst tensors' ranges by the output error (engine.quant.outrange), decided on the
    decision samples, verified on the held-out ones."""
    from engine.quant.outrange import BUDGET_SAMPLES, WORST, choose_output_ranges

    t = time.perf_counter()
    chosen, dec, trials, budget = choose_output_ranges(
        p.graph, p.calib, cfg, p.decide, lambda c: p.score(p.graph, p.graph, p.calib, c), cur[0], p.check)
    changed = {"budget_samples": min(len(p.decide), BUDGET_SAMPLES), "tensors_in_budget": len(budget),
               "worst_share": round(sum(b.share for b in budget[:WORST]), 4),
               "tensors": [tr.to_json() for tr in trials]}
    moved = [tr for tr in trials if tr.after != tr.before]
    if not moved:
        steps.append(PTQStep("output_ranges", p.config.output_ranges, False, changed, (cur[0], cur[0]), None,
                             time.perf_counter() - t, "no candidate range raised the decision SQNR"))
        return cfg, cur
    new = (dec, p.score(p.graph, p.graph, p.calib, chosen, held=True) if p.heldout else None)
    kept = p.keep(p.config.output_ranges, cur, new)
    calib_db, held = p.pair(cur, new)
    steps.append(PTQStep("output_ranges", p.config.output_ranges, kept, changed, calib_db, held,
                         time.perf_counter() - t, "" if kept else "not verified on the held-out samples: ranges kept"))
    return (chosen, new) if kept else (cfg, cur)


def _topological_tensors(graph: Graph, calib: Calibration) -> list[str]:
    order: dict[str, None] = {v.name: None for v in graph.inputs if v.name in calib.stats}
    for n in graph.toposort():
        for v in (*n.inputs, *n.outputs):
            if v is not None and v.name in calib.stats:
                order[v.name] = None
    for k in calib.stats:
        order[k] = None
    return list(order)


def _adaround_step(p: _Pipeline, steps: list[PTQStep], cur, cfg: QuantConfig):
    """AdaRound on the calibration samples decisions may use (the held-out ones verify it)."""
    from engine.quant.adaround import adaround

    t = time.perf_counter()
    qm = build_qdq(p.graph, p.calib, cfg)
    samples = (p.calib_data.sample(i) for i in range(p.usable))
    build, layers = adaround(p.graph, qm, samples, cfg.reduce_range, p.check)
    done = [r for r in layers if r.applied]
    if not done:
        steps.append(PTQStep("adaround", p.config.adaround, False, [r.to_json() for r in layers], (cur[0], cur[0]),
                             None, time.perf_counter() - t, "no layer's output error fell below nearest rounding's"))
        return p.graph, cur
    new = p.scores(p.graph, build, p.calib, cfg)
    kept = p.keep(p.config.adaround, cur, new)
    calib_db, held = p.pair(cur, new)
    top = sorted(done, key=lambda r: r.nearest_db - r.adaround_db)
    steps.append(PTQStep("adaround", p.config.adaround, kept,
                         {"layers": len(done), "layers_considered": len(layers),
                          "weights_flipped": sum(r.flipped for r in done),
                          "weights": sum(r.weights for r in done),
                          "largest": [r.to_json() for r in top[:5]]},
                         calib_db, held, time.perf_counter() - t))
    return (build, new) if kept else (p.graph, cur)


def _bias_step(p: _Pipeline, steps: list[PTQStep], cur, cfg: QuantConfig, values, build: Graph):
    """Bias correction with each op's full shift (input, weights and bias quantized) and with its
    weights' shift alone, the better on the decision samples verified on the held-out ones."""
    from engine.quant.bias_correction import correct_biases

    t = time.perf_counter()
    tried: dict[str, float] = {}
    best = None
    for label, weights_only in (("op", False), ("weights", True)):
        corrected, shifts = correct_biases(build, p.calib, cfg, values, reference=p.graph, weights_only=weights_only)
        if not shifts:
            steps.append(PTQStep("bias_correction", p.config.bias_correction, False, [], (cur[0], cur[0]), None,
                                 time.perf_counter() - t, "no quantized Conv/Gemm without a fused activation"))
            return build, cur
        dec = p.score(p.graph, corrected, p.calib, cfg)
        tried[label] = round(dec, 3)
        if best is None or dec > best[0]:
            best = (dec, label, corrected, shifts)
    assert best is not None
    dec, label, corrected, shifts = best
    new = (dec, p.score(p.graph, corrected, p.calib, cfg, held=True) if p.heldout else None)
    kept = p.keep(p.config.bias_correction, cur, new)
    calib_db, held = p.pair(cur, new)
    top = sorted(shifts, key=lambda s: -s.relative_shift)
    steps.append(PTQStep("bias_correction", p.config.bias_correction, kept,
                         {"nodes": len(shifts), "largest": [s.to_json() for s in top[:5]]},
                         calib_db, held, time.perf_counter() - t,
                         detail={"shift": label, "decision_sqnr_db": tried}))
    return (corrected, new) if kept else (build, cur)
