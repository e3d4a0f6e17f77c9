"""Mixed precision as a search: the cheapest set of raises that brings the outputs to a target.

The calibration set is split: the search measures on one part and every step is verified on the
rest (held-out), so a raise is kept only for what it does on samples it was not chosen on.

1. Units: engine.quant.sensitivity.find_groups (a tensor with its producer and readers, or a
   squeeze-excite block, an attention softmax, a residual add).
2. Sensitivity: each unit raised alone in the int8 model; the output noise power it removes
   (per output, err^2 summed over samples) is what it is worth. Units are measured worst-first by
   their tensors' isolated SQNR until the phase's share of the time budget is spent.
3. Prices: each choice (int16, fp16 where the target has it, fp32 on the CPU) is priced by the
   target's simulator: the NPU ops' MAC-rate and element-size ratios for the integer/FP16 modes,
   a full simulation (CPU time and the transfers around it) for float.
4. Greedy: the unit with the most predicted dB per microsecond next (noise powers add, so the
   prediction is 10 log10(ref^2 / (err^2 - removed))); the step is measured on the search part
   and then on the held-out part, and refused when it does not improve either. A unit whose
   cheapest choice fails tries its next one.
5. Prune: once the target holds, each raise (most expensive first) is undone when the target
   still holds without it; the kept steps are then measured again in order, so each one's dB and
   microseconds are what it adds to the model before it.
The search stops at the time budget with the best model found (every accepted step improved the
held-out outputs, so the last is the best).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.errors import InputError
from engine.ir.graph import Graph
from engine.quant.analysis import ErrorStats
from engine.quant.calibrate import Calibration
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.mixed import MixedPrecisionResult
from engine.quant.qdq import build_qdq, converted_to_opset
from engine.quant.sensitivity import Group, find_groups, tensor_sensitivity

MIN_SAMPLES = 4
"""Fewer calibration samples cannot be split into a search part and a held-out part."""
CHOICES = ("int16", "fp16", "fp32")
_RANK = {"int8": 0, "uint8": 0, "int16": 1, "fp16": 2, "bf16": 2, "fp32": 3}
_MIN_GAIN_DB = 0.01


@dataclass(frozen=True)
class SearchOptions:
    """What the search aims at and what it may spend."""

    target_sqnr_db: float | None = None
    target_cosine: float | None = None
    choices: tuple[str, ...] | None = None  # None: int16, fp16 where the target has it, fp32 (CPU)
    time_budget_s: float = 120.0
    search_samples: int = 8
    verify_samples: int = 8
    sensitivity_samples: int = 2
    sensitivity_share: float = 0.45  # of the budget, at most, for measuring the units
    greedy_share: float = 0.6  # the prefix search stops here
    prune_share: float = 0.8  # the prune pass here; the rest is for the verified replay


def search_choices(target, requested: str | None = None) -> tuple[str, ...]:
    """The precisions a raise may go to on ``target``: ``requested`` alone, or every choice the
    target supports (fp32 runs on the CPU, always possible). InputError when the target has no
    MAC mode for the requested precision."""
    modes = set(target.npu.precisions) if target is not None else None
    if requested is not None and requested != "auto":
        if modes is not None and requested != "fp32" and requested not in modes:
            raise InputError(f"--raise-to {requested}: target {target.name!r} has no {requested} mode "
                             f"(npu.precisions: {', '.join(target.npu.precisions)}); use "
                             f"{' or '.join(c for c in CHOICES if c == 'fp32' or c in modes)}")
        return (requested,)
    return tuple(c for c in CHOICES if modes is None or c == "fp32" or c in modes)


def split_samples(n: int, search: int = 8, verify: int = 8) -> tuple[list[int], list[int]]:
    """Indices of the search part and of the held-out part, spread over the whole set."""
    if n < MIN_SAMPLES:
        raise InputError(f"{n} calibration sample(s) cannot verify a mixed-precision search: it needs "
                         f"at least {MIN_SAMPLES} (it searches on some and verifies on the others)")
    n_verify = max(2, min(verify, n // 3))
    held = sorted({round(float(x)) for x in np.linspace(1, n - 1, n_verify)})
    rest = [i for i in range(n) if i not in held]
    picks = np.linspace(0, len(rest) - 1, min(search, len(rest)))
    return [rest[round(float(x))] for x in picks], held


@dataclass
class Quality:
    """Output errors of one configuration over a set of samples."""

    outputs: dict[str, ErrorStats]

    @property
    def sqnr_db(self) -> float:
        """The worst output's SQNR."""
        return min(s.sqnr_db for s in self.outputs.values())

    @property
    def cosine(self) -> float:
        """The worst output's cosine."""
        return min(s.cosine for s in self.outputs.values())

    def noise(self) -> np.ndarray:
        """err^2 per output."""
        return np.array([s.err2 for s in self.outputs.values()])

    def signal(self) -> np.ndarray:
        """ref^2 per output."""
        return np.array([s.ref2 for s in self.outputs.values()])


