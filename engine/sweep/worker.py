"""What a dask worker runs: calibration shards, their merge, and one sweep point.

Every function takes plain picklable data (a ModelSpec, a Point, observers) and loads the model
itself; the loaded and optimized graph is kept per worker process (``_prepared``), so the points
of one model on one worker optimize it once. A point runs optimize -> quantize -> simulate with
the same engine functions ``npu-studio compile`` uses.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from engine.ir.graph import Graph
from engine.quant.calibrate import Calibration
from engine.quant.data import CalibrationSet
from engine.quant.observers import Observer
from engine.sweep import shard
from engine.sweep.spec import ModelSpec, Point

INTEGER_PRECISIONS = ("int8", "uint8", "int16")
_prepared: dict[str, tuple[Graph, CalibrationSet, CalibrationSet | None]] = {}
_qdq: dict[str, Any] = {}  # point key -> its QDQ model, for the point's other evaluation shards
QDQ_CACHE = 4


def prepared(model: ModelSpec) -> tuple[Graph, CalibrationSet, CalibrationSet | None]:
    """(optimized graph, calibration data, eval data or None) of a model, loaded once per process."""
    hit = _prepared.get(model.key)
    if hit is not None:
        return hit
    import engine
    from engine.compiler import optimize_graph, require_static
    from engine.quant.data import load_calibration

    graph = engine.load(model.path, shapes=dict(model.shapes))
    require_static(graph)
    optimized, _, _ = optimize_graph(graph)
    calib = load_calibration(model.calib, optimized)
    if model.calib_samples:
        calib = calib.take(model.calib_samples)
    ev = load_calibration(model.eval, optimized) if model.eval else None
    _prepared[model.key] = (optimized, calib, ev)
    return _prepared[model.key]


def sizes(model: ModelSpec) -> tuple[int, int]:
    """(calibration samples, evaluation samples) the sweep uses for this model (loading it here
    also checks the model and its data: an error fails this model's points, not the sweep)."""
    _, calib, ev = prepared(model)
    return len(calib), min(model.eval_samples, len(ev if ev is not None else calib))


def minmax_shard(model: ModelSpec, start: int, stop: int) -> dict[str, Observer]:
    """Pass 1 of sharded calibration on samples [start, stop)."""
    graph, calib, _ = prepared(model)
    return shard.minmax_pass(graph, calib, start, stop)


def histogram_shard(model: ModelSpec, start: int, stop: int, ranges: dict[str, Observer]) -> dict[str, Observer]:
    """Pass 2 of sharded calibration on samples [start, stop)."""
    graph, calib, _ = prepared(model)
    return shard.histogram_pass(graph, calib, start, stop, ranges)


def merge(parts: list[dict[str, Observer]]) -> dict[str, Observer]:
    """Merge shard observers (exact)."""
    return shard.merge_stats(parts)


def finish_calibration(stats: dict[str, Observer], model: ModelSpec) -> Calibration:
    """The merged statistics as the Calibration quantization consumes."""
    _, calib, _ = prepared(model)
    return shard.to_calibration(stats, len(calib), calib.source)


def sram_peak_kib(sim: Any) -> float:
    """Peak on-chip SRAM of the activations the residency plan keeps between NPU ops, in KiB."""
    from engine.hw.cost_model import plan_residency

    pl = sim.placement
    facts = pl.facts
    npu = sim.target.npu
    resident = plan_residency(pl.order, pl.device, pl.partition_of, facts, npu.sram_bytes * npu.residency_fraction)
    pos = {f.name: i for i, f in enumerate(pl.order)}
    delta = [0.0] * (len(pl.order) + 2)
    for i, f in enumerate(pl.order):
        for v in f.outputs:
            if v.name in resident:
                b = float(facts.npu_bytes(v))
                last = max(pos[c.name] for c in facts.consumers(v))
                delta[i] += b
                delta[last + 1] -= b
    peak = live = 0.0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak / 1024.0


def _worst(outputs: dict) -> tuple[float, float]:
    return min(s.sqnr_db for s in outputs.values()), min(s.cosine for s in outputs.values())


def _config(point: Point, target: Any) -> Any:
    from engine.quant.config import QuantConfig

    q = point.quant
    cfg = QuantConfig(method=q.method, per_channel=q.per_channel, symmetric=q.symmetric, dtype=q.dtype)
    if target.npu.precision != cfg.dtype and cfg.dtype == "int8":  # as compile does
        cfg = dataclasses.replace(cfg, dtype=target.npu.precision)
    return cfg


def error_shard(point: Point, calibration: Calibration, start: int, stop: int) -> dict[str, Any]:
    """Output error statistics (ErrorStats per output: sums, mergeable) of one shard of the
    evaluation samples; the sweep splits a big held-out set over the workers this way."""
    from engine.quant.analysis import analyze
    from engine.quant.qdq import build_qdq

    graph, calib, ev = prepared(point.model)
    target = point.target.target()
    if target.npu.precision not in INTEGER_PRECISIONS:
        return {}
    data = shard.subset(ev if ev is not None else calib, start, stop)
    qm = _qdq.pop(point.key, None) or build_qdq(graph, calibration, _config(point, target))
    _qdq[point.key] = qm  # most recent last
    while len(_qdq) > QDQ_CACHE:
        _qdq.pop(next(iter(_qdq)))
    return analyze(graph, qm, data, stop - start, outputs_only=True).outputs


def merge_errors(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge error statistics of consecutive shards, in shard order (float sums: the same order
    gives the same bits whichever workers computed the shards)."""
    from engine.quant.analysis import ErrorStats

    out: dict[str, ErrorStats] = {}
    for part in parts:
        for name, st in part.items():
            acc = out.setdefault(name, ErrorStats())
            acc.ref2 += st.ref2
            acc.err2 += st.err2
            acc.q2 += st.q2
            acc.dot += st.dot
            acc.max_abs = max(acc.max_abs, st.max_abs)
    return out


def run_point(point: Point, calibration: Calibration, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Quantize and simulate one point; returns the measured fields of its results.csv row.

    ``errors``: the point's output error statistics computed in shards (``error_shard``); without
    them the error is measured here on the evaluation samples."""
    from engine.quant.analysis import analyze
    from engine.quant.qdq import build_qdq
    from engine.sim.timeline import simulate

    t0 = time.perf_counter()
    graph, calib, ev = prepared(point.model)
    target = point.target.target()
    q = point.quant
    from engine.passes.lower_npu import lowered_copy

    sim = simulate(lowered_copy(graph, target), target)  # placed as compile places it: lowered for the target
    latency = float(sim.latency_us)
    sqnr = cosine = None
    if target.npu.precision in INTEGER_PRECISIONS:
        cfg = _config(point, target)
        data = ev if ev is not None else calib
        n = point.model.eval_samples
        if errors is not None and q.target_sqnr is None:
            sqnr, cosine = _worst(merge_errors(errors))
        elif q.target_sqnr is None:
            qm = build_qdq(graph, calibration, cfg)
            sqnr, cosine = _worst(analyze(graph, qm, data, n, outputs_only=True).outputs)
        else:
            from engine.quant.mixed import auto_mixed_precision, latency_cost_from_sim

            qm = build_qdq(graph, calibration, cfg)
            full = analyze(graph, qm, data, n)
            ranking = [le.node for le in full.sensitivity()]
            mp = auto_mixed_precision(graph, data, cfg, calibration, ranking, target_sqnr_db=q.target_sqnr,
                                      samples=n, latency_cost=latency_cost_from_sim(sim, target))
            sqnr, cosine = mp.output_sqnr_db, mp.output_cosine
            latency += sum(s["latency_cost_us"] or 0.0 for s in mp.steps)
    s = sim.summary()
    return {"latency_us": round(latency, 3), "npu_ops": s["npu_ops"], "cpu_ops": s["cpu_ops"],
            "sram_peak_kib": round(sram_peak_kib(sim), 3),
            "output_sqnr_db": None if sqnr is None else round(float(sqnr), 4),
            "cosine": None if cosine is None else round(float(cosine), 6),
            "seconds": round(time.perf_counter() - t0, 3)}
