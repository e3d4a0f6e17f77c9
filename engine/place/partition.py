"""Placement and partitioning: which device runs each node, grouped into partitions.

Steps, each visible in the result:

1. Initial placement by verdicts: a node goes to the NPU when every rule passes.
2. User pins (``node.meta["pin"]`` or the ``pins`` argument, "npu" or "cpu") override the
   verdict for that node only; everything else is still placed automatically (OpenVINO's
   HETERO turns its policy off as soon as one affinity is set). A pin to the NPU of a node
   the NPU cannot run is reported and ignored.
3. Schedule: a topological order that stays on one device as long as it can, so a
   partition is a maximal run of same-device nodes in that order (contiguous by
   construction, and the partitions form a chain without cycles).
4. Cost-aware island step: an NPU partition whose boundary transfers (and dispatch) cost
   more than the NPU saves over the CPU moves to the CPU as a whole.
5. The reverse, as a suggestion: a cheap unsupported CPU partition that splits NPU work,
   with the fix its failing rules name and the time it would save.
6. Transfers at the boundaries, each with bytes and latency.

Every decision is a Diagnostic as well as data on the Placement.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from engine.diagnostics import INFO, WARNING, Diagnostic
from engine.errors import InputError
from engine.hw.cost_model import CostModel, OpCost
from engine.hw.target import HardwareTarget
from engine.ir.graph import Graph, Value
from engine.place.support import GraphFacts, NodeFacts
from nodes import rules as rules_mod
from nodes.spec import Verdict

DEVICES = ("npu", "cpu")


@dataclass
class Partition:
    """A maximal run of same-device nodes in the schedule."""

    index: int
    device: str
    nodes: list[str]


@dataclass
class Transfer:
    """A tensor crossing between the CPU and the NPU."""

    value: str
    src: str
    dst: str
    from_device: str
    to_device: str
    bytes: int
    latency_us: float
    conversion_us: float = 0.0


@dataclass
class Suggestion:
    """A fix that would let CPU nodes join the NPU work around them, and what it saves."""

    nodes: list[str]
    op_types: list[str]
    rules: list[str]
    fixes: list[str]
    saving_us: float
    message: str


@dataclass
class Placement:
    """The outcome of placement: devices, reasons, partitions, transfers and diagnostics."""

    target: HardwareTarget
    facts: GraphFacts
    order: list[NodeFacts]
    device: dict[str, str]
    reason: dict[str, str]
    pinned: dict[str, str]
    partitions: list[Partition]
    partition_of: dict[str, int]
    transfers: list[Transfer]
    suggestions: list[Suggestion] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    moved_to_cpu: list[str] = field(default_factory=list)
    npu_estimate: dict[str, OpCost] = field(default_factory=dict)
    cpu_estimate: dict[str, OpCost] = field(default_factory=dict)

    def count(self, device: str) -> int:
        """Number of nodes placed on ``device``."""
        return sum(1 for d in self.device.values() if d == device)

    def verdict(self, node: str) -> Verdict:
        """The NPU support verdict of a node (supported or not, the reason, the failed rules)."""
        return self.facts.by_name[node].verdict


# -- scheduling ----------------------------------------------------------------------------------
def schedule(facts: GraphFacts, device: dict[str, str]) -> list[NodeFacts]:
    """A topological order that keeps running on the current device while it has ready work."""
    order = facts.order
    indeg = list(facts.n_deps)
    succ = facts.succ
    dev = [device[f.name] for f in order]
    ready: dict[str, list[int]] = {d: [] for d in DEVICES}
    for f in order:
        if indeg[f.index] == 0:
            ready[dev[f.index]].append(f.index)  # indices ascend: already a heap
    out: list[NodeFacts] = []
    current = None
    push, pop = heapq.heappush, heapq.heappop
    while ready["npu"] or ready["cpu"]:
        if current is None or not ready[current]:
            current = min((ready[d][0], d) for d in DEVICES if ready[d])[1]
        i = pop(ready[current])
        out.append(order[i])
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                push(ready[dev[s]], s)
    return out


def partitions_of(order: list[NodeFacts], device: dict[str, str]) -> list[Partition]:
    """Maximal same-device runs of a schedule."""
    parts: list[Partition] = []
    for f in order:
        d = device[f.name]
        if not parts or parts[-1].device != d:
            parts.append(Partition(len(parts), d, []))
        parts[-1].nodes.append(f.name)
    return parts


# -- boundary costs ----------------------------------------------------------------------------
class _Boundary:
    """Cost of the tensors crossing a set of nodes' boundary for a given device of that set."""

    def __init__(self, facts: GraphFacts, cm: CostModel) -> None:
        self.facts = facts
        self.cm = cm
        self._cross: dict[str, float] = {}
        self._conv: dict[str, float] = {}

    def crossing_us(self, v: Value) -> float:
        """Transfer plus conversion of one tensor between devices."""
        c = self._cross.get(v.name)
        if c is None:
            c = self.cm.transfer_us(self.facts.npu_bytes(v)) + self.conversion_us(v)
            self._cross[v.name] = c
        return c

    def conversion_us(self, v: Value) -> float:
        """Conversion only (graph inputs/outputs of the NPU)."""
        c = self._conv.get(v.name)
        if c is None:
            c = self.cm.conversion_us(self.facts.host_bytes(v), self.facts.npu_bytes(v)) \
                if self.cm.needs_conversion(self.facts, v) else 0.0
            self._conv[v.name] = c
        return c

    def cost(self, names: set[str], dev: str, device: dict[str, str]) -> float:
        """Boundary cost of the node set ``names`` placed on ``dev`` (others as in ``device``)."""
        facts = self.facts
        total = 0.0
        seen: set[str] = set()
        for name in names:
            f = facts.by_name[name]
            for v in f.inputs:
                if v.name in seen:
                    continue
                p = v.producer()
                if p is not None and p.name in names:
                    continue
                seen.add(v.name)
                if p is None or p.name not in device:  # graph input: lives on the host
                    total += self.conversion_us(v) if dev == "npu" else 0.0
                elif device[p.name] != dev:
                    total += self.crossing_us(v)
            for v in () if f.compile_time else f.outputs:
                outside = {device[c.name] for c in facts.consumers(v) if c.name not in names}
                if any(d != dev for d in outside):
                    total += self.crossing_us(v)
                if dev == "npu" and v.name in facts.output_names:
                    total += self.conversion_us(v)
        return total


