"""Mixed precision as a search: the cheapest set of raises that brings the outputs to a target on
samples it never decided on.

The calibration set is split: a quarter (the check samples) is held out of every decision and, by
default, out of the ranges the search's models use (ranges fitted to a sample cover it, so inside
the calibration a model looks better than on new data: PP-OCRv6 rec all-int16 61.0 dB on its
calibration crops, 37.2 dB on a quarter left out of it). The figure the search reports and the
warning it gives are the check samples'.

1. Units: engine.quant.sensitivity.find_groups (a tensor with its producer and readers, or a
   squeeze-excite block, an attention softmax, a residual add).
2. Sensitivity: each unit raised alone in the int8 model; the output noise power it removes
   (per output, err^2 summed over samples) is what it is worth. Only the nodes a raise changes
   run (engine.quant.search_eval: the rest is read from the int8 model's values). Units are
   measured worst-first by their tensors' isolated SQNR until the phase's share is spent.
3. Prices: each choice (int16, fp16 where the target has it, fp32 on the CPU) is priced by the
   target's simulator, each configuration simulated once.
4. Prefix: units ordered by noise removed per microsecond; the shortest prefix whose bootstrap
   bound on the search samples (the SQNR new samples reach nine times in ten) reaches the target,
   by bisection that probes first where the noise powers, added up, predict it.
5. Prune: each raise (most expensive first) is undone when the bound still holds without it.
6. Replay in order (each step measured on the search and the check samples: its dB and
   microseconds are what it adds to the model before it), then the check: when the check
   samples' bootstrap bound misses the target (the figure itself, or by less than their spread
   says new samples need), the pruned units and then the rest of the order join while they help
   there. Joining stops as soon as the check samples reach the target, so their figure is
   taken at its luckiest: the bound's margin covers that and their disagreement with new samples.
The search stops at the time budget with the best model found; ``finish_measurements`` keeps
time for the caller's final analysis (the CLI's --time-budget is the whole command's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from engine.errors import InputError
from engine.ir.graph import Graph
from engine.quant.calibrate import Calibration, calibrate
from engine.quant.config import QuantConfig
from engine.quant.data import CalibrationSet
from engine.quant.mixed import MixedPrecisionResult
from engine.quant.qdq import build_qdq, converted_to_opset
from engine.quant.search_eval import Evaluator, Pricing, Quality, merge, small_sample_z
from engine.quant.sensitivity import Group, find_groups, tensor_sensitivity
from engine.quant.split import spread

MIN_SAMPLES = 4
"""Fewer calibration samples cannot be split into a search part and a held-out part."""
CHOICES = ("int16", "fp16", "fp32")
_MIN_GAIN_DB = 0.01


@dataclass(frozen=True)
class SearchOptions:
    """What the search aims at and what it may spend."""

    target_sqnr_db: float | None = None
    target_cosine: float | None = None
    choices: tuple[str, ...] | None = None  # None: int16, fp16 where the target has it, fp32 (CPU)
    time_budget_s: float = 120.0
    search_samples: int = 24  # at most, the decisions are measured on (fewer when they are slow)
    check_samples: int = 8  # at most, held out of every decision: the reported figure
    sensitivity_samples: int = 2
    sensitivity_share: float = 0.4  # of the budget, at most, for measuring the units
    greedy_share: float = 0.6  # the prefix search stops here
    prune_share: float = 0.75  # the prune pass here; the rest is for the replay and the check
    check_outside_calibration: bool = True  # calibrate the search's models without the check samples
    calibrated_without_check: bool = False  # the calibration given already leaves the check samples out
    finish_measurements: float = 0.0  # the budget keeps this many check measurements' time for what follows


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


def held_out_split(n: int, check: int = 8, groups: list[str] | None = None) -> tuple[list[int], list[int]]:
    """Indices of every sample outside the check part, and of the check part (a quarter, at most
    ``check``, held out of every decision), spread over the set: over its pictures when
    ``groups`` names them, else strided (engine/quant/split.py)."""
    if n < MIN_SAMPLES:
        raise InputError(f"{n} calibration sample(s) cannot verify a mixed-precision search: it needs "
                         f"at least {MIN_SAMPLES} (it searches on some and verifies on the others)")
    held = spread(range(n), max(1, min(check, n // 4)), groups)
    return [i for i in range(n) if i not in held], held


def split_samples(n: int, search: int = 24, check: int = 8,
                  groups: list[str] | None = None) -> tuple[list[int], list[int]]:
    """Indices of the search part (at most ``search``) and of the check part (held_out_split)."""
    rest, held = held_out_split(n, check, groups)
    return spread(rest, search, groups), held


def subset(data: CalibrationSet, idx: list[int]) -> CalibrationSet:
    """The samples ``idx`` of ``data``, in that order."""
    return data.subset(idx)


def with_samples(graph: Graph, calibration: Calibration, data: CalibrationSet, idx: list[int],
                 config: QuantConfig) -> Calibration:
    """``calibration`` (of the other samples) extended with the samples ``idx`` of ``data``: those
    observed alone and merged, exact for min/max statistics; histograms re-binned by another range
    do not merge exactly, so then every sample is observed again."""
    from copy import deepcopy

    from engine.quant.observers import HistogramObserver

    if not idx:
        return calibration
    if calibration.histograms or any(isinstance(o, HistogramObserver) for o in calibration.stats.values()):
        return calibrate(graph, data, config, histograms=calibration.histograms)
    extra = calibrate(graph, subset(data, idx), config, tensors=list(calibration.stats))
    stats = {}
    for name, obs in calibration.stats.items():
        stats[name] = merged = deepcopy(obs)
        merged.merge(extra.stats[name])
    return Calibration(stats, calibration.samples + extra.samples, calibration.source, False)


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
    """Raise the fewest-microseconds set of groups that brings the outputs to the target on
    samples the search never decided on.

    ``graph`` is the float graph that gets quantized; ``reference`` the one whose outputs the
    quantized model must match when they differ (PTQ bias correction), else ``graph`` itself."""
    opt = options or SearchOptions()
    if opt.target_sqnr_db is None and opt.target_cosine is None:
        raise ValueError("give a target output SQNR (dB) or cosine")
    t0 = clock()
    budget = opt.time_budget_s
    t_work = [t0]  # the shares are of the time left once the setup (references, anchor) is done
    reserve = [0.0]  # kept for what follows the search (finish_measurements)

    def left(share: float) -> bool:
        return clock() - t_work[0] < share * (budget - reserve[0] - (t_work[0] - t0))

    choices = opt.choices or search_choices(target)
    s_idx, c_idx = split_samples(len(data), opt.search_samples, opt.check_samples, data.groups)
    if "int16" in choices:  # int16 QDQ needs opset 21: convert once, not at every measurement
        graph, _ = converted_to_opset(graph, 21)
    if opt.check_outside_calibration and not opt.calibrated_without_check and len(c_idx) >= 2:
        # ranges fitted to a sample cover it: inside the calibration a model looks better than on
        # new data (PP-OCRv6 rec all-int16: 61.0 dB on its calibration crops, 37.2 on a quarter
        # left out of it), so the check samples are kept out of the ranges the search's models use
        rest = [i for i in range(len(data)) if i not in set(c_idx)]
        calibration = calibrate(graph, subset(data, rest), config)
    base_qm = build_qdq(graph, calibration, config)
    quantized = {n: p for n, p in base_qm.node_precision.items() if p not in ("fp32", "fp16", "bf16")}
    groups = find_groups(graph, quantized)
    sens = Evaluator(graph, calibration, [data.sample(i) for i in s_idx[:max(1, opt.sensitivity_samples)]],
                     reference, anchor=config)  # the int8 values, so a raise runs only what it changes
    sens_base = sens.measure(config)
    ev_c = Evaluator(graph, calibration, [data.sample(i) for i in c_idx], reference)
    base_c = ev_c.measure(config)
    reserve[0] = opt.finish_measurements * ev_c.mean_seconds
    # as many samples per measurement as keep one under 1/40 of the budget (at least 4), timed on
    # an ordinary measurement (the anchor's run keeps every value: several times slower); its
    # fixed part (building the model and executor) is paid once per measurement, not per sample
    fixed, per_sample = ev_c.sample_seconds()
    s_idx = spread(s_idx, max(4, int((budget / 40 - fixed) / max(per_sample, 1e-6))), data.groups)
    ev_s = Evaluator(graph, calibration, [data.sample(i) for i in s_idx], reference)
    pricing = Pricing(graph, target, quantized)

    def ok(q: Quality) -> bool:  # on the search samples: with the margin new samples need
        return (opt.target_sqnr_db is None or q.bound_db() >= opt.target_sqnr_db) and \
               (opt.target_cosine is None or q.bound_cosine() >= opt.target_cosine)

    z_check = small_sample_z(len(c_idx))  # a verdict on a few samples: Student's t, not the normal z

    def held(q: Quality) -> bool:  # on the check samples, never decided on: with new samples' margin
        return bool((opt.target_sqnr_db is None or q.bound_db(z_check) >= opt.target_sqnr_db) and
                    (opt.target_cosine is None or q.bound_cosine(z_check) >= opt.target_cosine))

    def cfg(raised: Mapping[str, str]) -> QuantConfig:
        out = config
        for n, p in raised.items():
            out = out.with_precision(n, p)
        return out

    base_s = ev_s.measure(config)
    tensors = tensor_sensitivity(graph, base_qm, ev_s.feeds[:1])
    worst_tensor = {t.tensor: t.isolated.sqnr_db for t in tensors}
    nodes_by_name = {n.name: n for n in graph.all_nodes()}

    def prior(gr: Group) -> float:
        vals = [worst_tensor.get(v.name, 200.0) for n in gr.nodes for v in nodes_by_name[n].outputs if v is not None]
        vals += [worst_tensor.get(v.name, 200.0) for n in gr.nodes for v in nodes_by_name[n].inputs
                 if v is not None and v.const is not None]
        return min(vals, default=200.0)

    units = sorted((_Unit(g, prior(g)) for g in groups), key=lambda u: u.prior_db)
    result = MixedPrecisionResult(config, [], held(base_c), base_c.sqnr_db, base_c.cosine, opt.target_sqnr_db,
                                  opt.target_cosine, base_c.sqnr_db, pricing.latency({}))
    result.choices = list(choices)
    result.samples = {"search": len(s_idx), "verify": len(c_idx), "sensitivity": len(sens.feeds)}
    result.check_samples = list(c_idx)
    result.check_pictures = [data.groups[i] for i in c_idx] if data.groups is not None else None
    result.tensors = [t.to_json() for t in tensors]
    phases: dict[str, float] = {"setup": clock() - t0}
    t_work[0] = clock()
    # 2. sensitivity: each unit raised alone, worst-first, within its share of the budget
    first = choices[0]
    for k, u in enumerate(units):
        if ok(base_s) or not left(opt.sensitivity_share):
            break
        if progress is not None:
            progress("sensitivity", k, len(units))
        q = sens.measure(cfg(merge({}, u.group.nodes, first)))
        u.removed = sens_base.noise() - q.noise()  # negative: the raise alone makes the outputs worse
    phases["sensitivity"] = clock() - t0 - sum(phases.values())
    measured = [u for u in units if u.removed is not None]
    total = np.maximum(sens_base.noise(), 1e-30)
    result.groups = sorted(({**u.group.to_json(), "isolated_sqnr_db": round(u.prior_db, 3),
                             "db_lost": round(_db_lost(total, u.removed), 3),  # type: ignore[arg-type]
                             "noise_share": round(float(np.max(u.removed / total)), 4)}  # type: ignore[operator]
                            for u in measured), key=lambda r: -r["db_lost"])
    result.sensitivity_measured = [len(measured), len(units)]
    # 4. order by dB per microsecond; the shortest prefix of that order that reaches the target
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
    full_s = ev_s.measure(cfg(prefix(n))) if n and not ok(base_s) else base_s
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
    if ok(base_s):
        k = 0
    elif not ok(full_s):
        k = n  # nothing reaches it: keep every raise that helps (the replay drops the others)
        result.stopped = "no candidate left"
    else:
        lo, hi = 0, n  # invariant: prefix(hi) reaches the target on the search samples
        guess = _predicted_prefix(order, sens_base, opt.target_sqnr_db)
        while hi - lo > 1 and left(opt.greedy_share):
            mid = guess if guess is not None and lo < guess < hi else (lo + hi) // 2
            guess = None
            if ok(ev_s.measure(cfg(prefix(mid)))):
                hi = mid
            else:
                lo = mid
            if progress is not None:
                progress("search", n - (hi - lo), n)
        timed_out = hi - lo > 1
        k = hi
    phases["prefix"] = clock() - t0 - sum(phases.values())
    # 5. prune: undo raises the target no longer needs, the most expensive first
    dropped: set[int] = set()
    if k and ok(ev_s.measure(cfg(prefix(k)))):
        costs = {j: pricing.estimate(list(order[j].group.nodes), picks[id(order[j])], {}) for j in range(k)}
        for j in sorted(range(k), key=lambda j: -costs[j]):
            if not left(opt.prune_share) or costs[j] <= 0:
                break
            if ok(ev_s.measure(cfg(prefix(k, dropped | {j})))):
                dropped.add(j)
                result.pruned.append({"node": order[j].group.name, "to": picks[id(order[j])]})
    phases["prune"] = clock() - t0 - sum(phases.values())
    kept = [j for j in range(k) if j not in dropped]
    # 6. replay in order: a step that lowers the search samples' figure joins the next one (the
    # two are measured together), and the last is refused if it still does; each accepted step is
    # measured on the check samples too (the figures the report gives); steps are single groups
    # when time allows, else consecutive groups together. Then the check: when the check samples
    # miss the target, the next groups of the order join, while time is left.
    evals_left = max(1, int((budget - reserve[0] - (clock() - t0)) / max(ev_s.mean_seconds + ev_c.mean_seconds, 1e-3)) - 2)
    size = max(1, -(-len(kept) // evals_left))
    raised: dict[str, str] = {}
    cur_s, cur_c, prev_lat = base_s, base_c, pricing.latency({})
    queue = [[order[j] for j in kept[c0:c0 + size]] for c0 in range(0, len(kept), size)]
    extra = [order[j] for j in sorted(dropped)] + [order[j] for j in range(k, n)]  # pruned ones first
    while queue or (extra and not held(cur_c) and left(1.0)):
        extending = not queue
        if extending:  # the check samples miss the target: the search samples were too kind
            chunk = extra[:max(1, len(extra) // 4)]
            del extra[:len(chunk)]
        else:
            chunk = queue.pop(0)
        trial = dict(raised)
        for u in chunk:
            trial = merge(trial, u.group.nodes, picks[id(u)])
        if trial == raised:
            continue
        q_s = ev_s.measure(cfg(trial))
        if not extending and (q_s.sqnr_db < cur_s.sqnr_db
                              or (opt.target_cosine is not None and q_s.cosine < cur_s.cosine)):
            if queue:  # it may help together with the next raise: measured as one step
                queue[0] = chunk + queue[0]
                continue
            result.refused.append({"node": chunk[0].group.name,
                                   "nodes": sorted({x for u in chunk for x in u.group.nodes}),
                                   "to": picks[id(chunk[0])], "db_change": round(q_s.sqnr_db - cur_s.sqnr_db, 3)})
            continue
        q_c = ev_c.measure(cfg(trial))
        if extending and q_c.sqnr_db < cur_c.sqnr_db + _MIN_GAIN_DB:
            result.refused.append({"node": chunk[0].group.name,
                                   "nodes": sorted({x for u in chunk for x in u.group.nodes}),
                                   "to": picks[id(chunk[0])], "db_change": round(q_c.sqnr_db - cur_c.sqnr_db, 3),
                                   "measured_on": "check"})
            continue  # joined for the check samples, which it does not help
        lat = pricing.latency(trial)
        nodes = list(dict.fromkeys(x for u in chunk for x in u.group.nodes))
        result.steps.append({"node": chunk[0].group.name, "nodes": nodes,
                             "kind": chunk[0].group.kind if len(chunk) == 1 else "groups",
                             **({"groups": [u.group.name for u in chunk]} if len(chunk) > 1 else {}),
                             "from": "/".join(sorted({raised.get(x, quantized[x]) for x in nodes})),
                             "precision": "/".join(dict.fromkeys(picks[id(u)] for u in chunk)),
                             "output_sqnr_db": round(q_c.sqnr_db, 3), "output_cosine": round(q_c.cosine, 6),
                             "search_sqnr_db": round(q_s.sqnr_db, 3),
                             "latency_cost_us": None if lat is None or prev_lat is None else lat - prev_lat})
        raised, cur_s, cur_c, prev_lat = trial, q_s, q_c, lat
    phases["replay"] = clock() - t0 - sum(phases.values())
    if not result.stopped and not held(cur_c):
        result.stopped = "time budget" if timed_out or not left(1.0) else "no candidate left"
    result.config = cfg(raised)
    result.output_sqnr_db, result.output_cosine = cur_c.sqnr_db, cur_c.cosine
    result.search_sqnr_db = cur_s.sqnr_db
    result.search_bound_db = cur_s.bound_db()
    result.check_bound_db = float(cur_c.bound_db(z_check))
    result.reached = held(cur_c)
    if result.reached:
        result.stopped = "reached"
    result.blocking = _blocking(units, raised, sens_base)
    result.seconds = clock() - t0
    result.phases = [{"phase": k, "seconds": round(v, 2)} for k, v in phases.items()]
    result.measurements = {"sensitivity": sens.runs, "search": ev_s.runs, "check": ev_c.runs,
                           "simulations": pricing.simulations}
    return result


def _predicted_prefix(order: list[_Unit], base: Quality, target_db: float | None) -> int | None:
    """The shortest prefix of ``order`` whose predicted output SQNR reaches ``target_db`` (noise
    powers add: each measured unit removes what it removed alone), None without a prediction."""
    if target_db is None:
        return None
    noise, signal = base.noise().astype(np.float64), base.signal()
    for k, u in enumerate(order):
        if u.removed is None:
            return None
        noise = noise - np.maximum(u.removed, 0.0)
        if np.all(noise <= signal * 10 ** (-target_db / 10)):
            return k + 1
    return None


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
    """The groups still holding the most output noise (not raised), worst first; when no measured
    group is left, the unraised groups with the least isolated SQNR (never measured in time)."""
    total = np.maximum(base.noise(), 1e-30)
    rows = [(float(np.max(u.removed / total)), u) for u in units  # type: ignore[operator]
            if u.removed is not None and any(n not in raised for n in u.group.nodes)]
    rows.sort(key=lambda r: -r[0])
    out = [{"node": u.group.name, "kind": u.group.kind, "noise_share": round(share, 4)}
           for share, u in rows[:top] if share > 0]
    if not out:
        rest = sorted((u for u in units if u.removed is None and any(n not in raised for n in u.group.nodes)),
                      key=lambda u: u.prior_db)
        out = [{"node": u.group.name, "kind": u.group.kind, "isolated_sqnr_db": round(u.prior_db, 2)}
               for u in rest[:top]]
    return out