class Evaluator:
    """Measures configurations on fixed samples (FP32 references computed once, results cached)."""

    def __init__(self, graph: Graph, calibration: Calibration, samples: list[Mapping[str, np.ndarray]],
                 reference: Graph | None = None) -> None:
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

    def measure(self, config: QuantConfig) -> Quality:
        """The output errors of ``config`` against FP32."""
        from engine import executor_for
        from engine.sim.feeds import check_feeds

        key = tuple(sorted(config.precision.items()))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        t = time.perf_counter()
        qm = build_qdq(self.graph, self.calibration, config)
        ex = executor_for(qm.graph)
        stats = {n: ErrorStats() for n in self.names}
        for feeds, ref in zip(self.feeds, self.refs):
            got = ex.run(check_feeds(qm.graph, feeds))
            for n in self.names:
                stats[n].update(ref[n], got[n])
        self.seconds += time.perf_counter() - t
        self.runs += 1
        self.cache[key] = q = Quality(stats)
        return q

    @property
    def mean_seconds(self) -> float:
        """Mean time of one measurement so far."""
        return self.seconds / max(self.runs, 1)


class Pricing:
    """Latency of a configuration on the target (None without a target)."""

    def __init__(self, graph: Graph, target, base: Mapping[str, str]) -> None:
        self.graph, self.target, self.base = graph, target, dict(base)
        self._cache: dict[tuple, float] = {}
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


@dataclass
class _Unit:
    group: Group
    prior_db: float  # worst isolated SQNR of its tensors (measuring order)
    removed: np.ndarray | None = None  # output noise removed when raised alone (per output)
    tried: list[str] = field(default_factory=list)
    done: bool = False


