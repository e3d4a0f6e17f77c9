"""Mixed precision: which layers to raise to int16/FP16 to reach a target output quality.

The search is greedy over the isolated-sensitivity ranking (least isolated SQNR first): raise the
next most sensitive layer, re-measure the outputs, stop as soon as the target holds. Calibration
statistics are reused, so each step costs one QDQ build and a few forward passes. A latency hook
(from the simulator) prices each raise; without it the cost is reported as None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.ir.graph import Graph
from engine.quant.analysis import ErrorStats, analyze
from engine.quant.calibrate import Calibration
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.qdq import build_qdq

LatencyCost = Callable[[str, str], float]
"""(node name, precision) -> extra latency in microseconds of running that node at that precision."""


@dataclass
class Candidate:
    """Raising one layer: the output SQNR gain and the latency it costs."""

    node: str
    precision: str
    gain_db: float
    latency_cost_us: float | None

    def to_json(self) -> dict:
        """JSON-ready."""
        return {"node": self.node, "precision": self.precision, "gain_db": round(self.gain_db, 3),
                "latency_cost_us": None if self.latency_cost_us is None else round(self.latency_cost_us, 3)}


@dataclass
class MixedPrecisionResult:
    """The chosen configuration and the raises that led to it, in order."""

    config: QuantConfig
    steps: list[dict] = field(default_factory=list)
    reached: bool = False
    output_sqnr_db: float = 0.0
    output_cosine: float = 0.0
    target_sqnr_db: float | None = None
    target_cosine: float | None = None
    start_sqnr_db: float = 0.0
    base_latency_us: float | None = None  # the simulated latency of the model before any raise
    # filled by the search (engine.quant.search): what it measured and why it stopped
    choices: list[str] = field(default_factory=list)
    samples: dict[str, int] = field(default_factory=dict)
    check_samples: list[int] = field(default_factory=list)  # indices in the calibration set
    check_pictures: list[str] | None = None  # the picture of each, when the set names them (an image folder)
    tensors: list[dict] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)
    pruned: list[dict] = field(default_factory=list)
    blocking: list[dict] = field(default_factory=list)
    stopped: str = ""
    seconds: float | None = None
    search_sqnr_db: float | None = None
    search_bound_db: float | None = None  # what new samples reach nine times in ten, from the search's
    check_bound_db: float | None = None  # the same bound from the check samples: what "reached" needs
    phases: list[dict] = field(default_factory=list)  # [{"phase", "seconds"}] of the search, in order
    measurements: dict[str, int] = field(default_factory=dict)  # configurations measured / simulated
    sensitivity_measured: list[int] = field(default_factory=list)

    def target_text(self) -> str:
        """The target as the user gave it (``30 dB``, ``cosine 0.999``)."""
        parts = [f"{self.target_sqnr_db:g} dB"] if self.target_sqnr_db is not None else []
        parts += [f"cosine {self.target_cosine:g}"] if self.target_cosine is not None else []
        return " and ".join(parts)

    def warning(self) -> str | None:
        """The one line that says the target was not reached (None when it was): the best figure
        kept and the layers that still hold the most output noise."""
        if self.reached:
            return None
        why = {"time budget": "within the time budget", "no candidate left": "with every candidate tried"}
        lat = self.to_json()["latency_us"]
        marginal = ""
        if self.check_bound_db is not None and (self.target_sqnr_db is None or self.output_sqnr_db >= self.target_sqnr_db) \
                and (self.target_cosine is None or self.output_cosine >= self.target_cosine):
            # the check samples reach it, but not by the margin their spread says new samples need
            marginal = " with the margin new samples need" + (
                f" (bound {self.check_bound_db:.2f} dB)" if self.target_sqnr_db is not None else "")
        line = (f"target {self.target_text()} not reached{marginal} {why.get(self.stopped, '')}".rstrip()
                + f"; kept the best model: held-out output SQNR {self.output_sqnr_db:.2f} dB "
                f"(int8 {self.start_sqnr_db:.2f} dB) with {len(self.steps)} raise(s)")
        if lat is not None:
            line += f", latency {lat['int8']:.0f} -> {lat['final']:.0f} us"
        if self.blocking:
            line += "; blocking: " + ", ".join(
                f"{b['node']} ({b['kind']}, {100 * b['noise_share']:.0f}% of the int8 output noise)"
                if "noise_share" in b else f"{b['node']} ({b['kind']}, {b['isolated_sqnr_db']:.1f} dB alone, "
                "not measured in time)" for b in self.blocking)
        elif self.steps:
            line += ("; every group that helps is raised: the rest is what new samples lose outside the "
                     "calibrated ranges (calibrate on more varied data)")
        return line

    def to_json(self) -> dict:
        """The quantize report's ``mixed_precision`` document (CONTRACTS.md): each raise with the
        precision it came from and went to, its latency cost and the output dB it bought."""
        raised, prev = [], self.start_sqnr_db
        for st in self.steps:
            delta = st["latency_cost_us"]
            raised.append({"node": st["node"], "from": st["from"], "to": st["precision"],
                           "latency_us_delta": None if delta is None else round(delta, 3),
                           "db_gain": round(st["output_sqnr_db"] - prev, 3),
                           "output_sqnr_db": st["output_sqnr_db"], "output_cosine": st["output_cosine"],
                           **({"nodes": st["nodes"], "kind": st["kind"]} if "nodes" in st else {})})
            prev = st["output_sqnr_db"]
        latency = None
        if self.base_latency_us is not None:
            extra = sum(st["latency_cost_us"] or 0.0 for st in self.steps)
            latency = {"int8": round(self.base_latency_us, 3),  # the model before any raise
                       "final": round(self.base_latency_us + extra, 3)}
        doc = {"target_sqnr_db": self.target_sqnr_db, "target_cosine": self.target_cosine,
               "reached": self.reached, "output_sqnr_db": round(self.output_sqnr_db, 3),
               "output_cosine": round(self.output_cosine, 6), "start_sqnr_db": round(self.start_sqnr_db, 3),
               "raised": raised, "latency_us": latency}
        if self.stopped:  # a search: how it measured, what it refused and why it stopped
            doc.update({"stopped": self.stopped, "choices": self.choices, "samples": self.samples,
                        "check_samples": self.check_samples, "check_pictures": self.check_pictures,
                        "search_sqnr_db": None if self.search_sqnr_db is None else round(self.search_sqnr_db, 3),
                        "search_bound_db": None if self.search_bound_db is None else round(self.search_bound_db, 3),
                        "check_bound_db": None if self.check_bound_db is None else round(self.check_bound_db, 3),
                        "seconds": None if self.seconds is None else round(self.seconds, 2),
                        "phases": self.phases, "measurements": self.measurements,
                        "sensitivity_measured": self.sensitivity_measured, "groups": self.groups,
                        "tensors": self.tensors, "refused": self.refused, "pruned": self.pruned,
                        "blocking": self.blocking})
        return doc


def _worst(outputs: dict[str, ErrorStats]) -> tuple[float, float]:
    return min(s.sqnr_db for s in outputs.values()), min(s.cosine for s in outputs.values())


def output_quality(graph: Graph, data: CalibrationSet, config: QuantConfig, calibration: Calibration,
                   samples: int = 8) -> tuple[float, float]:
    """(worst output SQNR dB, worst output cosine) of the model quantized with ``config``."""
    qm = build_qdq(graph, calibration, config)
    return _worst(analyze(graph, qm, data, samples, outputs_only=True).outputs)


def candidate_gains(graph: Graph, data: CalibrationSet, config: QuantConfig, calibration: Calibration,
                    nodes: list[str], precision: str = "int16", samples: int = 8,
                    latency_cost: LatencyCost | None = None, base_sqnr_db: float | None = None,
                    progress: Callable[[int, int, str], None] | None = None) -> list[Candidate]:
    """For each node, the output SQNR gained by raising it alone to ``precision``.

    ``base_sqnr_db``: the output SQNR of ``config`` when the caller measured it already;
    ``progress(done, total, node)`` is called before each node (it may raise to stop)."""
    base = base_sqnr_db if base_sqnr_db is not None else output_quality(graph, data, config, calibration, samples)[0]
    out = []
    for k, n in enumerate(nodes):
        if progress is not None:
            progress(k, len(nodes), n)
        sq, _ = output_quality(graph, data, config.with_precision(n, precision), calibration, samples)
        out.append(Candidate(n, precision, sq - base, latency_cost(n, precision) if latency_cost else None))
    return out


def auto_mixed_precision(graph: Graph, data: CalibrationSet, config: QuantConfig, calibration: Calibration,
                         ranking: list[str], target_sqnr_db: float | None = None,
                         target_cosine: float | None = None, precision: str = "int16", samples: int = 8,
                         latency_cost: LatencyCost | None = None, max_raises: int | None = None) -> MixedPrecisionResult:
    """Raise layers in ``ranking`` order until the outputs reach the target SQNR and/or cosine."""
    if target_sqnr_db is None and target_cosine is None:
        raise ValueError("give a target output SQNR (dB) or cosine")

    def ok(sq: float, cos: float) -> bool:
        return (target_sqnr_db is None or sq >= target_sqnr_db) and (target_cosine is None or cos >= target_cosine)

    sq, cos = output_quality(graph, data, config, calibration, samples)
    result = MixedPrecisionResult(config, [], ok(sq, cos), sq, cos, target_sqnr_db, target_cosine, sq)
    limit = len(ranking) if max_raises is None else min(max_raises, len(ranking))
    for node in ranking[:limit]:
        if result.reached:
            break
        start = config.node_precision(node)
        config = config.with_precision(node, precision)
        sq, cos = output_quality(graph, data, config, calibration, samples)
        result.steps.append({"node": node, "from": start, "precision": precision, "output_sqnr_db": round(sq, 3),
                             "output_cosine": round(cos, 6),
                             "latency_cost_us": latency_cost(node, precision) if latency_cost else None})
        result.config, result.output_sqnr_db, result.output_cosine = config, sq, cos
        result.reached = ok(sq, cos)
    return result


_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "fp16": 2, "bf16": 2, "fp32": 4}


def latency_cost_from_sim(sim, target) -> LatencyCost:
    """A LatencyCost from a simulation at the target's precision: raising a node to a wider type
    scales its compute time by the MAC-rate ratio and its memory time by the element-size ratio
    (a node the target cannot run at that precision falls back: cost = its CPU estimate)."""
    by_node = {o.node: o for o in sim.ops}
    base = target.npu.precision
    rates = target.npu.precisions

    def cost(node: str, precision: str) -> float:
        rec = by_node.get(node)
        if rec is None or rec.device != "npu":
            return 0.0
        c = rec.cost
        if precision not in rates:
            return float(max(c.compute_us, c.memory_us) * 4.0)  # no such MAC mode: a CPU-class slowdown
        compute = c.compute_us * rates[base] / rates[precision]
        memory = c.memory_us * _BYTES.get(precision, 4) / _BYTES.get(base, 1)
        return float(max(compute, memory) - max(c.compute_us, c.memory_us))

    return cost
