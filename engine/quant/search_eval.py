"""What the mixed-precision search measures: output quality over samples, with its spread, and latency.

A ``Quality`` keeps each sample's error sums, so besides the pooled figure it can say how far a
new set of samples could fall from it: the pooled SQNR is recomputed over bootstrap resamples of
the samples (drawn with replacement, a fixed seed), and ``bound_db`` is the pooled figure minus
``z`` times their standard deviation times sqrt(2). The sqrt(2): samples the search never saw
have their own spread, as large as this set's, on top of this set's error in estimating the
mean. A configuration whose bound reaches the target reaches it on new samples nine times in
ten (z = 1.28) when the samples are alike.

The ``Evaluator`` computes the float references once per sample and caches every configuration
it measured. A configuration that raises a few nodes changes only the QDQ nodes around them and
everything downstream: with an anchor (every value of the int8 model on each sample, kept once),
only those nodes run; the rest is read from the anchor.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from engine.ir.graph import Graph, Node
from engine.quant.analysis import ErrorStats
from engine.quant.calibrate import Calibration
from engine.quant.config import QuantConfig
from engine.quant.qdq import QuantizedModel, build_qdq

_RANK = {"int8": 0, "uint8": 0, "int16": 1, "fp16": 2, "bf16": 2, "fp32": 3}
BOOTSTRAP_DRAWS = 400
Z_NINE_IN_TEN = 1.2816
_T_NINE_IN_TEN = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356, 1.350,
                  1.345, 1.341)  # Student's t, one-sided 0.9, for 1..15 degrees of freedom


def small_sample_z(n: int) -> float:
    """The z of ``bound_db`` for a verdict on ``n`` samples: Student's t quantile with n - 1
    degrees of freedom, times sqrt(n / (n - 1)) for the bootstrap's biased spread. On 4 check
    samples 1.89 instead of 1.28 (PP-OCRv6 det 320: 4 check photos said 30.9 dB, bound 25.4 with
    z = 1.28; 8 new photos gave 17.5)."""
    if n < 2:
        return Z_NINE_IN_TEN
    t = _T_NINE_IN_TEN[n - 2] if n - 1 <= len(_T_NINE_IN_TEN) else Z_NINE_IN_TEN
    return t * float(np.sqrt(n / (n - 1)))
_ANCHOR_BYTES = 1 << 30  # at most this much of int8 values kept for the affected-subgraph runs


def _sums(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    st = ErrorStats()
    st.update(ref, got)
    return np.array([st.ref2, st.err2, st.q2, st.dot])


@dataclass
class Quality:
    """Output errors of one configuration: per output, each sample's (ref^2, err^2, q^2, ref.q)."""

    per_sample: dict[str, np.ndarray]  # output -> (samples, 4)

    def _pooled(self, name: str) -> ErrorStats:
        r2, e2, q2, dot = self.per_sample[name].sum(axis=0)
        return ErrorStats(float(r2), float(e2), float(q2), float(dot))

    @property
    def outputs(self) -> dict[str, ErrorStats]:
        """Pooled statistics per output."""
        return {n: self._pooled(n) for n in self.per_sample}

    @property
    def sqnr_db(self) -> float:
        """The worst output's pooled SQNR."""
        return min(s.sqnr_db for s in self.outputs.values())

    @property
    def cosine(self) -> float:
        """The worst output's pooled cosine."""
        return min(s.cosine for s in self.outputs.values())

    def noise(self) -> np.ndarray:
        """err^2 per output."""
        return np.array([a[:, 1].sum() for a in self.per_sample.values()])

    def signal(self) -> np.ndarray:
        """ref^2 per output."""
        return np.array([a[:, 0].sum() for a in self.per_sample.values()])

    def spread(self) -> tuple[float, float]:
        """Bootstrap standard deviation of the worst output's pooled (SQNR dB, cosine)."""
        n = len(next(iter(self.per_sample.values())))
        if n < 2:
            return 0.0, 0.0
        idx = np.random.default_rng(0).integers(0, n, (BOOTSTRAP_DRAWS, n))
        sq, cos = [], []
        for a in self.per_sample.values():
            s = a[idx].sum(axis=1)  # (draws, 4)
            with np.errstate(divide="ignore", invalid="ignore"):
                sq.append(np.minimum(10 * np.log10(s[:, 0] / np.maximum(s[:, 1], 1e-300)), 200.0))
                cos.append(np.where(s[:, 0] * s[:, 2] > 0, s[:, 3] / np.sqrt(s[:, 0] * s[:, 2]), 1.0))
        return float(np.std(np.min(sq, axis=0))), float(np.std(np.min(cos, axis=0)))

    def bound_db(self, z: float = Z_NINE_IN_TEN) -> float:
        """The SQNR that samples never seen reach nine times in ten (see the module docstring)."""
        return self.sqnr_db - z * np.sqrt(2) * self.spread()[0]

    def bound_cosine(self, z: float = Z_NINE_IN_TEN) -> float:
        """The cosine counterpart of ``bound_db``."""
        return self.cosine - z * np.sqrt(2) * self.spread()[1]