def search_mixed_precision(graph: Graph, data: CalibrationSet, config: QuantConfig, calibration: Calibration,
                           target=None, options: SearchOptions | None = None,
                           progress: Callable[[str, int, int], None] | None = None,
                           clock: Callable[[], float] = time.monotonic,
                           reference: Graph | None = None) -> MixedPrecisionResult:
    """Raise the fewest-microseconds set of groups that brings the held-out outputs to the target.

    ``graph`` is the float graph that gets quantized; ``reference`` the one whose outputs the
    quantized model must match when they differ (PTQ bias correction), else ``graph`` itself."""
    opt = options or SearchOptions()
    if opt.target_sqnr_db is None and opt.target_cosine is None:
        raise ValueError("give a target output SQNR (dB) or cosine")
    t0 = clock()
    choices = opt.choices or search_choices(target)
    s_idx, v_idx = split_samples(len(data), opt.search_samples, opt.verify_samples)
    if "int16" in choices:  # int16 QDQ needs opset 21: convert once, not at every measurement
        graph, _ = converted_to_opset(graph, 21)
    base_qm = build_qdq(graph, calibration, config)
    quantized = {n: p for n, p in base_qm.node_precision.items() if p not in ("fp32", "fp16", "bf16")}
    groups = find_groups(graph, quantized)
    sens = Evaluator(graph, calibration, [data.sample(i) for i in s_idx[:max(1, opt.sensitivity_samples)]],
                     reference)
    sens_base = sens.measure(config)
    # as many samples per measurement as keep one under 1/40 of the budget (at least 4 each)
    per_sample = sens.mean_seconds / len(sens.feeds)
    most = max(4, int(opt.time_budget_s / 40 / max(per_sample, 1e-6)))
    s_idx = [s_idx[round(float(x))] for x in np.linspace(0, len(s_idx) - 1, min(len(s_idx), most))]
    v_idx = [v_idx[round(float(x))] for x in np.linspace(0, len(v_idx) - 1, min(len(v_idx), most))]
    ev_s = Evaluator(graph, calibration, [data.sample(i) for i in s_idx], reference)
    ev_v = Evaluator(graph, calibration, [data.sample(i) for i in v_idx], reference)
    pricing = Pricing(graph, target, quantized)

    def ok(q: Quality) -> bool:
        return (opt.target_sqnr_db is None or q.sqnr_db >= opt.target_sqnr_db) and \
               (opt.target_cosine is None or q.cosine >= opt.target_cosine)

    def cfg(raised: Mapping[str, str]) -> QuantConfig:
        out = config
        for n, p in raised.items():
            out = out.with_precision(n, p)
        return out

    base_s, base_v = ev_s.measure(config), ev_v.measure(config)
    tensors = tensor_sensitivity(graph, base_qm, ev_s.feeds[:1])
    worst_tensor = {t.tensor: t.isolated.sqnr_db for t in tensors}
    nodes_by_name = {n.name: n for n in graph.all_nodes()}

    def prior(gr: Group) -> float:
        vals = [worst_tensor.get(v.name, 200.0) for n in gr.nodes for v in nodes_by_name[n].outputs if v is not None]
        vals += [worst_tensor.get(v.name, 200.0) for n in gr.nodes for v in nodes_by_name[n].inputs
                 if v is not None and v.const is not None]
        return min(vals, default=200.0)

    units = sorted((_Unit(g, prior(g)) for g in groups), key=lambda u: u.prior_db)
    result = MixedPrecisionResult(config, [], ok(base_v), base_v.sqnr_db, base_v.cosine, opt.target_sqnr_db,
                                  opt.target_cosine, base_v.sqnr_db, pricing.latency({}))
    result.choices = list(choices)
    result.samples = {"search": len(s_idx), "verify": len(v_idx), "sensitivity": len(sens.feeds)}
    result.tensors = [t.to_json() for t in tensors]
    # 2. sensitivity: each unit raised alone, worst-first, within its share of the budget
    first = choices[0]
    for k, u in enumerate(units):
        if result.reached or clock() - t0 > opt.sensitivity_share * opt.time_budget_s:
            break
        if progress is not None:
            progress("sensitivity", k, len(units))
        q = sens.measure(cfg(merge({}, u.group.nodes, first)))
        u.removed = sens_base.noise() - q.noise()  # negative: the raise alone makes the outputs worse
    measured = [u for u in units if u.removed is not None]
    total = np.maximum(sens_base.noise(), 1e-30)
    result.groups = sorted(({**u.group.to_json(), "isolated_sqnr_db": round(u.prior_db, 3),
                             "db_lost": round(_db_lost(total, u.removed), 3),  # type: ignore[arg-type]
                             "noise_share": round(float(np.max(u.removed / total)), 4)}  # type: ignore[operator]
                            for u in measured), key=lambda r: -r["db_lost"])
    result.sensitivity_measured = [len(measured), len(units)]
    # 4. order by dB per microsecond; the shortest prefix of that order that reaches the target
    budget = opt.time_budget_s

    def left(share: float) -> bool:
        return clock() - t0 < share * budget

    order = _order(measured, choices[0], pricing)
    if len(measured) < len(units):  # not measured in time: after the measured ones, by isolated SQNR
        order += [u for u in units if u.removed is None]
    picks = {id(u): choices[0] for u in order}

    def prefix(k: int, without: set[int] = frozenset()) -> dict[str, str]:  # type: ignore[assignment]
        out: dict[str, str] = {}
        for j, u in enumerate(order[:k]):
            if j not in without:
                out = merge(out, u.group.nodes, picks[id(u)])
        return out

    n = len(order)
    full_s = ev_s.measure(cfg(prefix(n))) if n and not ok(base_v) else base_s
    for c in choices[1:]:  # everything at the cheapest choice is not enough: widen the worst units
        if ok(full_s) or not left(opt.greedy_share):
            break
        for frac in (0.1, 0.25, 0.5, 1.0):
            worst = sorted(order, key=lambda u: -_db_lost(total, u.removed) if u.removed is not None else 0.0)
            for u in worst[:max(1, round(frac * n))]:
                picks[id(u)] = c
            full_s = ev_s.measure(cfg(prefix(n)))
            if ok(full_s) or not left(opt.greedy_share):
                break
    k, timed_out = 0, len(measured) < len(units)
    if ok(base_v):
        k = 0
    elif not ok(full_s):
        k = n  # nothing reaches it: keep every raise that helps (the replay drops the others)
        result.stopped = "no candidate left"
    else:
        lo, hi = 0, n  # invariant: prefix(hi) reaches the target on the search samples
        while hi - lo > 1 and left(opt.greedy_share):
            mid = (lo + hi) // 2
            if ok(ev_s.measure(cfg(prefix(mid)))):
                hi = mid
            else:
                lo = mid
            if progress is not None:
                progress("search", n - (hi - lo), n)
        timed_out = hi - lo > 1
        k = hi
        while k < n and not ok(ev_v.measure(cfg(prefix(k)))) and left(opt.greedy_share):
            k = min(n, k + max(1, (n - k) // 4))  # held-out disagrees: a longer prefix
    # 5. prune: undo raises the target no longer needs, the most expensive first
    dropped: set[int] = set()
    if k and ok(ev_v.measure(cfg(prefix(k)))):
        costs = {j: pricing.estimate(list(order[j].group.nodes), picks[id(order[j])], {}) for j in range(k)}
        for j in sorted(range(k), key=lambda j: -costs[j]):
            if not left(opt.prune_share) or costs[j] <= 0:
                break
            trial = cfg(prefix(k, dropped | {j}))
            if ok(ev_s.measure(trial)) and ok(ev_v.measure(trial)):
                dropped.add(j)
                result.pruned.append({"node": order[j].group.name, "to": picks[id(order[j])]})
    kept = [j for j in range(k) if j not in dropped]
    # 6. replay in order on the held-out samples: a step that lowers them joins the next one (the
    # two are measured together), and the last is refused if it still does; steps are single
    # groups when time allows, else consecutive groups together
    evals_left = max(1, int((budget - (clock() - t0)) / max(ev_v.mean_seconds, 1e-3)) - 1)
    size = max(1, -(-len(kept) // evals_left))
    raised: dict[str, str] = {}
    cur_v, prev_lat = base_v, pricing.latency({})
    queue = [[order[j] for j in kept[c0:c0 + size]] for c0 in range(0, len(kept), size)]
    while queue:
        chunk = queue.pop(0)
        trial = dict(raised)
        for u in chunk:
            trial = merge(trial, u.group.nodes, picks[id(u)])
        if trial == raised:
            continue
        q_v = ev_v.measure(cfg(trial))
        if q_v.sqnr_db < cur_v.sqnr_db or (opt.target_cosine is not None and q_v.cosine < cur_v.cosine):
            if queue:  # it may help together with the next raise: measured as one step
                queue[0] = chunk + queue[0]
                continue
            result.refused.append({"node": chunk[0].group.name,
                                   "nodes": sorted({x for u in chunk for x in u.group.nodes}),
                                   "to": picks[id(chunk[0])], "db_change": round(q_v.sqnr_db - cur_v.sqnr_db, 3)})
            continue
        lat = pricing.latency(trial)
        nodes = list(dict.fromkeys(x for u in chunk for x in u.group.nodes))
        result.steps.append({"node": chunk[0].group.name, "nodes": nodes,
                             "kind": chunk[0].group.kind if len(chunk) == 1 else "groups",
                             **({"groups": [u.group.name for u in chunk]} if len(chunk) > 1 else {}),
                             "from": "/".join(sorted({raised.get(x, quantized[x]) for x in nodes})),
                             "precision": "/".join(dict.fromkeys(picks[id(u)] for u in chunk)),
                             "output_sqnr_db": round(q_v.sqnr_db, 3), "output_cosine": round(q_v.cosine, 6),
                             "latency_cost_us": None if lat is None or prev_lat is None else lat - prev_lat})
        raised, cur_v, prev_lat = trial, q_v, lat
    final_v = cur_v
    if not result.stopped and not ok(final_v):
        result.stopped = "time budget" if timed_out or not left(1.0) else "no candidate left"
    result.config = cfg(raised)
    result.output_sqnr_db, result.output_cosine = final_v.sqnr_db, final_v.cosine
    result.search_sqnr_db = ev_s.measure(cfg(raised)).sqnr_db
    result.reached = ok(final_v)
    if result.reached:
        result.stopped = "reached"
    result.blocking = _blocking(measured, raised, sens_base)
    result.seconds = clock() - t0
    return result


def _db_lost(total: np.ndarray, removed: np.ndarray) -> float:
    """dB the outputs gain when this unit's noise goes (the worst output's)."""
    rest = np.maximum(total - removed, total * 1e-6)
    return float(np.max(10 * np.log10(total / rest)))


def _order(units: list[_Unit], choice: str, pricing: Pricing) -> list[_Unit]:
    """Measured units by the output noise they remove alone per microsecond (most first); those
    whose raise alone made the outputs worse last."""
    def key(u: _Unit) -> tuple[int, float]:
        gain = float(np.max(u.removed)) if u.removed is not None else 0.0
        cost = pricing.estimate(list(u.group.nodes), choice, {})
        return (0 if gain > 0 else 1, -gain / max(cost, 1e-3))

    return sorted(units, key=key)


def _blocking(units: list[_Unit], raised: Mapping[str, str], base: Quality, top: int = 3) -> list[dict]:
    """The groups still holding the most output noise (not raised), worst first."""
    total = np.maximum(base.noise(), 1e-30)
    rows = [(float(np.max(u.removed / total)), u) for u in units  # type: ignore[operator]
            if u.removed is not None and any(n not in raised for n in u.group.nodes)]
    rows.sort(key=lambda r: -r[0])
    return [{"node": u.group.name, "kind": u.group.kind, "noise_share": round(share, 4)}
            for share, u in rows[:top] if share > 0]