# -- placement ---------------------------------------------------------------------------------
def _resolve_pins(facts: GraphFacts, pins: dict[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in facts.order:
        p = f.node.meta.get("pin")
        if p in DEVICES:
            out[f.name] = p
    for name, dev in (pins or {}).items():
        if name not in facts.by_name:
            raise InputError(f"pin: no node named {name!r} in the graph")
        dev = str(dev).lower()
        if dev not in DEVICES:
            raise InputError(f"pin {name}={dev}: device must be npu or cpu")
        out[name] = dev
    return out


def place(graph: Graph | GraphFacts, target: HardwareTarget, pins: dict[str, str] | None = None,
          move_islands: bool = True, suggest: bool = True, precisions: dict[str, str] | None = None) -> Placement:
    """Place every node of a graph on the target's NPU or CPU (see the module docstring)."""
    facts = graph if isinstance(graph, GraphFacts) else GraphFacts(graph, target, precisions)
    cm = CostModel(target)
    diags: list[Diagnostic] = []
    pinned = _resolve_pins(facts, pins)
    device: dict[str, str] = {}
    reason: dict[str, str] = {}
    for f in facts.order:
        pin = pinned.get(f.name)
        if pin == "cpu":
            device[f.name], reason[f.name] = "cpu", "pinned to the CPU by the user"
            diags.append(Diagnostic(INFO, f.name, "pinned", "pinned to the CPU by the user"))
        elif f.verdict.supported:
            device[f.name], reason[f.name] = "npu", ""
            if pin == "npu":
                diags.append(Diagnostic(INFO, f.name, "pinned", "pinned to the NPU by the user"))
        else:
            device[f.name], reason[f.name] = "cpu", f.verdict.reason
            if pin == "npu":
                reason[f.name] = f"{f.verdict.reason} (its pin to the NPU was ignored)"
                diags.append(Diagnostic(WARNING, f.name, "pin-ignored",
                                        f"pinned to the NPU, but the NPU cannot run it: {f.verdict.reason}"))
    _settle_constants(facts, device, reason, pinned)
    hot = facts.weight_bytes_total <= target.cpu.cache_kib * 1024
    npu_est, cpu_est = _estimates(facts, cm, hot)
    boundary = _Boundary(facts, cm)
    moved: list[str] = []
    if move_islands:
        moved = _move_islands(facts, device, reason, pinned, npu_est, cpu_est, boundary, target, diags)
        _settle_constants(facts, device, reason, pinned)
    order = schedule(facts, device)
    parts = partitions_of(order, device)
    part_of = {n: p.index for p in parts for n in p.nodes}
    transfers = _transfers(order, device, facts, cm)
    placement = Placement(target, facts, order, device, reason, pinned, parts, part_of, transfers,
                          moved_to_cpu=moved, npu_estimate=npu_est, cpu_estimate=cpu_est)
    if suggest:
        placement.suggestions = _suggestions(placement, boundary)
        diags.extend(Diagnostic(INFO, s.nodes[0], "npu-fix-suggestion", s.message) for s in placement.suggestions)
    for f in order:
        if device[f.name] == "cpu" and f.name not in pinned and not f.compile_time:
            diags.append(Diagnostic(WARNING, f.name, "npu-fallback", f"{f.node.op_type} runs on the CPU: {reason[f.name]}"))
    placement.diagnostics = diags
    return placement


def _estimates(facts: GraphFacts, cm: CostModel, weights_hot: bool) -> tuple[dict[str, OpCost], dict[str, OpCost]]:
    """Cost of every node on both devices with nothing kept on chip (shared by equal signatures)."""
    npu: dict[str, OpCost] = {}
    cpu: dict[str, OpCost] = {}
    seen: dict = {}
    for f in facts.order:
        hit = seen.get(f.key) if f.key is not None else None
        if hit is None:
            hit = (cm.npu_cost(f, facts), cm.cpu_cost(f, weights_cached=weights_hot))
            if f.key is not None:
                seen[f.key] = hit
        npu[f.name], cpu[f.name] = hit
    return npu, cpu


def _settle_constants(facts: GraphFacts, device: dict[str, str], reason: dict[str, str],
                      pinned: dict[str, str]) -> None:
    """Data-only nodes (Constant) sit with their first consumer: they never cause a transfer."""
    for f in reversed(facts.order):
        if not f.compile_time or f.name in pinned:
            continue
        cons = [c for v in f.outputs for c in facts.consumers(v)]
        dev = device[min(cons, key=lambda c: c.index).name] if cons else "npu"
        device[f.name] = dev
        reason[f.name] = "constant data, stored beside its CPU consumer" if dev == "cpu" else ""


def _move_islands(facts: GraphFacts, device: dict[str, str], reason: dict[str, str], pinned: dict[str, str],
                  npu_est: dict[str, OpCost], cpu_est: dict[str, OpCost], boundary: _Boundary,
                  target: HardwareTarget, diags: list[Diagnostic]) -> list[str]:
    """Move NPU islands whose boundary costs exceed their gain to the CPU (worklist, linear).

    Islands are evaluated smallest first; moving one changes only the boundary costs of the
    islands it shares an edge with, so only those are evaluated again.
    """
    moved: list[str] = []
    dispatch = target.npu.dispatch_overhead_us
    parts = partitions_of(schedule(facts, device), device)
    islands = [p for p in parts if p.device == "npu" and not any(pinned.get(n) == "npu" for n in p.nodes)]
    island_of = {n: k for k, p in enumerate(islands) for n in p.nodes}
    npu_time = [sum(npu_est[n].latency_us for n in p.nodes) + dispatch for p in islands]
    cpu_time = [sum(cpu_est[n].latency_us for n in p.nodes) for p in islands]
    heap = [(npu_time[k], k) for k in range(len(islands))]
    heapq.heapify(heap)
    queued = set(range(len(islands)))
    done: set[int] = set()
    while heap:
        _, k = heapq.heappop(heap)
        queued.discard(k)
        if k in done:
            continue
        p = islands[k]
        names = set(p.nodes)
        before = boundary.cost(names, "npu", device)
        after = boundary.cost(names, "cpu", device)
        if cpu_time[k] + after >= npu_time[k] + before - 1e-9:
            continue
        done.add(k)
        gain = cpu_time[k] - npu_time[k]
        extra = before - after
        what = (f"its dispatch ({dispatch + extra:.1f} us)" if extra < 0.5 else
                f"transfers, conversions and dispatch ({extra + dispatch:.1f} us)")
        why = (f"moved to the CPU with its NPU island of {len(names)} op(s): keeping it on the NPU costs "
               f"{what}, more than the {gain + dispatch:.1f} us the NPU saves")
        for n in p.nodes:
            device[n] = "cpu"
            reason[n] = why
        moved.extend(p.nodes)
        diags.append(Diagnostic(INFO, p.nodes[0], "island-to-cpu",
                                f"NPU island {', '.join(p.nodes[:4])}{' ...' if len(p.nodes) > 4 else ''} "
                                f"moved to the CPU: saves {npu_time[k] + before - cpu_time[k] - after:.1f} us "
                                "per inference"))
        for j in _neighbour_islands(facts, p.nodes, island_of):
            if j not in done and j not in queued:
                queued.add(j)
                heapq.heappush(heap, (npu_time[j], j))
    return moved


def _neighbour_islands(facts: GraphFacts, nodes: list[str], island_of: dict[str, int]) -> set[int]:
    out: set[int] = set()
    for n in nodes:
        f = facts.by_name[n]
        for v in f.inputs:
            p = v.producer()
            if p is not None and p.name in island_of:
                out.add(island_of[p.name])
        for v in f.outputs:
            out.update(island_of[c.name] for c in facts.consumers(v) if c.name in island_of)
    own = island_of.get(nodes[0])
    out.discard(own)  # type: ignore[arg-type]
    return out


def _transfers(order: list[NodeFacts], device: dict[str, str], facts: GraphFacts, cm: CostModel) -> list[Transfer]:
    out: list[Transfer] = []
    for f in order:
        if f.compile_time:
            continue
        dev = device[f.name]
        for v in f.outputs:
            done: set[str] = set()
            for c in facts.consumers(v):
                cd = device[c.name]
                if cd == dev or cd in done:
                    continue
                done.add(cd)
                first = min((x for x in facts.consumers(v) if device[x.name] == cd), key=lambda x: x.index)
                nbytes = facts.npu_bytes(v)
                conv = cm.conversion_us(facts.host_bytes(v), nbytes) if cm.needs_conversion(facts, v) else 0.0
                out.append(Transfer(v.name, f.name, first.name, dev, cd, nbytes, cm.transfer_us(nbytes), conv))
    return out


def _fix_text(f: NodeFacts, target: HardwareTarget) -> tuple[list[str], list[str]]:
    names = [r for r in f.verdict.rule.split(",") if r]
    c = target.constraints_for(f.node.op_type)
    fixes = []
    for r in names:
        fn = getattr(rules_mod, r, None)
        if fn is not None and callable(fn):
            fixes.append(rules_mod.fix_hint(fn, c))
        elif r == "op_defined":
            fixes.append(f"define {f.node.op_type} in NPU Studio (an OpSpec) or replace it")
    return names, fixes


def _suggestions(pl: Placement, boundary: _Boundary, max_nodes: int = 4) -> list[Suggestion]:
    out: list[Suggestion] = []
    dispatch = pl.target.npu.dispatch_overhead_us
    parts = pl.partitions
    for p in parts:
        if p.device != "cpu" or len(p.nodes) > max_nodes:
            continue
        if any(n in pl.pinned or n in pl.moved_to_cpu for n in p.nodes):
            continue
        prev_npu = p.index > 0 and parts[p.index - 1].device == "npu"
        next_npu = p.index + 1 < len(parts) and parts[p.index + 1].device == "npu"
        if not (prev_npu or next_npu):
            continue
        names = set(p.nodes)
        before = boundary.cost(names, "cpu", pl.device) + sum(pl.cpu_estimate[n].latency_us for n in names)
        after = boundary.cost(names, "npu", pl.device) + sum(pl.npu_estimate[n].latency_us for n in names)
        after -= dispatch if prev_npu and next_npu else 0.0  # two NPU partitions merge into one
        saving = before - after
        if saving <= 1.0:
            continue
        rules: list[str] = []
        fixes: list[str] = []
        for n in p.nodes:
            r, fx = _fix_text(pl.facts.by_name[n], pl.target)
            rules.extend(r)
            fixes.extend(x for x in fx if x not in fixes)
        ops = [pl.facts.by_name[n].node.op_type for n in p.nodes]
        what = ", ".join(f"{n} ({o})" for n, o in zip(p.nodes, ops))
        msg = (f"{what} splits the NPU work and runs on the CPU: {pl.reason[p.nodes[0]]} "
               f"Fix: {'; '.join(fixes) or 'make the NPU accept it'}. That would save about {saving:.1f} us "
               "per inference.")
        out.append(Suggestion(list(p.nodes), ops, rules, fixes, saving, msg))
    out.sort(key=lambda s: -s.saving_us)
    return out