def _same_const(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a is b or (a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b))


def _same_attrs(a: Mapping, b: Mapping) -> bool:
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not _same_const(np.asarray(x), np.asarray(y)):
                return False
        elif isinstance(x, Graph) or isinstance(y, Graph) or x != y:
            return False
    return True


def _same_node(n: Node, m: Node) -> bool:
    """``n`` computes what ``m`` does from inputs of the same names (constants compared by value)."""
    if (n.op_type, n.domain, n.activation, len(n.inputs)) != (m.op_type, m.domain, m.activation, len(m.inputs)):
        return False
    if [v.name if v is not None else None for v in n.outputs] != [v.name if v is not None else None
                                                                  for v in m.outputs]:
        return False
    for a, b in zip(n.inputs, m.inputs):
        if (a is None) != (b is None):
            return False
        if a is None or b is None:
            continue
        if a.name != b.name or (a.const is None) != (b.const is None):
            return False
        if a.const is not None and not _same_const(a.const, b.const):
            return False
    return _same_attrs(n.attrs, m.attrs)


def affected_part(qm: QuantizedModel, anchor: QuantizedModel) -> Graph | None:
    """``qm``'s graph cut down to the nodes whose values differ from ``anchor``'s (a node that
    differs, or reads a value one of them writes); the values they read from the rest become
    graph inputs, to be fed from the anchor's run. None when the graph has subgraphs (If/Loop
    bodies read outer values a cut would lose) or nothing differs."""
    g = qm.graph
    if any(True for n in g.nodes for _ in n.subgraphs()):
        return None
    before = {tuple(v.name for v in m.outputs if v is not None): m for m in anchor.graph.nodes}
    dirty: set[str] = set()
    clean: list[Node] = []
    for n in g.toposort():
        m = before.get(tuple(v.name for v in n.outputs if v is not None))
        reads_dirty = any(v is not None and v.name in dirty for v in n.inputs)
        if m is None or reads_dirty or not _same_node(n, m):
            dirty.update(v.name for v in n.outputs if v is not None)
        else:
            clean.append(n)
    if not dirty:
        return None
    for n in reversed(clean):
        g.remove_node(n)
    g.outputs = [v for v in g.outputs if v.producer() is not None]  # the others are the anchor's
    for n in list(g.nodes):
        for v in n.inputs:
            if v is not None and v.const is None and v.producer() is None and not v.is_graph_input:
                g.add_input(v)
    return g


class Evaluator:
    """Measures configurations on fixed samples (FP32 references computed once, results cached)."""

    def __init__(self, graph: Graph, calibration: Calibration, samples: list[Mapping[str, np.ndarray]],
                 reference: Graph | None = None, anchor: QuantConfig | None = None) -> None:
        from engine import executor_for
        from engine.sim.feeds import check_feeds

        self.graph, self.calibration = graph, calibration
        self.feeds = [check_feeds(graph, s) for s in samples]
        fp = executor_for(reference if reference is not None else graph)
        self.refs = [fp.run(f) for f in self.feeds]
        self.names = [v.name for v in graph.outputs]
        self.cache: dict[tuple, Quality] = {}
        self.seconds = 0.0
        self.runs = 0
        self.run_seconds = 0.0  # of ``seconds``: in the executor's runs of the samples (measure only)
        self.measured = 0
        self.anchor: QuantizedModel | None = None
        self.anchor_values: list[dict[str, np.ndarray]] = []
        if anchor is not None:
            self._set_anchor(anchor)

    def _set_anchor(self, config: QuantConfig) -> None:
        """Run ``config`` once keeping every value (a fresh executor: nothing donated in place),
        unless that would hold more than _ANCHOR_BYTES."""
        from engine.sim.executor import Executor
        from engine.sim.feeds import check_feeds

        t = time.perf_counter()
        qm = build_qdq(self.graph, self.calibration, config)
        ex = Executor(qm.graph)
        values, held = [], 0
        for feeds in self.feeds:
            got = ex.run(check_feeds(qm.graph, feeds), keep_all=True)
            held += sum(a.nbytes for a in got.values() if isinstance(a, np.ndarray))
            if held > _ANCHOR_BYTES:
                values = []
                break
            values.append(got)
        self.seconds += time.perf_counter() - t
        self.runs += 1
        if values:
            self.anchor, self.anchor_values = qm, values
            self.cache[tuple(sorted(config.precision.items()))] = self._quality(values)

    def _quality(self, gots: list[Mapping[str, np.ndarray]]) -> Quality:
        return Quality({n: np.stack([_sums(ref[n], got[n]) for ref, got in zip(self.refs, gots)])
                        for n in self.names})

    def measure(self, config: QuantConfig) -> Quality:
        """The output errors of ``config`` against FP32."""
        from engine.sim.executor import Executor
        from engine.sim.feeds import check_feeds

        key = tuple(sorted(config.precision.items()))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        t = time.perf_counter()
        qm = build_qdq(self.graph, self.calibration, config)
        part = affected_part(qm, self.anchor) if self.anchor is not None else None
        gots = []
        if part is not None:
            ex = Executor(part)
            names = [v.name for v in part.inputs]
            t_run = time.perf_counter()
            for vals in self.anchor_values:
                got = ex.run({n: vals[n] for n in names if n in vals})
                gots.append({n: got[n] if n in got else vals[n] for n in self.names})
        else:
            ex = Executor(qm.graph)
            t_run = time.perf_counter()
            gots = [ex.run(check_feeds(qm.graph, f)) for f in self.feeds]
        now = time.perf_counter()
        self.seconds += now - t
        self.runs += 1
        self.run_seconds += now - t_run
        self.measured += 1
        self.cache[key] = q = self._quality(gots)
        return q

    @property
    def mean_seconds(self) -> float:
        """Mean time of one measurement so far."""
        return self.seconds / max(self.runs, 1)

    def sample_seconds(self) -> tuple[float, float]:
        """What one measurement costs, from those so far: its fixed part (building the model and
        the executor) and its time per sample."""
        per_sample = self.run_seconds / max(self.measured, 1) / max(len(self.feeds), 1)
        return max(self.mean_seconds - per_sample * len(self.feeds), 0.0), per_sample


class Pricing:
    """Latency of a configuration on the target (None without a target), each one simulated once."""

    def __init__(self, graph: Graph, target, base: Mapping[str, str]) -> None:
        self.graph, self.target, self.base = graph, target, dict(base)
        self._cache: dict[tuple, float] = {}
        self.simulations = 0
        self.per_node = None
        if target is not None:
            from engine.quant.mixed import latency_cost_from_sim
            from engine.sim.timeline import SimOptions, simulate

            sim = simulate(graph, target, SimOptions(precisions=self.base))
            self._cache[()] = float(sim.latency_us)
            self.per_node = latency_cost_from_sim(sim, target)

    def latency(self, raised: Mapping[str, str]) -> float | None:
        """Simulated latency (us) with ``raised`` over the int8 precisions."""
        if self.target is None:
            return None
        key = tuple(sorted(raised.items()))
        if key not in self._cache:
            from engine.sim.timeline import SimOptions, simulate

            sim = simulate(self.graph, self.target, SimOptions(precisions={**self.base, **raised}))
            self._cache[key] = float(sim.latency_us)
            self.simulations += 1
        return self._cache[key]

    def estimate(self, nodes: list[str], precision: str, raised: Mapping[str, str]) -> float:
        """What raising ``nodes`` to ``precision`` adds (us, or a relative unit without a target):
        the MAC-rate/element-size estimate for NPU modes, a simulation for float on the CPU."""
        todo = [n for n in nodes if _RANK[raised.get(n, "int8")] < _RANK[precision]]
        if not todo:
            return 0.0
        if self.target is None:
            return float(len(todo) * (1, 1, 2, 4)[_RANK[precision]])
        if precision == "fp32" or precision not in self.target.npu.precisions:
            now = self.latency(raised) or 0.0
            return max(0.0, (self.latency(merge(raised, todo, precision)) or 0.0) - now)
        return float(sum(max(0.0, self.per_node(n, precision)) for n in todo))  # type: ignore[misc]


def merge(raised: Mapping[str, str], nodes: list[str] | tuple[str, ...], precision: str) -> dict[str, str]:
    """``raised`` with ``nodes`` at ``precision`` (a node keeps the wider of two precisions)."""
    out = dict(raised)
    for n in nodes:
        if _RANK[out.get(n, "int8")] < _RANK[precision]:
            out[n] = precision
    return out
